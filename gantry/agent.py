"""One turn: assemble the prompt, call the model, run tool calls, loop, reply.

Bounded everywhere: TOOL_MAX_ITERATIONS rounds (then one last call without tools so the
user always gets a real answer), trimmed history, capped tool results. One turn at a
time per session; different sessions run concurrently.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from typing import Any, Protocol

import anyio
import msgspec

from gantry import __version__, elicit
from gantry.channel.base import Inbound, ReplyStream, TurnFailed, unknown_command
from gantry.commands import CommandHandler, dispatch
from gantry.model.assemble import Completion, new_call_id
from gantry.model.budget import BudgetReached
from gantry.model.gate import StreamGate
from gantry.model.ledger import Tab, attributed, count_as, uncount
from gantry.model.messages import (
    AssistantMessage,
    FunctionCall,
    ImagePart,
    Message,
    SystemMessage,
    ToolCall,
    ToolDef,
    ToolMessage,
    UserMessage,
    encode,
    user_content,
)
from gantry.model.salvage import parse_arguments, printed_calls, split_reasoning
from gantry.model.vision import (
    EARLIER,
    NO_VISION_NOTICE,
    has_images,
    rejects_images,
    without_images,
)
from gantry.prompt import assemble, system_text, time_footer
from gantry.session import (
    CANCELLED_RESULT,
    SessionStore,
    collapse_tool_results,
    current_turn_start,
    est_tokens,
    history_tokens,
    plan_trim,
    render_for_summary,
    unanswered_calls,
)
from gantry.steer import Steer, fold, is_followup
from gantry.tools import CALLER, Offer, Registry, offered
from gantry.turns import recorded_call, tool_call

log = logging.getLogger("gantry.agent")

SUMMARY_MAX_CHARS = 2_000
FOLD_TARGET = 0.75  # trim to 75% of the caps when folding, so folds come in batches
CAP_NOTE = (
    "[gantry: the tool-call limit for this turn is reached. Answer the user now with what "
    "you have; do not call tools.]"
)
NUDGE = (
    "[gantry: your last reply had no text for the user. Answer the user now, in plain text; "
    "do not call tools.]"
)
NO_ANSWER = (
    "Sorry — I could not put an answer together this time. Please ask again, perhaps in "
    "other words."
)
SUMMARISE = (
    "You maintain a running summary of a conversation between a user and an assistant. "
    "Merge the previous summary with the new transcript into one paragraph of at most 150 "
    "words. Keep names, decisions, commitments, open questions and facts about the user; "
    "drop chit-chat. Reply with the paragraph only."
)
NO_LEDGER = "Usage is not recorded in this setup."
TURN_FAILED = "Sorry — something went wrong while answering. Please try again."
HELP = (
    "Commands:\n/new — start a new conversation (memory is kept)\n"
    "/status — uptime, model, history size, tools\n"
    "/usage [today|month|7d] — model calls, tokens and cost (private chats)\n"
    "/stop — stop the reply being written (also /cancel)\n"
    "/decline — decline an MCP server's question (/cancel cancels it)\n/help — this text"
)


def help_text(lines: Iterable[str]) -> str:
    """HELP with the other commands' lines (gantry.commands) before its last line."""
    head, _, last = HELP.rpartition("\n")
    return "\n".join([head, *lines, last])


class Model(Protocol):
    """What the agent needs from the provider (gantry.model.client.Provider satisfies it)."""

    model: str

    async def complete(
        self, messages: list[Message], tools: list[ToolDef] | None = None
    ) -> Completion: ...

    def stream(self, messages: list[Message], tools: list[ToolDef] | None = None) -> object: ...


MemoryBlock = Callable[[str, str], Awaitable[str]]


async def _no_memory(session_id: str, text: str) -> str:
    return ""


def resume_point(history: Sequence[Message], user: UserMessage) -> int | None:
    """Tool rounds already recorded for `user`'s turn, if this is that turn retried; else None.

    A turn is being retried when the newest user message is `user` and nothing after it is a
    final answer: only tool-call messages and their results, recorded round by round, and
    the follow-ups folded in between them.
    """
    for i in range(len(history) - 1, -1, -1):
        m = history[i]
        if isinstance(m, UserMessage) and m != user and is_followup(m):
            continue  # folded into the turn (gantry.steer): the turn goes on past it
        if isinstance(m, UserMessage):
            if m != user:
                return None
            after = history[i + 1 :]
            if any(isinstance(a, AssistantMessage) and not a.tool_calls for a in after):
                return None
            return sum(isinstance(a, AssistantMessage) for a in after)
        if isinstance(m, AssistantMessage) and not m.tool_calls:
            return None
    return None


def ordered_results(history: Sequence[Message]) -> list[Message]:
    """Tool results put back in their call message's order (they are recorded as they finish)."""
    out: list[Message] = []
    i = 0
    while i < len(history):
        m = history[i]
        out.append(m)
        i += 1
        if isinstance(m, AssistantMessage) and m.tool_calls:
            j = i
            while j < len(history) and isinstance(history[j], ToolMessage):
                j += 1
            order = {c.id: n for n, c in enumerate(m.tool_calls)}
            block = history[i:j]
            out += sorted(block, key=lambda t: order.get(getattr(t, "tool_call_id", ""), 1 << 30))
            i = j
    return out


ROUTING_CONTEXT_TURNS = 2  # earlier user messages ranked with the current one


def _earlier_user_texts(history: Sequence[Message], count: int) -> list[str]:
    """The `count` user messages before the newest one, newest first (for tool routing)."""
    texts = [m.text for m in history if isinstance(m, UserMessage)]
    return texts[-count - 1 : -1][::-1]


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
    tool_status: Callable[[], list[str]] | None = None  # one line per MCP server for /status
    router: Any = None  # gantry.mcp.routing.Router when MCP servers are configured
    status_lines: list[Callable[[str], str]] = field(default_factory=list)  # cron
    # memory: the owner's private data, left out of a group chat's /status
    private_status_lines: list[Callable[[str], str]] = field(default_factory=list)
    outbox: Any = None  # gantry.outbox.Outbox: files tools returned, for send_attachment
    model_status: Callable[[], str] | None = None  # the /status model line (fallbacks)
    # LLM_FALLBACK_NOTICE: a line for a reply a fallback model wrote ("" for the primary's)
    model_notice: Callable[[Completion], str] | None = None
    usage: Callable[[str, bool], str] | None = None  # /usage (gantry.model.usage_view.reply)
    zone: tzinfo = UTC  # the user's zone (CRON_TZ): the time footer of every turn is in it
    # after the persona in the system prompt, given `shared` (skills' listing: gantry.skills)
    prompt_blocks: list[Callable[[bool], str]] = field(default_factory=list)
    # /skills, /<skill> … (gantry.skills), /prompts, /prompt (gantry.slash)
    commands: list[CommandHandler] = field(default_factory=list)
    clock: Callable[[], float] = time.time  # wall time for the footer (tests fix it)
    started: float = field(default_factory=time.monotonic)
    # session → (lock, turns holding or waiting for it); dropped at zero, so it stays small
    _locks: dict[str, tuple[anyio.Lock, int]] = field(default_factory=dict)
    _inflight: int = 0
    _idle: anyio.Event | None = None
    _fold_wanted: dict[str, None] = field(default_factory=dict)  # sessions to fold, in order
    _fold_wake: anyio.Event | None = None
    _folding: bool = False

    # ------------------------------------------------------------------ entry point

    async def __call__(self, msg: Inbound, stream: ReplyStream | None = None) -> str:
        """The reply for one inbound message. Never raises (cancellation aside): any failure
        is logged with its traceback and answered with a short apology, except that a
        scheduled message's failure raises TurnFailed (the scheduler records it instead)."""
        sid = msg.session_id
        lock, users = self._locks.get(sid) or (anyio.Lock(), 0)
        self._locks[sid] = (lock, users + 1)
        try:
            async with lock:
                self._inflight += 1
                try:
                    return await self._answer(msg, stream)
                finally:
                    self._inflight -= 1
                    if self._inflight == 0 and self._idle is not None:
                        self._idle.set()
        finally:
            lock, users = self._locks[sid]
            if users <= 1:
                del self._locks[sid]
            else:
                self._locks[sid] = (lock, users - 1)

    async def _answer(self, msg: Inbound, stream: ReplyStream | None) -> str:
        command = msg.text.strip().split(maxsplit=1)[0].lower() if msg.text.strip() else ""
        command = command.split("@", 1)[0]  # Telegram's /cmd@botname form
        caller = CALLER.set(msg.session_id)
        asker = elicit.TURN.set(elicit.Caller(msg.channel, msg.chat_id, msg.user_id,
                                              group=msg.group, scheduled=msg.scheduled))
        counted = count_as(msg.source or "chat", msg.session_id)
        try:
            if command == "/new":
                self.sessions.reset(msg.session_id)
                log.info("session reset", extra={"session": msg.session_id})
                return "Started a new conversation. (Long-term memory is unchanged.)"
            if command == "/status":
                return self.status(msg.session_id, shared=msg.group)
            if command == "/usage":
                return self.usage(msg.text, msg.group) if self.usage else NO_LEDGER
            if command in ("/help", "/start"):
                return help_text(line for c in self.commands for line in c.help)
            if not msg.scheduled and (handled := await dispatch(self.commands, msg)):
                if handled.reply is not None:
                    return handled.reply
                msg = msgspec.structs.replace(msg, text=handled.text,
                                              images=handled.images or msg.images)
            elif not msg.scheduled and (unknown := unknown_command(msg.text)) is not None:
                return unknown
            due = msg.scheduled_for if msg.scheduled else None
            return await self._turn(msg.session_id, msg.text, stream, shared=msg.group,
                                    on_answer=msg.on_answer, scheduled_for=due,
                                    images=msg.images, steer=msg.steer,
                                    context=msg.context)
        except TurnFailed as exc:
            if msg.scheduled:
                raise
            return exc.reply
        except BudgetReached as exc:  # the scheduler records it skipped; a person reads why
            await _quiet_discard(stream)
            if msg.scheduled:
                raise
            return exc.notice
        except Exception as exc:
            from gantry.store.space import full_error, is_full

            if is_full(exc):  # not the message's fault: the channel waits for space, retries
                await _quiet_discard(stream)
                raise full_error(self.sessions.conn) from None
            log.exception("turn failed", extra={"session": msg.session_id})
            await _quiet_discard(stream)
            if msg.scheduled:
                raise TurnFailed(f"turn failed ({type(exc).__name__})", TURN_FAILED) from None
            return TURN_FAILED
        finally:
            uncount(counted)
            elicit.TURN.reset(asker)
            CALLER.reset(caller)

    @property
    def busy(self) -> bool:
        return self._inflight > 0

    async def wait_idle(self) -> None:
        """Return once no turn is in flight (for a graceful shutdown)."""
        while self._inflight:
            self._idle = anyio.Event()
            await self._idle.wait()

    def status(self, session_id: str, *, shared: bool = False) -> str:
        """The /status text; `shared` (a group chat, read by others) shows the tools a group
        turn is offered and says memory is not used instead of counting the owner's rows."""
        n, chars = self.sessions.stats(session_id)
        up = int(time.monotonic() - self.started)
        summary = "yes" if self.sessions.summary(session_id) else "no"
        lines = [
            f"gantry {__version__} · up {up // 3600}h {up % 3600 // 60}m {up % 60}s",
            f"model: {self.model_status() if self.model_status else self.model.model}",
            f"history: {n} messages, ~{est_tokens(chars)} tokens (est.)",
            f"summary: {summary}",
            self._shown_offer(session_id, shared).summary(),
        ]
        lines += [f"mcp {line}" for line in (self.tool_status() if self.tool_status else [])]
        if self.router is not None:
            lines.append(self.router.status(session_id))
        private = self.private_status_lines
        for line in self.status_lines if shared else [*self.status_lines, *private]:
            try:
                lines.append(line(session_id))
            except Exception:
                log.exception("a /status line failed")
        if shared and private:
            lines.append("memory: not used in group chats")
        return "\n".join(lines)

    # ------------------------------------------------------------------ the turn

    async def _turn(
        self, session_id: str, text: str, stream: ReplyStream | None, *, shared: bool = False,
        on_answer: Callable[[str], None] | None = None, scheduled_for: float | None = None,
        images: Sequence[ImagePart] = (), steer: Steer | None = None, context: str = "",
    ) -> str:
        """One turn; `shared` (a group chat, read by others) leaves long-term memory out of
        the prompt and its tools out of the offer, and refuses them if called anyway.

        `on_answer` (the channel's record of the reply) commits with the final answer;
        `scheduled_for` (unix seconds) marks a turn the scheduler started, due then.
        `images` go with `text` as content parts of the user message; `steer` gives the
        follow-ups folded in after each tool round (gantry.steer); `context` (the
        channel's, Inbound.context) goes in the footer, where per-turn text goes.
        """
        from gantry.model.errors import ProviderError

        started = time.monotonic()
        _ids, history = self.sessions.load(session_id)
        user = UserMessage(user_content(text, images))
        resumed = resume_point(history, user)
        if resumed is None:  # a retried turn (restart) is recorded once
            self.sessions.append(session_id, [user])  # recorded first: never lost
            history.append(user)
        pending = unanswered_calls(history) if resumed else []
        history = ordered_results(history)
        summary = self.sessions.summary(session_id)
        try:
            memory = "" if shared else await self.memory_block(session_id, text)
        except Exception:
            log.exception("memory hydration failed; continuing without it")
            memory = ""
        texts = [text, *_earlier_user_texts(history, ROUTING_CONTEXT_TURNS)]
        # Once per turn, to the minute: every call of the turn sends the same bytes.
        footer = time_footer(self.clock(), self.zone, scheduled_for, context)
        new: list[Message] = []
        rounds = resumed or 0
        used: list[str] = []
        names: list[str] = []  # the tools offered to the latest call that had any
        last_text = ""  # the newest text that came with a tool round (promoted if need be)
        blind = False  # the model refused this turn's images: they go as descriptions
        messages: list[Message] = []
        tab = Tab(self.sessions.conn)  # this turn's model calls, closed with what they made
        try:
            if pending:  # a kill -9 cut the last recorded round: finish only what did not
                results = await self._run_calls(session_id, pending, shared)
                history = ordered_results([*history, *results])
                used += [c.function.name for c in pending]
            while True:
                # After a tool round (or resuming one): the user's follow-ups join the turn.
                if steer is not None and rounds and (
                        added := await fold(steer, self.sessions, session_id)):
                    history += added
                    texts = [*(m.text for m in reversed(added)), *texts]
                capped = rounds >= self.max_iterations
                if capped:
                    log.warning("tool-call limit reached; asking for an answer without tools",
                                extra={"session": session_id, "rounds": rounds,
                                       "limit": self.max_iterations})
                extra: list[Message] = [UserMessage(CAP_NOTE)] if capped else []
                prompt = assemble(
                    persona=self._persona(shared),
                    history=[*history, *new],
                    max_messages=self.max_messages,
                    max_tokens=self.max_tokens,
                    memory_block=memory,
                    summary=summary,
                    footer=footer,
                    tail=extra,
                )
                schemas = None if capped else self._offer(session_id, texts, shared)
                if schemas:
                    names = [s.function.name for s in schemas]
                messages = without_images(prompt.messages) if blind else prompt.messages
                try:
                    completion = await self._call(messages, schemas, stream, names, tab)
                except ProviderError as exc:
                    if blind or not has_images(messages) or not rejects_images(exc.message):
                        raise
                    blind = True  # for the rest of the turn; later turns send no old image
                    log.warning("the model refused image input; retrying with descriptions",
                                extra={"session": session_id, "status": exc.status})
                    messages = without_images(prompt.messages)
                    completion = await self._call(messages, schemas, stream, names, tab)
                if capped or not completion.tool_calls:
                    final = completion.text.strip()
                    if final and self.model_notice and (note := self.model_notice(completion)):
                        final = f"{final}\n\n{note}"
                    break
                rounds += 1
                last_text = completion.text.strip() or last_text
                asked = completion.to_message()
                # Recorded before the calls run, each result as it completes: a restart
                # resumes this round and re-runs no finished call.
                with self.sessions.atomic():
                    self.sessions.append(session_id, [asked])
                    tab.settle()
                results = await self._run_calls(session_id, completion.tool_calls, shared)
                history += [asked, *results]
                used += [c.function.name for c in completion.tool_calls]
                if self.router is not None:
                    self.router.used(session_id, [c.function.name for c in completion.tool_calls])
            if not final:
                final = await self._no_text(session_id, messages, names, last_text, tab)
        except ProviderError as exc:
            tab.close()
            self._end_routing(session_id)
            log.error(
                "model call failed; turn ended",
                extra={"session": session_id, "status": exc.status, "error": str(exc)},
            )
            await _quiet_discard(stream)
            shown = f"HTTP {exc.status}" if exc.status else "no HTTP response"
            reason = f"model call failed ({shown})"  # the provider's text stays in the log
            raise TurnFailed(reason, model_failed_reply(exc.status)) from None
        except BaseException:
            tab.close()  # those calls happened, though what they made is dropped
            raise
        self._end_routing(session_id)
        if blind and not any(isinstance(m, AssistantMessage) and (m.content or "").startswith(
                NO_VISION_NOTICE) for m in history):  # told once per conversation
            final = f"{NO_VISION_NOTICE}\n\n{final}"
        new.append(AssistantMessage(content=final))
        reply = self._with_attachments(final, history, session_id)
        with self.sessions.atomic():  # answer and the channel's reply: both or neither
            self.sessions.append(session_id, new)
            tab.settle()
            if on_answer is not None:
                on_answer(reply)
        log.info(
            "turn done",
            extra={
                "session": session_id,
                "tool_rounds": rounds,
                "tools": sorted(set(used)),
                "ms": round((time.monotonic() - started) * 1000),
                "prompt_tokens_est": prompt.est_tokens,
            },
        )
        self.request_fold(session_id)  # after the reply, in the background: never delays it
        return reply

    def _with_attachments(self, final: str, history: list[Message], session_id: str) -> str:
        """The reply as the channel stores it: the text, plus the files this turn's
        send_attachment calls asked for (read from the recorded turn: see gantry.outbox)."""
        if self.outbox is None:
            return final
        from gantry.channel.reply import pack
        from gantry.outbox import turn_attachments

        turn = history[current_turn_start(history):]
        found = turn_attachments(turn, self.outbox, session_id)
        return pack(final, found) if found else final

    def _persona(self, shared: bool) -> str:
        """The persona, then the prompt blocks (skills), as the system prompt starts."""
        parts = [self.persona().strip(), *(b(shared).strip() for b in self.prompt_blocks)]
        return "\n\n".join(p for p in parts if p)

    def _shown_offer(self, session_id: str, shared: bool) -> Offer:
        """The offer /status counts: when routing, what this chat's last model call carried
        (the ranked tools depend on its message), so the count is the request's."""
        offer = offered(self.tools, self.router, session_id, shared=shared)
        if offer.routed and self.router is not None:
            return self.router.last_offer(session_id) or offer
        return offer

    def _offer(self, session_id: str, texts: list[str], shared: bool) -> list[ToolDef] | None:
        """The tools for the next model call: every one, or the routed few for big catalogs
        (never the private ones in a shared chat)."""
        offer = offered(self.tools, self.router, session_id, texts, shared=shared)
        if self.router is not None:
            self.router.record(offer, session_id)
        return offer.schemas() or None

    def _end_routing(self, session_id: str) -> None:
        if self.router is not None:
            self.router.end_turn(session_id)

    async def _run_calls(
        self, session_id: str, calls: Sequence[ToolCall], shared: bool
    ) -> list[Message]:
        """Run one message's tool calls concurrently; results come back in the model's order.

        Each result is recorded the moment its call finishes (one row, one transaction).
        """
        results: list[Message | None] = [None] * len(calls)

        async def one(i: int, call: ToolCall) -> None:
            tool = self.tools.get(self.tools.resolve(call.function.name) or call.function.name)
            # A user's stop cancels an MCP call (its server is told); a built-in one it awaits.
            with tool_call(cancellable=tool is not None and not tool.builtin) as scope, \
                    recorded_call(session_id, call.id):
                result = await self.tools.call(
                    call.function.name, call.function.arguments, shared=shared
                )
                message = ToolMessage(tool_call_id=call.id, content=result.text)
                self.sessions.append(session_id, [message])
                results[i] = message
            if scope.cancelled_caught:  # recorded as cancelled: a late result is not used
                log.info("tool call cancelled: the user stopped the turn",
                         extra={"session": session_id, "tool": call.function.name})
                message = ToolMessage(tool_call_id=call.id, content=CANCELLED_RESULT)
                self.sessions.append(session_id, [message])
                results[i] = message

        async with anyio.create_task_group() as tg:
            for i, call in enumerate(calls):
                tg.start_soon(one, i, call)
        return [m for m in results if m is not None]

    async def _call(
        self,
        messages: list[Message],
        tools: list[ToolDef] | None,
        stream: ReplyStream | None,
        names: list[str],
        tab: Tab,
    ) -> Completion:
        """One model call, its reply repaired (`_recover`) and its charge put on `tab`. A
        streamed reply shows only what can be neither reasoning nor a printed tool call."""
        from gantry.model.client import Done, TextDelta
        from gantry.model.fallback import Restart

        if stream is None:
            whole = await self.model.complete(messages, tools)
            tab.add(whole.charge)
            return self._recover(whole, names, tools)
        gate = StreamGate(names)
        wrote = False
        completion: Completion | None = None
        async for event in self.model.stream(messages, tools):  # type: ignore[attr-defined]
            if isinstance(event, TextDelta):
                show, restart = gate.feed(event.text)
                if restart and wrote:  # it was reasoning after all: take it back
                    await stream.discard()
                    wrote = False
                if show:
                    await stream.write(show)
                    wrote = True
            elif isinstance(event, Restart):  # the stream broke; a fallback writes it afresh
                gate = StreamGate(names)
                if wrote:
                    await stream.restart()
                    wrote = False
            elif isinstance(event, Done):
                completion = event.completion
                tab.add(completion.charge)
        assert completion is not None, "a provider stream always ends with Done"
        completion = self._recover(completion, names, tools)
        if completion.tool_calls and wrote:
            await stream.discard()
        return completion

    def _recover(
        self, completion: Completion, names: list[str], tools: list[ToolDef] | None
    ) -> Completion:
        """What the model meant: reasoning out of the text, a tool call printed in the text
        made a real call (or, in a call offered no tools, left out), each call's name and
        arguments repaired when that is unambiguous. docs/models.md lists the formats."""
        text, thought = split_reasoning(completion.text)
        calls = list(completion.tool_calls)
        if not calls and (found := printed_calls(text, names)) is not None:
            text = ""
            forms = sorted({p.form for p in found})
            if tools:
                calls = [ToolCall(new_call_id(), FunctionCall(p.name, p.arguments)) for p in found]
                log.info("tool call(s) printed in the reply text; run as calls",
                         extra={"calls": len(found), "forms": forms})
            else:
                log.warning("the answer was a printed tool call, with no tools offered; left out",
                            extra={"forms": forms})
        calls = [self._repaired(c) for c in calls]
        return msgspec.structs.replace(
            completion, text=text, tool_calls=calls,
            finish_reason="tool_calls" if calls else completion.finish_reason,
            reasoning=completion.reasoning or thought,
        )

    def _repaired(self, call: ToolCall) -> ToolCall:
        """The call with a near-miss name (`-` for `_`) made the tool's and repairable
        arguments made JSON, so it runs and replays cleanly; anything else stays as sent
        (the registry answers it with an error the model can act on)."""
        name = self.tools.resolve(call.function.name) or call.function.name
        raw = call.function.arguments
        args, _problem = parse_arguments(raw)
        fixed = raw
        if args is not None and not _is_json_object(raw):
            fixed = encode(args).decode()
        if name == call.function.name and fixed == raw:
            return call
        log.info("tool call repaired", extra={"tool": name, "asked": call.function.name,
                                              "arguments_repaired": fixed != raw})
        return ToolCall(call.id, FunctionCall(name, fixed), call.extra_content)

    async def _no_text(
        self, session_id: str, messages: list[Message], names: list[str], last_text: str,
        tab: Tab,
    ) -> str:
        """A reply with no text for the user (reasoning only, or empty): the turn's last
        plain text if a tool round had one, else one short nudge call without tools, else a
        clear sentence. Never an empty reply."""
        if last_text:
            log.info("the reply had no text; the turn's last text is the answer",
                     extra={"session": session_id})
            return last_text
        log.info("the reply had no text; asking once more", extra={"session": session_id})
        nudged = await self.model.complete([*messages, UserMessage(NUDGE)], None)
        tab.add(nudged.charge)
        nudged = self._recover(nudged, names, None)
        if nudged.text.strip():
            return nudged.text.strip()
        log.warning("the model gave no text for the user; answered with a fallback",
                    extra={"session": session_id})
        return NO_ANSWER

    # ------------------------------------------------------------------ rolling summary

    @property
    def fold_pending(self) -> bool:
        """A fold is queued or running."""
        return self._folding or bool(self._fold_wanted)

    def request_fold(self, session_id: str) -> None:
        """Ask the background folder (run_folds) to check this session's size."""
        self._fold_wanted[session_id] = None
        if self._fold_wake is not None:
            self._fold_wake.set()

    async def run_folds(self) -> None:
        """Background task: fold sessions whose turns asked for it, one at a time.

        Folding is a second model call, so it runs outside the turn: the reply is not held
        back by it, and a stop during it loses nothing (the turn is already recorded and the
        fold is retried after the next turn). Failures are logged, never raised.
        """
        while True:
            while self._fold_wanted:
                session_id = next(iter(self._fold_wanted))
                del self._fold_wanted[session_id]
                self._folding = True
                try:
                    await self._fold(session_id)
                except BudgetReached as exc:  # tried again after a later turn
                    log.warning("summary skipped: budget reached; history kept",
                                extra={"session": session_id, "error": exc.reason})
                except Exception:
                    log.exception("folding history failed; history kept",
                                  extra={"session": session_id})
                finally:
                    self._folding = False
            self._fold_wake = anyio.Event()
            await self._fold_wake.wait()

    async def _fold(self, session_id: str) -> None:
        """Fold turns past the caps into the session summary, then delete them.

        If the summariser fails, nothing is deleted (the prompt is still trimmed in memory),
        unless the stored history has grown past twice the message cap.
        """
        from gantry.model.errors import ProviderError

        old = self.sessions.summary(session_id)
        overhead = est_tokens(len(system_text(self._persona(False), "", old)))
        count, chars = self.sessions.stats(session_id)
        if count <= self.max_messages and est_tokens(chars) + overhead <= self.max_tokens:
            return  # cheap check first: raw size under the caps means nothing to fold
        ids, history = self.sessions.load(session_id)
        # as later prompts carry it: answered turns' images are one line each (gantry.model.vision)
        seen = collapse_tool_results(without_images(history, EARLIER))
        if len(history) <= self.max_messages and (
            history_tokens(seen) + overhead <= self.max_tokens
        ):
            return
        plan = plan_trim(
            seen,
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
            with attributed("summary", session_id):
                done = await self.model.complete(request, None)
        except ProviderError as exc:
            log.warning("summary failed; history kept", extra={"error": str(exc)})
            if len(history) > 2 * self.max_messages:
                self.sessions.delete(dropped_ids)
            return
        text = split_reasoning(done.text)[0].strip()[:SUMMARY_MAX_CHARS] or old
        tab = Tab(self.sessions.conn)
        tab.add(done.charge)
        try:
            with self.sessions.atomic():  # the summary and its call's usage: both or neither
                folded = self.sessions.fold(session_id, text, dropped_ids)
                tab.settle()
        finally:
            tab.close()
        if not folded:
            log.info("history changed while folding (/new?); fold skipped",
                     extra={"session": session_id})
            return
        log.info(
            "history folded into summary",
            extra={"session": session_id, "dropped": len(dropped_ids), "summary_chars": len(text)},
        )


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def model_failed_reply(status: int | None) -> str:
    """What the user reads when the model call failed: short and generic. The details
    (which may name hosts, or a provider's own text) go to the log only."""
    what = f" (HTTP {status})" if status else ""
    return f"Sorry — the model call failed{what}. Please try again in a moment."


async def _quiet_discard(stream: ReplyStream | None) -> None:
    """Take back streamed text on a failed turn; a broken stream must not mask the failure."""
    if stream is None:
        return
    try:
        await stream.discard()
    except Exception as exc:
        log.warning("could not take back the streamed text", extra={"error": str(exc)})
