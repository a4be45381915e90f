"""The text of a PDF through pypdf, and `gantry _pdf-text`: the child process that runs it.

pypdf's work is unbounded (a 10 KB file of pages sharing one heavy content stream costs
minutes of CPU) and a thread cannot be stopped, so gantry never runs it in its own process:
gantry.media.pdfproc starts this child, bounded here by CPU and memory limits and there by
a wall-clock deadline, and kills it on either or on a /stop. Imports only pypdf and stdlib.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CHILD_COMMAND = "_pdf-text"  # hidden: run by gantry.media.pdfproc, never by a person
MEMORY_BYTES = 512 << 20  # the child's address space: a stream inflating past it fails there
CPU_GRACE = 1  # the child's CPU limit is the deadline plus this, a backstop if gantry is gone


class PdfUnreadable(ValueError):
    """A PDF whose text cannot be had; the message says why, for the file's description.
    `detail` (the library's error) is for the log only."""

    def __init__(self, why: str, detail: str = "") -> None:
        super().__init__(why)
        self.detail = detail


def pdf_text(path: Path, max_chars: int) -> tuple[str, bool, int]:
    """(text, cut, pages) of a PDF through pypdf, page by page until the cap. Raises
    PdfUnreadable for a PDF pypdf cannot open, that is encrypted with a password or that
    needs more memory than the process may have."""
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    out: list[str] = []
    try:
        with open(path, "rb") as src:  # read as needed, not loaded whole (pypdf does, given a path)
            reader = PdfReader(src)
            if reader.is_encrypted and not reader.decrypt(""):
                raise PdfUnreadable("the PDF is protected by a password")
            pages = len(reader.pages)
            size = 0
            for page in reader.pages:
                text = page.extract_text() or ""
                out.append(text)
                size += len(text) + 2
                if size > max_chars:
                    break
    except PdfUnreadable:
        raise
    except MemoryError:
        raise PdfUnreadable("reading it needs more memory than a document may use") from None
    except PdfReadError as exc:
        raise PdfUnreadable(f"pypdf could not read it ({type(exc).__name__})",
                            f"{type(exc).__name__}: {exc}"[:300]) from None
    except Exception as exc:  # a damaged file fails in many ways; AES without its library
        raise PdfUnreadable(f"pypdf could not read it ({type(exc).__name__})",
                            f"{type(exc).__name__}: {exc}"[:300]) from None
    joined = "\n\n".join(t.strip() for t in out if t.strip())
    cut = len(joined) > max_chars
    return joined[:max_chars], cut, pages


def limit_self(cpu_seconds: int, memory_bytes: int) -> None:
    """The child's own budget, set before pypdf is imported: CPU past the limit ends it
    (SIGXCPU, then SIGKILL), memory past the limit is a MemoryError, no core, no files."""
    import resource

    for kind, soft, hard in ((resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + CPU_GRACE),
                             (resource.RLIMIT_AS, memory_bytes, memory_bytes),
                             (resource.RLIMIT_CORE, 0, 0), (resource.RLIMIT_FSIZE, 0, 0)):
        _, ceiling = resource.getrlimit(kind)
        if ceiling != resource.RLIM_INFINITY:  # a limit can be lowered, never raised
            soft, hard = min(soft, ceiling), min(hard, ceiling)
        resource.setrlimit(kind, (soft, hard))


def child_main(argv: list[str]) -> int:
    """`gantry _pdf-text PATH MAX_CHARS CPU_SECONDS MEMORY_BYTES`: one JSON object on stdout,
    either {"text", "cut", "pages"} or {"error", "detail"}; exit 2 on a bad command line."""
    try:
        if len(argv) != 4:
            raise ValueError
        path, (max_chars, cpu, memory) = Path(argv[0]), map(int, argv[1:])
        if min(max_chars, cpu, memory) < 1:
            raise ValueError
    except ValueError:
        print(f"usage: gantry {CHILD_COMMAND} PATH MAX_CHARS CPU_SECONDS MEMORY_BYTES "
              "(internal: gantry's PDF reader)", file=sys.stderr)
        return 2
    limit_self(cpu, memory)
    result: dict[str, object]
    try:
        text, cut, pages = pdf_text(path, max_chars)
        result = {"text": text, "cut": cut, "pages": pages}
    except PdfUnreadable as exc:
        result = {"error": str(exc), "detail": exc.detail}
    sys.stdout.buffer.write(json.dumps(result, ensure_ascii=False).encode("utf-8", "replace"))
    sys.stdout.buffer.flush()
    return 0
