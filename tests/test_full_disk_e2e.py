"""Issue 39 item 4: DATA_DIR on a small tmpfs fills up during a turn, then space is freed.

Needs root (mount -t tmpfs); skipped otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.openai import Echo, FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.test_backup_e2e import answered_texts, integrity
from tests.test_telegram_e2e import USER, fakes, run, wait

__all__ = ["fakes", "run"]  # fixtures shared with the other e2e tests

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.getuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "data"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs",
                       str(mnt)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def fill(mnt: Path) -> Path:
    """Take every free byte of the tmpfs (a file written until ENOSPC)."""
    filler = mnt / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)

        except OSError:
            pass
        try:
            while True:
                f.write(b"\0" * 512)

        except OSError:
            pass
    return filler


def status(data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gantry", "status", "--data-dir", str(data)],
                          capture_output=True, text=True, timeout=60)


def test_full_disk_during_a_turn_then_freed(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run, small_disk: Path
) -> None:
    tg, llm = fakes
    g = run(DATA_DIR=str(small_disk), LOG_LEVEL="warning")
    tg.push_text(USER, "before")
    assert tg.wait_sent_sync(USER, 1, timeout=90) == ["echo: before"]
    llm.default = Echo(delay=3)
    tg.push_text(USER, "while full")
    wait(lambda: len(llm.requests) >= 2, 60, "the turn's model call")
    filler = fill(small_disk)  # the disk fills up while the model is answering
    wait(lambda: "is full" in status(small_disk).stdout, 60, "status to say the disk is full")
    tg.push_text(USER, "sent while full")  # cannot even be recorded: never skipped
    assert status(small_disk).returncode == 1
    time.sleep(8)  # full for a while: retries wait for space instead of failing the message
    assert tg.sent_texts(USER) == ["echo: before"]  # nothing half-done was sent
    requests = len(llm.requests)
    filler.unlink()  # space is freed: gantry answers again by itself
    llm.default = Echo()
    assert tg.wait_sent_sync(USER, 2, timeout=120)[1] == "echo: while full"
    assert requests <= 3  # no model call was made while the disk stayed full
    assert tg.wait_sent_sync(USER, 3, timeout=120)[2] == "echo: sent while full"
    tg.push_text(USER, "after")
    assert tg.wait_sent_sync(USER, 4, timeout=60)[3] == "echo: after"
    wait(lambda: status(small_disk).returncode == 0, 60, "status healthy again")
    assert g.proc is not None and g.proc.poll() is None  # never restarted
    assert g.stop() == 0
    db = small_disk / "gantry.db"
    assert integrity(db) == ["ok"]
    assert answered_texts(db) == {"before", "while full", "sent while full", "after"}
    assert tg.sent_texts(USER).count("echo: while full") == 1
    full = [line for line in g.stderr.splitlines() if "disk full; waiting" in line]
    assert len(full) == 1 and f"holding {small_disk} is full (" in full[0]
    assert "crash" not in g.stderr and "died" not in g.stderr
    assert "Traceback" not in g.stderr


def test_stdio_says_the_disk_is_full_and_carries_on(small_disk: Path, tmp_path: Path) -> None:
    from tests.procs import ChildIO

    llm = FakeOpenAI(default=Echo(delay=3))
    llm.start_in_thread()
    (tmp_path / "persona").mkdir()
    env = {"PATH": os.environ["PATH"], "CHANNEL": "stdio", "LLM_BASE_URL": llm.base_url,
           "LLM_API_KEY": "k", "LLM_MODEL": "m", "DATA_DIR": str(small_disk),
           "PERSONA_DIR": str(tmp_path / "persona"), "LOG_LEVEL": "warning",
           "LOG_FORMAT": "json"}
    proc = subprocess.Popen([sys.executable, "-m", "gantry", "run"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    io = ChildIO(proc)
    try:
        io.send("hello")
        wait(lambda: len(llm.requests) >= 1, 60, "the model call")
        filler = fill(small_disk)
        io.expect(f"(not answered: the file system holding {small_disk} is full (", 60)
        filler.unlink()
        llm.default = Echo()
        io.send("again")
        io.expect("echo: again", 60)
        assert proc.poll() is None
    finally:
        io.close_stdin()
        proc.wait(timeout=30)
        llm.stop()
    assert "Traceback" not in io.stderr


def test_scheduled_turn_cut_by_a_full_disk_runs_once_space_is_freed(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run, small_disk: Path
) -> None:
    from tests.fakes.openai import Reply
    from tests.test_cron_e2e import schedule_script

    tg, llm = fakes
    llm.push(*schedule_script("in 3 seconds", "Remind them to call the dentist."),
             Reply("Call the dentist!", delay=3))
    g = run(DATA_DIR=str(small_disk), CRON_TICK_SECONDS="1", LOG_LEVEL="warning")
    tg.push_text(USER, "remind me about the dentist in 3 seconds")
    assert tg.wait_sent_sync(USER, 1, timeout=90) == ["Scheduled."]
    wait(lambda: len(llm.requests) >= 3, 30, "the scheduled turn to reach the model")
    filler = fill(small_disk)  # full while the model answers the scheduled turn
    time.sleep(8)  # the turn's answer could not be stored: nothing is pushed
    assert tg.sent_texts(USER) == ["Scheduled."]
    filler.unlink()
    assert tg.wait_sent_sync(USER, 2, timeout=60)[1].startswith("echo: [scheduled job #1")
    assert g.proc is not None and g.proc.poll() is None
    time.sleep(2)
    assert g.stop() == 0
    assert len(tg.sent_texts(USER)) == 2  # pushed once
    assert g.stderr.count("cron run cut by a full disk") == 1
    assert "Traceback" not in g.stderr
