"""The elicitation conversation without a server: schema → fields, answers checked against
them, the questions' choices, the stdio and Telegram renderings, and who may answer."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gantry import elicit
from gantry.channel.stdio.elicit import StdioDialog, read_answer, render
from gantry.channel.telegram.elicit import CLOSED, NOT_YOURS, TelegramDialog, parse_data
from gantry.elicit import Caller, Field, Invalid, Question, Unsupported, fields, parse, question

ME = Caller("telegram", "42", "42")


def one(prop: dict[str, Any], required: bool = True) -> Field:
    return fields({"type": "object", "properties": {"f": prop},
                   "required": ["f"] if required else []})[0]


def test_fields_read_every_kind_the_spec_allows() -> None:
    got = fields({"properties": {
        "s": {"type": "string", "minLength": 2, "format": "email"},
        "n": {"type": "number", "minimum": 0, "maximum": 1.5},
        "i": {"type": "integer", "default": 3},
        "b": {"type": "boolean", "title": "Agree?"},
        "e": {"type": "string", "enum": ["a", "b"], "enumNames": ["Ay", "Bee"]},
        "o": {"type": "string", "oneOf": [{"const": "x", "title": "Ex"}]},
        "m": {"type": "array", "items": {"anyOf": [{"const": "p", "title": "Pea"}]},
              "maxItems": 1},
    }, "required": ["s"]})
    assert [(f.key, f.kind, f.required) for f in got] == [
        ("s", "string", True), ("n", "number", False), ("i", "integer", False),
        ("b", "boolean", False), ("e", "enum", False), ("o", "enum", False),
        ("m", "multi", False)]
    assert got[0].min_length == 2 and got[0].format == "email"
    assert (got[1].minimum, got[1].maximum) == (0.0, 1.5) and got[2].default == 3
    assert got[4].options == (("a", "Ay"), ("b", "Bee")) and got[5].options == (("x", "Ex"),)
    assert got[6].options == (("p", "Pea"),) and got[6].max_items == 1


@pytest.mark.parametrize("prop", [{"type": "object"}, {"type": "array", "items": {}},
                                  {"type": None}, "not a schema"])
def test_fields_that_cannot_be_asked_are_named(prop: Any) -> None:
    with pytest.raises(Unsupported, match="'f'"):
        fields({"properties": {"f": prop}})


@pytest.mark.parametrize(("prop", "text", "value"), [
    ({"type": "string"}, " Ada ", "Ada"),
    ({"type": "string", "format": "email"}, "a@b.org", "a@b.org"),
    ({"type": "string", "format": "uri"}, "https://x.org/p", "https://x.org/p"),
    ({"type": "string", "format": "date"}, "2026-02-28", "2026-02-28"),
    ({"type": "string", "format": "date-time"}, "2026-02-28T10:00", "2026-02-28T10:00"),
    ({"type": "integer", "minimum": 1, "maximum": 100}, "100", 100),
    ({"type": "number"}, "2.5", 2.5),
    ({"type": "number"}, "3", 3),
    ({"type": "boolean"}, "yes", True),
    ({"type": "boolean"}, "No", False),
    ({"type": "string", "enum": ["a", "b"]}, "2", "b"),
    ({"type": "string", "oneOf": [{"const": "h1", "title": "Hero"}]}, "hero", "h1"),
    ({"type": "array", "items": {"enum": ["x", "y", "z"]}}, "3, x, 3", ["z", "x"]),
])
def test_answers_that_fit(prop: dict[str, Any], text: str, value: Any) -> None:
    got = parse(one(prop), text)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(("prop", "text", "why"), [
    ({"type": "string"}, "  ", "An answer, please"),
    ({"type": "string", "minLength": 3}, "ab", "At least 3 characters"),
    ({"type": "string", "maxLength": 3}, "abcd", "At most 3 characters"),
    ({"type": "string", "format": "email"}, "ada", "That is not an email address"),
    ({"type": "string", "format": "uri"}, "::", "That is not a URI"),
    ({"type": "string", "format": "date"}, "2026-02-30", "That is not a date"),
    ({"type": "string", "format": "date-time"}, "noon", "That is not a date and time"),
    ({"type": "integer"}, "2.5", "A whole number"),
    ({"type": "integer", "minimum": 1}, "0", "1 or more"),
    ({"type": "number", "maximum": 10}, "10.5", "10 or less"),
    ({"type": "number"}, "nan", "A finite number"),
    ({"type": "number"}, "inf", "A finite number"),
    ({"type": "boolean"}, "maybe", "Yes or no"),
    ({"type": "string", "enum": ["a", "b"]}, "3", "Choose one of: a, b"),
    ({"type": "array", "items": {"enum": ["x", "y"]}, "minItems": 2}, "x", "Choose at least 2"),
    ({"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 1}, "x,y", "Choose at most 1"),
])
def test_answers_that_do_not_fit_say_why(prop: dict[str, Any], text: str, why: str) -> None:
    with pytest.raises(Invalid, match=why):
        parse(one(prop), text)


KINDS = [{"type": "string", "minLength": 2, "maxLength": 4}, {"type": "string", "format": "email"},
         {"type": "string", "format": "uri"}, {"type": "string", "format": "date"},
         {"type": "string", "format": "date-time"}, {"type": "integer", "minimum": -1},
         {"type": "number", "maximum": 10}, {"type": "boolean"},
         {"type": "string", "enum": ["a", "b"]},
         {"type": "array", "items": {"enum": ["x", "y"]}, "minItems": 1, "maxItems": 1}]


@given(st.sampled_from(KINDS), st.text(max_size=12))
def test_every_reason_an_answer_does_not_fit_reads_as_a_sentence(
    prop: dict[str, Any], text: str
) -> None:
    """The re-ask starts with the reason and a full stop: it must start like a sentence."""
    try:
        parse(one(prop), text)
    except Invalid as exc:
        why = str(exc)
        assert why[:1].isupper() or why[:1].isdigit() or why[:1] == "-", why


def test_questions_offer_buttons_for_choices_and_skip_or_default() -> None:
    b = question(one({"type": "boolean", "title": "Agree"}, required=False), 1, 2)
    assert b.choices == ("Yes", "No", "Skip") and not b.typed
    assert b.text == "(1/2) Agree (optional)"
    e = question(one({"type": "string", "enum": ["a"], "default": "a"}), 2, 2, "Bad.")
    assert e.choices == ("a", "Default: a") and e.text.startswith("Bad.\n(2/2)")
    s = question(one({"type": "integer", "minimum": 1, "maximum": 9}), 1, 1)
    assert s.choices == () and s.typed and "Type a whole number from 1 to 9." in s.text
    m = question(one({"type": "array", "items": {"enum": ["x", "y"]}}), 1, 1)
    assert "  2. y" in m.text and m.typed


def test_stdio_numbers_choices_and_an_empty_line_takes_the_shortcut() -> None:
    pick = Question("Pick", ("Yes", "No"), typed=False)
    assert render(pick) == "Pick\n  1. Yes\n  2. No"
    assert read_answer(pick, "2") == "No" and read_answer(pick, "3") == "3"
    typed = Question("Name", ("Skip",), empty="Skip")
    assert render(typed) == "Name\n(an empty line: Skip)"
    assert read_answer(typed, "") == "Skip" and read_answer(typed, "1") == "1"
    assert read_answer(pick, "") == ""  # no shortcut: an empty line is no answer


@pytest.mark.anyio
async def test_stdio_empty_line_takes_the_default_a_choice_field_shows() -> None:
    """A single choice showing "Default: Monica" is answered by an empty line, as it is for a
    typed field; it is not asked again (nor counted towards the cancel)."""
    schema = {"properties": {
        "who": {"type": "string", "enum": ["Joey", "Monica"], "default": "Monica"},
        "agree": {"type": "boolean"},
        "pet": {"type": "string", "enum": ["cat", "dog"]}},
        "required": ["who", "agree", "pet"]}
    out = io.StringIO()
    dialog = StdioDialog(out)
    lines = iter(["1", "", "", "2", "", "1"])

    async def next_line() -> str:
        return next(lines)

    dialog.next_line = next_line
    got = await elicit.converse_form(dialog, ME, "srv", "Who?", schema, 5)
    assert (got.action, got.content) == ("accept", {"who": "Monica", "agree": False,
                                                    "pet": "cat"})
    shown = out.getvalue()
    assert "  3. Default: Monica\n(an empty line: Default: Monica)\n" in shown
    assert shown.count("(1/3) who") == 1
    assert "3 question(s) follow; /decline declines, /cancel cancels." in shown
    assert shown.count("An answer, please.") == 2  # the boolean and the enum have no default


class Script:
    def __init__(self, answer: Callable[[Question], str]) -> None:
        self.answer, self.asked, self.told = answer, [], []  # type: ignore[var-annotated]

    async def ask(self, caller: Caller, q: Question) -> str:
        self.asked.append(q)
        return self.answer(q)

    async def tell(self, caller: Caller, text: str) -> None:
        self.told.append(text)


SCHEMA = {"properties": {"age": {"type": "integer", "minimum": 0}}, "required": ["age"]}


@pytest.mark.anyio
async def test_a_bad_answer_is_asked_again_and_endless_ones_cancel() -> None:
    answers = iter(["Answer", "-1", "x", "30"])
    d = Script(lambda q: next(answers))
    out = await elicit.converse_form(d, ME, "srv", "How old?", SCHEMA, 5)
    assert (out.action, out.content) == ("accept", {"age": 30})
    assert [q.text.split("\n")[0] for q in d.asked[1:]] == [
        "(1/1) age", "0 or more, please.", "A whole number, please."]
    stubborn = Script(lambda q: "Answer" if q.text.startswith("MCP") else "-1")
    out = await elicit.converse_form(stubborn, ME, "srv", "How old?", SCHEMA, 5)
    assert out.action == "cancel" and len(stubborn.asked) == 1 + elicit.MAX_TRIES
    assert stubborn.told[-2].startswith("Too many answers")


@pytest.mark.anyio
async def test_an_answer_that_is_never_a_choice_cancels_after_max_tries() -> None:
    """The opening Answer/Decline and URL mode's Accept/Decline are bounded like a field."""
    for converse in (
        lambda d: elicit.converse_form(d, ME, "srv", "How old?", SCHEMA, 5),
        lambda d: elicit.converse_url(d, ME, "srv", "Sign in", "https://example.com/x", 5),
    ):
        chatty = Script(lambda q: "maybe later")
        out = await converse(chatty)
        assert out.action == "cancel" and len(chatty.asked) == elicit.MAX_TRIES
        assert any("Too many answers" in t for t in chatty.told)


@pytest.mark.anyio
async def test_a_form_that_cannot_be_asked_is_declined_and_said() -> None:
    d = Script(lambda q: "Answer")
    out = await elicit.converse_form(d, ME, "srv", "?", {"properties": {"x": {}}}, 5)
    assert out.action == "decline" and d.asked == [] and "cannot show" in d.told[0]


def test_who_answers() -> None:
    d = Script(lambda q: "")
    dialogs = {"telegram": d}
    assert elicit.who_answers(ME, dialogs) == (d, "")
    assert elicit.who_answers(None, dialogs)[0] is None
    assert elicit.who_answers(Caller("telegram", "1", "1", scheduled=True), dialogs)[0] is None
    assert elicit.who_answers(Caller("stdio", "local", "me"), dialogs)[0] is None
    other = Caller("telegram", "-100", "7", group=True)
    assert elicit.unanimous([ME, ME]) == ME
    assert elicit.unanimous([ME, other]) is None and elicit.unanimous([]) is None


class Bot:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.answered: list[tuple[str, str | None]] = []

    async def send_message(self, **kw: Any) -> Any:
        self.sent.append(kw)
        return type("M", (), {"message_id": len(self.sent)})()

    async def edit_message_reply_markup(self, **kw: Any) -> None:
        return None

    async def answer_callback_query(self, callback_query_id: str, text: str | None) -> None:
        self.answered.append((callback_query_id, text))


def press(data: str, user: int, qid: str = "q") -> Any:
    return type("Q", (), {"id": qid, "data": data,
                          "from_user": type("U", (), {"id": user})()})()


@pytest.mark.anyio
async def test_telegram_only_the_author_answers_and_stop_still_stops() -> None:
    bot = Bot()
    dialog = TelegramDialog(bot)
    author = Caller("telegram", "-100", "7", group=True)
    got: list[str] = []
    async with anyio.create_task_group() as tg:
        dialog.start(tg)

        async def ask() -> None:
            got.append(await dialog.ask(author, Question("Agree?", ("Yes", "No"), False)))

        tg.start_soon(ask)
        while not bot.sent:
            await anyio.sleep(0)
        markup = bot.sent[0]["reply_markup"].inline_keyboard
        data = markup[1][0].callback_data
        assert parse_data(data) is not None and parse_data("other:1") is None
        assert not dialog.take_message(-100, 8, "No")  # someone else in the group: a message
        dialog.take_button(press(data, 8, "q1"))  # someone else's press: refused
        dialog.take_button(press("el:stale:0", 7, "q2"))
        assert dialog.take_message(-100, 7, "@Gantry_Bot no", "gantry_bot")  # the author's
        await anyio.sleep(0.05)
    assert got == ["no"]
    assert bot.answered == [("q1", NOT_YOURS), ("q2", CLOSED)]
    assert "Tap a button." in bot.sent[0]["text"]

    async with anyio.create_task_group() as tg:
        dialog.start(tg)
        tg.start_soon(ask)
        while len(bot.sent) < 2:
            await anyio.sleep(0)
        assert not dialog.take_message(-100, 7, "/stop")  # the turn is still stopped…
    assert got[-1] == "/cancel"  # …and the question cancelled


class SlowBot(Bot):
    """sendMessage is recorded (the user can see it) before its response comes back."""

    def __init__(self) -> None:
        super().__init__()
        self.release = anyio.Event()

    async def send_message(self, **kw: Any) -> Any:
        self.sent.append(kw)
        await self.release.wait()
        return type("M", (), {"message_id": len(self.sent)})()


@pytest.mark.anyio
async def test_telegram_an_answer_polled_before_the_send_returns_is_taken() -> None:
    bot = SlowBot()
    dialog = TelegramDialog(bot)
    author = Caller("telegram", "5", "5")
    got: list[str] = []
    async with anyio.create_task_group() as tg:
        dialog.start(tg)

        async def ask() -> None:
            got.append(await dialog.ask(author, Question("City?", (), True)))

        tg.start_soon(ask)
        while not bot.sent:
            await anyio.sleep(0)
        assert dialog.take_message(5, 5, "/cancel")  # an answer, not a message for the model
        bot.release.set()
    assert got == ["/cancel"]
    assert not dialog.take_message(5, 5, "later")  # closed once answered
