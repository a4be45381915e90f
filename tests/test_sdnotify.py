"""gantry.sdnotify against a real AF_UNIX datagram socket (path and abstract)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gantry.sdnotify import notify, status_line


@pytest.fixture
def path_socket() -> Iterator[tuple[socket.socket, str]]:
    # AF_UNIX paths are limited to ~108 bytes; pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="sdn") as d:
        path = str(Path(d) / "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(2)
        try:
            yield sock, path
        finally:
            sock.close()


def test_unset_is_noop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify("READY=1") is False


def test_sends_to_path_socket(
    monkeypatch: pytest.MonkeyPatch, path_socket: tuple[socket.socket, str]
) -> None:
    sock, path = path_socket
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    assert notify("READY=1") is True
    assert sock.recv(4096) == b"READY=1"
    assert notify("WATCHDOG=1\nSTATUS=ok") is True
    assert sock.recv(4096) == b"WATCHDOG=1\nSTATUS=ok"


def test_sends_to_abstract_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"gantry-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(2)
    try:
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert notify("READY=1") is True
        assert sock.recv(4096) == b"READY=1"
    finally:
        sock.close()


@pytest.mark.parametrize("value", ["/nonexistent/dir/notify", "@gantry-nobody-listens-here",
                                   "vsock:2:1234", "relative/path"])
def test_unreachable_socket_never_raises(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", value)
    assert notify("READY=1") is False


def test_empty_state_is_noop(
    monkeypatch: pytest.MonkeyPatch, path_socket: tuple[socket.socket, str]
) -> None:
    _sock, path = path_socket
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    assert notify("") is False


def test_peer_gone_after_bind(monkeypatch: pytest.MonkeyPatch) -> None:
    with tempfile.TemporaryDirectory(prefix="sdn") as d:
        path = os.path.join(d, "notify")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.close()  # the file stays, nobody listens: connect() is refused
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        assert notify("READY=1") is False


# ----------------------------------------------------------------------------- STATUS=


def test_status_line_names_the_channel() -> None:
    assert status_line("telegram") == "receiving on telegram"
    assert status_line("stdio") == "receiving on stdio"


def test_status_line_takes_counts_from_later_parts() -> None:
    line = status_line("telegram", tools=12, servers=3)
    assert line == "receiving on telegram; 12 tools, 3 servers"


@given(st.text(max_size=40), st.dictionaries(st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
                                             st.integers(0, 10**6), max_size=4))
def test_status_line_is_always_one_assignment(channel: str, counts: dict[str, int]) -> None:
    """Whatever it is given, STATUS= stays one line: a newline would start a new assignment."""
    line = status_line(channel, **counts)
    assert "\n" not in line and "\r" not in line
    assert line.startswith("receiving on")
    for name, n in counts.items():
        assert f"{n} {name}" in line


@pytest.mark.slow
def test_run_reports_ready_status_and_stopping(
    path_socket: tuple[socket.socket, str], tmp_path: Path
) -> None:
    """A real `gantry run` (stdio) sends READY=1 with STATUS= once receiving, and STOPPING=1
    with STATUS=stopping when its input ends, so `systemctl status` shows both."""
    from tests.fakes.openai import FakeOpenAI

    sock, path = path_socket
    sock.settimeout(30)
    (tmp_path / "persona").mkdir()
    (tmp_path / "persona" / "PERSONA.md").write_text("You are the notify test persona.\n")
    model = FakeOpenAI(api_key="sk-notify")
    model.start_in_thread()
    env = {"PATH": os.environ["PATH"], "CHANNEL": "stdio", "LLM_BASE_URL": model.base_url,
           "LLM_API_KEY": "sk-notify", "LLM_MODEL": "m", "DATA_DIR": str(tmp_path / "data"),
           "PERSONA_DIR": str(tmp_path / "persona"),
           "NOTIFY_SOCKET": path}
    proc = subprocess.Popen([sys.executable, "-m", "gantry", "run"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        got = []
        while not got or not got[-1].startswith("READY=1"):
            got.append(sock.recv(4096).decode())  # WATCHDOG=1 may come first
        assert got[-1] == "READY=1\nSTATUS=receiving on stdio; 6 tools"  # memory + cron
        _out, err = proc.communicate(b"", timeout=30)
        assert proc.returncode == 0, err.decode()[-2000:]
        rest = []
        sock.settimeout(0.5)
        while True:
            try:
                rest.append(sock.recv(4096).decode())
            except TimeoutError:
                break
        assert "STOPPING=1\nSTATUS=stopping" in rest, rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        model.stop()
