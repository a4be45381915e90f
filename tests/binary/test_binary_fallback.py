"""Fallback models inside the frozen binary in the distroless-like rootfs (issue 38).

The primary is a dead loopback port: the fallback answers, the primary cools down (the log
says it failed once, not per turn), `/status` says who answered; a primary whose stream is
cut mid-reply (STREAM_REPLIES=true) is resumed on the fallback, the REPL marking the restart;
`gantry check` probes each endpoint on its own line, keys never shown.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.binary.rootfs import INSTALL_PATH, Sandbox
from tests.binary.test_binary import KEY, _run_env, binds, etc_gantry, start
from tests.fakes.openai import CutStream, FakeOpenAI, Reply, dead_base_url

pytestmark = [pytest.mark.binary, pytest.mark.slow]
__all__ = ["binds", "etc_gantry", "start"]  # fixtures used by name

RESTART_MARK = "[the reply above was cut off; here it is again, in full]"  # stdio/output.py
FB_KEY = "sk-binary-fallback-key-0123"


@pytest.fixture
def backup() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(api_key=FB_KEY, model="fb-model")
    server.start_in_thread()
    try:
        yield server
    finally:
        server.stop()


def _fallback_env(primary_url: str, backup: FakeOpenAI, **extra: str) -> dict[str, str]:
    return _run_env(primary_url, LLM_FALLBACK_1_MODEL="fb-model",
                    LLM_FALLBACK_1_BASE_URL=backup.base_url, LLM_FALLBACK_1_API_KEY=FB_KEY,
                    **extra)


def test_dead_primary_answered_by_the_fallback_in_the_frozen_binary(
    sandbox: Sandbox, start: Any, backup: FakeOpenAI
) -> None:
    data = sandbox.new_data_dir("data-fallback")
    run = start(_fallback_env(dead_base_url(), backup), data=data)
    run.send("one")
    run.expect("echo: one\n")
    run.send("two")
    run.expect("echo: two\n")
    run.send("/status")
    run.expect("model: fake-model (last answer: fb-model, primary cooling down")
    assert run.stop(signal.SIGTERM) == 0, run.stderr[-3000:]
    records = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    failed = [r for r in records if r.get("message") == "model endpoint failed; trying the next"]
    assert len(failed) == 1 and failed[0]["endpoint"] == "primary"
    assert [r.body["model"] for r in backup.requests] == ["fb-model", "fb-model"]
    assert "Traceback" not in run.stderr and FB_KEY not in run.stderr + run.stdout


def test_a_cut_stream_restarts_on_the_fallback_in_the_frozen_binary(
    sandbox: Sandbox, start: Any, fake_openai: Any, backup: FakeOpenAI
) -> None:
    data = sandbox.new_data_dir("data-fallback-stream")
    fake_openai.push(CutStream("PRIMARY TEXT THAT BREAKS", after_chunks=3))
    backup.push(Reply("the fallback's whole reply"))
    run = start(_fallback_env(fake_openai.base_url, backup, STREAM_REPLIES="true"), data=data)
    run.send("hi")
    shown = run.expect("the fallback's whole reply\n")
    assert f"PRIMARY TEXT\n{RESTART_MARK}\n" in shown
    assert run.stop(signal.SIGTERM) == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr


def test_check_probes_each_fallback_in_the_frozen_binary(
    sandbox: Sandbox, binds: dict[str, Path], fake_openai: Any, backup: FakeOpenAI
) -> None:
    data = sandbox.new_data_dir("data-fallback-check")
    result = sandbox.run([INSTALL_PATH, "check"], env=_fallback_env(fake_openai.base_url, backup),
                         data=data, binds=binds, timeout=120)
    out = result.stdout + result.stderr
    lines = {line[5:].split("  ", 1)[0]: line for line in result.stdout.splitlines()}
    assert lines["model"].startswith("ok") and lines["model fallback 1"].startswith("ok"), out
    assert KEY not in out and FB_KEY not in out
