"""The usage ledger end to end: `gantry run` (stdio) against the fake model, then `gantry
usage --json` read while it runs. Chat turns with tools, a cron job and a watch wake add up
to exactly what the fake reported, per source; under a kill -9 storm every reply the fake
sent is counted once (as reported, or as lost with an estimate) and none twice.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.openai import Call, FakeOpenAI, RecordedRequest, Reply, ToolCalls
from tests.test_cron_e2e import schedule_script, soon
from tests.test_stdio_e2e import MODEL, ROOT, Gantry, fake, spawn
from tests.test_watch_e2e import BOOT, FAST, add_script, rows, setup_feed, wait

pytestmark = pytest.mark.slow
__all__ = ["fake", "spawn"]

PRICES = f"{MODEL}=2/0.5/8; other-model=1/1/1"
KEYS = ("prompt_tokens", "completion_tokens", "cached_tokens")


def usage(g: Gantry, *args: str) -> dict[str, Any]:
    r = subprocess.run([sys.executable, "-m", "gantry", "usage", "--json", *args], env=g.env,
                       cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def source_of(request: RecordedRequest) -> str:
    text = request.last_user_text
    if text.startswith("[scheduled job #"):
        return "cron:" + text.split("#", 1)[1].split(",", 1)[0]
    if text.startswith("[watch #"):
        return "watch:" + text.split("#", 1)[1].split(",", 1)[0]
    return "chat"


def expected(fake: FakeOpenAI, reply_ids: set[str] | None = None) -> dict[str, dict[str, int]]:
    """What the fake reported, per source (only `reply_ids`' replies, when given)."""
    reported = dict(fake.reported)
    out: dict[str, dict[str, int]] = {}
    for request in fake.requests:
        if request.reply_id not in reported or (
                reply_ids is not None and request.reply_id not in reply_ids):
            continue
        sums = out.setdefault(source_of(request), dict.fromkeys(("calls", *KEYS), 0))
        sums["calls"] += 1
        for key in KEYS:
            sums[key] += int(reported[request.reply_id].get(key, 0) if key != "cached_tokens"
                             else reported[request.reply_id].get("prompt_tokens_details", {})
                             .get("cached_tokens", 0))
    return out


def test_usage_is_what_the_model_reported_per_source(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, tmp_path: Path
) -> None:
    feed, manifest = setup_feed(tmp_path)
    fake.cached_tokens = 40
    g = spawn(MCP_MANIFEST=manifest, LLM_PRICES=PRICES, **FAST)
    fake.push(*add_script())
    g.ask("tell me when a new alert posts", "Watching.", timeout=BOOT)
    g.wait_log("watch seeded", timeout=30)
    fake.push(*schedule_script(soon(3), "Tell the user the kettle is done."),
              Reply("The kettle is done!"))
    g.ask("remind me about the kettle in 3 seconds", "Scheduled.")
    g.expect("The kettle is done!\n", timeout=30)
    fake.push(Reply("New alert: flood warning (a2)."))
    with open(feed, "a") as fh:
        fh.write(json.dumps({"id": "a2", "title": "flood warning"}) + "\n")
    g.expect("New alert: flood warning (a2).\n", timeout=30)
    g.ask("thanks", "echo: thanks")
    assert len(fake.requests) == len(fake.reported) == 7

    data = usage(g, "--by", "source")  # read-only, beside the running gantry
    want = expected(fake)
    assert set(want) == {"chat", "cron:1", "watch:1"} and want["chat"]["calls"] == 5
    got = {b["key"]: {k: b[k] for k in ("calls", *KEYS)} for b in data["breakdown"]}
    assert got == want
    total = data["total"]
    for key in ("calls", *KEYS):
        assert total[key] == sum(s[key] for s in want.values()), key
    assert total["estimated"] == total["lost"] == total["failed"] == 0
    assert total["cost"] == pytest.approx(sum(
        ((s["prompt_tokens"] - s["cached_tokens"]) * 2 + s["cached_tokens"] * 0.5
         + s["completion_tokens"] * 8) / 1e6 for s in want.values()), abs=1e-6)
    assert total["cache_hit_rate"] == pytest.approx(
        total["cached_tokens"] / total["prompt_tokens"], abs=1e-4)
    days = usage(g, "--by", "day")["breakdown"]
    assert sum(b["calls"] for b in days) == 7 and len(days) <= 2  # 2: a run across midnight
    by_chat = usage(g, "--by", "chat")["breakdown"]
    assert [(b["key"], b["calls"]) for b in by_chat] == [("stdio:local", 7)]
    g.send("/status")
    assert "usage today: 7 calls" in g.expect("cache hit ")
    g.send("/usage")
    shown = g.expect("watch:1")
    assert "(by source)\ntotal: 7 calls" in shown
    assert g.stop() == 0


def test_kill_9_storm_counts_every_reply_once(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, tmp_path: Path
) -> None:
    rng = random.Random(38)
    db = tmp_path / "data" / "gantry.db"
    kills = 0
    env = {"STREAM_REPLIES": "true", "MEMORY_ENABLED": "false"}
    for round_ in range(6):
        g = spawn(**env)
        g.wait_log("receiving", timeout=BOOT)
        fake.push(ToolCalls([Call("cron_list", {}, id=f"l{round_}")], delay=rng.random()),
                  Reply(f"answer {round_} " * 20, chunk_size=5, chunk_delay=0.02),
                  Reply(f"plain {round_}", delay=rng.random()))
        g.send(f"question {round_}")
        g.send(f"second {round_}")
        seen = len(fake.requests)
        wait(lambda s=seen: len(fake.requests) > s, 30, "the turn to reach the model")
        time.sleep(rng.uniform(0.0, 1.5))
        g.stop(signal.SIGKILL)
        kills += 1
        with fake._lock:
            fake._queue.clear()  # what the cut turns did not consume
    g = spawn(**env)
    g.ask("last one", "echo: last one", timeout=BOOT)
    assert g.stop() == 0

    states = rows(db, "SELECT state, reply_id, prompt_tokens, completion_tokens, estimated "
                      "FROM usage ORDER BY id")
    assert all(s in ("done", "lost", "failed") for s, *_ in states), states
    reported = dict(fake.reported)
    done = [r for r in states if r[0] == "done"]
    done_ids = [r[1] for r in done]
    assert len(set(done_ids)) == len(done_ids)  # no reply counted twice
    for _, reply_id, prompt, completion, estimated in done:
        assert reply_id in reported and estimated == 0
        assert (prompt, completion) == (reported[reply_id]["prompt_tokens"],
                                        reported[reply_id]["completion_tokens"])
    answered_not_done = set(reported) - set(done_ids)
    lost = sum(r[0] == "lost" for r in states)
    failed = sum(r[0] == "failed" for r in states)
    assert len(answered_not_done) <= lost + failed  # each cut reply is still a billed call
    assert len(fake.requests) <= len(states) <= len(fake.requests) + kills
    assert lost >= 1  # the storm did cut calls between the reply and its transaction
    total = usage(g)["total"]
    assert total["calls"] == len(states) and total["lost"] == lost
    assert total["prompt_tokens"] == sum(r[2] for r in states)
    assert total["completion_tokens"] == sum(r[3] for r in states)
    want = expected(fake, set(done_ids))
    assert sum(s["prompt_tokens"] for s in want.values()) == sum(r[2] for r in done)
