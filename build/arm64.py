#!/usr/bin/env python3
"""Build `dist/gantry-linux-arm64` on an x86_64 host: build/build.py run by an arm64 Python
under qemu-user, in a cached Debian arm64 root, with a native-speed cross compiler.

    python build/arm64.py              # what `nox -s build-arm64` runs (root, apt, network)
    python build/arm64.py --emulation  # only step 1 (`nox -s binary-arm64` runs this)

Nuitka must run on the Python it compiles for, so it runs emulated (qemu-user, binfmt_misc).
Its C compiler need not: the root is Debian bookworm arm64 (glibc 2.36 and Python 3.11, as the
amd64 build) with the amd64 packages of Debian's aarch64 cross gcc and ccache installed beside
it (multiarch), so `gcc` inside it is an x86_64 program that the kernel runs natively and that
emits aarch64 code against the root's own arm64 headers and libraries. Everything else is the
amd64 build unchanged: the same lock files (they carry the aarch64 wheels' hashes), the same
build/ patches and shape guards, the same plugin carrying glibc into the payload.

Steps, each timed (printed at the end, appended to build/.work/gantry-linux-arm64/steps.jsonl):

1. host: qemu-user-static, binfmt-support and mmdebstrap (apt-get if missing), binfmt_misc
   mounted, qemu-aarch64 enabled; QEMU_CPU=neoverse-n1 unless set (qemu 7.2's default CPU model
   emulates pointer authentication slowly: ~20x slower without it);
2. rootfs: mmdebstrap into build/.work/arm64-rootfs, once (kept while PACKAGES and SUITE stay);
3. venv: /opt/gantry-build in the root from lock/backend.txt and lock/build.txt, hash-checked,
   once per lock content;
4. build: `python build/build.py --name gantry-linux-arm64` in the root, with the repository
   (and its git directory) bind-mounted at the same path, so commit, build date and ccache's
   base dir are what the amd64 build sees. Nuitka's and ccache's caches live in the root's
   /root/.cache, so they persist with it. Its output is split into Nuitka's phases by the lines
   that open them (PHASES).
"""

from __future__ import annotations

import datetime as dt
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
# arm64: the Python Nuitka runs on and compiles for, its headers, glibc's development files
# (libc.a for the static onefile bootstrap), binutils, git (build info); amd64: the compiler.
PACKAGES = ("python3", "python3-venv", "python3-dev", "libc6-dev", "binutils", "ca-certificates",
            "git", f"gcc-{CROSS}:amd64", "ccache:amd64")
HOST_PACKAGES = {"qemu-aarch64-static": "qemu-user-static", "update-binfmts": "binfmt-support",
                 "mmdebstrap": "mmdebstrap"}
VENV = "/opt/gantry-build"
# `gcc` and `strip` inside the root: the cross tools (native speed), first on PATH.
CROSS_BIN = "/opt/gantry-cross/bin"
CROSS_TOOLS = {"gcc": f"/usr/bin/{CROSS}-gcc", "strip": f"/usr/bin/{CROSS}-strip"}
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
    log(f"mmdebstrap {SUITE} arm64 (+amd64 cross compiler) into {ROOTFS.relative_to(ROOT)}")
    subprocess.run(["unshare", "-m", "--propagation", "private", "mmdebstrap",
                    "--arch=arm64,amd64", "--variant=apt", f"--include={','.join(PACKAGES)}",
                    SUITE, str(fresh), MIRROR], check=True, env={**os.environ, **env})
    for tool, target in CROSS_TOOLS.items():
        link = fresh / CROSS_BIN.lstrip("/") / tool
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)
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
    binds = [(str(ROOT), str(ROOT))]
    git_dir = _git_dir()
    if git_dir is not None:
        binds.append((str(git_dir), str(git_dir)))
    lines = ["set -e", f"mount -t proc proc {r}/proc", f"mount --rbind /dev {r}/dev",
             f"mkdir -p {r}{shlex.quote(os.path.dirname(inside))}",
             f": >> {r}{shlex.quote(inside)}",
             f"mount --bind {shlex.quote(str(host))} {r}{shlex.quote(inside)}"]
    for path in ("/etc/resolv.conf", "/etc/ssl/certs/ca-certificates.crt", "/etc/pip.conf"):
        if os.path.isfile(path):
            lines.append(f"cp -L {path} {r}{path}")
    for target, source in binds:
        lines += [f"mkdir -p {r}{shlex.quote(target)}",
                  f"mount --bind {shlex.quote(source)} {r}{shlex.quote(target)}"]
    full_env = {"PATH": f"{CROSS_BIN}:{VENV}/bin:/usr/local/bin:/usr/bin:/bin",
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


def build(env: Mapping[str, str], extra: Sequence[str]) -> dict[str, float]:
    """build/build.py in the root; returns seconds per phase of its output."""
    cmd = chroot_command([f"{VENV}/bin/python", str(ROOT / "build" / "build.py"),
                          "--name", NAME, *extra], env)
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
    if proc.wait():
        raise SystemExit(f"build-arm64: build/build.py failed (rc {proc.returncode})")
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
