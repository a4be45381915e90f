"""Folding a reply into one Completion: stream chunks, tool-call fragments, a JSON body (pure).

Everything here can be tested against recorded provider bytes: each provider sends tool
calls in its own fragments, and they all come out as the same `Completion`.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from gantry.model.ledger import Charge
from gantry.model.messages import AssistantMessage, FunctionCall, ToolCall, content_text, encode
from gantry.model.wire import ChatChunk, ChatResponse, ResponseMessage, ToolCallDelta, Usage

__all__ = [
    "Completion",
    "StreamAssembler",
    "ToolCallAssembler",
    "completion_from_response",
    "new_call_id",
]


class Completion(msgspec.Struct):
    """One assembled assistant turn, the same whether it was streamed or not.

    Branch on `tool_calls`, not `finish_reason`: Gemini streams tool calls with "stop".
    `finish_reason` is normalised to "tool_calls" when calls are present. `reasoning` (sent
    apart from the content) is never replayed: `to_message` leaves it out. `model` and
    `endpoint` name who answered (set by the Provider that did: fallbacks may differ).
    """

    text: str = ""
    tool_calls: list[ToolCall] = []
    finish_reason: str | None = None
    usage: Usage | None = None
    reasoning: str = ""
    model: str = ""  # the model that answered (set by the Provider)
    endpoint: str = ""  # its base URL, without credentials
    reply_id: str | None = None  # the server's id of the reply
    charge: Charge | None = None  # its usage row, closed where the reply is stored (ledger)

    def to_message(self) -> AssistantMessage:
        """The history entry for this turn (keeps tool-call metadata for replay)."""
        return AssistantMessage(
            content=self.text or None,
            tool_calls=list(self.tool_calls) or None,
        )


class _Slot:
    __slots__ = ("args", "extra", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.args = ""
        self.extra: dict[str, Any] | None = None


def _merge(into: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    out = dict(into or {})
    for key, value in new.items():
        old = out.get(key)
        out[key] = (
            _merge(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
        )
    return out


def new_call_id() -> str:
    """A call id for a call that came without one (or was printed as text)."""
    return "call_" + uuid.uuid4().hex[:24]


class ToolCallAssembler:
    """Builds complete ToolCalls from stream fragments, tolerating every provider's habits.

    - OpenAI/vLLM/llama.cpp: `index` on every fragment, `id`/`name` on the first only.
    - Some servers repeat `id`/`name` on every fragment, or reuse index 0 for every call
      (a different id at a known index therefore starts a new call).
    - Gemini omits `index` (and sends `id: ""`); calls come whole, arguments may follow in
      indexless fragments, `extra_content` may come as a metadata-only fragment.
      Without an index, a new id (or a new name when the last call already has one) starts a
      new call; anything else continues the last call.
    """

    def __init__(self) -> None:
        self._slots: list[_Slot] = []
        self._by_index: dict[int, _Slot] = {}
        self._by_id: dict[str, _Slot] = {}

    def add(self, frag: ToolCallDelta) -> None:
        """Fold one fragment in."""
        call_id = frag.id or ""
        name = (frag.function.name if frag.function else None) or ""
        slot: _Slot | None = None
        if frag.index is not None:
            slot = self._by_index.get(frag.index)
            if slot is not None and call_id and slot.id and call_id != slot.id:
                slot = None
        elif call_id:
            slot = self._by_id.get(call_id)
        elif self._slots:
            last = self._slots[-1]
            if not (name and last.name):
                slot = last
        if slot is None:
            slot = _Slot()
            self._slots.append(slot)
        if frag.index is not None:
            self._by_index[frag.index] = slot
        if call_id:
            slot.id = slot.id or call_id
            self._by_id[call_id] = slot
        if name and not slot.name:
            slot.name = name
        args = frag.function.arguments if frag.function else None
        if isinstance(args, dict):
            slot.args = encode(args).decode()
        elif args:
            slot.args += args
        if frag.extra_content:
            slot.extra = _merge(slot.extra, frag.extra_content)

    def result(self) -> list[ToolCall]:
        """The calls in arrival order; missing ids are generated, empty arguments become `{}`."""
        calls: list[ToolCall] = []
        for slot in self._slots:
            if not slot.name and not slot.args:
                continue  # metadata-only noise with nothing to call
            calls.append(
                ToolCall(
                    id=slot.id or new_call_id(),
                    function=FunctionCall(name=slot.name, arguments=slot.args.strip() or "{}"),
                    extra_content=slot.extra,
                )
            )
        return calls


def _finish(reason: str | None, calls: list[ToolCall]) -> str | None:
    if calls and reason in (None, "stop"):
        return "tool_calls"
    return reason


class StreamAssembler:
    """Folds decoded chunks into text deltas and, at the end, one Completion."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._calls = ToolCallAssembler()
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.reply_id: str | None = None

    @property
    def finished(self) -> bool:
        """True once a finish_reason arrived (the reply is complete even if [DONE] is lost)."""
        return self.finish_reason is not None

    @property
    def text_length(self) -> int:
        """Characters of text received so far."""
        return sum(len(t) for t in self._text)

    def add(self, chunk: ChatChunk) -> str:
        """Fold a chunk in; return the text it added ("" if none)."""
        if chunk.usage is not None:
            self.usage = chunk.usage
        if chunk.id and self.reply_id is None:
            self.reply_id = chunk.id
        added: list[str] = []
        for choice in chunk.choices or ():
            if choice.index not in (0, None):
                continue
            delta = choice.delta
            if delta is not None:
                text = content_text(delta.content)
                if text:
                    added.append(text)
                thought = delta.reasoning_content or delta.reasoning
                if thought:
                    self._reasoning.append(thought)
                for frag in delta.tool_calls or ():
                    self._calls.add(frag)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
        text = "".join(added)
        if text:
            self._text.append(text)
        return text

    def result(self) -> Completion:
        """The assembled turn."""
        calls = self._calls.result()
        return Completion(
            text="".join(self._text),
            tool_calls=calls,
            finish_reason=_finish(self.finish_reason, calls),
            usage=self.usage,
            reasoning="".join(self._reasoning),
            reply_id=self.reply_id,
        )


def completion_from_response(response: ChatResponse) -> Completion:
    """The Completion of a non-streamed reply; raises ValueError when it has no choice."""
    choice = next((c for c in response.choices or () if c.index in (0, None)), None)
    if choice is None:
        raise ValueError("the reply has no choices")
    message = choice.message or ResponseMessage()
    assembler = ToolCallAssembler()
    for position, call in enumerate(message.tool_calls or ()):
        # Non-streamed calls are each complete: key them by position, whatever they carry.
        assembler.add(
            ToolCallDelta(
                index=position,
                id=call.id,
                function=call.function,
                extra_content=call.extra_content,
            )
        )
    calls = assembler.result()
    return Completion(
        text=content_text(message.content),
        tool_calls=calls,
        finish_reason=_finish(choice.finish_reason, calls),
        usage=response.usage,
        reasoning=message.reasoning_content or message.reasoning or "",
        reply_id=response.id,
    )
