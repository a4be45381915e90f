"""Trimming properties: caps hold, tool results never orphaned, newest turns kept, pure."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gantry import db
from gantry.model.messages import (
    AssistantMessage,
    FunctionCall,
    Message,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from gantry.session import (
    SessionStore,
    collapse_tool_results,
    est_tokens,
    msg_chars,
    plan_trim,
)

text = st.text(alphabet="abc xyz\n", max_size=120)


@st.composite
def turns(draw: st.DrawFn) -> list[Message]:
    """A user message, then tool rounds, then (usually) a final assistant message."""
    out: list[Message] = [UserMessage(draw(text))]
    for r in range(draw(st.integers(0, 3))):
        n = draw(st.integers(1, 3))
        ids = [f"c{draw(st.integers(0, 10**6))}_{r}_{k}" for k in range(n)]
        out.append(
            AssistantMessage(
                content=draw(st.none() | text),
                tool_calls=[
                    ToolCall(id=i, function=FunctionCall("srv__t", draw(text))) for i in ids
                ],
            )
        )
        out += [ToolMessage(tool_call_id=i, content=draw(text)) for i in ids]
    if draw(st.booleans()):
        out.append(AssistantMessage(content=draw(text)))
    return out


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    msgs = [m for t in draw(st.lists(turns(), max_size=12)) for m in t]
    if draw(st.booleans()) and msgs:  # damage: drop a random message (crash mid-write)
        del msgs[draw(st.integers(0, len(msgs) - 1))]
    return msgs


def _valid_sequence(kept: list[Message]) -> None:
    """Every tool message answers a call of the assistant message right before its run."""
    pending: set[str] = set()
    for m in kept:
        if isinstance(m, ToolMessage):
            assert m.tool_call_id in pending, "orphan tool message"
            pending.discard(m.tool_call_id)
        else:
            assert not pending, "tool call without its result"
            if isinstance(m, AssistantMessage) and m.tool_calls:
                pending = {c.id for c in m.tool_calls}
    assert not pending


@given(histories(), st.integers(2, 60), st.integers(0, 400))
@settings(max_examples=400, deadline=None)
def test_trim_properties(history: list[Message], max_messages: int, max_tokens: int) -> None:
    plan = plan_trim(history, max_messages, max_tokens)
    kept = plan.apply(history)
    assert plan == plan_trim(history, max_messages, max_tokens)  # deterministic
    assert sorted(plan.keep + plan.dropped) == list(range(len(history)))
    _valid_sequence(kept)
    users = [i for i, m in enumerate(history) if isinstance(m, UserMessage)]
    if kept:
        assert isinstance(kept[0], UserMessage) or not users or users[0] > plan.keep[0]
    tokens = est_tokens(sum(msg_chars(m) for m in kept))
    lone_user = len(kept) == 1 and isinstance(kept[0], UserMessage)
    assert len(kept) <= max_messages
    assert tokens <= max_tokens or lone_user
    if users:
        assert users[-1] in plan.keep  # the message being answered is always there


@given(histories(), st.integers(2, 60), st.integers(0, 400))
@settings(max_examples=200, deadline=None)
def test_newest_whole_turns_kept_when_they_fit(
    history: list[Message], max_messages: int, max_tokens: int
) -> None:
    """Protection: if the last two turns fit the caps on their own, both survive whole."""
    full = plan_trim(history, 10**6, 10**9)  # sanitised history, nothing trimmed
    clean = full.keep
    starts = [i for i in clean if isinstance(history[i], UserMessage)]
    if len(starts) < 2:
        return
    last_two = [i for i in clean if i >= starts[-2]]
    size = est_tokens(sum(msg_chars(history[i]) for i in last_two))
    if len(last_two) <= max_messages and size <= max_tokens:
        assert set(last_two) <= set(plan_trim(history, max_messages, max_tokens).keep)


def test_trim_drops_oldest_whole_turns() -> None:
    h: list[Message] = []
    for k in range(5):
        h += [UserMessage(f"q{k}" * 10), AssistantMessage(content=f"a{k}" * 10)]
    plan = plan_trim(h, max_messages=4, max_tokens=10_000)
    assert [m.content for m in plan.apply(h)] == ["q3" * 10, "a3" * 10, "q4" * 10, "a4" * 10]


def _six_calls(h: list[Message]) -> None:
    for k in range(6):
        h.append(
            AssistantMessage(tool_calls=[ToolCall(f"id{k}", FunctionCall("gmail__search", "{}"))])
        )
        h.append(ToolMessage(tool_call_id=f"id{k}", content="x" * (100 + k)))


def test_collapse_keeps_last_four_tool_results_of_earlier_turns() -> None:
    h: list[Message] = [UserMessage("go")]
    _six_calls(h)
    h += [AssistantMessage(content="found them"), UserMessage("thanks")]
    out = collapse_tool_results(h)
    tools = [m for m in out if isinstance(m, ToolMessage)]
    assert tools[0].content == "[tool gmail__search: 100 chars, truncated]"
    assert tools[1].content == "[tool gmail__search: 101 chars, truncated]"
    assert [t.content for t in tools[2:]] == ["x" * (100 + k) for k in range(2, 6)]
    assert h[2] == ToolMessage(tool_call_id="id0", content="x" * 100)  # input untouched


def test_collapse_never_touches_the_turn_in_progress() -> None:
    h: list[Message] = [UserMessage("go")]
    _six_calls(h)  # six results and no answer yet: the model still needs all of them
    assert collapse_tool_results(h) == h
    h.append(UserMessage("[gantry: the tool-call limit is reached]"))  # a cap note
    assert collapse_tool_results(h) == h


@given(histories(), st.integers(0, 6))
@settings(max_examples=200, deadline=None)
def test_collapse_properties(history: list[Message], keep_last: int) -> None:
    """Only earlier turns' tool results change, each to one line; the rest is untouched."""
    out = collapse_tool_results(history, keep_last)
    start = max((i + 1 for i, m in enumerate(history)
                 if isinstance(m, AssistantMessage) and not m.tool_calls), default=0)
    assert len(out) == len(history)
    assert out[start:] == list(history[start:])
    changed = [i for i, (a, b) in enumerate(zip(history, out, strict=True)) if a != b]
    earlier = [i for i, m in enumerate(history[:start]) if isinstance(m, ToolMessage)]
    assert all(isinstance(history[i], ToolMessage) and i < start for i in changed)
    assert set(earlier[len(earlier) - keep_last:] if keep_last else []).isdisjoint(changed)


def test_store_roundtrip_fold_reset(tmp_path: Path) -> None:
    store = SessionStore(db.connect(tmp_path / "gantry.db"))
    msgs: list[Message] = [
        UserMessage("hi"),
        AssistantMessage(tool_calls=[ToolCall("c1", FunctionCall("t__x", '{"a": 1}'))]),
        ToolMessage(tool_call_id="c1", content="result"),
        AssistantMessage(content="done"),
    ]
    store.append("stdio:a", msgs)
    store.append("stdio:b", [UserMessage("other")])
    ids, loaded = store.load("stdio:a")
    assert loaded == msgs and len(ids) == 4
    assert store.stats("stdio:a") == (4, sum(msg_chars(m) for m in msgs))
    store.fold("stdio:a", "they said hi", ids[:2])
    assert store.summary("stdio:a") == "they said hi"
    assert store.load("stdio:a")[1] == msgs[2:]
    store.reset("stdio:a")
    assert store.load("stdio:a") == ([], []) and store.summary("stdio:a") == ""
    assert store.load("stdio:b")[1] == [UserMessage("other")]
