"""gantry.sdnotify against a real AF_UNIX datagram socket (path and abstract)."""

from __future__ import annotations

import os
import socket
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gantry.sdnotify import notify


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
