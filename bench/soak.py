"""A long run of `gantry run` on Telegram: does anything grow? (prints; never fails)

    python bench/soak.py [--turns 10000] [--every 1000] [--binary dist/gantry | --source]

gantry runs against the loopback fakes (tests/fakes: Bot API, model) with two MCP servers:
PyPI mcp-server-time over stdio and npm server-everything over Streamable HTTP on a loopback
port, driven by tests/fakes/soak.py: one chat, `--turns` turns one at a time, in a fixed mix
(text, tool rounds through either server, memory store and recall, photos, documents, /stop
and a follow-up, cron pushes). The fake model answers at once (no delay), so a turn's
latency — from the update being queued to its reply's final text reaching the fake Bot API —
is gantry's own plus the fakes' serving in this process. `floor` is a bare getMe round trip
to the same fake, sampled every 100 turns: the machine's speed at that moment; p50/floor
reads a row against it.

Every `--every` turns one row: RSS of gantry's own processes (the onefile bootstrap and its
app, not the MCP children) split into anonymous (RssAnon) and file-backed (RssFile +
RssShmem) from /proc/PID/status, open fds, threads, event-loop tasks (the count `gantry run`
writes in its heartbeat row every 15 s), live child processes, gantry.db and its -wal,
DATA_DIR/media and DATA_DIR/outbox, the rows of the tables that grow with use, and the
block's turn latency p50/p99 (every turn but the stopped ones). The last line compares the
last row with the first: the growth after turn 1,000.
"""

from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _proc import status_kib  # noqa: E402

from tests.fakes.mcp_remote import everything_http, toml_remote  # noqa: E402
from tests.fakes.mcp_servers import live_children, time_command, toml_server  # noqa: E402
from tests.fakes.soak import Soak, count_fds, count_threads, fakes, own_pids, p50_p99  # noqa: E402

TABLES = ("session_message", "telegram_update", "memory", "usage", "cron_job", "cron_run",
          "mcp_task")


@dataclass
class Sample:
    turn: int
    rss: float
    anon: float
    file: float
    fds: int
    threads: int
    tasks: int | None
    children: int
    db: float
    wal: float
    media: float
    outbox: float
    rows: dict[str, int]
    p50: float
    p99: float
    floor: float
    fired: int


def dir_kib(path: Path) -> float:
    if not path.exists():
        return 0.0
    return sum(f.lstat().st_size for f in path.rglob("*") if f.is_file()) / 1024


def read_db(db: Path) -> tuple[int | None, dict[str, int]]:
    """(heartbeat task count, rows per growing table), read-only beside the running gantry."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        row = conn.execute("SELECT tasks FROM heartbeat WHERE id = 1").fetchone()
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        rows = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in TABLES if t in names}
    finally:
        conn.close()
    return (row[0] if row else None), rows


def sample(run: Soak, turn: int, lat: list[float], floor: list[float]) -> Sample:
    pids = own_pids(run.proc.pid)
    kids = [k for p in pids for k in live_children(p) if k not in pids]
    tasks, rows = read_db(run.data / "gantry.db")
    wal = run.data / "gantry.db-wal"
    p50, p99 = p50_p99(lat)
    return Sample(
        turn=turn, rss=status_kib(pids, "VmRSS") / 1024, anon=status_kib(pids, "RssAnon") / 1024,
        file=(status_kib(pids, "RssFile") + status_kib(pids, "RssShmem")) / 1024,
        fds=count_fds(pids), threads=count_threads(pids), tasks=tasks, children=len(kids),
        db=(run.data / "gantry.db").stat().st_size / 1024,
        wal=wal.stat().st_size / 1024 if wal.exists() else 0.0,
        media=dir_kib(run.data / "media"), outbox=dir_kib(run.data / "outbox"), rows=rows,
        p50=p50 * 1000, p99=p99 * 1000, floor=statistics.median(floor or [0.0]) * 1000,
        fired=len(run.fakes.watch.fired))


HEAD = (f"{'turn':>6} {'RSS':>6} {'anon':>6} {'file':>5} {'fds':>4} {'thr':>3} {'tasks':>5} "
        f"{'kids':>4} {'db KiB':>6} {'wal':>5} {'media':>5} {'outbx':>5} {'p50 ms':>6} "
        f"{'p99 ms':>6} {'floor':>5} {'p50/fl':>6} {'cron':>4}  rows")


def line(s: Sample) -> str:
    rows = " ".join(f"{k.removeprefix('telegram_')}={v}" for k, v in s.rows.items())
    tasks = "-" if s.tasks is None else str(s.tasks)
    ratio = f"{s.p50 / s.floor:.0f}×" if s.floor else "-"
    return (f"{s.turn:>6} {s.rss:>6.1f} {s.anon:>6.1f} {s.file:>5.1f} {s.fds:>4} "
            f"{s.threads:>3} {tasks:>5} {s.children:>4} {s.db:>6.0f} {s.wal:>5.0f} "
            f"{s.media:>5.0f} {s.outbox:>5.0f} {s.p50:>6.1f} {s.p99:>6.1f} {s.floor:>5.2f} "
            f"{ratio:>6} {s.fired:>4}  {rows}")


def growth(first: Sample, last: Sample) -> str:
    def pct(a: float | None, b: float | None) -> str:
        return f"{(b - a) / a * 100:+.1f} %" if a and b is not None else "n/a"
    return (f"growth turn {first.turn} → {last.turn}: RSS {pct(first.rss, last.rss)} "
            f"(anon {pct(first.anon, last.anon)}, file {pct(first.file, last.file)}), "
            f"fds {pct(first.fds, last.fds)}, threads {pct(first.threads, last.threads)}, "
            f"tasks {pct(first.tasks, last.tasks)}; p99 {first.p99:.1f} → {last.p99:.1f} ms "
            f"(floor {first.floor:.2f} → {last.floor:.2f} ms)")


@contextmanager
def running(cmd: list[str], d: Path, extra_env: dict[str, str] | None = None) -> Iterator[Soak]:
    """gantry on this host, its two MCP servers and the fakes; stopped with SIGTERM."""
    with fakes() as f, everything_http("streamableHttp") as every:
        data, persona, manifest = d / "data", d / "persona", d / "mcp.toml"
        persona.mkdir()
        (persona / "PERSONA.md").write_text("You are the soak persona.\n")
        manifest.write_text(toml_server("time", [time_command()])
                            + toml_remote("every", every.url))
        env = {**f.env(), "PATH": os.environ["PATH"], "HOME": str(d), "DATA_DIR": str(data),
               "PERSONA_DIR": str(persona), "MCP_MANIFEST": str(manifest), **(extra_env or {})}
        log = d / "gantry.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=out, start_new_session=True)
        run = Soak(proc, f, data, lambda: log.read_text(errors="replace"))
        try:
            yield run
        except BaseException:
            print(f"gantry log (last lines):\n{run.log()[-3000:]}")
            raise
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def soak(cmd: list[str], turns: int, every: int, show: Callable[[str], None] = print,
         extra_env: dict[str, str] | None = None) -> list[Sample]:
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory() as tmp, running(cmd, Path(tmp), extra_env) as run:
        show(HEAD)

        def row(n: int, lat: list[float], floor: list[float]) -> None:
            samples.append(sample(run, n, lat, floor))
            show(line(samples[-1]))

        run.drive(turns, every, row)
        errors = [ln for ln in run.log().splitlines()
                  if '"level": "error"' in ln or "Traceback" in ln]
        show(f"gantry log: {len(errors)} error lines"
             + "".join(f"\n  {e[:300]}" for e in errors[:5]))
    if len(samples) >= 2:
        show(growth(samples[0], samples[-1]))
    return samples


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=10_000)
    ap.add_argument("--every", type=int, default=1_000)
    ap.add_argument("--binary", type=Path, default=ROOT / "dist" / "gantry")
    ap.add_argument("--source", action="store_true", help="run `python -m gantry run` instead")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop gantry and the servers too
    if args.source or not args.binary.exists():
        cmd, what = [sys.executable, "-m", "gantry", "run"], "source"
    else:
        cmd, what = [str(args.binary), "run"], str(args.binary)
    print(f"soak: {args.turns} turns of `gantry run` ({what}), a row every {args.every}; "
          "RSS/anon/file MiB, db/wal/media/outbox KiB", flush=True)
    soak(cmd, args.turns, args.every, show=lambda s: print(s, flush=True))


if __name__ == "__main__":
    main()
