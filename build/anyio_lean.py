"""anyio's lazy package exports, kept lazy in the frozen binary.

anyio 4 makes `anyio` and `anyio.abc` export their names lazily: at import,
`anyio._lazyimport._build_lazy_map` reads the package's own source (`inspect.getsource`) and
parses the `if TYPE_CHECKING or not install_lazy_importer():` block to learn which submodule
each name lives in. A frozen package has no source to read, so there the map comes back empty
and anyio falls back to importing every submodule at once (to_process, to_interpreter,
streams.tls, ...): a third of a second at every start of the binary, and memory.

build/build.py therefore hands Nuitka anyio/_lazyimport.py with the maps computed at build time
(by anyio's own `_build_lazy_map`, from the installed sources) appended; `_build_lazy_map`
answers from them for those packages and stays anyio's for anything else.
tests/test_build_anyio_lean.py runs a sourceless copy of anyio with it.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from lean_common import LeanError, installed
from lean_common import package_config as _package_config

LAZYIMPORT = "anyio._lazyimport"
PACKAGES = ("anyio", "anyio.abc")

APPENDIX = '''

# gantry (build/anyio_lean.py): the maps _build_lazy_map computes from the packages' sources,
# computed at build time, because a frozen package has no source to read.
_GANTRY_LAZY_MAPS = {maps!r}
_gantry_source_lazy_map = _build_lazy_map


def _build_lazy_map(module):
    found = _GANTRY_LAZY_MAPS.get(module.__name__)
    if found is None:
        return _gantry_source_lazy_map(module)
    lazy_map, deprecated_aliases, submodule_names = found
    return ({{k: tuple(v) for k, v in lazy_map.items()}}, dict(deprecated_aliases),
            list(submodule_names))
'''


def lazy_maps() -> dict[str, Any]:
    """anyio's own lazy maps of PACKAGES, computed from the installed sources."""
    try:
        lazyimport = importlib.import_module(LAZYIMPORT)
    except ImportError as exc:
        raise LeanError(f"{LAZYIMPORT} is not importable: {exc}") from None
    build = getattr(lazyimport, "_build_lazy_map", None)
    if build is None or not hasattr(lazyimport, "install_lazy_importer"):
        raise LeanError(f"{LAZYIMPORT} no longer has _build_lazy_map/install_lazy_importer")
    maps: dict[str, Any] = {}
    for name in PACKAGES:
        module = importlib.import_module(name)
        lazy_map, aliases, submodules = build(module)
        if not lazy_map:
            raise LeanError(f"{name}: anyio's _build_lazy_map found no lazy exports")
        maps[name] = ({k: list(v) for k, v in sorted(lazy_map.items())}, dict(aliases),
                      list(submodules))
    return maps


def lazyimport_source(path: Path | None = None) -> str:
    """The installed anyio/_lazyimport.py with the build-time maps appended."""
    path = installed(LAZYIMPORT) if path is None else path
    source = path.read_text()
    if "\ndef _build_lazy_map(" not in source:
        raise LeanError(f"{path}: no module-level def _build_lazy_map any more")
    return source + APPENDIX.format(maps=lazy_maps())


def package_config() -> str:
    """A Nuitka user package configuration (YAML) replacing anyio/_lazyimport.py."""
    return _package_config("anyio_lean.py", {LAZYIMPORT: lazyimport_source()},
                           {LAZYIMPORT: "anyio exports stay lazy without source to parse"})
