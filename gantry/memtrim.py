"""Give the C heap's free pages back to the kernel (glibc `malloc_trim`), every heartbeat.

Each model request encodes the whole history (tens of KB, growing with it) and each reply is
decoded the same way: buffers above glibc's dynamic mmap threshold come from the main heap,
and the heap's free middle is never returned by itself. Over thousands of turns that shows
as RSS creeping up by about a MiB per thousand turns with no object kept (bench/soak.py);
one trim every 15 s hands it back in a millisecond or two. Elsewhere (musl, macOS) a no-op.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("gantry.run")

_trim: Callable[[int], int] | None = None
_looked = False


def _find() -> Callable[[int], int] | None:
    try:
        import ctypes

        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, ImportError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def trim() -> bool:
    """Return the heap's free pages to the kernel; False where there is no malloc_trim."""
    global _trim, _looked
    if not _looked:
        _looked = True
        _trim = _find()
        if _trim is None:
            log.debug("no malloc_trim in this C library: the heap is not trimmed")
    if _trim is None:
        return False
    _trim(0)
    return True
