"""Schedule math: the `when` forms, past times, and DST days (pure functions, no clock)."""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gantry.cron.schedule import (
    LATEST,
    Schedule,
    ScheduleError,
    describe,
    next_fire,
    parse,
    resolve_local,
)

LA = ZoneInfo("America/Los_Angeles")
BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 3, 5, 12, 0, tzinfo=UTC)


def z(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def fires(expr: str, start: datetime, tz: ZoneInfo, n: int) -> list[datetime]:
    out, t = [], start
    sched = Schedule("cron", expr, expr)
    for _ in range(n):
        nxt = next_fire(sched, t, tz)
        assert nxt is not None
        out.append(nxt)
        t = nxt
    return out


# ----------------------------------------------------------------------------- forms


@pytest.mark.parametrize(
    ("when", "kind", "spec"),
    [
        ("every day at 07:30", "cron", "30 7 * * *"),
        ("Every weekday at 9", "cron", "0 9 * * 1-5"),
        ("every weekend at 10am", "cron", "0 10 * * 0,6"),
        ("every monday and friday at 6:15 pm", "cron", "15 18 * * 1,5"),
        ("daily at 12:00", "cron", "0 12 * * *"),
        ("every day at noon", "cron", "0 12 * * *"),
        ("every 2 hours", "every", "7200"),
        ("every 15 minutes", "every", "900"),
        ("every hour", "every", "3600"),
        ("30 7 * * 1-5", "cron", "30 7 * * 1-5"),
        ("*/10 * * * *", "cron", "*/10 * * * *"),
    ],
)
def test_recurring_forms(when: str, kind: str, spec: str) -> None:
    s = parse(when, True, NOW, LA)
    assert (s.kind, s.spec) == (kind, spec)
    # "every …" forms need no repeat flag: the words say it recurs
    assert parse(when, False, NOW, LA) == s


def test_one_shot_forms() -> None:
    assert parse("in 20 minutes", False, NOW, LA).spec == (NOW + timedelta(minutes=20)).isoformat()
    assert parse("in an hour", False, NOW, LA).spec == (NOW + timedelta(hours=1)).isoformat()
    assert parse("2026-03-05T17:00:00Z", False, NOW, LA).spec == "2026-03-05T17:00:00+00:00"
    assert parse("2026-03-05T17:00+01:00", False, NOW, LA).spec == "2026-03-05T16:00:00+00:00"
    # naive ISO means CRON_TZ (LA is UTC-8 in early March)
    assert parse("2026-03-05T17:00", False, NOW, LA).spec == "2026-03-06T01:00:00+00:00"
    assert parse("2026-03-05 17:00", False, NOW, LA).spec == "2026-03-06T01:00:00+00:00"
    # NOW is 04:00 in LA: "at 5pm" is today, "at 3am" is tomorrow
    assert parse("at 5pm", False, NOW, LA).spec == "2026-03-06T01:00:00+00:00"
    assert parse("at 3:00", False, NOW, LA).spec == "2026-03-06T11:00:00+00:00"
    assert parse("tomorrow at 9am", False, NOW, LA).spec == "2026-03-06T17:00:00+00:00"


@pytest.mark.parametrize(
    ("when", "repeat", "match"),
    [
        ("2026-03-01T09:00Z", False, "in the past; it is now 2026-03-05 04:00:00 PST"),
        ("today at 3am", False, "in the past"),
        ("2026-03-09T09:00Z", True, "single instant but repeat is true"),
        ("every 30 seconds", True, "too frequent"),
        ("every day", True, "say the time of day"),
        ("every blue moon at 9", True, "not a form I know"),
        ("next tuesday-ish", False, "cannot read"),
        ("61 * * * *", True, "not a valid cron expression"),
        ("0 0 31 2 *", True, "cron expression"),
        ("every day at 25:00", True, "not a time of day"),
        ("at 13pm", False, "hour must be 1–12"),
        ("", False, "empty"),
    ],
)
def test_errors_say_how_to_fix(when: str, repeat: bool, match: str) -> None:
    with pytest.raises(ScheduleError, match=match):
        parse(when, repeat, NOW, LA)


@pytest.mark.parametrize(
    ("when", "repeat", "tz", "match"),
    [
        ("in 99999999999 days", False, LA, "too far in the future: the latest time a job"),
        ("in 500000 weeks", False, LA, "too far in the future"),
        ("in 1" + "0" * 5000 + " minutes", False, LA, "chars; a time or schedule fits in"),
        ("every 99999999999999 minutes", True, LA, "too long an interval"),
        ("every 99999999 hours", True, LA, "too long an interval"),
        ("9999-12-31T23:59:59Z", False, LA, "too far in the future"),
        ("9999-12-31T23:59", False, LA, "outside the dates a job can run at"),  # UTC: year 10000
        ("0001-01-01T00:00", False, BERLIN, "outside the dates a job can run at"),  # UTC: year 0
        ("0001-01-01T00:00Z", False, LA, "outside the dates a job can run at"),
    ],
)
def test_huge_counts_and_far_dates_are_schedule_errors(
    when: str, repeat: bool, tz: ZoneInfo, match: str
) -> None:
    with pytest.raises(ScheduleError, match=match):
        parse(when, repeat, NOW, tz)


def test_a_schedule_whose_next_fire_is_past_the_calendar_is_over() -> None:
    hourly = Schedule("every", "3600", "every hour")
    assert next_fire(hourly, z("9999-12-29T23:30Z"), UTC, z("2026-01-01T00:00Z")) == z(
        "9999-12-30T00:00Z")
    assert next_fire(hourly, z("9999-12-30T00:00Z"), UTC, z("2026-01-01T00:00Z")) is None
    huge = Schedule("every", str(10**15), "every ages")  # a row written before the bound
    assert next_fire(huge, NOW, UTC, NOW - timedelta(seconds=1)) is None
    leap = Schedule("cron", "0 0 29 2 *", "29 February")  # the next leap day is in 10000
    assert next_fire(leap, z("9996-03-01T00:00Z"), BERLIN) is None
    assert next_fire(Schedule("cron", "* * * * *", ""), z("9999-12-31T12:00Z"), LA) is None
    with pytest.raises(ScheduleError, match="never fires"):
        parse("0 0 29 2 *", True, z("9996-03-01T00:00Z"), BERLIN)


# ----------------------------------------------------------------------------- DST days
# America/Los_Angeles 2026: 02:00 → 03:00 on Mar 8; 02:00 → 01:00 on Nov 1.
# Europe/Berlin 2026:       02:00 → 03:00 on Mar 29; 03:00 → 02:00 on Oct 25.


@pytest.mark.parametrize(
    ("tz", "expr", "start", "expected"),
    [
        # spring forward: 02:30 does not exist → runs at 03:00, once; no day skipped
        (LA, "30 2 * * *", "2026-03-07T00:00Z",
         ["2026-03-07T10:30Z", "2026-03-08T10:00Z", "2026-03-09T09:30Z"]),
        (BERLIN, "30 2 * * *", "2026-03-27T12:00Z",
         ["2026-03-28T01:30Z", "2026-03-29T01:00Z", "2026-03-30T00:30Z"]),
        # 07:30 is untouched, only its UTC instant moves by the hour
        (LA, "30 7 * * *", "2026-03-07T00:00Z",
         ["2026-03-07T15:30Z", "2026-03-08T14:30Z", "2026-03-09T14:30Z"]),
        (BERLIN, "30 7 * * *", "2026-03-27T12:00Z",
         ["2026-03-28T06:30Z", "2026-03-29T05:30Z", "2026-03-30T05:30Z"]),
        # fall back: a wall time that happens twice runs once, at its first occurrence
        (BERLIN, "30 2 * * *", "2026-10-23T12:00Z",
         ["2026-10-24T00:30Z", "2026-10-25T00:30Z", "2026-10-26T01:30Z"]),
        (LA, "30 1 * * *", "2026-10-31T00:00Z",
         ["2026-10-31T08:30Z", "2026-11-01T08:30Z", "2026-11-02T09:30Z"]),
        # LA's repeated hour is 01:00–02:00, so 02:30 and 07:30 happen once anyway
        (LA, "30 2 * * *", "2026-10-31T00:00Z",
         ["2026-10-31T09:30Z", "2026-11-01T10:30Z", "2026-11-02T10:30Z"]),
        (LA, "30 7 * * *", "2026-10-31T00:00Z",
         ["2026-10-31T14:30Z", "2026-11-01T15:30Z", "2026-11-02T15:30Z"]),
        (BERLIN, "30 7 * * *", "2026-10-23T12:00Z",
         ["2026-10-24T05:30Z", "2026-10-25T06:30Z", "2026-10-26T06:30Z"]),
    ],
)
def test_daily_job_on_dst_days(tz: ZoneInfo, expr: str, start: str, expected: list[str]) -> None:
    assert fires(expr, z(start), tz, 3) == [z(e) for e in expected]


def test_restart_inside_the_repeated_hour_does_not_double() -> None:
    # 01:30 PDT (08:30Z) already fired; asking again from 01:40 PST (second pass) → next day
    assert next_fire(Schedule("cron", "30 1 * * *", ""), z("2026-11-01T09:40Z"), LA) == z(
        "2026-11-02T09:30Z"
    )


def test_interval_and_wildcard_jobs_follow_elapsed_time() -> None:
    every = Schedule("every", "7200", "every 2 hours")
    anchor = z("2026-03-08T08:00Z")  # 00:00 PST
    t, seen = anchor, []
    for _ in range(3):
        nxt = next_fire(every, t, LA, anchor)
        assert nxt is not None
        seen.append(nxt)
        t = nxt
    assert seen == [z("2026-03-08T10:00Z"), z("2026-03-08T12:00Z"), z("2026-03-08T14:00Z")]
    # every 30 minutes through LA's repeated hour: both passes fire, 30 minutes apart
    half = fires("*/30 * * * *", z("2026-11-01T07:50Z"), LA, 5)
    assert all(b - a == timedelta(minutes=30) for a, b in itertools.pairwise(half))


def test_one_shot_in_a_gap_or_fold() -> None:
    assert parse("2026-03-08T02:30", False, NOW, LA).spec == "2026-03-08T10:00:00+00:00"
    assert parse("2026-11-01T01:30", False, NOW, LA).spec == "2026-11-01T08:30:00+00:00"


# ----------------------------------------------------------------------------- properties

ZONES = [
    "America/Los_Angeles", "Europe/Berlin", "UTC", "Australia/Lord_Howe", "Asia/Kolkata",
    "America/Sao_Paulo", "Pacific/Chatham", "America/St_Johns", "Europe/London",
]


def _exists(d: date, h: int, m: int, tz: ZoneInfo) -> bool:
    naive = datetime(d.year, d.month, d.day, h, m)
    return naive.replace(tzinfo=tz).astimezone(UTC).astimezone(tz).replace(tzinfo=None) == naive


@settings(max_examples=150, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    hour=st.integers(0, 23),
    minute=st.integers(0, 59),
    start=st.datetimes(datetime(2020, 1, 1), datetime(2035, 12, 1), timezones=st.just(UTC)),
    weekdays=st.booleans(),
)
def test_daily_fires_increase_and_map_back_to_the_wall_time(
    zone: str, hour: int, minute: int, start: datetime, weekdays: bool
) -> None:
    tz = ZoneInfo(zone)
    expr = f"{minute} {hour} * * {'1-5' if weekdays else '*'}"
    got = fires(expr, start, tz, 12)
    assert got[0] > start
    assert all(a < b for a, b in itertools.pairwise(got))  # strictly increasing
    days = [g.astimezone(tz).date() for g in got]
    for prev, cur in itertools.pairwise(days):  # one fire per day, none skipped
        gap = (cur - prev).days
        assert gap == 1 or (weekdays and prev.weekday() == 4 and gap == 3), (prev, cur)
    for g in got:
        local = g.astimezone(tz)
        if (local.hour, local.minute) == (hour, minute):
            fold0 = datetime(local.year, local.month, local.day, hour, minute, tzinfo=tz)
            assert g == fold0.astimezone(UTC)  # a repeated wall time: the first occurrence
        else:
            # only when the wall time does not exist that day: the first instant after the gap
            assert not _exists(local.date(), hour, minute, tz)
            assert (local.hour, local.minute) > (hour, minute)
            assert (g - timedelta(minutes=1)).astimezone(tz).utcoffset() != local.utcoffset()


@settings(max_examples=100, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    now=st.datetimes(datetime(2020, 1, 1), datetime(2035, 12, 1), timezones=st.just(UTC)),
    minutes=st.integers(1, 60 * 24 * 60),
)
def test_relative_and_iso_round_trip(zone: str, now: datetime, minutes: int) -> None:
    tz = ZoneInfo(zone)
    s = parse(f"in {minutes} minutes", False, now, tz)
    assert datetime.fromisoformat(s.spec) == now + timedelta(minutes=minutes)
    target = (now + timedelta(minutes=minutes)).replace(microsecond=0)
    if target > now:
        assert datetime.fromisoformat(parse(target.isoformat(), False, now, tz).spec) == target
    local = target.astimezone(tz).replace(tzinfo=None)
    resolved = resolve_local(local, tz)
    assert resolved.astimezone(tz).replace(tzinfo=None) == local  # naive wall time maps back


@settings(max_examples=100, deadline=None)
@given(
    zone=st.sampled_from(ZONES),
    now=st.datetimes(datetime(2020, 1, 1), datetime(2035, 12, 1), timezones=st.just(UTC)),
    hour=st.integers(0, 23),
    minute=st.integers(0, 59),
)
def test_at_time_is_the_next_such_wall_time(
    zone: str, now: datetime, hour: int, minute: int
) -> None:
    tz = ZoneInfo(zone)
    at = datetime.fromisoformat(parse(f"at {hour}:{minute:02d}", False, now, tz).spec)
    assert now < at <= now + timedelta(hours=26)
    local = at.astimezone(tz)
    if _exists(local.date(), hour, minute, tz):
        assert (local.hour, local.minute) == (hour, minute)


# Parsing and next-fire are total: any text at any instant is a Schedule or a ScheduleError,
# and a Schedule's next fire is an instant up to LATEST (describable in its zone) or None.
_BIG = st.integers(0, 10**22).map(str)
_UNIT = st.sampled_from(["seconds", "minutes", "hours", "days", "weeks", "m", "h", "d", "w"])
_CRON_FIELD = st.one_of(
    st.sampled_from(["*", "*/7", "1-5", "L", "1#5", "5L", "?", "0,30", "29", "31", "2"]),
    _BIG,
)
_WHEN = st.one_of(
    st.text(max_size=40),
    st.builds(lambda n, u: f"in {n} {u}", _BIG, _UNIT),
    st.builds(lambda n, u: f"every {n} {u}", _BIG, _UNIT),
    st.builds(" ".join, st.lists(_CRON_FIELD, min_size=5, max_size=5)),
    st.datetimes(timezones=st.none() | st.just(UTC)).map(datetime.isoformat),
    st.builds(lambda h, m: f"every day at {h}:{m:02d}", st.integers(0, 30), st.integers(0, 70)),
)
_ANY_INSTANT = st.datetimes(datetime(1, 1, 2), datetime(9999, 12, 30), timezones=st.just(UTC))


@settings(max_examples=400, deadline=None)
@given(when=_WHEN, repeat=st.booleans(), zone=st.sampled_from(ZONES), now=_ANY_INSTANT)
def test_parse_and_first_fire_are_total(when: str, repeat: bool, zone: str, now: datetime) -> None:
    tz = ZoneInfo(zone)
    try:
        sched = parse(when, repeat, now, tz)
    except ScheduleError as exc:
        assert str(exc)
        return
    first = sched.first(now, tz)
    if first is not None:
        assert now < first <= LATEST
        assert describe(first, tz)


@settings(max_examples=300, deadline=None)
@given(
    step=st.integers(60, 10**18), zone=st.sampled_from(ZONES), after=_ANY_INSTANT,
    back=st.integers(0, 10**12), expr=st.sampled_from(
        ["* * * * *", "0 0 29 2 *", "0 0 L 2 *", "0 9 * * 1#5", "30 2 * * *", "0 0 1 1 *"]),
)
def test_next_fire_is_total(step: int, zone: str, after: datetime, back: int, expr: str) -> None:
    tz = ZoneInfo(zone)
    anchor = after - timedelta(seconds=min(back, (after - datetime(1, 1, 2, tzinfo=UTC))
                                           .total_seconds()))
    for sched in (Schedule("every", str(step), ""), Schedule("cron", expr, "")):
        nxt = next_fire(sched, after, tz, anchor)
        assert nxt is None or after < nxt <= LATEST
