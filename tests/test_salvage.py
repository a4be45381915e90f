"""Small-model tool loop (issue 27, part 2): printed calls, near-miss names, broken arguments,
reasoning, the stream gate — pure functions first, then recorded-format bodies through the
real provider and agent loop against the fake server."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from gantry.agent import CAP_NOTE, NO_ANSWER, NUDGE, Agent
from gantry.model import salvage
from gantry.model.assemble import Completion
from gantry.model.gate import StreamGate
from gantry.model.salvage import (
    MARKERS,
    parse_arguments,
    printed_calls,
    resolve_name,
    split_reasoning,
)
from gantry.tools import Registry, Tool, mcp_source
from tests.fakes.openai import Call, FakeOpenAI, RawSSE, Reply, ToolCalls, WhenOffered
from tests.test_agent import fake, make_agent, msg

__all__ = ["fake"]

FIXTURES = Path(__file__).parent / "fixtures" / "smallmodels"
T = "time__get_current_time"
NAMES = {T, "time__convert_time", "calc__add"}
TOKYO = {"timezone": "Asia/Tokyo"}


def calls(text: str, names: set[str] = NAMES) -> list[tuple[str, Any]] | None:
    found = printed_calls(text, names)
    return None if found is None else [(c.name, json.loads(c.arguments)) for c in found]


# ----------------------------------------------------------------------------- printed calls


PRINTED = [
    (f'{{"name": "{T}", "arguments": {{"timezone": "Asia/Tokyo"}}}}', "bare-json"),
    (f'  {{"name": "{T}", "parameters": {{"timezone": "Asia/Tokyo"}}}}\n', "bare-json"),
    (f'{{"type": "function", "function": {{"name": "{T}", "arguments": "{{\\"timezone\\": '
     '\\"Asia/Tokyo\\"}"}}', "bare-json"),
    (f'```json\n{{"name": "{T}", "arguments": {{"timezone": "Asia/Tokyo"}}}}\n```', "fenced-json"),
    (f'<tool_call>\n{{"name": "{T}", "arguments": {{"timezone": "Asia/Tokyo"}}}}\n</tool_call>',
     "hermes"),
    (f"<tool_call>\n{{'arguments': {{'timezone': 'Asia/Tokyo'}}, 'name': '{T}'}}\n</tool_call>",
     "hermes"),
    (f'<tool_call>{{"name": "{T}", "arguments": {{"timezone": "Asia/Tokyo"}}}}', "hermes"),
    (f'<|python_tag|>{{"name": "{T}", "parameters": {{"timezone": "Asia/Tokyo"}}}}<|eom_id|>',
     "llama-json"),
    (f'<|python_tag|>{T}.call(timezone="Asia/Tokyo")', "llama-builtin"),
    (f'<function={T}>{{"timezone": "Asia/Tokyo"}}</function>', "llama-function"),
    (f'[{T}(timezone="Asia/Tokyo")]', "pythonic"),
    (f'[TOOL_CALLS] [{{"name": "{T}", "arguments": {{"timezone": "Asia/Tokyo"}}}}]', "mistral"),
    (f'[TOOL_CALLS]{T}[ARGS]{{"timezone": "Asia/Tokyo"}}', "mistral"),
    (f'[TOOL_CALLS]{T}[CALL_ID]a1b2c3d4e[ARGS]{{"timezone": "Asia/Tokyo"}}', "mistral"),
    (f'[TOOL_CALLS]{T}[ARGS]{{"timezone": "Asia/Tokyo"}}</s>', "mistral"),
    (f'```\n<tool_call>\n{{"name": "{T}", "arguments": {{"timezone": "Asia/Tokyo"}}}}\n'
     '</tool_call>\n```', "hermes"),
]


@pytest.mark.parametrize(("text", "form"), PRINTED)
def test_every_printed_form_is_recovered(text: str, form: str) -> None:
    found = printed_calls(text, NAMES)
    assert found is not None, text
    assert [(c.name, json.loads(c.arguments), c.form) for c in found] == [(T, TOKYO, form)]


def test_several_calls_in_one_text() -> None:
    two = (f'\n<tool_call>\n{{"name": "{T}", "arguments": {{}}}}\n</tool_call>\n'
           '<tool_call>\n{"name": "calc__add", "arguments": {"a": 1, "b": 2}}\n</tool_call>')
    assert calls(two) == [(T, {}), ("calc__add", {"a": 1, "b": 2})]
    assert calls(f'<function={T}>{{}}</function>\n<function=calc__add>{{"a": 1}}</function>') == [
        (T, {}), ("calc__add", {"a": 1})]
    assert calls(f'<|python_tag|>{{"name": "{T}", "parameters": {{}}}}; {{"name": "calc__add", '
                 '"parameters": {}}<|eom_id|>') == [(T, {}), ("calc__add", {})]
    assert calls(f'{{"name": "{T}", "arguments": {{}}}}\n{{"name": "calc__add", "arguments": '
                 '{"a": 1}}') == [(T, {}), ("calc__add", {"a": 1})]
    assert calls(f'[{{"name": "{T}", "arguments": {{}}}}, {{"name": "calc__add", "arguments": '
                 '{}}]') == [(T, {}), ("calc__add", {})]
    assert calls(f'{{"name": "{T}", "parameters": {{}}}}; {{"name": "calc__add", "parameters": '
                 '{}}') == [(T, {}), ("calc__add", {})]
    assert calls(f'[TOOL_CALLS]{T}[ARGS]{{}}[TOOL_CALLS]calc__add[ARGS]{{"a": 1}}') == [
        (T, {}), ("calc__add", {"a": 1})]
    assert calls(f'[{T}(), calc__add(a=1, b=2)]') == [(T, {}), ("calc__add", {"a": 1, "b": 2})]


@pytest.mark.parametrize("text", [
    '{"name": "Alice", "arguments": {"age": 3}}',  # JSON the user asked for: no such tool
    '{"name": "time__get_current_time", "age": 3}',  # a record with a name field
    f'Here is the call: {{"name": "{T}", "arguments": {{}}}}',  # prose around JSON
    f'{{"name": "{T}", "arguments": {{}}}} is how you would call it',
    f'```python\n{{"name": "{T}", "arguments": {{}}}}\n```',
    '[1, 2, 3]',
    '{"timezone": "Asia/Tokyo"}',
    f'[{{"name": "{T}", "arguments": {{}}}}, {{"name": "nope", "arguments": {{}}}}]',
    "print(time__get_current_time)",
    "max(1, 2)",
    "Sure (the time is 10:00).",
    f"[{T}(tz=now())]",  # not literal arguments
    "",
])
def test_text_that_is_no_call_is_left_alone(text: str) -> None:
    assert printed_calls(text, NAMES) is None


def test_no_offered_tools_means_no_call() -> None:
    assert printed_calls(f'{{"name": "{T}", "arguments": {{}}}}', set()) is None


def test_a_server_prefix_with_the_other_separator_is_that_tool() -> None:
    names = {"my-server__get", "other__get"}
    assert resolve_name("my_server__get", names) == "my-server__get"
    assert resolve_name("other-_get", names) == "other__get"
    assert resolve_name("other_get", names) is None  # a dropped `_` is a suggestion, no match
    assert resolve_name("my_server__get", {"my-server__get", "my_server__get"}) == \
        "my_server__get"
    assert resolve_name("my-server__get", {"my_server__get", "my_server-_get"}) is None
    assert calls('{"name": "my_server__get", "arguments": {}}', names) == [("my_server__get", {})]


NAME = st.from_regex(r"[a-z][a-z0-9]{0,8}(__|_|-)[a-z][a-z0-9_]{0,12}", fullmatch=True)
SCALAR = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=12)
JSONISH = st.recursive(SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=8), inner, max_size=3), max_leaves=8)
ARGS = st.dictionaries(st.text(min_size=1, max_size=8), JSONISH, max_size=4)


def render(form: str, name: str, args: dict[str, Any]) -> str:
    body = json.dumps(args)
    return {
        "bare": json.dumps({"name": name, "arguments": args}),
        "params": json.dumps({"name": name, "parameters": args}),
        "fenced": f"```json\n{json.dumps({'name': name, 'arguments': args})}\n```",
        "hermes": f"<tool_call>\n{json.dumps({'name': name, 'arguments': args})}\n</tool_call>",
        "llama": f"<|python_tag|>{json.dumps({'name': name, 'parameters': args})}<|eot_id|>",
        "function": f"<function={name}>{body}</function>",
        "mistral": f"[TOOL_CALLS] {json.dumps([{'name': name, 'arguments': args}])}",
        "mistral11": f"[TOOL_CALLS]{name}[ARGS]{body}",
    }[form]


FORMS = ["bare", "params", "fenced", "hermes", "llama", "function", "mistral", "mistral11"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(FORMS), st.lists(NAME, min_size=1, max_size=4, unique=True), ARGS,
       st.data())
def test_any_rendered_call_comes_back_exactly(
    form: str, names: list[str], args: dict[str, Any], data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(names))
    found = printed_calls(render(form, name, args), set(names))
    assert found is not None
    assert [(c.name, json.loads(c.arguments)) for c in found] == [(name, args)]


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=10), JSONISH, max_size=5) | st.lists(JSONISH, max_size=4),
       st.lists(NAME, min_size=1, max_size=4, unique=True), st.booleans())
def test_json_that_names_no_offered_tool_is_an_answer(
    value: Any, names: list[str], fenced: bool
) -> None:
    items = value if isinstance(value, list) else [value]
    assume(not any(isinstance(i, dict) and i.get("name") in names for i in items))
    text = json.dumps(value)
    assert printed_calls(f"```json\n{text}\n```" if fenced else text, set(names)) is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_prose_is_never_a_call(text: str) -> None:
    assume(not any(m in text for m in MARKERS))
    assert printed_calls(text, NAMES) is None


FORGET = '<tool_call>\n{"name": "memory_forget", "arguments": {"query": "cat"}}\n</tool_call>'
EXPLAINED = ("Qwen prints a tool call as a tagged JSON object, like this:\n\n```xml\n"
             f"{FORGET}\n```\n\nThe runtime parses the block and runs the tool; you never "
             "see it in a normal chat.")


def test_a_call_shown_as_an_example_is_text() -> None:
    """Issue 35 item 2: a model explaining the format must not delete the user's memory."""
    names = {"memory_forget", "memory_recall", "memory_store"}
    assert printed_calls(FORGET, names) is not None  # the reply that *is* the call runs
    assert printed_calls(EXPLAINED, names) is None
    assert printed_calls(f"Let me check.\n{FORGET}", names) is None  # prose before a call
    assert printed_calls(f"{FORGET}\nDone.", names) is None


@pytest.mark.parametrize(("text", "_form"), PRINTED)
def test_a_printed_call_naming_no_offered_tool_is_text(text: str, _form: str) -> None:
    assert printed_calls(text, {"time__convert_time", "calc__add"}) is None
    assert printed_calls(text.replace(T, "shell__run"), NAMES | {"shell_run"}) is None


PROSE = st.text(st.characters(categories=["L", "N", "Zs"]) | st.sampled_from(".,!?:;'\"-\n"),
                max_size=60).filter(lambda t: any(c.isalnum() for c in t))
OPT_PROSE = st.just("") | PROSE
LANG = st.sampled_from(["", "json", "xml", "tool_call", "text"])
THINK = st.just("") | st.just("<think>the user asked about formats</think>\n")


def wrapped(call: str, how: str, before: str, after: str, lang: str) -> str:
    """`call` with prose around it: before, after, or a fence with prose around the fence
    or inside it beside the call (`before` is never empty, `after` may be)."""
    return {
        "before": f"{before}\n{call}{after}",
        "after": f"{call}\n{before}{after}",
        "fence": f"{before}\n```{lang}\n{call}\n```\n{after}",
        "inside": f"```{lang}\n{before}\n{call}\n{after}\n```",
    }[how]


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([t for t, _ in PRINTED]) | st.builds(render, st.sampled_from(FORMS),
                                                             st.just(T), ARGS),
       st.sampled_from(["before", "after", "fence", "inside"]), PROSE, OPT_PROSE, LANG, THINK)
@example(FORGET, "fence", "Qwen prints a tool call like this:", "The runtime runs it.", "xml",
         "").via("the issue's reply")
def test_prose_around_a_printed_call_never_runs_a_tool(
    call: str, how: str, before: str, after: str, lang: str, think: str
) -> None:
    names = sorted(NAMES | {"memory_forget"})
    text = think + wrapped(call, how, before, after, lang)
    reply = split_reasoning(text)[0]
    assert printed_calls(reply, names) is None, text
    tools = registry(*names)  # the agent's own repair step, with these tools offered
    agent = Agent(model=None, sessions=None, tools=tools, persona=str)  # type: ignore[arg-type]
    done = agent._recover(Completion(text=text, finish_reason="stop"), names, tools.schemas())
    assert done.tool_calls == [] and done.finish_reason == "stop"
    assert done.text == reply and before.strip() in reply and after.strip() in reply


# ----------------------------------------------------------------------------- arguments


@pytest.mark.parametrize(("raw", "expected"), [
    ('{"a": 1}', {"a": 1}),
    ("", {}),
    ("  ", {}),
    ('{"a": 1} </tool_call>', {"a": 1}),  # trailing text
    ('{"a": 1}}', {"a": 1}),  # one brace too many
    ("{'a': 'b', 'c': True, 'd': None}", {"a": "b", "c": True, "d": None}),  # single quotes
    ('"{\\"a\\": 1}"', {"a": 1}),  # a JSON string holding JSON
    ('```json\n{"a": 1}\n```', {"a": 1}),
])
def test_arguments_repaired_when_unambiguous(raw: str, expected: dict[str, Any]) -> None:
    assert parse_arguments(raw) == (expected, "")


@pytest.mark.parametrize(("raw", "quoted"), [
    ('{"a": 1', "Expecting ',' delimiter at char 7"),
    ('{"a": 1} {"b": 2}', "Extra data at char 9"),  # two objects: which one?
    ("a=1", "Expecting value at char 0"),
    ("{'a': {1, 2}}", "Expecting property name enclosed in double quotes"),  # a set
])
def test_arguments_refused_quoting_the_parse_error(raw: str, quoted: str) -> None:
    args, problem = parse_arguments(raw)
    assert args is None
    assert quoted in problem and repr(raw) in problem and "JSON object" in problem


def test_arguments_that_are_no_object_are_refused() -> None:
    assert parse_arguments("[1, 2]") == (None, "arguments must be a JSON object, not list")
    assert parse_arguments('"text"') == (None, "arguments must be a JSON object, not str")


@settings(max_examples=300, deadline=None)
@given(ARGS, st.sampled_from(["", " ", "\n</tool_call>", " <|eot_id|>", "}"]))
def test_any_object_survives_the_usual_damage(args: dict[str, Any], junk: str) -> None:
    text = json.dumps(args)
    assert parse_arguments(text + junk) == (args, "")
    assert parse_arguments(json.dumps(text)) == (args, "")


ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=3),
    max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(max_size=5), ANY_JSON, max_size=4), st.booleans(),
       st.sampled_from(["", " ", "\n", "}", " x"]))
def test_the_fast_path_reads_objects_as_json_does(
    args: dict[str, Any], ascii_only: bool, tail: str
) -> None:
    """msgspec's decode (the fast path) gives what json.loads gives, or declines: NaN and
    infinities, lone surrogates, trailing junk all go the json way, with the same result."""
    text = json.dumps(args, ensure_ascii=ascii_only) + tail
    fast = salvage._plain_object(text)
    if fast is not None:
        assert repr(fast) == repr(json.loads(text))
    with patch.object(salvage, "_plain_object", lambda raw: None):  # the json way only
        slow = parse_arguments(text)
    assert repr(parse_arguments(text)) == repr(slow)


SIMPLE = st.dictionaries(
    st.text(min_size=1, max_size=6),
    st.none() | st.booleans() | st.integers(-999, 999) | st.text(max_size=8), max_size=4)


@settings(max_examples=200, deadline=None)
@given(SIMPLE)
def test_python_literal_dicts_are_read(args: dict[str, Any]) -> None:
    assert parse_arguments(repr(args)) == (args, "")


# ----------------------------------------------------------------------------- reasoning


@pytest.mark.parametrize(("text", "reply", "thought"), [
    ("<think>hmm</think>\n\nIt is 10:00.", "It is 10:00.", "hmm"),
    ("hmm, the tool said 10\n</think>\n\nIt is 10:00.", "It is 10:00.", "hmm, the tool said 10"),
    ("<think>cut off in the middle", "", "cut off in the middle"),
    ("<think>a</think>one <think>b</think>two", "one two", "a\nb"),
    ("no reasoning here", "no reasoning here", ""),
])
def test_reasoning_comes_out_of_the_text(text: str, reply: str, thought: str) -> None:
    assert split_reasoning(text) == (reply, thought)


# ----------------------------------------------------------------------------- stream gate


def gated(text: str, cut: list[int], names: set[str] = NAMES) -> str:
    """What a user would see: the text fed in pieces, taken back when the gate says so."""
    gate, shown, i = StreamGate(names), "", 0
    for at in [*sorted(cut), len(text)]:
        piece, i = text[i:at], max(i, at)
        out, restart = gate.feed(piece)
        shown = ("" if restart else shown) + out
    return shown


CUTS = st.lists(st.integers(0, 400), max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(FORMS), ARGS, CUTS)
@example("fenced", {}, [1]).via("a fence's first backtick alone in the first delta")
@example("fenced", {}, [2])
def test_a_streamed_printed_call_is_never_shown(form: str, args: dict[str, Any],
                                                cut: list[int]) -> None:
    text = render(form, T, args)
    shown = gated(text, cut)
    assert T not in shown and "arguments" not in shown, shown


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["Sure", "The", "It is", "Hello,", "Yes!", "  Tokyo", "9:00"]),
       st.text(st.characters(categories=["L", "N", "Zs"]) | st.sampled_from(".,!?'"),
               max_size=120), CUTS)
def test_streamed_prose_is_shown_as_it_comes(start: str, rest: str, cut: list[int]) -> None:
    text = start + rest
    assert gated(text, cut) == text


@pytest.mark.parametrize(("text", "seen"), [
    ("<think>the user wants the time</think>It is 10:00.", "It is 10:00."),
    ("the user wants the time\n</think>\n\nIt is 10:00.", "\n\nIt is 10:00."),
    ("Let me look.\n<tool_call>\n{...", "Let me look.\n<tool_call>\n{..."),
    ("Qwen prints:\n```xml\n<tool_call>{}</tool_call>\n```", "Qwen prints:\n```xml\n"
     "<tool_call>{}</tool_call>\n```"),
    ("hi <think>x</think> there", "hi "),
    ('{"name": "Tokyo", "population": 14000000}', '{"name": "Tokyo", "population": 14000000}'),
    ('{"city": "Oslo"}', '{"city": "Oslo"}'),
    ("```python\nprint(1)\n```", "```python\nprint(1)\n```"),
    ("[1, 2, 3]", "[1, 2, 3]"),
    ("Use <b>bold</b> here", "Use <b>bold</b> here"),
])
def test_the_gate_per_case(text: str, seen: str) -> None:
    for step in (1, 3, len(text)):
        assert gated(text, list(range(step, len(text), step))) == seen, step


def test_the_gate_holds_at_most_a_bounded_prefix() -> None:
    text = '{"name": "time__get_current_time", "arguments": {"pad": "' + "x" * 5000
    assert gated(text, list(range(0, len(text), 7))).startswith('{"name"')  # past HOLD_MAX


# ----------------------------------------------------------------------------- registry


async def _noop(args: dict[str, Any]) -> str:
    return json.dumps(args)


def registry(*names: str) -> Registry:
    reg = Registry()
    for n in names:
        reg.register(Tool(n, "", {"type": "object"}, _noop, mcp_source(n.split("__")[0])))
    return reg


@pytest.mark.anyio
async def test_an_unknown_name_gets_the_closest_tools() -> None:
    reg = registry("time__get_current_time", "time__convert_time", "calc__add")
    result = await reg.call("time_get_current_time", "{}")
    assert result.error
    assert result.text.startswith("error: unknown tool 'time_get_current_time'; did you mean "
                                  "time__get_current_time")
    assert "available tools: calc__add, time__convert_time, time__get_current_time" in result.text
    far = await reg.call("weather", "{}")
    assert "did you mean" not in far.text


@pytest.mark.anyio
async def test_a_swapped_separator_runs_the_one_tool_it_means() -> None:
    reg = registry("my-server__get", "other__get")
    ok = await reg.call("my_server__get", '{"q": 1}')
    assert not ok.error and ok.text == '{"q": 1}'
    both = registry("a-b__get", "a_b__get")
    assert (await both.call("a-b__get", "{}")).text == "{}"
    amb = registry("a-b__get", "a_b-_get")
    assert (await amb.call("a_b__get", "{}")).error


@pytest.mark.anyio
async def test_broken_arguments_are_repaired_or_quoted() -> None:
    reg = registry("calc__add")
    assert (await reg.call("calc__add", "{'a': 1}")).text == '{"a": 1}'
    bad = await reg.call("calc__add", '{"a": 1')
    assert bad.error and "Expecting ',' delimiter at char 7" in bad.text and '{"a": 1' in bad.text


# ----------------------------------------------------------------------------- the agent loop


class Shown:
    """A ReplyStream that keeps what the user saw, taking back on discard."""

    def __init__(self) -> None:
        self.text = ""
        self.ever: list[str] = []  # every write, even ones later taken back
        self.final: str | None = None

    async def write(self, delta: str) -> None:
        self.text += delta
        self.ever.append(delta)

    async def discard(self) -> None:
        self.text = ""

    async def finish(self, final_text: str) -> None:
        self.final = final_text


def time_agent(fake: FakeOpenAI, tmp_path: Path, **kw: Any) -> tuple[Any, list[dict[str, Any]]]:
    """make_agent plus stand-ins for mcp-server-time's two tools (the slow test runs the
    real server); each call's arguments are kept."""
    tmp_path.mkdir(exist_ok=True)
    agent = make_agent(fake, tmp_path, **kw)
    seen: list[dict[str, Any]] = []

    async def now(args: dict[str, Any]) -> str:
        seen.append(args)
        return json.dumps({"timezone": args.get("timezone"), "datetime": "2026-12-01T19:14:00"})

    for name in ("time__get_current_time", "time__convert_time"):
        agent.tools.register(Tool(name, "", {"type": "object"}, now, mcp_source("time")))
    return agent, seen


def fixture(name: str) -> RawSSE:
    path = FIXTURES / name
    kind = "application/json" if path.suffix == ".json" else "text/event-stream"
    return RawSSE(path.read_bytes(), pieces=[7, 13, 31], content_type=kind)


CALL_FIXTURES = sorted(p.name for p in FIXTURES.iterdir() if p.stem.split("_")[0] in
                       ("hermes", "qwen3", "llama31", "llama32", "fenced", "mistral")
                       and "answer" not in p.stem and "only" not in p.stem)
LEAKS = ("tool_call", "python_tag", "TOOL_CALLS", "<think>", "</think>", '"name"',
         "function=", T, "[ARGS]", "I should")


def no_leak(text: str) -> None:
    assert not any(leak in text for leak in LEAKS), text


def requests_streamed(name: str) -> list[bool]:
    return [True] if name.endswith(".sse") else [False, True]


@pytest.mark.anyio
@pytest.mark.parametrize("name", CALL_FIXTURES)
async def test_a_printed_call_runs_and_only_the_answer_is_shown(
    fake: FakeOpenAI, tmp_path: Path, name: str
) -> None:
    for streamed in requests_streamed(name):
        agent, seen = time_agent(fake, tmp_path / str(streamed))
        fake.push(fixture(name), Reply("It is 19:14 in Tokyo."))
        shown = Shown() if streamed else None
        assert await agent(msg("what time is it in Tokyo?"), shown) == "It is 19:14 in Tokyo."
        assert seen[0] == TOKYO
        after = fake.requests[-1].messages
        call = next(m for m in after if m["role"] == "assistant")
        assert call["tool_calls"][0]["function"]["name"] == T
        assert json.loads(call["tool_calls"][0]["function"]["arguments"]) == TOKYO
        no_leak(call.get("content") or "")
        tool = next(m for m in after if m["role"] == "tool")
        assert tool["tool_call_id"] == call["tool_calls"][0]["id"]
        assert json.loads(tool["content"])["timezone"] == "Asia/Tokyo"
        if shown is not None:
            no_leak("".join(shown.ever))
        _, history = agent.sessions.load("test:1")
        for m in history:
            no_leak(m.content or "") if m.content and m.content != "what time is it in Tokyo?" \
                else None
        fake.requests.clear()


@pytest.mark.anyio
async def test_two_printed_calls_both_run(fake: FakeOpenAI, tmp_path: Path) -> None:
    agent, seen = time_agent(fake, tmp_path)
    fake.push(fixture("hermes_two_calls.sse"), Reply("9:00 Tokyo is 1:00 in Berlin."))
    assert await agent(msg("9am Tokyo in Berlin?"), Shown()) == "9:00 Tokyo is 1:00 in Berlin."
    assert seen == [TOKYO, {"source_timezone": "Asia/Tokyo", "time": "09:00",
                            "target_timezone": "Europe/Berlin"}]


@pytest.mark.anyio
@pytest.mark.parametrize("name", ["deepseek_reasoning_answer.sse", "deepseek_reasoning_answer.json",
                                  "ollama_reasoning_answer.sse", "r1_distill_open_think.sse",
                                  "qwen3_think_answer.sse"])
async def test_reasoning_never_reaches_the_user_or_the_history(
    fake: FakeOpenAI, tmp_path: Path, name: str
) -> None:
    for streamed in requests_streamed(name):
        agent, _seen = time_agent(fake, tmp_path / str(streamed))
        fake.push(ToolCalls([Call(T, TOKYO)]), fixture(name))
        shown = Shown() if streamed else None
        assert await agent(msg("time in Tokyo?"), shown) == "It is 19:14 in Tokyo."
        _, history = agent.sessions.load("test:1")
        assert history[-1].content == "It is 19:14 in Tokyo."
        stored = " ".join(m.content or "" for m in history)
        assert "The tool" not in stored and "think>" not in stored
        if shown is not None:
            assert "The tool" not in shown.text and "think>" not in shown.text
        fake.requests.clear()


@pytest.mark.anyio
async def test_a_reasoning_only_reply_promotes_the_turns_last_text(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    agent, _seen = time_agent(fake, tmp_path)
    fake.push(ToolCalls([Call(T, TOKYO)], text="Tokyo is at 19:14 right now."),
              fixture("qwen3_think_only.sse"))
    assert await agent(msg("time in Tokyo?"), Shown()) == "Tokyo is at 19:14 right now."
    assert len(fake.requests) == 2  # no nudge needed


@pytest.mark.anyio
async def test_a_reasoning_only_reply_gets_one_nudge(
    fake: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent, _seen = time_agent(fake, tmp_path)
    fake.push(ToolCalls([Call(T, TOKYO)]), fixture("qwen3_think_only.sse"),
              Reply("It is 19:14 in Tokyo."))
    assert await agent(msg("time in Tokyo?"), Shown()) == "It is 19:14 in Tokyo."
    nudge = fake.requests[2]
    assert "tools" not in nudge.body and nudge.messages[-1] == {"role": "user", "content": NUDGE}
    _, history = agent.sessions.load("test:1")
    assert NUDGE not in [m.content for m in history]


@pytest.mark.anyio
async def test_no_text_after_the_nudge_gets_a_clear_sentence(
    fake: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent, _seen = time_agent(fake, tmp_path)
    fake.push(fixture("qwen3_think_only.sse"), Reply("<think>still thinking</think>"))
    with caplog.at_level(logging.INFO, "gantry.agent"):
        assert await agent(msg("time in Tokyo?"), Shown()) == NO_ANSWER
    assert "the model gave no text for the user" in caplog.text
    _, history = agent.sessions.load("test:1")
    assert history[-1].content == NO_ANSWER


@pytest.mark.anyio
async def test_json_the_user_asked_for_is_shown(fake: FakeOpenAI, tmp_path: Path) -> None:
    agent, seen = time_agent(fake, tmp_path)
    fake.push(fixture("json_answer.sse"))
    shown = Shown()
    reply = await agent(msg("Tokyo as JSON with name, timezone, population"), shown)
    assert json.loads(reply) == {"name": "Tokyo", "timezone": "Asia/Tokyo",
                                 "population": 14000000}
    assert shown.text == reply and seen == [] and len(fake.requests) == 1


@pytest.mark.anyio
async def test_near_miss_names_and_repaired_arguments_are_recorded_repaired(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    agent, seen = time_agent(fake, tmp_path)
    agent.tools.register(Tool("my-srv__ping", "", {"type": "object"}, _noop, mcp_source("my-srv")))
    fake.push(ToolCalls([Call("my_srv__ping", "{'a': 1}", id="c1"),
                         Call("time_get_current_time", "{}", id="c2"),
                         Call(T, '{"timezone": "Asia/Tokyo"} trailing', id="c3"),
                         Call(T, '{"timezone": ', id="c4")]), Reply("done"))
    assert await agent(msg("go")) == "done"
    after = fake.requests[1].messages
    sent = [(c["function"]["name"], c["function"]["arguments"])
            for c in after[-5]["tool_calls"]]
    assert sent == [("my-srv__ping", '{"a":1}'), ("time_get_current_time", "{}"),
                    (T, '{"timezone":"Asia/Tokyo"}'), (T, '{"timezone":')]
    results = [m["content"] for m in after[-4:]]
    assert results[0] == '{"a": 1}'
    assert "did you mean time__get_current_time" in results[1]
    assert seen == [TOKYO]
    assert "arguments are not valid JSON (Expecting value at char 12)" in results[3]


@pytest.mark.anyio
async def test_a_model_that_never_stops_calling_tools_still_answers(
    fake: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake.default = WhenOffered(ToolCalls([Call("calc__add", {"a": 1, "b": 1})]),
                               Reply("Here is what I found."))
    agent = make_agent(fake, tmp_path, max_iterations=4)
    with caplog.at_level(logging.WARNING, "gantry.agent"):
        assert await agent(msg("loop")) == "Here is what I found."
    assert len(fake.requests) == 5
    assert "tools" not in fake.last_request.body
    assert fake.last_request.messages[-1] == {"role": "user", "content": CAP_NOTE}
    cap = [r for r in caplog.records if r.getMessage().startswith("tool-call limit reached")]
    assert len(cap) == 1 and cap[0].__dict__["rounds"] == 4 and cap[0].__dict__["limit"] == 4


@pytest.mark.anyio
async def test_a_printed_call_in_the_landing_call_is_not_the_answer(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    agent, _seen = time_agent(fake, tmp_path, max_iterations=1)
    fake.push(ToolCalls([Call(T, TOKYO)]), fixture("hermes_qwen25.json"), Reply("It is 19:14."))
    assert await agent(msg("time?")) == "It is 19:14."  # the nudge answered
    assert len(fake.requests) == 3


# ----------------------------------------------------------------------------- real mcp-server-time


@pytest.mark.anyio
@pytest.mark.slow
async def test_every_printed_format_runs_the_real_time_server(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    """PyPI's mcp-server-time behind the real MCP host: each recorded format's printed call
    reaches it, its real result goes back to the model, the user reads only the answer."""
    from gantry import db
    from gantry.agent import Agent
    from gantry.model.client import Provider
    from gantry.session import SessionStore
    from tests.fakes.mcp_servers import time_command, toml_server
    from tests.test_mcp_host import running

    async with running(toml_server("time", [time_command()])) as (_host, reg):
        provider = Provider(fake.base_url, "sk-test-123456", "fake-model")
        try:
            for i, name in enumerate(CALL_FIXTURES):
                for streamed in requests_streamed(name):
                    agent = Agent(model=provider, tools=reg, persona=lambda: "You are Tim.",
                                  sessions=SessionStore(db.connect(tmp_path / f"{i}{streamed}.db")))
                    fake.push(fixture(name), Reply("It is evening in Tokyo."))
                    shown = Shown() if streamed else None
                    reply = await agent(msg("what time is it in Tokyo?"), shown)
                    assert reply == "It is evening in Tokyo.", name
                    tool = next(m for m in fake.last_request.messages if m["role"] == "tool")
                    result = json.loads(tool["content"])  # the real server's answer
                    assert result["timezone"] == "Asia/Tokyo" and "datetime" in result, name
                    if shown is not None:
                        no_leak("".join(shown.ever))
                    fake.requests.clear()
        finally:
            await provider.aclose()


@pytest.mark.anyio
async def test_the_summariser_s_reasoning_is_not_stored(fake: FakeOpenAI, tmp_path: Path) -> None:
    from tests.test_agent import folding, settled

    agent = make_agent(fake, tmp_path, max_messages=6)
    async with folding(agent):
        for i in range(3):
            await agent(msg(f"m{i}"))
        fake.push(Reply("echo: m3"), Reply("<think>merge them</think>\nthey counted m0 to m3"))
        await agent(msg("m3"))
        await settled(agent)
    assert agent.sessions.summary("test:1") == "they counted m0 to m3"


@pytest.mark.parametrize("raw", [
    '{"a":' + "[" * 100_000 + "]" * 100_000 + "}",
    "[" * 100_000,
    '{"a": ' + "[" * 5_000,
])
def test_deeply_nested_arguments_are_refused_not_raised(raw: str) -> None:
    args, error = parse_arguments(raw)
    assert args is None
    assert "nested too deeply" in error
