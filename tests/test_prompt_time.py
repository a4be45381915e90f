"""The per-turn time block: what it says, that it is right on DST change days in every zone,
and that it leaves the cached prompt prefix alone (issue 27, part 1)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo, available_timezones

from hypothesis import given, settings
from hypothesis import strategies as st

from gantry.model.messages import AssistantMessage, UserMessage, encode
from gantry.prompt import TIME_MARK, assemble, time_footer

ZONES = sorted(z for z in available_timezones() if "/" in z and not z.startswith("posix/"))
NOW = re.compile(
    r"Now: (?P<wd>\w+) (?P<date>\d{4}-\d\d-\d\d) (?P<hm>\d\d:\d\d), "
    r"UTC(?P<off>[+-]\d\d:\d\d(?::\d\d)?) \((?P<zone>[^)]+)\)\."
)
START = datetime(1971, 1, 1, tzinfo=UTC).timestamp()
END = datetime(2037, 1, 1, tzinfo=UTC).timestamp()


def parse(footer: str) -> tuple[datetime, dict[str, str]]:
    """The footer's 'now' as an aware datetime, and its named dates."""
    m = NOW.search(footer)
    assert m, footer
    sign = -1 if m["off"][0] == "-" else 1
    parts = [int(p) for p in m["off"][1:].split(":")] + [0]
    offset = timedelta(hours=parts[0], minutes=parts[1], seconds=parts[2]) * sign
    local = datetime.fromisoformat(f"{m['date']}T{m['hm']}")
    at = local.replace(tzinfo=timezone(offset))
    named = dict(re.findall(r"(Tomorrow|Next week): \w{3} (\d{4}-\d\d-\d\d)", footer))
    named["weekday"] = m["wd"]
    return at, named


def test_the_footer_reads_like_a_calendar() -> None:
    now = datetime(2026, 12, 1, 9, 14, 59, tzinfo=UTC).timestamp()
    footer = time_footer(now, ZoneInfo("Europe/Berlin"))
    assert footer == (
        f"\n\n{TIME_MARK} Now: Tuesday 2026-12-01 10:14, UTC+01:00 (Europe/Berlin, CET).\n"
        "Tomorrow: Wed 2026-12-02. This week: Mon 2026-11-30, Tue 2026-12-01 (today), "
        "Wed 2026-12-02, Thu 2026-12-03, Fri 2026-12-04, Sat 2026-12-05, Sun 2026-12-06. "
        "Next week: Mon 2026-12-07 to Sun 2026-12-13."
    )
    assert "started by the scheduler" not in footer


def test_a_scheduled_turn_says_so_and_when_it_was_due() -> None:
    now = datetime(2026, 3, 29, 1, 0, 30, tzinfo=UTC).timestamp()
    due = datetime(2026, 3, 29, 0, 59, 0, tzinfo=UTC).timestamp()
    footer = time_footer(now, ZoneInfo("Europe/Berlin"), due)
    assert "Now: Sunday 2026-03-29 03:00, UTC+02:00 (Europe/Berlin, CEST)." in footer
    assert footer.endswith(
        "This turn was started by the scheduler, not typed by the user; it was due "
        "Sun 2026-03-29 01:59 UTC+01:00."
    )


@contextmanager
def libc_zone(name: str) -> Iterator[None]:
    """libc's own reading of the zone (TZ + tzset): an oracle independent of zoneinfo."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if old is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = old
        time.tzset()


def check(now: float, name: str) -> None:
    """The footer's local time is `now` to the minute, its offset is libc's, its dates follow
    the local calendar."""
    footer = time_footer(now, ZoneInfo(name))
    at, named = parse(footer)
    assert 0 <= now - at.timestamp() < 60, (footer, now)
    with libc_zone(name):
        local = time.localtime(now)
    assert at.utcoffset() == timedelta(seconds=local.tm_gmtoff), (footer, now, local)
    today = date(local.tm_year, local.tm_mon, local.tm_mday)
    assert at.date() == today
    assert named["weekday"] == today.strftime("%A")
    assert named["Tomorrow"] == (today + timedelta(days=1)).isoformat()
    monday = today - timedelta(days=today.weekday())
    assert named["Next week"] == (monday + timedelta(days=7)).isoformat()
    week = re.search(r"This week: (.*?)\. Next", footer)
    assert week is not None
    days = [d.removesuffix(" (today)") for d in week[1].split(", ")]
    assert days == [(monday + timedelta(days=i)).strftime("%a %Y-%m-%d") for i in range(7)]
    assert f"{today.strftime('%a')} {today.isoformat()} (today)" in week[1]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(ZONES), st.floats(min_value=START, max_value=END))
def test_any_zone_any_instant(name: str, now: float) -> None:
    check(now, name)


def transitions(name: str, year: int) -> list[float]:
    """The instants in `year` where the zone's UTC offset changes (to the second)."""
    zone = ZoneInfo(name)
    t = datetime(year, 1, 1, tzinfo=UTC).timestamp()
    end = datetime(year + 1, 1, 1, tzinfo=UTC).timestamp()

    def off(x: float) -> timedelta | None:
        return datetime.fromtimestamp(x, UTC).astimezone(zone).utcoffset()

    found: list[float] = []
    step = 6 * 3600.0
    while t < end:
        if off(t) != off(t + step):
            lo, hi = t, t + step
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if off(mid) == off(lo) else (lo, mid)
            found.append(hi)
        t += step
    return found


DST_ZONES = ["Europe/Berlin", "America/Los_Angeles", "Australia/Lord_Howe", "America/Santiago",
             "Asia/Tehran", "Pacific/Chatham", "America/St_Johns", "Europe/London"]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(DST_ZONES), st.integers(2000, 2036), st.integers(-3 * 3600, 3 * 3600),
       st.data())
def test_dst_change_days(name: str, year: int, shift: int, data: st.DataObject) -> None:
    """Instants within three hours of a change: offset, date and weekday stay right (the
    hour that repeats, the hour that is skipped, half-hour and 30-minute-DST zones)."""
    found = transitions(name, year)
    if not found:
        return  # the zone has no DST that year (e.g. Asia/Tehran from 2023)
    edge = data.draw(st.sampled_from(found))
    check(edge + shift, name)


def test_a_fall_back_hour_shows_both_offsets() -> None:
    """01:30 happens twice in Los Angeles on 2026-11-01: the footer tells them apart."""
    zone = ZoneInfo("America/Los_Angeles")
    first = datetime(2026, 11, 1, 8, 30, tzinfo=UTC).timestamp()
    second = first + 3600
    assert "01:30, UTC-07:00 (America/Los_Angeles, PDT)" in time_footer(first, zone)
    assert "01:30, UTC-08:00 (America/Los_Angeles, PST)" in time_footer(second, zone)


def test_the_footer_goes_on_the_turn_message_and_the_prefix_stays_put() -> None:
    """Two consecutive turns: the second request starts with every byte of the first up to
    where the first one's footer began (what a provider's prefix cache needs)."""
    zone = ZoneInfo("Europe/Berlin")
    history = [UserMessage("hi"), AssistantMessage("hello")]

    def body(hist: list, now: float, tail: tuple = ()) -> bytes:
        prompt = assemble(persona="You are Tim.", history=hist, max_messages=50,
                          max_tokens=10_000, memory_block="[memory]\n- likes tea",
                          summary="earlier: talked", footer=time_footer(now, zone), tail=tail)
        return encode(prompt.messages)

    t0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC).timestamp()
    first = body([*history, UserMessage("what's on tomorrow?")], t0)
    second = body([*history, UserMessage("what's on tomorrow?"), AssistantMessage("nothing"),
                   UserMessage("and friday?")], t0 + 3 * 3600)
    cut = first.index(b"\\n\\n" + TIME_MARK.encode())
    assert second.startswith(first[:cut])
    assert b"2026-12-01 10:00" in first and b"2026-12-01 13:00" in second
    assert second.count(TIME_MARK.encode()) == 1  # only the newest user message has it
    assert b"Tim." in first[:cut] and TIME_MARK.encode() not in first[:cut]
    # the cap note comes after the turn; the footer stays on the user's message
    capped = assemble(persona="P", history=[UserMessage("q")], max_messages=5, max_tokens=1000,
                      footer="\n\nF", tail=[UserMessage("cap")]).messages
    assert [m.content for m in capped[1:]] == ["q\n\nF", "cap"]
