"""MCP overhead: tools/call through gantry's registry vs a bare SDK session; boot with N servers.

    python bench/mcp_roundtrip.py [--calls 1000] [--blocks 10] [--boots 3] [--binary dist/gantry]
                                  [--http-calls 500] [--era-calls 500] [--log both|info|off]

Logging: gantry writes a `tool call` record (JSON, redacted) for every call at its default
LOG_LEVEL=info, so a row without it flatters gantry. By default (`--log both`) the stdio row
runs twice: first with gantry's logging set up as in production (`gantry.log.setup("info")`,
JSON lines, only written to /dev/null instead of stderr: all the work of building, redacting,
encoding and writing each record is kept), then with no logging set up (root logger at
WARNING: no record is made), to show what the record costs. `--log info` or `--log off` runs
only one of them; the HTTP, era and boot rows run with the first of the chosen settings.

1. The same server binary (the static C fixture, tests/fakes/mcp_static.c: it answers in
   microseconds, so what is measured is the client side), one child per client, called with
   `echo` through a bare `mcp.ClientSession` over the SDK's own `stdio_client` and through
   gantry's `Registry.call` (JSON argument parsing, schema validation, breaker, timeout,
   telemetry, result mapping, our transport). Both run in one event loop, interleaved in
   `--blocks` blocks that alternate which client goes first, so machine noise (2 shared cores)
   hits both alike. Prints p50/p99/mean per call, process CPU per call, and the ratios; the
   spread of the per-block p50 ratios shows how much noise there was.
   The HTTP row does the same over Streamable HTTP: npm server-everything (`streamableHttp`
   mode, a loopback port) called with `echo` through a bare `ClientSession` over the SDK's
   `streamable_http_client` and through gantry's `Registry.call` on a remote server (the
   same SDK transport, plus gantry's HTTP client hooks: session-loss watch, delivery ticket,
   progress deadline). `--http-calls 0` skips it (it needs Node and the npm package).
   The era rows (issue 42) call the Python SDK's own server, which speaks both eras
   (tests/fakes/mcp_fixture.py over stdio, mcp_http_fixture.py over Streamable HTTP), once
   at 2025-11-25 (bare: `initialize()`; gantry: `protocol = "2025"`) and once at 2026-07-28
   (bare: `discover()`, stateless, the `_meta` envelope on every request; gantry: the
   default `protocol = "auto"`). `--era-calls 0` skips them.
2. `gantry run` (stdio, fake model) from spawn to the first reply with 0, 1 and 5 servers in
   the manifest (source, and the binary if present); `--boots 0` skips it.

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
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402

from tests.fakes.mcp_servers import static_fixture, toml_server  # noqa: E402
from tests.fakes.openai import FakeOpenAI  # noqa: E402

WARMUP = 50

Call = Callable[[int], Awaitable[object]]


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


@dataclass
class Variant:
    """One client's samples: wall seconds per call, and process CPU seconds over its blocks."""

    name: str
    call: Call
    samples: list[float] = field(default_factory=list)
    cpu: float = 0.0
    block_p50: list[float] = field(default_factory=list)

    async def block(self, calls: int) -> None:
        out = []
        cpu = time.process_time()
        for i in range(calls):
            t = time.perf_counter()
            await self.call(i)
            out.append(time.perf_counter() - t)
        self.cpu += time.process_time() - cpu
        self.samples += out
        self.block_p50.append(pct(out, 0.5))


async def open_bare(stack: AsyncExitStack, server: str) -> Call:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=server, args=[])
    read, write = await stack.enter_async_context(stdio_client(params))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    await session.list_tools()

    async def call(i: int) -> object:
        return await session.call_tool("echo", {"text": f"call {i}"})

    return call


async def open_gantry(stack: AsyncExitStack, server: str) -> Call:
    from gantry.mcp.host import Host
    from gantry.mcp.manifest import parse
    from gantry.tools import Registry

    registry = Registry()
    host = Host(parse(toml_server("st", [server]), os.environ), registry, os.environ)
    tg = await stack.enter_async_context(anyio.create_task_group())
    stack.callback(tg.cancel_scope.cancel)  # runs before the task group exits
    await host.start(tg)

    async def call(i: int) -> object:
        result = await registry.call("st__echo", f'{{"text": "call {i}"}}')
        assert not result.error, result.text
        return result

    return call


async def open_bare_http(stack: AsyncExitStack, url: str) -> Call:
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    read, write = await stack.enter_async_context(streamable_http_client(url))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    await session.list_tools()

    async def call(i: int) -> object:
        return await session.call_tool("echo", {"message": f"call {i}"})

    return call


async def open_gantry_http(stack: AsyncExitStack, url: str) -> Call:
    from gantry.mcp.host import Host
    from gantry.mcp.manifest import parse
    from gantry.tools import Registry
    from tests.fakes.mcp_remote import toml_remote

    registry = Registry()
    host = Host(parse(toml_remote("ev", url), os.environ), registry, os.environ)
    tg = await stack.enter_async_context(anyio.create_task_group())
    stack.callback(tg.cancel_scope.cancel)
    await host.start(tg)

    async def call(i: int) -> object:
        result = await registry.call("ev__echo", f'{{"message": "call {i}"}}')
        assert not result.error, result.text
        return result

    return call


async def open_bare_era(stack: AsyncExitStack, target: str, era: str) -> Call:
    """A bare SDK session to the SDK fixture at `era`: a URL (HTTP) or "stdio"."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client

    if target == "stdio":
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "tests.fakes.mcp_fixture"], cwd=str(ROOT))
        read, write = await stack.enter_async_context(stdio_client(params))
    else:
        read, write = await stack.enter_async_context(streamable_http_client(target))
    session = await stack.enter_async_context(ClientSession(read, write))
    if era == "2026":
        await session.discover()
    else:
        await session.initialize()
    await session.list_tools()

    async def call(i: int) -> object:
        return await session.call_tool("echo", {"text": f"call {i}"})

    return call


async def open_gantry_era(stack: AsyncExitStack, target: str, era: str) -> Call:
    from gantry.mcp.host import Host
    from gantry.mcp.manifest import parse
    from gantry.tools import Registry
    from tests.fakes.mcp_remote import toml_remote
    from tests.fakes.mcp_servers import python_fixture_toml

    table = python_fixture_toml("fx") if target == "stdio" else toml_remote("fx", target)
    protocol = "auto" if era == "2026" else "2025"
    registry = Registry()
    host = Host(parse(table + f'protocol = "{protocol}"\n', os.environ), registry, os.environ)
    tg = await stack.enter_async_context(anyio.create_task_group())
    stack.callback(tg.cancel_scope.cancel)
    await host.start(tg)
    speaks = host.servers["fx"].protocol
    assert speaks.startswith(era), speaks

    async def call(i: int) -> object:
        result = await registry.call("fx__echo", f'{{"text": "call {i}"}}')
        assert not result.error, result.text
        return result

    return call


async def roundtrip(server: str, calls: int, blocks: int, http: bool = False,
                    era: str = "") -> tuple[Variant, Variant]:
    async with AsyncExitStack() as stack:
        if era:
            bare = Variant("bare SDK ClientSession", await open_bare_era(stack, server, era))
            gantry = Variant("gantry Registry.call", await open_gantry_era(stack, server, era))
        elif http:
            bare = Variant("bare SDK ClientSession", await open_bare_http(stack, server))
            gantry = Variant("gantry Registry.call", await open_gantry_http(stack, server))
        else:
            bare = Variant("bare SDK ClientSession", await open_bare(stack, server))
            gantry = Variant("gantry Registry.call", await open_gantry(stack, server))
        for v in (bare, gantry):
            for i in range(WARMUP):
                await v.call(i)
        per_block = max(1, calls // blocks)
        for b in range(blocks):
            order = (bare, gantry) if b % 2 == 0 else (gantry, bare)
            for v in order:
                await v.block(per_block)
        return bare, gantry


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


def report(bare: Variant, gantry: Variant, blocks: int,
           what: str = "the static fixture over stdio") -> None:
    n = len(bare.samples)
    print(f"tools/call echo on {what}: {n} calls per client, interleaved in "
          f"{blocks} blocks (ms per call)")
    print(f"{'client':<22} {'p50':>8} {'p99':>8} {'mean':>8} {'CPU/call':>9}")
    for v in (bare, gantry):
        print(f"{v.name:<22} {pct(v.samples, 0.5):>8.3f} {pct(v.samples, 0.99):>8.3f} "
              f"{statistics.mean(v.samples) * 1000:>8.3f} {v.cpu / n * 1000:>9.3f}")
    ratios = sorted(g / b for g, b in zip(gantry.block_p50, bare.block_p50, strict=True))
    print(f"ratio gantry/bare: p50 {pct(gantry.samples, 0.5) / pct(bare.samples, 0.5):.2f}x, "
          f"p99 {pct(gantry.samples, 0.99) / pct(bare.samples, 0.99):.2f}x, "
          f"CPU {gantry.cpu / bare.cpu:.2f}x (goal: p50 <= 1.20x)")
    print(f"per-block p50 ratio: min {ratios[0]:.2f}x, median {statistics.median(ratios):.2f}x, "
          f"max {ratios[-1]:.2f}x")


def log_to_devnull(on: bool) -> None:
    """`on`: gantry's own logging at info (its JSON handler on the root logger), written to
    /dev/null; off: no handler of gantry's, root logger at WARNING (the default of a process
    that set up no logging)."""
    import logging

    from gantry import log

    root = logging.getLogger()
    if on:
        log.setup("info", stream=open(os.devnull, "w"))  # noqa: SIM115  # kept open for the run
        return
    for h in list(root.handlers):
        if h.get_name() == "gantry":
            root.removeHandler(h)
    root.setLevel(logging.WARNING)


def era_rows(calls: int, blocks: int) -> None:
    """The SDK fixture in each era, over stdio and over Streamable HTTP."""
    from tests.fakes.mcp_remote import fixture_http

    for era in ("2025", "2026"):
        name = "2025-11-25 handshake" if era == "2025" else "2026-07-28 stateless"
        print()
        report(*anyio.run(roundtrip, "stdio", calls, blocks, False, era), blocks,
               f"the Python SDK server over stdio, MCP {name}")
    with fixture_http() as srv:
        for era in ("2025", "2026"):
            name = "2025-11-25 handshake" if era == "2025" else "2026-07-28 stateless"
            print()
            report(*anyio.run(roundtrip, srv.url, calls, blocks, True, era), blocks,
                   f"the Python SDK server over Streamable HTTP (loopback), MCP {name}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=1000, help="calls per client (all blocks)")
    ap.add_argument("--blocks", type=int, default=10)
    ap.add_argument("--boots", type=int, default=3, help="runs per boot figure; 0 skips them")
    ap.add_argument("--binary", type=Path, default=ROOT / "dist" / "gantry")
    ap.add_argument("--http-calls", type=int, default=500,
                    help="calls per client over Streamable HTTP; 0 skips the HTTP row")
    ap.add_argument("--era-calls", type=int, default=500,
                    help="calls per client in each era row (2025, 2026); 0 skips them")
    ap.add_argument("--log", choices=("both", "info", "off"), default="both",
                    help="gantry's logging for the stdio row: at info (written to /dev/null), "
                         "off, or both (default: info first, then off)")
    args = ap.parse_args()
    server = str(static_fixture())
    blocks = max(1, min(args.blocks, args.calls))

    settings = {"both": (True, False), "info": (True,), "off": (False,)}[args.log]
    for n, on in enumerate(settings):
        log_to_devnull(on)
        if n:
            print()
        report(*anyio.run(roundtrip, server, args.calls, blocks), blocks,
               "the static fixture over stdio, logging "
               + ("at info (gantry's JSON records, to /dev/null)" if on else "off"))
    log_to_devnull(settings[0])
    if args.http_calls > 0:
        from tests.fakes.mcp_remote import everything_http

        print()
        with everything_http("streamableHttp") as srv:
            http_blocks = max(1, min(args.blocks, args.http_calls))
            report(*anyio.run(roundtrip, srv.url, args.http_calls, http_blocks, True),
                   http_blocks, "server-everything over Streamable HTTP (loopback)")
    if args.era_calls > 0:
        era_rows(args.era_calls, max(1, min(args.blocks, args.era_calls)))
    if args.boots <= 0:
        return

    variants = {"source": [sys.executable, "-m", "gantry", "run"]}
    if args.binary.exists():
        variants["binary"] = [str(args.binary), "run"]
    else:
        print(f"\n({args.binary} not found: boot figures for the source tree only)")
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
