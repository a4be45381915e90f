"""The cron_* tools the model calls: schedule, list and cancel jobs of the chat it talks in.

Every job is bound to the session of the turn that scheduled it (gantry.tools.CALLER);
list and cancel only ever see that session's jobs. Errors are ToolErrors worded so the
model can correct its call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

from gantry.cron.schedule import Schedule, ScheduleError, describe, parse
from gantry.cron.store import CapReached, CronStore, Job
from gantry.tools import CALLER, Source, Tool, ToolError

SOURCE = Source("cron")
PROMPT_MAX_CHARS = 4_000


def number_arg(raw: object, problem: str) -> int:
    """A job or watch number as the model sends it (`3`, `"3"`, `"#3"`); else `problem`."""
    if isinstance(raw, str) and raw.strip().lstrip("#").isdecimal():
        raw = int(raw.strip().lstrip("#"))
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise ToolError(problem)
    return raw


@dataclass
class CronTools:
    store: CronStore
    tz_name: str
    max_jobs: int
    now: Callable[[], float]
    poke: Callable[[], None] = lambda: None  # wake the ticker: a new job may be due soonest
    can_push: Callable[[str], bool] = lambda chat_id: True  # the channel's push allowlist

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.tz_name)

    def _session(self) -> str:
        session = CALLER.get()
        if not session:
            raise ToolError("cron tools work only inside a conversation turn")
        return session

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.now(), UTC)

    async def schedule(self, args: dict[str, Any]) -> str:
        session = self._session()
        when, prompt, repeat = args.get("when"), args.get("prompt"), args.get("repeat", False)
        if not isinstance(when, str) or not when.strip():
            raise ToolError("`when` is required: e.g. 'in 20 minutes' or 'every day at 07:30'")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ToolError("`prompt` is required: what you should do when the job fires")
        if len(prompt) > PROMPT_MAX_CHARS:
            raise ToolError(f"`prompt` is {len(prompt)} chars; keep it under {PROMPT_MAX_CHARS}")
        if not isinstance(repeat, bool):
            raise ToolError("`repeat` must be true or false")
        if not self.can_push(session.split(":", 1)[-1]):
            raise ToolError(
                "scheduled replies can only be sent to a private chat with an allowed user; "
                "this chat cannot receive them, so nothing was scheduled"
            )
        now = self._now()
        try:
            sched = parse(when, repeat, now, self.tz)
        except ScheduleError as exc:
            raise ToolError(str(exc)) from None
        first = sched.first(now, self.tz)
        if first is None:
            raise ToolError(f"{when!r} never fires after now; give a future time")
        try:
            job_id = self.store.add(
                session_id=session, kind=sched.kind, spec=sched.spec, label=sched.label,
                tz=self.tz_name, prompt=prompt.strip(), next_at=first.timestamp(),
                anchor_at=now.timestamp(), max_jobs=self.max_jobs, now=now.timestamp(),
            )
        except CapReached:
            raise ToolError(
                f"the limit of {self.max_jobs} active scheduled jobs (CRON_MAX_JOBS) is "
                "reached; cancel one first (cron_list shows them, cron_cancel removes one)"
            ) from None
        self.poke()
        label = "once" if sched.kind == "once" else sched.label
        return f"scheduled job #{job_id} ({label}); next run {describe(first, self.tz)}"

    async def list_jobs(self, args: dict[str, Any]) -> str:
        session = self._session()
        jobs = self.store.active(session)
        head = f"now: {describe(self._now(), self.tz)}"
        if not jobs:
            return head + "\nno scheduled jobs in this chat"
        return head + "\n" + "\n".join(job_line(j) for j in jobs)

    async def cancel(self, args: dict[str, Any]) -> str:
        session = self._session()
        raw = number_arg(args.get("id"), "`id` must be a job number from cron_list")
        if not self.store.cancel(raw, session, self.now()):
            raise ToolError(f"no active job #{raw} in this chat; cron_list shows its jobs")
        return f"cancelled job #{raw}"

    def tools(self) -> list[Tool]:
        tz = self.tz_name
        return [
            Tool(
                "cron_schedule",
                "Schedule a message to yourself for later, in this chat. When it fires you get "
                "`prompt` as a message from the scheduler, answer it with tools as usual, and "
                "your reply is sent to the user; start the reply with [silent] to send nothing. "
                f"Times are in {tz}. `when` for a one-off: an ISO-8601 time ('2026-12-01T17:00' "
                f"means {tz}; or with an offset or Z), 'in 20 minutes', 'at 17:00', 'tomorrow "
                "at 9am'. With repeat=true: 'every day at 07:30', 'every weekday at 9', 'every "
                "monday at 18:00', 'every 2 hours', or a 5-field cron expression "
                "('30 7 * * 1-5'). Answers with the job id and the next run time.",
                {
                    "type": "object",
                    "properties": {
                        "when": {"type": "string", "description": "when to run (see above)"},
                        "prompt": {
                            "type": "string",
                            "description": "the instruction you will receive when it fires, "
                            "e.g. 'Remind the user to call the dentist.'",
                        },
                        "repeat": {
                            "type": "boolean",
                            "description": "true for a recurring job",
                            "default": False,
                        },
                    },
                    "required": ["when", "prompt"],
                },
                self.schedule,
                SOURCE,
            ),
            Tool(
                "cron_list",
                "List the scheduled jobs of this chat with their next run times, and the "
                "current time.",
                {"type": "object", "properties": {}},
                self.list_jobs,
                SOURCE,
            ),
            Tool(
                "cron_cancel",
                "Cancel a scheduled job of this chat by its id (from cron_list).",
                {
                    "type": "object",
                    "properties": {"id": {"type": "integer", "description": "the job id"}},
                    "required": ["id"],
                },
                self.cancel,
                SOURCE,
            ),
        ]


def zone(name: str) -> tzinfo:
    """A job's zone; UTC if the system tzdata no longer knows it (shown, never fatal)."""
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError):  # ZoneInfoNotFoundError is a KeyError
        return UTC


def job_line(job: Job) -> str:
    """One job as a line for the model, /status and the operator."""
    tz = zone(job.tz)
    nxt = (
        describe(datetime.fromtimestamp(job.next_at, UTC), tz)
        if job.next_at is not None else "-"
    )
    label = "once" if job.kind == "once" else job.label
    prompt = job.prompt if len(job.prompt) <= 80 else job.prompt[:79] + "…"
    return f"#{job.id} {label}; next {nxt}; prompt: {prompt}"


def schedule_of(job: Job) -> Schedule:
    return Schedule(job.kind, job.spec, job.label)
