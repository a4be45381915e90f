"""Elicitation through the MCP host against npm server-everything (in process, stdio child):
the capability is declared, the request reaches the turn's user through a scripted Dialog,
the answers go back to the server, and nobody is asked where nobody can answer."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from gantry import elicit
from gantry.elicit import Caller, Question
from gantry.mcp import caller as callpath
from gantry.mcp.elicitation import MAX_QUESTIONS, Elicitor
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
async def served(manifest: str, elicitor: Elicitor) -> AsyncIterator[Host]:
    """A Host of `manifest`'s servers, relaying their questions through `elicitor`."""
    host = Host(parse(manifest, BASE_ENV), Registry(), BASE_ENV, elicitor=elicitor)
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(BOOT):
            await host.start(tg)
        try:
            yield host
        finally:
            tg.cancel_scope.cancel()


@asynccontextmanager
async def everything(dialog: Script | None, *, timeout: float = 60.0,
                     call_timeout: float | None = None) -> AsyncIterator[Host]:
    elicitor = Elicitor(timeout=timeout)
    if dialog is not None:
        elicitor.dialogs["stdio"] = dialog
    async with served(toml_server("every", everything_command(), timeout=call_timeout),
                      elicitor) as host:
        yield host


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


# ------------------------------------------------------- a server that keeps asking (issue 35)

class Late(Script):
    """Answers after `delay` seconds (never, with delay=None): a person who is slow or away."""

    def __init__(self, answer: Callable[[Question], str], delay: float | None) -> None:
        super().__init__(answer)
        self.delay = delay

    async def ask(self, caller: Caller, question: Question) -> str:
        self.asked.append(question)
        if self.delay is None:
            await anyio.sleep_forever()
        await anyio.sleep(self.delay)
        return self.answer(question)

    @property
    def questions(self) -> int:
        """Elicitation requests shown (each starts with the server's message)."""
        return sum(q.text.startswith("MCP server") for q in self.asked)


def word(q: Question) -> str:
    return elicit.ANSWER if q.text.startswith("MCP server") else "hello"


@asynccontextmanager
async def nagging(dialog: Script, *, question_timeout: float,
                  call_timeout: float) -> AsyncIterator[Host]:
    """The Python fixture (its `nag` re-asks after every unanswered question) behind a Host."""
    from tests.fakes.mcp_servers import python_fixture_toml

    elicitor = Elicitor(timeout=question_timeout, dialogs={"stdio": dialog})
    # elicitation/create is the 2025 handshake era's way to ask (2026 asks with MRTR).
    manifest = python_fixture_toml("fx", timeout=call_timeout) + 'protocol = "2025"\n'
    async with served(manifest, elicitor) as host:
        yield host


async def asked(host: Host, args: dict[str, object]) -> tuple[Any, float]:
    token = elicit.TURN.set(ME)
    started = anyio.current_time()
    try:
        with anyio.fail_after(60):  # today's code: 20 rounds of the question's timeout
            result = await host.call("fx", "nag", args)
    finally:
        elicit.TURN.reset(token)
    return result, anyio.current_time() - started


async def test_unanswered_questions_count_against_the_cap() -> None:
    """timeout_seconds 0.15 → a 1.5 s cap; each question waits 1 s. The server asks again
    after every unanswered one: the call ends at the first question's end past the cap,
    not 20 questions later."""
    dialog = Late(word, delay=None)
    async with nagging(dialog, question_timeout=1.0, call_timeout=0.15) as host:
        result, took = await asked(host, {"rounds": 20})
    print(f"\n{dialog.questions} question(s), {took:.1f} s")
    assert result.error and "did not finish within 1.5 s" in result.text, result.text
    assert dialog.questions <= MAX_QUESTIONS
    assert sum(t.startswith("No answer") for t in dialog.told) == dialog.questions
    assert took < 6.0  # the cap and one question's wait, with room for a loaded machine


async def test_a_call_asks_the_user_at_most_the_question_budget() -> None:
    """Answered at once every time, a server that asks for ever gets MAX_QUESTIONS answers;
    the next question is declined without reaching the user."""
    dialog = Late(word, delay=0.0)
    async with nagging(dialog, question_timeout=30.0, call_timeout=20.0) as host:
        result, _took = await asked(host, {"rounds": 20, "always": True})
    assert not result.error, result.text
    assert result.text == " ".join(["accept"] * MAX_QUESTIONS + ["decline"])
    assert dialog.questions == MAX_QUESTIONS


async def test_answered_questions_never_move_a_call_past_the_ceiling(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An answered question moves the cap on by its time, but never past MAX_CALL_SECONDS
    (2.5 s here): a question still open then is closed, and the call ends."""
    monkeypatch.setattr(callpath, "MAX_CALL_SECONDS", 2.5)
    dialog = Late(word, delay=1.0)
    async with nagging(dialog, question_timeout=30.0, call_timeout=0.2) as host:
        result, took = await asked(host, {"rounds": 20, "always": True})
    print(f"\n{dialog.questions} question(s), {took:.1f} s")
    assert result.error and "did not finish" in result.text, result.text
    assert took < 2.5 + 3.0  # the ceiling, with room for a loaded machine
