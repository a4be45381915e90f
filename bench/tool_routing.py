"""Tool routing quality and speed on the public BFCL v4 function set (issue 16).

Reads `data/*.json` and `possible_answer/*.json` straight out of the `bfcl-eval` wheel (downloaded
once with `pip download --no-deps`, never installed), pools the simple_python, multiple,
live_simple and live_multiple functions into one catalog, and asks gantry's index which tools
each question would be offered. Prints hit@1/5/10 and per-query latency; never pass/fail.

    python bench/tool_routing.py [--queries 500] [--seed 0] [--wheel PATH]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gantry.mcp.routing import ToolDoc, ToolIndex

WHEEL_VERSION = "2026.3.23"
CACHE = Path.home() / ".cache" / "gantry" / "bfcl"
SETS = ("simple_python", "multiple", "live_simple", "live_multiple")


def wheel_path(explicit: str | None) -> Path:
    if explicit:
        return Path(explicit)
    found = sorted(CACHE.glob(f"bfcl_eval-{WHEEL_VERSION}-*.whl"))
    if found:
        return found[0]
    CACHE.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                    f"bfcl-eval=={WHEEL_VERSION}", "-d", str(CACHE)], check=True)
    return sorted(CACHE.glob(f"bfcl_eval-{WHEEL_VERSION}-*.whl"))[0]


def _jsonl(z: zipfile.ZipFile, name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in z.read(name).decode().splitlines() if line.strip()]


def load(wheel: Path) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """(catalog of unique functions, [(question, expected function name)])."""
    catalog: dict[str, dict[str, Any]] = {}
    cases: list[tuple[str, str]] = []
    with zipfile.ZipFile(wheel) as z:
        for s in SETS:
            questions = _jsonl(z, f"bfcl_eval/data/BFCL_v4_{s}.json")
            answer_file = f"bfcl_eval/data/possible_answer/BFCL_v4_{s}.json"
            answers = {a["id"]: a for a in _jsonl(z, answer_file)}
            for q in questions:
                for fn in q["function"]:
                    catalog.setdefault(fn["name"], fn)
                truth = answers[q["id"]]["ground_truth"]
                turn = q["question"][0]
                text = " ".join(m["content"] for m in turn if m.get("role") == "user")
                if truth and text:
                    cases.append((text, next(iter(truth[0]))))
    return list(catalog.values()), cases


class PlainBM25:
    """The reference points: FTS5 BM25 over raw name + description (optionally plus the
    parameters' JSON), default tokenizer, no name splitting, no stemming, no weights."""

    def __init__(self, with_params: bool) -> None:
        import apsw

        self.db = apsw.Connection(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(doc)")
        self.with_params = with_params
        self.names: list[str] = []

    def rebuild(self, fns: list[dict[str, Any]]) -> None:
        for i, f in enumerate(fns, 1):
            doc = f"{f['name']} {f.get('description', '')}"
            if self.with_params:
                doc += " " + json.dumps(f.get("parameters", {}))
            self.db.execute("INSERT INTO t (rowid, doc) VALUES (?, ?)", (i, doc))
            self.names.append(f["name"])

    def search(self, text: str, k: int) -> list[str]:
        import re

        terms = {w.lower() for w in re.findall(r"\w+", text)}
        if not terms:
            return []
        q = " OR ".join(f'"{w}"' for w in sorted(terms))
        rows = self.db.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY rank LIMIT ?", (q, k))
        return [self.names[r[0] - 1] for r in rows]


def evaluate(label: str, search: Any, cases: list[tuple[str, str]]) -> dict[int, float]:
    hits = {1: 0, 5: 0, 10: 0}
    lat: list[float] = []
    for text, want in cases:
        t = time.perf_counter()
        ranked = search(text, 10)
        lat.append((time.perf_counter() - t) * 1000)
        for k in hits:
            hits[k] += want in ranked[:k]
    n = len(cases)
    lat.sort()
    rates = {k: hits[k] / n for k in hits}
    print(f"  {label:<34} " + "  ".join(f"hit@{k} {rates[k]:.3f}" for k in rates)
          + f"   p50 {statistics.median(lat):.2f} ms  p99 {lat[int(n * 0.99) - 1]:.2f} ms")
    return rates


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wheel")
    args = ap.parse_args()
    catalog, cases = load(wheel_path(args.wheel))
    random.Random(args.seed).shuffle(cases)
    cases = cases[: args.queries]
    index = ToolIndex()
    t0 = time.perf_counter()
    index.rebuild(ToolDoc(f["name"], f.get("description", ""), f.get("parameters"))
                  for f in catalog)
    build_ms = (time.perf_counter() - t0) * 1000
    print(f"BFCL v4 pool: {len(catalog)} tools, {len(cases)} queries (seed {args.seed}); "
          f"gantry index build {build_ms:.0f} ms")
    plain, plain_params = PlainBM25(False), PlainBM25(True)
    plain.rebuild(catalog)
    plain_params.rebuild(catalog)
    base = evaluate("plain BM25, name + description", plain.search, cases)
    evaluate("plain BM25 + parameters JSON", plain_params.search, cases)
    ours = evaluate("gantry routing (gantry.mcp.routing)", index.search, cases)
    print(f"  gantry / plain BM25 hit@5: {ours[5] / base[5]:.2f}x; goal hit@5 >= 0.85: "
          f"{'ok' if ours[5] >= 0.85 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
