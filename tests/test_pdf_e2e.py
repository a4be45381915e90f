"""Issue 35 item 1 against `gantry run` as a subprocess, the fake Bot API and the fake model:
the 10 KB PDF that held the bot for minutes is answered within DOCUMENT_TIMEOUT_SECONDS as a
kept file, a /stop during its reading answers "Stopped." within a second or two, and SIGTERM
during it exits at once. Before, the reply took minutes, /stop said "Nothing to stop" and
SIGTERM waited for pypdf's thread (92.7 s in the issue)."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from gantry.channel.base import STOPPED_REPLY
from tests.fakes.media_samples import heavy_pdf
from tests.fakes.openai import FakeOpenAI
from tests.fakes.telegram import FakeTelegram
from tests.test_media_pdf import pdf_children
from tests.test_telegram_e2e import USER, fakes, run, wait  # noqa: F401

pytestmark = pytest.mark.slow

START = 90.0  # gantry's start on a loaded machine (tests/test_telegram_e2e.py)


def reading(start: Any, tg: Any) -> tuple[Any, int]:
    """A gantry whose deadline is far off, reading the heavy PDF: it and the reader's pid."""
    g = start(DOCUMENT_TIMEOUT_SECONDS="120")
    tg.push_text(USER, "hello")
    assert tg.wait_sent_sync(USER, 1, timeout=START) == ["echo: hello"]
    tg.push_document(USER, heavy_pdf(), "report.pdf", "application/pdf")
    child = wait(lambda: pdf_children(g.proc.pid), 30, "the PDF reader's child process")
    time.sleep(0.5)  # well into pypdf's work
    return g, int(child[0])


def test_the_heavy_pdf_is_answered_as_a_kept_file_within_the_timeout(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run  # noqa: F811
) -> None:
    tg, _llm = fakes
    g = run(DOCUMENT_TIMEOUT_SECONDS="3")
    tg.push_text(USER, "hello")
    assert tg.wait_sent_sync(USER, 1, timeout=START) == ["echo: hello"]
    sent_at = time.monotonic()
    tg.push_document(USER, heavy_pdf(), "report.pdf", "application/pdf", caption="summary?")
    reply = tg.wait_sent_sync(USER, 2, timeout=60)[1]
    took = time.monotonic() - sent_at
    print(f"\nheavy PDF answered in {took:.1f} s (DOCUMENT_TIMEOUT_SECONDS=3)")
    assert reply.startswith("echo: [file: report.pdf, application/pdf, 11 KB, saved at ")
    assert ("; its text could not be extracted within 3 s (the PDF takes too much work to "
            "read: damaged, or built to be heavy)]\n\nsummary?") in reply
    kept = reply.split("saved at ", 1)[1].split(";", 1)[0]
    assert Path(kept).read_bytes() == heavy_pdf()
    assert took < 20  # 3 s and the round trips; before: minutes
    assert pdf_children(g.proc.pid) == []
    assert g.stop() == 0
    assert "Traceback" not in g.stderr


def test_stop_while_the_pdf_is_read_answers_at_once_and_the_chat_goes_on(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run  # noqa: F811
) -> None:
    tg, llm = fakes
    g, child = reading(run, tg)
    asked = len(llm.requests)
    stopped_at = time.monotonic()
    tg.push_text(USER, "/stop")
    assert tg.wait_sent_sync(USER, 2, timeout=10)[1] == STOPPED_REPLY
    took = time.monotonic() - stopped_at
    print(f"\n/stop during the PDF → '{STOPPED_REPLY}' in {took * 1000:.0f} ms")
    assert took < 3.0  # about one poll round trip; before: "Nothing to stop", then minutes
    wait(lambda: not Path(f"/proc/{child}").exists(), 2, "the reader child gone")
    tg.push_text(USER, "still there?")
    assert tg.wait_sent_sync(USER, 3, timeout=10)[2] == "echo: still there?"
    assert len(llm.requests) == asked + 1  # the stopped PDF made no model call
    assert g.stop() == 0
    assert "Traceback" not in g.stderr


def test_sigterm_while_the_pdf_is_read_exits_promptly(  # type: ignore[no-untyped-def]
    fakes: tuple[FakeTelegram, FakeOpenAI], run  # noqa: F811
) -> None:
    tg, _llm = fakes
    g, child = reading(run, tg)
    started = time.monotonic()
    g.proc.send_signal(signal.SIGTERM)
    code = g.proc.wait(timeout=30)
    took = time.monotonic() - started
    print(f"\nSIGTERM during the PDF: exited in {took:.1f} s")
    assert code == 0 and took < 5.0  # no turn in flight: no drain to wait for
    assert not Path(f"/proc/{child}").exists()
