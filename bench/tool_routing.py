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

from gantry.mcp.routing import ToolDoc, ToolIndex  # noqa: E402

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
            answers = {a["id"]: a for a in _jsonl(z, f"bfcl_eval/data/possible_answer/BFCL_v4_{s}.json")}
            for q in questions:
                for fn in q["function"]:
                    catalog.setdefault(fn["name"], fn)
                truth = answers[q["id"]]["ground_truth"]
                turn = q["question"][0]
                text = " ".join(m["content"] for m in turn if m.get("role") == "user")
                if truth and text:
                    cases.append((text, next(iter(truth[0]))))
    return list(catalog.values()), cases


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
    index.rebuild(ToolDoc(f["name"], f.get("description", ""), f.get("parameters")) for f in catalog)
    build_ms = (time.perf_counter() - t0) * 1000
    hits = {1: 0, 5: 0, 10: 0}
    lat: list[float] = []
    for text, want in cases:
        t = time.perf_counter()
        ranked = index.search(text, 10)
        lat.append((time.perf_counter() - t) * 1000)
        for k in hits:
            hits[k] += want in ranked[:k]
    n = len(cases)
    lat.sort()
    print(f"BFCL v4 pool: {len(catalog)} tools, {n} queries (seed {args.seed}); "
          f"index build {build_ms:.0f} ms")
    print("  " + "  ".join(f"hit@{k} {hits[k] / n:.3f}" for k in hits))
    print(f"  latency per query: p50 {statistics.median(lat):.2f} ms, "
          f"p99 {lat[int(n * 0.99) - 1]:.2f} ms, max {lat[-1]:.2f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
