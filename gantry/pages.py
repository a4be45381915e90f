"""The binary's read-only data pages handed back once imports settle (issue 44).

In the frozen binary every module's bytecode and constants live in `gantry.bin`'s read-only
segment (Nuitka's constants blob, ~23 MB). A module's part is read once, when it is imported,
into objects on the heap; the file pages it was read from stay resident for the life of the
process although nothing reads them again. `madvise(MADV_DONTNEED)` takes them out of the
process: they are clean pages of the unpacked file, so a later import reads them back from it.
Only mappings of the executable that are read-only, private and hold no private copy (smaps
`Anonymous: 0 kB`; the relocated RELRO part has copies and is left alone) are released, and
never its code. A source run does nothing: its interpreter has no such blob.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator

import anyio

log = logging.getLogger("gantry.pages")

MADV_DONTNEED = 4  # Linux, every architecture gantry is built for
SETTLE_SECONDS = 2.0  # imports are over when no module was added for this long
SMAPS_MAX_BYTES = 4 << 20  # bound on what is read of /proc/self/smaps


def releasable(smaps: str, exe: str) -> Iterator[tuple[int, int]]:
    """(start, length) of each mapping of `exe` in `smaps` that is read-only data (`r--p`)
    with resident pages and no private (copied-on-write) page: dropping it loses nothing."""
    start = length = resident = 0
    candidate = False
    anonymous = -1
    for line in smaps.splitlines():
        head, _, rest = line.partition(" ")
        if "-" in head and not head.endswith(":"):  # a mapping's first line
            if candidate and resident and anonymous == 0:
                yield start, length
            fields = line.split(None, 5)
            lo, _, hi = head.partition("-")
            try:
                start, length = int(lo, 16), int(hi, 16) - int(lo, 16)
            except ValueError:
                candidate = False
                continue
            candidate = len(fields) == 6 and fields[1] == "r--p" and fields[5] == exe
            resident, anonymous = 0, -1
        elif candidate and head == "Rss:":
            resident = _kib(rest)
        elif candidate and head == "Anonymous:":
            anonymous = _kib(rest)
    if candidate and resident and anonymous == 0:
        yield start, length


def _kib(rest: str) -> int:
    try:
        return int(rest.split()[0])
    except (IndexError, ValueError):
        return -1


def release() -> int:
    """Release the executable's read-only data pages now; the bytes of mappings released."""
    import ctypes

    exe = os.path.realpath("/proc/self/exe")
    with open("/proc/self/smaps", encoding="utf-8", errors="replace") as f:
        smaps = f.read(SMAPS_MAX_BYTES)
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    done = 0
    for start, length in releasable(smaps, exe):
        if madvise(start, length, MADV_DONTNEED) == 0:
            done += length
        else:
            log.debug("madvise failed", extra={"errno": ctypes.get_errno()})
    return done


async def keep_released() -> None:
    """In the binary: each time imports have added modules and then settled, release."""
    from gantry.buildinfo import frozen

    if not frozen() or not sys.platform.startswith("linux"):
        return
    released_at = seen = -1
    while True:
        await anyio.sleep(SETTLE_SECONDS)
        count = len(sys.modules)
        if count == seen and count != released_at:
            try:
                release()
            except (OSError, AttributeError) as exc:  # no /proc, no madvise: keep the pages
                log.warning("could not release import pages", extra={"error": str(exc)})
                return
            count = released_at = len(sys.modules)  # ctypes is imported by the first
        seen = count
