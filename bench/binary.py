"""The frozen binary side by side with the source install and the sqlite3 CLI (prints; never fails).

    python bench/binary.py [--runs 25] [--binary dist/gantry] [--before OLD/gantry]

Measures, in one run on this machine:

* `gantry status` against a fresh heartbeat row: the binary's first run after the extraction
  dir is cleared (it unpacks the payload), its cached runs, `python -m gantry status`, and the
  `sqlite3` CLI reading the same row;
* `gantry version` (binary and source);
* wall time (perf_counter around each run; median, p90, min; the cached rows run round-robin,
  one run of each per round) and peak RSS (/usr/bin/time %M
  over 5 extra runs: the larger of the onefile bootstrap and the app process);
  the bootstrap + app sum is given for the cached binary status by sampling /proc;
* binary size, payload size, and the clean/incremental build times recorded by
  build/build.py in build/.work/timings.jsonl;
* import cost of aiogram, mcp, httpx, apsw from source (fresh interpreter each), and inside
  the binary when it exposes them (`gantry version --json --import-times MOD`);
* container memory of an idle `gantry run` per channel (stdio, telegram against the loopback
  fakes; after one answered message, `--idle` seconds): the process tree's RSS plus the
  unpacked payload, because on Docker's and Kubernetes' tmpfs /tmp those file pages are
  charged to the container. RSS + payload counts the payload pages the app has mapped twice
  (once as RSS, once as tmpfs); anonymous RSS + payload is the figure without that overlap.

`--before` adds another build (e.g. one of the base commit, with its gantry-build.json next
to it) to the same round-robin: its cached `status` and `version` rows and the difference of
the medians, so a change is judged against noise of the same run.

Goals (issue 3): status <= 50 ms median and <= 30 MB peak RSS cached; binary <= 60 MB.
Goals (issue 14): cached status <= 25 ms (also printed as a multiple of the apsw floor);
container memory for the Telegram channel <= 150 MiB.
Goals (issue 44): that container memory <= 120 MiB, binary <= 25 MB.
The host runs the binary directly: it carries its own loader and glibc, so the host's libc
plays no part (tests/binary runs it in a distroless-like root).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from _proc import rss_kib, tree

ROOT = Path(__file__).resolve().parent.parent
TIMINGS = ROOT / "build" / ".work" / "timings.jsonl"
HEAVY = ("apsw", "httpx", "mcp", "aiogram")
FLOOR = "python -S + apsw, same row (floor)"


def run_once(
    argv: Sequence[str], env: dict[str, str], measure_rss: bool = False
) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit code) of one run.

    RSS comes from /usr/bin/time (%M) when available: Linux carries the forking parent's RSS
    high-water mark across exec, so wait4() on a child of this (big) Python process would
    report at least our own RSS for tiny programs. time(1) forks from a ~2 MB process.
    The peak is that of the largest single process (bootstrap or app), not their sum.
    """
    timer = measure_rss and Path("/usr/bin/time").exists()
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss_file:
        cmd = ["/usr/bin/time", "-f", "%M", "-o", rss_file.name, *argv] if timer else list(argv)
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if timer:
            lines = [ln for ln in rss_file.read().splitlines() if ln.strip().isdigit()]
            rss_kib = int(lines[-1]) if lines else usage.ru_maxrss
        else:
            rss_kib = usage.ru_maxrss
    return wall, rss_kib / 1024, proc.returncode


def series(argv: Sequence[str], env: dict[str, str], runs: int,
           before: object = None) -> dict[str, float]:
    walls, rss, codes = [], [], set()
    for i in range(runs):
        if callable(before):
            before()
        w, _r, c = run_once(argv, env)  # wall clock without time(1) in the way
        walls.append(w)
        codes.add(c)
        if i < 5:  # peak RSS through time(1), a few runs are enough
            if callable(before):
                before()
            rss.append(run_once(argv, env, measure_rss=True)[1])
    return _figures(walls, rss, codes, runs)


def interleaved(commands: dict[str, tuple[Sequence[str], dict[str, str]]],
                runs: int) -> dict[str, dict[str, float]]:
    """`series` for several commands at once, one run of each per round (round-robin), so a
    noisy spell of the machine hits every row alike and their ratios hold."""
    walls: dict[str, list[float]] = {name: [] for name in commands}
    rss: dict[str, list[float]] = {name: [] for name in commands}
    codes: dict[str, set[int]] = {name: set() for name in commands}
    for i in range(runs):
        for name, (argv, env) in commands.items():
            w, _r, c = run_once(argv, env)
            walls[name].append(w)
            codes[name].add(c)
            if i < 5:
                rss[name].append(run_once(argv, env, measure_rss=True)[1])
    return {name: _figures(walls[name], rss[name], codes[name], runs) for name in commands}


def _figures(walls: list[float], rss: list[float], codes: set[int], runs: int) -> dict[str, float]:
    walls = sorted(walls)
    return {
        "median_ms": statistics.median(walls) * 1000,
        "p90_ms": walls[min(len(walls) - 1, int(len(walls) * 0.9))] * 1000,
        "min_ms": walls[0] * 1000,
        "peak_rss_mib": max(rss),
        "median_rss_mib": statistics.median(rss),
        "runs": runs,
        "exit": sorted(codes)[0] if len(codes) == 1 else -1,
    }


def summed_rss(argv: Sequence[str], env: dict[str, str], runs: int = 5) -> float:
    """Peak of (bootstrap + app) RSS in MiB, sampling /proc of the process tree every 2 ms."""
    peaks = []
    for _ in range(runs):
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        peak = 0
        done = threading.Event()

        def sample(pid: int = proc.pid, done: threading.Event = done) -> None:
            nonlocal peak
            while not done.is_set():
                total = rss_kib(tree(pid))
                peak = max(peak, total)
                time.sleep(0.002)

        t = threading.Thread(target=sample)
        t.start()
        proc.wait()
        done.set()
        t.join()
        peaks.append(peak / 1024)
    return max(peaks)


def make_heartbeat(data_dir: Path) -> Path:
    """A database with a fresh heartbeat row, written by the app's own code (source install)."""
    sys.path.insert(0, str(ROOT))
    from gantry import __version__, db, heartbeat

    conn = db.connect(data_dir / "gantry.db")
    heartbeat.touch(conn, __version__)
    conn.close()
    return data_dir / "gantry.db"


def import_costs_source(python: str) -> dict[str, float]:
    out = {}
    for mod in HEAVY:
        code = (f"import time;t=time.perf_counter();import {mod};"
                "print((time.perf_counter()-t)*1000)")
        vals = sorted(
            float(subprocess.run([python, "-c", code], capture_output=True, text=True,
                                 check=True).stdout)
            for _ in range(5)
        )
        out[mod] = vals[2]
    return out


def import_costs_binary(binary: Path, env: dict[str, str]) -> dict[str, float | str] | None:
    """Each heavy module's import time inside the binary, one fresh process per module.

    A module the app never imports is not in the payload at all: reported as "not frozen".
    """
    out: dict[str, float | str] = {}
    for mod in HEAVY:
        vals = []
        for _ in range(3):
            r = subprocess.run([str(binary), "version", "--json", "--import-times", mod],
                               capture_output=True, text=True, env=env)
            try:
                value = json.loads(r.stdout)["import_ms"][mod]
            except (ValueError, KeyError, TypeError):
                return None
            if not isinstance(value, int | float):
                break
            vals.append(float(value))
        out[mod] = sorted(vals)[len(vals) // 2] if vals else "not frozen"
    return out


def container_memory(binary: Path, payload: int | None, idle: float) -> dict[str, dict[str, float]]:
    """Idle `gantry run` per channel: RSS and anonymous RSS of the tree, plus the payload."""
    from idle import measure_full

    out = {}
    for channel in ("stdio", "telegram"):
        boot, rss, anon, _cpu = measure_full([str(binary), "run"], channel, idle)
        pay = (payload or 0) / 2**20
        out[channel] = {"boot_s": boot, "rss_mib": rss, "anon_mib": anon, "payload_mib": pay,
                        "container_mib": rss + pay, "container_no_overlap_mib": anon + pay}
    return out


def build_times() -> dict[str, dict[str, object]]:
    latest: dict[str, dict[str, object]] = {}
    if TIMINGS.exists():
        for line in TIMINGS.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            latest[str(rec.get("kind"))] = rec
    return latest


def row(name: str, s: dict[str, float]) -> str:
    return (f"  {name:<44} {s['median_ms']:8.1f} {s['p90_ms']:8.1f} {s['min_ms']:8.1f}"
            f" {s['peak_rss_mib']:9.1f}  exit {int(s['exit'])}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", type=Path, default=ROOT / "dist" / "gantry")
    ap.add_argument("--runs", type=int, default=25)
    ap.add_argument("--cold-runs", type=int, default=5)
    ap.add_argument("--idle", type=float, default=10.0,
                    help="seconds of idle before reading a run's memory (container memory)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--before", type=Path,
                    help="another binary to time in the same rounds (status, version cached)")
    args = ap.parse_args(argv)
    binary: Path = args.binary.resolve()
    if not binary.exists():
        print(f"bench/binary.py: {binary} missing; build it first (python build/build.py)")
        return 0
    record_path = binary.parent / "gantry-build.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {}
    spec = record.get("tempdir_spec")

    results: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="gantry-bench-") as d:
        data = Path(d)
        db_path = make_heartbeat(data)
        env = {"PATH": "/usr/bin:/bin", "DATA_DIR": str(data), "HOME": d,
               "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt"}
        status_bin = [str(binary), "status"]

        def clear() -> None:
            if spec:
                shutil.rmtree(spec, ignore_errors=True)

        # Warm the page cache for the binary file itself so "first run" means "first run
        # after the extraction dir was cleared", not "first read from disk".
        subprocess.run(["cat", str(binary)], stdout=subprocess.DEVNULL, check=False)
        rows = {}
        rows["binary status, first run (cleared dir)"] = series(
            status_bin, env, args.cold_runs, before=clear if spec else None)
        run_once(status_bin, env)  # populate the cache
        source_env = {**env, "PYTHONPATH": str(ROOT)}
        cached: dict[str, tuple[Sequence[str], dict[str, str]]] = {}
        cached["binary status, cached"] = (status_bin, env)
        cached["python -m gantry status (source)"] = (
            [sys.executable, "-m", "gantry", "status"], source_env)
        if shutil.which("sqlite3"):
            cached["sqlite3 CLI, same row"] = (
                ["sqlite3", "-readonly", str(db_path),
                 "SELECT ts, version, pid FROM heartbeat WHERE id = 1"], env)
        # The machine's own floor for any Python program: the interpreter starting and exiting
        # (no site, no imports). Cached `status` is best read as a multiple of this.
        cached["python -S -c pass (interpreter floor)"] = (
            [os.path.realpath(sys.executable), "-S", "-c", "pass"], env)
        # The floor for any Python healthcheck that reads the heartbeat row through apsw (the
        # stack's SQLite binding): the interpreter, `import apsw`, one read-only query, exit
        # without teardown. Nothing else of gantry.
        import apsw

        apsw_dir = str(Path(apsw.__file__).resolve().parent.parent)
        row_floor = (
            f"import sys; sys.path.insert(0, {apsw_dir!r}); import apsw, os; "
            f"c = apsw.Connection({str(db_path)!r}, flags=apsw.SQLITE_OPEN_READONLY); "
            "c.execute('SELECT ts, version, pid FROM heartbeat WHERE id = 1').fetchone(); "
            "c.close(); os._exit(0)")
        cached[FLOOR] = ([os.path.realpath(sys.executable), "-S", "-c", row_floor], env)
        cached["binary version, cached"] = ([str(binary), "version"], env)
        cached["python -m gantry version (source)"] = (
            [sys.executable, "-m", "gantry", "version"], source_env)
        bin_dir = Path(spec) if spec else None
        inner = next(iter(sorted(bin_dir.glob("*.bin"))), None) if bin_dir else None
        if inner and inner.exists():
            cached["unpacked .bin status (no bootstrap)"] = ([str(inner), "status"], env)
        before = args.before.resolve() if args.before else None
        if before is not None:
            for command in ("status", "version"):
                run_once([str(before), command], env)  # unpack it once: cached from here on
                cached[f"before: binary {command}, cached"] = ([str(before), command], env)
        rows.update(interleaved(cached, args.runs))
        summed = summed_rss(status_bin, env)
        import_bin = import_costs_binary(binary, env)

    import_src = import_costs_source(sys.executable)
    size = binary.stat().st_size
    payload = sum(f.stat().st_size for f in Path(spec).rglob("*") if f.is_file()) \
        if spec and Path(spec).exists() else None

    container = container_memory(binary, payload, args.idle)

    print(f"gantry binary bench: {binary} ({size / 1e6:.1f} MB), runs={args.runs}, "
          f"cpus={os.cpu_count()}, load={os.getloadavg()[0]:.2f}")
    print(f"  {'':<44} {'median':>8} {'p90':>8} {'min':>8} {'peak RSS':>9}")
    print(f"  {'':<44} {'ms':>8} {'ms':>8} {'ms':>8} {'MiB':>9}")
    for name, s in rows.items():
        print(row(name, s))
    print(f"  binary status cached, bootstrap + app RSS summed (sampled): {summed:.1f} MiB")
    if args.before:
        for command in ("status", "version"):
            new = rows[f"binary {command}, cached"]["median_ms"]
            old = rows[f"before: binary {command}, cached"]["median_ms"]
            print(f"  {command} cached, this build vs --before: {new:.2f} vs {old:.2f} ms median "
                  f"({new - old:+.2f} ms)")
    print(f"  binary size {size / 1e6:.1f} MB; unpacked payload "
          f"{payload / 1e6:.1f} MB in {spec}" if payload else f"  binary size {size / 1e6:.1f} MB")
    status = rows["binary status, cached"]
    print(f"  goals: status median {status['median_ms']:.1f} ms (<= 25: "
          f"{'ok' if status['median_ms'] <= 25 else 'MISSED'}; "
          f"{status['median_ms'] / rows[FLOOR]['median_ms']:.2f}x the apsw floor), peak RSS "
          f"{status['peak_rss_mib']:.0f} MiB (<= 30: "
          f"{'ok' if status['peak_rss_mib'] <= 30 else 'MISSED'}), size "
          f"{size / 1e6:.0f} MB (<= 60: {'ok' if size <= 60e6 else 'MISSED'})")
    print("  import cost, source (median of 5 fresh interpreters, ms): "
          + ", ".join(f"{k} {v:.0f}" for k, v in import_src.items()))
    if import_bin:
        print("  import cost, binary (gantry version --import-times, ms): "
              + ", ".join(f"{k} {v:.0f}" if isinstance(v, float) else f"{k} {v}"
                          for k, v in import_bin.items()))
    else:
        print("  import cost, binary: n/a (gantry version --import-times failed)")
    print(f"  container memory, idle `gantry run` (bootstrap + app, {args.idle:.0f} s after one "
          "answered message; payload = unpacked /tmp dir):")
    for channel, c in container.items():
        print(f"    {channel:<9} boot->reply {c['boot_s']:5.2f} s  RSS {c['rss_mib']:6.1f} MiB "
              f"(anon {c['anon_mib']:5.1f}) + payload {c['payload_mib']:5.1f} MiB = "
              f"{c['container_mib']:6.1f} MiB (without the double-counted mapped payload: "
              f"{c['container_no_overlap_mib']:6.1f})")
    tg = container["telegram"]["container_mib"]
    print(f"  goal: telegram container memory {tg:.0f} MiB (issue 14, <= 150: "
          f"{'ok' if tg <= 150 else 'MISSED'}; issue 44, <= 120: "
          f"{'ok' if tg <= 120 else 'MISSED'}); binary {size / 1e6:.1f} MB (<= 25: "
          f"{'ok' if size <= 25e6 else 'MISSED'})")
    builds = build_times()
    for kind in ("cold", "warm"):
        if kind in builds:
            b = builds[kind]
            print(f"  build ({kind}): {b['wall_s']} s wall, jobs {b['jobs']}, cpus {b['cpus']}, "
                  f"ccache {b['ccache']}, {b['finished']}")
    results = {"rows": rows, "summed_rss_mib": summed, "size_bytes": size,
               "payload_bytes": payload, "import_ms_source": import_src,
               "import_ms_binary": import_bin, "builds": builds, "container": container}
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
