"""`gantry run`: build the parts from config and run them in one anyio task group.

Boot is fail-fast: any problem prints one clear message and exits 1. Shutdown on
SIGTERM/SIGINT stops receiving, lets the in-flight turn finish (bounded), then cancels
every task and exits 0. SIGHUP reloads the persona and its skills.
"""

from __future__ import annotations

import logging
import os
import signal
import ssl
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskGroup

from gantry import __version__
from gantry.config import Config
from gantry.turns import Turns

log = logging.getLogger("gantry.run")

DRAIN_SECONDS = 8.0  # under docker's default 10 s stop timeout


class BootError(Exception):
    """A problem that stops `gantry run` before it starts; `str()` is for the operator."""


@dataclass
class PersonaHolder:
    """The current persona text; replaced wholesale on SIGHUP."""

    directory: str
    text: str = ""
    files: tuple[str, ...] = ()

    def load(self) -> None:
        from gantry.persona import load

        p = load(self.directory)
        self.text, self.files = p.text, p.files
        log.info("persona loaded", extra={"files": list(p.files), "chars": len(p.text)})

    def __call__(self) -> str:
        return self.text


def build_channel(
    cfg: Config, conn: Any, ssl_context: ssl.SSLContext | None = None, agent: Any = None,
    media: Any = None, speech: Any = None,
) -> Any:
    """The configured channel; aiogram is imported only for CHANNEL=telegram."""
    if cfg.channel == "stdio":
        from gantry.channel.stdio import Intro, StdioChannel
        from gantry.tools import offered

        def intro(session_id: str) -> Intro:  # the terminal REPL's start line
            count, _chars = agent.sessions.stats(session_id)
            summary = bool(agent.sessions.summary(session_id))
            tools = len(offered(agent.tools, agent.router, session_id))  # as /status counts
            return Intro(cfg.llm_model, tools, count, summary)

        return StdioChannel(stream_replies=cfg.stream_replies,
                            intro=intro if agent is not None else None, media=media,
                            followups=cfg.followups, speech=speech)
    from gantry.channel.telegram import TelegramChannel

    return TelegramChannel(
        cfg.telegram_bot_token,
        cfg.telegram_allowed_users,
        conn,
        api_url=cfg.telegram_api_url,
        groups=cfg.telegram_groups,
        stream_replies=cfg.stream_replies,
        ssl_context=ssl_context,
        media=media,
        followups=cfg.followups,
        speech=speech,
        reactions=cfg.telegram_reactions,
    )


async def _heartbeat(conn: Any) -> None:
    from gantry import heartbeat, memtrim, sdnotify

    while True:
        try:
            heartbeat.touch(conn, __version__, tasks=heartbeat.live_tasks())
            sdnotify.notify("WATCHDOG=1")
        except Exception as exc:
            from gantry.store.space import db_dir, full_message, is_full

            if not is_full(exc):
                log.exception("heartbeat write failed")
            else:  # said once by the channel too; `gantry status` says unhealthy meanwhile
                log.warning("heartbeat write failed", extra={"error": full_message(
                    db_dir(conn))})
        memtrim.trim()  # the heap's free pages back to the kernel: a long run stays flat
        await anyio.sleep(heartbeat.INTERVAL)


def _mark_stopped(conn: Any) -> None:
    """Leave the "stopped" mark so `gantry status` fails at once instead of after 60 s."""
    from gantry import heartbeat

    try:
        heartbeat.mark_stopped(conn)
    except Exception:
        log.exception("could not mark the heartbeat stopped")


async def _signals(
    tg: TaskGroup, receive: anyio.CancelScope, agent: Any, turns: Turns, persona: PersonaHolder,
    skills: Any = None,
) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            if signum == signal.SIGHUP:
                try:
                    persona.load()
                except Exception as exc:
                    log.error(
                        "persona reload failed; keeping the old one", extra={"error": str(exc)}
                    )
                if skills is not None:  # gantry.skills.catalog.Skills: never raises
                    skills.load()
                continue
            log.info("shutdown requested", extra={"signal": signal.Signals(signum).name})
            turns.closing = True
            receive.cancel()
            await _drain(agent, turns)
            tg.cancel_scope.cancel()
            return


async def _drain(agent: Any, turns: Turns) -> None:
    if agent.busy:
        log.info("waiting for the in-flight turn", extra={"max_seconds": DRAIN_SECONDS})
    with anyio.move_on_after(DRAIN_SECONDS) as waited:
        await agent.wait_idle()
    if waited.cancelled_caught:
        log.warning("drain timed out; cancelling the in-flight turn")
        turns.cancel_all()


def load_mcp(cfg: Config, environ: Mapping[str, str], registry: Any, outbox: Any = None) -> Any:
    """The MCP host for the manifest's servers, or None (then `mcp` is never imported).
    Binary tool results are kept in `outbox` (DATA_DIR/outbox by default) for the
    `send_attachment` tool, registered beside the servers' tools unless the only server is
    the memory backend's."""
    from gantry.mcp.manifest import ManifestError, load

    try:
        specs = load(cfg.mcp_manifest, environ)
    except ManifestError as exc:
        raise BootError(str(exc)) from None
    if not specs:
        return None
    from gantry.mcp.auth import oauth_hook
    from gantry.mcp.elicitation import Elicitor
    from gantry.mcp.host import Host
    from gantry.outbox import Outbox, attachment_tool

    if outbox is None:  # `gantry tools list`: the same offer, nothing is kept
        outbox = Outbox(Path(cfg.data_dir) / "outbox")
    hidden = memory_only(cfg)
    if any(s.name not in hidden for s in specs):  # not only the memory backend's server
        registry.register(attachment_tool(outbox))
    return Host(specs, registry, environ, hidden, auth=oauth_hook(specs, cfg.db_path),
                elicitor=Elicitor(timeout=float(cfg.elicitation_timeout_seconds)),
                keep=outbox.keep)


def memory_only(cfg: Config) -> dict[str, frozenset[str]]:
    """The memory backend server's protocol tools, kept off the model's list: the builtin
    memory_* tools already route to them, and raw copies would duplicate them and bypass
    their checks (aigpt's compress could wipe every memory)."""
    if not (cfg.memory_enabled and cfg.memory_backend.startswith("mcp:")):
        return {}
    from gantry.memory.mcp_backend import PROTOCOL_TOOLS

    return {cfg.memory_backend.removeprefix("mcp:"): PROTOCOL_TOOLS}


def build_router(cfg: Config, registry: Any, host: Any) -> Any:
    """Tool routing over the MCP servers' catalog (none without servers: nothing to route)."""
    if host is None:
        return None
    from gantry.mcp.routing import Router, search_tool

    router = Router(registry, max_per_turn=cfg.tools_max_per_turn,
                    always=cfg.tools_always_list)
    registry.register(search_tool(router))
    return router


async def start_mcp(host: Any, tg: TaskGroup) -> None:
    from gantry.mcp.host import ServerStartError

    try:
        await host.start(tg)
    except ServerStartError as exc:
        raise BootError(str(exc)) from None


async def serve(cfg: Config, environ: Mapping[str, str] | None = None) -> None:
    from gantry import db
    from gantry.store import lock

    db.ensure_data_dir(cfg.data_dir)
    held = lock.shared(cfg.data_dir)  # `gantry restore` refuses while it is held
    try:
        await _serve(cfg, db.connect(cfg.db_path), environ)
    finally:
        lock.release(held)


async def _serve(cfg: Config, conn: Any, environ: Mapping[str, str] | None) -> None:
    from gantry import sdnotify
    from gantry.agent import Agent
    from gantry.cron.tools import zone as user_zone
    from gantry.model import fallback
    from gantry.model.ledger import start as start_ledger
    from gantry.model.usage_view import plug as plug_usage
    from gantry.pages import keep_released
    from gantry.session import SessionStore
    from gantry.tls import TLSConfigError, ca_context
    from gantry.tools import Registry, offered

    persona = PersonaHolder(cfg.persona_dir)
    persona.load()
    try:
        tls = ca_context()
    except TLSConfigError as exc:
        raise BootError(str(exc)) from None
    meter = start_ledger(conn, cfg.prices)  # rows a kill left open are closed as lost
    provider = fallback.build(cfg.endpoints, verify=tls, meter=meter)  # then LLM_FALLBACK_*
    registry = Registry(result_max_chars=cfg.tool_result_max_chars)
    from gantry.outbox import Outbox

    outbox = Outbox(Path(cfg.data_dir) / "outbox")
    outbox.prune()  # kept tool files older than a week
    mcp_host = load_mcp(cfg, os.environ if environ is None else environ, registry, outbox)
    agent = Agent(
        model=provider,
        sessions=SessionStore(conn),
        tools=registry,
        persona=persona,
        max_messages=cfg.history_max_messages,
        max_tokens=cfg.history_max_tokens,
        max_iterations=cfg.tool_max_iterations,
        tool_status=mcp_host.status_lines if mcp_host else None,
        router=build_router(cfg, registry, mcp_host),
        zone=user_zone(cfg.cron_tz),
        outbox=outbox,
        model_status=provider.status,
        model_notice=provider.notice if cfg.llm_fallback_notice else None,
    )
    from gantry.mcp.prompt_command import PromptCommands
    from gantry.slash import SlashCommands

    prompts = PromptCommands(mcp_host, float(cfg.elicitation_timeout_seconds)).commands()
    agent.commands.append(SlashCommands(prompts))
    from gantry.media.build import reader_for

    media = reader_for(cfg, tls, provider.meter)
    media.prune()  # kept media past MEDIA_KEEP_DAYS or over MEDIA_MAX_TOTAL_BYTES
    from gantry.media.speech import speaker_for

    channel = build_channel(cfg, conn, tls, agent, media, speaker_for(cfg, tls, meter))
    if mcp_host is not None:
        mcp_host.elicitor.attach(channel)  # servers' questions are asked through it
        from gantry.mcp.taskbook import TaskBook

        task_book = TaskBook(conn)
        mcp_host.use_tasks(task_book)  # tool calls made as tasks survive a restart
    from gantry.model.budget import plug as plug_budget

    budget = plug_budget(cfg, conn, provider.meter, agent.zone, channel)
    if budget is not None:
        agent.status_lines.append(budget.status)
    turns = Turns(settle=agent.sessions.settle_stopped)
    respond = turns.wrap(agent)
    cron = None
    if cfg.cron_enabled:
        from gantry import cron as cron_mod

        cron = cron_mod.setup(cfg, conn, registry, respond, channel)
        cron.ticker.gate = budget.admit if budget is not None else None
        agent.status_lines.append(cron.status)
        if mcp_host is not None and cfg.watch_max > 0:  # watches ride the cron ticker
            from gantry import watch

            watches = watch.setup(cfg, conn, registry, mcp_host, cron.ticker, channel.can_push)
            agent.status_lines.append(watches.status)
        if mcp_host is not None:  # late task results, pushed to the chat
            from gantry.mcp.finisher import Finisher

            cron.ticker.riders.append(Finisher(task_book, mcp_host, cron.ticker, outbox.keep))
    from gantry.skills.wiring import setup as setup_skills

    skills = setup_skills(cfg.persona_dir, registry, agent.router, agent)
    from gantry.store import schedule

    backups = schedule.setup(cfg)
    if backups is not None:
        agent.private_status_lines.append(backups.status)
    log.info(
        "gantry starting",
        extra={"version": __version__, "channel": cfg.channel, "model": cfg.llm_model,
               "fallbacks": [e.model for e in cfg.endpoints[1:]]},
    )

    def ready() -> None:
        counts = {"tools": len(offered(registry, agent.router))}
        if mcp_host is not None:
            counts["MCP servers"] = len(mcp_host.names())
        sdnotify.notify("READY=1\nSTATUS=" + sdnotify.status_line(channel.name, **counts))
        log.info("receiving", extra={"channel": channel.name})

    try:
        async with anyio.create_task_group() as tg:
            receive = anyio.CancelScope()
            if mcp_host is not None:
                await start_mcp(mcp_host, tg)
            tg.start_soon(_heartbeat, conn)
            tg.start_soon(keep_released)  # the binary's import pages, once imports settle
            tg.start_soon(agent.run_folds)
            await _memory(cfg, conn, tg, agent, provider, persona, mcp_host)  # after MCP
            plug_usage(agent, conn)  # /usage, and today's line last in /status
            tg.start_soon(_signals, tg, receive, agent, turns, persona, skills)
            if cron is not None:
                tg.start_soon(cron.run)
            if backups is not None:
                tg.start_soon(backups.run)
            if budget is not None:
                tg.start_soon(budget.deliver, channel.push)
            with receive:
                await channel.serve(respond, ready)
            if not receive.cancel_called:  # input ended (EOF): finish up and leave
                turns.closing = True
                await _drain(agent, turns)
                tg.cancel_scope.cancel()
    finally:
        sdnotify.notify("STOPPING=1\nSTATUS=stopping")
        if mcp_host is not None:
            log.info("mcp tool telemetry", extra={"tools": mcp_host.telemetry()})
        with anyio.CancelScope(shield=True):
            await provider.aclose()
            await media.aclose()
        _mark_stopped(conn)
        conn.close()
        log.info("gantry stopped")


def log_level(cfg: Config, environ: dict[str, str], stream: Any) -> str:
    """LOG_LEVEL, except that a person typing into the stdio REPL at a terminal sees only
    warnings and errors unless they asked for a level: routine lines would bury the chat."""
    from gantry import log as logsetup

    chatting = cfg.channel == "stdio" and logsetup.resolve_format(cfg.log_format, stream) == "text"
    if chatting and not environ.get("LOG_LEVEL", "").strip():
        return "warning"
    return cfg.log_level


async def _memory(
    cfg: Config, conn: Any, tg: TaskGroup, agent: Any, model: Any, persona: Any, host: Any = None
) -> None:
    """Plug memory (gantry.memory.wiring) into the agent and `tg`; a bad backend stops boot."""
    from gantry.memory.wiring import build

    try:
        parts = await build(cfg, conn, agent.tools, model, persona, host)
    except ValueError as exc:
        raise BootError(str(exc)) from None
    if parts.memory_block is not None:
        agent.memory_block = parts.memory_block
    agent.private_status_lines.extend(parts.status_lines)
    for task in parts.tasks:
        tg.start_soon(task)


def _boot_failed(exc: BaseException, redact: Any) -> int:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    log.error("boot failed", extra={"error": str(exc)})
    print(f"gantry: {redact(str(exc))}", file=sys.stderr)
    return 1


def _only_aborted_turns(group: BaseExceptionGroup[Any]) -> bool:
    """True when a group holds nothing but turns cut at shutdown (their messages stay
    pending for the next start): a clean stop, not a crash."""
    from gantry.channel.base import TurnAborted

    _match, rest = group.split(TurnAborted)
    return rest is None


def main(env_file: str | None) -> int:
    from gantry import config
    from gantry import log as logsetup

    try:
        environ = config.merged_environ(env_file)
        cfg = config.load(environ, proxy_env=os.environ)
    except config.ConfigError as exc:
        print(logsetup.strip_url_credentials(str(exc)), file=sys.stderr)
        return 1
    redactor = logsetup.setup(
        log_level(cfg, environ, sys.stderr),
        [*cfg.model_secrets, cfg.telegram_bot_token, cfg.llm_transcribe_api_key,
         cfg.llm_speech_api_key,
         *(s for e in cfg.endpoints for s in logsetup.url_secrets(e.base_url)),
         *logsetup.url_secrets(cfg.llm_transcribe_base_url),
         *logsetup.url_secrets(cfg.llm_speech_base_url)],
        fmt=cfg.log_format,
    )
    from gantry.db import DatabaseError
    from gantry.persona import PersonaError

    fatal: tuple[type[Exception], ...] = (BootError, DatabaseError, PersonaError)
    if cfg.channel == "telegram":
        from gantry.channel.telegram.bot import BotTokenRejected

        fatal += (BotTokenRejected,)
    try:
        anyio.run(serve, cfg, environ)
    except BaseExceptionGroup as group:
        match, _rest = group.split(fatal)
        if match is not None:
            return _boot_failed(match.exceptions[0], redactor.text)
        if _only_aborted_turns(group):
            return 0
        return _crashed(group)
    except fatal as exc:
        return _boot_failed(exc, redactor.text)
    except KeyboardInterrupt:  # a second Ctrl-C before handlers were installed
        return 130
    except Exception as exc:
        from gantry.channel.base import TurnAborted

        return 0 if isinstance(exc, TurnAborted) else _crashed(exc)
    return 0


def _crashed(exc: BaseException) -> int:
    """The last boundary: an exception nothing below contained. One redacted JSON line
    with its traceback (never a raw one on stderr), then exit 1 for the supervisor."""
    log.critical("gantry crashed; exiting for a restart", exc_info=exc)
    return 1
