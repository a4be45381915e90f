"""dist/gantry as a container image in a real Docker engine, run the way compose.yml runs it.

A private dockerd (tests/engine.py: vfs, no iptables, no bridge, own sockets) imports the
distroless look-alike rootfs of tests/binary/rootfs.py and tags it as
``gcr.io/distroless/static-debian12:nonroot``; the image is then built from the *final stage
of Dockerfile.distroless*, copied verbatim except that the binary comes from dist/ instead of
the builder stage. Nothing is pulled. The container gets compose.yml's own settings — read
from the file: read-only root, its tmpfs line, init, volumes, env_file, stop grace — plus
``--network host`` so the loopback fake model is reachable, and the image's exec-form
``gantry status`` healthcheck with only its timing shortened.

The tests named ``*_issue9_*`` check the onefile start-up fixes of issue 9 (locale, a /tmp
without exec, SIGHUP forwarding); they fail, not skip, on a binary built without them.
Skipped (with the reason) only where no Docker engine can start.
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
import yaml

from tests.binary.conftest import ROOT
from tests.binary.rootfs import IMAGE_ENV, INSTALL_PATH, NONROOT_UID, ensure_base_rootfs
from tests.engine import DockerEngine, engine_or_skip
from tests.procs import ChildIO

pytestmark = [pytest.mark.binary, pytest.mark.slow]

BASE_TAG = "gcr.io/distroless/static-debian12:nonroot"
IMAGE = "gantry:local"
KEY = "sk-docker-smoke"
WAIT = 120.0  # first start unpacks the payload into the tmpfs; vfs and a busy machine
STOP_GRACE = 10  # compose.yml's stop_grace_period, checked below against the file


def _compose_service() -> dict[str, Any]:
    svc: dict[str, Any] = yaml.safe_load((ROOT / "compose.yml").read_text())["services"]["gantry"]
    return svc


def final_stage_dockerfile() -> str:
    """Dockerfile.distroless's last stage, with the builder's output replaced by dist/gantry."""
    text = (ROOT / "Dockerfile.distroless").read_text()
    lines = text.splitlines()
    start = max(i for i, ln in enumerate(lines) if ln.upper().startswith("FROM "))
    stage = "\n".join(lines[start:]) + "\n"
    needle = f"COPY --from=binary /src/dist/gantry {INSTALL_PATH}"
    assert stage.count(needle) == 1, "the final stage no longer copies the builder's binary"
    return stage.replace(needle, f"COPY gantry {INSTALL_PATH}")


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerEngine]:
    yield from engine_or_skip(tmp_path_factory.mktemp("dockerd"))


@pytest.fixture(scope="module")
def image(engine: DockerEngine, binary: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    base = ensure_base_rootfs()
    changes = [f"ENV {k}={v}" for k, v in IMAGE_ENV.items() if k != "HOME"]  # HOME: passwd
    changes += [f"USER {NONROOT_UID}", "WORKDIR /home/nonroot"]
    engine.import_tree(base, BASE_TAG, changes, exclude=(".complete",))
    ctx = tmp_path_factory.mktemp("image-context")
    shutil.copy2(binary, ctx / "gantry")
    (ctx / "gantry").chmod(0o755)
    (ctx / "Dockerfile").write_text(final_stage_dockerfile())
    engine.docker("build", "--pull=false", "-t", IMAGE, str(ctx), timeout=600)
    return IMAGE


@pytest.fixture
def fake_model() -> Iterator[Any]:
    from tests.fakes.openai import FakeOpenAI

    server = FakeOpenAI(api_key=KEY)
    server.start_in_thread()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def project(tmp_path: Path, fake_model: Any) -> Path:
    """A copy of what compose.yml mounts (deploy/...) plus a .env from deploy/.env.example."""
    proj = tmp_path / "project"
    proj.mkdir()
    shutil.copy(ROOT / "compose.yml", proj / "compose.yml")
    shutil.copytree(ROOT / "deploy", proj / "deploy",
                    ignore=shutil.ignore_patterns(".gitkeep", "gantry.db*"))
    os.chown(proj / "deploy" / "data", NONROOT_UID, NONROOT_UID)  # the README's chown step
    for p in [proj, *proj.rglob("*")]:
        p.chmod(p.stat().st_mode | 0o055)  # readable by uid 65532 inside
    sample = (ROOT / "deploy" / ".env.example").read_text().splitlines()
    filled = {"LLM_BASE_URL": fake_model.base_url, "LLM_API_KEY": KEY, "LLM_MODEL": "fake"}
    env_lines = [f"{ln.split('=', 1)[0]}={filled[ln.split('=', 1)[0]]}"
                 if ln.split("=", 1)[0] in filled else ln for ln in sample]
    env_lines += ["CHANNEL=stdio"]
    (proj / ".env").write_text("\n".join(env_lines) + "\n")
    return proj


def compose_run_args(proj: Path, name: str, tmpfs: list[str] | None = None) -> list[str]:
    """`docker run` flags for compose.yml's service, read from the file (not restated here)."""
    svc = _compose_service()
    args = ["--name", name, "--network", "host", "--env-file", str(proj / svc["env_file"])]
    for key, value in svc.get("environment", {}).items():  # -e wins over --env-file, as in compose
        args += ["-e", f"{key}={value}"]
    if svc.get("read_only"):
        args.append("--read-only")
    for entry in svc["tmpfs"] if tmpfs is None else tmpfs:
        args += ["--tmpfs", entry]
    if svc.get("init"):
        args.append("--init")
    grace = svc["stop_grace_period"]
    assert grace == f"{STOP_GRACE}s", grace
    args += ["--stop-timeout", str(STOP_GRACE)]
    for vol in svc["volumes"]:
        host, rest = vol.split(":", 1)
        assert host.startswith("./"), vol
        args += ["-v", f"{proj / host[2:]}:{rest}"]
    # The image's exec-form healthcheck (`gantry status`), polled every second instead of 30 s.
    args += ["--health-interval", "1s", "--health-retries", "3", "--health-timeout", "10s"]
    return args


class Container(ChildIO):
    """`docker run -i` of the image: stdin/stdout are gantry's stdio channel."""

    default_wait = WAIT

    def __init__(self, engine: DockerEngine, name: str, args: list[str]) -> None:
        self.engine = engine
        self.name = name
        super().__init__(engine.popen("run", "-i", *args, IMAGE, "run"))

    def health(self) -> str:
        r = self.engine.docker("inspect", "-f", "{{.State.Health.Status}}", self.name,
                               check=False, timeout=30)
        return r.stdout.strip()

    def wait_healthy(self, timeout: float = WAIT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.health() == "healthy":
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        log = self.engine.docker("inspect", "-f", "{{json .State.Health}}", self.name,
                                 check=False).stdout
        pytest.fail(f"container never turned healthy: {self.health()!r}\n{log[-2000:]}"
                    f"{self._diag()}")


@pytest.fixture
def containers(engine: DockerEngine) -> Iterator[list[str]]:
    """Names of containers a test starts; each is removed (by name) at teardown."""
    names: list[str] = []
    try:
        yield names
    finally:
        for name in names:
            engine.docker("rm", "-f", name, check=False, timeout=60)


def _start(engine: DockerEngine, containers: list[str], proj: Path, name: str,
           extra: list[str] | None = None, tmpfs: list[str] | None = None) -> Container:
    containers.append(name)
    return Container(engine, name, [*compose_run_args(proj, name, tmpfs), *(extra or [])])


def _status_in(engine: DockerEngine, proj: Path) -> subprocess.CompletedProcess[str]:
    """`gantry status` in a fresh container on the same /data (as after a stop)."""
    data = f"{proj / 'deploy' / 'data'}:/data"
    return engine.docker("run", "--rm", "--read-only", "--tmpfs", "/tmp:exec,mode=1777",
                         "-v", data, "--entrypoint", INSTALL_PATH, IMAGE, "status",
                         check=False, timeout=WAIT)


# ----------------------------------------------------------------------------- image, compose


def test_image_is_the_final_stage_on_the_look_alike_base(engine: DockerEngine, image: str) -> None:
    cfg = engine.inspect(image)["Config"]
    assert isinstance(cfg, dict)
    assert cfg["User"] == "nonroot"
    assert cfg["WorkingDir"] == "/data"
    assert cfg["Entrypoint"] == [INSTALL_PATH]
    assert cfg["Cmd"] == ["run"]
    assert cfg["Healthcheck"]["Test"] == ["CMD", INSTALL_PATH, "status"]
    assert _compose_service()["healthcheck"]["test"] == ["CMD", INSTALL_PATH, "status"]
    assert f"SSL_CERT_FILE={IMAGE_ENV['SSL_CERT_FILE']}" in cfg["Env"]
    tags = engine.docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
    assert sorted(tags) == sorted([BASE_TAG, IMAGE]), "something was pulled"


def test_compose_config_accepts_compose_yml_with_the_sample_env(
    engine: DockerEngine, project: Path
) -> None:
    r = subprocess.run(["docker-compose", "--project-directory", str(project), "-f",
                        str(project / "compose.yml"), "config"], env=engine.env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rendered = r.stdout
    assert "read_only: true" in rendered
    assert "/tmp:rw,exec,nosuid,nodev,mode=1777,size=256m" in rendered
    assert "init: true" in rendered
    assert f"- {INSTALL_PATH}\n      - status" in rendered
    assert f"LLM_API_KEY: {KEY}" in rendered  # the .env was read


# ----------------------------------------------------------------------------- run


def _answers_turns_turns_healthy_and_stops_clean(
    engine: DockerEngine, containers: list[str], project: Path, fake_model: Any,
    name: str, extra: list[str],
) -> None:
    from tests.fakes.openai import Echo

    c = _start(engine, containers, project, name, extra)
    c.send("hello from docker")
    c.expect("echo: hello from docker\n")
    c.wait_healthy()
    assert fake_model.last_request.headers.get("Authorization") == f"Bearer {KEY}"

    # `docker stop` with a turn in flight: the drain lets it finish, then exit 0 (no SIGKILL).
    fake_model.push(Echo(delay=3))
    c.send("slow one")
    deadline = time.monotonic() + WAIT
    while not any("slow one" in r.last_user_text for r in fake_model.requests):
        assert time.monotonic() < deadline, "the slow turn never reached the model"
        time.sleep(0.05)
    t0 = time.monotonic()
    engine.docker("stop", name, timeout=60)
    took = time.monotonic() - t0
    assert c.wait_exit(30) == 0, c.stderr[-3000:]
    assert engine.state(name)["ExitCode"] == 0
    assert took < STOP_GRACE, f"docker stop took {took:.1f} s: the app was killed, not drained"
    assert "waiting for the in-flight turn" in c.stderr
    assert "gantry stopped" in c.stderr
    assert "Traceback" not in c.stderr and KEY not in c.stderr
    # The clean stop left its mark: the healthcheck says so at once, not after 60 s.
    after = _status_in(engine, project)
    assert after.returncode == 1, after
    assert after.stdout.startswith("unhealthy: gantry stopped cleanly"), after.stdout


def test_compose_settings_answer_turn_healthy_and_stop_exits_0(
    engine: DockerEngine, image: str, containers: list[str], project: Path, fake_model: Any
) -> None:
    _answers_turns_turns_healthy_and_stops_clean(engine, containers, project, fake_model,
                                                 "gantry-compose", [])


def test_issue9_lang_c_utf8_container_runs_like_any_other(
    engine: DockerEngine, image: str, containers: list[str], project: Path, fake_model: Any
) -> None:
    """Issue 9 §1: LANG=C.UTF-8 (countless env files set it) used to abort the bootstrap
    with SIGABRT and no message; the same run, healthcheck and stop must work with it."""
    with open(project / ".env", "a") as f:
        f.write("LANG=C.UTF-8\n")
    r = engine.docker("run", "--rm", "--env-file", str(project / ".env"), "--read-only",
                      "--tmpfs", _compose_service()["tmpfs"][0], IMAGE, "version",
                      check=False, timeout=WAIT)
    assert r.returncode == 0, f"`gantry version` with LANG=C.UTF-8: {r}"
    _answers_turns_turns_healthy_and_stops_clean(engine, containers, project, fake_model,
                                                 "gantry-lang", [])


def test_issue9_docker_default_noexec_tmp_fails_with_one_clear_line(
    engine: DockerEngine, image: str, project: Path
) -> None:
    """Issue 9 §3: `--tmpfs /tmp` alone is noexec; instead of Nuitka's "couldn't launch child"
    and exit 2, one line saying /tmp needs exec, exit 1 — for `version` and for `run`."""
    for command in ("version", "run"):
        r = engine.docker("run", "--rm", "-i", "--read-only", "--tmpfs", "/tmp",
                          "--env-file", str(project / ".env"), "--network", "host",
                          IMAGE, command, check=False, timeout=WAIT, input="")
        assert r.returncode == 1, f"{command}: {r}"
        err = r.stderr.strip()
        assert "couldn't launch child" not in err, err
        lines = err.splitlines()
        assert len(lines) == 1, err
        assert "/tmp" in lines[0] and "exec" in lines[0], err


def test_issue9_docker_kill_hup_reloads_persona_and_keeps_running(
    engine: DockerEngine, image: str, containers: list[str], project: Path, fake_model: Any
) -> None:
    """Issue 9 §5: SIGHUP reaches the bootstrap (through init); it must forward it to the app,
    which reloads the persona, and keep running (it used to exit 1 on the signal)."""
    persona = project / "deploy" / "persona" / "PERSONA.md"
    c = _start(engine, containers, project, "gantry-hup")
    c.send("before")
    c.expect("echo: before\n")
    system_before = fake_model.last_request.messages[0]["content"]
    persona.write_text("You are the reloaded persona of the Docker test.\n")
    engine.docker("kill", "-s", "HUP", "gantry-hup")
    deadline = time.monotonic() + 30
    while c.stderr.count('"persona loaded"') < 2:
        assert c.proc.poll() is None, f"SIGHUP ended the container{c._diag()}"
        assert time.monotonic() < deadline, f"no persona reload after SIGHUP{c._diag()}"
        time.sleep(0.2)
    c.send("after")
    c.expect("echo: after\n")
    assert engine.state("gantry-hup")["Running"] is True
    system_after = fake_model.last_request.messages[0]["content"]
    assert "reloaded persona of the Docker test" in system_after
    assert system_after != system_before
    engine.docker("stop", "gantry-hup", timeout=60)
    assert c.wait_exit(30) == 0, c.stderr[-3000:]
