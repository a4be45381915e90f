"""build/aiohttp_lean.py: aiohttp's default SSL contexts built on first use in the binary.

Checked against the installed aiohttp, in a copy of it with connector.py replaced as the build
does: importing it builds no SSL context (stock builds two), and the connector still hands out
the same kinds of default context, once each, when a request needs one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "build"))

import aiohttp_lean  # noqa: E402

COUNT_AND_PROBE = """
import asyncio, json, ssl, sys
built = []
original = ssl.SSLContext.__new__

def counting(cls, *args, **kwargs):
    built.append(cls.__name__)
    return original(cls, *args, **kwargs)

ssl.SSLContext.__new__ = counting
import aiohttp
import aiohttp.connector
at_import = len(built)

class Request:
    def __init__(self, ssl):
        self.ssl = ssl

    def is_ssl(self):
        return True

async def probe():
    connector = aiohttp.TCPConnector()
    try:
        verified = connector._get_ssl_context(Request(True))
        unverified = connector._get_ssl_context(Request(False))
        again = connector._get_ssl_context(Request(True)) is verified
        mine = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        passed = connector._get_ssl_context(Request(mine)) is mine
    finally:
        await connector.close()
    return {"verified": [verified.verify_mode == ssl.CERT_REQUIRED, verified.check_hostname],
            "unverified": [unverified.verify_mode == ssl.CERT_NONE, unverified.check_hostname],
            "cached": again, "passed_through": passed}

out = asyncio.run(probe())
out.update(at_import=at_import, file=aiohttp.connector.__file__)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def lean_aiohttp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the installed aiohttp with connector.py replaced, as the build does."""
    spec = importlib.util.find_spec("aiohttp")
    assert spec is not None and spec.submodule_search_locations
    root = tmp_path_factory.mktemp("lean")
    shutil.copytree(next(iter(spec.submodule_search_locations)), root / "aiohttp",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (root / "aiohttp" / "connector.py").write_text(aiohttp_lean.connector_source())
    return root


def _probe(pythonpath: str | None) -> dict[str, object]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    proc = subprocess.run([sys.executable, "-c", COUNT_AND_PROBE], env=env, capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(proc.stdout.splitlines()[-1])
    return result


def test_import_builds_no_context_and_requests_get_the_stock_defaults(
    lean_aiohttp: Path,
) -> None:
    stock = _probe(None)
    lean = _probe(str(lean_aiohttp))
    assert str(lean["file"]).startswith(str(lean_aiohttp))
    assert stock["at_import"] == 2  # what the rewrite is for: two contexts on every start
    assert lean["at_import"] == 0
    for key in ("verified", "unverified", "passed_through"):
        assert lean[key] == stock[key], key
    assert lean["verified"] == [True, True] and lean["unverified"] == [True, False]
    assert lean["cached"] is True and lean["passed_through"] is True


def _rewrite(tmp_path: Path, source: str) -> str:
    path = tmp_path / "connector.py"
    path.write_text(textwrap.dedent(source))
    return aiohttp_lean.connector_source(path)


FACTORY = """
def _make_ssl_context(verified):
    return object()
"""


def test_rewrite_turns_reads_inside_functions_into_calls(tmp_path: Path) -> None:
    out = _rewrite(tmp_path, FACTORY + """
_SSL_CONTEXT_VERIFIED = _make_ssl_context(True)
_SSL_CONTEXT_UNVERIFIED = _make_ssl_context(False)

class Connector:
    def get(self, verified):
        return _SSL_CONTEXT_VERIFIED if verified else _SSL_CONTEXT_UNVERIFIED
""")
    namespace: dict[str, object] = {}
    exec(compile(out, "connector.py", "exec"), namespace)
    assert "_SSL_CONTEXT_VERIFIED" not in namespace and "_SSL_CONTEXT_UNVERIFIED" not in namespace
    connector = namespace["Connector"]()  # type: ignore[operator]
    first = connector.get(True)
    assert connector.get(True) is first and connector.get(False) is not first


@pytest.mark.parametrize("source, message", [
    (FACTORY + "_SSL_CONTEXT_VERIFIED = _make_ssl_context(True)\n", "no module-level"),
    (FACTORY + "_SSL_CONTEXT_VERIFIED = _make_ssl_context(True)\n"
     "_SSL_CONTEXT_UNVERIFIED = make_other(False)\n", "no longer"),
    (FACTORY + "_SSL_CONTEXT_VERIFIED = _make_ssl_context(False)\n"
     "_SSL_CONTEXT_UNVERIFIED = _make_ssl_context(False)\n", "_SSL_CONTEXT_VERIFIED = "),
    (FACTORY + "_SSL_CONTEXT_VERIFIED = _make_ssl_context(True)\n"
     "_SSL_CONTEXT_UNVERIFIED = _make_ssl_context(False)\nDEFAULT = _SSL_CONTEXT_VERIFIED\n",
     "module level"),
    (FACTORY + "_SSL_CONTEXT_VERIFIED = _make_ssl_context(True)\n"
     "_SSL_CONTEXT_UNVERIFIED = _make_ssl_context(False)\n"
     "def get(ctx=_SSL_CONTEXT_VERIFIED):\n    return ctx\n", "defined"),
    (FACTORY + "_SSL_CONTEXT_VERIFIED = _make_ssl_context(True)\n"
     "_SSL_CONTEXT_UNVERIFIED = _make_ssl_context(False)\n"
     "class C:\n    default = _SSL_CONTEXT_UNVERIFIED\n", "class body"),
    ("_SSL_CONTEXT_VERIFIED = _make_ssl_context(True)\n"
     "_SSL_CONTEXT_UNVERIFIED = _make_ssl_context(False)\n", "is gone"),
])
def test_rewrite_refuses_what_it_cannot_make_lazy(
    tmp_path: Path, source: str, message: str
) -> None:
    with pytest.raises(aiohttp_lean.LeanError, match=message):
        _rewrite(tmp_path, source)


def test_package_config_is_yaml_nuitka_reads() -> None:
    """Parsed as YAML (as Nuitka does), the entry gives back exactly the replacement source."""
    (entry,) = yaml.safe_load(aiohttp_lean.package_config())
    (rule,) = entry["anti-bloat"]
    assert entry["module-name"] == "aiohttp.connector"
    assert rule["module_code"] == aiohttp_lean.connector_source()
    compile(rule["module_code"], "aiohttp.connector", "exec")
