"""Budgets: daily and monthly limits on tokens or cost, overall and for the autonomous sources
(cron, watches, consolidation), checked before every model call (docs/models.md, "Budgets").

The check reads the usage ledger (gantry.model.spend) and runs in the same synchronous step
as the ledger row it admits, so every call sees the calls before it, in flight ones at their
prompt estimate: a limit is passed by at most the call that crossed it. A refused call raises
BudgetReached; the agent answers a chat with its notice, the scheduler records the turn
skipped. Warnings and "limit reached" notices are pushed once per limit and period
(table budget_notice, migration 0016), so a restart does not send them again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta, tzinfo
from typing import Any, NamedTuple

import anyio

from gantry.model.spend import is_autonomous, spent

__all__ = ["Budget", "BudgetReached", "Limit", "Standing", "limits_of", "period", "plug"]

log = logging.getLogger("gantry.budget")

PUSH_ATTEMPTS = 3  # a notice push is tried this often (1 s, 2 s apart), then marked failed
_SCOPES = (("", False), ("AUTO_", True))
_PERIODS = (("DAILY", "day"), ("MONTHLY", "month"))
_UNITS = (("TOKENS", False), ("COST", True))


class Limit(NamedTuple):
    """One BUDGET_* setting: its variable, period, scope and amount (tokens or USD)."""

    name: str  # e.g. BUDGET_AUTO_DAILY_COST
    period: str  # day | month
    autonomous: bool  # counts and holds only cron, watches and consolidation
    cost: bool  # USD, else tokens (prompt + completion)
    amount: float


def limits_of(cfg: Any) -> list[Limit]:
    """The limits `cfg` sets, overall ones first (unset is no limit, 0 allows nothing)."""
    found: list[Limit] = []
    for scope, autonomous in _SCOPES:
        for word, kind in _PERIODS:
            for unit, is_cost in _UNITS:
                name = f"BUDGET_{scope}{word}_{unit}"
                amount = getattr(cfg, name.lower(), None)
                if amount is not None:
                    found.append(Limit(name, kind, autonomous, is_cost, float(amount)))
    return found


def period(now: float, zone: tzinfo, kind: str) -> tuple[float, float, str]:
    """[start, end) of the day or month holding `now` in `zone` (the user's, CRON_TZ), and its
    label (YYYY-MM-DD or YYYY-MM)."""
    local = datetime.fromtimestamp(now, zone)
    if kind == "day":
        start = datetime(local.year, local.month, local.day, tzinfo=zone)
        after = start.date() + timedelta(days=1)
        end = datetime(after.year, after.month, after.day, tzinfo=zone)
        return start.timestamp(), end.timestamp(), start.strftime("%Y-%m-%d")
    start = datetime(local.year, local.month, 1, tzinfo=zone)
    year, month = (local.year + 1, 1) if local.month == 12 else (local.year, local.month + 1)
    return start.timestamp(), datetime(year, month, 1, tzinfo=zone).timestamp(), (
        start.strftime("%Y-%m"))


class Standing(NamedTuple):
    """A limit now: what its period has used, and when the period ends."""

    limit: Limit
    used: float
    start: float
    end: float
    label: str

    @property
    def reached(self) -> bool:
        return self.used >= self.limit.amount

    def amount(self, value: float) -> str:
        return f"${value:,.2f}" if self.limit.cost else f"{int(value):,} tokens"

    def what(self) -> str:
        scope = "autonomous " if self.limit.autonomous else ""
        when = "today" if self.limit.period == "day" else "this month"
        return f"{when}'s {scope}budget ({self.limit.name})"

    def usage(self) -> str:
        """`12,345 of 50,000 tokens (25 %)`."""
        share = f" ({100 * self.used / self.limit.amount:.0f} %)" if self.limit.amount else ""
        shown = self.amount(self.limit.amount)
        used = f"${self.used:,.2f}" if self.limit.cost else f"{int(self.used):,}"
        return f"{used} of {shown}{share}"

    def resets(self, zone: tzinfo, now: float) -> str:
        """`at 00:00 on 2025-06-02 (Europe/Berlin), in 3 h 12 min`."""
        at = datetime.fromtimestamp(self.end, zone)
        left = max(0, int(self.end - now)) // 60
        span = f"{left // 1440} d {left % 1440 // 60} h" if left >= 1440 else (
            f"{left // 60} h {left % 60} min")
        return f"at {at:%H:%M} on {at:%Y-%m-%d} ({zone}), in {span}"


class BudgetReached(Exception):
    """A model call refused: `standing`'s limit is used up. The agent answers a chat turn
    with `notice`; the scheduler records an autonomous turn skipped with `reason`."""

    def __init__(self, standing: Standing, notice: str) -> None:
        self.standing = standing
        self.notice = notice
        self.reason = f"budget: {standing.limit.name} reached ({standing.usage()})"
        super().__init__(self.reason)


Push = Callable[..., Awaitable[None]]


class Budget:
    """The limits of this run, their checks, and the notices they owe the owner."""

    def __init__(self, conn: Any, limits: Sequence[Limit], zone: tzinfo, *,
                 warn_percent: int = 80, owner_through: bool = False,
                 is_owner: Callable[[str | None], bool] = lambda _chat: False,
                 owner_session: str | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.conn, self.limits, self.zone = conn, list(limits), zone
        self.warn = max(1, min(100, warn_percent)) / 100
        self.owner_through, self.is_owner = owner_through, is_owner
        self.owner_session, self.clock = owner_session, clock
        self._wake: anyio.Event | None = None

    # ------------------------------------------------------------------ the check

    def standings(self, now: float | None = None) -> list[Standing]:
        """Every limit with what its period has used so far."""
        now = self.clock() if now is None else now
        totals: dict[tuple[str, bool], Any] = {}
        out = []
        for limit in self.limits:
            start, end, label = period(now, self.zone, limit.period)
            key = (limit.period, limit.autonomous)
            if key not in totals:
                totals[key] = spent(self.conn, start, autonomous=True if limit.autonomous
                                    else None)
            total = totals[key]
            out.append(Standing(limit, total.cost if limit.cost else float(total.tokens),
                                start, end, label))
        return out

    def admit(self, source: str, chat: str | None) -> None:
        """Before a call for `source` (in session `chat`): BudgetReached when a limit that
        holds it is used up; a warning owed past BUDGET_WARN_PERCENT is queued."""
        if not self.limits:
            return
        autonomous = is_autonomous(source)
        through = self.owner_through and not autonomous and self.is_owner(chat)
        now = self.clock()
        for standing in self.standings(now):
            limit = standing.limit
            if (limit.autonomous and not autonomous) or (through and not limit.autonomous):
                continue
            if standing.reached:
                raise self._refuse(standing, source, chat, now)
            if standing.used >= self.warn * limit.amount:
                self._tell("warn", standing, self._owners(chat), self._warning(standing, now))

    def _refuse(self, standing: Standing, source: str, chat: str | None,
                now: float) -> BudgetReached:
        autonomous = is_autonomous(source)
        held = ("scheduled jobs, watches and consolidation are skipped"
                if standing.limit.autonomous else
                "I answer with this note instead of calling the model, and scheduled jobs "
                "and watches are skipped")
        notice = (f"Budget reached: {standing.what()} is used up, {standing.usage()}. It "
                  f"resets {standing.resets(self.zone, now)}. Until then {held}.")
        log.warning("model call refused: budget reached",
                    extra={"source": source, "limit": standing.limit.name,
                           "used": round(standing.used, 6), "of": standing.limit.amount})
        if autonomous:  # nobody is waiting for this turn: tell the owner, once a period
            self._tell("reached", standing, chat or self.owner_session, notice)
        return BudgetReached(standing, notice)

    def _warning(self, standing: Standing, now: float) -> str:
        return (f"Budget warning: {standing.what()} is {standing.usage()} used. It resets "
                f"{standing.resets(self.zone, now)}. At the limit "
                + ("scheduled jobs, watches and consolidation are skipped."
                   if standing.limit.autonomous else "I stop calling the model until then."))

    def _owners(self, chat: str | None) -> str | None:
        """Warnings go to the owner: the chat of the call when it is the owner's, else theirs."""
        return chat if chat is not None and self.is_owner(chat) else self.owner_session

    # ------------------------------------------------------------------ notices

    def _tell(self, kind: str, standing: Standing, session: str | None, text: str) -> None:
        """Queue `text` for `session`, once per kind, limit and period (kept across restarts)."""
        key = f"{kind}:{standing.limit.name}:{standing.label}"
        if session is None:
            log.warning("budget notice has no chat to go to; logged only",
                        extra={"notice": key, "text": text})
            return
        with self.conn:
            self.conn.execute(
                "INSERT INTO budget_notice (key, session_id, text, state, created_at) "
                "VALUES (?, ?, ?, 'pending', ?) ON CONFLICT (key) DO NOTHING",
                (key, session, text, self.clock()))
            fresh = self.conn.changes() > 0
        if fresh:
            log.warning("budget notice queued for the owner",
                        extra={"notice": key, "session": session})
            if self._wake is not None:
                self._wake.set()

    async def deliver(self, push: Push) -> None:
        """Background task: push every pending notice to its chat; runs until cancelled."""
        while True:
            self._wake = anyio.Event()
            rows = list(self.conn.execute(
                "SELECT key, session_id, text FROM budget_notice WHERE state = 'pending' "
                "ORDER BY created_at"))
            for key, session, text in rows:
                sent = await _push(push, str(session).split(":", 1)[-1], str(text), key)
                with self.conn:
                    self.conn.execute("UPDATE budget_notice SET state = ? WHERE key = ?",
                                      ("sent" if sent else "failed", key))
            await self._wake.wait()

    def status(self, _session: str = "") -> str:
        """The /status lines: each limit's use in its period and when it resets."""
        now = self.clock()
        return "\n".join(f"budget {s.limit.name}: {s.usage()}, resets "
                         f"{datetime.fromtimestamp(s.end, self.zone):%Y-%m-%d %H:%M}"
                         + (" — reached" if s.reached else "")
                         for s in self.standings(now))


async def _push(push: Push, chat: str, text: str, key: str) -> bool:
    for attempt in range(1, PUSH_ATTEMPTS + 1):
        try:
            with anyio.fail_after(30):
                await push(chat, text, origin="budget")
            return True
        except PermissionError as exc:
            log.error("budget notice refused for this chat", extra={"notice": key,
                                                                    "error": str(exc)})
            return False
        except Exception as exc:
            log.warning("budget notice push failed", extra={"notice": key, "attempt": attempt,
                                                            "error": str(exc)})
            if attempt < PUSH_ATTEMPTS:
                await anyio.sleep(attempt)
    return False


def owner_session(cfg: Any) -> str | None:
    """The chat notices without a chat of their own go to: the first allowed Telegram user's
    private chat, or the REPL."""
    if cfg.channel == "stdio":
        return "stdio:local"
    users = cfg.telegram_allowed_users
    return f"telegram:{users[0]}" if users else None


def plug(cfg: Any, conn: Any, meter: Any, zone: tzinfo, channel: Any) -> Budget | None:
    """The budget of `gantry run`: its check before each of `meter`'s calls; None unset."""
    limits = limits_of(cfg)
    if not limits:
        return None

    def is_owner(session: str | None) -> bool:
        name, _, chat = (session or "").partition(":")
        return name == channel.name and bool(chat) and bool(channel.can_push(chat))

    budget = Budget(conn, limits, zone, warn_percent=cfg.budget_warn_percent,
                    owner_through=cfg.budget_owner_through, is_owner=is_owner,
                    owner_session=owner_session(cfg))
    meter.gate = budget.admit
    log.info("budgets set", extra={"limits": [f"{x.name}={x.amount:g}" for x in limits],
                                   "owner_through": cfg.budget_owner_through})
    return budget
