"""What the MCP client costs in anonymous RSS, stock vs the lean copies (prints; never fails).

    python bench/mcp_rss.py [--server static|time|http] [--runs 3]

Each figure is one fresh source process: gantry's host connected to one real server (the
static C fixture or PyPI's mcp-server-time over stdio, or with `--server http` npm
server-everything over Streamable HTTP on a loopback port), idle after tools/list, reading its
own RssAnon (/proc/self/status) — the part of the binary's RSS that source measures faithfully. The
server runs in its own process and is not counted. Median of `--runs` processes per variant:

* lever A — gantry/mcp/validate.py imports jsonschema on first need. "A off" emulates the
  previous behaviour by building every listed tool's jsonschema validator at tools/list.
* lever B — mcp_types/methods.py as build/mcp_lean.py rewrites it (lazy version modules).
  "B off" uses the installed file.
* lever C — mcp/client/session.py as build/mcp_lean.py rewrites it (`_later_revision_fields`
  answered from a build-time table, so tools/list reads no newer revision's row). Alone it
  changes nothing (methods.py imports both version modules anyway), so it is measured with B.

Every variant uses the lazy mcp inits and web-free server.py the binary has; "A + B + C" is
the full lean set the binary is built with.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "build"))

import mcp_lean  # noqa: E402

from tests.fakes.mcp_servers import static_fixture, time_command, toml_server  # noqa: E402

CHILD = """
import json, os, sys, time, anyio
from gantry.mcp.host import Host
from gantry.mcp.manifest import parse
from gantry.tools import Registry

async def main():
    host = Host(parse(os.environ["BENCH_MANIFEST"], os.environ), Registry(), os.environ)
    async with anyio.create_task_group() as tg:
        await host.start(tg)
        (server,) = host.servers.values()
        if os.environ.get("BENCH_EAGER_JSONSCHEMA"):
            for listed in server.listed.values():
                listed.validator.full()
        await anyio.sleep(1.0)
        rss = next(int(ln.split()[1]) for ln in open("/proc/self/status")
                   if ln.startswith("RssAnon:"))
        versions = sorted(m for m in sys.modules if m.startswith("mcp_types._v"))
        tg.cancel_scope.cancel()
    print(json.dumps({"rss_kib": rss, "versions": versions,
                      "jsonschema": "jsonschema" in sys.modules}))

anyio.run(main)
"""


def _all(module: str) -> list[str]:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    for node in ast.parse(Path(spec.origin).read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__":
            return list(ast.literal_eval(node.value))
    raise SystemExit(f"{module} has no __all__")


LEVERS = {"B": mcp_lean.METHODS, "C": mcp_lean.SESSION}


def lean_root(where: Path, levers: str) -> Path:
    """A copy of mcp and mcp_types with build/mcp_lean.py's modules, those of the levers not
    in `levers` left as installed."""
    root = where / f"lean-{levers or 'none'}"
    for package in ("mcp", "mcp_types"):
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations
        shutil.copytree(next(iter(spec.submodule_search_locations)), root / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    off = {module for lever, module in LEVERS.items() if lever not in levers}
    for module, code in mcp_lean.sources(_all("mcp")).items():
        if module not in off:
            mcp_lean.module_path(module, root).write_text(code)
    return root


def one(root: Path, manifest: str, eager: bool) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{ROOT}", "BENCH_MANIFEST": manifest}
    env.pop("BENCH_EAGER_JSONSCHEMA", None)
    if eager:
        env["BENCH_EAGER_JSONSCHEMA"] = "1"
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=120, cwd=ROOT)
    if proc.returncode:
        raise SystemExit(f"bench child failed:\n{proc.stderr[-2000:]}")
    out: dict[str, object] = json.loads(proc.stdout.splitlines()[-1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", choices=("static", "time", "http"), default="static")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    if args.server == "http":
        from tests.fakes.mcp_remote import everything_http, toml_remote

        with everything_http("streamableHttp") as srv:
            measure(args, toml_remote("http", srv.url))
        return
    argv = [str(static_fixture())] if args.server == "static" else [time_command()]
    measure(args, toml_server(args.server, argv))


def measure(args: argparse.Namespace, manifest: str) -> None:
    variants = (("stock (A, B, C off)", ""), ("lever A only", "A"), ("lever B only", "B"),
                ("levers A + B", "AB"), ("levers B + C", "BC"), ("levers A + B + C", "ABC"))
    with tempfile.TemporaryDirectory(prefix="gantry-mcp-rss-") as tmp:
        roots: dict[str, Path] = {}
        print(f"server: {args.server}; RssAnon of gantry's host idle after tools/list, "
              f"median of {args.runs} fresh source processes")
        base = None
        for label, levers in variants:
            files = levers.replace("A", "")
            if files not in roots:
                roots[files] = lean_root(Path(tmp), files)
            runs = [one(roots[files], manifest, eager="A" not in levers)
                    for _ in range(args.runs)]
            mib = statistics.median(int(str(r["rss_kib"])) for r in runs) / 1024
            base = mib if base is None else base
            last = runs[-1]
            loaded = last["versions"]
            assert isinstance(loaded, list)
            versions = ",".join(str(v).rsplit("._v", 1)[1] for v in loaded)
            print(f"  {label:22s} {mib:6.1f} MiB  ({mib - base:+5.1f})  "
                  f"jsonschema={'yes' if last['jsonschema'] else 'no ':3s}  versions={versions}")

if __name__ == "__main__":
    main()
