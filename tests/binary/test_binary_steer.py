"""Follow-ups steer the running turn inside the frozen binary (issue 40 #1), and survive a
kill -9 between the fold and the answer.

The slow call is the static C fixture's `sleep` (offered through STATIC_TOOLS): while it
runs, a second Telegram message from the same user is folded into the turn, and one reply
answers both.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from gantry.steer import FOLLOWUP_MARK
from tests.binary.rootfs import Sandbox
from tests.binary.test_binary import WAIT, _run_env, binds, etc_gantry, start
from tests.binary.test_binary_watch import static_binds
from tests.fakes.mcp_servers import kill_tree
from tests.fakes.openai import Call, Reply, ToolCalls, without_footer
from tests.fakes.telegram import FakeTelegram

pytestmark = [pytest.mark.binary, pytest.mark.slow]
__all__ = ["binds", "etc_gantry", "start"]  # fixtures used by name

SLEEP_TOOL = {"tools": [{"name": "sleep", "description": "Wait some seconds.",
                         "inputSchema": {"type": "object",
                                         "properties": {"seconds": {"type": "integer"}}}}]}
USER = 7


@pytest.fixture
def steer_binds(tmp_path_factory: pytest.TempPathFactory, sandbox: Sandbox) -> dict[str, Path]:
    return static_binds(tmp_path_factory, sandbox, SLEEP_TOOL, "steer")


def states(db: Path) -> dict[str, str]:
    try:
        conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.CantOpenError:
        return {}
    try:
        conn.set_busy_timeout(2000)
        return {str(t): str(s) for t, s in conn.execute(
            "SELECT text, state FROM telegram_update ORDER BY update_id")}
    except (apsw.SQLError, apsw.BusyError):
        return {}
    finally:
        conn.close()


def wait_for(check: Any, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def kill_9(run: Any) -> None:
    """kill -9 of gantry itself: the onefile bootstrap's app process and whatever it started
    (the MCP child), then the bootstrap, each by its pid, none given the chance to clean up."""
    kill_tree(run.proc.pid)
    run.stop(signal.SIGKILL)


def user_texts(request: Any) -> list[str]:
    return [without_footer(m["content"]) for m in request.messages if m["role"] == "user"]


def test_a_follow_up_steers_the_turn_and_survives_a_kill_in_the_frozen_binary(
    sandbox: Sandbox, start: Any, fake_openai: Any, steer_binds: dict[str, Path]
) -> None:
    tg = FakeTelegram()
    tg_url = tg.start_in_thread()
    try:
        data = sandbox.new_data_dir("data-steer")
        env = _run_env(fake_openai.base_url, CHANNEL="telegram", TELEGRAM_BOT_TOKEN="123456:steer",
                       TELEGRAM_ALLOWED_USERS=str(USER), TELEGRAM_API_URL=tg_url,
                       CRON_ENABLED="false")
        before = len(fake_openai.requests)
        fake_openai.push(ToolCalls([Call("st__sleep", {"seconds": 4}, id="s1")]),
                         Reply("never sent", delay=600))
        run = start(env, data=data, extra_binds=steer_binds)
        run.wait_stderr('"receiving"')
        tg.push_text(user_id=USER, text="book a table")
        wait_for(lambda: len(fake_openai.requests) > before, "the tool call")
        tg.push_text(user_id=USER, text="and make it Friday")
        db = data / "gantry.db"
        wait_for(lambda: states(db).get("and make it Friday") == "folded", "the fold")
        wait_for(lambda: len(fake_openai.requests) > before + 1, "the call after the fold")
        assert user_texts(fake_openai.requests[before + 1]) == [
            "book a table", FOLLOWUP_MARK + "and make it Friday"]
        kill_9(run)
        assert tg.sent(USER) == []
        fake_openai.push(Reply("Table booked for Friday."))
        again = start(env, data=data, extra_binds=steer_binds)
        assert tg.wait_sent_sync(USER, 1, timeout=WAIT) == ["Table booked for Friday."]
        wait_for(lambda: states(db).get("book a table") == "answered", "the answer")
        assert states(db) == {"book a table": "answered", "and make it Friday": "folded"}
        assert len(fake_openai.requests) == before + 3
        assert user_texts(fake_openai.requests[before + 2]) == [
            "book a table", FOLLOWUP_MARK + "and make it Friday"]
        assert again.stop(signal.SIGTERM) == 0, again.stderr[-3000:]
        assert "Traceback" not in again.stderr
        assert [m.text for m in tg.sent(USER)] == ["Table booked for Friday."]
    finally:
        tg.stop()
