"""Issue 35 item 1 inside the frozen binary: the PDF reader is the binary itself re-run as a
child (`_pdf-text`), so issue 35's heavy 10 KB PDF is answered as a kept file within
DOCUMENT_TIMEOUT_SECONDS, a /stop during its reading answers at once, and SIGTERM during it
exits promptly. The fixtures are tests/binary/test_binary.py's."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.binary.rootfs import Sandbox
from tests.binary.test_binary import WAIT, _run_env, binds, etc_gantry, start
from tests.fakes.media_samples import heavy_pdf, pdf

pytestmark = [pytest.mark.binary, pytest.mark.slow]
__all__ = ["binds", "etc_gantry", "start"]  # fixtures used through pytest


def readers() -> list[int]:
    """Host pids of running `_pdf-text` children (the sandbox's processes are visible here)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and b"\0_pdf-text\0" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def until(cond: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := cond():
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_heavy_pdf_is_bounded_stoppable_and_no_obstacle_to_sigterm(
    sandbox: Sandbox, start: Any, fake_openai: Any
) -> None:
    from tests.fakes.telegram import FakeTelegram

    tg = FakeTelegram()
    tg_url = tg.start_in_thread()
    try:
        data = sandbox.new_data_dir("data-pdf")

        def gantry(timeout: str) -> Any:
            return start(_run_env(fake_openai.base_url, CHANNEL="telegram",
                                  TELEGRAM_BOT_TOKEN="123456:pdf", TELEGRAM_ALLOWED_USERS="7",
                                  TELEGRAM_API_URL=tg_url, DOCUMENT_TIMEOUT_SECONDS=timeout),
                         data=data)

        run = gantry("3")
        run.wait_stderr('"receiving"')
        tg.push_document(7, pdf("Invoice 4711"), "invoice.pdf", "application/pdf")
        assert "Invoice 4711" in tg.wait_sent_sync(chat_id=7, count=1, timeout=WAIT)[0]

        sent_at = time.monotonic()  # the bound: a kept file, told why
        tg.push_document(7, heavy_pdf(), "report.pdf", "application/pdf")
        reply = tg.wait_sent_sync(chat_id=7, count=2, timeout=60)[1]
        took = time.monotonic() - sent_at
        assert reply.startswith("echo: [file: report.pdf, application/pdf, 11 KB, saved at "
                                "/data/media/"), reply
        assert "its text could not be extracted within 3 s" in reply
        assert took < 20, took  # before: minutes
        assert readers() == []
        assert run.stop(signal.SIGTERM) == 0, run.stderr[-3000:]
        assert "Traceback" not in run.stderr

        run = gantry("120")  # a reading that only a /stop or SIGTERM ends
        run.wait_stderr('"receiving"')
        tg.push_document(7, heavy_pdf(), "again.pdf", "application/pdf")
        until(readers, 30, "the binary's PDF reader child")
        time.sleep(0.5)
        stopped_at = time.monotonic()
        tg.push_text(7, "/stop")
        assert tg.wait_sent_sync(chat_id=7, count=3, timeout=10)[2] == "Stopped."
        assert time.monotonic() - stopped_at < 3.0
        until(lambda: not readers(), 2, "the reader child gone")

        tg.push_document(7, heavy_pdf(), "third.pdf", "application/pdf")  # SIGTERM during it
        until(readers, 30, "the binary's PDF reader child")
        time.sleep(0.5)
        term_at = time.monotonic()
        assert run.stop(signal.SIGTERM) == 0, run.stderr[-3000:]
        assert time.monotonic() - term_at < 5.0
        assert readers() == []
        assert "Traceback" not in run.stderr and "123456:pdf" not in run.stderr
    finally:
        tg.stop()
