"""Follow-ups steer the running turn, against a real `gantry run` (issue 40 #1): the fake Bot
API and model, npm server-everything's long-running operation as the slow tool, and a
kill -9 between the fold and the answer."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from gantry.steer import FOLLOWUP_MARK
from tests.fakes.mcp_servers import everything_command, toml_server
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.fakes.telegram import FakeTelegram
from tests.test_telegram_e2e import USER, Gantry, fakes, run, states, wait

pytestmark = pytest.mark.slow
__all__ = ["fakes", "run"]  # fixtures used by name

LONG = Call("every__trigger-long-running-operation", {"duration": 4, "steps": 4}, id="op1")


def history(data_dir: str) -> list[tuple[str, str]]:
    conn = apsw.Connection(f"{data_dir}/gantry.db", flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [(str(r), str(b)) for r, b in conn.execute(
            "SELECT role, body FROM session_message ORDER BY id")]
    finally:
        conn.close()


def manifest(tmp_path: Path) -> str:
    path = tmp_path / "mcp.toml"
    path.write_text(toml_server("every", everything_command(), timeout=30), encoding="utf-8")
    return str(path)


def follow_up_during_the_call(fakes: tuple[FakeTelegram, FakeOpenAI],
                              run: Callable[..., Gantry], tmp_path: Path
                              ) -> tuple[Gantry, dict[str, str], str]:
    """gantry started with server-everything; "book a table", then the follow-up once the
    model has asked for the long call. (gantry, its extra env, its DATA_DIR)."""
    tg, llm = fakes
    env = {"MCP_MANIFEST": manifest(tmp_path), "TOOLS_MAX_PER_TURN": "50"}
    g = run(**env)
    wait(lambda: tg.calls("getUpdates"), 120, "the poller")
    tg.push_text(USER, "book a table")
    wait(lambda: len(llm.requests) >= 1, 120, "the tool call")
    tg.push_text(USER, "and make it Friday")
    return g, env, g.env["DATA_DIR"]


def user_texts(llm: FakeOpenAI, i: int) -> list[str]:
    from tests.test_telegram_steer import user_texts as texts

    return texts(llm.requests[i])


def test_kill_between_the_fold_and_the_answer_answers_once_covering_both(
    fakes: tuple[FakeTelegram, FakeOpenAI], run: Callable[..., Gantry], tmp_path: Path
) -> None:
    """The follow-up comes while the first turn waits on a 4 s MCP call and is folded in; the
    process is killed (-9) while the model writes the answer. After the restart the turn
    resumes with both messages, once each: one reply, the follow-up never a turn of its own,
    the long-running call not run again."""
    tg, llm = fakes
    llm.push(ToolCalls([LONG]), Reply("never sent", delay=600))
    g, env, data = follow_up_during_the_call(fakes, run, tmp_path)
    wait(lambda: states(data).get("and make it Friday") == "folded", 60, "the fold")
    wait(lambda: len(llm.requests) >= 2, 60, "the answer after the fold")
    assert user_texts(llm, 1) == ["book a table", FOLLOWUP_MARK + "and make it Friday"]
    g.stop(signal.SIGKILL)
    assert tg.sent(USER) == []
    llm.push(Reply("Table booked for Friday."))
    g2 = run(**env)
    assert tg.wait_sent_sync(USER, 1, timeout=120) == ["Table booked for Friday."]
    wait(lambda: states(data).get("book a table") == "answered", 30, "the answer")
    assert states(data) == {"book a table": "answered", "and make it Friday": "folded"}
    assert len(llm.requests) == 3  # the resumed turn: one call, the tool not run again
    assert user_texts(llm, 2) == ["book a table", FOLLOWUP_MARK + "and make it Friday"]
    assert [m["role"] for m in llm.requests[2].messages] == [
        "system", "user", "assistant", "tool", "user"]
    assert [role for role, _body in history(data)] == [
        "user", "assistant", "tool", "user", "assistant"]
    assert g2.stop() == 0
    assert tg.sent_texts(USER) == ["Table booked for Friday."]


def test_kill_before_the_fold_lets_the_resumed_turn_take_the_follow_up(
    fakes: tuple[FakeTelegram, FakeOpenAI], run: Callable[..., Gantry], tmp_path: Path
) -> None:
    """Killed (-9) while the MCP call runs, the follow-up accepted but not folded: after the
    restart the resumed turn runs the cut call again, folds the follow-up in after it, and one
    reply answers both."""
    tg, llm = fakes
    llm.push(ToolCalls([LONG]))
    g, env, data = follow_up_during_the_call(fakes, run, tmp_path)
    wait(lambda: states(data).get("and make it Friday") == "accepted", 60, "the follow-up")
    g.stop(signal.SIGKILL)  # the 4 s call is still running
    assert states(data)["and make it Friday"] == "accepted"
    llm.push(Reply("Table booked for Friday."))
    g2 = run(**env)
    assert tg.wait_sent_sync(USER, 1, timeout=120) == ["Table booked for Friday."]
    wait(lambda: states(data).get("book a table") == "answered", 30, "the answer")
    assert states(data) == {"book a table": "answered", "and make it Friday": "folded"}
    assert len(llm.requests) == 2
    assert user_texts(llm, 1) == ["book a table", FOLLOWUP_MARK + "and make it Friday"]
    assert [role for role, _body in history(data)] == [
        "user", "assistant", "tool", "user", "assistant"]
    assert g2.stop() == 0
    assert tg.sent_texts(USER) == ["Table booked for Friday."]
