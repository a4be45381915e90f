"""Where the tests' MCP servers come from, and manifest snippets for them.

* `static_fixture()`: tests/fakes/mcp_static.c built with `gcc -static` (cached by source hash);
  the only kind of child the distroless-like rootfs can run, and fast enough for 100 restarts.
* `python_fixture_toml()`: tests/fakes/mcp_fixture.py, an SDK server that misbehaves on demand.
* `everything_command()`: npm's @modelcontextprotocol/server-everything, installed by
  `nox -s tests` into .nox/npm (skips with the reason where Node or the package is absent).
* `time_command()`: PyPI's mcp-server-time from the test extra.
* `raw_fixture_toml()`: tests/fakes/mcp_raw.py, hand-written JSON-RPC that writes the bytes a
  test asks for (lone surrogates, invalid UTF-8, cut-off lines).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STATIC_SRC = ROOT / "tests" / "fakes" / "mcp_static.c"
NPM_PREFIX = Path(os.environ.get("GANTRY_NPM_PREFIX", ROOT / ".nox" / "npm"))
EVERYTHING = "@modelcontextprotocol/server-everything"


def static_fixture(machine: str | None = None) -> Path:
    """The static C fixture server, compiled once per source version; for another machine
    than this one (aarch64) with Debian's cross compiler (gcc-aarch64-linux-gnu)."""
    source = STATIC_SRC.read_bytes()
    tag = hashlib.sha256(source).hexdigest()[:12]
    cache = Path(os.environ.get("GANTRY_TEST_CACHE", Path.home() / ".cache" / "gantry-tests"))
    native = machine is None or machine == os.uname().machine
    out = cache / (f"mcp-static-{tag}" if native else f"mcp-static-{machine}-{tag}")
    if out.exists():
        return out
    compiler = "gcc" if native else f"{machine}-linux-gnu-gcc"
    gcc = shutil.which(compiler)
    if gcc is None:
        pytest.skip(f"{compiler} not found: cannot build the static MCP fixture server")
    cache.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    proc = subprocess.run([gcc, "-static", "-O2", "-o", str(tmp), str(STATIC_SRC)],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode:
        pytest.skip(f"gcc -static failed (static libc missing?): {proc.stderr[-300:]}")
    os.replace(tmp, out)
    return out


def everything_command() -> list[str]:
    """argv for server-everything on stdio, or skip with a visible reason."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node not found: tests against npm server-everything need Node.js")
    entry = NPM_PREFIX / "node_modules" / EVERYTHING / "dist" / "index.js"
    if not entry.exists():
        pytest.skip(f"{EVERYTHING} not installed in {NPM_PREFIX} (`nox -s tests` installs it)")
    return [node, str(entry), "stdio"]


def time_command() -> str:
    path = Path(sys.executable).parent / "mcp-server-time"
    if not path.exists():
        pytest.skip("mcp-server-time not installed (the test extra installs it)")
    return str(path)


def toml_server(name: str, argv: list[str], *, env: dict[str, str] | None = None,
                timeout: float | None = None, cwd: str | None = None) -> str:
    """One [[server]] table (values JSON-quoted, which TOML accepts for basic strings)."""
    lines = ["[[server]]", f"name = {json.dumps(name)}", f"command = {json.dumps(argv[0])}",
             f"args = {json.dumps(argv[1:])}"]
    if env:
        lines.append("env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
                     + " }")
    if timeout is not None:
        lines.append(f"timeout_seconds = {timeout}")
    if cwd is not None:
        lines.append(f"cwd = {json.dumps(cwd)}")
    return "\n".join(lines) + "\n"


def python_fixture_toml(name: str = "fx", *, env: dict[str, str] | None = None,
                        timeout: float | None = None) -> str:
    return toml_server(name, [sys.executable, "-m", "tests.fakes.mcp_fixture"], env=env,
                       timeout=timeout, cwd=str(ROOT))


def raw_fixture_toml(name: str = "raw", *, env: dict[str, str] | None = None,
                     timeout: float | None = None) -> str:
    return toml_server(name, [sys.executable, str(ROOT / "tests" / "fakes" / "mcp_raw.py")],
                       env=env, timeout=timeout)


def live_children(pid: int | None = None) -> list[int]:
    """Pids of live (non-zombie) processes whose parent is `pid` (default: this process)."""
    parent = os.getpid() if pid is None else pid
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == parent and fields[0] != "Z":
            out.append(int(entry))
    return out


def kill_tree(pid: int) -> None:
    """kill -9 of `pid` and every live process under it, the deepest first: a frozen
    binary's app process (under its onefile bootstrap) and its MCP children get no chance
    to clean up, as in a real kill -9 of gantry."""
    import contextlib
    import signal

    tree: list[int] = []
    todo = [pid]
    while todo:
        one = todo.pop()
        tree.append(one)
        todo += live_children(one)
    for one in reversed(tree):
        with contextlib.suppress(ProcessLookupError):
            os.kill(one, signal.SIGKILL)


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))
