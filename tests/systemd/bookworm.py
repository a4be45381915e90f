"""A Debian bookworm root filesystem with systemd 252, as a tarball for `docker import`.

Built once with `debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,procps` from the
Debian mirror apt already uses here (read from `apt-cache policy`, never hard-coded), then
cached under ``~/.cache/gantry/`` keyed by the suite, the package list and debootstrap's
version, so re-runs only import it. ``$GANTRY_CACHE`` moves the cache.

Run as a script to build (or find) the tarball and print its path:
``python -m tests.systemd.bookworm``. The module has no pytest dependency.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUITE = "bookworm"
INCLUDE = ("systemd", "systemd-sysv", "dbus", "procps")  # procps: /bin/kill for ExecReload
CACHE = Path(os.environ.get("GANTRY_CACHE", "~/.cache/gantry")).expanduser()


class BookwormUnavailable(RuntimeError):
    """debootstrap cannot run here (no apt, no mirror, not root...)."""


def _apt_install(*packages: str) -> None:
    """Install Debian packages the way the build script installs ccache: apt-get, as root."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env)
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise BookwormUnavailable(f"apt-get install {' '.join(packages)} failed: "
                                  f"{r.stderr.strip()[-500:]}")


def mirror() -> str:
    """The Debian mirror apt is configured with for bookworm/main on this machine."""
    out = subprocess.run(["apt-cache", "policy"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*\d+\s+(\S+)\s+" + SUITE + r"/main\s", line)
        if m:
            return m.group(1)
    raise BookwormUnavailable(f"apt knows no {SUITE}/main source (run `apt-get update` once)")


def _debootstrap_version() -> str:
    r = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "debootstrap"],
                       capture_output=True, text=True)
    return r.stdout.strip()


def ensure_tarball(cache: Path = CACHE) -> Path:
    """Path of the cached rootfs tarball, running debootstrap first if there is none."""
    if os.geteuid() != 0:
        raise BookwormUnavailable("debootstrap needs root")
    if shutil.which("debootstrap") is None:
        if shutil.which("apt-get") is None:
            raise BookwormUnavailable("no debootstrap and no apt-get to install it")
        _apt_install("debootstrap")
    key = hashlib.sha256(
        repr((SUITE, INCLUDE, "minbase", _debootstrap_version())).encode()
    ).hexdigest()[:12]
    tarball = cache / f"{SUITE}-systemd-{key}.tar"
    if tarball.is_file():
        return tarball
    cache.mkdir(parents=True, exist_ok=True)
    source = mirror()
    work = Path(tempfile.mkdtemp(prefix="debootstrap-", dir=cache))
    try:
        root = work / "root"
        r = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(INCLUDE)}", SUITE,
             str(root), source],
            capture_output=True, text=True,
        )
        if r.returncode != 0:
            log = root / "debootstrap" / "debootstrap.log"
            detail = log.read_text()[-1500:] if log.exists() else r.stderr[-1500:]
            raise BookwormUnavailable(f"debootstrap failed ({r.returncode}): {detail}")
        # No apt lists or package caches in the image: they are only size.
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for p in (root / junk).glob("*"):
                if p.is_file():
                    p.unlink()
        partial = work / "rootfs.tar"
        subprocess.run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."],
                       check=True, capture_output=True)
        os.replace(partial, tarball)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tarball


if __name__ == "__main__":
    t0 = time.monotonic()
    path = ensure_tarball()
    print(f"{path} ({path.stat().st_size / 2**20:.0f} MiB, {time.monotonic() - t0:.1f} s)")
    sys.exit(0)
