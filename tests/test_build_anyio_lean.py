"""build/anyio_lean.py: anyio's exports stay lazy where the package has no source (the binary).

A sourceless copy of the installed anyio (only .pyc files, as in a frozen build) stands in for
the binary: stock anyio imports every submodule there; with the build's _lazyimport.py it
imports what source anyio imports and exports the same names.
"""

from __future__ import annotations

import compileall
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "build"))

import anyio_lean  # noqa: E402

EAGER_ONLY = ("anyio.to_process", "anyio.to_interpreter")

PROBE = """
import json, sys
import anyio, anyio.abc

async def main():
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.sleep, 0)
    return await anyio.to_thread.run_sync(lambda: 42)

answer = anyio.run(main)
print(json.dumps({
    "file": anyio.__file__,
    "answer": answer,
    "dir": sorted(dir(anyio)),
    "abc": sorted(dir(anyio.abc)),
    "loaded": sorted(m for m in sys.modules if m.startswith("anyio")),
    "task_group": anyio.abc.TaskGroup.__module__,
    "cancel_scope": anyio.CancelScope.__module__,
}))
"""


def _copy(root: Path, lean: bool, sourceless: bool) -> Path:
    spec = importlib.util.find_spec("anyio")
    assert spec is not None and spec.submodule_search_locations
    shutil.copytree(next(iter(spec.submodule_search_locations)), root / "anyio",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if lean:
        (root / "anyio" / "_lazyimport.py").write_text(anyio_lean.lazyimport_source())
    if sourceless:
        assert compileall.compile_dir(root / "anyio", legacy=True, quiet=1)
        for py in (root / "anyio").rglob("*.py"):
            py.unlink()
    return root


def _probe(pythonpath: Path | None) -> dict[str, object]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(proc.stdout.splitlines()[-1])
    return result


@pytest.mark.slow
def test_sourceless_anyio_stays_lazy_with_the_build_maps(tmp_path: Path) -> None:
    source = _probe(None)
    stock_frozen = _probe(_copy(tmp_path / "stock", lean=False, sourceless=True))
    lean_frozen = _probe(_copy(tmp_path / "lean", lean=True, sourceless=True))
    assert str(lean_frozen["file"]).startswith(str(tmp_path / "lean"))
    assert str(lean_frozen["file"]).endswith(".pyc")
    loaded_stock = set(stock_frozen["loaded"])  # type: ignore[call-overload]
    loaded_lean = set(lean_frozen["loaded"])  # type: ignore[call-overload]
    # what the build fixes: without source, stock anyio imports everything at once
    assert set(EAGER_ONLY) <= loaded_stock
    assert not set(EAGER_ONLY) & loaded_lean
    assert loaded_lean == set(source["loaded"])  # type: ignore[call-overload]
    for key in ("answer", "dir", "abc", "task_group", "cancel_scope"):
        assert lean_frozen[key] == source[key], key


def test_the_appended_maps_are_anyios_own() -> None:
    import anyio
    import anyio._lazyimport

    maps = anyio_lean.lazy_maps()
    assert sorted(maps) == sorted(anyio_lean.PACKAGES)
    namespace: dict[str, object] = {"__name__": "probe"}
    exec(compile(anyio_lean.lazyimport_source(), "_lazyimport.py", "exec"), namespace)
    built = namespace["_build_lazy_map"](anyio)  # type: ignore[operator]
    assert built == anyio._lazyimport._build_lazy_map(anyio)
    assert "run" in built[0] and "TaskGroup" not in built[0]


def test_refuses_an_anyio_without_the_lazy_map(tmp_path: Path) -> None:
    path = tmp_path / "_lazyimport.py"
    path.write_text("def install_lazy_importer():\n    return False\n")
    with pytest.raises(anyio_lean.LeanError, match="_build_lazy_map"):
        anyio_lean.lazyimport_source(path)


def test_package_config_is_yaml_nuitka_reads() -> None:
    """Parsed as YAML (as Nuitka does), the entry gives back exactly the replacement source."""
    (entry,) = yaml.safe_load(anyio_lean.package_config())
    (rule,) = entry["anti-bloat"]
    assert entry["module-name"] == "anyio._lazyimport"
    assert rule["module_code"] == anyio_lean.lazyimport_source()
    compile(rule["module_code"], "anyio._lazyimport", "exec")
