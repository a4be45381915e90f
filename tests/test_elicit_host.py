"""Elicitation through the MCP host against npm server-everything (in process, stdio child):
the capability is declared, the request reaches the turn's user through a scripted Dialog,
the answers go back to the server, and nobody is asked where nobody can answer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import pytest

from gantry import elicit
from gantry.elicit import Caller, Question
from gantry.mcp.elicitation import Elicitor
from gantry.mcp.host import Host
from gantry.mcp.manifest import parse
from gantry.tools import Registry
from tests.fakes.mcp_servers import everything_command, toml_server
from tests.test_mcp_host import BASE_ENV, BOOT

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ME = Caller("stdio", "local", "me")
TRIGGER = "trigger-elicitation-request"


class Script:
    """A Dialog answering from a function of the question; records what it was shown."""

    def __init__(self, answer: Callable[[Question], str]) -> None:
        self.answer = answer
        self.asked: list[Question] = []
        self.told: list[str] = []

    async def ask(self, caller: Caller, question: Question) -> str:
        assert caller == ME
        self.asked.append(question)
        await anyio.sleep(0)
        return self.answer(question)

    async def tell(self, caller: Caller, text: str) -> None:
        self.told.append(text)


@asynccontextmanager
async def everything(dialog: Script | None, *, timeout: float = 60.0,
                     call_timeout: float | None = None) -> AsyncIterator[Host]:
    elicitor = Elicitor(timeout=timeout)
    if dialog is not None:
        elicitor.dialogs["stdio"] = dialog
    host = Host(parse(toml_server("every", everything_command(), timeout=call_timeout),
                      BASE_ENV), Registry(), BASE_ENV, elicitor=elicitor)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(BOOT):
            await host.start(tg)
        try:
            yield host
        finally:
            tg.cancel_scope.cancel()


def raw(text: str) -> dict[str, object]:
    """The elicitation result server-everything echoes back in its tool result."""
    return dict(json.loads(text.split("Raw result:", 1)[1]))


def answers(q: Question) -> str:
    """The whole form of server-everything, one field at a time (one bad answer first)."""
    head = q.text.split("\n", 1)[0]
    table = {"String": "Ada Lovelace", "Boolean": "Yes", "String with default": "Default: It "
             "was a dark and stormy night.", "String with email format": "ada@example.org",
             "String with uri format": "Skip", "String with date format": "1815-12-10",
             "Integer": "7", "Number in range 1-1000": "2.5",
             "Untitled Single Select Enum": "Joey", "Untitled Multiple Select Enum": "1, 3",
             "Titled Single Select Enum": "Wonder Woman",
             "Titled Multiple Select Enum": "Salmon", "Legacy Titled Single Select Enum": "Dogs"}
    if head.startswith("MCP server"):
        return elicit.ANSWER
    for line in q.text.splitlines()[:2]:  # after the last answer's fault, if any
        for title, value in table.items():
            if line.endswith((f") {title}", f") {title} (optional)")):
                return value
    raise AssertionError(f"unexpected question {q.text!r}")


async def test_form_is_relayed_field_by_field_and_the_answers_reach_the_server() -> None:
    bad_email_once = [True]

    def answer(q: Question) -> str:
        if "email format" in q.text and bad_email_once[0]:
            bad_email_once[0] = False
            return "not-an-address"
        return answers(q)

    dialog = Script(answer)
    async with everything(dialog) as host:
        assert TRIGGER in {t.name for t in host.tools("every")}  # the capability is declared
        token = elicit.TURN.set(ME)
        try:
            result = await host.call("every", TRIGGER, {})
        finally:
            elicit.TURN.reset(token)
    assert not result.error, result.text
    got = raw(result.text)
    assert got["action"] == "accept"
    assert got["content"] == {
        "name": "Ada Lovelace", "check": True, "firstLine": "It was a dark and stormy night.",
        "email": "ada@example.org", "birthdate": "1815-12-10", "integer": 7, "number": 2.5,
        "untitledSingleSelectEnum": "Joey", "untitledMultipleSelectEnum": ["Guitar", "Violin"],
        "titledSingleSelectEnum": "hero-3", "titledMultipleSelectEnum": ["fish-2"],
        "legacyTitledEnum": "pet-2"}
    boolean = next(q for q in dialog.asked if ") Boolean" in q.text)
    assert boolean.choices == (elicit.YES, elicit.NO, elicit.SKIP) and not boolean.typed
    retried = [q for q in dialog.asked if q.text.startswith("That is not an email address")]
    assert len(retried) == 1  # the bad answer was asked again, with the reason
    assert dialog.told[-1] == "Sent."


@pytest.mark.parametrize(("word", "action"), [("/cancel", "cancel"), ("/decline", "decline"),
                                              (elicit.DECLINE, "decline")])
async def test_cancel_and_decline(word: str, action: str) -> None:
    def answer(q: Question) -> str:
        if q.text.startswith("MCP server") and word == elicit.DECLINE:
            return word
        return word if ") Boolean" in q.text else answers(q)

    async with everything(Script(answer)) as host:
        token = elicit.TURN.set(ME)
        try:
            result = await host.call("every", TRIGGER, {})
        finally:
            elicit.TURN.reset(token)
    assert raw(result.text) == {"action": action}


async def test_no_answer_in_time_cancels_and_the_call_clock_stops_meanwhile() -> None:
    class Silent(Script):
        async def ask(self, caller: Caller, question: Question) -> str:
            self.asked.append(question)
            await anyio.sleep_forever()
            raise AssertionError

    dialog = Silent(answers)
    # The question waits 3 s, longer than the call's 1 s timeout_seconds: the call's clock
    # is stopped while the user is asked, so the call still ends with the server's answer.
    async with everything(dialog, timeout=3.0, call_timeout=1.0) as host:
        token = elicit.TURN.set(ME)
        try:
            result = await host.call("every", TRIGGER, {})
        finally:
            elicit.TURN.reset(token)
    assert not result.error, result.text
    assert raw(result.text) == {"action": "cancel"}
    assert dialog.told[0] == "No answer within 3 s: the request is cancelled."


@pytest.mark.parametrize("caller", [
    Caller("stdio", "local", "me", scheduled=True), None, Caller("telegram", "5", "5")])
async def test_nobody_to_ask_declines_at_once(caller: Caller | None) -> None:
    dialog = Script(answers)
    async with everything(dialog) as host:
        token = elicit.TURN.set(caller)
        try:
            result = await host.call("every", TRIGGER, {})
        finally:
            elicit.TURN.reset(token)
    assert raw(result.text) == {"action": "decline"}
    assert dialog.asked == []


async def test_url_mode_shows_the_https_link_and_asks_to_confirm() -> None:
    dialog = Script(lambda q: elicit.ACCEPT)
    async with everything(dialog) as host:
        token = elicit.TURN.set(ME)
        try:
            ok = await host.call("every", "trigger-url-elicitation",
                                 {"url": "https://example.org/consent", "message": "Consent"})
            plain = await host.call("every", "trigger-url-elicitation",
                                    {"url": "http://example.org/x"})
        finally:
            elicit.TURN.reset(token)
    assert raw(ok.text) == {"action": "accept"}
    assert "https://example.org/consent" in dialog.asked[0].text
    assert dialog.asked[0].choices == (elicit.ACCEPT, elicit.DECLINE)
    assert raw(plain.text) == {"action": "decline"} and len(dialog.asked) == 1


async def test_without_an_elicitor_the_capability_is_not_declared() -> None:
    host = Host(parse(toml_server("every", everything_command()), BASE_ENV), Registry(),
                BASE_ENV)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(BOOT):
            await host.start(tg)
        names = {t.name for t in host.tools("every")}
        tg.cancel_scope.cancel()
    assert TRIGGER not in names


ASK_TOOLS = json.dumps({"tools": [{"name": "ask", "description": "Ask the user one thing.",
                                   "inputSchema": {"type": "object", "properties": {}}}]})


async def test_the_static_fixture_asks_too() -> None:
    """The C fixture's `ask` (what the frozen binary's test uses, tests/binary) round trip."""
    from tests.fakes.mcp_servers import static_fixture

    elicitor = Elicitor(dialogs={"stdio": Script(lambda q: "1" if "Proceed" in q.text
                                                 and ") " in q.text else elicit.ANSWER)})
    host = Host(parse(toml_server("st", [str(static_fixture())], env={"STATIC_TOOLS": ASK_TOOLS}),
                      BASE_ENV), Registry(), BASE_ENV, elicitor=elicitor)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(BOOT):
            await host.start(tg)
        token = elicit.TURN.set(ME)
        try:
            result = await host.call("st", "ask", {})
        finally:
            elicit.TURN.reset(token)
        tg.cancel_scope.cancel()
    assert not result.error, result.text
    assert "'action':'accept'" in result.text and "'ok':true" in result.text
