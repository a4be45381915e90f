"""A real systemd 252 as PID 1 in a container of the test's own Docker engine.

The Debian bookworm rootfs (tests/systemd/bookworm.py, cached) is imported and started with
/lib/systemd/systemd as its entrypoint, without --privileged (refused in some sandboxes) but
with the capabilities, unconfined profiles and host cgroup tree systemd needs. The host
network is shared so the unit reaches the loopback fakes (model and Telegram Bot API).

Skipped with the reason where no engine can start; `nox -s systemd` sets
GANTRY_REQUIRE_BINARY=1, which makes a missing dist/gantry a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.engine import DockerEngine, engine_or_skip
from tests.systemd.bookworm import BookwormUnavailable, ensure_tarball

ROOT = Path(__file__).resolve().parents[2]
BINARY = ROOT / "dist" / "gantry"
IMAGE = "gantry-systemd:bookworm"
NAME = "gantry-systemd"
SYSTEMD_FLAGS = [
    "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
    "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
    "--security-opt", "systempaths=unconfined",
    "--device-cgroup-rule", "a *:* rwm",
    "--cgroupns=host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--tmpfs", "/run", "--tmpfs", "/run/lock",
    "-e", "container=docker",
]


class Machine:
    """The running systemd container: commands in it, and systemctl/journal helpers."""

    def __init__(self, engine: DockerEngine, name: str) -> None:
        self.engine = engine
        self.name = name

    def sh(self, script: str, check: bool = True, timeout: float = 120.0,
           cwd: str = "/") -> subprocess.CompletedProcess[str]:
        return self.engine.docker("exec", "-w", cwd, self.name, "sh", "-c", script,
                                  check=check, timeout=timeout)

    def show(self, *props: str, unit: str = "gantry") -> dict[str, str]:
        out = self.sh(f"systemctl show {unit} " + " ".join(f"-p {p}" for p in props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, unit: str = "gantry") -> str:
        return self.sh(f"journalctl -u {unit} -o cat --no-pager", check=False).stdout

    def wait_for(self, what: str, predicate: Any, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            got = predicate()
            if got:
                return got
            if time.monotonic() > deadline:
                state = self.sh("systemctl status gantry --no-pager -l", check=False).stdout
                pytest.fail(f"{what}: not within {timeout:.0f} s\n{state}\n"
                            f"journal tail:\n{self.journal()[-3000:]}")
            time.sleep(0.3)


@pytest.fixture(scope="session")
def binary() -> Path:
    if not BINARY.exists():
        reason = f"{BINARY} does not exist: build it with `nox -s build`"
        if os.environ.get("GANTRY_REQUIRE_BINARY") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return BINARY


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerEngine]:
    yield from engine_or_skip(tmp_path_factory.mktemp("dockerd"))


@pytest.fixture(scope="session")
def systemd_image(engine: DockerEngine) -> str:
    try:
        tarball = ensure_tarball()
    except BookwormUnavailable as exc:
        pytest.skip(f"cannot debootstrap the bookworm rootfs here: {exc}")
    engine.import_tarball(tarball, IMAGE)
    return IMAGE


def stage_checkout(dest: Path, binary: Path, env_text: str) -> Path:
    """What the install steps read, laid out like a checkout: dist/gantry, deploy/, docs, .env."""
    (dest / "dist").mkdir(parents=True)
    shutil.copy2(binary, dest / "dist" / "gantry")
    shutil.copytree(ROOT / "deploy", dest / "deploy")
    shutil.copytree(ROOT / "docs", dest / "docs")
    shutil.copy2(ROOT / "README.md", dest / "README.md")
    (dest / ".env").write_text(env_text)
    return dest


@pytest.fixture(scope="module")
def machine(engine: DockerEngine, systemd_image: str, binary: Path,
            tmp_path_factory: pytest.TempPathFactory, fakes: Any) -> Iterator[Machine]:
    checkout = stage_checkout(tmp_path_factory.mktemp("checkout") / "gantry", binary,
                              fakes.env_text)
    engine.docker("run", "-d", "--name", NAME, "--network", "host", *SYSTEMD_FLAGS,
                  "-v", f"{checkout}:/src:ro", "--entrypoint", "/lib/systemd/systemd",
                  systemd_image)
    m = Machine(engine, NAME)
    try:
        m.wait_for("systemd reaching a running state", lambda: m.sh(
            "systemctl is-system-running", check=False).stdout.strip() in ("running", "degraded"),
            timeout=120)
        yield m
    finally:
        engine.docker("rm", "-f", NAME, check=False, timeout=120)


class Fakes:
    """The loopback model and Bot API the unit talks to, and the .env that points at them."""

    KEY = "sk-systemd-smoke"
    TOKEN = "123456:systemd-smoke"
    USER = 7

    def __init__(self) -> None:
        from tests.fakes.openai import FakeOpenAI
        from tests.fakes.telegram import FakeTelegram

        self.model = FakeOpenAI(api_key=self.KEY)
        self.model.start_in_thread()
        self.telegram = FakeTelegram()
        self.telegram_url = self.telegram.start_in_thread()
        self.env_text = "".join(f"{k}={v}\n" for k, v in {
            "LLM_BASE_URL": self.model.base_url,
            "LLM_API_KEY": self.KEY,
            "LLM_MODEL": "fake-model",
            "CHANNEL": "telegram",
            "TELEGRAM_BOT_TOKEN": self.TOKEN,
            "TELEGRAM_ALLOWED_USERS": str(self.USER),
            "TELEGRAM_API_URL": self.telegram_url,
        }.items())

    def stop(self) -> None:
        self.telegram.stop()
        self.model.stop()


@pytest.fixture(scope="module")
def fakes() -> Iterator[Fakes]:
    f = Fakes()
    try:
        yield f
    finally:
        f.stop()
