"""Multi-round-trip requests end to end: `gantry run` on Telegram (fake Bot API, fake model)
with the SDK's server opened in the 2026 era (tests/fakes/mcp_mrtr.py). The call answered
`input_required` is asked in the chat with inline buttons, retried with the answers, and the
tool's result reaches the model; URL mode shows the https link and retries once confirmed."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fakes.mcp_servers import ROOT, toml_server
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.fakes.telegram import FakeTelegram
from tests.test_cron_e2e import STARTUP
from tests.test_elicit_e2e import Chat, tool_results, user_texts
from tests.test_telegram_e2e import USER, Gantry, fakes, no_secrets, run

pytestmark = pytest.mark.slow
__all__ = ["fakes", "run"]  # fixtures used by name below


def manifest(tmp_path: Path, legs: Path) -> str:
    path = tmp_path / "mcp.toml"
    # timeout_seconds far below the time the user takes: the call's clock stops meanwhile.
    path.write_text(toml_server("mr", [sys.executable, "-m", "tests.fakes.mcp_mrtr"],
                                env={"FIXTURE_LEGS": str(legs)}, timeout=5, cwd=str(ROOT))
                    + 'protocol = "2026"\n', encoding="utf-8")
    return str(path)


def test_telegram_answers_reach_the_retried_call_and_its_result_the_model(
    fakes: tuple[FakeTelegram, FakeOpenAI], run: Callable[..., Gantry], tmp_path: Path
) -> None:
    tg, llm = fakes
    legs = tmp_path / "legs"
    llm.push(ToolCalls([Call("mr__book", {"day": "monday"}, id="b1")]), Reply("table done"))
    g = run(MCP_MANIFEST=manifest(tmp_path, legs), ELICITATION_TIMEOUT_SECONDS="30")
    chat = Chat(tg)
    tg.push_text(USER, "book us a table")
    chat.next("MCP server 'mr' asks:\nHow many people, and where?", timeout=STARTUP)
    tg.press(USER, USER, "Answer")
    chat.type("(1/2) Size", "four")
    chat.type("A whole number, please.\n(1/2) Size", "4")
    question = chat.next("(2/2) Seating")
    assert "Tap a button." in question
    tg.press(USER, USER, "terrace")
    chat.next("Sent.")
    chat.next("table done")
    assert "booked a table for 4, terrace, on monday" in tool_results(llm)[-1]
    carried = [json.loads(line)["responses"] for line in legs.read_text().splitlines()]
    assert carried[0] == {} and [r["content"] for r in carried[-1].values()] == [
        {"size": 4, "seating": "terrace"}]
    assert not tg.buttons(USER)  # answered questions lose their buttons
    assert not any("terrace" in t for t in user_texts(llm))  # answers go to the server only

    # URL mode: the https link, Accept (or Decline), and the call retried with the choice.
    for n, (choice, said, result) in enumerate([("Accept", "Sent.", "account linked"),
                                                ("Decline", "Declined.", "not linked: decline")]):
        llm.push(ToolCalls([Call("mr__link", {}, id=f"l{n}")]), Reply(f"link {n} done"))
        tg.push_text(USER, f"link my account ({n})")
        text = chat.next("MCP server 'mr' asks you to open this link:")
        assert "https://example.com/sign-in?session=abc" in text
        tg.press(USER, USER, choice)
        chat.next(said)
        chat.next(f"link {n} done")
        assert result in tool_results(llm)[-1]
    assert g.stop() == 0
    no_secrets(g)
