"""Issue 38's budgets in the frozen binary, in the distroless-like rootfs: a daily budget used
up earlier in the day → the next cron fire is skipped and recorded, the owner told once, the
chat answered with the notice and no model request."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.binary.rootfs import INSTALL_PATH, NONROOT_UID, Sandbox
from tests.fakes.openai import FakeOpenAI
from tests.procs import ChildIO
from tests.test_budget_e2e import add_job
from tests.test_cron_e2e import rows

pytestmark = [pytest.mark.binary, pytest.mark.slow]
WAIT = 90.0


def _env(fake: FakeOpenAI, **extra: str) -> dict[str, str]:
    return {"CHANNEL": "stdio", "LLM_BASE_URL": fake.base_url, "LLM_API_KEY": "sk-binary-smoke",
            "LLM_MODEL": "fake-model", "DATA_DIR": "/data", "PERSONA_DIR": "/persona",
            "MCP_MANIFEST": "/etc/gantry/mcp.toml", "CRON_TICK_SECONDS": "1", **extra}


def _start(sandbox: Sandbox, persona_dir: Path, data: Path, env: dict[str, str]) -> ChildIO:
    run = ChildIO(sandbox.popen([INSTALL_PATH, "run"], env=env, data=data,
                                binds={"/persona": persona_dir}))
    run.default_wait = WAIT
    return run


def test_budget_reached_skips_cron_and_answers_with_the_notice(
    sandbox: Sandbox, persona_dir: Path, fake_openai: FakeOpenAI
) -> None:
    data = sandbox.new_data_dir("budget")
    run = _start(sandbox, persona_dir, data, _env(fake_openai))
    try:
        run.send("hi")
        run.expect("echo: hi\n")
    finally:
        run.close_stdin()
        assert run.wait_exit(30) == 0
    db = data / "gantry.db"
    used = int(rows(str(db), "SELECT SUM(prompt_tokens + completion_tokens) FROM usage")[0][0])
    add_job(str(db), "water the plants", time.time())  # due now: fires at the next boot
    for f in data.iterdir():
        os.chown(f, NONROOT_UID, NONROOT_UID)
    sent = len(fake_openai.requests)
    run = _start(sandbox, persona_dir, data, _env(fake_openai, BUDGET_DAILY_TOKENS=str(used)))
    try:
        run.expect("Budget reached: today's budget (BUDGET_DAILY_TOKENS) is used up, ")
        run.expect(" are skipped.\n")
        run.send("are you there?")
        reply = run.expect(" are skipped.\n")
        assert "today's budget (BUDGET_DAILY_TOKENS) is used up" in reply
        assert len(fake_openai.requests) == sent
    finally:
        run.close_stdin()
        assert run.wait_exit(30) == 0
    [(state, error)] = rows(str(db), "SELECT state, error FROM cron_run")
    assert state == "skipped" and str(error).startswith("budget: BUDGET_DAILY_TOKENS reached")
    assert rows(str(db), "SELECT state FROM budget_notice") == [("sent",)]
