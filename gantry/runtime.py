"""`gantry run`: build the parts from config and run them in one anyio task group.

Boot is fail-fast: any problem prints one clear message and exits 1. Shutdown on
SIGTERM/SIGINT stops receiving, lets the in-flight turn finish (bounded), then cancels
every task and exits 0. SIGHUP reloads the persona.
"""

from __future__ import annotations

import logging
import signal
import ssl
import sys
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

from gantry import __version__
from gantry.config import Config

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


@dataclass
class Turns:
    """Shields in-flight turns from the receive-side cancellation, so they can drain.

    Once closing, no new turn starts; a turn cut at the drain deadline raises TurnAborted
    so the channel leaves its message pending rather than answering it.
    """

    scopes: set[anyio.CancelScope] = field(default_factory=set)
    closing: bool = False

    def wrap(self, respond: Any) -> Any:
        from gantry.channel.base import TurnAborted

        async def shielded(msg: Any, stream: Any) -> str:
            if self.closing:
                raise TurnAborted
            with anyio.CancelScope(shield=True) as scope:
                self.scopes.add(scope)
                try:
                    return str(await respond(msg, stream))
                finally:
                    self.scopes.discard(scope)
            raise TurnAborted

        return shielded

    def cancel_all(self) -> None:
        for scope in list(self.scopes):
            scope.cancel()


def build_channel(cfg: Config, conn: Any, ssl_context: ssl.SSLContext | None = None) -> Any:
    """The configured channel; aiogram is imported only for CHANNEL=telegram."""
    if cfg.channel == "stdio":
        from gantry.channel.stdio import StdioChannel

        return StdioChannel(stream_replies=cfg.stream_replies)
    from gantry.channel.telegram import TelegramChannel

    return TelegramChannel(
        cfg.telegram_bot_token,
        cfg.telegram_allowed_users,
        conn,
        api_url=cfg.telegram_api_url,
        stream_replies=cfg.stream_replies,
        ssl_context=ssl_context,
    )


async def _heartbeat(conn: Any) -> None:
    from gantry import heartbeat, sdnotify

    while True:
        try:
            heartbeat.touch(conn, __version__)
            sdnotify.notify("WATCHDOG=1")
        except Exception:
            log.exception("heartbeat write failed")
        await anyio.sleep(heartbeat.INTERVAL)


def _mark_stopped(conn: Any) -> None:
    """Leave the "stopped" mark so `gantry status` fails at once instead of after 60 s."""
    from gantry import heartbeat

    try:
        heartbeat.mark_stopped(conn)
    except Exception:
        log.exception("could not mark the heartbeat stopped")


async def _signals(
    tg: TaskGroup, receive: anyio.CancelScope, agent: Any, turns: Turns, persona: PersonaHolder
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


async def serve(cfg: Config) -> None:
    from gantry import db, sdnotify
    from gantry.agent import Agent
    from gantry.provider import Provider
    from gantry.session import SessionStore
    from gantry.tls import TLSConfigError, ca_context
    from gantry.tools import Registry

    db.ensure_data_dir(cfg.data_dir)
    conn = db.connect(cfg.db_path)
    persona = PersonaHolder(cfg.persona_dir)
    persona.load()
    try:
        tls = ca_context()
    except TLSConfigError as exc:
        raise BootError(str(exc)) from None
    channel = build_channel(cfg, conn, tls)
    provider = Provider(cfg.llm_base_url, cfg.llm_api_key, cfg.llm_model, verify=tls)
    registry = Registry(result_max_chars=cfg.tool_result_max_chars)
    agent = Agent(
        model=provider,
        sessions=SessionStore(conn),
        tools=registry,
        persona=persona,
        max_messages=cfg.history_max_messages,
        max_tokens=cfg.history_max_tokens,
        max_iterations=cfg.tool_max_iterations,
    )
    turns = Turns()
    respond = turns.wrap(agent)
    log.info(
        "gantry starting",
        extra={"version": __version__, "channel": cfg.channel, "model": cfg.llm_model},
    )

    def ready() -> None:
        sdnotify.notify("READY=1\nSTATUS=" + sdnotify.status_line(channel.name))
        log.info("receiving", extra={"channel": channel.name})

    try:
        async with anyio.create_task_group() as tg:
            receive = anyio.CancelScope()
            tg.start_soon(_heartbeat, conn)
            tg.start_soon(_signals, tg, receive, agent, turns, persona)
            with receive:
                await channel.serve(respond, ready)
            if not receive.cancel_called:  # input ended (EOF): finish up and leave
                turns.closing = True
                await _drain(agent, turns)
                tg.cancel_scope.cancel()
    finally:
        sdnotify.notify("STOPPING=1\nSTATUS=stopping")
        with anyio.CancelScope(shield=True):
            await provider.aclose()
        _mark_stopped(conn)
        conn.close()
        log.info("gantry stopped")


def _boot_failed(exc: BaseException) -> int:
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    log.error("boot failed", extra={"error": str(exc)})
    print(f"gantry: {exc}", file=sys.stderr)
    return 1


def main(env_file: str | None) -> int:
    from gantry import config
    from gantry import log as logsetup

    try:
        cfg = config.load(config.merged_environ(env_file))
    except config.ConfigError as exc:
        print(exc, file=sys.stderr)
        return 1
    logsetup.setup(cfg.log_level, [cfg.llm_api_key, cfg.telegram_bot_token])
    from gantry.db import DatabaseError
    from gantry.persona import PersonaError

    fatal: tuple[type[Exception], ...] = (BootError, DatabaseError, PersonaError)
    if cfg.channel == "telegram":
        from gantry.channel.telegram import BotTokenRejected

        fatal += (BotTokenRejected,)
    try:
        anyio.run(serve, cfg)
    except BaseExceptionGroup as group:
        match, _rest = group.split(fatal)
        if match is None:
            raise
        return _boot_failed(match.exceptions[0])
    except fatal as exc:
        return _boot_failed(exc)
    except KeyboardInterrupt:  # a second Ctrl-C before handlers were installed
        return 130
    return 0
