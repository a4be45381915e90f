"""The ticker: due jobs become synthetic user turns; their replies are pushed to the chat.

It wakes every CRON_TICK_SECONDS (sooner when a job is due sooner). Each due job is claimed
in SQLite before its turn starts (gantry.cron.store), so restarts resume runs instead of
losing or repeating them. A job whose previous run is still in flight is skipped, and a fire
later than the grace window (gantry was down, the machine slept) is recorded as missed and
the job moves to its next occurrence. A turn that fails is recorded failed and pushes
nothing; NOTICE_AFTER failures of one job in a row push one notice naming the job.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol
from zoneinfo import ZoneInfo

import anyio

from gantry.channel.base import Inbound, Progress, TurnAborted, TurnFailed
from gantry.cron.schedule import next_fire
from gantry.cron.store import OPEN_RUN_STATES, CronStore, Job, Notice, Run
from gantry.cron.tools import job_line, schedule_of
from gantry.model.budget import BudgetReached

log = logging.getLogger("gantry.cron")

GRACE_SECONDS = 3600.0  # a fire up to an hour late still runs (once); later ones are missed
MAX_TURN_ATTEMPTS = 3  # a run whose turn was cut this often (crash, kill) is marked failed
DELIVERY_ATTEMPTS = 8  # pushes retried with backoff 1, 2, 4 … 60 s (about 4 minutes)
DELIVERY_GRACE = 10.0  # seconds a push may finish after shutdown began
MIN_NAP = 0.01
SILENT = "[silent]"
USER_ID = "cron"

Respond = Callable[[Inbound, Any], Awaitable[str]]
Push = Callable[..., Awaitable[None]]
Gate = Callable[[str, str | None], None]  # gantry.model.budget.Budget.admit


class Rider(Protocol):
    """Another scheduled part that shares the ticker's loop (gantry.watch): resumed at start,
    ticked on every wake-up, and asked when it next needs one."""

    def resume(self, tg: Any) -> None: ...

    def tick(self, now: float, tg: Any) -> None: ...

    def earliest(self) -> float | None: ...


class Clock(Protocol):
    """Wall time and sleeping, injected so tests control time."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


def is_silent(reply: str) -> bool:
    """A reply the model marked as not for the user."""
    from gantry.channel.reply import text_of

    return text_of(reply).lstrip().lower().startswith(SILENT)


def synthetic_text(run: Run) -> str:
    """The user turn a fire becomes: says where it comes from, then the job's prompt."""
    return (
        f"[scheduled job #{run.job_id}, {run.label}: this message is from the scheduler, "
        f"not the user; your reply is sent to the user unless it starts with {SILENT}]\n"
        f"{run.prompt}"
    )


def failure_notice(job: Job, streak: int, reason: str) -> str:
    """What the user reads after a failure streak: which job, why, and what happens next."""
    going = ("it stays scheduled and tries again at its next run"
             if job.state == "active" and job.next_at is not None else "it has no more runs")
    return (
        f"Scheduled job {job_line(job)}\n"
        f"It failed {streak} times in a row (last: {reason}); {going}. You will not be told "
        f"again until it has worked once. To stop it, ask me to cancel job #{job.id}."
    )


@dataclass
class Ticker:
    store: CronStore
    respond: Respond
    push: Push  # channel.push(chat_id, text, sent=0, progress=None)
    channel: str
    tick_seconds: float
    clock: Clock = field(default_factory=SystemClock)
    grace: float = GRACE_SECONDS
    running: set[int] = field(default_factory=set)  # job ids with a run in flight
    riders: list[Rider] = field(default_factory=list)
    gate: Gate | None = None  # the budget: raises BudgetReached when a turn may not run
    _tg: Any = None
    _wake: anyio.Event | None = None

    def __post_init__(self) -> None:
        self.grace = max(self.grace, 2.0 * self.tick_seconds)

    def poke(self) -> None:
        """Re-plan the next wake-up (a job was just scheduled)."""
        if self._wake is not None:
            self._wake.set()

    async def run(self) -> None:
        """The task in the run task group: resume open runs, then tick until cancelled."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                self.store.prune(self.clock.now())
                for run in self.store.open_runs(self.channel):
                    log.info("resuming an interrupted cron run",
                             extra={"job": run.job_id, "run": run.id, "state": run.state})
                    self._start(run)
                for notice in self.store.notices(self.channel):
                    tg.start_soon(self._notify, notice)
            except Exception:
                log.exception("cron: resuming runs failed")
            for rider in self.riders:
                try:
                    rider.resume(tg)
                except Exception:
                    log.exception("ticker: resuming a rider failed")
            while True:
                try:
                    self.tick()
                except Exception:
                    log.exception("cron tick failed")
                for rider in self.riders:
                    try:
                        rider.tick(self.clock.now(), tg)
                    except Exception:
                        log.exception("ticker: a rider's tick failed")
                await self._nap()

    async def _nap(self) -> None:
        delay = float(self.tick_seconds)
        try:
            times = [self.store.earliest(self.channel)]
            times += [rider.earliest() for rider in self.riders]
            earliest = min((t for t in times if t is not None), default=None)
        except Exception:
            earliest = None
        now = self.clock.now()
        # Wake at the next job's time. A job still due now (it could not be moved on) waits
        # for the next tick instead, so a persistent failure never becomes a busy loop.
        if earliest is not None and earliest > now:
            delay = min(delay, max(MIN_NAP, earliest - now))
        wake = self._wake = anyio.Event()
        async with anyio.create_task_group() as tg:

            async def sleeper() -> None:
                await self.clock.sleep(delay)
                tg.cancel_scope.cancel()

            tg.start_soon(sleeper)
            await wake.wait()
            tg.cancel_scope.cancel()

    def tick(self) -> None:
        """Claim (or skip) every due job; started runs go on in the ticker's task group."""
        now = self.clock.now()
        for job in self.store.due(now, self.channel):
            try:
                self._due(job, now)
            except Exception as exc:
                log.exception("cron job could not be scheduled on; ending it",
                              extra={"job": job.id})
                assert job.next_at is not None
                self.store.pass_over(job, job.next_at, None, "failed", now, str(exc))

    def _due(self, job: Job, now: float) -> None:
        assert job.next_at is not None
        due = job.next_at
        after = datetime.fromtimestamp(now, UTC)
        anchor = datetime.fromtimestamp(job.anchor_at, UTC)
        nxt_dt = next_fire(schedule_of(job), after, ZoneInfo(job.tz), anchor)
        nxt = None if nxt_dt is None else nxt_dt.timestamp()
        if job.id in self.running:
            log.warning("cron job still running; this fire is skipped",
                        extra={"job": job.id, "due_at": due})
            self.store.pass_over(job, due, nxt, "skipped", now, "previous run still in flight")
            return
        late = now - due
        if late > self.grace:
            log.warning("cron fire missed (later than the grace window); not run",
                        extra={"job": job.id, "due_at": due, "late_s": round(late),
                               "grace_s": self.grace})
            self.store.pass_over(job, due, nxt, "missed", now, f"{round(late)} s late")
            return
        if (refused := self.refused(f"cron:{job.id}", job.session_id)) is not None:
            log.warning("cron fire skipped: budget reached",
                        extra={"job": job.id, "due_at": due, "error": refused.reason})
            self.store.pass_over(job, due, nxt, "skipped", now, refused.reason)
            return
        run = self.store.claim(job, due, nxt, now)
        log.info("cron job due", extra={"job": job.id, "run": run.id, "late_s": round(late, 1)})
        self._start(run)

    def refused(self, source: str, session: str) -> BudgetReached | None:
        """Why a turn for `source` may not start now (a budget is used up), else None.
        Checked before the turn records anything in the chat's history."""
        if self.gate is None:
            return None
        try:
            self.gate(source, session)
        except BudgetReached as exc:
            return exc
        return None

    def _start(self, run: Run) -> None:
        self.running.add(run.job_id)
        self._tg.start_soon(self._execute, run)

    async def _execute(self, run: Run) -> None:
        """One fire, an error boundary: turn → reply recorded → pushed (or silent)."""
        try:
            if run.state not in OPEN_RUN_STATES:
                return  # finished already (a claim that found its row): never pushed twice
            if run.state == "started":
                if self.store.attempt(run.id) > MAX_TURN_ATTEMPTS:
                    log.error("cron run interrupted too often; marked failed",
                              extra={"job": run.job_id, "run": run.id})
                    self._fail(run, f"turn interrupted {MAX_TURN_ATTEMPTS} times")
                    return
                chat = run.session_id.split(":", 1)[1]
                run_id = run.id

                def record(answer: str) -> None:
                    """Stored in the agent's transaction with the answer: a kill after the
                    turn finds the reply, and never runs the turn (its tools) again."""
                    self.store.set_reply(run_id, answer, is_silent(answer), self.clock.now())

                msg = Inbound(channel=self.channel, chat_id=chat, user_id=USER_ID,
                              text=synthetic_text(run), scheduled=True, on_answer=record,
                              scheduled_for=run.due_at, source=f"cron:{run.job_id}")
                try:
                    reply = await self.respond(msg, None)
                except TurnAborted:
                    return  # shutdown before or during the turn: resumed at the next start
                except TurnFailed as exc:  # nobody asked: nothing to apologise to
                    log.warning("cron turn failed; nothing pushed",
                                extra={"job": run.job_id, "run": run.id, "error": exc.reason})
                    self._fail(run, exc.reason)
                    return
                except BudgetReached as exc:  # a limit reached mid-turn: the rest skipped
                    log.warning("cron run skipped: budget reached",
                                extra={"job": run.job_id, "run": run.id, "error": exc.reason})
                    self.store.skip(run.id, exc.reason, self.clock.now())
                    return
                silent = is_silent(reply)
                self.store.set_reply(run.id, reply, silent, self.clock.now())
                if silent:
                    log.info("cron reply is [silent]; not pushed",
                             extra={"job": run.job_id, "run": run.id})
                    return
                run.reply, run.state = reply, "replied"
            await self._deliver(run)
        except Exception as exc:
            from gantry.store.space import db_dir, full_error, is_full, wait_for_room

            full = is_full(exc)
            if full and run.state == "started":  # the turn rolled back: run it when room
                directory = db_dir(self.store.conn)
                log.error("cron run cut by a full disk; resumed once there is room",
                          extra={"job": run.job_id, "run": run.id,
                                 "error": str(full_error(self.store.conn))})
                await wait_for_room(directory)
                await self._execute(run)  # bounded: each turn attempt counts (MAX_TURN_ATTEMPTS)
                return
            log.exception("cron run failed", extra={"job": run.job_id, "run": run.id})
            try:
                self._fail(run, f"internal error ({type(exc).__name__})")
            except Exception:
                log.exception("cron: could not record the failure")
        finally:
            self.running.discard(run.job_id)

    def _fail(self, run: Run, reason: str) -> None:
        """Record the run failed; a failure that completes a streak sends its notice."""
        notice = self.store.fail(run.id, reason, self.clock.now(), notice=failure_notice)
        if notice is not None:
            log.warning("cron job failed repeatedly; notifying the chat",
                        extra={"job": run.job_id, "run": run.id})
            self._tg.start_soon(self._notify, notice)  # not under the job's in-flight mark

    async def _notify(self, notice: Notice) -> None:
        chat = notice.session_id.split(":", 1)[1]
        why = await self.push_retrying(chat, notice.text, lambda: 0, None, lambda: True,
                                       notice.job_id)
        if why is not None:
            log.error("cron failure notice could not be pushed",
                      extra={"job": notice.job_id, "error": why})
        self.store.notice_done(notice.run_id, sent=why is None)

    async def _deliver(self, run: Run) -> None:
        assert run.reply is not None
        chat = run.session_id.split(":", 1)[1]

        def progress(done: int, total: int) -> None:
            run.sent_parts = done
            self.store.mark_sent(run.id, done, total, self.clock.now())

        def delivered() -> bool:
            return self.store.run_state(run.id) == "delivered"

        why = await self.push_retrying(chat, run.reply, lambda: run.sent_parts, progress,
                                       delivered, run.job_id)
        if why is None:
            log.info("cron reply pushed", extra={"job": run.job_id, "run": run.id})
            return
        log.error("cron reply could not be pushed; marked failed",
                  extra={"job": run.job_id, "run": run.id, "error": why})
        self._fail(run, why)

    async def push_retrying(
        self, chat: str, text: str, sent: Callable[[], int], progress: Progress | None,
        done: Callable[[], bool], job_id: int, origin: str = "scheduled",
    ) -> str | None:
        """Push with backoff until `done()`; None when out, else why it was given up (a
        refused chat at once, anything else after DELIVERY_ATTEMPTS tries). Each try starts
        at part `sent()`, so parts already out are not sent again. Watches push this way
        too (`job_id` is then the watch's id, for the log)."""
        delay = 1.0
        for attempt in range(1, DELIVERY_ATTEMPTS + 1):
            try:
                with anyio.CancelScope(shield=True) as grace:
                    grace.deadline = anyio.current_time() + DELIVERY_GRACE
                    await self.push(chat, text, sent=sent(), progress=progress, origin=origin)
                if done():
                    return None
            except PermissionError as exc:
                log.error("cron push refused for this chat",
                          extra={"job": job_id, "error": str(exc)})
                return str(exc)
            except Exception as exc:
                log.warning("cron push failed; will retry",
                            extra={"job": job_id, "attempt": attempt, "error": str(exc)})
            if attempt < DELIVERY_ATTEMPTS:
                await self.clock.sleep(delay)
                delay = min(60.0, delay * 2)
        return f"push failed {DELIVERY_ATTEMPTS} times"
