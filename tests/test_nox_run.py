"""`nox -s run`, the README's first command, run for real with the fake model: replies alone on
stdout, log lines on stderr, and a second start that installs nothing."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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
