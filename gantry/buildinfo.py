"""Build information for `gantry version`: embedded when frozen, read from git otherwise."""

from __future__ import annotations

import os
import sys

from gantry import __version__


def frozen() -> bool:
    """Whether this is the built executable (its build info is embedded), not a source run."""
    try:
        import gantry._build_info  # type: ignore[import-not-found,unused-ignore]  # noqa: F401
    except ImportError:
        return False
    return True


def _from_git() -> tuple[str, str]:
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.exists(os.path.join(root, ".git")):
        return "unknown", "unknown"
    try:
        out = subprocess.run(
            ["git", "-C", root, "log", "-1", "--format=%H %cI"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return "unknown", "unknown"
    if len(out) != 2:
        return "unknown", "unknown"
    return out[0], f"{out[1]} (commit date; not a build)"


def info() -> dict[str, str]:
    """Version, commit, build date, Python, SQLite, platform, and whether frozen."""
    try:
        from gantry._build_info import (  # type: ignore[import-not-found,unused-ignore]
            BUILD_DATE,
            COMMIT,
            VERSION,
        )

        version, commit, date = str(VERSION), str(COMMIT), str(BUILD_DATE)
        frozen = True
    except ImportError:
        version, frozen = __version__, False
        commit, date = _from_git()
    import apsw

    return {
        "version": version,
        "commit": commit,
        "build_date": date,
        "python": "{}.{}.{}".format(*sys.version_info[:3]),
        "sqlite": apsw.sqlite_lib_version(),
        "apsw": apsw.apsw_version(),
        "platform": f"{sys.platform}-{os.uname().machine}",
        "frozen": "yes" if frozen else "no (source)",
    }


# In the frozen binary, next to the package's data: {distribution: version} of every module
# compiled or bundled in, written by the build (build/static_onefile.py; dist/gantry.cdx.json
# has the same list with licences).
DISTRIBUTIONS_FILE = "distributions.json"


def distributions(here: str | None = None) -> dict[str, str]:
    """The third-party distributions inside this gantry and their versions: the binary's
    bundled list, or, from source, the installed closure of gantry's runtime requirements."""
    import json

    here = here or os.path.dirname(os.path.abspath(__file__))
    try:
        with open(os.path.join(here, DISTRIBUTIONS_FILE), encoding="utf-8") as f:
            data = json.load(f)
        return {str(k): str(v) for k, v in data.items()}
    except FileNotFoundError:
        return _installed_closure("gantry")
    except (OSError, ValueError, AttributeError):
        return {}


def _installed_closure(root: str) -> dict[str, str]:
    """Installed distributions `root` requires, transitively; extras and requirements that
    are not installed (another platform's, by marker) are left out."""
    import re
    from importlib import metadata

    def canonical(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    found: dict[str, str] = {}
    todo = [root]
    while todo:
        try:
            dist = metadata.distribution(todo.pop())
        except metadata.PackageNotFoundError:
            continue
        name = canonical(dist.metadata["Name"])
        if name in found:
            continue
        found[name] = dist.version
        for req in dist.requires or []:
            if re.search(r"\bextra\s*==", req):
                continue
            m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
            if m:
                todo.append(m.group(1))
    found.pop(canonical(root), None)
    return dict(sorted(found.items()))
