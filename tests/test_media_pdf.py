"""A PDF's text within a bound (issue 35 item 1), against the real child process
(`python -m gantry _pdf-text`): issue 35's 10 KB file of 40 pages sharing one heavy content
stream, and a zip bomb, are kept as files within DOCUMENT_TIMEOUT_SECONDS; cancelling the
read (a /stop, shutdown) kills the child at once; the child's own CPU and memory limits hold
without gantry, and it loads pypdf, not gantry's stack.

Before the child process, pypdf ran in a thread: the heavy file held the read for minutes,
and no cancel reached it, so each bound below failed (a thread cannot be interrupted).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import anyio
import pytest

from gantry.media.build import MediaReader
from gantry.media.kinds import Media
from tests.fakes.mcp_servers import live_children
from tests.fakes.media_samples import EMPTY_TEXT, bomb_pdf, heavy_pdf, pdf

pytestmark = pytest.mark.anyio

DEADLINE = 2  # DOCUMENT_TIMEOUT_SECONDS here
BOUND = 12.0  # what a read may take: the deadline, the child's start on a loaded machine
CAP = 20_000_000


async def _copy(item: Media, dest: Path, cap: int) -> None:
    dest.write_bytes(Path(item.ref).read_bytes())


def document(path: Path, data: bytes) -> Media:
    path.write_bytes(data)
    return Media(kind="document", ref=str(path), key="k1", name=path.name,
                 mime="application/pdf", size=len(data))


def reader(tmp_path: Path, timeout: float = DEADLINE) -> MediaReader:
    r = MediaReader(str(tmp_path / "data"), CAP)
    r.document_timeout = timeout  # an attribute, so the old reader ran this test too
    return r


def pdf_children(parent: int | None = None) -> list[int]:
    """Live children of `parent` (default: this process) running `_pdf-text`, by pid."""
    found = []
    for pid in live_children(parent):
        try:
            if b"_pdf-text" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def test_the_heavy_pdf_is_issue_35s_shape() -> None:
    """~10.9 KB, 40 pages, every page's /Contents the same one FlateDecode stream, which
    inflates to megabytes of text objects that draw nothing."""
    data = heavy_pdf()
    assert 10_000 < len(data) < 11_500
    assert data.count(b"/Type /Page ") == 40 and data.count(b"/Contents 3 0 R") == 40
    assert data.count(b"stream\n") - data.count(b"endstream") == 1
    start = data.index(b"stream\n") + len(b"stream\n")
    inflated = zlib.decompress(data[start:data.index(b"\nendstream")])
    assert len(inflated) > 2_000_000 and set(inflated.split()) == set(EMPTY_TEXT.split())


def test_the_bomb_inflates_to_hundreds_of_megabytes() -> None:
    data = bomb_pdf()
    assert len(data) < 5_000
    start = data.index(b"stream\n") + len(b"stream\n")
    once = zlib.decompress(data[start:data.index(b"\nendstream")])
    inflater, total, rest = zlib.decompressobj(), 0, once
    while rest:
        total += len(inflater.decompress(rest, 1 << 24))
        rest = inflater.unconsumed_tail
    assert inflater.eof and total > 300_000_000


async def test_the_heavy_pdf_is_kept_as_a_file_within_the_deadline(tmp_path: Path) -> None:
    item = document(tmp_path / "heavy.pdf", heavy_pdf())
    started = time.monotonic()
    with anyio.fail_after(BOUND):
        built = await reader(tmp_path).read([item], _copy)
    took = time.monotonic() - started
    print(f"\nheavy PDF answered in {took:.1f} s (deadline {DEADLINE} s)")
    (block,) = built.blocks
    kept = tmp_path / "data" / "media" / "k1-heavy.pdf"
    assert block == (f"[file: heavy.pdf, application/pdf, 11 KB, saved at {kept}; its text "
                     f"could not be extracted within {DEADLINE} s (the PDF takes too much work "
                     "to read: damaged, or built to be heavy)]")
    assert kept.read_bytes() == heavy_pdf()
    assert took >= DEADLINE and pdf_children() == []


async def test_a_zip_bomb_is_kept_as_a_file_within_the_deadline(tmp_path: Path) -> None:
    item = document(tmp_path / "bomb.pdf", bomb_pdf())
    with anyio.fail_after(BOUND):
        built = await reader(tmp_path).read([item], _copy)
    (block,) = built.blocks
    assert block.startswith("[file: bomb.pdf, application/pdf, ")
    assert block.endswith(("; pypdf could not read it (LimitReachedError)]",
                           f"could not be extracted within {DEADLINE} s (the PDF takes too much "
                           "work to read: damaged, or built to be heavy)]"))
    assert (tmp_path / "data" / "media" / "k1-bomb.pdf").exists() and pdf_children() == []


async def test_a_stream_past_the_memory_limit_fails_in_the_child(tmp_path: Path) -> None:
    """70 MB inflated (under pypdf's own 75 MB cap) against a 100 MB address space."""
    from gantry.media.pdf import PdfUnreadable
    from gantry.media.pdfproc import extract

    path = tmp_path / "b.pdf"
    path.write_bytes(bomb_pdf(70 << 20))
    with anyio.fail_after(BOUND), pytest.raises(PdfUnreadable) as err:
        await extract(path, 50_000, 30, memory=100 << 20)
    assert str(err.value) == "reading it needs more memory than a document may use"
    good = tmp_path / "g.pdf"
    good.write_bytes(pdf("Invoice 4711", "Total 99 EUR"))
    assert await extract(good, 50_000, 30, memory=100 << 20) == (
        "Invoice 4711\n\nTotal 99 EUR", False, 2)


async def test_cancelling_the_read_kills_the_child_at_once(tmp_path: Path) -> None:
    """What a /stop or a shutdown does to a read: it ends within a second, child and all."""
    item = document(tmp_path / "heavy.pdf", heavy_pdf())
    done = anyio.Event()
    cancelled_at = 0.0
    async with anyio.create_task_group() as tg:

        async def read() -> None:
            try:
                await reader(tmp_path, timeout=120).read([item], _copy)
            finally:
                done.set()

        tg.start_soon(read)
        with anyio.fail_after(BOUND):
            while not pdf_children():
                await anyio.sleep(0.05)
        (child,) = pdf_children()
        await anyio.sleep(0.5)  # well into pypdf's work
        cancelled_at = time.monotonic()
        tg.cancel_scope.cancel()
    took = time.monotonic() - cancelled_at
    print(f"\nread cancelled in {took * 1000:.0f} ms")
    assert done.is_set() and took < 1.0
    assert not Path(f"/proc/{child}").exists()  # killed and reaped
    assert not (tmp_path / "data" / "media" / "k1-heavy.pdf").exists()  # redone if retried


def child(*args: str, importtime: bool = False) -> subprocess.CompletedProcess[bytes]:
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, "-m", "gantry", "_pdf-text", *args],
                          capture_output=True, timeout=60, check=False)


def test_an_orphaned_child_stops_at_its_cpu_limit(tmp_path: Path) -> None:
    """Were gantry killed -9 mid-read, its child would not run on: its own RLIMIT_CPU."""
    path = tmp_path / "heavy.pdf"
    path.write_bytes(heavy_pdf())
    started = time.monotonic()
    done = child(str(path), "50000", "1", str(512 << 20))
    assert done.returncode == -signal.SIGXCPU and done.stdout == b""
    assert time.monotonic() - started < 10


def test_the_child_loads_pypdf_and_not_gantrys_stack(tmp_path: Path) -> None:
    path = tmp_path / "p.pdf"
    path.write_bytes(pdf("Lease ends 2027-03-31"))
    done = child(str(path), "50000", "5", str(512 << 20), importtime=True)
    assert done.returncode == 0
    assert done.stdout == b'{"text": "Lease ends 2027-03-31", "cut": false, "pages": 1}'
    loaded = {line.split("|")[-1].strip() for line in done.stderr.decode().splitlines()}
    assert "pypdf" in loaded and "gantry.media.pdf" in loaded
    assert not loaded & {"anyio", "msgspec", "httpx", "aiogram", "apsw", "gantry.media.build"}
    bad = child(str(path), "many")
    assert bad.returncode == 2 and b"usage: gantry _pdf-text" in bad.stderr
