"""Every developer task: `nox -s ci` (what CI runs), `tests`, `lint`, `run`, `build`, `binary`,
`systemd`, `bench`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nox

nox.options.sessions = ["ci"]
nox.options.reuse_existing_virtualenvs = True
ROOT = Path(__file__).parent
DIST = ROOT / "dist" / "gantry"


NPM_PREFIX = ROOT / ".nox" / "npm"
# Third-party MCP servers from npm that the tests run (tests/fakes/mcp_servers.py finds them).
NPM_TEST_PACKAGES = ("@modelcontextprotocol/server-everything@2026.8.31",)


def install_npm_test_servers(session: nox.Session) -> None:
    """npm packages the MCP tests use; without Node those tests skip with the reason."""
    if shutil.which("npm") is None:
        session.log("npm not found: tests against npm MCP servers will be skipped")
        return
    session.run("npm", "install", "--no-audit", "--no-fund", "--prefix", str(NPM_PREFIX),
                *NPM_TEST_PACKAGES, external=True)


@nox.session
def tests(session: nox.Session) -> None:
    """Unit and integration tests against a source install (binary tests skip)."""
    session.install("-e", ".[test]")
    install_npm_test_servers(session)
    session.run("python", "-m", "pytest", "-m", "not binary and not systemd", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (style, imports, bugbear) and mypy over the package."""
    session.install("-e", ".[lint]")
    session.run("ruff", "check", "gantry", "tests", "bench", "build", "noxfile.py")
    session.run("mypy")


@nox.session
def build(session: nox.Session) -> None:
    """Freeze gantry into the single static executable dist/gantry (Nuitka, ccache)."""
    session.install("-e", ".[build]")
    session.run("python", "build/build.py", *session.posargs)


@nox.session
def binary(session: nox.Session) -> None:
    """Smoke-test dist/gantry inside a distroless-like root filesystem and as an image in a
    private Docker engine (needs root; tests/engine.py apt-installs docker.io if missing)."""
    if not DIST.exists():
        session.error("dist/gantry is missing: run `nox -s build` first")
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", "-m", "binary", "tests/binary", *session.posargs,
                env={"GANTRY_REQUIRE_BINARY": "1"})


@nox.session
def systemd(session: nox.Session) -> None:
    """dist/gantry as deploy/systemd/gantry.service under a real systemd 252 (Debian bookworm,
    debootstrapped once and cached in ~/.cache/gantry) in a private Docker engine."""
    if not DIST.exists():
        session.error("dist/gantry is missing: run `nox -s build` first")
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", "-m", "systemd", "tests/systemd", *session.posargs,
                env={"GANTRY_REQUIRE_BINARY": "1"})


@nox.session
def ci(session: nox.Session) -> None:
    """Everything CI checks, in order: lint, tests, build, binary smoke test (chroot and Docker
    engine), the systemd unit under a real systemd."""
    session.notify("lint")
    session.notify("tests")
    session.notify("build")
    session.notify("binary")
    session.notify("systemd")


@nox.session
def run(session: nox.Session) -> None:
    """`gantry run` from a source install; CHANNEL=stdio unless set; reads .env if present."""
    session.install("-e", ".")
    env = {
        "CHANNEL": os.environ.get("CHANNEL", "stdio"),
        "DATA_DIR": os.environ.get("DATA_DIR", str(ROOT / ".gantry-data")),
        "PERSONA_DIR": os.environ.get("PERSONA_DIR", str(ROOT / "deploy" / "persona")),
    }
    manifest = ROOT / ".gantry-data" / "mcp.toml"  # optional: MCP servers for local runs
    if "MCP_MANIFEST" not in os.environ and manifest.exists():
        env["MCP_MANIFEST"] = str(manifest)
    args = ["--env-file", ".env"] if (ROOT / ".env").exists() else []
    session.run("gantry", "run", *args, *session.posargs, env=env, external=False)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks that print figures (never pass/fail): bench/*.py."""
    session.install("-e", ".[test]")
    for script in sorted((ROOT / "bench").glob("*.py")):
        if not session.posargs or script.stem in session.posargs:
            session.run("python", str(script))
