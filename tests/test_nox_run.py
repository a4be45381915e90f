"""`nox -s run`, the README's first command, run for real with the fake model: replies alone on
stdout, log lines on stderr, and a second start that installs nothing."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gantry.config import read_env_file
from tests.fakes.openai import FakeOpenAI

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def nox_command() -> list[str]:
    """The nox `.ci/run` installs (.nox/.runner), else one on PATH or beside this Python."""
    runner = ROOT / ".nox" / ".runner" / "bin" / "python"
    if runner.exists():
        return [str(runner), "-m", "nox"]
    if (found := shutil.which("nox")) is not None:
        return [found]
    if importlib.util.find_spec("nox") is not None:
        return [sys.executable, "-m", "nox"]
    pytest.skip("no nox here (.ci/run installs it in .nox/.runner)")


def start(envdir: Path, data: Path, base_url: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"),
           "LLM_BASE_URL": base_url, "LLM_API_KEY": "sk-nox-run", "LLM_MODEL": "fake-model",
           "DATA_DIR": str(data), "MCP_MANIFEST": "/dev/null"}
    return subprocess.run([*nox_command(), "-s", "run", "--envdir", str(envdir)], cwd=ROOT,
                          env=env, input="hello\n", capture_output=True, text=True, timeout=600)


def test_nox_run_keeps_logs_off_stdout_and_installs_only_once(tmp_path: Path) -> None:
    with FakeOpenAI(api_key="sk-nox-run") as model:
        first = start(tmp_path / "envs", tmp_path / "data", model.base_url)
        second = start(tmp_path / "envs", tmp_path / "data", model.base_url)
    assert first.returncode == 0, first.stderr[-2000:]
    assert second.returncode == 0, second.stderr[-2000:]
    for run in (first, second):
        assert run.stdout.strip() == "echo: hello", run.stdout
        assert '"msg"' not in run.stdout and "boot" not in run.stdout
        assert "lock/runtime.txt" in run.stderr or "pip install" in run.stderr
    assert "pip install" in first.stderr and "pip install" not in second.stderr
    assert "no install" in second.stderr


# ------------------------------------------------------------------ the README's walk, as written


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tracked files of this tree, as a fresh clone has them (no .env, no .gantry-data):
    the commands below write there, never into the tree the tests run from."""
    where = tmp_path_factory.mktemp("clone") / "gantry"
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, where / name)
    return where


def nox_in(clone: Path, envdir: Path, *posargs: str, stdin: str = "",
           **env: str) -> subprocess.CompletedProcess[str]:
    """`nox -s run -- POSARGS` in the clone, with none of gantry's variables set but `env`."""
    base = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **env}
    return subprocess.run([*nox_command(), "-f", str(clone / "noxfile.py"), "-s", "run",
                           "--envdir", str(envdir), "--", *posargs], cwd=clone, env=base,
                          input=stdin, capture_output=True, text=True, timeout=600)


def test_the_readme_commands_run_as_written_under_nox(clone: Path, tmp_path: Path) -> None:
    """`nox -s run -- init --manifest .gantry-data/mcp.toml` (the README's line) writes the
    manifest and ./.env recording the paths nox runs with; `-- tools list` runs another
    command; `2>log.txt` then the README's `grep '^{'` leaves gantry's JSON lines only. nox's
    "uv binary not found." is not among its lines."""
    envs = tmp_path / "envs"
    init = nox_in(clone, envs, "init", "--manifest", ".gantry-data/mcp.toml")
    assert init.returncode == 0, init.stderr[-3000:]
    assert f"wrote {'.gantry-data/mcp.toml'}" in init.stdout
    assert "wrote .env" in init.stdout and "skip (exists)" in init.stdout  # deploy/persona
    written = read_env_file(clone / ".env")
    assert written["PERSONA_DIR"] == str(clone / "deploy" / "persona")
    assert written["MCP_MANIFEST"] == str(clone / ".gantry-data" / "mcp.toml")
    assert written["DATA_DIR"] == str(clone / ".gantry-data")

    tools = nox_in(clone, envs, "tools", "list")
    assert tools.returncode == 0, tools.stderr[-3000:]
    assert "tools offered:" in tools.stdout and "memory_store" in tools.stdout

    readme = (ROOT / "README.md").read_text()
    assert "`nox -s run -- init --manifest .gantry-data/mcp.toml`" in readme
    assert "`grep '^{' log.txt`" in readme
    with FakeOpenAI(api_key="sk-nox-run") as model:
        chat = nox_in(clone, envs, stdin="hello\n", LLM_BASE_URL=model.base_url,
                      LLM_API_KEY="sk-nox-run", LLM_MODEL="fake-model")
    assert chat.returncode == 0, chat.stderr[-3000:]
    assert chat.stdout.strip() == "echo: hello"
    kept = [line for line in chat.stderr.splitlines() if line.startswith("{")]  # grep '^{'
    assert kept and all(json.loads(line)["message"] for line in kept)
    others = [line for line in chat.stderr.splitlines() if not line.startswith("{")]
    assert others and all(line.startswith("nox > ") for line in others), others
    for run in (init, tools, chat):
        assert "uv binary not found" not in run.stderr
