"""bench/memory.py keeps running as the store's schema moves on: it once crashed for months
after a migration added a column its old-schema side lacked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


def test_recall_speed_bench_runs_a_revision_beside_this_tree() -> None:
    """bench/recall_speed.py unpacks a revision's gantry with git archive and times it beside
    this checkout; a fresh clone has HEAD, so that is the revision here."""
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                      capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "recall_speed.py"), "--against", "HEAD",
         "--rows", "300", "--queries", "4", "--rounds", "1"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert any(line.split()[:1] == ["HEAD"] and "1.00x 1.00x; 1.00x 1.00x" in line
               for line in lines), out.stdout
    assert any(line.lstrip().startswith("this tree") for line in lines), out.stdout
    assert "insert rate of this tree against HEAD" in out.stdout
