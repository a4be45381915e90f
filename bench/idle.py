"""What an idle `gantry run` costs, per channel: RSS and CPU after boot (prints; never fails).

`stdio+mcp` is stdio with one MCP server in the manifest (the static C fixture); the server
runs in its own session and is not counted: the figure is gantry's own.

    python bench/idle.py [--binary dist/gantry] [--seconds 10] [--breakdown]

Starts gantry (the frozen binary if present, and the source install) with CHANNEL=stdio and
CHANNEL=telegram against the loopback fakes, waits until it is receiving and has answered one
message, then samples RSS (bootstrap + app processes summed, from /proc) and the CPU time
spent while idle for `--seconds`. `--breakdown` also prints, per process, how much of its RSS
is anonymous (Python objects, heaps) and how much is file pages of the executable and
libraries, with the largest mappings: where the binary's extra RSS over source is.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _proc import breakdown, rss_kib, status_kib, tree  # noqa: E402

from tests.fakes.mcp_servers import static_fixture, toml_server  # noqa: E402
from tests.fakes.openai import FakeOpenAI  # noqa: E402
from tests.fakes.telegram import FakeTelegram  # noqa: E402

TOKEN = "123456789:AAE_bench-token-for-loopback-only"
USER = 4242
TICK = os.sysconf("SC_CLK_TCK")


def rss_mib(pids: list[int]) -> float:
    return rss_kib(pids) / 1024


def cpu_s(pids: list[int]) -> float:
    total = 0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError):
            pass
    return total / TICK


def _sid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return -1


def measure(cmd: list[str], channel: str, seconds: float) -> tuple[float, float, float]:
    """(boot-to-first-reply s, idle RSS MiB, idle CPU ms per second)."""
    boot, rss, _anon, cpu = measure_full(cmd, channel, seconds)
    return boot, rss, cpu


def measure_full(
    cmd: list[str], channel: str, seconds: float, show_maps: bool = False
) -> tuple[float, float, float, float]:
    """(boot-to-first-reply s, idle RSS MiB, idle anonymous RSS MiB, idle CPU ms per second)."""
    mcp = channel == "stdio+mcp"
    channel = channel.removesuffix("+mcp")
    with FakeOpenAI() as llm, FakeTelegram(token=TOKEN) as tg, tempfile.TemporaryDirectory() as d:
        manifest = Path(d) / "mcp.toml"
        manifest.write_text(toml_server("st", [str(static_fixture())]) if mcp else "")
        env = {"PATH": os.environ["PATH"], "CHANNEL": channel, "LLM_BASE_URL": llm.base_url,
               "MCP_MANIFEST": str(manifest),
               "LLM_API_KEY": "sk-bench", "LLM_MODEL": "m", "DATA_DIR": d, "PERSONA_DIR": d,
               "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_ALLOWED_USERS": str(USER),
               "TELEGRAM_API_URL": tg.base_url, "LOG_LEVEL": "warning"}
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        try:
            assert proc.stdin is not None and proc.stdout is not None
            if channel == "stdio":
                proc.stdin.write("hello\n")
                proc.stdin.flush()
                proc.stdout.readline()
            else:
                tg.push_text(USER, "hello")
                tg.wait_sent_sync(USER, 1, timeout=60)
            boot = time.perf_counter() - start
            time.sleep(1.0)
            pids = [p for p in tree(proc.pid) if _sid(p) == _sid(proc.pid)]  # not MCP children
            c0 = cpu_s(pids)
            time.sleep(seconds)
            c1 = cpu_s(pids)
            anon = status_kib(pids, "RssAnon") / 1024
            if show_maps:
                print(breakdown(pids), flush=True)
            return boot, rss_mib(pids), anon, (c1 - c0) * 1000 / seconds
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", type=Path, default=ROOT / "dist" / "gantry")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--breakdown", action="store_true",
                    help="also print where each process's RSS is (/proc/<pid>/smaps)")
    args = ap.parse_args()
    variants = {"source": [sys.executable, "-m", "gantry", "run"]}
    if args.binary.exists():
        variants["binary"] = [str(args.binary), "run"]
    print(f"{'variant':<8} {'channel':<9} {'boot→reply s':>13} {'idle RSS MiB':>13} "
          f"{'idle CPU ms/s':>14}")
    for name, cmd in variants.items():
        for channel in ("stdio", "stdio+mcp", "telegram"):
            boot, rss, _anon, cpu = measure_full(cmd, channel, args.seconds, args.breakdown)
            print(f"{name:<8} {channel:<9} {boot:>13.2f} {rss:>13.1f} {cpu:>14.2f}", flush=True)


if __name__ == "__main__":
    main()
