#!/usr/bin/env python3
"""Build `dist/gantry-linux-arm64` on an x86_64 host: build/build.py run by an arm64 Python
under qemu-user, in a cached Debian arm64 root, with a native-speed cross compiler.

    python build/arm64.py              # what `nox -s build-arm64` runs (root, apt, network)
    python build/arm64.py --emulation  # only step 1 (`nox -s binary-arm64` runs this)

Nuitka must run on the Python it compiles for, so it runs emulated (qemu-user, binfmt_misc).
Its C compiler need not: the root is Debian bookworm arm64 (glibc 2.36 and Python 3.11, as the
amd64 build), and the host's own Debian aarch64 cross gcc (gcc-aarch64-linux-gnu, same glibc
2.36 in its /usr/aarch64-linux-gnu) and ccache are bind-mounted into it with the x86_64 loader
and libraries they run on (HOST_TOOLS), so `gcc` inside it is an x86_64 program that the kernel
runs natively and that emits aarch64 code; Debian's cross gcc searches /usr/include and
/usr/lib/aarch64-linux-gnu too, i.e. the root's Python headers and libraries. (Installing the
amd64 cross gcc into the root by multiarch does not work: its binutils-aarch64-linux-gnu:amd64
collides with the root's native package of that name.) Everything else is the
amd64 build unchanged: the same lock files (they carry the aarch64 wheels' hashes), the same
build/ patches and shape guards, the same plugin carrying glibc into the payload.

Steps, each timed (printed at the end, appended to build/.work/gantry-linux-arm64/steps.jsonl):

1. host: qemu-user-static, binfmt-support and mmdebstrap (apt-get if missing), binfmt_misc
   mounted, qemu-aarch64 enabled; QEMU_CPU=neoverse-n1 unless set (qemu 7.2's default CPU model
   emulates pointer authentication slowly: ~20x slower without it);
2. rootfs: mmdebstrap into build/.work/arm64-rootfs, once (kept while PACKAGES and SUITE stay);
   it holds the caches too (Nuitka's and ccache's, in its /root/.cache), so a rerun is warm;
3. venv: /opt/gantry-build in the root from lock/backend.txt and lock/build.txt, hash-checked,
   once per lock content;
4. build: `python build/build.py --name gantry-linux-arm64` in the root, with the repository
   (and its git directory) bind-mounted at the same path, so commit, build date and ccache's
   base dir are what the amd64 build sees. Its output is split into Nuitka's phases by the lines
   that open them (PHASES).

The payload's compression runs natively too. Nuitka compresses each payload file with zstd at
level 22 (`--onefile-as-archive`), in-process: emulated, that alone would take longer than the
rest of the build (~2 s per MB natively here, times qemu's ~30x for zstd). But it first looks
each file up in its compression cache (`onefile-compression` in the root's Nuitka cache) by a
key of the file's content, the compiling Python's sys.version and sys.executable, Nuitka's and
zstandard's versions and the level. So while the emulated Nuitka runs, this script waits for the
standalone dist to be final (the plugin has pointed the .bin at its loader) and fills that cache
from the host: the same key (Nuitka's own Hash, with the root Python's identity), the same
compressor (Nuitka's getCompressorFunction, the locked zstandard), largest file first, each
entry written whole and renamed into place. Nuitka then finds every entry and only copies.
This needs the build extra on the host too (`nox -s build-arm64` installs lock/build.txt).
"""

from __future__ import annotations

import datetime as dt
import glob
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = "gantry-linux-arm64"
ROOTFS = ROOT / "build" / ".work" / "arm64-rootfs"  # gitignored, like all of build/.work
STEPS = ROOT / "build" / ".work" / NAME / "steps.jsonl"
SUITE = "bookworm"  # glibc 2.36 and Python 3.11, as the amd64 build
MIRROR = "http://deb.debian.org/debian"
CROSS = "aarch64-linux-gnu"
# The Python Nuitka runs on and compiles for, its headers and libraries, glibc's development
# files (the root's libpython links against them), git (build info), CA certificates (pip).
PACKAGES = ("python3", "python3-venv", "python3-dev", "libc6-dev", "ca-certificates", "git")
HOST_PACKAGES = {"qemu-aarch64-static": "qemu-user-static", "update-binfmts": "binfmt-support",
                 "mmdebstrap": "mmdebstrap", f"{CROSS}-gcc": f"gcc-{CROSS}",
                 f"{CROSS}-g++": f"g++-{CROSS}", "ccache": "ccache"}
VENV = "/opt/gantry-build"
# The host's toolchain, bind-mounted (read-only) at the same paths: the cross gcc's programs
# and aarch64 glibc, and the x86_64 loader and libraries they (and ccache) run on. None of
# these paths exists in an arm64 root.
HOST_TOOLS = ("/usr/lib/gcc-cross", f"/usr/{CROSS}", "/usr/lib64",
              f"/usr/lib/{os.uname().machine}-linux-gnu")
# The cross programs themselves, /usr/bin/aarch64-linux-gnu-*, at their host paths (no arm64
# package has such names): a cross gcc finds cc1 and its LTO plugin relative to where it is
# (/usr/bin next to /usr/lib/gcc-cross), and /usr/aarch64-linux-gnu/bin/{as,ld,strip,...} are
# links to them. In /usr/local/bin of the root, first on PATH: `gcc` and `g++`, links to the
# cross compilers, and `ccache`, the host's (Nuitka finds them by name). It must be a directory
# on SCons' own default PATH (/usr/local/bin:/opt/bin:/bin:/usr/bin): SCons' default
# environment, made during the build with that PATH, looks for gcc/g++ to pick its linker tool
# and fails on 'ilink' (not in Nuitka's trimmed copy) when it finds neither — the first two
# full builds died there. Then /usr/aarch64-linux-gnu/bin for `strip`.
CROSS_PROGRAMS = f"/usr/bin/{CROSS}-*"
CROSS_BIN = "/usr/local/bin"
HOST_CCACHE = "/usr/bin/ccache"
# Build inputs taken from the host's environment (`nox -s release` sets SOURCE_DATE_EPOCH).
PASSED = ("SOURCE_DATE_EPOCH", "GANTRY_COMMIT")
BINFMT = Path("/proc/sys/fs/binfmt_misc")
QEMU_CPU = "neoverse-n1"
# Lines of Nuitka's output that open each phase of the build step (the first one seen).
PHASES = (
    ("nuitka-python", "Nuitka: Starting Python compilation"),
    ("codegen", "Nuitka: Completed Python level compilation and optimization."),
    ("c-compile", "Nuitka: Running C compilation via Scons."),
    ("link-and-dist", "Nuitka-Scons: Backend C linking"),
    ("onefile", "Nuitka-Onefile: Creating single file from dist folder"),
    ("checks-sbom", "Nuitka: Successfully created"),
)


def log(message: str) -> None:
    print(f"build-arm64: {message}", flush=True)


def host_setup() -> dict[str, str]:
    """Emulation on the host; returns the environment every emulated process gets."""
    if os.geteuid() != 0:
        raise SystemExit("build-arm64: needs root (apt-get, binfmt_misc, mount, chroot)")
    missing = sorted({pkg for tool, pkg in HOST_PACKAGES.items() if shutil.which(tool) is None})
    if missing:
        log(f"installing {' '.join(missing)} (apt-get)")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        if subprocess.run(["apt-get", "install", "-y", "-qq", *missing], env=env).returncode:
            subprocess.run(["apt-get", "update", "-qq"], env=env, check=True)
            subprocess.run(["apt-get", "install", "-y", "-qq", *missing], env=env, check=True)
    if not (BINFMT / "register").exists():
        subprocess.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT)], check=True)
    if not (BINFMT / "qemu-aarch64").exists() or "enabled" not in (
            BINFMT / "qemu-aarch64").read_text():
        subprocess.run(["update-binfmts", "--enable", "qemu-aarch64"], check=True)
    return {"QEMU_CPU": os.environ.get("QEMU_CPU", QEMU_CPU)}


def emulator() -> tuple[str, Path]:
    """(path the kernel opens for an aarch64 ELF, host file there). Without binfmt's F flag
    the kernel opens that path inside the chroot, so it is bind-mounted in."""
    entry = (BINFMT / "qemu-aarch64").read_text().splitlines()
    interpreter = next(line.split(None, 1)[1] for line in entry if line.startswith("interpreter"))
    return interpreter, Path(interpreter).resolve()


def rootfs_key() -> str:
    return hashlib.sha256(repr((SUITE, MIRROR, PACKAGES)).encode()).hexdigest()[:16]


def ensure_rootfs(env: Mapping[str, str]) -> bool:
    """The cached root; True if it had to be made. mmdebstrap runs in its own mount
    namespace, so an interrupted run leaves no mount behind on the host."""
    stamp = ROOTFS / ".gantry-rootfs"
    if stamp.is_file() and stamp.read_text().strip() == rootfs_key():
        return False
    fresh = ROOTFS.with_name(ROOTFS.name + ".new")
    for old in (fresh, ROOTFS):
        if old.exists():
            shutil.rmtree(old)
    fresh.parent.mkdir(parents=True, exist_ok=True)  # mmdebstrap wants the parent to exist
    log(f"mmdebstrap {SUITE} arm64 into {ROOTFS.relative_to(ROOT)}")
    subprocess.run(["unshare", "-m", "--propagation", "private", "mmdebstrap",
                    "--arch=arm64", "--variant=apt", f"--include={','.join(PACKAGES)}",
                    SUITE, str(fresh), MIRROR], check=True, env={**os.environ, **env})
    (fresh / ".gantry-rootfs").write_text(rootfs_key() + "\n")
    os.replace(fresh, ROOTFS)
    return True


def _git_dir() -> Path | None:
    """The repository's common git directory when it lies outside the tree (a worktree)."""
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--git-common-dir"],
                             capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    path = (ROOT / out).resolve()
    return None if path.is_relative_to(ROOT) else path


def chroot_command(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """Host argv running `argv` in the root: a private mount namespace with /proc, /dev, the
    host's DNS, CA bundle and pip configuration, the emulator, and the repository (plus its git
    directory) at their host paths; a clean environment plus `env`."""
    r = shlex.quote(str(ROOTFS))
    inside, host = emulator()
    binds = [(str(ROOT), str(ROOT), False)]  # (path in the root, host path, read-only)
    git_dir = _git_dir()
    if git_dir is not None:
        binds.append((str(git_dir), str(git_dir), False))
    lines = ["set -e", f"mount -t proc proc {r}/proc", f"mount --rbind /dev {r}/dev",
             f"mkdir -p {r}{shlex.quote(os.path.dirname(inside))}",
             f": >> {r}{shlex.quote(inside)}",
             f"mount --bind {shlex.quote(str(host))} {r}{shlex.quote(inside)}"]
    for path in ("/etc/resolv.conf", "/etc/ssl/certs/ca-certificates.crt", "/etc/pip.conf"):
        if os.path.isfile(path):
            lines.append(f"cp -L {path} {r}{path}")
    if not (ROOTFS / "lib64").exists():
        lines.append(f"ln -s usr/lib64 {r}/lib64")  # where x86_64 programs ask for their loader
    for path in HOST_TOOLS:
        binds.append((path, str(Path(path).resolve()), True))
    links = {f"{CROSS_BIN}/{cc}": f"/usr/bin/{CROSS}-{cc}" for cc in ("gcc", "g++")}
    for program in sorted(glob.glob(CROSS_PROGRAMS)):
        if os.path.islink(program):
            links[program] = os.readlink(program)
        else:
            binds.append((program, program, True))
    binds.append((f"{CROSS_BIN}/ccache", str(Path(HOST_CCACHE).resolve()), True))
    for link, target in links.items():
        at = ROOTFS / link.lstrip("/")
        if not at.is_symlink() or os.readlink(at) != target:
            lines.append(f"mkdir -p {shlex.quote(str(at.parent))}; "
                         f"ln -sfn {shlex.quote(target)} {shlex.quote(str(at))}")
    for target, source, ro in binds:
        at = f"{r}{shlex.quote(target)}"
        make = f"mkdir -p {at}" if os.path.isdir(source) else (
            f"mkdir -p {shlex.quote(os.path.dirname(f'{ROOTFS}{target}'))}; : >> {at}")
        lines += [make, f"mount --bind {shlex.quote(source)} {at}"]
        if ro:
            lines.append(f"mount -o remount,bind,ro {at}")
    full_env = {"PATH": f"{CROSS_BIN}:/usr/{CROSS}/bin:{VENV}/bin:/usr/bin:/bin",
                "HOME": "/root", "LANG": "C.UTF-8", "TMPDIR": "/tmp",
                **{k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in PASSED},
                **env}
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in full_env.items())
    lines.append(f"exec chroot {r} /usr/bin/env -i {exports} "
                 + " ".join(shlex.quote(a) for a in argv))
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", "\n".join(lines)]


def run_in_root(argv: Sequence[str], env: Mapping[str, str]) -> None:
    subprocess.run(chroot_command(argv, env), check=True)


def ensure_venv(env: Mapping[str, str]) -> bool:
    """The build venv in the root from the lock files, hash-checked (as install_locked in
    noxfile.py does); True if it was (re)installed."""
    lock = ROOT / "lock"
    inputs = [lock / "backend.txt", lock / "build.txt", ROOT / "pyproject.toml"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in inputs)).hexdigest()
    stamp = ROOTFS / VENV.lstrip("/") / ".gantry-installed"
    if stamp.is_file() and stamp.read_text() == digest:
        return False
    pip = [f"{VENV}/bin/python", "-m", "pip", "install", "-q"]
    run_in_root(["/usr/bin/python3", "-m", "venv", "--clear", VENV], env)
    run_in_root([*pip, "--require-hashes", "--no-deps", "-r", str(lock / "backend.txt")], env)
    run_in_root([*pip, "--require-hashes", "--no-build-isolation", "-r",
                 str(lock / "build.txt")], env)
    stamp.write_text(digest)
    return True


def root_python(env: Mapping[str, str]) -> tuple[str, str]:
    """sys.version and sys.executable of the root's build venv Python (the cache key has them)."""
    out = subprocess.run(chroot_command([f"{VENV}/bin/python", "-c",
                                         "import sys; print(sys.executable); print(sys.version)"],
                                        env), capture_output=True, text=True, check=True).stdout
    executable, version = out.rstrip("\n").split("\n", 1)
    return version, executable


def payload_dir() -> Path:
    return ROOT / "build" / ".work" / NAME / "nuitka" / "gantry_main.dist"


def dist_is_final(dist: Path) -> bool:
    """The plugin's last change to the standalone dist: the .bin's loader is the one in the
    extraction dir (build/static_onefile.py, onStandaloneDistributionFinished)."""
    from elf import elf_interpreter  # build/elf.py: build/ is sys.path[0] for this script

    binary = dist / "gantry.bin"
    try:
        interp = elf_interpreter(binary.read_bytes())
    except (OSError, ValueError):
        return False
    return interp is not None and interp.startswith(f"/tmp/{NAME}-")


def prefill_compression_cache(dist: Path, python: tuple[str, str], jobs: int) -> int:
    """Compress every payload file natively into the root's Nuitka compression cache, as the
    emulated Nuitka would (see the module docstring); returns the number of entries written."""
    import zstandard
    from nuitka.tools.onefile_compressor.OnefileCompressor import (
        getCompressorFunction,
        getCompressorLevel,
    )
    from nuitka.utils.Hashing import Hash
    from nuitka.Version import version_string

    cache = ROOTFS / "root" / ".cache" / "Nuitka" / "onefile-compression"
    cache.mkdir(parents=True, exist_ok=True)
    _flag, compressor = getCompressorFunction(expect_compression=True, low_memory=False,
                                              job_limit=jobs)
    files = [p for p in dist.rglob("*") if p.is_file() and not p.is_symlink()]
    written = 0
    for path in sorted(files, key=lambda p: -p.stat().st_size):
        key = Hash()
        key.updateFromFile(filename=str(path))
        key.updateFromValues(*python)
        key.updateFromValues(version_string)
        key.updateFromValues(zstandard.__version__, getCompressorLevel(False))
        entry = cache / key.asHexDigest()
        if entry.exists():
            continue
        partial = entry.with_name(entry.name + f".{os.getpid()}.part")
        with open(path, "rb") as source, open(partial, "wb") as out, compressor(out) as packed:
            shutil.copyfileobj(source, packed)
        os.replace(partial, entry)
        written += 1
    return written


def build(env: Mapping[str, str], extra: Sequence[str]) -> dict[str, float]:
    """build/build.py in the root; returns seconds per phase of its output."""
    import threading

    python = root_python(env)
    jobs = os.cpu_count() or 2
    if any(a.startswith("--jobs") for a in extra):
        raise SystemExit("build-arm64: --jobs is the machine's CPU count here (the "
                         "compression cache key does not have it, the compressor does)")
    dist, done = payload_dir(), threading.Event()

    def prefill() -> None:
        while not done.wait(2.0):
            if dist_is_final(dist):
                t = time.monotonic()
                n = prefill_compression_cache(dist, python, jobs)
                log(f"compressed {n} payload files natively in {time.monotonic() - t:.0f} s")
                return

    if dist.exists():
        shutil.rmtree(dist)  # a previous build's final dist must not start the prefill
    helper = threading.Thread(target=prefill, daemon=True)
    helper.start()
    # Unbuffered: build.py echoes Nuitka's lines through a pipe, and each phase is timed by
    # when its opening line arrives here, not when a block of them is flushed at the end.
    cmd = chroot_command([f"{VENV}/bin/python", str(ROOT / "build" / "build.py"),
                          "--name", NAME, *extra], {**env, "PYTHONUNBUFFERED": "1"})
    marks: dict[str, float] = {}
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=ROOT)
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        for phase, opening in PHASES:
            if phase not in marks and line.startswith(opening):
                marks[phase] = time.monotonic()
    rc = proc.wait()
    done.set()
    helper.join()
    if rc:
        raise SystemExit(f"build-arm64: build/build.py failed (rc {rc})")
    end = time.monotonic()
    order = [(p, marks[p]) for p, _ in PHASES if p in marks]
    phases = {"setup": (order[0][1] if order else end) - start}
    for (phase, at), nxt in zip(order, [*(m for _, m in order[1:]), end], strict=True):
        phases[phase] = nxt - at
    return phases


def main(argv: list[str] | None = None) -> int:
    extra = list(sys.argv[1:] if argv is None else argv)
    if extra == ["--emulation"]:
        host_setup()
        return 0
    if extra == ["--prefill-compression"]:  # for a build started without it (or rerun)
        env = host_setup()
        log(f"{prefill_compression_cache(payload_dir(), root_python(env), os.cpu_count() or 2)}"
            " payload files compressed natively")
        return 0
    steps: dict[str, float] = {}
    t = time.monotonic()
    env = host_setup()
    steps["host-setup"] = time.monotonic() - t
    log(f"QEMU_CPU={env['QEMU_CPU']}")
    t = time.monotonic()
    made = ensure_rootfs(env)
    steps["rootfs" if made else "rootfs-cached"] = time.monotonic() - t
    t = time.monotonic()
    made = ensure_venv(env)
    steps["venv" if made else "venv-cached"] = time.monotonic() - t
    t = time.monotonic()
    phases = build(env, extra)
    steps["build"] = time.monotonic() - t
    total = sum(steps.values())
    log("seconds per step: " + ", ".join(f"{k} {v:.0f}" for k, v in steps.items())
        + f"; total {total:.0f}")
    log("build step by Nuitka phase: " + ", ".join(f"{k} {v:.0f}" for k, v in phases.items()))
    record = {"steps": {k: round(v, 1) for k, v in steps.items()},
              "phases": {k: round(v, 1) for k, v in phases.items()}, "total_s": round(total, 1),
              "qemu_cpu": env["QEMU_CPU"], "cpus": os.cpu_count(),
              "finished": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()}
    STEPS.parent.mkdir(parents=True, exist_ok=True)
    with open(STEPS, "a") as fh:
        fh.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
