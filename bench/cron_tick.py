"""What cron costs when nothing is due, and how fast schedules are parsed and advanced.

Prints figures; never pass/fail. Three measurements:

  next_fire   one next-fire computation (cronsim) for a daily job in Europe/Berlin
  parse       one `when` string parsed (mix of simple forms, cron and ISO)
  idle tick   one ticker pass (due query + earliest query) over a table of N active jobs
              none of which is due: the work every CRON_TICK_SECONDS costs

Usage: python bench/cron_tick.py [--jobs 50,1000,10000] [--reps 2000]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from gantry import db
from gantry.cron.schedule import Schedule, next_fire, parse
from gantry.cron.store import CronStore

TZ = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 3, 5, 12, 0, tzinfo=UTC)
WHENS = ["every day at 07:30", "every weekday at 9", "every 2 hours", "in 20 minutes",
         "30 7 * * 1-5", "2026-12-01T17:00", "tomorrow at 9am", "every monday and friday at 18:00"]


def per_call_us(fn: object, reps: int) -> tuple[float, float]:
    samples = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(reps):
            fn()  # type: ignore[operator]
        samples.append((time.perf_counter() - started) / reps * 1e6)
    return statistics.median(samples), min(samples)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", default="50,1000,10000")
    ap.add_argument("--reps", type=int, default=2000)
    args = ap.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, {sys.platform}")
    daily = Schedule("cron", "30 7 * * *", "")
    after = iter(NOW + timedelta(hours=i) for i in range(10**9))
    med, best = per_call_us(lambda: next_fire(daily, next(after), TZ), args.reps)
    print(f"next_fire (daily, Europe/Berlin)   median {med:8.1f} µs   best {best:8.1f} µs")
    whens = iter(WHENS * 10**6)
    med, best = per_call_us(lambda: parse(next(whens), False, NOW, TZ), args.reps)
    print(f"parse (mixed forms)                median {med:8.1f} µs   best {best:8.1f} µs")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.jobs.split(",")):
            conn = db.connect(Path(tmp) / f"jobs-{n}.db")
            store = CronStore(conn)
            with conn:
                for i in range(n):
                    store.add(session_id=f"telegram:{i % 7}", kind="cron", spec="30 7 * * *",
                              label="every day at 07:30", tz="Europe/Berlin", prompt="digest",
                              next_at=NOW.timestamp() + 3600 + i, anchor_at=NOW.timestamp(),
                              max_jobs=n + 1)
            now = NOW.timestamp()

            def tick(store: CronStore = store, now: float = now) -> None:
                assert not store.due(now, "telegram")
                store.earliest("telegram")

            med, best = per_call_us(tick, max(50, args.reps // 10))
            print(f"idle tick, {n:>6} active jobs      median {med:8.1f} µs   best {best:8.1f} µs")
            conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
