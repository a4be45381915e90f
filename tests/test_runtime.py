"""`gantry run` process behaviour: SIGHUP persona reload, fail-fast boot problems."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.openai import FakeOpenAI

pytestmark = pytest.mark.slow


def _env(tmp_path: Path, base_url: str, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"], "CHANNEL": "stdio", "LLM_BASE_URL": base_url,
        "LLM_API_KEY": "sk-runtime-test-key", "LLM_MODEL": "m", "DATA_DIR": str(tmp_path / "d"),
        "PERSONA_DIR": str(tmp_path / "p"), **extra,
    }


def _wait(cond, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def test_sighup_reloads_persona(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    persona = tmp_path / "p" / "PERSONA.md"
    persona.write_text("You are version one.")
    with FakeOpenAI() as fake:
        url = fake.base_url
        proc = subprocess.Popen([sys.executable, "-m", "gantry", "run"], env=_env(tmp_path, url),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("first\n")
            proc.stdin.flush()
            assert proc.stdout.readline() == "echo: first\n"
            persona.write_text("You are version two.")
            proc.send_signal(signal.SIGHUP)
            time.sleep(0.5)
            (tmp_path / "p" / "USER.md").write_bytes(b"\xff\xfe broken")
            proc.send_signal(signal.SIGHUP)  # a bad reload keeps the last good persona
            time.sleep(0.5)
            proc.stdin.write("second\n")
            proc.stdin.flush()
            assert proc.stdout.readline() == "echo: second\n"
            proc.stdin.close()
            proc.wait(timeout=20)
            assert proc.stderr is not None
            err = proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
        systems = [r.messages[0]["content"] for r in fake.requests]
        assert systems == ["You are version one.", "You are version two."]
        assert proc.returncode == 0
        assert "persona reload failed" in err and "USER.md" in err


@pytest.mark.parametrize(
    ("setup", "needle"),
    [
        ("bad_persona", "not valid UTF-8"),
        ("unwritable_data", "DATA_DIR"),
        ("newer_db", "newer than this gantry"),
        ("missing_ca_file", "SSL_CERT_FILE=/nonexistent/ca.pem cannot be read"),
        ("ca_dir_not_a_dir", "SSL_CERT_DIR=/nonexistent/certs is not a directory"),
    ],
)
def test_boot_problems_exit_1_with_one_message(tmp_path: Path, setup: str, needle: str) -> None:
    (tmp_path / "p").mkdir()
    env = _env(tmp_path, "http://127.0.0.1:9/v1")
    if setup == "bad_persona":
        (tmp_path / "p" / "PERSONA.md").write_bytes(b"caf\xe9")
    elif setup == "unwritable_data":
        env["DATA_DIR"] = "/proc/gantry-cannot-create"
    elif setup == "missing_ca_file":
        env["SSL_CERT_FILE"] = "/nonexistent/ca.pem"
    elif setup == "ca_dir_not_a_dir":
        env["SSL_CERT_DIR"] = "/nonexistent/certs"
    else:
        import apsw

        (tmp_path / "d").mkdir()
        apsw.Connection(str(tmp_path / "d" / "gantry.db")).execute("PRAGMA user_version = 999")
    proc = subprocess.run([sys.executable, "-m", "gantry", "run"], env=env, input="",
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_bad_proxy_variables_fail_boot_one_line_each(tmp_path: Path) -> None:
    """httpx would raise on these at the first model call, failing every turn: boot fails
    instead, naming each variable, its proxy login never printed."""
    (tmp_path / "p").mkdir()
    env = _env(tmp_path, "http://127.0.0.1:9/v1", HTTPS_PROXY="user:pr0xy-Secret@proxy:3128:bad",
               all_proxy="ftp://127.0.0.1:21", NO_PROXY="localhost")
    proc = subprocess.run([sys.executable, "-m", "gantry", "run"], env=env, input="",
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "Traceback" not in proc.stderr and "pr0xy-Secret" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "_PROXY" in line.upper()]
    assert len(lines) == 2, proc.stderr
    assert lines[0].startswith("  - HTTPS_PROXY='[REDACTED]@proxy:3128:bad' is not a proxy URL")
    assert lines[1].startswith("  - all_proxy='ftp://127.0.0.1:21' is not a proxy URL")
    assert all(line.endswith("or unset it") for line in lines)


def test_usable_proxy_variables_pass_boot(tmp_path: Path) -> None:
    """A valid proxy setting passes boot; here NO_PROXY sends the loopback model past it."""
    (tmp_path / "p").mkdir()
    with FakeOpenAI() as fake:
        env = _env(tmp_path, fake.base_url, HTTP_PROXY="http://user:pw@127.0.0.1:9",
                   HTTPS_PROXY="127.0.0.1:9", NO_PROXY="localhost,127.0.0.1")
        proc = subprocess.run([sys.executable, "-m", "gantry", "run"], env=env, input="hi\n",
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "echo: hi\n"


@pytest.fixture
def cfg_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "p").mkdir(exist_ok=True)
    for key, value in _env(tmp_path, "http://127.0.0.1:9/v1").items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def restore_logging():  # type: ignore[no-untyped-def]
    import logging
    import threading

    root = logging.getLogger()
    saved = (list(root.handlers), root.level, sys.excepthook, threading.excepthook)
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    sys.excepthook, threading.excepthook = saved[2], saved[3]


@pytest.mark.parametrize("raised", ["crash", "crash-in-group", "aborted-in-group"])
def test_last_boundary_logs_redacted_json_never_a_raw_traceback(
    cfg_env: None, restore_logging: None, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], raised: str,
) -> None:
    """Whatever escapes every inner boundary: one redacted JSON line and exit 1; turns cut
    at shutdown (TurnAborted, even inside an ExceptionGroup) are a clean stop: exit 0."""
    import json

    from gantry import runtime
    from gantry.channel.base import TurnAborted

    async def serve(cfg: object, environ: object = None) -> None:
        boom = RuntimeError("POST to http://user:pr0xy-pw-123@127.0.0.1:9/v1 with "
                            "sk-runtime-test-key failed")
        if raised == "crash":
            raise boom
        if raised == "crash-in-group":
            raise ExceptionGroup("tasks", [boom])
        raise BaseExceptionGroup("tasks", [TurnAborted()])

    monkeypatch.setattr(runtime, "serve", serve)
    code = runtime.main(None)
    err = capsys.readouterr().err
    assert code == (0 if raised == "aborted-in-group" else 1)
    assert "pr0xy-pw-123" not in err and "sk-runtime-test-key" not in err
    lines = [json.loads(line) for line in err.splitlines()]
    if code == 1:
        crash = lines[-1]
        assert crash["level"] == "critical" and "Traceback" in crash["traceback"]
        assert "http://[REDACTED]@127.0.0.1:9/v1" in crash["traceback"]


def test_config_error_never_echoes_url_credentials(
    cfg_env: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gantry import runtime

    monkeypatch.setenv("LLM_BASE_URL", "ftp://user:pr0xy-pw-123@proxy.local/v1")
    assert runtime.main(None) == 1
    err = capsys.readouterr().err
    assert "LLM_BASE_URL" in err and "pr0xy-pw-123" not in err
