"""The sandbox runs another machine's static program the way `nox -s binary-arm64` runs
dist/gantry-linux-arm64 (issue 43): through binfmt_misc's emulator, with QEMU_CPU, in the
ELF-free root, as uid 65532 on a read-only root. Checked with the static MCP fixture
cross-compiled for aarch64, so the harness is proven without the (slow) arm64 build."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.binary.rootfs import (
    NONROOT_UID,
    RootfsUnavailable,
    Sandbox,
    binary_machine,
    emulator_for,
    ensure_base_rootfs,
)

pytestmark = [pytest.mark.binary]

FOREIGN = "aarch64" if os.uname().machine != "aarch64" else "x86_64"


def test_a_foreign_static_program_runs_in_the_sandbox(tmp_path: Path) -> None:
    from tests.fakes.mcp_servers import static_fixture

    if os.geteuid() != 0:
        pytest.skip("the sandbox needs root")
    try:
        emulator = emulator_for(FOREIGN)
        base = ensure_base_rootfs()
    except RootfsUnavailable as exc:
        pytest.skip(str(exc))
    program = static_fixture(FOREIGN)
    assert binary_machine(program) == FOREIGN and emulator is not None
    sandbox = Sandbox.create(tmp_path, program, base)
    assert sandbox.emulator == emulator
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "env", "arguments": {"name": "QEMU_CPU"}}}
    line = json.dumps(request, separators=(",", ":")) + "\n"
    done = sandbox.run(["/usr/local/bin/gantry"], input=line, uid=NONROOT_UID, timeout=120)
    assert done.returncode == 0, done
    answer = json.loads(done.stdout.splitlines()[0])
    assert answer["id"] == 1 and "neoverse-n1" in json.dumps(answer["result"])
    # the emulator is only bound in: the root itself still holds no ELF file but the program
    assert (sandbox.root / str(emulator).lstrip("/")).stat().st_size == 0
