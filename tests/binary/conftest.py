"""Fixtures for the frozen-binary smoke test: dist/gantry inside a distroless-like root.

GANTRY_BINARY_NAME names another artifact of dist/ to test instead, with its sidecar files
named after it (`nox -s binary-arm64`: gantry-linux-arm64, run under qemu-user).

Skipped with a reason when dist/gantry is missing or this host cannot build/enter the rootfs;
with GANTRY_REQUIRE_BINARY=1 (the `nox -s binary` session, CI) those become failures.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.binary.rootfs import RootfsUnavailable, Sandbox, ensure_base_rootfs

ROOT = Path(__file__).resolve().parents[2]
ARTIFACT = os.environ.get("GANTRY_BINARY_NAME", "gantry")
BINARY = ROOT / "dist" / ARTIFACT
BUILD_JSON = ROOT / "dist" / f"{ARTIFACT}-build.json"


def _unavailable(reason: str) -> None:
    if os.environ.get("GANTRY_REQUIRE_BINARY") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def binary() -> Path:
    if not BINARY.exists():
        session = "build" if ARTIFACT == "gantry" else "build-arm64"
        _unavailable(f"{BINARY} does not exist: build it with `nox -s {session}`")
    return BINARY


@pytest.fixture(scope="session")
def build_record(binary: Path) -> dict[str, str]:
    if not BUILD_JSON.exists():
        _unavailable(f"{BUILD_JSON} missing: dist/ was not produced by build/build.py")
    record: dict[str, str] = json.loads(BUILD_JSON.read_text())
    return record


@pytest.fixture(scope="session")
def sandbox(binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    if os.geteuid() != 0:
        _unavailable("the distroless-like sandbox needs root (unshare -m, mount, chroot)")
    for tool in ("unshare", "mount", "apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            _unavailable(f"{tool} not found; the sandbox needs util-linux, mount, apt, dpkg")
    try:
        base = ensure_base_rootfs()
    except RootfsUnavailable as exc:
        _unavailable(f"cannot assemble the distroless-like rootfs: {exc}")
    try:
        sb = Sandbox.create(tmp_path_factory.mktemp("distroless"), binary, base)
    except RootfsUnavailable as exc:
        _unavailable(f"cannot run {binary.name} here: {exc}")
    probe = subprocess.run(sb.command(["/usr/local/bin/gantry", "--help"]),
                           capture_output=True, text=True, timeout=120)
    if "mount:" in probe.stderr or "unshare:" in probe.stderr:
        _unavailable(f"this host does not allow the mount-namespace sandbox: {probe.stderr}")
    return sb


@pytest.fixture(scope="session")
def persona_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("persona")
    (d / "PERSONA.md").write_text("You are the distroless smoke-test persona.\n")
    d.chmod(0o755)
    return d


@pytest.fixture
def fake_openai() -> Iterator[object]:
    from tests.fakes.openai import FakeOpenAI

    server = FakeOpenAI(api_key="sk-binary-smoke")
    server.start_in_thread()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def every() -> Iterator[Any]:
    """npm server-everything over Streamable HTTP on a loopback port (a remote MCP server)."""
    from tests.fakes.mcp_remote import everything_http

    if shutil.which("node") is None:
        pytest.skip("node not found: the remote server is npm server-everything")
    with everything_http("streamableHttp") as srv:
        yield srv
