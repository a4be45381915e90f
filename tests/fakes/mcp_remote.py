"""Remote MCP servers for the tests, each a process on a free 127.0.0.1 port, stopped by PID:

* `everything_http(mode)`: npm server-everything in `streamableHttp` or `sse` mode (it reads
  `PORT`); Node is preloaded with node_loopback.cjs so it binds loopback only.
* `fixture_http()`: tests/fakes/mcp_http_fixture.py, an SDK server over Streamable HTTP.

`restart()` stops the process and starts a new one on the same port (a server restart: the
sessions it held are gone).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.fakes.mcp_servers import everything_command

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK_JS = ROOT / "tests" / "fakes" / "node_loopback.cjs"
CALLS_JS = ROOT / "tests" / "fakes" / "node_calls.cjs"
START_WAIT = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpServer:
    """One server process listening on `port` (127.0.0.1)."""

    def __init__(self, argv: list[str], path: str, env: dict[str, str] | None = None,
                 port: int | None = None) -> None:
        self.argv = argv
        self.path = path
        self.port = port or free_port()
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "HOME": os.environ.get("HOME", "/tmp"), "PORT": str(self.port),
                    "PYTHONPATH": str(ROOT), **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = ROOT / ".nox" / f"remote-server-{self.port}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.path}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> HttpServer:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([a.replace("{port}", str(self.port)) for a in self.argv],
                                         env=self.env, cwd=ROOT, stdout=out, stderr=out,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + START_WAIT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.argv} exited with {self.proc.returncode}: "
                                   f"{self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.argv} did not listen on {self.port} in {START_WAIT:g} s")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def kill(self) -> None:
        """kill -9 by PID, no goodbye: the server is gone until start() (same port)."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def everything_http(mode: str = "streamableHttp",
                    calls: Path | None = None) -> Iterator[HttpServer]:
    """`calls`: a file each tools/call that reaches the server is appended to (node_calls.cjs)."""
    argv = everything_command()
    node, entry = argv[0], argv[1]
    counted = ["-r", str(CALLS_JS)] if calls is not None else []
    server = HttpServer([node, "-r", str(LOOPBACK_JS), *counted, entry, mode],
                        "/mcp" if mode == "streamableHttp" else "/sse",
                        env={"CALL_LOG": str(calls)} if calls is not None else None)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def fixture_http(env: dict[str, str] | None = None) -> Iterator[HttpServer]:
    try:
        import uvicorn  # noqa: F401
    except ImportError:
        pytest.skip("uvicorn not installed: the SDK's HTTP server needs it")
    server = HttpServer([sys.executable, "-m", "tests.fakes.mcp_http_fixture", "{port}"],
                        "/mcp", env=env)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def toml_remote(name: str, url: str, *, transport: str | None = None,
                headers: dict[str, str] | None = None, timeout: float | None = None,
                required: bool | None = None) -> str:
    """One remote [[server]] table."""
    import json

    lines = ["[[server]]", f"name = {json.dumps(name)}", f"url = {json.dumps(url)}"]
    if transport:
        lines.append(f"transport = {json.dumps(transport)}")
    if headers:
        lines.append("headers = { " + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}"
                                                for k, v in headers.items()) + " }")
    if timeout is not None:
        lines.append(f"timeout_seconds = {timeout}")
    if required is not None:
        lines.append(f"required = {str(required).lower()}")
    return "\n".join(lines) + "\n"
