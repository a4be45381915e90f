"""Recall speed of this tree against earlier revisions, in the same run: issue 45's bound
("recall p50/p99 at 100k rows within 1.5x of today's ranking") needs the ranking it is
compared with measured beside it, on the same rows, under the same load.

Prints figures; never pass/fail. Each revision (`git archive REV gantry`, unpacked into a
temporary directory) and this checkout get a worker process importing its own `gantry`;
each fills its own store with the same synthetic rows (bench/_rows.py, as bench/memory.py),
then the workers take each query in turn: the synthetic 2-4-word queries of bench/memory.py,
and English questions over the same vocabulary, which also exercise what only real words
reach (function words, frames, the lexicon's reads, answer shapes). Ratios are against the
first revision named.

Usage: python bench/recall_speed.py --against REV [--against REV ...] [--rows 100000]
       [--queries 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _rows import queries as synthetic_queries

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent

# English questions over the synthetic vocabulary: how people ask, including the shapes
# recall reads specially ('how long', 'what book', 'which city') and words the lexicon knows.
ENGLISH = [
    "how long has mom had w3 for?", "what book did chris read about w12?",
    "which city did ana visit with w7?", "what does mom like to drink with w1?",
    "when did chris go climbing with w20?", "what did ana buy for her kids at w5?",
    "how many times has mom been to the gym w9?", "what kind of music does chris enjoy?",
]

WORKER = r"""
import json, random, sys, time, tempfile
from pathlib import Path
tree, bench, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path[:0] = [tree, bench]
from gantry import db
from gantry.memory.store import KINDS, MemoryStore
from _rows import SUBJECTS, sentence
rng = random.Random(n)
conn = db.connect(Path(tempfile.mkdtemp()) / "gantry.db")
store = MemoryStore(conn)
kinds = [*sorted(KINDS), "episode", "episode"]
done, spent = 0, 0.0
while done < n:
    batch = [(rng.choice(kinds), rng.choice(SUBJECTS), f"{sentence(rng, 8)} {done + i}")
             for i in range(min(1000, n - done))]
    start = time.perf_counter()
    with conn:
        for kind, subject, content in batch:
            store.add(kind, subject, content, source="bench")
    spent += time.perf_counter() - start
    done += len(batch)
print(json.dumps(n / spent), flush=True)
for line in sys.stdin:
    fn, query = json.loads(line)
    call = store.search if fn == "recall" else store.hydrate
    start = time.perf_counter()
    call(query)
    print(json.dumps((time.perf_counter() - start) * 1000), flush=True)
"""

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--against", action="append", required=True, metavar="REV",
                help="a git revision to compare with (repeatable; ratios are against the first)")
ap.add_argument("--rows", type=int, default=100_000)
ap.add_argument("--queries", type=int, default=300)
ap.add_argument("--rounds", type=int, default=3, help="passes over the queries per kind")


def unpack(rev: str, into: Path) -> Path:
    """`rev`'s gantry package, unpacked under `into` (no shell, no tar binary needed)."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "gantry"], check=True,
                          capture_output=True).stdout
    out = into / rev.replace("/", "_")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(out, filter="data")
    return out


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))]


def main() -> None:
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = [(rev, unpack(rev, Path(tmp))) for rev in args.against] + [("this tree", ROOT)]
        procs: list[subprocess.Popen[str]] = []
        inserts: list[float] = []
        try:
            for _, tree in trees:  # filled one after another: inserts timed without contention
                procs.append(subprocess.Popen(
                    [sys.executable, "-c", WORKER, str(tree), str(BENCH), str(args.rows)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
                inserts.append(float(json.loads(procs[-1].stdout.readline())))  # type: ignore[union-attr]
            synthetic = synthetic_queries(args.queries)
            english = [ENGLISH[i % len(ENGLISH)] for i in range(args.queries)]
            kinds = {"recall": ("recall", synthetic), "hydrate": ("hydrate", synthetic),
                     "english": ("recall", english)}
            times: dict[str, list[list[float]]] = {k: [[] for _ in trees] for k in kinds}
            for kind, (fn, queries) in kinds.items():
                for round_ in range(args.rounds + 1):  # round 0 warms the page cache
                    for query in queries:
                        for i, p in enumerate(procs):
                            p.stdin.write(json.dumps([fn, query]) + "\n")  # type: ignore[union-attr]
                            p.stdin.flush()  # type: ignore[union-attr]
                            took = float(json.loads(p.stdout.readline()))  # type: ignore[union-attr]
                            if round_:
                                times[kind][i].append(took)
        finally:
            for p in procs:
                if p.stdin:
                    p.stdin.close()
                p.wait(timeout=60)
    print(f"{args.rows:,} rows, {args.queries} synthetic queries and {args.queries} English "
          f"questions x {args.rounds} rounds, the trees taking each query in turn; "
          f"{os.cpu_count()} cpu")
    print(f"{'tree':>12} {'insert/s':>9} {'recall p50':>11} {'p99':>7} {'hydrate p50':>12} "
          f"{'English p50':>12} {'p99':>7}   ratios to {args.against[0]} (p50, p99; English)")
    base = {k: (pct(v[0], .5), pct(v[0], .99)) for k, v in times.items()}
    for i, (rev, _) in enumerate(trees):
        r50, r99 = pct(times["recall"][i], .5), pct(times["recall"][i], .99)
        e50, e99 = pct(times["english"][i], .5), pct(times["english"][i], .99)
        h50 = pct(times["hydrate"][i], .5)
        ratios = (f"{r50 / base['recall'][0]:.2f}x {r99 / base['recall'][1]:.2f}x; "
                  f"{e50 / base['english'][0]:.2f}x {e99 / base['english'][1]:.2f}x")
        print(f"{rev[:12]:>12} {inserts[i]:>9,.0f} {r50:>8.3f} ms {r99:>7.3f} {h50:>9.3f} ms "
              f"{e50:>9.3f} ms {e99:>7.3f}   {ratios}")
    print(f"insert rate of this tree against {args.against[0]}: {inserts[-1] / inserts[0]:.2f}x "
          f"(median of all: {statistics.median(inserts):,.0f} rows/s)")


if __name__ == "__main__":
    main()
