"""Multi-round-trip requests (MCP 2026-07-28) through the MCP host, against the Python SDK's
own server (tests/fakes/mcp_mrtr.py) opened in the 2026 era (`protocol = "2026"`): a call
answered `input_required` has its questions asked of the turn's user and is retried with the
answers; URL mode shows the https link; the question budget, the round cap and the
question timeout bound it; the 2025 `elicitation/create` path is unchanged."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from gantry import elicit
from gantry.elicit import Caller, Question
from gantry.mcp import mrtr
from gantry.mcp.elicitation import MAX_QUESTIONS, Elicitor
from gantry.mcp.host import Host
from gantry.mcp.manifest import ManifestError, parse
from tests.fakes.mcp_servers import ROOT, toml_server
from tests.test_elicit_host import ME, Script
from tests.test_elicit_host import served as hosted
from tests.test_mcp_host import BASE_ENV

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

FIXTURE = [sys.executable, "-m", "tests.fakes.mcp_mrtr"]


def manifest(protocol: str | None, legs: Path, *, timeout: float | None = None,
             url: str | None = None) -> str:
    """One server table for the fixture, over stdio (or at `url`), in `protocol`'s era."""
    if url is not None:
        text = f'[[server]]\nname = "mr"\nurl = "{url}"\nallow_http = true\n'
        if timeout is not None:
            text += f"timeout_seconds = {timeout}\n"
    else:
        text = toml_server("mr", FIXTURE, env={"FIXTURE_LEGS": str(legs)}, timeout=timeout,
                           cwd=str(ROOT))
    return text + (f'protocol = "{protocol}"\n' if protocol else "")


@asynccontextmanager
async def served(text: str, dialog: Script | None, *,
                 question_timeout: float = 30.0) -> AsyncIterator[Host]:
    elicitor = Elicitor(timeout=question_timeout)
    if dialog is not None:
        elicitor.dialogs["stdio"] = dialog
    async with hosted(text, elicitor) as host:
        yield host


async def call(host: Host, tool: str, args: dict[str, Any], who: Caller | None = ME) -> Any:
    token = elicit.TURN.set(who)
    try:
        with anyio.fail_after(60):
            return await host.call("mr", tool, args)
    finally:
        elicit.TURN.reset(token)


def legs(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def table(q: Question) -> str:
    """Four people on the terrace (the intro answered first)."""
    if q.text.startswith("MCP server"):
        return elicit.ANSWER
    return "4" if ") size" in q.text.casefold() else "terrace"


class Slow(Script):
    """A Script that takes `delay` s to answer each question."""

    def __init__(self, answer: Callable[[Question], str], delay: float) -> None:
        super().__init__(answer)
        self.delay = delay

    async def ask(self, caller: Caller, question: Question) -> str:
        await anyio.sleep(self.delay)
        return await super().ask(caller, question)


async def test_input_required_is_asked_and_the_call_retried_with_the_answers(
    tmp_path: Path
) -> None:
    """timeout_seconds 1, the user takes 1.5 s per question: the call's clock is held while
    the user is asked, and the retry carries the answers to the server."""
    path = tmp_path / "legs"
    dialog = Slow(table, delay=0.5)
    async with served(manifest("2026", path, timeout=1.0), dialog) as host:
        assert host.servers["mr"].session.protocol_version == "2026-07-28"
        result = await call(host, "book", {"day": "monday"})
    assert not result.error, result.text
    assert result.text == "booked a table for 4, terrace, on monday"
    seen = legs(path)
    assert [leg["era"] for leg in seen] == ["2026-07-28"] * len(seen) and len(seen) >= 2
    assert seen[0]["responses"] == {}
    answered = seen[-1]["responses"]
    assert [r["action"] for r in answered.values()] == ["accept"]
    assert next(iter(answered.values()))["content"] == {"size": 4, "seating": "terrace"}
    seating = next(q for q in dialog.asked if ") seating" in q.text.casefold())
    assert seating.choices[:2] == ("inside", "terrace") and not seating.typed
    assert dialog.told[-1] == "Sent."


async def test_the_2025_path_asks_by_elicitation_create_as_before(tmp_path: Path) -> None:
    path = tmp_path / "legs"
    async with served(manifest("2025", path), Script(table)) as host:
        assert host.servers["mr"].session.protocol_version == "2025-11-25"
        result = await call(host, "book", {"day": "friday"})
    assert result.text == "booked a table for 4, terrace, on friday", result.text
    assert [(leg["era"], leg["responses"]) for leg in legs(path)] == [("2025-11-25", {})]


@pytest.mark.parametrize(("choice", "text"), [(elicit.ACCEPT, "account linked"),
                                              (elicit.DECLINE, "not linked: decline")])
async def test_url_mode_shows_the_https_link_and_retries_once_confirmed(
    tmp_path: Path, choice: str, text: str
) -> None:
    path = tmp_path / "legs"
    dialog = Script(lambda q: choice)
    async with served(manifest("2026", path), dialog) as host:
        result = await call(host, "link", {})
    assert result.text == text and not result.error
    assert len(dialog.asked) == 1
    assert "https://example.com/sign-in?session=abc" in dialog.asked[0].text
    assert dialog.asked[0].choices == (elicit.ACCEPT, elicit.DECLINE)
    assert [list(leg["responses"].values()) for leg in legs(path)] == [
        [], [{"action": "accept" if choice == elicit.ACCEPT else "decline"}]]


async def test_a_server_that_asks_for_ever_is_bounded(tmp_path: Path) -> None:
    """Answered at once every time: the user answers MAX_QUESTIONS questions, the rest are
    declined unasked, and the call fails after MAX_ROUNDS rounds, with a reason."""
    path = tmp_path / "legs"
    dialog = Script(lambda q: elicit.ANSWER if q.text.startswith("MCP server") else "hi")
    async with served(manifest("2026", path), dialog) as host:
        started = anyio.current_time()
        result = await call(host, "nag", {})
        took = anyio.current_time() - started
    assert result.error and f"asked for input {mrtr.MAX_ROUNDS} times" in result.text
    intros = [q for q in dialog.asked if q.text.startswith("MCP server")]
    assert len(intros) == MAX_QUESTIONS
    assert len(legs(path)) == mrtr.MAX_ROUNDS + 1
    assert took < 20.0


async def test_no_answer_in_time_cancels_and_the_server_hears_it(tmp_path: Path) -> None:
    class Silent(Script):
        async def ask(self, caller: Caller, question: Question) -> str:
            self.asked.append(question)
            await anyio.sleep_forever()
            raise AssertionError

    path = tmp_path / "legs"
    dialog = Silent(table)
    async with served(manifest("2026", path, timeout=0.5), dialog,
                      question_timeout=1.0) as host:
        started = anyio.current_time()
        result = await call(host, "link", {})
        took = anyio.current_time() - started
    assert result.text == "not linked: cancel", result.text
    assert dialog.told[0] == "No answer within 1 s: the request is cancelled."
    assert took < 10.0


@pytest.mark.parametrize("who", [None, Caller("stdio", "local", "me", scheduled=True)])
async def test_nobody_to_ask_declines_at_once(tmp_path: Path, who: Caller | None) -> None:
    path = tmp_path / "legs"
    dialog = Script(table)
    async with served(manifest("2026", path), dialog) as host:
        result = await call(host, "link", {}, who=who)
    assert result.text == "not linked: decline" and dialog.asked == []


async def test_over_streamable_http_too(tmp_path: Path) -> None:
    from tests.fakes.mcp_remote import HttpServer

    path = tmp_path / "legs"
    srv = HttpServer([*FIXTURE, "{port}"], "/mcp", env={"FIXTURE_LEGS": str(path)}).start()
    try:
        async with served(manifest("2026", path, url=srv.url), Script(table)) as host:
            assert host.servers["mr"].session.protocol_version == "2026-07-28"
            result = await call(host, "book", {"day": "sunday"})
    finally:
        srv.stop()
    assert result.text == "booked a table for 4, terrace, on sunday", result.text
    answered = legs(path)[-1]["responses"]
    assert next(iter(answered.values()))["content"] == {"size": 4, "seating": "terrace"}


def test_the_protocol_key_takes_2025_or_2026() -> None:
    base = toml_server("mr", FIXTURE)
    assert parse(base, BASE_ENV)[0].protocol == "auto"
    assert parse(base + 'protocol = "2026"\n', BASE_ENV)[0].protocol == "2026"
    with pytest.raises(ManifestError, match="protocol must be one of 'auto', '2026', '2025'"):
        parse(base + 'protocol = "2024"\n', BASE_ENV)


async def test_two_chats_calls_at_once_each_ask_their_own_person(tmp_path: Path) -> None:
    """On 2025 a question during two chats' calls is declined (it names no call); a 2026
    input request comes inside its call's answer, so each call's own person is asked."""
    other = Caller("stdio", "other", "them")

    class Both(Script):
        def __init__(self) -> None:
            super().__init__(lambda q: elicit.ACCEPT)
            self.callers: list[Caller] = []
            self.both = anyio.Event()

        async def ask(self, caller: Caller, question: Question) -> str:
            self.callers.append(caller)
            if len(self.callers) == 2:
                self.both.set()
            with anyio.fail_after(30):
                await self.both.wait()  # both calls are in flight, both asked
            return elicit.ACCEPT if caller == ME else elicit.DECLINE

    dialog = Both()
    results: dict[str, Any] = {}
    async with served(manifest("2026", tmp_path / "legs"), dialog) as host:

        async def one(who: Caller) -> None:
            results[who.chat_id] = await call(host, "link", {}, who=who)

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, ME)
            tg.start_soon(one, other)
    assert sorted(c.chat_id for c in dialog.callers) == ["local", "other"]
    assert results["local"].text == "account linked"
    assert results["other"].text == "not linked: decline"
