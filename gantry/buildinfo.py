"""Build information for `gantry version`: embedded when frozen, read from git otherwise."""

from __future__ import annotations

import os
import sys

from gantry import __version__


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
        from gantry import _build_info  # type: ignore[attr-defined]

        version = str(_build_info.VERSION)
        commit = str(_build_info.COMMIT)
        date = str(_build_info.BUILD_DATE)
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
