"""build/sbom.py and `gantry version --json`: what is inside the binary, named twice (the SBOM
from the compilation report, the payload's list for the CLI) and required to agree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gantry import buildinfo

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "build"))

import sbom  # noqa: E402

REPORT = """<?xml version='1.0' encoding='utf8'?>
<nuitka-compilation-report>
  <module name="__main__" kind="CompiledPythonModule"/>
  <module name="gantry.cli" kind="UncompiledPythonModule" distribution="gantry"/>
  <module name="aiogram" kind="UncompiledPythonModule" distribution="aiogram"/>
  <module name="aiogram.types" kind="UncompiledPythonModule" distribution="aiogram"/>
  <module name="pydantic_core" kind="UncompiledPythonModule" distribution="pydantic_core"/>
  <module name="ns.pkg" kind="UncompiledPythonModule" distribution="Typing_Extensions,attrs"/>
  <included_dll name="libssl.so.3" source_path="/nowhere/libssl.so.3"/>
  <included_dll name="libz.so.1" source_path="${sys.prefix}/libz.so.1"/>
</nuitka-compilation-report>
"""
INFO = {"version": "1.2.3", "commit": "c0ffee", "build_date": "2023-11-14T22:13:20Z"}


def test_report_distributions_are_canonical_sorted_and_without_gantry(tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    report.write_text(REPORT)
    assert sbom.report_distributions(report) == [
        "aiogram", "attrs", "pydantic-core", "typing-extensions"]
    # Nuitka's relative paths are not system libraries; absolute ones and carried ones are.
    assert sbom.system_libraries(report, {"libc.so.6": "/x/libc.so.6"}) == [
        "/nowhere/libssl.so.3", "/x/libc.so.6"]


@pytest.mark.parametrize(("meta", "classifiers", "expected"), [
    ({"License-Expression": "MIT OR Apache-2.0", "License": "ignored"}, [], "MIT OR Apache-2.0"),
    ({"License": "BSD-3-Clause"}, ["License :: OSI Approved :: MIT License"], "BSD-3-Clause"),
    ({"License": "Long text\nof a whole licence"}, ["License :: OSI Approved :: MIT License"],
     "MIT License"),
    ({"License": "UNKNOWN"}, [], None),
    ({}, ["License :: OSI Approved :: MIT License", "License :: OSI Approved :: BSD License"],
     "MIT License OR BSD License"),
])
def test_licence_as_the_metadata_states_it(meta: dict[str, str], classifiers: list[str],
                                           expected: str | None) -> None:
    assert sbom.licence_of(meta, classifiers) == expected


def test_the_sbom_is_cyclonedx_and_the_same_for_the_same_build() -> None:
    parts = sbom.python_parts(["msgspec", "anyio"])
    one = sbom.build_bom(INFO, parts, "3.11.7", "4.3.3")
    two = sbom.build_bom(INFO, list(reversed(parts)), "3.11.7", "4.3.3")
    assert one == two, "deterministic: no random serial number, no wall-clock timestamp"
    data = json.loads(one)
    assert data["bomFormat"] == "CycloneDX" and data["specVersion"] == "1.6"
    assert data["metadata"]["timestamp"].startswith("2023-11-14T22:13:20")
    assert data["metadata"]["component"]["version"] == "1.2.3"
    found = {c["name"]: c for c in data["components"]}
    assert set(found) == {"anyio", "msgspec", "cpython", "nuitka"}
    from importlib import metadata

    assert found["msgspec"]["version"] == metadata.version("msgspec")
    assert found["msgspec"]["purl"] == f"pkg:pypi/msgspec@{metadata.version('msgspec')}"
    assert found["anyio"]["licenses"], "licences come from the distribution's metadata"
    assert {d["ref"] for d in data["dependencies"]} >= {found["anyio"]["bom-ref"]}
    assert sbom.build_bom({**INFO, "commit": "other"}, parts, "3.11.7", "4.3.3") != one


def test_each_machines_sbom_has_its_own_serial_number() -> None:
    """The arm64 binary of a commit is another artifact than the amd64 one: another serial
    (issue 43); the amd64 one's is what it always was (uuid5 of gantry:VERSION:COMMIT:DATE)."""
    import uuid

    parts = sbom.python_parts(["msgspec"])
    amd64 = json.loads(sbom.build_bom(INFO, parts, "3.11.7", "4.3.3"))
    arm64 = json.loads(sbom.build_bom(INFO, parts, "3.11.2", "4.3.3", "gantry-linux-arm64"))
    when = "2023-11-14T22:13:20+00:00"
    seed = f"gantry:{INFO['version']}:{INFO['commit']}:{when}"
    assert amd64["serialNumber"] == uuid.uuid5(uuid.NAMESPACE_URL, seed).urn
    assert arm64["serialNumber"] != amd64["serialNumber"]


def test_payload_list_and_report_must_agree(tmp_path: Path) -> None:
    listed = tmp_path / "distributions.json"
    listed.write_text(json.dumps({"aiogram": "3.31.0", "attrs": "1"}))
    sbom.check_agrees(["aiogram", "attrs"], listed)
    with pytest.raises(SystemExit, match=r"only in the payload \['attrs'\]"):
        sbom.check_agrees(["aiogram"], listed)


def test_build_writes_the_list_where_gantry_reads_it() -> None:
    text = (ROOT / "build" / "build.py").read_text()
    assert f'DISTRIBUTIONS_JSON = "gantry/{buildinfo.DISTRIBUTIONS_FILE}"' in text


def test_version_json_reads_the_bundled_list(tmp_path: Path) -> None:
    (tmp_path / buildinfo.DISTRIBUTIONS_FILE).write_text('{"aiogram": "3.31.0"}')
    assert buildinfo.distributions(str(tmp_path)) == {"aiogram": "3.31.0"}
    (tmp_path / buildinfo.DISTRIBUTIONS_FILE).write_text("not json")
    assert buildinfo.distributions(str(tmp_path)) == {}  # a damaged file is no traceback


def test_version_json_from_source_lists_the_installed_runtime_closure() -> None:
    out = subprocess.run([sys.executable, "-m", "gantry", "version", "--json"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    dists = json.loads(out)["distributions"]
    from importlib import metadata

    for name in ("aiogram", "mcp", "pydantic", "pydantic-core", "apsw", "msgspec"):
        assert dists[name] == metadata.version(name)
    assert "gantry" not in dists
    assert "pytest" not in dists and "hypothesis" not in dists  # test extra, not runtime
