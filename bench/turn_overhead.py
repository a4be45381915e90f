"""gantry's own time per turn: turn wall time minus the time spent inside the model call.

Prints figures; never pass/fail. The model is the loopback fake answering instantly, and
every `Provider.complete` call (the reply and, when history folds, the summariser) is
timed and subtracted, so what remains is what gantry itself adds to each turn: loading
and decoding history from SQLite, prompt assembly (collapse + trim), recording the turn,
the fold check, and a JSON log line. Request encoding and response decoding live inside
`Provider.complete` and are therefore counted as model time here.

The stored history is reset to exactly N messages after every turn (outside the timed
region), so each size is measured at that size rather than drifting upward as turns add
messages. Two variants:

  uncapped  caps high enough that nothing is trimmed or folded (tool results older than
            the last few are still collapsed: that is unconditional)
  capped    HISTORY_MAX_MESSAGES=40, HISTORY_MAX_TOKENS=4000 with a summary present: every
            turn trims the prompt and folds history into the summary (the worst case; in
            steady state folds come in batches)

Each variant and size alternates turn by turn between `extras off` (the per-turn time
footer and the small-model repairs — reasoning split, printed-call salvage, call repair —
patched out) and `extras on` (as shipped), so the difference is their cost (issue 27). Three
tools are registered so salvage has offered names to check the reply against. A last table
times those pieces alone (µs per call), including the stream gate over a streamed reply.

Usage: python bench/turn_overhead.py [--turns 200] [--sizes 50,200,1000] [--warmup 10]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any
from unittest import mock
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
import apsw

from gantry import agent as agent_module
from gantry import db
from gantry import log as logsetup
from gantry.agent import Agent
from gantry.channel.base import Inbound
from gantry.model.assemble import Completion
from gantry.model.client import Provider, StreamEvent
from gantry.model.gate import StreamGate
from gantry.model.messages import (
    AssistantMessage,
    FunctionCall,
    Message,
    ToolCall,
    ToolDef,
    ToolMessage,
    UserMessage,
)
from gantry.model.salvage import printed_calls, split_reasoning
from gantry.prompt import time_footer
from gantry.session import SessionStore
from gantry.tools import Registry, Tool, mcp_source
from tests.fakes.openai import FakeOpenAI, Reply

KEY = "sk-bench-0123456789abcdef"
SESSION = "stdio:bench"
PERSONA = ("You are Bench, a helpful assistant for load testing. " * 40).strip()  # ~2 KB
SUMMARY = ("Earlier the user and Bench discussed invoices, travel plans and a recipe. " * 8)


@dataclass(frozen=True)
class Variant:
    name: str
    max_messages: int
    max_tokens: int
    summary: str


VARIANTS = (
    Variant("uncapped", 100_000, 10_000_000, ""),
    Variant("capped", 40, 4_000, SUMMARY),
)


class TimedModel:
    """The real Provider with time spent inside `complete` accumulated, to be subtracted."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.model = provider.model
        self.spent = 0.0

    async def complete(
        self, messages: list[Message], tools: list[ToolDef] | None = None
    ) -> Completion:
        started = time.perf_counter()
        try:
            return await self.provider.complete(messages, tools)
        finally:
            self.spent += time.perf_counter() - started

    def stream(
        self, messages: list[Message], tools: list[ToolDef] | None = None
    ) -> AsyncIterator[StreamEvent]:
        """Unused: the bench passes no ReplyStream, so turns are never streamed."""
        return self.provider.stream(messages, tools)


def history(n: int) -> list[Message]:
    """N messages shaped like a real chat: every fourth turn is a tool round with a big result.

    Plain turns pad the end so the history is exactly N messages of whole turns.
    """
    out: list[Message] = []
    turn = 0
    while len(out) < n:
        user = UserMessage(f"Question {turn}: " + "could you look into this for me please? " * 3)
        if turn % 4 == 3 and len(out) + 4 <= n:
            call = ToolCall(
                id=f"call_{turn}",
                function=FunctionCall("search_notes", f'{{"query": "topic {turn}", "limit": 5}}'),
            )
            out += [
                user,
                AssistantMessage(tool_calls=[call]),
                ToolMessage(call.id, f"result {turn}: " + "lorem ipsum " * 125),
                AssistantMessage(f"Answer {turn}: " + "here is what I found in your notes. " * 10),
            ]
        elif len(out) + 2 <= n:
            out += [user, AssistantMessage(f"Answer {turn}: " + "a considered reply. " * 20)]
        else:
            out.append(AssistantMessage("(padding)"))
        turn += 1
    return out


def restore(conn: apsw.Connection, store: SessionStore, prefill: list[Message], v: Variant) -> None:
    """Put the session back to exactly the prefilled history (and summary), untimed."""
    store.reset(SESSION)
    store.append(SESSION, prefill)
    if v.summary:
        store.fold(SESSION, v.summary, [])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@contextlib.contextmanager
def extras(on: bool) -> Iterator[None]:
    """Issue 27's per-turn work as shipped (on), or patched out (off) for the baseline."""
    if on:
        yield
        return
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(agent_module, "time_footer", lambda *a: ""))
        stack.enter_context(mock.patch.object(agent_module, "split_reasoning",
                                              lambda text: (text, "")))
        stack.enter_context(mock.patch.object(agent_module, "printed_calls", lambda *a: None))
        stack.enter_context(mock.patch.object(Agent, "_repaired", lambda self, call: call))
        yield


async def _tool(args: dict[str, Any]) -> str:
    return "ok"


def registry() -> Registry:
    reg = Registry()
    for name in ("time__get_current_time", "time__convert_time", "notes__search"):
        reg.register(Tool(name, "a tool", {"type": "object"}, _tool,
                          mcp_source(name.split("__")[0])))
    return reg


@dataclass(frozen=True)
class Row:
    variant: str
    extras: str
    size: int
    turns: int
    own_p50: float
    own_p99: float
    own_mean: float
    model_p50: float
    prompt_msgs: int


async def measure(
    fake: FakeOpenAI, variant: Variant, size: int, turns: int, warmup: int, data_dir: Path
) -> list[Row]:
    """Rows for extras off and on: the turns alternate between the two, so drift (other
    load on the machine, a growing heap) falls on both alike."""
    conn = db.connect(data_dir / f"{variant.name}-{size}.db")
    store = SessionStore(conn)
    prefill = history(size)
    provider = Provider(fake.base_url, KEY, "fake-model")
    model = TimedModel(provider)
    agent = Agent(
        model=model,
        sessions=store,
        tools=registry(),
        persona=lambda: PERSONA,
        max_messages=variant.max_messages,
        max_tokens=variant.max_tokens,
        zone=ZoneInfo("Europe/Berlin"),
    )
    own: dict[bool, list[float]] = {False: [], True: []}
    spent: dict[bool, list[float]] = {False: [], True: []}
    prompt_msgs: dict[bool, int] = {}
    try:
        restore(conn, store, prefill, variant)
        gc.collect()
        for i in range(2 * (warmup + turns)):
            on = i % 2 == 1
            msg = Inbound("stdio", "bench", "bench", f"turn {i}: what should I do next?")
            with extras(on):
                before = model.spent
                started = time.perf_counter()
                await agent(msg)
                wall = time.perf_counter() - started
            in_model = model.spent - before
            if i >= 2 * warmup:
                own[on].append(wall - in_model)
                spent[on].append(in_model)
            prompt_msgs[on] = len(fake.requests[0].messages)
            fake.requests.clear()  # the recorded bodies would otherwise pile up
            restore(conn, store, prefill, variant)
    finally:
        await provider.aclose()
        conn.close()
    ms = 1000.0
    return [
        Row(
            variant.name,
            "on" if on else "off",
            size,
            turns,
            pct(own[on], 0.50) * ms,
            pct(own[on], 0.99) * ms,
            statistics.fmean(own[on]) * ms,
            pct(spent[on], 0.50) * ms,
            prompt_msgs[on],
        )
        for on in (False, True)
    ]


def table(rows: list[Row]) -> str:
    head = (
        f"{'variant':<9} {'extras':<6} {'stored':>6} {'turns':>5} {'own p50':>9} {'own p99':>9} "
        f"{'own mean':>9} {'model p50':>10} {'prompt':>6}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.variant:<9} {r.extras:<6} {r.size:>6} {r.turns:>5} {r.own_p50:>7.2f}ms "
            f"{r.own_p99:>7.2f}ms "
            f"{r.own_mean:>7.2f}ms {r.model_p50:>8.2f}ms {r.prompt_msgs:>6}"
        )
    return "\n".join(lines)


def growth(rows: list[Row]) -> str:
    lines = []
    for name in dict.fromkeys(r.variant for r in rows):
        mine = [r for r in rows if r.variant == name and r.extras == "on"]
        base = mine[0]
        steps = ", ".join(
            f"{r.size}: {r.own_p50:.2f} ms (x{r.own_p50 / base.own_p50:.1f})" for r in mine
        )
        lines.append(f"  {name:<9} own p50 by stored size: {steps}")
    for off in (r for r in rows if r.extras == "off"):
        on = next(r for r in rows if r.extras == "on" and (r.variant, r.size) ==
                  (off.variant, off.size))
        lines.append(f"  extras cost, {off.variant} {off.size}: p50 "
                     f"{on.own_p50 - off.own_p50:+.3f} ms, p99 {on.own_p99 - off.own_p99:+.3f} ms")
    return "\n".join(lines)


PROSE = ("Here is what I found in your notes about the trip: the train leaves at 07:40, "
         "and the hotel is booked for two nights. ") * 8
SAMPLES = {
    "prose reply (~1 KB)": PROSE,
    "JSON answer": '{"name": "Tokyo", "timezone": "Asia/Tokyo", "population": 14000000}',
    "bare-JSON call": '{"name": "time__get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}',
    "Hermes call": '<tool_call>\n{"name": "time__get_current_time", "arguments": '
                   '{"timezone": "Asia/Tokyo"}}\n</tool_call>',
    "think + answer": "<think>The user wants the time. The tool said 19:14.</think>It is 19:14.",
}


def micro(repeat: int = 2000) -> str:
    """µs per call of each piece, p50/p99 over `repeat` calls."""
    names = {"time__get_current_time", "time__convert_time", "notes__search"}
    zone = ZoneInfo("Europe/Berlin")
    now = time.time()

    def gate(text: str) -> Callable[[], object]:
        def run() -> object:
            g = StreamGate(names)
            for i in range(0, len(text), 4):
                g.feed(text[i : i + 4])
            return g
        return run

    cases: list[tuple[str, Callable[[], object]]] = [
        ("time_footer", lambda: time_footer(now, zone)),
        ("time_footer (UTC, scheduled)", lambda: time_footer(now, UTC, now - 60)),
    ]
    for label, text in SAMPLES.items():
        cases.append((f"split_reasoning + printed_calls: {label}",
                      lambda t=text: printed_calls(split_reasoning(t)[0], names)))
    cases.append(("StreamGate, prose reply streamed in 4-char deltas", gate(PROSE)))
    cases.append(("StreamGate, Hermes call streamed in 4-char deltas",
                  gate(SAMPLES["Hermes call"])))
    lines = [f"{'piece':<58} {'p50':>8} {'p99':>8}", "-" * 76]
    for label, fn in cases:
        took: list[float] = []
        for _ in range(repeat):
            started = time.perf_counter()
            fn()
            took.append(time.perf_counter() - started)
        lines.append(f"{label:<58} {pct(took, 0.5) * 1e6:>6.1f}µs {pct(took, 0.99) * 1e6:>6.1f}µs")
    return "\n".join(lines)


async def run(sizes: list[int], turns: int, warmup: int) -> list[Row]:
    rows: list[Row] = []
    async with FakeOpenAI(default=Reply("Sure — noted.")) as fake:
        with tempfile.TemporaryDirectory(prefix="gantry-bench-") as d:
            for variant in VARIANTS:
                for size in sizes:
                    rows += await measure(fake, variant, size, turns, warmup, Path(d))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--turns", type=int, default=200, help="timed turns per size")
    parser.add_argument("--sizes", default="50,200,1000", help="stored history sizes")
    parser.add_argument("--warmup", type=int, default=10, help="untimed turns per size first")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    # Production logs one JSON line per turn; include that cost, but not the terminal's.
    with open(os.devnull, "w") as sink:
        logsetup.setup("info", [KEY], stream=sink)
        started = time.perf_counter()
        rows = anyio.run(run, sizes, args.turns, args.warmup)
        took = time.perf_counter() - started
    print(
        f"gantry turn overhead · python {platform.python_version()} · sqlite "
        f"{apsw.sqlite_lib_version()} · {os.cpu_count()} cpu(s) · fake model on loopback"
    )
    print("own = turn wall time minus time inside Provider.complete; prompt = messages sent\n")
    print(table(rows))
    print()
    print(growth(rows))
    print()
    print(micro())
    print(f"\ntotal {took:.1f} s")


if __name__ == "__main__":
    main()
