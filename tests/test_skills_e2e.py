"""Skills in a real `gantry run` (stdio channel) against the fake model: the persona of
tests/skills_persona.py loaded with its broken skill warned about, `/skills` and `/<skill>`
through the REPL, `skill_read` confined, SIGHUP picking up a new skill, `gantry skills list`
and `gantry check` as the operator runs them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import skills_persona as sp
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.test_stdio_e2e import KEY, MODEL, ROOT, WAIT, Gantry, fake, spawn

pytestmark = pytest.mark.slow
__all__ = ["fake", "spawn"]  # fixtures used by name below


def _loads(g: Gantry) -> int:
    return sum(r.get("message") == "skills loaded" for r in g.logs())


def test_skills_in_a_running_gantry(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, tmp_path: Path
) -> None:
    sp.write(tmp_path / "persona", outside=tmp_path)  # spawn's persona folder
    g = spawn()
    shown = g.ask("/skills", "(1 could not be loaded: `gantry check` says why)")
    assert "/expense_report — File an expense report" in shown
    assert "/world_clock — Tell the time in any city of the world." in shown
    warned = g.wait_log("skill not loaded")
    assert warned["skill"] == "broken-one" and "description" in warned["error"]
    assert fake.requests == []  # /skills is answered without the model

    fake.push(Reply("It is noon in Tokyo."))
    g.ask("/world_clock and in Tokyo?", "It is noon in Tokyo.")
    request = fake.last_request
    assert sp.CLOCK_BODY in request.last_user_text
    assert request.last_user_text.endswith("and in Tokyo?")
    system = request.messages[0]["content"]
    assert "- world-clock: Tell the time in any city of the world." in system
    assert sp.CLOCK_BODY not in system and sp.EXPENSE_BODY not in system

    fake.push(ToolCalls([Call("skill_read", {"name": "expense-report", "file": "escape.md"})]),
              ToolCalls([Call("skill_read", {"name": "expense-report"})]), Reply("Filed."))
    g.ask("file my taxi receipt", "Filed.")
    escaped, body = [m["content"] for m in fake.last_request.messages if m["role"] == "tool"]
    assert "points outside the skill's folder" in escaped and sp.SECRET not in escaped
    assert sp.EXPENSE_BODY in body

    new = g.persona_dir / "skills" / "plan-week"
    new.mkdir()
    (new / "SKILL.md").write_text("---\nname: plan-week\ndescription: Plan the user's week."
                                  "\n---\nAsk for the week's fixed points first.\n",
                                  encoding="utf-8")
    os.kill(g.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + WAIT
    while _loads(g) < 2:
        assert time.monotonic() < deadline, "skills were not reloaded on SIGHUP"
        time.sleep(0.05)
    assert "/plan_week — Plan the user's week." in g.ask(
        "/skills", "(1 could not be loaded: `gantry check` says why)")
    g.ask("hello", "echo: hello")
    assert "- plan-week: Plan the user's week." in fake.last_request.messages[0]["content"]
    assert g.proc.poll() is None
    g.assert_clean()


def test_gantry_skills_list_and_check_as_the_operator_runs_them(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    persona = tmp_path / "persona"
    sp.write(persona, outside=tmp_path)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
           "CHANNEL": "stdio", "LLM_BASE_URL": fake.base_url, "LLM_API_KEY": KEY,
           "LLM_MODEL": MODEL, "DATA_DIR": str(tmp_path / "data"), "PERSONA_DIR": str(persona)}
    listed = subprocess.run([sys.executable, "-m", "gantry", "skills", "list"], env=env,
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("Skills: ")
    assert "- world-clock: Tell the time in any city of the world.\n" in listed.stdout
    assert sp.CLOCK_BODY not in listed.stdout
    assert "not loaded: broken-one:" in listed.stderr and "Traceback" not in listed.stderr
    (tmp_path / "data").mkdir()
    checked = subprocess.run([sys.executable, "-m", "gantry", "check"], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 1, checked.stdout
    [line] = [ln for ln in checked.stdout.splitlines() if "skill broken-one" in ln]
    assert "FAIL" in line and "`description` is missing or empty" in line
    assert "Traceback" not in checked.stdout + checked.stderr
