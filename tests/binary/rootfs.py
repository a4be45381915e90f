"""A local stand-in for ``gcr.io/distroless/static-debian12:nonroot``, and a way to run in it.

The rootfs is assembled from the same Debian packages distroless uses for its ``static`` image
(base-files, netbase, tzdata, and the Mozilla bundle from ca-certificates) plus the same
hand-made files (/etc/passwd, /etc/group, /etc/nsswitch.conf, /tmp 1777, /home/nonroot).
There is no libc, no loader, no shell in it. It is cached under ``~/.cache/gantry-rootfs``
keyed by the package versions, so only the first run downloads anything.

``Sandbox`` runs a command inside a copy of that rootfs the way the container runtime would:
a private mount namespace (``unshare -m``), the root bind-mounted read-only, ``/data`` and
``/tmp`` bind-mounted writable (``/tmp`` exec-allowed, mode 1777, unless a test remounts it
noexec or read-only), ``/proc`` and a tiny ``/dev``, then ``chroot --userspec=65532:65532`` with
a clean environment that matches the image's (PATH, SSL_CERT_FILE, HOME; a test may drop any
of them). It needs root on the host (CI and dev boxes run as root).

A binary for another machine (dist/gantry-linux-arm64 on an x86_64 host) runs the same way
under the host's binfmt_misc emulator (qemu-user, set up by ``python build/arm64.py
--emulation``): QEMU_CPU (neoverse-n1 unless set) is added to the environment, and the
interpreter is bind-mounted into the root at the path binfmt_misc names (Debian registers qemu
with the F flag, which opens it at registration, so there it is not needed; a registration
without F would look for it inside the root). The rootfs itself has no ELF file for any
machine, so the same one serves both.

Used by ``tests/binary`` and ``bench/binary.py``; the module has no pytest dependency.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

NONROOT_UID = 65532
INSTALL_PATH = "/usr/local/bin/gantry"
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
PACKAGES = ("base-files", "netbase", "tzdata", "ca-certificates")

# The image's environment (distroless sets PATH and SSL_CERT_FILE; HOME comes from passwd).
IMAGE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "SSL_CERT_FILE": CA_BUNDLE,
    "HOME": "/home/nonroot",
}

PASSWD = """\
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
"""
GROUP = """\
root:x:0:
nobody:x:65534:
tty:x:5:
staff:x:50:
nonroot:x:65532:
"""
# Debian's default, as shipped by distroless (passwd/group via nss_compat).
NSSWITCH = """\
passwd:         compat
group:          compat
shadow:         compat
gshadow:        files

hosts:          files dns
networks:       files

protocols:      db files
services:       db files
ethers:         db files
rpc:            db files

netgroup:       nis
"""

# The ELF header's e_machine -> uname's name, for the machines gantry ships binaries for.
ELF_MACHINES = {62: "x86_64", 183: "aarch64"}
BINFMT = Path("/proc/sys/fs/binfmt_misc")
QEMU_CPU = "neoverse-n1"  # qemu 7.2's default model emulates pointer authentication slowly


def binary_machine(path: Path) -> str:
    """The machine an ELF executable is for (x86_64, aarch64), from its header."""
    with open(path, "rb") as fh:
        head = fh.read(20)
    if head[:4] != b"\x7fELF" or len(head) < 20:
        raise RootfsUnavailable(f"{path} is not an ELF executable")
    number = int.from_bytes(head[18:20], "little" if head[5] == 1 else "big")
    return ELF_MACHINES.get(number, f"e_machine {number}")


def emulator_for(machine: str) -> Path | None:
    """The binfmt_misc interpreter that runs `machine`'s programs here; None when the host
    runs them itself."""
    if machine == os.uname().machine:
        return None
    entry = BINFMT / f"qemu-{machine}"
    text = entry.read_text() if entry.is_file() else ""
    lines = text.splitlines()
    if not lines or lines[0] != "enabled":
        raise RootfsUnavailable(f"no enabled binfmt_misc entry for {machine} binaries "
                                "(python build/arm64.py --emulation sets one up)")
    return Path(next(line.split(None, 1)[1] for line in lines if line.startswith("interpreter")))


DEFAULT_CACHE = Path(os.environ.get("GANTRY_ROOTFS_CACHE", "~/.cache/gantry-rootfs")).expanduser()


# Runs on the host (needs no Python inside the root): chroot, chdir(WORKDIR), setgroups/setgid/
# setuid to the image user, then execve the target with exactly the given environment.
_ENTER = (
    "import json,os,sys\n"
    "root, cwd, uid, env = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])\n"
    "os.chroot(root)\n"
    "os.chdir(cwd)\n"
    "os.setgroups([])\n"
    "os.setgid(uid)\n"
    "os.setuid(uid)\n"
    "os.execve(sys.argv[5], sys.argv[5:], env)\n"
)


class RootfsUnavailable(RuntimeError):
    """The rootfs cannot be assembled or entered here (no apt, not root, no unshare...)."""


def _run(cmd: Sequence[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), check=True, capture_output=True, text=True, **kw)  # type: ignore[call-overload]


# The host's libc in its multiarch directory (usr/lib/<triplet>/libc.so.6, whatever the
# machine): the rootfs must not have one.
HOST_LIBC = f"usr/lib/{sysconfig.get_config_var('MULTIARCH')}/libc.so.6"


def _package_versions() -> dict[str, str]:
    versions = {}
    for pkg in PACKAGES:
        try:
            out = _run(["apt-cache", "policy", pkg]).stdout
        except (OSError, subprocess.CalledProcessError) as exc:
            raise RootfsUnavailable(f"apt-cache not usable: {exc}") from exc
        cand = next(
            (ln.split(":", 1)[1].strip() for ln in out.splitlines() if "Candidate:" in ln), ""
        )
        if not cand or cand == "(none)":
            raise RootfsUnavailable(
                f"no candidate version for {pkg} (run `apt-get update` once on this machine)"
            )
        versions[pkg] = cand
    return versions


def ensure_base_rootfs(cache_dir: Path = DEFAULT_CACHE) -> Path:
    """Return the cached distroless-like rootfs, assembling it on first use."""
    versions = _package_versions()
    key = hashlib.sha256(
        repr(sorted(versions.items())).encode() + PASSWD.encode() + GROUP.encode()
        + NSSWITCH.encode()
    ).hexdigest()[:16]
    root = cache_dir / f"static-debian12-nonroot-{key}"
    if (root / ".complete").exists():
        return root
    cache_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=cache_dir))
    try:
        debs = work / "debs"
        tree = work / "tree"
        debs.mkdir()
        tree.mkdir()
        try:
            _run(["apt-get", "download", *(f"{p}={v}" for p, v in versions.items())], cwd=debs)
        except subprocess.CalledProcessError as exc:
            raise RootfsUnavailable(f"apt-get download failed: {exc.stderr.strip()}") from exc
        extracted = work / "x"
        for deb in sorted(debs.glob("*.deb")):
            pkg = deb.name.split("_", 1)[0]
            target = extracted / pkg
            target.mkdir(parents=True)
            _run(["dpkg-deb", "-x", str(deb), str(target)])
            if pkg == "ca-certificates":
                continue  # only the Mozilla bundle goes in (below), as distroless does
            shutil.copytree(target, tree, symlinks=True, dirs_exist_ok=True)
        _assemble(tree, extracted / "ca-certificates")
        (tree / ".complete").write_text(repr(versions) + "\n")
        if root.exists():
            shutil.rmtree(root)
        os.replace(tree, root)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return root


def _assemble(tree: Path, ca_pkg: Path) -> None:
    # usrmerge layout, like distroless debian12 (targets exist but stay empty: no libc).
    for d in ("usr/bin", "usr/sbin", "usr/lib", "usr/local/bin"):
        (tree / d).mkdir(parents=True, exist_ok=True)
    for link, target in (("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib")):
        p = tree / link
        if not p.exists() and not p.is_symlink():
            p.symlink_to(target)
    etc = tree / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text(PASSWD)
    (etc / "group").write_text(GROUP)
    (etc / "nsswitch.conf").write_text(NSSWITCH)
    certs = sorted((ca_pkg / "usr/share/ca-certificates/mozilla").glob("*.crt"))
    if not certs:
        raise RootfsUnavailable("ca-certificates package had no Mozilla certificates")
    (etc / "ssl/certs").mkdir(parents=True, exist_ok=True)
    (etc / "ssl/certs/ca-certificates.crt").write_text(
        "".join(c.read_text().rstrip("\n") + "\n" for c in certs)
    )
    for d, mode in (("tmp", 0o1777), ("root", 0o700), ("home/nonroot", 0o700), ("proc", 0o555),
                    ("dev", 0o755), ("data", 0o755)):
        (tree / d).mkdir(parents=True, exist_ok=True)
        (tree / d).chmod(mode)
    os.chown(tree / "home/nonroot", NONROOT_UID, NONROOT_UID)
    # Nothing executable besides what we install: prove there is no libc, loader or shell.
    for bad in (HOST_LIBC, "bin/sh", "lib64"):
        if (tree / bad).exists():
            raise RootfsUnavailable(f"rootfs unexpectedly contains {bad}")


@dataclass
class Sandbox:
    """One container-like root: a copy of the base rootfs plus the binary and mounts."""

    root: Path  # private copy (mounted read-only inside the namespace)
    data: Path  # host dir bind-mounted writable at /data, owned by 65532
    tmp: Path  # host dir bind-mounted writable+exec at /tmp, mode 1777
    binds: dict[str, Path] = field(default_factory=dict)  # path in root -> host path (ro)
    emulator: Path | None = None  # binfmt_misc interpreter for a foreign binary (see above)

    @classmethod
    def create(cls, workdir: Path, binary: Path, base: Path | None = None) -> Sandbox:
        base = base or ensure_base_rootfs()
        root = workdir / "root"
        shutil.copytree(base, root, symlinks=True)
        (root / ".complete").unlink()
        dest = root / INSTALL_PATH.lstrip("/")
        shutil.copy2(binary, dest)
        dest.chmod(0o755)
        # Mount points a runtime would create for the compose volumes (the root is read-only).
        for d in ("persona", "etc/gantry", "secrets"):
            (root / d).mkdir(parents=True, exist_ok=True)
        data = workdir / "data"
        tmp = workdir / "tmp"
        data.mkdir()
        tmp.mkdir()
        os.chown(data, NONROOT_UID, NONROOT_UID)
        tmp.chmod(0o1777)
        emulator = emulator_for(binary_machine(binary))
        if emulator is not None:  # the mount point; the emulator itself is bound at entry
            (root / emulator.relative_to("/")).parent.mkdir(parents=True, exist_ok=True)
            (root / emulator.relative_to("/")).touch()
        # The binary and the rest of the root belong to root, as in the image.
        return cls(root=root, data=data, tmp=tmp, emulator=emulator)

    def new_data_dir(self, name: str, uid: int = NONROOT_UID) -> Path:
        """A fresh host directory owned by the image user (or `uid`), to mount at /data."""
        d = self.data.parent / name
        d.mkdir()
        os.chown(d, uid, uid)
        return d

    def new_tmp_dir(self, name: str) -> Path:
        """A fresh host directory (mode 1777) to mount at /tmp: a container's own /tmp."""
        d = self.data.parent / name
        d.mkdir()
        d.chmod(0o1777)
        return d

    def command(
        self,
        argv: Sequence[str],
        env: Mapping[str, str | None] | None = None,
        uid: int = NONROOT_UID,
        cwd: str = "/data",
        binds: Mapping[str, Path] | None = None,
        data: Path | None = None,
        tmp: Path | None = None,
        tmp_options: str | None = None,
    ) -> list[str]:
        """Host argv that runs ``argv`` inside the sandbox (use with subprocess).

        ``env`` adds to the image's environment; a value of None removes that variable.
        ``tmp`` is the host dir mounted at /tmp (default: the sandbox's shared one);
        ``tmp_options`` remounts it, e.g. ``noexec`` or ``ro``.
        """
        if os.geteuid() != 0:
            raise RootfsUnavailable("entering the rootfs needs root (unshare -m, mount, chroot)")
        full_env = dict(IMAGE_ENV)
        if self.emulator is not None:
            full_env["QEMU_CPU"] = os.environ.get("QEMU_CPU", QEMU_CPU)
        for key, value in (env or {}).items():
            if value is None:
                full_env.pop(key, None)
            else:
                full_env[key] = value
        r = shlex.quote(str(self.root))
        lines = [
            "set -e",
            f"mount --bind {r} {r}",
            f"mount -o remount,bind,ro {r}",
            f"mount --bind {shlex.quote(str(tmp or self.tmp))} {r}/tmp",
            f"mount --bind {shlex.quote(str(data or self.data))} {r}/data",
            f"mount -t proc -o nosuid,nodev,noexec proc {r}/proc",
            f"mount -t tmpfs -o nosuid,noexec,mode=755,size=64k tmpfs {r}/dev",
        ]
        if tmp_options:
            lines.append(f"mount -o remount,bind,{shlex.quote(tmp_options)} {r}/tmp")
        for dev in ("null", "zero", "full", "random", "urandom"):
            lines.append(f": > {r}/dev/{dev}; mount --bind /dev/{dev} {r}/dev/{dev}")
        lines.append(f"mount -o remount,ro,bind {r}/dev")
        if self.emulator is not None:
            target = f"{r}{shlex.quote(str(self.emulator))}"
            lines.append(f"mount --bind {shlex.quote(str(self.emulator.resolve()))} {target}")
        for inside, host in {**self.binds, **(binds or {})}.items():
            target = f"{r}{shlex.quote(inside)}"
            lines.append(f"mount --bind {shlex.quote(str(host))} {target}")
            lines.append(f"mount -o remount,bind,ro {target}")
        # Enter like the runtime does: chroot, WORKDIR, the image's USER, a clean environment.
        lines.append(
            "exec "
            + " ".join(
                shlex.quote(a)
                for a in [sys.executable, "-I", "-c", _ENTER, str(self.root), cwd, str(uid),
                          json.dumps(full_env), *argv]
            )
        )
        return ["unshare", "-m", "--propagation", "private", "sh", "-c", "\n".join(lines)]

    def run(
        self,
        argv: Sequence[str],
        env: Mapping[str, str | None] | None = None,
        timeout: float = 60,
        input: str | None = None,
        uid: int = NONROOT_UID,
        binds: Mapping[str, Path] | None = None,
        data: Path | None = None,
        tmp: Path | None = None,
        tmp_options: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(argv, env=env, uid=uid, binds=binds, data=data, tmp=tmp,
                         tmp_options=tmp_options),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )

    def popen(
        self,
        argv: Sequence[str],
        env: Mapping[str, str | None] | None = None,
        uid: int = NONROOT_UID,
        binds: Mapping[str, Path] | None = None,
        data: Path | None = None,
        tmp: Path | None = None,
        tmp_options: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """Started the way a runtime starts PID 1: the returned pid IS gantry's bootstrap
        (unshare, sh and the entering python all exec in place), so signals go straight to it."""
        return subprocess.Popen(
            self.command(argv, env=env, uid=uid, binds=binds, data=data, tmp=tmp,
                         tmp_options=tmp_options),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
