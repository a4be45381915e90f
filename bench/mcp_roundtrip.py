"""MCP overhead: tools/call through gantry's registry vs a bare SDK session; boot with N servers.

    python bench/mcp_roundtrip.py [--calls 1000] [--binary dist/gantry]

1. The same server (the static C fixture, tests/fakes/mcp_static.c: it answers in
   microseconds, so what is measured is the client side) called `--calls` times with `echo`:
   once through a bare `mcp.ClientSession` over the SDK's own `stdio_client`, once through
   gantry's `Registry.call` (JSON argument parsing, schema validation, breaker, timeout,
   telemetry, result mapping, our transport). Prints p50/p99 per call and the ratio.
2. `gantry run` (stdio, fake model) from spawn to the first reply with 0, 1 and 5 servers in
   the manifest (source, and the binary if present).

Prints figures; never fails.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402

from tests.fakes.mcp_servers import static_fixture, toml_server  # noqa: E402
from tests.fakes.openai import FakeOpenAI  # noqa: E402


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


CPU: dict[str, float] = {}  # variant → process CPU seconds per call (robust on a busy machine)


async def bare(server: str, calls: int) -> list[float]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    out = []
    params = StdioServerParameters(command=server, args=[])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
        for _ in range(50):
            await session.call_tool("echo", {"text": "warm"})
        cpu = time.process_time()
        for i in range(calls):
            t = time.perf_counter()
            await session.call_tool("echo", {"text": f"call {i}"})
            out.append(time.perf_counter() - t)
        CPU["bare"] = (time.process_time() - cpu) / calls
    return out


async def gantry(server: str, calls: int) -> list[float]:
    from gantry.mcp.host import Host
    from gantry.mcp.manifest import parse
    from gantry.tools import Registry

    registry = Registry()
    host = Host(parse(toml_server("st", [server]), os.environ), registry, os.environ)
    out = []
    async with anyio.create_task_group() as tg:
        await host.start(tg)
        for _ in range(50):
            await registry.call("st__echo", '{"text": "warm"}')
        cpu = time.process_time()
        for i in range(calls):
            t = time.perf_counter()
            await registry.call("st__echo", f'{{"text": "call {i}"}}')
            out.append(time.perf_counter() - t)
        CPU["gantry"] = (time.process_time() - cpu) / calls
        tg.cancel_scope.cancel()
    return out


def boot_to_reply(cmd: list[str], servers: int, server: str) -> float:
    with FakeOpenAI() as llm, tempfile.TemporaryDirectory() as d:
        manifest = Path(d) / "mcp.toml"
        manifest.write_text("".join(toml_server(f"s{i}", [server]) for i in range(servers)))
        env = {"PATH": os.environ["PATH"], "CHANNEL": "stdio", "LLM_BASE_URL": llm.base_url,
               "LLM_API_KEY": "sk-bench", "LLM_MODEL": "m", "DATA_DIR": d, "PERSONA_DIR": d,
               "MCP_MANIFEST": str(manifest), "LOG_LEVEL": "warning"}
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=env, input="hello\n", capture_output=True, text=True,
                              timeout=300)
        first = time.perf_counter() - start
        if not proc.stdout.startswith("echo: hello"):
            print(f"  (run failed: {proc.stderr[-500:]})")
        return first


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--boots", type=int, default=3)
    ap.add_argument("--binary", type=Path, default=ROOT / "dist" / "gantry")
    args = ap.parse_args()
    server = str(static_fixture())

    b = anyio.run(bare, server, args.calls)
    g = anyio.run(gantry, server, args.calls)
    print(f"tools/call echo on the static fixture, {args.calls} calls (ms per call)")
    print(f"{'client':<22} {'p50':>8} {'p99':>8} {'mean':>8} {'CPU/call':>9}")
    for name, key, s in (("bare SDK ClientSession", "bare", b),
                         ("gantry Registry.call", "gantry", g)):
        print(f"{name:<22} {pct(s, 0.5):>8.3f} {pct(s, 0.99):>8.3f} "
              f"{statistics.mean(s) * 1000:>8.3f} {CPU[key] * 1000:>9.3f}")
    print(f"ratio gantry/bare: p50 {pct(g, 0.5) / pct(b, 0.5):.2f}x, "
          f"p99 {pct(g, 0.99) / pct(b, 0.99):.2f}x, CPU {CPU['gantry'] / CPU['bare']:.2f}x")

    variants = {"source": [sys.executable, "-m", "gantry", "run"]}
    if args.binary.exists():
        variants["binary"] = [str(args.binary), "run"]
    print(f"\nboot → first reply, stdio, median of {args.boots} (s)")
    print(f"{'variant':<8} {'0 servers':>10} {'1 server':>10} {'5 servers':>10}")
    for name, cmd in variants.items():
        row = []
        for n in (0, 1, 5):
            row.append(statistics.median(boot_to_reply(cmd, n, server)
                                         for _ in range(args.boots)))
        print(f"{name:<8} {row[0]:>10.2f} {row[1]:>10.2f} {row[2]:>10.2f}")


if __name__ == "__main__":
    main()
