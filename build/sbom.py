"""What is inside dist/gantry: a CycloneDX SBOM and the bundled-distribution list.

build/build.py calls `write_sbom` after Nuitka, from the compilation report (which module came
from which distribution, which system libraries were copied in, which Python compiled it) and
the build environment (versions, licences from each distribution's metadata; Debian package of
each system library from dpkg). The plugin (build/static_onefile.py) writes the same
distribution list into the payload for `gantry version --json`; `check_agrees` makes the build
fail if the two ever differ. Serialising is cyclonedx-python-lib's (validated CycloneDX 1.6).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

MAIN = "gantry"
CLASSIFIER = "License :: OSI Approved :: "


def canonical(name: str) -> str:
    """PEP 503 name: what pip, PyPI and purls use."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distributions_of(names: Iterable[str | None]) -> list[str]:
    """Canonical distribution names, sorted, without gantry itself (the SBOM's subject).
    A report attribute may name several distributions, comma separated."""
    out = {canonical(part) for value in names if value for part in value.split(",") if part}
    out.discard(MAIN)
    return sorted(out)


def report_distributions(report: Path) -> list[str]:
    """Distributions whose modules the compilation report lists (compiled or bytecode)."""
    root = ET.parse(report).getroot()
    return distributions_of(m.get("distribution") for m in root.iter("module"))


def licence_of(meta: Mapping[str, str], classifiers: Iterable[str]) -> str | None:
    """The distribution's licence as its metadata states it: PEP 639's License-Expression,
    else a one-line License field, else the OSI classifiers joined with OR."""
    expression = (meta.get("License-Expression") or "").strip()
    if expression:
        return expression
    text = (meta.get("License") or "").strip()
    if text and "\n" not in text and len(text) <= 80 and text.upper() != "UNKNOWN":
        return text
    named = [c[len(CLASSIFIER):] for c in classifiers if c.startswith(CLASSIFIER)]
    return " OR ".join(named) or None


@dataclass(frozen=True)
class Part:
    """One component of the binary."""

    name: str
    version: str
    purl: str
    licences: tuple[str, ...] = ()  # one SPDX expression (PyPI) or licence names (Debian)
    kind: str = "library"
    properties: tuple[tuple[str, str], ...] = field(default=())


def python_parts(names: Iterable[str]) -> list[Part]:
    """Each bundled distribution as installed in the build environment."""
    parts = []
    for name in names:
        dist = metadata.distribution(name)
        meta = dist.metadata
        version = dist.version
        licence = licence_of(meta, meta.get_all("Classifier") or [])  # type: ignore[arg-type]
        parts.append(Part(name, version, f"pkg:pypi/{name}@{version}",
                          (licence,) if licence else ()))
    return parts


def _dpkg(*args: str) -> str:
    try:
        return subprocess.run(["dpkg-query", *args], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def debian_parts(paths: Iterable[str]) -> tuple[list[Part], list[str]]:
    """The Debian packages owning the copied system libraries; paths no package owns."""
    owners: dict[str, list[str]] = {}
    unowned = []
    for path in sorted(set(paths)):
        line = next(filter(None, (_dpkg("-S", c) for c in _merged_usr(path))), "")
        if not line:
            unowned.append(path)
            continue
        # "<package>:<arch>: <path>"
        owners.setdefault(line.splitlines()[0].split(": ", 1)[0], []).append(Path(path).name)
    parts = []
    for package, files in sorted(owners.items()):
        name, _, arch = package.partition(":")
        version = _dpkg("-W", "-f", "${Version}", package)
        query = f"?arch={arch}" if arch else ""
        parts.append(Part(name, version, f"pkg:deb/debian/{name}@{version}{query}",
                          _debian_licences(name), "library",
                          (("gantry:files", " ".join(sorted(files))),)))
    return parts, unowned


def _merged_usr(path: str) -> list[str]:
    """The names dpkg may have recorded a library under (Debian 12 merged /lib into /usr/lib
    but its database keeps the packages' own paths)."""
    real = str(Path(path).resolve())
    names = [path, real]
    for name in (path, real):
        if name.startswith("/usr/lib/"):
            names.append(name[len("/usr"):])
        elif name.startswith("/lib/"):
            names.append("/usr" + name)
    return list(dict.fromkeys(names))


def _debian_licences(package: str) -> tuple[str, ...]:
    """License: names of the package's machine-readable (DEP-5) copyright file, if any."""
    path = Path("/usr/share/doc") / package / "copyright"
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ()
    if not text.startswith("Format:"):
        return ()
    return tuple(sorted({m.group(1).strip() for m in re.finditer(
        r"^License:[ \t]*(\S[^\n]*)$", text, re.M)}))


def system_libraries(report: Path, carried: Mapping[str, str]) -> list[str]:
    """Source paths of the shared libraries in the payload that come from the system, not
    from a wheel: Nuitka's included DLLs and the plugin's carried loader and glibc."""
    root = ET.parse(report).getroot()
    paths = [n.get("source_path", "") for n in root.iter("included_dll")]
    return sorted({p for p in paths if p.startswith("/")} | set(carried.values()))


def build_bom(info: Mapping[str, str], parts: list[Part], python: str, nuitka: str,
              artifact: str = MAIN) -> str:
    """The SBOM as CycloneDX 1.6 JSON; serial number and timestamp follow from the build info
    (and the artifact's name, so each machine's binary has its own serial), so two builds of
    a commit with one SOURCE_DATE_EPOCH write the same file."""
    from cyclonedx.contrib.license.factories import LicenseFactory
    from cyclonedx.model import Property
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.model.license import LicenseExpression
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    factory = LicenseFactory()

    def licences(part: Part) -> list[object]:
        if part.purl.startswith("pkg:deb/"):  # Debian's names are not SPDX: named licences
            return [factory.make_with_name(n) for n in part.licences]
        made = [factory.make_from_string(text) for text in part.licences]
        return [m for m in made if not isinstance(m, LicenseExpression) or m.value]

    def component(part: Part) -> Component:
        purl = PackageURL.from_string(part.purl)
        return Component(
            name=part.name, version=part.version, bom_ref=str(purl),
            type=ComponentType(part.kind), purl=purl,
            licenses=licences(part),  # type: ignore[arg-type]
            properties=[Property(name=k, value=v) for k, v in part.properties],
        )

    extra = [
        Part("cpython", python, f"pkg:generic/cpython@{python}", ("PSF-2.0",), "framework",
             (("gantry:role", "interpreter and standard library, linked in"),)),
        Part("nuitka", nuitka, f"pkg:pypi/nuitka@{nuitka}", ("Apache-2.0",), "framework",
             (("gantry:role", "compiler; its C runtime and onefile bootstrap are linked in"),)),
    ]
    main = Component(name=MAIN, version=info["version"], type=ComponentType.APPLICATION,
                     bom_ref=f"pkg:generic/gantry@{info['version']}",
                     purl=PackageURL("generic", name=MAIN, version=info["version"]),
                     licenses=[factory.make_from_string("MIT")],
                     properties=[Property(name="gantry:commit", value=info["commit"])])
    when = dt.datetime.fromisoformat(info["build_date"].replace("Z", "+00:00"))
    components = [component(p) for p in sorted(extra + parts, key=lambda p: p.purl)]
    bom = Bom(
        components=components,
        serial_number=uuid.uuid5(uuid.NAMESPACE_URL,
                                 f"{artifact}:{info['version']}:{info['commit']}:"
                                 f"{when.isoformat()}"),
        metadata=BomMetaData(component=main, timestamp=when),
    )
    bom.register_dependency(main, components)  # all of them are inside the one file
    text = JsonV1Dot6(bom).output_as_string(indent=2)
    data = json.loads(text)
    data.get("metadata", {}).pop("tools", None)  # the library names itself with its version
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def check_agrees(report_names: list[str], payload_list: Path) -> None:
    """The payload's distribution list (plugin) must name what the report names."""
    bundled = sorted(json.loads(payload_list.read_text()))
    if bundled != report_names:
        raise SystemExit(
            "build: gantry/distributions.json and the compilation report disagree: "
            f"only in the payload {sorted(set(bundled) - set(report_names))}, "
            f"only in the report {sorted(set(report_names) - set(bundled))}")


def write_sbom(out: Path, report: Path, carried: Mapping[str, str], info: Mapping[str, str],
               python: str, nuitka: str, artifact: str = MAIN) -> list[str]:
    """dist/gantry.cdx.json (or ARTIFACT.cdx.json); returns the system library paths no Debian
    package owns."""
    names = report_distributions(report)
    debs, unowned = debian_parts(system_libraries(report, carried))
    out.write_text(build_bom(info, python_parts(names) + debs, python, nuitka, artifact))
    return unowned
