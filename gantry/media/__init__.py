"""Media sent by the user: download within a cap, then conversion into what the model reads.

One path for every channel: Telegram's poller and the REPL's `/attach` both describe what
was sent as `Media` items and hand them, with a `Fetch` that puts one item's bytes on disk,
to `MediaReader.read` (gantry.media.build). Images become content parts; text, PDFs and
transcribed voice become text; anything else is kept under DATA_DIR and described.
"""

from gantry.media.build import Built, Fetch, MediaReader
from gantry.media.files import MediaError, TooLarge
from gantry.media.kinds import Media

__all__ = ["Built", "Fetch", "Media", "MediaError", "MediaReader", "TooLarge"]
