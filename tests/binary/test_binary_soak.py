"""The short soak (issue 44): the frozen binary on Telegram in the distroless-like rootfs for
1,000 turns of the mix bench/soak.py runs 10,000 of (tests/fakes/soak.py: text, tool rounds
through the static stdio fixture and npm server-everything over Streamable HTTP, memory,
photos, documents, /stop and follow-ups, cron pushes). A guard against leaks of fds,
threads and child processes: their counts after 1,000 turns are those after the first 200.
No timing is asserted.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.binary.rootfs import INSTALL_PATH, Sandbox
from tests.fakes.mcp_remote import HttpServer, toml_remote
from tests.fakes.mcp_servers import live_children, static_fixture, toml_server
from tests.fakes.openai import Call
from tests.fakes.soak import Model, Soak, count_fds, count_threads, fakes, own_pids
from tests.procs import ChildIO

pytestmark = [pytest.mark.binary, pytest.mark.slow]

TURNS = 1_000
WARM = 200  # turns before the baseline: pools, caches and lazy imports have filled in
FD_SLACK = 3  # a connection being opened or closed at the moment of sampling
THREAD_SLACK = 1


def _counts(run: Soak) -> tuple[int, int, int]:
    """(fds, threads, child processes) of gantry's own processes, least of three looks a
    moment apart (a request in flight at one look is not a leak)."""
    looks = []
    for _ in range(3):
        pids = own_pids(run.proc.pid)
        kids = [k for p in pids for k in live_children(p) if k not in pids]
        looks.append((count_fds(pids), count_threads(pids), len(kids)))
        time.sleep(0.5)
    return min(x[0] for x in looks), min(x[1] for x in looks), min(x[2] for x in looks)


def test_a_thousand_turns_leak_no_fds_threads_or_children(
    sandbox: Sandbox, every: HttpServer, persona_dir: Path, tmp_path: Path
) -> None:
    opt = tmp_path / "opt"
    opt.mkdir()
    shutil.copy(static_fixture(), opt / "mcp-static")
    (opt / "mcp-static").chmod(0o755)
    opt.chmod(0o755)
    (sandbox.root / "opt" / "mcp").mkdir(parents=True, exist_ok=True)  # the mount point
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "mcp.toml").write_text(toml_server("time", ["/opt/mcp/mcp-static"])
                                  + toml_remote("every", every.url))
    (etc / "mcp.toml").chmod(0o644)
    etc.chmod(0o755)
    data = sandbox.new_data_dir("data-soak")
    model = Model(stdio=Call("time__echo", {"text": "tick"}))
    with fakes(model) as f:
        env = {**f.env(), "DATA_DIR": "/data", "PERSONA_DIR": "/persona",
               "MCP_MANIFEST": "/etc/gantry/mcp.toml", "LOG_LEVEL": "warning"}
        proc = sandbox.popen([INSTALL_PATH, "run"], env=env, data=data,
                             binds={"/persona": persona_dir, "/opt/mcp": opt, "/etc/gantry": etc})
        io = ChildIO(proc)  # drains its pipes
        run = Soak(proc, f, data, lambda: io.stderr)
        seen: dict[int, tuple[int, int, int]] = {}
        try:
            run.drive(TURNS, WARM, lambda n, _lat, _floor: seen.update({n: _counts(run)}))
        finally:
            code = io.stop(timeout=30)
            io.kill()
    fds0, threads0, kids0 = seen[WARM]
    fds, threads, kids = seen[TURNS]
    assert kids0 == kids == 1, seen  # the stdio server, never restarted or doubled
    assert fds <= fds0 + FD_SLACK, seen
    assert threads <= threads0 + THREAD_SLACK, seen
    assert code == 0 and "Traceback" not in io.stderr, io.stderr[-3000:]
