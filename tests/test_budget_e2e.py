"""Budgets end to end: `gantry run` (stdio) against the fake model. A daily budget reached
mid-day → the next cron fires skipped and recorded, the owner told once, the chat answered
with the notice and no model request; a restart tells nothing again; BUDGET_OWNER_THROUGH
lets the owner's chat through; an autonomous budget holds cron while chat answers."""

from __future__ import annotations

import time
from collections.abc import Callable

import apsw
import pytest

from tests.fakes.openai import FakeOpenAI, Reply
from tests.test_cron_e2e import rows
from tests.test_stdio_e2e import Gantry, fake, spawn

pytestmark = pytest.mark.slow
__all__ = ["fake", "spawn"]
STARTUP = 90.0


def add_job(db: str, prompt: str, due: float) -> None:
    """A one-shot job of the REPL's chat, as cron_schedule writes it, while gantry is up
    (BEGIN IMMEDIATE: a deferred transaction's upgrade would fail against gantry's writes)."""
    conn = apsw.Connection(db)
    conn.set_busy_timeout(10_000)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO cron_job (session_id, kind, spec, label, tz, prompt, state, next_at, "
            "anchor_at, created_at) VALUES ('stdio:local', 'once', ?, 'once', 'UTC', ?, "
            "'active', ?, ?, ?)",
            (time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(due)), prompt, due, due,
             due))
        conn.execute("COMMIT")
    finally:
        conn.close()


def runs(db: str) -> list[tuple[object, ...]]:
    return rows(db, "SELECT job_id, state, error FROM cron_run ORDER BY job_id")


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def test_daily_budget_reached_mid_day(spawn: Callable[..., Gantry], fake: FakeOpenAI) -> None:
    g1 = spawn(CRON_TICK_SECONDS="1", CRON_TZ="Europe/Berlin")
    g1.ask("hi", "echo: hi", timeout=STARTUP)
    assert g1.stop() == 0
    db = str(g1.data_dir / "gantry.db")
    used = int(rows(db, "SELECT SUM(prompt_tokens + completion_tokens) FROM usage")[0][0])
    env = {"CRON_TICK_SECONDS": "1", "CRON_TZ": "Europe/Berlin",
           "BUDGET_DAILY_TOKENS": str(used + 1), "BUDGET_WARN_PERCENT": "50"}

    g2 = spawn(**env)
    g2.wait_log("receiving", timeout=STARTUP)
    fake.push(Reply("Job one done."))
    add_job(db, "first", time.time())  # under the limit: runs, and uses the budget up
    wait_for(lambda: "Job one done.\n" in g2.stdout and "Budget warning: today's budget "
             "(BUDGET_DAILY_TOKENS) is " in g2.stdout, 20, "the reply and the warning")
    sent = len(fake.requests)
    add_job(db, "second", time.time())
    g2.expect("Budget reached: today's budget (BUDGET_DAILY_TOKENS) is used up, ", timeout=20)
    g2.expect(" are skipped.\n")
    add_job(db, "third", time.time())
    wait_for(lambda: len(runs(db)) == 3, 20, "the third fire to be recorded")
    assert runs(db)[0][:2] == (1, "delivered")
    for job, state, error in runs(db)[1:]:
        assert state == "skipped", job
        assert str(error).startswith("budget: BUDGET_DAILY_TOKENS reached ("), error
    reply = g2.ask("are you there?", "Until then I answer with this note instead of calling "
                   "the model, and scheduled jobs and watches are skipped.")
    assert "today's budget (BUDGET_DAILY_TOKENS) is used up" in reply
    assert "resets at 00:00 on " in reply and "(Europe/Berlin)" in reply
    assert len(fake.requests) == sent  # neither the skipped fires nor the chat reached it
    g2.send("/status")
    status = g2.expect(" — reached\n")
    assert "budget BUDGET_DAILY_TOKENS: " in status and f"of {used + 1:,} tokens" in status
    assert g2.stop() == 0
    out = g2.stdout
    assert out.count("Budget warning:") == 1 and out.count("Budget reached:") == 2  # + chat
    g2.assert_clean()

    g3 = spawn(**env, BUDGET_OWNER_THROUGH="true")
    g3.wait_log("receiving", timeout=STARTUP)
    add_job(db, "fourth", time.time())
    wait_for(lambda: len(runs(db)) == 4, 20, "the fourth fire to be recorded")
    assert runs(db)[3][1] == "skipped"
    g3.ask("owner here", "echo: owner here")  # the owner's chat passes the overall limit
    assert len(fake.requests) == sent + 1
    time.sleep(1.5)  # any notice a restart would wrongly send again has had its chance
    assert g3.stop() == 0
    assert "Budget" not in g3.stdout
    assert [r[0] for r in rows(db, "SELECT state FROM budget_notice")] == ["sent", "sent"]
    g3.assert_clean()


def test_autonomous_budget_holds_cron_while_chat_answers(
    spawn: Callable[..., Gantry], fake: FakeOpenAI
) -> None:
    g = spawn(CRON_TICK_SECONDS="1", BUDGET_AUTO_DAILY_TOKENS="1")
    g.wait_log("receiving", timeout=STARTUP)
    db = str(g.data_dir / "gantry.db")
    fake.push(Reply("Scheduled work done."))
    add_job(db, "first", time.time())
    g.expect("Scheduled work done.\n", timeout=20)
    add_job(db, "second", time.time())
    g.expect("Budget reached: today's autonomous budget (BUDGET_AUTO_DAILY_TOKENS) is used "
             "up, ", timeout=20)
    wait_for(lambda: len(runs(db)) == 2, 20, "the second fire to be recorded")
    assert runs(db)[1][1] == "skipped"
    g.ask("hello", "echo: hello")
    assert g.stop() == 0
    g.assert_clean()
