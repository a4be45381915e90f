"""Wall time and peak RSS of `gantry status` / `gantry version` from a source install.

Prints figures (median and p90 of N runs); never pass/fail. Usage: python bench/cli_source.py [N]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gantry import db, heartbeat


def measure(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit code) of one child, via wait4's rusage."""
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.execvpe(argv[0], argv, env)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    return wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    with tempfile.TemporaryDirectory() as d:
        conn = db.connect(Path(d) / "gantry.db")
        heartbeat.touch(conn, "bench")
        conn.close()
        env = {**os.environ, "DATA_DIR": d}
        cases = {
            "python -m gantry status": [sys.executable, "-m", "gantry", "status"],
            "python -m gantry version": [sys.executable, "-m", "gantry", "version"],
            "python -c pass (floor)": [sys.executable, "-c", "pass"],
        }
        print(f"{'command':<28} {'median ms':>10} {'p90 ms':>8} {'peak RSS MiB':>13} rc")
        for name, argv in cases.items():
            measure(argv, env)  # warm the page cache
            runs = [measure(argv, env) for _ in range(n)]
            walls = sorted(r[0] * 1000 for r in runs)
            rss = max(r[1] for r in runs)
            rcs = {r[2] for r in runs}
            p90 = walls[int(0.9 * (len(walls) - 1))]
            print(f"{name:<28} {statistics.median(walls):>10.1f} {p90:>8.1f} {rss:>13.1f} {rcs}")


if __name__ == "__main__":
    main()
