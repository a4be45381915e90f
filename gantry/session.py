"""Bounded per-session history: a pure trimming core and its SQLite store.

Token counts are estimates (characters / 4) and are labelled "est." wherever shown.
Trimming drops whole turns, oldest first, and never separates an assistant tool-call
message from its tool results: an orphan tool message is a 400 on OpenAI-compatible APIs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from gantry.model.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
    decode_messages,
    encode,
)
from gantry.steer import is_followup

KEEP_TOOL_RESULTS = 4
STOPPED_RESULT = "error: the user stopped the turn before this call finished"
CANCELLED_RESULT = ("error: cancelled: the user stopped the turn while this call ran; the "
                    "tool's server was told to stop, and any result it sends is not used")
STOPPED_ANSWER = "(the user stopped this turn before it was answered)"
"""Closes a stopped turn in the history: the model sees that it was stopped, and the turn
ends like any other (so the next message is not taken for a retry of it)."""


IMAGE_TOKENS_EST = 800
"""What one image is counted as against HISTORY_MAX_TOKENS (est.): about what OpenAI bills a
photo of Telegram's usual size (1280 px) at high detail. Providers differ; it is a label,
not a measurement."""
IMAGE_CHARS = IMAGE_TOKENS_EST * 4  # in the chars/4 currency of the estimate


def msg_chars(m: Message) -> int:
    """Characters the model reads for a message: content plus tool-call names and arguments;
    an image counts as IMAGE_CHARS (its base64 is never counted, nor shown)."""
    if isinstance(m, UserMessage):
        return len(m.text) + IMAGE_CHARS * len(m.images)
    n = len(m.content or "")
    if isinstance(m, AssistantMessage):
        for call in m.tool_calls or ():
            n += len(call.function.name) + len(call.function.arguments)
    return n


def est_tokens(chars: int) -> int:
    """The chars/4 estimate, rounded up."""
    return (chars + 3) // 4


def history_tokens(history: Sequence[Message]) -> int:
    return est_tokens(sum(msg_chars(m) for m in history))


def _groups(history: Sequence[Message]) -> list[list[int]]:
    """Indices grouped into units that must stay together; broken units are left out.

    A unit is a user message, a plain assistant message, or an assistant tool-call
    message followed by exactly its tool results. System messages don't belong in history.
    """
    out: list[list[int]] = []
    i = 0
    while i < len(history):
        m = history[i]
        if isinstance(m, UserMessage) or (isinstance(m, AssistantMessage) and not m.tool_calls):
            out.append([i])
            i += 1
        elif isinstance(m, AssistantMessage):
            wanted = {c.id for c in m.tool_calls or ()}
            unit = [i]
            j = i + 1
            while j < len(history) and isinstance(history[j], ToolMessage):
                tm = history[j]
                assert isinstance(tm, ToolMessage)
                if tm.tool_call_id in wanted:
                    wanted.discard(tm.tool_call_id)
                    unit.append(j)
                j += 1
            if not wanted:
                out.append(unit)
            i = j
        else:  # stray tool or system message
            i += 1
    return out


def _turns(groups: list[list[int]], history: Sequence[Message]) -> list[list[list[int]]]:
    """Units grouped into turns; a turn starts at each user message (not at a follow-up
    folded into the turn before it: gantry.steer)."""
    turns: list[list[list[int]]] = []
    for g in groups:
        first = history[g[0]]
        if (isinstance(first, UserMessage) and not is_followup(first)) or not turns:
            turns.append([g])
        else:
            turns[-1].append(g)
    return turns


@dataclass(frozen=True)
class Trim:
    """Which messages of a history survive the caps (`keep`, ascending indices)."""

    keep: list[int]
    dropped: list[int]

    def apply(self, history: Sequence[Message]) -> list[Message]:
        return [history[i] for i in self.keep]


def plan_trim(history: Sequence[Message], max_messages: int, max_tokens: int) -> Trim:
    """Keep the newest whole turns that fit both caps; the rest is dropped.

    If even the newest turn does not fit, keep its user message and as many of its newest
    units as fit. The newest user message is always kept, even alone over the token cap:
    the model must see what it is answering. Pure and deterministic.
    """
    turns = _turns(_groups(history), history)
    chars = [msg_chars(m) for m in history]

    def cost(units: list[list[int]]) -> tuple[int, int]:
        idx = [i for u in units for i in u]
        return len(idx), sum(chars[i] for i in idx)

    kept: list[list[int]] = []
    n_msgs, n_chars = 0, 0
    for turn in reversed(turns):
        m, c = cost(turn)
        if n_msgs + m > max_messages or est_tokens(n_chars + c) > max_tokens:
            break
        kept = turn + kept
        n_msgs, n_chars = n_msgs + m, n_chars + c
    if not kept and turns:
        newest = turns[-1]
        forced = isinstance(history[newest[0][0]], UserMessage)
        head, rest = (newest[:1], newest[1:]) if forced else ([], newest)
        kept_rest: list[list[int]] = []
        n_msgs, n_chars = cost(head)
        for unit in reversed(rest):
            m, c = cost([unit])
            if n_msgs + m > max_messages or est_tokens(n_chars + c) > max_tokens:
                break
            kept_rest.insert(0, unit)
            n_msgs, n_chars = n_msgs + m, n_chars + c
        kept = [*head, *kept_rest]
    keep = sorted(i for u in kept for i in u)
    keep_set = set(keep)
    return Trim(keep, [i for i in range(len(history)) if i not in keep_set])


def unanswered_calls(history: Sequence[Message]) -> list[ToolCall]:
    """The newest tool-call message's calls that have no result recorded yet (a resumed turn
    runs them; a stopped turn answers them as stopped)."""
    for i in range(len(history) - 1, -1, -1):
        m = history[i]
        if isinstance(m, AssistantMessage) and m.tool_calls:
            done = {t.tool_call_id for t in history[i + 1 :] if isinstance(t, ToolMessage)}
            return [c for c in m.tool_calls if c.id not in done]
        if isinstance(m, UserMessage):
            return []
    return []


def current_turn_start(history: Sequence[Message]) -> int:
    """Index where the turn in progress begins: just past the last final answer.

    Every finished turn ends with an assistant message without tool calls; whatever follows
    it (the user message, tool rounds, a cap note) belongs to the turn being answered.
    """
    for i in range(len(history) - 1, -1, -1):
        m = history[i]
        if isinstance(m, AssistantMessage) and not m.tool_calls:
            return i + 1
    return 0


def collapse_tool_results(
    history: Sequence[Message], keep_last: int = KEEP_TOOL_RESULTS
) -> list[Message]:
    """Tool results of earlier turns, past the last `keep_last` of them, become one line each.

    Results of the turn in progress are never collapsed: the model is still working with
    them, however many calls the turn makes (pure).
    """
    start = current_turn_start(history)
    tool_idx = [i for i, m in enumerate(history[:start]) if isinstance(m, ToolMessage)]
    old = set(tool_idx[:-keep_last] if keep_last > 0 else tool_idx)
    if not old:
        return list(history)
    names: dict[str, str] = {}
    for m in history:
        if isinstance(m, AssistantMessage):
            for c in m.tool_calls or ():
                names[c.id] = c.function.name
    out: list[Message] = []
    for i, m in enumerate(history):
        if i in old and isinstance(m, ToolMessage):
            name = names.get(m.tool_call_id, "unknown")
            line = f"[tool {name}: {len(m.content)} chars, truncated]"
            out.append(ToolMessage(tool_call_id=m.tool_call_id, content=line))
        else:
            out.append(m)
    return out


def render_for_summary(messages: Sequence[Message]) -> str:
    """A plain transcript of dropped turns for the summariser (tool output clipped)."""
    lines: list[str] = []
    for m in messages:
        if isinstance(m, UserMessage):
            shown = "".join(f" [image {n}]" for n in range(1, len(m.images) + 1))
            lines.append(f"User: {m.text}{shown}")
        elif isinstance(m, AssistantMessage):
            if m.content:
                lines.append(f"Assistant: {m.content}")
            for c in m.tool_calls or ():
                lines.append(f"Assistant called {c.function.name}({c.function.arguments[:200]})")
        elif isinstance(m, ToolMessage):
            body = m.content if len(m.content) <= 400 else m.content[:400] + "…"
            lines.append(f"Tool result: {body}")
    return "\n".join(lines)


class SessionStore:
    """History rows and the rolling summary, per session id (`<channel>:<chat>`)."""

    def __init__(self, conn: object) -> None:
        self.conn = conn

    def _exec(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        return list(self.conn.execute(sql, params))  # type: ignore[attr-defined]

    def load(self, session_id: str) -> tuple[list[int], list[Message]]:
        """(row ids, messages) oldest first."""
        rows = self._exec(
            "SELECT id, body FROM session_message WHERE session_id = ? ORDER BY id", (session_id,)
        )
        if not rows:
            return [], []
        ids = [int(r[0]) for r in rows]  # type: ignore[call-overload]
        msgs = decode_messages(b"[" + b",".join(str(r[1]).encode() for r in rows) + b"]")
        return ids, msgs

    def append(self, session_id: str, messages: Sequence[Message]) -> None:
        """Append messages in one transaction (a turn is recorded whole or not at all)."""
        now = time.time()
        with self.conn:  # type: ignore[attr-defined]
            for m in messages:
                if isinstance(m, SystemMessage):
                    continue
                role = type(m).__name__.removesuffix("Message").lower()
                self._exec(
                    "INSERT INTO session_message (session_id, role, body, chars, created_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (session_id, role, encode(m).decode(), msg_chars(m), now),
                )

    def atomic(self) -> AbstractContextManager[object]:
        """One transaction around several writes (nested ones become savepoints)."""
        return self.conn  # type: ignore[return-value]

    def delete(self, ids: Sequence[int]) -> None:
        with self.conn:  # type: ignore[attr-defined]
            for i in ids:
                self._exec("DELETE FROM session_message WHERE id = ?", (i,))

    def summary(self, session_id: str) -> str:
        rows = self._exec(
            "SELECT summary FROM session_summary WHERE session_id = ?", (session_id,)
        )
        return str(rows[0][0]) if rows else ""

    def fold(self, session_id: str, summary: str, dropped_ids: Sequence[int]) -> bool:
        """Replace the summary and delete the turns it now covers, atomically.

        False (and nothing changed) if any of those turns is gone already: the session was
        reset or folded while the summary was being written, so the summary is stale.
        """
        with self.conn:  # type: ignore[attr-defined]
            present = 0
            for i in dropped_ids:
                present += len(self._exec(
                    "SELECT 1 FROM session_message WHERE id = ? AND session_id = ?",
                    (i, session_id)))
            if present != len(dropped_ids):
                return False
            self._exec(
                "INSERT INTO session_summary (session_id, summary, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (session_id) DO UPDATE SET summary = excluded.summary, "
                "updated_at = excluded.updated_at",
                (session_id, summary, time.time()),
            )
            for i in dropped_ids:
                self._exec("DELETE FROM session_message WHERE id = ?", (i,))
        return True

    def settle_stopped(self, session_id: str, text: str) -> bool:
        """Close the stopped turn that `text` began (its text: a message with images is
        matched by its text parts), if the history holds it open: its calls
        without a result get one saying so (the model never sees a call unanswered), then
        STOPPED_ANSWER ends the turn. One transaction; False if there was nothing to close
        (stopped before its message was recorded)."""
        _ids, history = self.load(session_id)
        tail = history[current_turn_start(history):]
        users = [m for m in tail if isinstance(m, UserMessage) and not is_followup(m)]
        if not users or users[-1].text != text:
            return False
        closing: list[Message] = [ToolMessage(tool_call_id=c.id, content=STOPPED_RESULT)
                                  for c in unanswered_calls(history)]
        self.append(session_id, [*closing, AssistantMessage(content=STOPPED_ANSWER)])
        return True

    def reset(self, session_id: str) -> None:
        """`/new`: forget the conversation (memory is untouched)."""
        with self.conn:  # type: ignore[attr-defined]
            self._exec("DELETE FROM session_message WHERE session_id = ?", (session_id,))
            self._exec("DELETE FROM session_summary WHERE session_id = ?", (session_id,))

    def stats(self, session_id: str) -> tuple[int, int]:
        """(messages, chars) stored for the session."""
        row = self._exec(
            "SELECT count(*), coalesce(sum(chars), 0) FROM session_message WHERE session_id = ?",
            (session_id,),
        )[0]
        return int(row[0]), int(row[1])  # type: ignore[call-overload]
