"""What `gantry backup` and the boot check cost on a big database: a 100k-row memory table.

Prints figures; never pass/fail. Fills a fresh gantry.db with N memory rows (synthetic
statements, FTS index and all, as bench/memory.py does), then times, each a few times:

  backup        gantry.store.backup.copy_database (online backup API, integrity_check of
                the copy, fsync, rename) — what `gantry backup` and a scheduled backup do
  verify        gantry.store.examine with integrity_check (`gantry backup --verify`)
  boot check    gantry.store.examine with quick_check (what `gantry run` adds to its start)
  restore       gantry.store.restore.restore into a fresh DATA_DIR

and prints the database and backup sizes.

Usage: python bench/backup.py [--rows 100000] [--reps 3]
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gantry import db
from gantry.memory.store import KINDS, MemoryStore
from gantry.store.backup import copy_database
from gantry.store.examine import examine
from gantry.store.restore import restore
from gantry.store.space import human

WORDS = [f"w{i}" for i in range(2000)]
SUBJECTS = ["chris", "mom", "climbing", "work", "tea", "berlin", "gym", "dentist", "ana", "car"]


def fill(path: Path, rows: int) -> float:
    """N memory rows in batches of 1,000; the seconds it took."""
    rng = random.Random(39)
    store = MemoryStore(db.connect(path))
    started = time.perf_counter()
    done = 0
    while done < rows:
        with store.conn:
            for i in range(min(1000, rows - done)):
                words = " ".join(rng.choices(WORDS, k=8))
                store.add(rng.choice([*KINDS, "episode"]), rng.choice(SUBJECTS),
                          f"{words} {done + i}", source="bench")
        done = min(rows, done + 1000)
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.conn.close()
    return time.perf_counter() - started


def timed(fn: object, reps: int) -> tuple[float, float]:
    samples = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append(time.perf_counter() - started)
    return statistics.median(samples), min(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, {args.rows} memory rows")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        live = data / "gantry.db"
        print(f"fill          {fill(live, args.rows):7.2f} s")
        print(f"database      {human(live.stat().st_size)}")
        out = Path(tmp) / "backup.db"
        n = iter(range(10_000))
        rows = [
            ("backup", lambda: copy_database(live, out)),
            ("verify", lambda: examine(out, thorough=True, backup=True)),
            ("boot check", lambda: examine(live)),
            ("restore", lambda: restore(out, Path(tmp) / f"fresh{next(n)}")),
        ]
        for name, fn in rows:
            median, best = timed(fn, args.reps)
            print(f"{name:<13} {median * 1000:7.0f} ms median, {best * 1000:.0f} ms best "
                  f"of {args.reps}")
        print(f"backup file   {human(out.stat().st_size)}")


if __name__ == "__main__":
    main()
