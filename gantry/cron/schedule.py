"""Schedule math, pure: what a `when` string means and when a schedule fires next.

Every function takes the current instant and the zone as arguments (no clock, no I/O), so
the property tests can drive them through any date. Instants are aware UTC datetimes;
wall times are interpreted in the configured zone (CRON_TZ).

DST policy (the same for one-shots, simple forms and cron expressions at a fixed time):
a wall time that does not exist (spring forward) fires at the first instant after the gap
(02:30 → 03:00 the day clocks jump from 02:00 to 03:00); a wall time that occurs twice
(fall back) fires once, at its first occurrence. Jobs whose minute or hour field is a
wildcard, and "every N minutes/hours", follow elapsed time instead. Cron expressions are
evaluated by cronsim, which implements this (Debian cron's behaviour); the simple forms are
translated to cron expressions, never evaluated by hand.

Range: datetimes end at 9999-12-31, so every computation is bounded by LATEST. A `when`
beyond it (a huge count, a far date) is a ScheduleError; a schedule whose next fire would lie
beyond it is over (next_fire returns None). No input reaches the caller as OverflowError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from cronsim import CronSim, CronSimError

MIN_INTERVAL = 60  # seconds: "every N minutes" below a minute is refused
MAX_LOOKAHEAD = 400  # cron iterations tried while looking for a strictly later instant
# The last instant a job may fire: a day short of datetime.max, so its wall time exists in
# every zone (offsets stay within ±26 h) and describing it can never overflow.
LATEST = datetime(9999, 12, 30, tzinfo=UTC)
_END = f"{LATEST:%Y-%m-%d}"
MAX_WHEN_CHARS = 200  # longer is no schedule (and keeps int() off 4300-digit numbers)

UNITS = {
    "s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
    "w": 604800, "week": 604800, "weeks": 604800,
}
DAYS = {
    "sunday": 0, "sun": 0, "monday": 1, "mon": 1, "tuesday": 2, "tue": 2, "tues": 2,
    "wednesday": 3, "wed": 3, "thursday": 4, "thu": 4, "thur": 4, "thurs": 4,
    "friday": 5, "fri": 5, "saturday": 6, "sat": 6,
}
DAY_SETS = {"day": "*", "weekday": "1-5", "weekend": "0,6"}
_TIME = r"(?:(?P<h>\d{1,2})(?::(?P<m>\d{2}))?\s*(?P<ampm>am|pm|a\.m\.|p\.m\.)?|noon|midnight)"
_NUM = r"(?P<n>\d+|an?|one)"
_UNIT = "|".join(sorted(UNITS, key=len, reverse=True))
RE_IN = re.compile(rf"in\s+{_NUM}\s*(?P<unit>{_UNIT})")
RE_EVERY_N = re.compile(rf"every\s+(?:(?P<n>\d+)\s*)?(?P<unit>{_UNIT})")
RE_AT = re.compile(rf"(?:(?P<day>today|tomorrow)\s+)?(?:at\s+)?(?P<time>{_TIME})")
RE_EVERY_AT = re.compile(
    rf"(?:every\s+|each\s+)?(?P<days>[a-z ,]+?)s?\s+at\s+(?P<time>{_TIME})"
)
RE_CRON_FIELD = re.compile(r"[0-9A-Za-z*/,\-?#L]+")


class ScheduleError(ValueError):
    """A `when` that cannot be scheduled; `str()` tells the model how to fix it."""


@dataclass(frozen=True)
class Schedule:
    """What a job does over time: fire once, by a cron expression, or every N seconds."""

    kind: str  # "once" | "cron" | "every"
    spec: str  # ISO instant (UTC) | cron expression | interval seconds
    label: str  # how it reads to a person ("every day at 07:30")

    def first(self, now: datetime, tz: tzinfo, anchor: datetime | None = None) -> datetime | None:
        """The first fire strictly after `now` (a one-shot's own instant, if still ahead)."""
        return next_fire(self, now, tz, anchor or now)


def _utc(dt: datetime) -> datetime:
    return dt.astimezone(UTC)


def later(base: datetime, seconds: int) -> datetime | None:
    """`base` plus `seconds`, or None when that lies past LATEST (however large the count)."""
    if seconds > (LATEST - base).total_seconds():
        return None
    return base + timedelta(seconds=seconds)


def resolve_local(naive: datetime, tz: tzinfo) -> datetime:
    """A wall time in `tz` as a UTC instant, with the DST policy in the module docstring."""
    local = naive.replace(tzinfo=tz, fold=0)
    if _utc(local).astimezone(tz).replace(tzinfo=None) == naive:
        return _utc(local)  # exists (fold=0 = the first of two, on a fall-back day)
    probe = naive.replace(second=0, microsecond=0)
    for _ in range(24 * 60):  # imaginary: walk to the first real minute after the gap
        probe += timedelta(minutes=1)
        cand = probe.replace(tzinfo=tz, fold=0)
        if _utc(cand).astimezone(tz).replace(tzinfo=None) == probe:
            return _utc(cand)
    raise ScheduleError(f"{naive.isoformat()} does not exist in this time zone")


def next_fire(
    schedule: Schedule, after: datetime, tz: tzinfo, anchor: datetime | None = None
) -> datetime | None:
    """The first fire strictly after `after` (UTC), or None when the schedule is over."""
    if schedule.kind == "once":
        at = datetime.fromisoformat(schedule.spec)
        return at if at > after else None
    if schedule.kind == "every":
        step = int(schedule.spec)
        base = anchor if anchor is not None else after
        if base > after:
            return base
        k = int((after - base).total_seconds() // step) + 1
        return later(base, k * step)
    if after >= LATEST:
        return None
    it = CronSim(schedule.spec, after.astimezone(tz))
    for _ in range(MAX_LOOKAHEAD):
        try:
            cand = _utc(next(it))
        except (StopIteration, OverflowError):  # cronsim walked past year 9999
            return None
        if cand > LATEST:
            return None
        if cand > after:  # a local-time iteration can land before `after` in a fall-back fold
            return cand
    return None


def _parse_time(m: re.Match[str]) -> tuple[int, int]:
    text = m.group(0).strip()
    if text.endswith("noon"):
        return 12, 0
    if text.endswith("midnight"):
        return 0, 0
    h, mi, ampm = int(m.group("h")), int(m.group("m") or 0), (m.group("ampm") or "")
    if ampm:
        if not 1 <= h <= 12:
            raise ScheduleError(f"{text!r}: with am/pm the hour must be 1–12")
        h = h % 12 + (12 if ampm.startswith("p") else 0)
    if not (0 <= h <= 23 and 0 <= mi <= 59):
        raise ScheduleError(f"{text!r} is not a time of day (use HH:MM, 00:00–23:59)")
    return h, mi


def _days(text: str) -> str | None:
    """'day' → '*', 'weekday' → '1-5', 'monday and friday' → '1,5'; None if not days."""
    text = text.strip()
    for word, spec in DAY_SETS.items():
        if text in (word, word + "s"):
            return spec
    if text == "daily":
        return "*"
    names = [w for w in re.split(r"\s*(?:,|\band\b)\s*", text) if w]
    out: list[int] = []
    for name in names:
        name = name.removesuffix("s") if name not in DAYS else name
        if name not in DAYS:
            return None
        out.append(DAYS[name])
    return ",".join(str(d) for d in sorted(set(out))) if out else None


def _cron_label(expr: str) -> str:
    return f"cron '{expr}'"


def _check_cron(expr: str, tz: tzinfo, now: datetime) -> None:
    try:
        it = CronSim(expr, now.astimezone(tz))
    except (CronSimError, ValueError, IndexError) as exc:
        raise ScheduleError(
            f"{expr!r} is not a valid cron expression ({exc}); use five fields "
            "'minute hour day-of-month month day-of-week', e.g. '30 7 * * 1-5'"
        ) from None
    try:
        first = next(it)
    except (StopIteration, CronSimError, ValueError, OverflowError):
        raise ScheduleError(f"cron expression {expr!r} never fires") from None
    if first > LATEST:
        raise ScheduleError(f"cron expression {expr!r} never fires before {_END}")


def _fmt_hm(h: int, m: int) -> str:
    return f"{h:02d}:{m:02d}"


def _too_far(raw: str) -> ScheduleError:
    return ScheduleError(
        f"{raw!r} is too far in the future: the latest time a job can run is {_END}; give a "
        "nearer time"
    )


def parse(when: str, repeat: bool, now: datetime, tz: tzinfo) -> Schedule:
    """Turn a tool's `when` into a Schedule, or raise ScheduleError saying what works.

    One-shot: an ISO-8601 instant (with offset or Z; naive means `tz`), "in 20 minutes",
    "at 17:00", "tomorrow at 9am". Recurring: a 5-field cron expression, "every day at
    07:30", "every weekday at 9", "every monday and friday at 18:00", "every 2 hours".
    A one-shot in the past is an error, and so is anything past LATEST.
    """
    raw = " ".join(when.strip().split())
    if len(raw) > MAX_WHEN_CHARS:
        raise ScheduleError(
            f"`when` is {len(raw)} chars; a time or schedule fits in {MAX_WHEN_CHARS}"
        )
    try:
        return _parse(raw, repeat, now, tz)
    except OverflowError:  # a date at the very ends of the calendar, shifted by a zone
        raise ScheduleError(
            f"{raw!r} is outside the dates a job can run at (now until {_END})"
        ) from None


def _parse(raw: str, repeat: bool, now: datetime, tz: tzinfo) -> Schedule:
    text = raw.lower()
    if not text:
        raise ScheduleError("`when` is empty; e.g. 'in 20 minutes' or '2026-12-01T09:00'")
    fields = raw.split(" ")
    if len(fields) == 5 and all(RE_CRON_FIELD.fullmatch(f) for f in fields) and any(
        c.isdigit() or c == "*" for c in fields[0]
    ):
        _check_cron(raw, tz, now)
        return Schedule("cron", raw, _cron_label(raw))
    if m := RE_EVERY_N.fullmatch(text):
        n = int(m.group("n") or 1)
        unit = m.group("unit")
        step = n * UNITS[unit]
        if UNITS[unit] >= 86400:
            raise ScheduleError(
                f"{raw!r}: say the time of day, e.g. 'every day at 07:30' or a cron "
                "expression such as '0 8 */2 * *'"
            )
        if step < MIN_INTERVAL:
            raise ScheduleError(f"{raw!r} is too frequent; the shortest interval is 1 minute")
        if later(now, step) is None:
            raise ScheduleError(
                f"{raw!r} is too long an interval: its first run would be after {_END}; for "
                "rare jobs use a cron expression such as '0 9 1 1 *' (every 1 January)"
            )
        label = f"every {n} {unit}" if m.group("n") else f"every {unit}"
        return Schedule("every", str(step), label)
    if text in ("hourly",):
        return Schedule("every", "3600", "every hour")
    if m := RE_EVERY_AT.fullmatch(text):
        days = _days(m.group("days").removeprefix("on ").strip())
        recurring = text.startswith(("every", "each")) or m.group("days").strip() == "daily"
        if days is not None and (recurring or repeat):
            h, mi = _parse_time(m)
            expr = f"{mi} {h} * * {days}"
            _check_cron(expr, tz, now)
            shown = m.group("days").strip().removesuffix("s")
            shown = "day" if shown == "daily" else shown
            return Schedule("cron", expr, f"every {shown} at {_fmt_hm(h, mi)}")
    if text.startswith(("every", "each")):
        raise ScheduleError(
            f"{raw!r} is not a form I know; use e.g. 'every day at 07:30', 'every weekday "
            "at 9', 'every monday at 18:00', 'every 2 hours', or a 5-field cron expression"
        )
    once = _parse_once(raw, text, now, tz)
    if once is None:
        raise ScheduleError(
            f"cannot read {raw!r} as a time; use an ISO-8601 instant such as "
            f"'{(now.astimezone(tz) + timedelta(hours=1)).strftime('%Y-%m-%dT%H:%M')}', "
            "'in 20 minutes', 'at 17:00', or (with repeat) 'every day at 07:30' or a cron "
            "expression"
        )
    if repeat:
        raise ScheduleError(
            f"{raw!r} is a single instant but repeat is true; for a recurring job use "
            "'every day at 07:30', 'every 2 hours' or a cron expression"
        )
    if once > LATEST:
        raise _too_far(raw)
    if once <= now:
        shown = once.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S %Z")
        current = now.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S %Z")
        raise ScheduleError(
            f"{raw!r} ({shown}) is in the past; it is now {current}. Give a future time."
        )
    return Schedule("once", once.isoformat(), f"once at {once.isoformat()}")


def _parse_once(raw: str, text: str, now: datetime, tz: tzinfo) -> datetime | None:
    if m := RE_IN.fullmatch(text):
        n_text = m.group("n")
        n = 1 if n_text in ("a", "an", "one") else int(n_text)
        at = later(now, n * UNITS[m.group("unit")])
        if at is None:
            raise _too_far(raw)
        return at
    if m := RE_AT.fullmatch(text):
        if m.group("h") is None and not m.group("time").endswith(("noon", "midnight")):
            return None
        h, mi = _parse_time(m)
        today = now.astimezone(tz).date()
        day = today + timedelta(days=1) if m.group("day") == "tomorrow" else today
        at = resolve_local(datetime(day.year, day.month, day.day, h, mi), tz)
        if at <= now and m.group("day") is None:  # "at 9" after 9 means tomorrow
            day = today + timedelta(days=1)
            at = resolve_local(datetime(day.year, day.month, day.day, h, mi), tz)
        return at
    try:
        dt = datetime.fromisoformat(raw.replace(" ", "T", 1) if " " in raw else raw)
    except ValueError:
        return None
    if dt.tzinfo is None:
        return resolve_local(dt, tz)
    return _utc(dt)


def describe(at: datetime, tz: tzinfo) -> str:
    """An instant as the user reads it: local wall time with the zone's abbreviation."""
    return at.astimezone(tz).strftime("%Y-%m-%d %H:%M %Z (%a)")
