"""cron_schedule / cron_list / cron_cancel: binding to the calling chat, errors, the cap."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gantry import db
from gantry.cron.store import CronStore
from gantry.cron.tools import CronTools
from gantry.tools import CALLER, Registry

pytestmark = pytest.mark.anyio

NOW = 1_772_712_000.0  # 2026-03-05T12:00:00Z


Rig = tuple[Registry, CronStore, list[int]]


@pytest.fixture
def reg(tmp_path: Path) -> Iterator[Rig]:
    store = CronStore(db.connect(tmp_path / "g.db"))
    pokes: list[int] = []
    tools = CronTools(store, "Europe/Berlin", 3, lambda: NOW, lambda: pokes.append(1))
    registry = Registry()
    for t in tools.tools():
        registry.register(t)
    yield registry, store, pokes


async def call(registry: Registry, session: str, name: str, **args: object) -> tuple[str, bool]:
    token = CALLER.set(session)
    try:
        result = await registry.call(name, json.dumps(args))
    finally:
        CALLER.reset(token)
    return result.text, result.error


async def test_schedule_answers_id_and_local_next_fire(reg: Rig) -> None:
    registry, store, pokes = reg
    text, err = await call(registry, "telegram:42", "cron_schedule",
                           when="every day at 07:30", prompt="Morning digest", repeat=True)
    assert not err
    assert text == "scheduled job #1 (every day at 07:30); next run 2026-03-06 07:30 CET (Fri)"
    assert pokes == [1]
    job = store.active("telegram:42")[0]
    assert (job.kind, job.spec, job.tz, job.prompt) == ("cron", "30 7 * * *", "Europe/Berlin",
                                                         "Morning digest")
    assert job.next_at == 1_772_778_600.0  # 06:30Z: stored in UTC

    text, err = await call(registry, "telegram:42", "cron_schedule", when="in 20 minutes",
                           prompt="Tea is ready")
    assert text == "scheduled job #2 (once); next run 2026-03-05 13:20 CET (Thu)"


async def test_jobs_are_bound_to_the_calling_chat(reg: Rig) -> None:
    registry, store, _ = reg
    await call(registry, "telegram:42", "cron_schedule", when="in 1 hour", prompt="A")
    await call(registry, "telegram:7", "cron_schedule", when="in 2 hours", prompt="B")
    listing, _ = await call(registry, "telegram:7", "cron_list")
    assert listing.startswith("now: 2026-03-05 13:00 CET (Thu)\n")
    assert "#2 once; next 2026-03-05 15:00 CET (Thu); prompt: B" in listing
    assert "#1" not in listing
    text, err = await call(registry, "telegram:7", "cron_cancel", id=1)
    assert err and "no active job #1 in this chat" in text
    assert [j.id for j in store.active()] == [1, 2]
    text, err = await call(registry, "telegram:42", "cron_cancel", id="#1")
    assert (text, err) == ("cancelled job #1", False)
    assert "no scheduled jobs in this chat" in (await call(registry, "telegram:42", "cron_list"))[0]


async def test_max_jobs_cap_is_a_clear_error(reg: Rig) -> None:
    registry, _, _ = reg
    for i in range(3):
        _, err = await call(registry, "stdio:local", "cron_schedule", when=f"in {i + 1} hours",
                            prompt="x")
        assert not err
    text, err = await call(registry, "stdio:local", "cron_schedule", when="in 9 hours",
                           prompt="x")
    assert err and "limit of 3 active scheduled jobs (CRON_MAX_JOBS)" in text
    assert "cron_cancel" in text
    await call(registry, "stdio:local", "cron_cancel", id=2)
    _, err = await call(registry, "stdio:local", "cron_schedule", when="in 9 hours", prompt="x")
    assert not err


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ({"when": "2026-03-05T10:00", "prompt": "x"}, "is in the past; it is now 2026-03-05 13:00"),
        ({"when": "soonish", "prompt": "x"}, "cannot read 'soonish'"),
        ({"prompt": "x"}, "`when` is required"),
        ({"when": "in 2 hours", "prompt": "  "}, "`prompt` is required"),
        ({"when": "in 2 hours", "prompt": "x", "repeat": "yes"}, "`repeat` must be true or false"),
        ({"when": "in 2 hours", "prompt": "x" * 5000}, "keep it under"),
    ],
)
async def test_bad_calls_are_fixable_errors(
    reg: Rig, args: dict[str, object], match: str
) -> None:
    registry, store, _ = reg
    text, err = await call(registry, "stdio:local", "cron_schedule", **args)
    assert err and match in text, text
    assert store.active() == []


@pytest.mark.parametrize(
    ("when", "repeat", "match"),
    [
        ("in 99999999999 days", False, "too far in the future: the latest time a job can run"),
        ("every 99999999999999 minutes", True, "too long an interval"),
        ("0001-01-01T00:00", False, "outside the dates a job can run at"),  # UTC: year 0
    ],
)
async def test_overflowing_schedules_are_fixable_errors_not_tool_failures(
    reg: Rig, caplog: pytest.LogCaptureFixture, when: str, repeat: bool, match: str
) -> None:
    registry, store, _ = reg
    text, err = await call(registry, "stdio:local", "cron_schedule", when=when, prompt="x",
                           repeat=repeat)
    assert err and match in text, text
    assert "the tool failed" not in text
    assert not [r for r in caplog.records if r.exc_info]  # no traceback logged
    assert store.active() == []


async def test_chats_the_channel_cannot_push_to_are_refused(tmp_path: Path) -> None:
    store = CronStore(db.connect(tmp_path / "g.db"))
    tools = CronTools(store, "UTC", 3, lambda: NOW, can_push=lambda chat: chat == "42")
    registry = Registry()
    for t in tools.tools():
        registry.register(t)
    text, err = await call(registry, "telegram:-100123", "cron_schedule", when="in 1 hour",
                           prompt="x")
    assert err and "only be sent to a private chat with an allowed user" in text
    assert store.active() == []
    _, err = await call(registry, "telegram:42", "cron_schedule", when="in 1 hour", prompt="x")
    assert not err


async def test_outside_a_turn_is_refused(reg: Rig) -> None:
    registry, _, _ = reg
    result = await registry.call("cron_list", "{}")
    assert result.error and "only inside a conversation turn" in result.text
