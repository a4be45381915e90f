"""Media sent by the user: download within a cap, then conversion into what the model reads.

One path for every channel: Telegram's poller and the REPL's `/attach` both describe what
was sent as `Media` items and hand them, with a `Fetch` that puts one item's bytes on disk,
to `MediaReader.read` (gantry.media.build). Images become content parts; text, PDFs and
transcribed voice become text; anything else is kept under DATA_DIR and described.

This file imports nothing, so `gantry _pdf-text` (the PDF reader's child process,
gantry.media.pdf) loads pypdf and not the rest: import from the modules themselves.
"""
