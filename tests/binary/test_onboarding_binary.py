"""`gantry init` and `gantry check` inside the distroless-like root: no shell, no libc.

This is where an operator needs them most: the image has nothing else to look around with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.binary.rootfs import INSTALL_PATH, Sandbox

pytestmark = [pytest.mark.binary, pytest.mark.slow]

KEY = "sk-binary-smoke"


def test_check_passes_against_the_fakes(sandbox: Sandbox, fake_openai: Any,
                                        persona_dir: Path) -> None:
    data = sandbox.new_data_dir("check-data")
    env = {"CHANNEL": "stdio", "LLM_BASE_URL": fake_openai.base_url, "LLM_API_KEY": KEY,
           "LLM_MODEL": "fake-model", "DATA_DIR": "/data", "PERSONA_DIR": "/persona"}
    result = sandbox.run([INSTALL_PATH, "check"], env=env, data=data,
                         binds={"/persona": persona_dir}, timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert KEY not in out and "Traceback" not in out
    lines = {line[5:].split("  ", 1)[0]: line for line in result.stdout.splitlines()}
    assert lines["binary"].startswith("ok") and "exec allowed" in lines["binary"]
    assert lines["model"].startswith("ok") and lines["tls"].startswith("ok")
    assert "SSL_CERT_FILE" in lines["tls"]  # the image's bundle, not certifi's


def test_check_fails_clearly_on_a_rejected_key(sandbox: Sandbox, fake_openai: Any) -> None:
    env = {"CHANNEL": "stdio", "LLM_BASE_URL": fake_openai.base_url,
           "LLM_API_KEY": "sk-wrong-key-123", "LLM_MODEL": "fake-model", "DATA_DIR": "/data"}
    result = sandbox.run([INSTALL_PATH, "check"], env=env,
                         data=sandbox.new_data_dir("check-bad"), timeout=120)
    assert result.returncode == 1
    assert "rejected the key (HTTP 401)" in result.stdout
    assert "sk-wrong-key-123" not in result.stdout + result.stderr


def test_init_writes_the_templates_the_binary_carries(sandbox: Sandbox) -> None:
    data = sandbox.new_data_dir("init-data")
    argv = [INSTALL_PATH, "init", "--persona-dir", "/data/persona", "--manifest",
            "/data/mcp.toml", "--env-file", "/data/.env"]
    first = sandbox.run(argv, data=data, timeout=120)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("wrote ") == 5
    assert "[[server]]" in (data / "mcp.toml").read_text()
    assert "LLM_BASE_URL=" in (data / ".env").read_text()
    again = sandbox.run(argv, data=data, timeout=120)
    assert again.stdout.count("skip (exists) ") == 5
