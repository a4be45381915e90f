"""build/static_onefile.py's shape guard over Nuitka's C: `nox -s outdated` runs it against the
newest Nuitka; here against the pinned one (holds) and a copy with one needle gone (caught).
Needs Nuitka (the build extra): `.nox/build/bin/python -m pytest tests/test_build_shapes.py`."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("nuitka")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "build"))

import static_onefile  # noqa: E402
from nuitka.build.SconsInterface import getSconsDataPath  # noqa: E402


def test_the_pinned_nuitka_has_every_shape() -> None:
    assert static_onefile.shape_problems(str(Path(getSconsDataPath()) / "static_src")) == []


def test_a_changed_shape_is_named(tmp_path: Path) -> None:
    static = tmp_path / "static_src"
    shutil.copytree(Path(getSconsDataPath()) / "static_src", static)
    program = static / "MainProgram.c"
    program.write_text(program.read_text().replace(static_onefile.INSPECT_CALL, ""))
    (static / "MetaPathBasedLoader.c").unlink()
    problems = static_onefile.shape_problems(str(static))
    assert len(problems) == 2
    assert problems[0].startswith("MainProgram.c: 0 matches of '    patchInspectModule")
    assert problems[1].startswith("MetaPathBasedLoader.c: ")
