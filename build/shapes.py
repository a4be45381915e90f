#!/usr/bin/env python3
"""The build's shape guards, without building: every build/*_lean.py replacement generated from
the installed package, and every patch of Nuitka's C checked against the installed Nuitka.

    python build/shapes.py     # `nox -s outdated` runs it on the newest releases

Exit 1 with one line per broken shape; the build itself stops on the same conditions.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main() -> int:
    from lean_common import LeanError

    import build

    problems: list[str] = []
    checks = [("mcp_lean", build.mcp_lean_config), ("other lean modules", build.lean_configs)]
    for name, check in checks:
        try:
            check()
        except (LeanError, SystemExit) as exc:
            problems.append(f"{name}: {exc}")
    try:
        from nuitka.build.SconsInterface import getSconsDataPath
        from nuitka.Version import getNuitkaVersion
        from static_onefile import shape_problems
    except ImportError as exc:
        problems.append(f"Nuitka patches: cannot check ({exc})")
    else:
        static = os.path.join(getSconsDataPath(), "static_src")
        problems += [f"Nuitka {getNuitkaVersion()} {p}" for p in shape_problems(static)]
    for line in problems:
        print(f"shapes: {line}")
    print(f"shapes: {'all hold' if not problems else f'{len(problems)} broken'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
