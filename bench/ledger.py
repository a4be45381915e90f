"""What the usage ledger costs a turn: the same turns with and without it, in one run.

Prints figures; never pass/fail. Two agents on two databases talk to the same loopback fake
model (answering at once): one's Provider has a Meter (a row opened and committed before each
call, its charge settled in the turn's transactions), the other's has none. Turns alternate
between them, so both see the same machine; each variant is a plain turn (one call) and a
tool turn (two calls and a tool round). The difference of the medians is the ledger's cost
per turn (goal: under 0.2 ms p50). A last table times the ledger's own steps alone.

Usage: python bench/ledger.py [--turns 300] [--warmup 20]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio

from gantry import db
from gantry.agent import Agent
from gantry.channel.base import Inbound
from gantry.model.client import Provider
from gantry.model.ledger import Meter, Tab
from gantry.model.spend import spent
from gantry.model.wire import PromptDetails, Usage
from gantry.prices import Price
from gantry.session import SessionStore
from gantry.tools import Registry, Tool, mcp_source
from tests.fakes.openai import Call, Echo, FakeOpenAI, UseTool

PRICES = {"fake-model": Price(0.15, 0.075, 0.6)}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _add(args: dict[str, Any]) -> str:
    return "5"


def agent(base_url: str, path: Path, metered: bool) -> Agent:
    conn = db.connect(path)
    provider = Provider(base_url, "sk-bench", "fake-model",
                        meter=Meter(conn, PRICES) if metered else None)
    reg = Registry()
    reg.register(Tool("calc__add", "add", {"type": "object"}, _add, mcp_source("calc")))
    return Agent(model=provider, sessions=SessionStore(conn), tools=reg,
                 persona=lambda: "You are Bench. " * 50, max_messages=40)


async def turns(fake: FakeOpenAI, tmp: Path, n: int, warmup: int) -> dict[str, list[float]]:
    agents = {"with ledger": agent(fake.base_url, tmp / "on.db", True),
              "without": agent(fake.base_url, tmp / "off.db", False)}
    times: dict[str, list[float]] = {f"{kind} {name}": [] for kind in ("plain", "tool")
                                     for name in agents}
    for i in range(warmup + n):
        for kind in ("plain", "tool"):
            fake.default = UseTool(Call("calc__add", {"a": 2, "b": 3}), "5") if kind == "tool" \
                else Echo()
            for name, a in (agents.items() if i % 2 else reversed(agents.items())):
                text = f"question {i} {kind}"
                started = time.perf_counter()
                await a(Inbound(channel="bench", chat_id=kind, user_id="u", text=text))
                took = time.perf_counter() - started
                if i >= warmup:
                    times[f"{kind} {name}"].append(took)
    on = agents["with ledger"].sessions.conn
    total = spent(on, 0)
    print(f"ledger rows written: {total.calls} calls, {total.tokens} tokens, "
          f"${total.cost:.6f}")
    for a in agents.values():
        await a.model.aclose()  # type: ignore[attr-defined]
    return times


def steps(tmp: Path, n: int) -> dict[str, list[float]]:
    """The ledger's own steps alone, µs each."""
    conn = db.connect(tmp / "steps.db")
    meter = Meter(conn, PRICES)
    usage = Usage(1200, 80, prompt_tokens_details=PromptDetails(1024))
    out: dict[str, list[float]] = {"open (insert + commit)": [], "charge (pure)": [],
                                   "settle (in a transaction)": [], "spent() today": []}
    for _ in range(n):
        t0 = time.perf_counter()
        row = meter.open("fake-model", "http://127.0.0.1/v1", 5000)
        t1 = time.perf_counter()
        charge = meter.charge(row, "fake-model", usage, 5000, 320, "chatcmpl-x")
        t2 = time.perf_counter()
        tab = Tab(conn)
        tab.add(charge)
        with conn:
            tab.settle()
        t3 = time.perf_counter()
        spent(conn, time.time() - 86400)
        t4 = time.perf_counter()
        for key, d in zip(out, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            out[key].append(d * 1e6)
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    print(f"python {platform.python_version()} · {platform.machine()} · "
          f"{args.turns} turns per variant after {args.warmup} warm-up")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        async with FakeOpenAI() as fake:
            times = await turns(fake, tmp, args.turns, args.warmup)
        print(f"\n{'turn':<22} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
        for key, values in times.items():
            ms = [v * 1000 for v in values]
            print(f"{key:<22} {statistics.median(ms):>8.3f} {pct(ms, 0.99):>8.3f} "
                  f"{statistics.fmean(ms):>8.3f}")
        for kind in ("plain", "tool"):
            on = [v * 1000 for v in times[f"{kind} with ledger"]]
            off = [v * 1000 for v in times[f"{kind} without"]]
            p50 = statistics.median(on) - statistics.median(off)
            print(f"ledger cost, {kind} turn: p50 {p50:+.3f} ms, "
                  f"p99 {pct(on, 0.99) - pct(off, 0.99):+.3f} ms")
        print(f"\n{'ledger step':<28} {'p50 µs':>8} {'p99 µs':>8}")
        for key, values in steps(tmp, 2000).items():
            print(f"{key:<28} {statistics.median(values):>8.1f} {pct(values, 0.99):>8.1f}")


if __name__ == "__main__":
    anyio.run(main)
