"""A long run of `gantry run` on Telegram: does anything grow? (prints; never fails)

    python bench/soak.py [--turns 10000] [--every 1000] [--binary dist/gantry | --source]

gantry runs against the loopback fakes (tests/fakes: Bot API, model) with two MCP servers:
PyPI mcp-server-time over stdio and npm server-everything over Streamable HTTP on a loopback
port. One chat sends `--turns` turns, one at a time, in a fixed mix: text; tool rounds
through either server; memory_store and memory_recall; photos; documents (text, read; and
binary, kept in DATA_DIR/media); a slow reply stopped with /stop and a follow-up; cron jobs
scheduled a minute ahead, whose pushes arrive in between. The fake model answers at once
(no delay): a turn's latency, from the update being queued to its reply's final text
reaching the fake Bot API, is gantry's own (plus the fakes' serving, in this process).

Every `--every` turns it prints one row: RSS of gantry's processes (the onefile bootstrap
and its app; MCP children not counted) split into anonymous and file-backed (RssAnon,
RssFile + RssShmem from /proc/PID/status), open fds, threads, event-loop tasks (the count
`gantry run` writes in its heartbeat row every 15 s), live child processes, gantry.db and
its -wal, DATA_DIR/media and DATA_DIR/outbox, rows kept in the growing tables, and the
p50/p99 latency of that block's text turns (every kind but /stop). The last lines compare
the final row with the first: the growth of RSS, fds, threads and tasks after turn 1,000.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _proc import status_kib, tree  # noqa: E402

from tests.fakes.mcp_remote import HttpServer, everything_http, toml_remote  # noqa: E402
from tests.fakes.mcp_servers import live_children, toml_server  # noqa: E402
from tests.fakes.media_samples import jpeg  # noqa: E402
from tests.fakes.openai import Call, FakeOpenAI, RecordedRequest, Reply, Route  # noqa: E402
from tests.fakes.openai import Script, ToolCalls  # noqa: E402
from tests.fakes.telegram import FakeTelegram  # noqa: E402

TOKEN = "123456789:AAE_soak-token-for-loopback-only"
USER = 4242
TAG = re.compile(r"\[soak (\w+) (\d+)\]")
DONE = re.compile(r"done-(\d+)")
FIRED = re.compile(r"fired-(\d+)")
TURN_WAIT = 60.0
SLOW = 30.0  # the stopped turn's model delay: it never answers before the /stop

# One hundred turns, shuffled once: the kinds and how many of each per hundred.
MIX = {"text": 55, "time": 10, "remote": 8, "sum": 2, "image": 2, "store": 5, "recall": 5,
       "photo": 4, "doc": 3, "blob": 2, "stop": 2, "cron": 2}
TABLES = ("session_message", "telegram_update", "telegram_outbound", "memory", "usage",
          "cron_job", "cron_run", "mcp_task")


def tool_call(kind: str, n: int) -> Call | None:
    """The call a turn of `kind` makes (None: a plain reply)."""
    calls = {
        "time": lambda: Call("time__get_current_time", {"timezone": "UTC"}),
        "remote": lambda: Call("every__echo", {"message": f"soak {n}"}),
        "sum": lambda: Call("every__get-sum", {"a": n, "b": 1}),
        "image": lambda: Call("every__get-tiny-image", {}),
        "store": lambda: Call("memory_store", {"kind": "fact", "subject": f"item{n}",
                                               "content": f"soak fact {n}: likes tea {n % 7}"}),
        "recall": lambda: Call("memory_recall", {"query": f"item{max(0, n - 40)} tea"}),
        "cron": lambda: Call("cron_schedule", {"when": "in 1 minute",
                                               "prompt": f"[soak fire {n}] say pong"}),
    }
    make = calls.get(kind)
    return make() if make else None


def route(req: RecordedRequest) -> Script:
    """The fake model: a turn's tag says what to do; requests without tools (history
    summaries, memory consolidation) get a short reply."""
    body = req.body if isinstance(req.body, dict) else {}
    found = TAG.search(req.last_user_text)
    if found is None or not body.get("tools"):
        return Reply("summary: a soak conversation")
    kind, n = found.group(1), int(found.group(2))
    if kind == "fire":
        return Reply(f"pong fired-{n}")
    if kind == "stop":
        return Reply(f"too late done-{n}", delay=SLOW)
    call = tool_call(kind, n)
    newest = req.messages[-1].get("role") if req.messages else None
    if call is None or newest == "tool":
        return Reply(f"{kind} ok done-{n}")
    return ToolCalls([Call(call.name, call.arguments, id=f"c{n}")])


@dataclass
class Watch:
    """Turn ends and cron pushes, seen in the texts the fake Bot API receives."""

    done: dict[int, float] = field(default_factory=dict)
    fired: set[int] = field(default_factory=set)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def saw(self, text: str) -> None:
        now = time.perf_counter()
        with self.cond:
            for m in DONE.finditer(text):
                self.done.setdefault(int(m.group(1)), now)
            for m in FIRED.finditer(text):
                self.fired.add(int(m.group(1)))
            self.cond.notify_all()

    def wait(self, n: int, timeout: float = TURN_WAIT) -> float:
        with self.cond:
            if not self.cond.wait_for(lambda: n in self.done, timeout):
                raise RuntimeError(f"turn {n}: no reply in {timeout:g} s")
            return self.done.pop(n)

    def wait_for_sent(self, tg: FakeTelegram, pattern: str, timeout: float = TURN_WAIT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(pattern in t for t in tg.current_texts(USER)):
                return
            time.sleep(0.02)
        raise RuntimeError(f"no message with {pattern!r} in {timeout:g} s")


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
    fired: int


def own_pids(pid: int) -> list[int]:
    """gantry's processes (the onefile bootstrap and its app), not its MCP children, which
    run in their own sessions."""
    def sid(p: int) -> int:
        try:
            return int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[3])
        except (OSError, IndexError, ValueError):
            return -1
    return [p for p in tree(pid) if sid(p) == sid(pid)]


def count_fds(pids: list[int]) -> int:
    total = 0
    for p in pids:
        try:
            total += len(os.listdir(f"/proc/{p}/fd"))
        except OSError:
            pass
    return total


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
        rows = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: S608
                for t in TABLES if t in names}
    finally:
        conn.close()
    return (row[0] if row else None), rows


def sample(turn: int, pid: int, data: Path, lat: list[float], watch: Watch) -> Sample:
    pids = own_pids(pid)
    kids = [k for p in pids for k in live_children(p) if k not in pids]
    tasks, rows = read_db(data / "gantry.db")
    lat = sorted(lat) or [0.0]
    wal = data / "gantry.db-wal"
    return Sample(
        turn=turn, rss=status_kib(pids, "VmRSS") / 1024, anon=status_kib(pids, "RssAnon") / 1024,
        file=(status_kib(pids, "RssFile") + status_kib(pids, "RssShmem")) / 1024,
        fds=count_fds(pids), threads=status_kib(pids, "Threads"), tasks=tasks,
        children=len(kids), db=(data / "gantry.db").stat().st_size / 1024,
        wal=wal.stat().st_size / 1024 if wal.exists() else 0.0,
        media=dir_kib(data / "media"), outbox=dir_kib(data / "outbox"), rows=rows,
        p50=statistics.median(lat) * 1000,
        p99=lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, fired=len(watch.fired))


HEAD = (f"{'turn':>6} {'RSS':>6} {'anon':>6} {'file':>6} {'fds':>4} {'thr':>4} {'tasks':>5} "
        f"{'kids':>4} {'db KiB':>7} {'wal KiB':>7} {'media':>6} {'outbox':>6} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'cron':>4}  rows")


def line(s: Sample) -> str:
    rows = " ".join(f"{k.removeprefix('telegram_')}={v}" for k, v in s.rows.items())
    tasks = "-" if s.tasks is None else str(s.tasks)
    return (f"{s.turn:>6} {s.rss:>6.1f} {s.anon:>6.1f} {s.file:>6.1f} {s.fds:>4} "
            f"{s.threads:>4} {tasks:>5} {s.children:>4} {s.db:>7.0f} {s.wal:>7.0f} "
            f"{s.media:>6.0f} {s.outbox:>6.0f} {s.p50:>7.1f} {s.p99:>7.1f} {s.fired:>4}  {rows}")


def growth(first: Sample, last: Sample) -> str:
    def pct(a: float, b: float) -> str:
        return f"{(b - a) / a * 100:+.1f} %" if a else "n/a"
    tasks = (pct(first.tasks, last.tasks) if first.tasks and last.tasks is not None else "n/a")
    return (f"growth turn {first.turn} → {last.turn}: RSS {pct(first.rss, last.rss)} "
            f"(anon {pct(first.anon, last.anon)}), fds {pct(first.fds, last.fds)}, "
            f"threads {pct(first.threads, last.threads)}, tasks {tasks}; p99 "
            f"{first.p99:.1f} → {last.p99:.1f} ms (p50 {first.p50:.1f} → {last.p50:.1f})")


def kinds(seed: int = 0) -> list[str]:
    order = [k for k, count in MIX.items() for _ in range(count)]
    random.Random(seed).shuffle(order)
    return order


@dataclass
class Soak:
    """One gantry process driven turn by turn."""

    proc: subprocess.Popen[bytes]
    tg: FakeTelegram
    llm: FakeOpenAI
    data: Path
    watch: Watch
    log: Path

    def turn(self, n: int, kind: str) -> float | None:
        """Send turn n; its latency in seconds (None for a stopped turn)."""
        tag = f"[soak {kind} {n}]"
        t0 = time.perf_counter()
        if kind == "photo":
            self.tg.push_photo(USER, jpeg(8_000, seed=n), caption=f"{tag} what is this?")
        elif kind == "doc":
            self.tg.push_document(USER, f"notes {n}\n".encode() * 50, f"notes-{n}.txt",
                                  "text/plain", caption=f"{tag} read this")
        elif kind == "blob":
            self.tg.push_document(USER, os.urandom(6_000), f"data-{n}.bin",
                                  "application/octet-stream", caption=f"{tag} keep this")
        elif kind == "stop":
            self.tg.push_text(USER, f"{tag} take your time")
            self._wait_model(tag)
            self.tg.push_text(USER, "/stop")
            self.turn(n + 1_000_000, "text")  # the follow-up: answered, not the slow one
            return None
        else:
            self.tg.push_text(USER, f"{tag} hello number {n}")
        done = self.watch.wait(n)
        return done - t0

    def _wait_model(self, tag: str, timeout: float = TURN_WAIT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(tag in r.last_user_text for r in list(self.llm.requests)[-3:]):
                return
            time.sleep(0.01)
        raise RuntimeError(f"the model never saw {tag}")

    def alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"gantry exited with {self.proc.returncode}: "
                               f"{self.log.read_text()[-3000:]}")


@contextmanager
def running(cmd: list[str], d: Path, every: HttpServer, time_server: list[str],
            extra_env: dict[str, str] | None = None) -> Iterator[Soak]:
    watch = Watch()
    with FakeOpenAI(default=Route(route)) as llm, FakeTelegram(token=TOKEN) as tg:
        tg.on_text = watch.saw
        data = d / "data"
        persona = d / "persona"
        persona.mkdir()
        (persona / "PERSONA.md").write_text("You are the soak persona.\n")
        manifest = d / "mcp.toml"
        manifest.write_text(toml_server("time", time_server) + toml_remote("every", every.url))
        env = {"PATH": os.environ["PATH"], "HOME": str(d), "CHANNEL": "telegram",
               "LLM_BASE_URL": llm.base_url, "LLM_API_KEY": "sk-soak", "LLM_MODEL": "m",
               "DATA_DIR": str(data), "PERSONA_DIR": str(persona), "MCP_MANIFEST": str(manifest),
               "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_ALLOWED_USERS": str(USER),
               "TELEGRAM_API_URL": tg.base_url, "LOG_LEVEL": "info", "CRON_TICK_SECONDS": "1",
               "MEDIA_MAX_TOTAL_BYTES": "200000", **(extra_env or {})}
        log = d / "gantry.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=out, start_new_session=True)
        soak = Soak(proc, tg, llm, data, watch, log)
        try:
            yield soak
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def soak(cmd: list[str], turns: int, every_n: int, show: Callable[[str], None] = print,
         extra_env: dict[str, str] | None = None) -> list[Sample]:
    """Run `turns` turns and return a Sample every `every_n` (also shown as rows)."""
    from tests.fakes.mcp_servers import time_command

    samples: list[Sample] = []
    with tempfile.TemporaryDirectory() as tmp, everything_http("streamableHttp") as every, \
            running(cmd, Path(tmp), every, [time_command()], extra_env) as run:
        order = kinds()
        run.turn(0, "text")  # boot
        show(HEAD)
        lat: list[float] = []
        for n in range(1, turns + 1):
            run.alive()
            took = run.turn(n, order[n % len(order)])
            if took is not None:
                lat.append(took)
            if n % 100 == 0:
                run.tg.forget()
                run.llm.forget()
            if n % every_n == 0:
                samples.append(sample(n, run.proc.pid, run.data, lat, run.watch))
                show(line(samples[-1]))
                lat = []
        errors = [ln for ln in run.log.read_text(errors="replace").splitlines()
                  if '"level": "error"' in ln or "Traceback" in ln]
        show(f"gantry log: {len(errors)} error lines"
             + ("".join(f"\n  {e[:300]}" for e in errors[:5])))
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
    if args.source or not args.binary.exists():
        cmd, what = [sys.executable, "-m", "gantry", "run"], "source"
    else:
        cmd, what = [str(args.binary), "run"], str(args.binary)
    print(f"soak: {args.turns} turns of `gantry run` ({what}), a row every {args.every}; "
          "RSS/anon/file MiB, media/outbox KiB", flush=True)
    soak(cmd, args.turns, args.every, show=lambda s: print(s, flush=True))


if __name__ == "__main__":
    main()
