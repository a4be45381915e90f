"""Memory store figures: recall and hydration latency by table size, insert throughput, and
the same recall done the aigpt way (read every record file of the exported layout, filter).

Prints figures; never pass/fail. Rows are synthetic statements over a 2,000-word Zipf-ish
vocabulary (a few common words, a long tail), all kinds mixed (~40 % episodes). Queries are
2–4 words drawn the same way, so some hit thousands of rows and some hit none — recall's
worst case is the common word, which is why FTS hits are capped at 200 candidates before
the recency re-rank. Timings are wall time of the store call (SQL + ranking + Row objects).

Usage: python bench/memory.py [--sizes 1000,10000,100000] [--queries 300] [--aigpt 1000,10000]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import apsw

from gantry import db
from gantry.memory.atproto import export
from gantry.memory.store import KINDS, MemoryStore, terms

WORDS = [f"w{i}" for i in range(2000)]
CUM = list(itertools.accumulate(1.0 / (i + 1) for i in range(len(WORDS))))
SUBJECTS = ["chris", "mom", "climbing", "work", "tea", "berlin", "gym", "dentist", "ana", "car"]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(WORDS, cum_weights=CUM, k=n))


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))]


def fill(store: MemoryStore, n: int, rng: random.Random) -> float:
    """Insert n rows in batches of 1,000 per transaction; return rows/s."""
    kinds = [*KINDS, "episode", "episode"]  # ~40 % episodes
    start = time.perf_counter()
    done = 0
    while done < n:
        with store.conn:
            for _ in range(min(1000, n - done)):
                store.add(rng.choice(kinds), rng.choice(SUBJECTS), f"{sentence(rng, 8)} {done}",
                          source="bench")
                done += 1
    return n / (time.perf_counter() - start)


def single_inserts(store: MemoryStore, rng: random.Random, count: int = 300) -> float:
    """memory_store's real path: one row per transaction (autocommit), duplicate check included."""
    start = time.perf_counter()
    for i in range(count):
        store.add("fact", "bench", f"{sentence(rng, 8)} single {i}", source="bench")
    return count / (time.perf_counter() - start)


def timed(fn: object, queries: list[str]) -> list[float]:
    out = []
    for q in queries:
        t = time.perf_counter()
        fn(q)  # type: ignore[operator]
        out.append((time.perf_counter() - t) * 1000)
    return out


def aigpt_recall(root: Path, query: str, limit: int = 10) -> list[str]:
    """What an aigpt-style client does: read every record file, keep those sharing a word."""
    wanted = set(terms(query))
    hits = []
    for path in (root / "ai.syui.gpt.memory").iterdir():
        text = json.loads(path.read_bytes())["value"]["content"]["text"]
        n = len(wanted & set(terms(text, limit=10_000)))
        if n:
            hits.append((n, text))
    hits.sort(reverse=True)
    return [t for _, t in hits[:limit]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--aigpt", default="1000,10000")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    aigpt_sizes = {int(s) for s in args.aigpt.split(",") if s}
    print(f"python {platform.python_version()} · SQLite {apsw.sqlite_lib_version()} · "
          f"{os.cpu_count()} cpu · {platform.machine()}")
    print(f"{'rows':>8} {'insert rows/s':>14} {'recall p50':>11} {'recall p99':>11} "
          f"{'hydrate p50':>12} {'hydrate p99':>12} {'aigpt-way p50':>14} {'db MB':>7}")
    rng = random.Random(7)
    queries = [sentence(rng, rng.randint(2, 4)) for _ in range(args.queries)]
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            conn = db.connect(Path(tmp) / "bench.db")
            store = MemoryStore(conn)
            rate = fill(store, n, random.Random(n))
            timed(store.search, queries[:20])  # warm the page cache
            recall = timed(store.search, queries)
            hydrate = timed(store.hydrate, queries)
            aigpt = "-"
            if n in aigpt_sizes:
                _, root = export(store, Path(tmp) / "atproto", "did:plc:bench", "core")
                few = queries[:20]
                aigpt_recall(root, few[0])  # warm the OS cache
                times = timed(lambda q, r=root: aigpt_recall(r, q), few)
                aigpt = f"{statistics.median(times):.1f} ms"
            size = (Path(tmp) / "bench.db").stat().st_size / 1e6
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            size = max(size, (Path(tmp) / "bench.db").stat().st_size / 1e6)
            print(f"{n:>8} {rate:>14,.0f} {pct(recall, .5):>8.2f} ms {pct(recall, .99):>8.2f} ms "
                  f"{pct(hydrate, .5):>9.2f} ms {pct(hydrate, .99):>9.2f} ms {aigpt:>14} "
                  f"{size:>7.1f}")
            if n == sizes[0]:
                single = single_inserts(store, random.Random(1))
            conn.close()
    print(f"single-row memory_store path (autocommit, dedupe check): {single:,.0f} rows/s "
          f"at {sizes[0]} rows")


if __name__ == "__main__":
    main()
