"""A long mixed conversation with a running `gantry run` on Telegram, over the fakes: what
bench/soak.py (10,000 turns, a table) and tests/binary/test_binary_soak.py (1,000 turns, a
guard on fds and threads) both drive.

One chat sends turns one at a time, in a fixed shuffled mix (MIX): text; tool rounds through
a stdio MCP server and a remote one; memory_store and memory_recall; photos; documents (text,
read; binary, kept in DATA_DIR/media); a slow reply stopped with /stop and a follow-up; cron
jobs a minute ahead, whose pushes arrive in between. The fake model (`route`) answers at once
as each turn's tag says; a turn has ended when its reply's final text, which ends with
`done-<n>`, reaches the fake Bot API (`on_text`), so no one polls.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import statistics
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.fakes.mcp_servers import live_children
from tests.fakes.media_samples import jpeg
from tests.fakes.openai import Call, FakeOpenAI, RecordedRequest, Reply, Route, Script, ToolCalls
from tests.fakes.telegram import FakeTelegram

TOKEN = "123456789:AAE_soak-token-for-loopback-only"
USER = 4242
TAG = re.compile(r"\[soak (\w+) (\d+)\]")
DONE = re.compile(r"done-(\d+)")
FIRED = re.compile(r"fired-(\d+)")
TURN_WAIT = 60.0
BOOT_WAIT = 300.0  # a loaded machine, a cold onefile unpack
SLOW = 30.0  # the stopped turn's model delay: it never answers before the /stop
FORGET_EVERY = 100  # turns between clearing the fakes' records (they would grow, not gantry)

# One hundred turns, shuffled once: the kinds and how many of each per hundred.
MIX = {"text": 55, "time": 10, "remote": 8, "sum": 2, "image": 2, "store": 5, "recall": 5,
       "photo": 4, "doc": 3, "blob": 2, "stop": 2, "cron": 2}


def kinds(seed: int = 0) -> list[str]:
    order = [k for k, count in MIX.items() for _ in range(count)]
    random.Random(seed).shuffle(order)
    return order


@dataclass(frozen=True)
class Model:
    """The fake model's part: `stdio` is the call a "time" turn makes (the stdio server's
    tool); the remote server is named `every` (npm server-everything)."""

    stdio: Call = field(default_factory=lambda: Call("time__get_current_time",
                                                     {"timezone": "UTC"}))

    def tool_call(self, kind: str, n: int) -> Call | None:
        """The call a turn of `kind` makes (None: a plain reply)."""
        calls = {
            "time": lambda: self.stdio,
            "remote": lambda: Call("every__echo", {"message": f"soak {n}"}),
            "sum": lambda: Call("every__get-sum", {"a": n, "b": 1}),
            "image": lambda: Call("every__get-tiny-image", {}),
            "store": lambda: Call("memory_store", {
                "kind": "fact", "subject": f"item{n}", "content": f"soak fact {n}: tea {n % 7}"}),
            "recall": lambda: Call("memory_recall", {"query": f"item{max(0, n - 40)} tea"}),
            "cron": lambda: Call("cron_schedule", {"when": "in 1 minute",
                                                   "prompt": f"[soak fire {n}] say pong"}),
        }
        make = calls.get(kind)
        return make() if make else None

    def route(self, req: RecordedRequest) -> Script:
        """A turn's tag says what to do; requests without tools (history summaries, memory
        consolidation) get a short reply."""
        body = req.body if isinstance(req.body, dict) else {}
        found = TAG.search(req.last_user_text)
        if found is None or not body.get("tools"):
            return Reply("summary: a soak conversation")
        kind, n = found.group(1), int(found.group(2))
        if kind == "fire":
            return Reply(f"pong fired-{n}")
        if kind == "stop":
            return Reply(f"too late done-{n}", delay=SLOW)
        call = self.tool_call(kind, n)
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


@dataclass
class Fakes:
    llm: FakeOpenAI
    tg: FakeTelegram
    watch: Watch

    def env(self) -> dict[str, str]:
        """The settings that point gantry at the fakes (paths are the caller's)."""
        return {"CHANNEL": "telegram", "LLM_BASE_URL": self.llm.base_url,
                "LLM_API_KEY": "sk-soak", "LLM_MODEL": "m", "TELEGRAM_BOT_TOKEN": TOKEN,
                "TELEGRAM_ALLOWED_USERS": str(USER), "TELEGRAM_API_URL": self.tg.base_url,
                "LOG_LEVEL": "info", "CRON_TICK_SECONDS": "1",
                "MEDIA_MAX_TOTAL_BYTES": "200000"}


@contextmanager
def fakes(model: Model | None = None) -> Iterator[Fakes]:
    watch = Watch()
    with FakeOpenAI(default=Route((model or Model()).route)) as llm, \
            FakeTelegram(token=TOKEN) as tg:
        tg.on_text = watch.saw
        yield Fakes(llm, tg, watch)


@dataclass
class Soak:
    """One gantry process (`proc`: its bootstrap) driven turn by turn."""

    proc: subprocess.Popen[bytes]
    fakes: Fakes
    data: Path  # DATA_DIR as this side sees it
    log: Callable[[], str]

    def turn(self, n: int, kind: str, wait: float = TURN_WAIT) -> float | None:
        """Send turn n; its latency in seconds (None for a stopped turn)."""
        tg = self.fakes.tg
        tag = f"[soak {kind} {n}]"
        t0 = time.perf_counter()
        if kind == "photo":
            tg.push_photo(USER, jpeg(8_000, seed=n), caption=f"{tag} what is this?")
        elif kind == "doc":
            tg.push_document(USER, f"notes {n}\n".encode() * 50, f"notes-{n}.txt",
                             "text/plain", caption=f"{tag} read this")
        elif kind == "blob":
            tg.push_document(USER, os.urandom(6_000), f"data-{n}.bin",
                             "application/octet-stream", caption=f"{tag} keep this")
        elif kind == "stop":
            tg.push_text(USER, f"{tag} take your time")
            self._wait_model(tag)
            tg.push_text(USER, "/stop")
            self.turn(n + 1_000_000, "text")  # the follow-up: answered, not the slow one
            return None
        else:
            tg.push_text(USER, f"{tag} hello number {n}")
        return self.fakes.watch.wait(n, wait) - t0

    def _wait_model(self, tag: str, timeout: float = TURN_WAIT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(tag in r.last_user_text for r in list(self.fakes.llm.requests)[-3:]):
                return
            time.sleep(0.01)
        raise RuntimeError(f"the model never saw {tag}")

    def alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"gantry exited with {self.proc.returncode}: {self.log()[-3000:]}")

    def floor(self, calls: int = 10) -> list[float]:
        """Round trips of a bare getMe to the fake Bot API from here: the machine's and the
        fakes' own speed at this moment, the floor a turn's latency is read against."""
        out = []
        for _ in range(calls):
            t0 = time.perf_counter()
            with urllib.request.urlopen(f"{self.fakes.tg.base_url}/bot{TOKEN}/getMe",
                                        timeout=30) as r:
                r.read()
            out.append(time.perf_counter() - t0)
        return out

    def drive(self, turns: int, every: int,
              row: Callable[[int, list[float], list[float]], None]) -> None:
        """Boot, then `turns` turns; every `every` turns `row(turn, latencies, floors)` with
        that block's turn latencies and floor round trips (seconds)."""
        order = kinds()
        self.turn(0, "text", wait=BOOT_WAIT)
        lat: list[float] = []
        floor: list[float] = []
        for n in range(1, turns + 1):
            self.alive()
            took = self.turn(n, order[n % len(order)])
            if took is not None:
                lat.append(took)
            if n % FORGET_EVERY == 0:
                floor += self.floor()
                self.fakes.tg.forget()
                self.fakes.llm.forget()
            if n % every == 0:
                row(n, lat, floor)
                lat, floor = [], []


def own_pids(pid: int) -> list[int]:
    """gantry's processes (the onefile bootstrap and its app), not its MCP children, which
    run in their own sessions."""
    def sid(p: int) -> int:
        try:
            return int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[3])
        except (OSError, IndexError, ValueError):
            return -1

    out, todo = [], [pid]
    while todo:
        one = todo.pop()
        out.append(one)
        todo += live_children(one)
    return [p for p in out if sid(p) == sid(pid)]


def count_fds(pids: list[int]) -> int:
    return _entries(pids, "fd")


def count_threads(pids: list[int]) -> int:
    return _entries(pids, "task")


def _entries(pids: list[int], folder: str) -> int:
    """Entries of /proc/<pid>/<folder> summed over `pids` (gone processes count 0)."""
    total = 0
    for p in pids:
        with contextlib.suppress(OSError):
            total += len(os.listdir(f"/proc/{p}/{folder}"))
    return total


def p50_p99(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values) or [0.0]
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
