"""A private Docker engine for tests: Debian's docker.io, one dockerd per test session.

The daemon runs without touching the host's networking or storage setup: ``vfs`` storage, no
iptables, no default bridge (containers use ``--network host`` to reach loopback fakes), and
its own data root, exec root and socket under a temporary directory. It is started and
stopped by PID (its containerd goes with it). If dockerd is not installed, ``ensure_docker``
apt-installs ``docker.io`` (and ``docker-compose``, for ``config``), so a clean CI machine
needs nothing by hand.

Used by tests/binary/test_docker.py and tests/systemd; no pytest dependency.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

DOCKERD = "/usr/sbin/dockerd"
PACKAGES = ("docker.io", "docker-compose")


class EngineUnavailable(RuntimeError):
    """No Docker engine can be started here; `str()` says why."""


def ensure_docker() -> None:
    """Install Debian's docker.io and docker-compose if dockerd or docker-compose is missing."""
    if os.geteuid() != 0:
        raise EngineUnavailable("starting dockerd needs root")
    if Path(DOCKERD).exists() and shutil.which("docker-compose"):
        return
    if shutil.which("apt-get") is None:
        raise EngineUnavailable("dockerd is not installed and there is no apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if r.returncode != 0:  # stale package lists on a fresh machine
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, timeout=600)
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if r.returncode != 0 or not Path(DOCKERD).exists():
        raise EngineUnavailable(f"apt-get install {' '.join(PACKAGES)} failed: "
                                f"{r.stderr.strip()[-800:]}")


def docker_cli() -> str:
    """docker.io's own client (same API version as its daemon), else any `docker` on PATH."""
    for candidate in ("/usr/bin/docker", shutil.which("docker")):
        if candidate and Path(candidate).exists():
            return candidate
    raise EngineUnavailable("no docker client found (apt-get install docker.io)")


class DockerEngine:
    """One dockerd under `workdir`; every docker command of a test goes through `docker()`."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.socket = workdir / "docker.sock"
        self.log_path = workdir / "dockerd.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.cli = docker_cli()

    @property
    def env(self) -> dict[str, str]:
        """Environment for docker / docker-compose clients talking to this daemon only."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
        env["DOCKER_HOST"] = f"unix://{self.socket}"
        env["DOCKER_BUILDKIT"] = "0"  # docker.io 20.10: the classic builder, nothing to pull
        return env

    @classmethod
    def start(cls, workdir: Path, timeout: float = 90.0) -> DockerEngine:
        ensure_docker()
        engine = cls(workdir)
        engine._start(timeout)
        return engine

    def _start(self, timeout: float) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if len(str(self.workdir / "exec" / "containerd" / "containerd.sock")) > 100:
            raise EngineUnavailable(f"{self.workdir} is too long for the daemon's unix sockets")
        cmd = [
            DOCKERD,
            "--storage-driver=vfs",
            "--iptables=false",
            "--ip-masq=false",
            "--bridge=none",
            f"--data-root={self.workdir / 'data'}",
            f"--exec-root={self.workdir / 'exec'}",
            f"--pidfile={self.workdir / 'dockerd.pid'}",
            f"--host=unix://{self.socket}",
        ]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise EngineUnavailable(f"dockerd exited with {self.proc.returncode}:\n"
                                        f"{self.log_tail()}")
            if self.socket.exists():
                r = self.docker("version", "--format", "{{.Server.Version}}", check=False,
                                timeout=20)
                if r.returncode == 0:
                    return
            time.sleep(0.3)
        self.stop()
        raise EngineUnavailable(f"dockerd did not answer within {timeout:.0f} s:\n"
                                f"{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def docker(
        self,
        *args: str,
        check: bool = True,
        timeout: float = 120.0,
        input: bytes | str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run one docker client command against this daemon; raise with its output on error."""
        r = subprocess.run([self.cli, *args], env=self.env, capture_output=True, text=True,
                           timeout=timeout, input=input)
        if check and r.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} failed ({r.returncode}):\n"
                                 f"{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        return r

    def popen(self, *args: str) -> subprocess.Popen[bytes]:
        """A long-running client command (e.g. `docker run -i`), pipes for all three streams."""
        return subprocess.Popen([self.cli, *args], env=self.env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def import_tree(self, tree: Path, tag: str, changes: Sequence[str] = (),
                    exclude: Sequence[str] = ()) -> None:
        """`docker import` a directory as a one-layer image (numeric owners kept)."""
        tarball = self.workdir / f"import-{os.getpid()}.tar"
        with tarfile.open(tarball, "w") as tar:
            for entry in sorted(tree.iterdir()):
                if entry.name not in exclude:
                    tar.add(entry, arcname=entry.name)
        try:
            self.import_tarball(tarball, tag, changes)
        finally:
            tarball.unlink()

    def import_tarball(self, tarball: Path, tag: str, changes: Sequence[str] = ()) -> None:
        args = ["import"]
        for change in changes:
            args += ["--change", change]
        self.docker(*args, str(tarball), tag, timeout=600)

    def inspect(self, name: str) -> dict[str, object]:
        out = self.docker("inspect", name).stdout
        data: list[dict[str, object]] = json.loads(out)
        return data[0]

    def state(self, container: str) -> Mapping[str, object]:
        state = self.inspect(container)["State"]
        assert isinstance(state, dict)
        return state

    def remove_all_containers(self) -> None:
        ids = self.docker("ps", "-aq", check=False, timeout=30).stdout.split()
        if ids:
            self.docker("rm", "-f", *ids, check=False, timeout=120)

    def stop(self) -> None:
        """Remove every container, then stop dockerd by PID (SIGTERM, then SIGKILL)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                self.remove_all_containers()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: dockerd + containerd
                self.proc.wait(10)
        self.proc = None
        self._unmount_leftovers()
        # vfs layers are full copies: do not leave hundreds of MB behind in the temp dir.
        shutil.rmtree(self.workdir / "data", ignore_errors=True)

    def _unmount_leftovers(self) -> None:
        """Mounts a killed daemon can leave under its roots (netns files, container shm)."""
        prefix = f"{self.workdir}/"
        try:
            lines = Path("/proc/self/mountinfo").read_text().splitlines()
        except OSError:
            return
        points = [ln.split()[4].replace("\\040", " ") for ln in lines if len(ln.split()) > 4]
        for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)


def engine_or_skip(workdir: Path) -> Iterator[DockerEngine]:
    """The body of an engine fixture: a started engine, skipped with the reason where none can
    start, stopped (by PID) afterwards."""
    import pytest

    try:
        eng = DockerEngine.start(workdir)
    except EngineUnavailable as exc:
        pytest.skip(f"no Docker engine can start here: {exc}")
    try:
        yield eng
    finally:
        eng.stop()
