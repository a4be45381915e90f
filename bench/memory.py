"""Memory store figures: recall and hydration latency by table size, insert throughput, and
the same recall done the aigpt way (read every record file of the exported layout, filter).
Each size is measured twice in the same run: `old` = the schema and ranking before issue 30
(bench/_memory_old.py: no stemmer, IDF sum / (1 + age/30)), `new` = today's. Both tables get
the same rows in alternating batches and the same queries in alternation, so load on the
machine falls on both alike.

Prints figures; never pass/fail. Rows are synthetic statements over a 2,000-word Zipf-ish
vocabulary (a few common words, a long tail), all kinds mixed (~40 % episodes). Queries are
2–4 words drawn the same way, so some hit thousands of rows and some hit none — recall's
worst case is the common word, which is why FTS hits are capped at 200 candidates before
the recency re-rank. Timings are wall time of the store call (SQL + ranking + Row objects).

Usage: python bench/memory.py [--sizes 1000,10000,100000] [--queries 300] [--aigpt 1000,10000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import apsw

from gantry import db
from gantry.memory.atproto import export
from gantry.memory.store import KINDS, MemoryStore, terms

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _memory_old as memory_old
from _rows import SUBJECTS, sentence
from _rows import queries as synthetic_queries


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))]


def fill(stores: list[MemoryStore], n: int, rng: random.Random) -> list[float]:
    """Insert the same n rows into each store, batches of 1,000 per transaction taken in
    turn; return each store's rows/s."""
    kinds = [*KINDS, "episode", "episode"]  # ~40 % episodes
    spent = [0.0] * len(stores)
    done = 0
    while done < n:
        batch = [(rng.choice(kinds), rng.choice(SUBJECTS), f"{sentence(rng, 8)} {done + i}")
                 for i in range(min(1000, n - done))]
        for i, store in enumerate(stores):
            start = time.perf_counter()
            with store.conn:
                for kind, subject, content in batch:
                    store.add(kind, subject, content, source="bench")
            spent[i] += time.perf_counter() - start
        done += len(batch)
    return [n / s for s in spent]


def single_inserts(store: MemoryStore, rng: random.Random, count: int = 300) -> float:
    """memory_store's real path: one row per transaction (autocommit), duplicate check included."""
    start = time.perf_counter()
    for i in range(count):
        store.add("fact", "bench", f"{sentence(rng, 8)} single {i}", source="bench")
    return count / (time.perf_counter() - start)


def timed(fns: list[Any], queries: list[str]) -> list[list[float]]:
    """Milliseconds per query for each function, the functions taking turns per query."""
    out: list[list[float]] = [[] for _ in fns]
    for q in queries:
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            fn(q)
            out[i].append((time.perf_counter() - t) * 1000)
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
    print(f"{'rows':>8} {'ranking':>7} {'insert rows/s':>14} {'recall p50':>11} "
          f"{'recall p99':>11} {'hydrate p50':>12} {'hydrate p99':>12} {'aigpt-way p50':>14} "
          f"{'db MB':>7}")
    queries = synthetic_queries(args.queries)
    singles: list[float] = []
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            paths = [Path(tmp) / "old.db", Path(tmp) / "new.db"]
            conns = [memory_old.connect(paths[0]), db.connect(paths[1])]
            old, new = MemoryStore(conns[0]), MemoryStore(conns[1])
            rates = fill([old, new], n, random.Random(n))
            recalls = [lambda q, s=old: memory_old.search(s, q), new.search]
            hydrates = [lambda q, s=old: memory_old.hydrate(s, q), new.hydrate]
            timed(recalls, queries[:20])  # warm the page cache
            recall = timed(recalls, queries)
            hydrate = timed(hydrates, queries)
            aigpt = "-"
            if n in aigpt_sizes:
                _, root = export(new, Path(tmp) / "atproto", "did:plc:bench", "core")
                few = queries[:20]
                aigpt_recall(root, few[0])  # warm the OS cache
                times = timed([lambda q, r=root: aigpt_recall(r, q)], few)[0]
                aigpt = f"{statistics.median(times):.1f} ms"
            for i, label in enumerate(("old", "new")):
                conns[i].execute("PRAGMA wal_checkpoint(TRUNCATE)")
                size = paths[i].stat().st_size / 1e6
                print(f"{n:>8} {label:>7} {rates[i]:>14,.0f} {pct(recall[i], .5):>8.2f} ms "
                      f"{pct(recall[i], .99):>8.2f} ms {pct(hydrate[i], .5):>9.2f} ms "
                      f"{pct(hydrate[i], .99):>9.2f} ms {aigpt if i else '-':>14} {size:>7.1f}")
            if n == sizes[0]:
                singles = [single_inserts(s, random.Random(1)) for s in (old, new)]
            for c in conns:
                c.close()
    print(f"single-row memory_store path (autocommit, dedupe check) at {sizes[0]} rows: "
          f"old {singles[0]:,.0f} rows/s, new {singles[1]:,.0f} rows/s")


if __name__ == "__main__":
    main()
