"""Skills inside the frozen binary (distroless-like rootfs): the three-skill persona of
tests/skills_persona.py mounted read-only at /persona; the front matter read without PyYAML,
`/skills` and `/<skill>` through the stdio REPL, `skill_read` confined to its folder, and
`gantry skills list` / `gantry check` as an operator runs them (no shell in the image)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests import skills_persona as sp
from tests.binary.rootfs import INSTALL_PATH, Sandbox
from tests.binary.test_binary import STOP_WAIT, _run_env, binds, etc_gantry, start

pytestmark = [pytest.mark.binary, pytest.mark.slow]
__all__ = ["binds", "etc_gantry", "start"]  # fixtures used by name below


@pytest.fixture
def skills_persona(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The persona with its skills, readable by the sandbox's non-root user."""
    root = tmp_path_factory.mktemp("skills-persona")
    persona = root / "persona"
    sp.write(persona, outside=root)
    for top, _dirs, files in os.walk(root):
        os.chmod(top, 0o755)
        for name in files:
            path = Path(top) / name
            if not path.is_symlink():
                path.chmod(0o644)
    return persona


def test_skills_in_the_frozen_binary(
    sandbox: Sandbox, start: Any, fake_openai: Any, skills_persona: Path,
    binds: dict[str, Path],
) -> None:
    from tests.fakes.openai import Call, Reply, ToolCalls

    data = sandbox.new_data_dir("data-skills")
    env = _run_env(fake_openai.base_url)
    run = start(env, data=data, extra_binds={"/persona": skills_persona})
    run.send("/skills")
    run.expect("/world_clock — Tell the time in any city of the world.\n")
    run.expect("(1 could not be loaded: `gantry check` says why)\n")
    assert "skill not loaded" in run.stderr and "broken-one" in run.stderr

    fake_openai.push(Reply("It is noon in Tokyo."))
    run.send("/world_clock and in Tokyo?")
    run.expect("It is noon in Tokyo.\n")
    request = fake_openai.last_request
    assert sp.CLOCK_BODY in request.last_user_text
    system = request.messages[0]["content"]
    assert "- world-clock: Tell the time in any city of the world." in system
    assert sp.CLOCK_BODY not in system

    fake_openai.push(
        ToolCalls([Call("skill_read", {"name": "expense-report", "file": "escape.md"})]),
        ToolCalls([Call("skill_read", {"name": "expense-report",
                                        "file": "references/policy.md"})]),
        Reply("Filed."))
    run.send("file my taxi receipt")
    run.expect("Filed.\n")
    escaped, policy = [m["content"] for m in fake_openai.last_request.messages
                       if m["role"] == "tool"]
    assert "points outside the skill's folder" in escaped and sp.SECRET not in escaped
    assert policy.strip() == sp.POLICY
    run.close_stdin()
    assert run.wait(STOP_WAIT) == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr

    binds_ = {**binds, "/persona": skills_persona}
    listed = sandbox.run([INSTALL_PATH, "skills", "list"], env=env, binds=binds_, data=data)
    assert listed.returncode == 0, listed.stderr
    assert "- world-clock: Tell the time in any city of the world.\n" in listed.stdout
    assert "not loaded: broken-one:" in listed.stderr
    checked = sandbox.run([INSTALL_PATH, "check"], env=env, binds=binds_, data=data,
                          timeout=120)
    assert checked.returncode == 1, checked.stdout
    assert any("skill broken-one" in ln and "FAIL" in ln for ln in checked.stdout.splitlines())
    assert "Traceback" not in checked.stdout + checked.stderr
