"""A real `gantry run` (stdio) whose primary model is a dead loopback port: every turn is
answered by the fallback, the dead one costs the first turn alone, /status says so."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.openai import FakeOpenAI, dead_base_url
from tests.test_stdio_e2e import KEY, MODEL, Gantry

pytestmark = pytest.mark.slow

FALLBACK = "e2e-fallback"


@pytest.fixture
def backup() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(api_key=KEY, model=FALLBACK)  # the key defaults to LLM_API_KEY
    server.start_in_thread()
    try:
        yield server
    finally:
        server.stop()


def test_a_dead_primary_is_passed_over_and_the_fallback_answers(
    tmp_path: Path, backup: FakeOpenAI
) -> None:
    g = Gantry(tmp_path, dead_base_url(), {"LLM_FALLBACK_1_MODEL": FALLBACK,
                                           "LLM_FALLBACK_1_BASE_URL": backup.base_url})
    try:
        g.ask("first", "echo: first")
        started = time.monotonic()
        g.ask("second", "echo: second")
        assert time.monotonic() - started < 5  # the cooling primary is not waited for
        g.send("/status")
        g.expect(f"model: {MODEL} (last answer: {FALLBACK}, primary cooling down ")
        assert re.fullmatch(r"(1m|[0-9]{1,2}s)\)\n", g.expect(")\n"))  # about a minute left
        records = g.logs()
        failed = [r for r in records if r["message"] == "model endpoint failed; trying the next"]
        assert [(r["endpoint"], r["next"], r["cooldown_s"]) for r in failed] == [
            ("primary", "fallback 1", 60)]  # the first turn only
        answered = [r for r in records if r["message"] == "model call answered by a fallback"]
        assert [(r["model"], r["failed_endpoints"]) for r in answered] == [
            (FALLBACK, 1), (FALLBACK, 0)]
        assert [r.body["model"] for r in backup.requests] == [FALLBACK, FALLBACK]
        starting = next(r for r in records if r["message"] == "gantry starting")
        assert starting["fallbacks"] == [FALLBACK]
        g.assert_clean()
    finally:
        g.kill()


def test_a_cut_stream_restarts_on_the_fallback_below_a_marker(
    tmp_path: Path, backup: FakeOpenAI
) -> None:
    from gantry.channel.stdio.output import RESTART_MARK
    from tests.fakes.openai import CutStream, Reply

    primary = FakeOpenAI(api_key=KEY, model=MODEL)
    primary.start_in_thread()
    primary.push(CutStream("PRIMARY TEXT THAT BREAKS", after_chunks=3))
    backup.push(Reply("the fallback's whole reply"))
    g = Gantry(tmp_path, primary.base_url, {"LLM_FALLBACK_1_MODEL": FALLBACK,
                                            "LLM_FALLBACK_1_BASE_URL": backup.base_url,
                                            "STREAM_REPLIES": "true"})
    try:
        shown = g.ask("hi", "the fallback's whole reply")
        assert shown == f"PRIMARY TEXT\n{RESTART_MARK}\nthe fallback's whole reply\n"
        g.ask("again", "echo: again")  # the cut primary is cooling down: the fallback answers
        assert len(primary.requests) == 1
        g.assert_clean()
    finally:
        g.kill()
        primary.stop()
