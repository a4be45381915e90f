"""Cron end to end: `gantry run` subprocesses where the model schedules a one-shot and the
reply arrives later with no new user message (stdio: on stdout; Telegram: via the fake Bot
API), plus a kill -9 in the middle of a scheduled turn and CRON_ENABLED=false.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import apsw
import pytest

from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.fakes.telegram import FakeTelegram
from tests.test_stdio_e2e import ROOT, Gantry, fake, spawn
from tests.test_telegram_e2e import USER, fakes, no_secrets, run, wait

pytestmark = pytest.mark.slow
__all__ = ["fake", "fakes", "run", "spawn"]  # fixtures shared with the other e2e tests
STARTUP = 90.0  # importing aiogram takes tens of seconds on a loaded 2-core machine


def soon(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def schedule_script(when: str, prompt: str) -> list[ToolCalls | Reply]:
    return [
        ToolCalls([Call("cron_schedule", {"when": when, "prompt": prompt}, id="c1")]),
        Reply("Scheduled."),
    ]


def rows(db: str, sql: str) -> list[tuple[object, ...]]:
    conn = apsw.Connection(db, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return list(conn.execute(sql))
    finally:
        conn.close()


def test_stdio_one_shot_reply_appears_without_user_message(
    spawn: Callable[..., Gantry], fake: FakeOpenAI
) -> None:
    g = spawn(CRON_TICK_SECONDS="1", CRON_TZ="Europe/Berlin")
    g.wait_log("receiving", timeout=90)  # the ISO instant below is taken once gantry is up
    fake.push(*schedule_script(soon(4), "Tell the user the kettle is done."),
              Reply("The kettle is done!"))
    g.ask("remind me about the kettle in 4 seconds", "Scheduled.")
    assert "cron_schedule" in {t["function"]["name"] for t in fake.requests[0].body["tools"]}
    tool = next(m for m in fake.requests[1].messages if m["role"] == "tool")
    assert tool["content"].startswith("scheduled job #1 (once); next run ")
    assert " CET " in tool["content"] or " CEST " in tool["content"]
    g.expect("The kettle is done!\n", timeout=20)
    assert len(fake.requests) == 3
    assert fake.requests[2].last_user_text.startswith("[scheduled job #1, once at ")
    assert g.stdout == "Scheduled.\nThe kettle is done!\n"
    g.send("/status")
    assert "cron: no scheduled jobs in this chat" in g.expect("in this chat\n")
    listing = subprocess.run(
        [sys.executable, "-m", "gantry", "cron", "list", "--all"], env=g.env, cwd=ROOT,
        capture_output=True, text=True, timeout=30,
    )
    assert listing.returncode == 0, listing.stderr
    assert "#1 [done] stdio:local · once" in listing.stdout
    assert g.stop() == 0
    g.assert_clean()


def test_stdio_cron_disabled_offers_no_tools(
    spawn: Callable[..., Gantry], fake: FakeOpenAI
) -> None:
    g = spawn(CRON_ENABLED="false", MEMORY_ENABLED="false")  # no built-in tools at all
    g.ask("hi", "echo: hi")
    assert "tools" not in fake.requests[0].body
    g.send("/status")
    status = g.expect("schema tokens per request (est.)\n")
    assert "\ntools offered: 0 (0 built in)" in status and "cron:" not in status
    assert g.stop() == 0


def test_telegram_push_is_exactly_once_across_kill_9(
    fakes: tuple[FakeTelegram, FakeOpenAI], run: Callable[..., object]
) -> None:
    tg, llm = fakes
    llm.push(*schedule_script("in 3 seconds", "Remind them to call the dentist."),
             Reply("too slow", delay=15))
    g = run(CRON_TICK_SECONDS="1")
    tg.push_text(USER, "remind me about the dentist in 3 seconds")
    assert tg.wait_sent_sync(USER, 1, timeout=STARTUP) == ["Scheduled."]
    wait(lambda: len(llm.requests) >= 3, 20, "the scheduled turn to reach the model")
    assert llm.requests[2].last_user_text.endswith("Remind them to call the dentist.")
    g.stop(signal.SIGKILL)  # type: ignore[attr-defined]
    db = f"{g.env['DATA_DIR']}/gantry.db"  # type: ignore[attr-defined]
    assert rows(db, "SELECT state FROM cron_run") == [("started",)]

    llm.push(Reply("Call the dentist!"))
    g2 = run(CRON_TICK_SECONDS="1")
    assert tg.wait_sent_sync(USER, 2, timeout=STARTUP) == ["Scheduled.", "Call the dentist!"]
    wait(lambda: rows(db, "SELECT state FROM cron_run") == [("delivered",)], 10, "delivered")
    assert g2.stop() == 0  # type: ignore[attr-defined]
    g3 = run(CRON_TICK_SECONDS="1")  # a restart after delivery pushes nothing again
    tg.push_text(USER, "still there?")
    assert tg.wait_sent_sync(USER, 3, timeout=STARTUP)[2] == "echo: still there?"
    time.sleep(1.5)
    assert tg.sent_texts(USER) == ["Scheduled.", "Call the dentist!", "echo: still there?"]
    assert len(llm.requests) == 5
    assert g3.stop() == 0  # type: ignore[attr-defined]
    no_secrets(g3)  # type: ignore[arg-type]
