"""bench/memory.py keeps running as the store's schema moves on: it once crashed for months
after a migration added a column its old-schema side lacked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_memory_bench_runs_both_rankings_at_a_small_size() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "memory.py"), "--sizes", "300",
         "--queries", "5", "--aigpt", ""],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split() for line in out.stdout.splitlines() if line.split()[:1] == ["300"]]
    assert [r[1] for r in rows] == ["old", "new"]
    assert "single-row memory_store path" in out.stdout
