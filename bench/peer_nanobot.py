"""gantry's Telegram start-up and idle memory next to nanobot's, in one run (prints; never fails).

    python bench/peer_nanobot.py [--runs 5] [--idle 10] [--binary dist/gantry] [--source]
                                 [--venv DIR]

nanobot (PyPI ``nanobot-ai``, on python-telegram-bot) is the Python peer people would pick
instead of gantry. This script installs it into its own venv under a temporary directory,
with the Telegram extras its gateway checks for at start (without them it tries a pip install
at start, which fails in the network namespace, and runs with Telegram off), and then
alternates, ``--runs`` times each:

* gantry (the frozen binary; ``--source`` for ``python -m gantry``) with CHANNEL=telegram
  against the loopback fake Bot API (tests/fakes/telegram.py) and fake model; ready = the
  fake's first ``getUpdates``;
* ``nanobot gateway`` with its Telegram channel enabled, in a loopback-only network namespace
  (``unshare -n``, loopback brought up), its Telegram proxy pointed at a dead loopback port,
  so it never reaches the internet; ready = its "WebSocket server listening" log line (its
  log must also say the Telegram channel is enabled, or the run is reported as invalid).

For each run: seconds from spawn to ready, and the RSS of the whole process tree (summed from
/proc) ``--idle`` seconds after ready. One unmeasured warm-up run each first (gantry unpacks
its payload, Python writes its bytecode caches). Prints every run, the medians, and the ratios
gantry / nanobot. Needs root for ``unshare -n`` and the network for the one pip install.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _proc import rss_kib, tree  # noqa: E402

from tests.fakes.openai import FakeOpenAI  # noqa: E402
from tests.fakes.telegram import FakeTelegram  # noqa: E402

NANOBOT = "nanobot-ai==0.3.5"
# What nanobot's gateway checks for when the Telegram channel is enabled (else it pip-installs).
TELEGRAM_EXTRAS = (
    "python-telegram-bot[socks,webhooks]>=22.6,<23",
    "socksio>=1,<2",
    "python-socks[asyncio]>=2.8,<3",
)
TOKEN = "123456789:AAE_bench-token-for-loopback-only"
USER = 4242
DEAD_PORT = 9  # discard: nothing listens on loopback port 9
READY_LINE = "WebSocket server listening"
TELEGRAM_ON = re.compile(r"Telegram channel enabled")  # nanobot 0.3.5: "... enabled as telegram"
TIMEOUT = 180.0


class Output:
    """A child's merged stdout/stderr, drained on a thread; waits for a line matching a test."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._drain, args=(proc,), daemon=True)
        self._thread.start()

    def _drain(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._cond:
                self.lines.append((time.perf_counter(), line.rstrip("\n")))
                self._cond.notify_all()

    def wait_for(self, test: Callable[[str], bool], timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            seen = 0
            while True:
                for t, line in self.lines[seen:]:
                    if test(line):
                        return t
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(min(left, 0.5))

    def text(self) -> str:
        with self._cond:
            return "\n".join(line for _, line in self.lines)


def stop(proc: subprocess.Popen[str], grace: float = 20.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; by PID only."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def install_nanobot(venv: Path) -> Path:
    if not (venv / "bin" / "nanobot").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", NANOBOT, *TELEGRAM_EXTRAS], check=True)
    version = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "show", "nanobot-ai"],
                             capture_output=True, text=True).stdout
    m = re.search(r"^Version: (\S+)", version, re.M)
    print(f"nanobot-ai {m.group(1) if m else '?'} in {venv}", flush=True)
    return venv / "bin" / "nanobot"


def nanobot_config(home: Path) -> Path:
    """A config with Telegram on (behind a dead loopback proxy) and a loopback model."""
    home.mkdir(parents=True, exist_ok=True)
    config = {
        "agents": {"defaults": {"workspace": str(home / "workspace"), "model": "bench-model",
                                "provider": "custom"}},
        "providers": {"custom": {"apiKey": "sk-bench",
                                 "apiBase": f"http://127.0.0.1:{DEAD_PORT}/v1"}},
        "channels": {"telegram": {"enabled": True, "token": TOKEN, "allowFrom": [str(USER)],
                                  "proxy": f"http://127.0.0.1:{DEAD_PORT}"}},
    }
    path = home / "config.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def run_nanobot(nanobot: Path, home: Path, idle: float) -> tuple[float | None, float, str]:
    """(seconds to ready or None, idle tree RSS MiB, log) of one `nanobot gateway`."""
    config = nanobot_config(home)
    env = {"PATH": f"{nanobot.parent}:/usr/sbin:/usr/bin:/bin", "HOME": str(home),
           "NO_COLOR": "1", "TERM": "dumb", "PYTHONUNBUFFERED": "1"}
    inner = ('ip link set lo up && exec "$0" gateway --config "$1" '
             '--workspace "$2"')
    start = time.perf_counter()
    proc = subprocess.Popen(
        ["unshare", "-n", "--", "sh", "-c", inner, str(nanobot), str(config),
         str(home / "workspace")],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, cwd=home)
    out = Output(proc)
    try:
        at = out.wait_for(lambda line: READY_LINE in line, TIMEOUT)
        if at is None:
            return None, 0.0, out.text()
        time.sleep(idle)
        rss = rss_kib(tree(proc.pid)) / 1024
        return at - start, rss, out.text()
    finally:
        stop(proc)


def run_gantry(cmd: list[str], data: Path, idle: float) -> tuple[float | None, float, str]:
    """(seconds to the first getUpdates or None, idle tree RSS MiB, log) of one `gantry run`."""
    with FakeOpenAI() as llm, FakeTelegram(token=TOKEN) as tg:
        shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CHANNEL": "telegram",
               "LLM_BASE_URL": llm.base_url, "LLM_API_KEY": "sk-bench", "LLM_MODEL": "m",
               "DATA_DIR": str(data), "PERSONA_DIR": str(data),
               "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_ALLOWED_USERS": str(USER),
               "TELEGRAM_API_URL": tg.base_url, "LOG_LEVEL": "warning",
               "PYTHONPATH": str(ROOT)}
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out = Output(proc)
        try:
            try:
                tg.wait_calls_sync("getUpdates", 1, timeout=TIMEOUT)
            except AssertionError:
                return None, 0.0, out.text()
            ready = time.perf_counter() - start
            time.sleep(idle)
            return ready, rss_kib(tree(proc.pid)) / 1024, out.text()
        finally:
            stop(proc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--idle", type=float, default=10.0, help="seconds after ready to read RSS")
    ap.add_argument("--binary", type=Path, default=ROOT / "dist" / "gantry")
    ap.add_argument("--source", action="store_true", help="gantry from source, not the binary")
    ap.add_argument("--venv", type=Path, help="reuse (or create) nanobot's venv here")
    args = ap.parse_args(argv)
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None:
        print("bench/peer_nanobot.py: needs root, unshare and ip (network namespace)")
        return 0
    if args.source:
        gantry_cmd, label = [sys.executable, "-m", "gantry", "run"], "gantry (source)"
    elif args.binary.exists():
        gantry_cmd, label = [str(args.binary.resolve()), "run"], "gantry (binary)"
    else:
        print(f"bench/peer_nanobot.py: {args.binary} missing; build it (nox -s build) or "
              "pass --source")
        return 0

    with tempfile.TemporaryDirectory(prefix="gantry-peer-") as d:
        tmp = Path(d)
        nanobot = install_nanobot(args.venv or tmp / "venv")
        results: dict[str, list[tuple[float, float]]] = {label: [], "nanobot": []}
        invalid: list[str] = []

        def once(who: str, measured: bool) -> None:
            if who == "nanobot":
                ready, rss, log = run_nanobot(nanobot, tmp / "nanobot-home", args.idle)
                if ready is not None and not TELEGRAM_ON.search(log):
                    invalid.append("nanobot's log does not say its Telegram channel is on")
                    ready = None
            else:
                ready, rss, log = run_gantry(gantry_cmd, tmp / "gantry-data", args.idle)
            if ready is None:
                print(f"  {who}: not ready within {TIMEOUT:.0f} s; last output:\n"
                      + "\n".join(log.splitlines()[-15:]), flush=True)
                return
            if measured:
                results[who].append((ready, rss))
            tag = "run" if measured else "warm-up"
            print(f"  {tag:<7} {who:<16} ready {ready:6.2f} s   idle RSS {rss:6.1f} MiB",
                  flush=True)

        print(f"side by side, alternating, {args.runs} runs each, idle {args.idle:.0f} s, "
              f"cpus={os.cpu_count()}, load={os.getloadavg()[0]:.2f}", flush=True)
        once(label, False)
        once("nanobot", False)
        for _ in range(args.runs):
            once(label, True)
            once("nanobot", True)

    print(f"\n  {'':<16} {'ready s (median)':>17} {'idle RSS MiB (median)':>22} {'runs':>5}")
    med: dict[str, tuple[float, float]] = {}
    for who, rows in results.items():
        if rows:
            med[who] = (statistics.median(r for r, _ in rows),
                        statistics.median(m for _, m in rows))
            print(f"  {who:<16} {med[who][0]:>17.2f} {med[who][1]:>22.1f} {len(rows):>5}")
        else:
            print(f"  {who:<16} {'n/a':>17} {'n/a':>22} {0:>5}")
    if label in med and "nanobot" in med:
        g, n = med[label], med["nanobot"]
        print(f"  ratio gantry/nanobot: ready {g[0] / n[0]:.2f}x, idle RSS {g[1] / n[1]:.2f}x")
        print(f"  goals (issue 14): ready <= 1.0 s: {'ok' if g[0] <= 1.0 else 'MISSED'}; "
              f"idle <= 100 MiB: {'ok' if g[1] <= 100 else 'MISSED'}")
        ready, idle = g[0] / n[0], g[1] / n[1]
        print(f"  goals (issue 44): ready <= 0.35x nanobot's: "
              f"{'ok' if ready <= 0.35 else 'MISSED'}; idle RSS <= 0.6x: "
              f"{'ok' if idle <= 0.6 else 'MISSED'}")
    for note in dict.fromkeys(invalid):
        print(f"  invalid nanobot runs: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
