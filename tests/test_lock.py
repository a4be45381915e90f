"""uv.lock and its exports in lock/: every environment the project installs is pinned with
hashes, from one resolution, and every installer (nox sessions, .ci/run, the Dockerfile's
builder) installs from them with hash checking instead of resolving."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOXFILE = ROOT / "noxfile.py"
REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)(?: ;.*)? \\$")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _locked() -> dict[str, str]:
    data = tomllib.loads((ROOT / "uv.lock").read_text())
    return {_canonical(p["name"]): p["version"] for p in data["package"] if "version" in p}


def _exports() -> dict[str, str]:
    tree = ast.parse(NOXFILE.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.AnnAssign)
                and getattr(n.target, "id", "") == "LOCK_EXPORTS")
    assert node.value is not None
    return ast.literal_eval(node.value)


def _pins(path: Path) -> dict[str, str]:
    """name -> version of a uv export, checking every requirement carries a sha256 hash."""
    pins: dict[str, str] = {}
    blocks = re.split(r"\n(?=\S)", path.read_text())
    for block in blocks:
        first = block.splitlines()[0]
        if first.startswith("#") or not first.strip():
            continue
        m = REQ.match(first)
        assert m, f"{path.name}: not a pinned requirement: {first!r}"
        assert "--hash=sha256:" in block, f"{path.name}: {m.group(1)} has no hash"
        pins[_canonical(m.group(1))] = m.group(2)
    return pins


@pytest.mark.parametrize("name", sorted(_exports()))
def test_every_export_pins_uv_lock_versions_with_hashes(name: str) -> None:
    pins = _pins(ROOT / "lock" / f"{name}.txt")
    assert pins, name
    locked = _locked()
    assert {k: v for k, v in pins.items() if locked.get(k) != v} == {}, "stale: nox -s lock"


def test_exports_cover_the_environments() -> None:
    pins = {name: _pins(ROOT / "lock" / f"{name}.txt") for name in _exports()}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(reqs: list[str]) -> set[str]:
        return {_canonical(re.match(r"[A-Za-z0-9._-]+", r).group(0)) for r in reqs}  # type: ignore[union-attr]

    runtime = names(project["dependencies"])
    assert runtime <= set(pins["runtime"])
    for env in ("test", "lint", "build"):
        assert runtime | names(project["optional-dependencies"][env]) <= set(pins[env]), env
    assert "gantry" not in set().union(*pins.values()), "the project itself is installed -e"
    assert {"setuptools", "wheel"} <= set(pins["backend"])  # builds run without isolation
    assert "nox" in pins["ci"] and "uv" in pins["lock"]
    text = (ROOT / "build" / "build.py").read_text()
    pinned = re.search(r'^NUITKA_VERSION = "([^"]+)"', text, re.M)
    assert pinned and pins["build"]["nuitka"] == pinned.group(1)


def test_nox_sessions_install_only_through_the_lock() -> None:
    """Every session.install sits in install_locked, which hash-checks lock/<env>.txt and then
    installs gantry itself without dependencies and without build isolation."""
    tree = ast.parse(NOXFILE.read_text())
    outside = []
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        calls = [c for c in ast.walk(fn) if isinstance(c, ast.Call)
                 and isinstance(c.func, ast.Attribute) and c.func.attr == "install"]
        if fn.name == "install_locked":
            args = [[ast.unparse(a) for a in c.args] for c in calls]
            assert all("'--require-hashes'" in a for a in args[:2]), args
            assert args[2][:2] == ["'--no-deps'", "'--no-build-isolation'"], args
        else:
            outside += [f"{fn.name}:{c.lineno}" for c in calls]
    assert outside == []


def test_ci_runs_nox_from_the_lock() -> None:
    text = (ROOT / ".ci" / "run").read_text()
    assert "--require-hashes -r lock/ci.txt" in text
    assert "pip install nox" not in text


def test_dockerfile_builder_installs_the_lock_with_hashes() -> None:
    text = " ".join((ROOT / "Dockerfile.distroless").read_text().replace("\\\n", " ").split())
    assert "COPY lock/backend.txt lock/build.txt ./lock/" in text
    assert "pip install --require-hashes --no-deps -r lock/backend.txt" in text
    assert "pip install --require-hashes --no-build-isolation -r lock/build.txt" in text
    assert re.search(r"pip install --no-deps --no-build-isolation \S*\.", text)


def _tags(machine: str, wheels: list[str]) -> set[str]:
    """Python/ABI tags of the wheels for `machine` that Python 3.11 on glibc can install."""
    out = set()
    for name in wheels:
        parts = name[:-len(".whl")].split("-")
        py, abi, plat = parts[-3], parts[-2], parts[-1]
        if machine in plat and "manylinux" in plat and (
                "cp311" in py or abi == "abi3" or py.startswith("py3")):
            out.add(f"{py}-{abi}")
    return out


def test_every_binary_wheel_for_amd64_has_an_arm64_twin() -> None:
    """The lock serves a linux/arm64 builder too: no package is installable on x86-64 only
    (a source build there would need a compiler toolchain the image may lack)."""
    data = tomllib.loads((ROOT / "uv.lock").read_text())
    missing = []
    for package in data["package"]:
        wheels = [w["url"].rsplit("/", 1)[-1] for w in package.get("wheels", [])]
        if any(w.endswith("-none-any.whl") for w in wheels):
            continue
        if _tags("x86_64", wheels) - _tags("aarch64", wheels):
            missing.append(package["name"])
    assert missing == []
