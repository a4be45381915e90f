"""What a quiet watch costs gantry per tick: CPU time of this process (the MCP server is a
child process, not counted), no model anywhere.

Prints figures; never pass/fail. For 1, 10 and 50 watches polling the feed fixture's `items`
tool (tests/fakes/mcp_feed.py, 20 items, nothing new), one real MCP host:

  due tick    every watch due: the due query, one tools/call each, JSON parse, diff against
              the cursor, one SQLite write each — what a poll round costs
  idle tick   nothing due: the ticker's due + nap-planning queries between polls

Usage: python bench/watch_tick.py [--watches 1,10,50] [--ticks 20]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gantry import db  # noqa: E402
from gantry.config import Config  # noqa: E402
from gantry.cron.store import CronStore  # noqa: E402
from gantry.cron.ticker import Ticker  # noqa: E402
from gantry.mcp.host import Host  # noqa: E402
from gantry.mcp.manifest import parse  # noqa: E402
from gantry.tools import CALLER, Registry  # noqa: E402
from gantry.watch import setup  # noqa: E402
from tests.fakes.mcp_servers import toml_server  # noqa: E402

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "LANG": "C.UTF-8"}
INTERVAL = 60.0


class Clock:
    def __init__(self) -> None:
        self.t = 1_772_712_000.0

    def now(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(0)


class NoModel:
    """Channel and agent: a turn here would be a model call, which a quiet tick never makes."""

    name = "bench"
    turns = 0

    async def respond(self, msg: Any, stream: Any) -> str:
        self.turns += 1
        return "[silent]"

    async def push(self, *args: Any, **kw: Any) -> None:
        raise AssertionError("a quiet watch pushed something")


async def measure(tmp: Path, n: int, ticks: int) -> dict[str, float]:
    feed = tmp / f"feed-{n}.jsonl"
    feed.write_text("".join(json.dumps({"id": f"i{k}", "title": f"item {k}", "body": "x" * 80})
                            + "\n" for k in range(20)))
    manifest = toml_server("fx", [sys.executable, "-m", "tests.fakes.mcp_feed"],
                           env={"FEED_FILE": str(feed)}, cwd=str(ROOT))
    conn = db.connect(tmp / f"bench-{n}.db")
    registry = Registry()
    host = Host(parse(manifest, ENV), registry, ENV)
    model, clock = NoModel(), Clock()
    ticker = Ticker(CronStore(conn), model.respond, model.push, "bench", 15, clock)
    cfg = Config(llm_base_url="http://127.0.0.1:1", llm_api_key="k", llm_model="m",
                 channel="stdio", watch_max=n)
    watches = setup(cfg, conn, registry, host, ticker, lambda chat: True)
    runner = watches.runner
    out: dict[str, float] = {}
    try:
        async with anyio.create_task_group() as tg:
            await host.start(tg)
            ticker._tg = tg
            runner.resume(tg)
            token = CALLER.set("bench:1")
            for _ in range(n):
                await registry.get("watch_add").call(  # type: ignore[union-attr]
                    {"tool": "fx__items", "instruction": "x", "interval_seconds": INTERVAL})
            CALLER.reset(token)

            async def round_() -> None:
                runner.tick(clock.now(), tg)
                while runner.polling:
                    await anyio.sleep(0.001)

            await round_()  # the seed polls
            cpu, wall = [], []
            for _ in range(ticks):
                clock.t += INTERVAL
                c0, w0 = time.process_time(), time.perf_counter()
                await round_()
                cpu.append(time.process_time() - c0)
                wall.append(time.perf_counter() - w0)
            idle = []
            for _ in range(200):
                c0 = time.process_time()
                runner.tick(clock.now(), tg)
                runner.earliest()
                idle.append(time.process_time() - c0)
            assert model.turns == 0
            polls = int(next(iter(conn.execute("SELECT sum(polls) FROM watch")))[0])
            assert polls == n * (ticks + 1), polls
            out = {"cpu_ms": statistics.median(cpu) * 1e3, "wall_ms": statistics.median(wall) * 1e3,
                   "idle_us": statistics.median(idle) * 1e6}
            tg.cancel_scope.cancel()
    finally:
        conn.close()
    return out


async def amain(sizes: list[int], ticks: int) -> None:
    print(f"python {platform.python_version()} on {platform.machine()}, {sys.platform}; "
          f"feed of 20 items, nothing new; {ticks} due ticks per row (medians); model calls: 0")
    print(f"{'watches':>7}  {'due tick CPU':>13}  {'per watch':>10}  {'due tick wall':>14}  "
          f"{'idle tick CPU':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            r = await measure(Path(tmp), n, ticks)
            print(f"{n:>7}  {r['cpu_ms']:>10.2f} ms  {r['cpu_ms'] * 1e3 / n:>7.0f} µs  "
                  f"{r['wall_ms']:>11.2f} ms  {r['idle_us']:>11.1f} µs")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--watches", default="1,10,50")
    ap.add_argument("--ticks", type=int, default=20)
    args = ap.parse_args()
    anyio.run(amain, [int(x) for x in args.watches.split(",")], args.ticks)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
