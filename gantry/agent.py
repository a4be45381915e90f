"""One turn: assemble the prompt, call the model, run tool calls, loop, reply.

Bounded everywhere: TOOL_MAX_ITERATIONS rounds (then one last call without tools so the
user always gets a real answer), trimmed history, capped tool results. One turn at a
time per session; different sessions run concurrently.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from gantry import __version__
from gantry.channel.base import Inbound, ReplyStream
from gantry.prompt import assemble, system_text
from gantry.session import (
    SessionStore,
    collapse_tool_results,
    est_tokens,
    history_tokens,
    plan_trim,
    render_for_summary,
)
from gantry.tools import Registry
from gantry.wire.openai import (
    AssistantMessage,
    Completion,
    Message,
    SystemMessage,
    ToolDef,
    ToolMessage,
    UserMessage,
)

log = logging.getLogger("gantry.agent")

SUMMARY_MAX_CHARS = 2_000
FOLD_TARGET = 0.75  # trim to 75% of the caps when folding, so folds come in batches
CAP_NOTE = (
    "[gantry: the tool-call limit for this turn is reached. Answer the user now with what "
    "you have; do not call tools.]"
)
SUMMARISE = (
    "You maintain a running summary of a conversation between a user and an assistant. "
    "Merge the previous summary with the new transcript into one paragraph of at most 150 "
    "words. Keep names, decisions, commitments, open questions and facts about the user; "
    "drop chit-chat. Reply with the paragraph only."
)
HELP = (
    "Commands:\n/new — start a new conversation (memory is kept)\n"
    "/status — uptime, model, history size, tools\n/help — this text"
)


class Model(Protocol):
    """What the agent needs from the provider (gantry.provider.Provider satisfies it)."""

    model: str

    async def complete(
        self, messages: list[Message], tools: list[ToolDef] | None = None
    ) -> Completion: ...

    def stream(self, messages: list[Message], tools: list[ToolDef] | None = None) -> object: ...


MemoryBlock = Callable[[str, str], Awaitable[str]]


async def _no_memory(session_id: str, text: str) -> str:
    return ""


@dataclass
class Agent:
    model: Model
    sessions: SessionStore
    tools: Registry
    persona: Callable[[], str]
    max_messages: int = 200
    max_tokens: int = 128_000
    max_iterations: int = 20
    memory_block: MemoryBlock = _no_memory
    status_lines: list[Callable[[], str]] = field(default_factory=list)  # e.g. memory counts
    started: float = field(default_factory=time.monotonic)
    _locks: dict[str, anyio.Lock] = field(default_factory=dict)
    _inflight: int = 0
    _idle: anyio.Event | None = None

    # ------------------------------------------------------------------ entry point

    async def __call__(self, msg: Inbound, stream: ReplyStream | None = None) -> str:
        """The reply for one inbound message; never raises for model or tool trouble."""
        command = msg.text.strip().split(maxsplit=1)[0].lower() if msg.text.strip() else ""
        command = command.split("@", 1)[0]  # Telegram's /cmd@botname form
        lock = self._locks.setdefault(msg.session_id, anyio.Lock())
        async with lock:
            self._inflight += 1
            try:
                if command == "/new":
                    self.sessions.reset(msg.session_id)
                    log.info("session reset", extra={"session": msg.session_id})
                    return "Started a new conversation. (Long-term memory is unchanged.)"
                if command == "/status":
                    return self.status(msg.session_id)
                if command in ("/help", "/start"):
                    return HELP
                return await self._turn(msg.session_id, msg.text, stream)
            finally:
                self._inflight -= 1
                if self._inflight == 0 and self._idle is not None:
                    self._idle.set()

    @property
    def busy(self) -> bool:
        return self._inflight > 0

    async def wait_idle(self) -> None:
        """Return once no turn is in flight (for a graceful shutdown)."""
        while self._inflight:
            self._idle = anyio.Event()
            await self._idle.wait()

    def status(self, session_id: str) -> str:
        n, chars = self.sessions.stats(session_id)
        up = int(time.monotonic() - self.started)
        summary = "yes" if self.sessions.summary(session_id) else "no"
        lines = [
            f"gantry {__version__} · up {up // 3600}h {up % 3600 // 60}m {up % 60}s",
            f"model: {self.model.model}",
            f"history: {n} messages, ~{est_tokens(chars)} tokens (est.)",
            f"summary: {summary}",
            f"tools: {len(self.tools)}",
        ]
        for line in self.status_lines:
            try:
                lines.append(line())
            except Exception:
                log.exception("a /status line failed")
        return "\n".join(lines)

    # ------------------------------------------------------------------ the turn

    async def _turn(self, session_id: str, text: str, stream: ReplyStream | None) -> str:
        from gantry.provider import ProviderError

        started = time.monotonic()
        _ids, history = self.sessions.load(session_id)
        user = UserMessage(text)
        if not (history and history[-1] == user):  # a retried turn (restart) is recorded once
            self.sessions.append(session_id, [user])  # recorded first: never lost
            history.append(user)
        summary = self.sessions.summary(session_id)
        try:
            memory = await self.memory_block(session_id, text)
        except Exception:
            log.exception("memory hydration failed; continuing without it")
            memory = ""
        schemas = self.tools.schemas() or None
        new: list[Message] = []
        rounds = 0
        try:
            while True:
                capped = rounds >= self.max_iterations
                extra: list[Message] = [UserMessage(CAP_NOTE)] if capped else []
                prompt = assemble(
                    persona=self.persona(),
                    history=[*history, *new, *extra],
                    max_messages=self.max_messages,
                    max_tokens=self.max_tokens,
                    memory_block=memory,
                    summary=summary,
                )
                completion = await self._call(prompt.messages, None if capped else schemas, stream)
                if capped or not completion.tool_calls:
                    final = completion.text.strip() or "(the model returned an empty reply)"
                    break
                rounds += 1
                new.append(completion.to_message())
                for call in completion.tool_calls:
                    result = await self.tools.call(call.function.name, call.function.arguments)
                    new.append(ToolMessage(tool_call_id=call.id, content=result.text))
        except ProviderError as exc:
            log.error(
                "model call failed; turn ended",
                extra={"session": session_id, "status": exc.status, "error": str(exc)},
            )
            if stream is not None:
                await stream.discard()
            return f"Sorry — the model call failed ({exc}). Please try again."
        new.append(AssistantMessage(content=final))
        self.sessions.append(session_id, new)
        log.info(
            "turn done",
            extra={
                "session": session_id,
                "tool_rounds": rounds,
                "ms": round((time.monotonic() - started) * 1000),
                "prompt_tokens_est": prompt.est_tokens,
            },
        )
        await self._fold(session_id)
        return final

    async def _call(
        self, messages: list[Message], tools: list[ToolDef] | None, stream: ReplyStream | None
    ) -> Completion:
        from gantry.provider import Done, TextDelta

        if stream is None:
            return await self.model.complete(messages, tools)
        wrote = False
        completion: Completion | None = None
        async for event in self.model.stream(messages, tools):  # type: ignore[attr-defined]
            if isinstance(event, TextDelta):
                await stream.write(event.text)
                wrote = True
            elif isinstance(event, Done):
                completion = event.completion
        assert completion is not None, "a provider stream always ends with Done"
        if completion.tool_calls and wrote:
            await stream.discard()
        return completion

    # ------------------------------------------------------------------ rolling summary

    async def _fold(self, session_id: str) -> None:
        """Fold turns past the caps into the session summary, then delete them.

        If the summariser fails, nothing is deleted (the prompt is still trimmed in memory),
        unless the stored history has grown past twice the message cap.
        """
        from gantry.provider import ProviderError

        old = self.sessions.summary(session_id)
        overhead = est_tokens(len(system_text(self.persona(), "", old)))
        count, chars = self.sessions.stats(session_id)
        if count <= self.max_messages and est_tokens(chars) + overhead <= self.max_tokens:
            return  # cheap check first: raw size under the caps means nothing to fold
        ids, history = self.sessions.load(session_id)
        if len(history) <= self.max_messages and (
            history_tokens(collapse_tool_results(history)) + overhead <= self.max_tokens
        ):
            return
        plan = plan_trim(
            collapse_tool_results(history),
            max(2, int(self.max_messages * FOLD_TARGET)),
            max(0, int((self.max_tokens - overhead) * FOLD_TARGET)),
        )
        if not plan.dropped:
            return
        dropped_ids = [ids[i] for i in plan.dropped]
        transcript = render_for_summary([history[i] for i in plan.dropped])
        request: list[Message] = [
            SystemMessage(SUMMARISE),
            UserMessage(f"Previous summary:\n{old or '(none)'}\n\nNew transcript:\n{transcript}"),
        ]
        try:
            done = await self.model.complete(request, None)
        except ProviderError as exc:
            log.warning("summary failed; history kept", extra={"error": str(exc)})
            if len(history) > 2 * self.max_messages:
                self.sessions.delete(dropped_ids)
            return
        text = done.text.strip()[:SUMMARY_MAX_CHARS] or old
        self.sessions.fold(session_id, text, dropped_ids)
        log.info(
            "history folded into summary",
            extra={"session": session_id, "dropped": len(dropped_ids), "summary_chars": len(text)},
        )
