"""gantry.pages: which mappings are handed back (pure), and that handing them back is safe in a
real process that keeps importing afterwards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from gantry import pages

EXE = "/tmp/gantry-0.1.0-abc/gantry.bin"


def _mapping(start: int, perms: str, path: str, rss: int, anon: int) -> str:
    return (f"{start:x}-{start + 0x2000:x} {perms} 00000000 00:2a 1234    {path}\n"
            f"Size:                  8 kB\nRss:            {rss:8d} kB\n"
            f"Pss:            {rss:8d} kB\nAnonymous:      {anon:8d} kB\n"
            "VmFlags: rd mr mw me sd\n")


def test_only_clean_read_only_data_of_the_executable() -> None:
    smaps = "".join([
        _mapping(0x1000, "r--p", EXE, 8, 0),  # headers, relocation tables: released
        _mapping(0x3000, "r-xp", EXE, 8, 0),  # code: kept
        _mapping(0x5000, "r--p", EXE, 8, 0),  # rodata (the constants blob): released
        _mapping(0x7000, "r--p", EXE, 8, 8),  # RELRO, relocated (private copies): kept
        _mapping(0x9000, "rw-p", EXE, 8, 4),  # data: kept
        _mapping(0xb000, "r--p", "/tmp/gantry-0.1.0-abc/libc.so.6", 8, 0),  # another file
        _mapping(0xd000, "r--p", EXE, 0, 0),  # nothing resident: nothing to do
        _mapping(0xf000, "r--p", EXE + " (deleted)", 8, 0),
    ])
    assert list(pages.releasable(smaps, EXE)) == [(0x1000, 0x2000), (0x5000, 0x2000)]


_MAPPINGS = st.lists(st.tuples(
    st.sampled_from(["r--p", "r-xp", "rw-p", "r--s", "---p"]),
    st.sampled_from([EXE, "/usr/lib/libc.so.6", "[heap]", "", EXE + "x"]),
    st.integers(0, 64), st.integers(0, 64)), max_size=12)


@given(_MAPPINGS)
def test_releasable_is_exactly_the_safe_mappings(maps: list[tuple[str, str, int, int]]) -> None:
    smaps = "".join(_mapping(0x10000 * (i + 1), perms, path, rss, anon)
                    for i, (perms, path, rss, anon) in enumerate(maps))
    want = [(0x10000 * (i + 1), 0x2000) for i, (perms, path, rss, anon) in enumerate(maps)
            if perms == "r--p" and path == EXE and rss > 0 and anon == 0]
    assert list(pages.releasable(smaps, EXE)) == want


def test_junk_smaps_releases_nothing() -> None:
    assert list(pages.releasable("zz-yy r--p 0 0 0 " + EXE + "\nRss: 8 kB\n", EXE)) == []
    assert list(pages.releasable("", EXE)) == []


def test_release_in_a_live_interpreter_then_it_keeps_working(tmp_path: Path) -> None:
    """madvise on this interpreter's own read-only data: the pages go, and everything they
    held is read back on use (an import, a codec table, a computation)."""
    code = (
        "import json, os, sys\n"
        "from gantry import pages\n"
        "exe = os.path.realpath('/proc/self/exe')\n"
        "def resident():\n"
        "    text = open('/proc/self/smaps').read()\n"
        "    return sum(1 for _ in pages.releasable(text, exe))\n"
        "before = resident()\n"
        "done = pages.release()\n"
        "after = resident()\n"
        "import decimal, email.parser, statistics\n"
        "ok = str(decimal.Decimal(1) / 7)[:5] == '0.142' and statistics.mean([1, 2, 3]) == 2\n"
        "print(json.dumps({'before': before, 'after': after, 'done': done, 'ok': ok}))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0, r.stderr[-2000:]
    seen = json.loads(r.stdout.splitlines()[-1])
    assert seen["ok"] is True
    assert seen["after"] <= seen["before"]
    assert seen["done"] > 0 or seen["before"] == 0
