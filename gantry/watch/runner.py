"""The watch runner: rides the cron ticker, polls due watches through the MCP host (no model),
and turns new items into a turn pushed to the watch's chat like a cron reply.

A resource watch on a server whose capabilities include resources.subscribe is not polled:
it is read when notifications/resources/updated names it (and after every subscribe, since
the resource may have changed meanwhile). A quiet poll is one MCP call and two small SQLite
writes (its next time, then its cursor); the model is never called.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from gantry.channel.base import Inbound, TurnAborted, TurnFailed
from gantry.cron.ticker import MAX_TURN_ATTEMPTS, Ticker, is_silent
from gantry.model.budget import BudgetReached
from gantry.watch.items import (
    ItemsError,
    diff,
    extract,
    parse_text,
    shown_items,
    structured,
    wake_text,
)
from gantry.watch.store import PAUSE_AFTER, Notice, Wake, Watch, WatchStore

log = logging.getLogger("gantry.watch")

USER_ID = "watch"


class PollError(Exception):
    """The tool or resource answered with an error (or not at all); `str()` says which."""


def pause_notice(watch: Watch, failures: int, reason: str) -> str:
    """The one message a paused watch sends: which watch, why, and what the user can do."""
    return (
        f"Watch #{watch.id} ({watch.label}, on {watch.target}) failed {failures} times in a "
        f"row (last: {reason}); it is paused and checks nothing more. To watch again, ask me "
        f"to add it again; to drop it, ask me to cancel watch #{watch.id}."
    )


@dataclass
class Runner:
    store: WatchStore
    host: Any  # gantry.mcp.host.Host
    ticker: Ticker
    subscribed: set[int] = field(default_factory=set)  # push watches: read on notification
    dirty: set[int] = field(default_factory=set)  # push watches to read at the next tick
    polling: set[int] = field(default_factory=set)
    waking: set[int] = field(default_factory=set)  # wake ids with a turn in flight
    _tg: Any = None

    @property
    def channel(self) -> str:
        return self.ticker.channel

    # ------------------------------------------------------------------ the ticker's side

    def resume(self, tg: Any) -> None:
        """At start: resume interrupted wakes and pending notices, subscribe push watches."""
        self._tg = tg
        self.host.on_resource_updated(self.updated)
        self.store.prune(self.ticker.clock.now())
        for wake in self.store.open_wakes(self.channel):
            log.info("resuming an interrupted watch wake",
                     extra={"watch": wake.watch_id, "wake": wake.id, "state": wake.state})
            self._start(wake)
        for notice in self.store.notices(self.channel):
            tg.start_soon(self._notify, notice)
        for watch in self.store.active(self.channel):
            if watch.uri is not None:
                tg.start_soon(self.subscribe, watch)

    def earliest(self) -> float | None:
        if self.dirty:
            return self.ticker.clock.now()
        times = [t for wid, t in self.store.next_times(self.channel)
                 if wid not in self.subscribed and wid not in self.polling]
        return min(times, default=None)

    def tick(self, now: float, tg: Any) -> None:
        """Start a poll for every due polled watch and every notified push watch."""
        if self.dirty:
            watches = self.store.active(self.channel)
            self.dirty &= {w.id for w in watches}  # cancelled or paused meanwhile
        else:
            watches = self.store.due(now, self.channel)
        for watch in watches:
            notified = watch.id in self.dirty
            due = (watch.id not in self.subscribed and watch.next_at is not None
                   and watch.next_at <= now)
            if watch.id in self.polling or not (notified or due):
                continue
            self.dirty.discard(watch.id)
            self.store.claim_poll(watch.id, now + watch.interval_s)
            self.polling.add(watch.id)
            tg.start_soon(self._poll, watch)

    # ------------------------------------------------------------------ push

    async def subscribe(self, watch: Watch) -> None:
        """Subscribe a resource watch when its server can; else it stays polled."""
        assert watch.uri is not None
        if not self.host.can_subscribe(watch.server):
            log.info("watch polls its resource (the server offers no subscriptions)",
                     extra={"watch": watch.id, "server": watch.server})
            return
        self.subscribed.add(watch.id)  # meanwhile, a tick must not poll it as well
        try:
            await self.host.subscribe(watch.server, watch.uri)
        except Exception as exc:
            self.subscribed.discard(watch.id)
            log.warning("watch subscribe failed; polling instead",
                        extra={"watch": watch.id, "server": watch.server,
                               "error": f"{type(exc).__name__}: {exc}"[:300]})
            return
        self.dirty.add(watch.id)  # read once now: seeds the cursor or catches a missed change
        log.info("watch subscribed", extra={"watch": watch.id, "server": watch.server})
        self.ticker.poke()

    def updated(self, server: str, uri: str) -> None:
        """notifications/resources/updated (or a resubscribe): mark matching watches to be
        read at the next tick, and wake the ticker. Runs in the MCP session's reader."""
        hit = False
        for watch in self.store.active(self.channel):
            if watch.server == server and watch.uri is not None and (
                    uri == watch.uri or uri.startswith(watch.uri.rstrip("/") + "/")):
                self.dirty.add(watch.id)
                hit = True
        if hit:
            self.ticker.poke()

    def forget(self, watch: Watch) -> None:
        """A cancelled or paused watch: no more reads on notification, and no subscription
        after the server's next restart unless another watch follows the same resource."""
        self.subscribed.discard(watch.id)
        self.dirty.discard(watch.id)
        if watch.uri is not None and not any(
                w.server == watch.server and w.uri == watch.uri
                for w in self.store.active(self.channel) if w.id != watch.id):
            self.host.unsubscribe(watch.server, watch.uri)

    # ------------------------------------------------------------------ poll

    async def _fetch(self, watch: Watch) -> Any:
        if watch.uri is not None:
            res = await self.host.read_resource(watch.server, watch.uri)
            if res.error:
                raise PollError(res.text)
            return parse_text(res.text)
        assert watch.tool is not None
        res = await self.host.call(watch.server, watch.tool, watch.args)
        if res.error:
            raise PollError(res.text)
        listed = next((t for t in self.host.tools(watch.server) if t.name == watch.tool), None)
        if listed is not None and listed.structured and res.structured is not None:
            return structured(res.structured)
        return parse_text(res.text)

    async def _poll(self, watch: Watch) -> None:
        """One poll, an error boundary: fetch → items → diff → cursor (+ wake) committed."""
        try:
            try:
                items = extract(await self._fetch(watch))
            except (PollError, ItemsError) as exc:
                self._failed(watch, str(exc)[:300])
                return
            new, cursor = diff(items, watch.cursor, watch.id_field)
            wake = self.store.seen(watch.id, cursor, shown_items(new), len(new),
                                   self.ticker.clock.now())
            if watch.cursor is None:
                log.info("watch seeded", extra={"watch": watch.id, "items": len(items)})
            elif wake is not None:
                log.info("watch found new items",
                         extra={"watch": watch.id, "wake": wake.id, "new": len(new)})
                self._start(wake)
        except Exception as exc:
            log.exception("watch poll failed", extra={"watch": watch.id})
            try:
                self._failed(watch, f"internal error ({type(exc).__name__})")
            except Exception:
                log.exception("watch: could not record the failure")
        finally:
            self.polling.discard(watch.id)

    def _failed(self, watch: Watch, reason: str) -> None:
        notice = pause_notice(watch, PAUSE_AFTER, reason)
        failures, pending = self.store.failed(watch.id, reason, self.ticker.clock.now(), notice)
        log.warning("watch poll failed", extra={"watch": watch.id, "failures": failures,
                                                "error": reason})
        if pending is not None:
            log.warning("watch paused after repeated failures; notifying the chat",
                        extra={"watch": watch.id})
            self.forget(watch)
            self._tg.start_soon(self._notify, pending)

    async def _notify(self, notice: Notice) -> None:
        chat = notice.session_id.split(":", 1)[1]
        why = await self.ticker.push_retrying(chat, notice.text, lambda: 0, None,
                                              lambda: True, notice.watch_id,
                                              f"watch #{notice.watch_id}")
        if why is not None:
            log.error("watch pause notice could not be pushed",
                      extra={"watch": notice.watch_id, "error": why})
        self.store.notice_done(notice.watch_id, sent=why is None)

    # ------------------------------------------------------------------ wake

    def _start(self, wake: Wake) -> None:
        if wake.id in self.waking:
            return
        self.waking.add(wake.id)
        self._tg.start_soon(self._execute, wake)

    async def _execute(self, wake: Wake) -> None:
        """One wake, an error boundary: turn → reply recorded → pushed (or silent), as cron."""
        now = self.ticker.clock.now
        try:
            chat = wake.session_id.split(":", 1)[1]
            if wake.state == "started":
                if self.store.attempt(wake.id) > MAX_TURN_ATTEMPTS:
                    log.error("watch wake interrupted too often; marked failed",
                              extra={"watch": wake.watch_id, "wake": wake.id})
                    self.store.fail_wake(wake.id, "turn interrupted "
                                         f"{MAX_TURN_ATTEMPTS} times", now())
                    return
                if (refused := self.ticker.refused(f"watch:{wake.watch_id}",
                                                   wake.session_id)) is not None:
                    self._skip(wake, refused)
                    return
                wake_id = wake.id

                def record(answer: str) -> None:
                    """In the agent's answer transaction: a kill after the turn finds the
                    reply and never runs the turn again."""
                    self.store.set_reply(wake_id, answer, is_silent(answer), now())

                text = wake_text(wake.watch_id, wake.label, wake.instruction, wake.items,
                                 wake.total)
                msg = Inbound(channel=self.channel, chat_id=chat, user_id=USER_ID, text=text,
                              scheduled=True, on_answer=record, scheduled_for=wake.created_at,
                              source=f"watch:{wake.watch_id}")
                try:
                    reply = await self.ticker.respond(msg, None)
                except TurnAborted:
                    return  # shutdown: resumed at the next start
                except TurnFailed as exc:
                    log.warning("watch turn failed; nothing pushed",
                                extra={"watch": wake.watch_id, "wake": wake.id,
                                       "error": exc.reason})
                    self.store.fail_wake(wake.id, exc.reason, now())
                    return
                except BudgetReached as exc:  # a limit reached mid-turn
                    self._skip(wake, exc)
                    return
                silent = is_silent(reply)
                self.store.set_reply(wake.id, reply, silent, now())
                if silent:
                    log.info("watch reply is [silent]; not pushed",
                             extra={"watch": wake.watch_id, "wake": wake.id})
                    return
                wake.reply, wake.state = reply, "replied"
            await self._deliver(wake, chat)
        except Exception as exc:
            log.exception("watch wake failed", extra={"watch": wake.watch_id, "wake": wake.id})
            try:
                self.store.fail_wake(wake.id, f"internal error ({type(exc).__name__})", now())
            except Exception:
                log.exception("watch: could not record the failure")
        finally:
            self.waking.discard(wake.id)

    def _skip(self, wake: Wake, refused: BudgetReached) -> None:
        log.warning("watch wake skipped: budget reached",
                    extra={"watch": wake.watch_id, "wake": wake.id, "error": refused.reason})
        self.store.skip_wake(wake.id, refused.reason, self.ticker.clock.now())

    async def _deliver(self, wake: Wake, chat: str) -> None:
        assert wake.reply is not None

        def progress(done: int, total: int) -> None:
            wake.sent_parts = done
            self.store.mark_sent(wake.id, done, total, self.ticker.clock.now())

        why = await self.ticker.push_retrying(
            chat, wake.reply, lambda: wake.sent_parts, progress,
            lambda: self.store.wake_state(wake.id) == "delivered", wake.watch_id,
            f"watch #{wake.watch_id} {wake.label}")
        if why is None:
            log.info("watch reply pushed", extra={"watch": wake.watch_id, "wake": wake.id})
            return
        log.error("watch reply could not be pushed; marked failed",
                  extra={"watch": wake.watch_id, "wake": wake.id, "error": why})
        self.store.fail_wake(wake.id, why, self.ticker.clock.now())
