"""Where dist/gantry unpacks its payload, on a /tmp that is shared or set up wrong.

The bootstrap (build/gantry_bootstrap.c) must never run a payload someone else put at the fixed
extraction path, never let two first starts see a half-written one, and turn every /tmp
mistake (noexec, read-only, too small) into one clear line and exit 1, leaving nothing behind
that breaks the next start. Each case runs in the distroless-like root with its own /tmp.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.binary.rootfs import INSTALL_PATH, NONROOT_UID, Sandbox

pytestmark = [pytest.mark.binary, pytest.mark.slow]

NOBODY = 65534
DOC = "docs/packaging.md"
# Runs instead of gantry's program if the bootstrap ever executes a planted payload.
PLANTED_C = r"""
#include <fcntl.h>
#include <unistd.h>
int main(void) {
    int fd = open("/tmp/PLANTED-RAN", O_CREAT | O_WRONLY, 0666);
    (void)fd;
    (void)write(1, "planted\n", 8);
    return 0;
}
"""


@pytest.fixture(scope="module")
def name(build_record: dict[str, str]) -> str:
    """The extraction dir's name under /tmp."""
    return Path(build_record["tempdir_spec"]).name


@pytest.fixture(scope="module")
def reference(sandbox: Sandbox, name: str) -> Path:
    """A complete extraction, as the binary writes it."""
    tmp = sandbox.new_tmp_dir("tmp-reference")
    r = sandbox.run([INSTALL_PATH, "version"], tmp=tmp, timeout=120)
    assert r.returncode == 0, r
    return tmp / name


@pytest.fixture(scope="module")
def planted_bin(reference: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A static program padded to exactly the size of the real gantry.bin."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc (the build needs it too) to make the planted program")
    d = tmp_path_factory.mktemp("planted")
    (d / "planted.c").write_text(PLANTED_C)
    subprocess.run(["gcc", "-static", "-O1", "-o", str(d / "gantry.bin"), str(d / "planted.c")],
                   check=True, capture_output=True)
    size = (reference / "gantry.bin").stat().st_size
    with open(d / "gantry.bin", "r+b") as fh:
        fh.truncate(size)
    return d / "gantry.bin"


def _plant(reference: Path, where: Path, planted_bin: Path, uid: int, mode: int) -> None:
    """A full copy of the payload with gantry.bin swapped: only sizes match what is expected."""
    shutil.copytree(reference, where, symlinks=True)
    shutil.copy2(planted_bin, where / "gantry.bin")
    for root, dirs, files in os.walk(where):
        for n in [*dirs, *files]:
            os.lchown(os.path.join(root, n), uid, uid)
    os.chown(where, uid, uid)
    where.chmod(mode)


def _refused(r: subprocess.CompletedProcess[str], tmp: Path, *needles: str) -> None:
    assert r.returncode == 1, r
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gantry: "), r.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert "planted" not in r.stdout
    assert not (tmp / "PLANTED-RAN").exists(), "the planted payload was executed"


def _leftovers(tmp: Path, name: str) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith(name + ".unpack-"))


# ----------------------------------------------------------------------------- a shared /tmp


@pytest.mark.parametrize("uid", [NONROOT_UID, 0], ids=["nonroot", "root"])
def test_a_dir_planted_by_another_user_is_refused(
    sandbox: Sandbox, reference: Path, planted_bin: Path, name: str, uid: int
) -> None:
    tmp = sandbox.new_tmp_dir(f"tmp-planted-{uid}")
    _plant(reference, tmp / name, planted_bin, NOBODY, 0o755)
    r = sandbox.run([INSTALL_PATH, "version"], uid=uid, tmp=tmp)
    _refused(r, tmp, f"/tmp/{name}", f"belongs to uid {NOBODY}", "rm -rf", DOC)


def test_a_group_writable_dir_is_refused(
    sandbox: Sandbox, reference: Path, planted_bin: Path, name: str
) -> None:
    tmp = sandbox.new_tmp_dir("tmp-group-writable")
    _plant(reference, tmp / name, planted_bin, NONROOT_UID, 0o775)
    r = sandbox.run([INSTALL_PATH, "version"], tmp=tmp)
    _refused(r, tmp, f"/tmp/{name}", "writable by group or others", "0775")


@pytest.mark.parametrize("target", ["planted-dir", "missing"])
def test_a_symlink_at_the_extraction_path_is_never_followed(
    sandbox: Sandbox, reference: Path, planted_bin: Path, name: str, target: str
) -> None:
    """To a planted payload (would run it) or to a missing dir (the first unpack would write
    wherever it points): refused either way, nothing written through it."""
    tmp = sandbox.new_tmp_dir(f"tmp-symlink-{target}")
    if target == "planted-dir":
        _plant(reference, tmp / target, planted_bin, NONROOT_UID, 0o755)
    os.symlink(f"/tmp/{target}", tmp / name)
    os.lchown(tmp / name, NOBODY, NOBODY)
    r = sandbox.run([INSTALL_PATH, "version"], tmp=tmp)
    _refused(r, tmp, f"/tmp/{name}", "symbolic link")
    if target == "missing":
        assert not (tmp / target).exists()
    assert sorted(p.name for p in tmp.iterdir()) == sorted([name, target] if target != "missing"
                                                          else [name])


def test_a_root_owned_extraction_serves_other_users(
    sandbox: Sandbox, reference: Path, name: str
) -> None:
    """What root unpacked (e.g. an operator's `gantry version`) is trusted and readable."""
    tmp = sandbox.new_tmp_dir("tmp-root-first")
    assert sandbox.run([INSTALL_PATH, "version"], uid=0, tmp=tmp).returncode == 0
    st = (tmp / name).stat()
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o755)
    r = sandbox.run([INSTALL_PATH, "version"], tmp=tmp)
    assert r.returncode == 0 and r.stdout.startswith("gantry "), r


def test_ten_simultaneous_first_starts(sandbox: Sandbox, reference: Path, name: str) -> None:
    """A healthcheck racing `run`, times five: every start works, one complete copy results,
    and no staging dir is left."""
    tmp = sandbox.new_tmp_dir("tmp-race")
    data = sandbox.new_data_dir("data-race")
    procs = [
        subprocess.Popen(
            sandbox.command([INSTALL_PATH, "version"] if i % 2 else [INSTALL_PATH, "status"],
                            env={"DATA_DIR": "/data"}, tmp=tmp, data=data),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(10)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        results.append((p.args, p.returncode, out, err))
    for i, (_args, code, out, err) in enumerate(results):
        if i % 2:
            assert code == 0 and out.startswith("gantry "), (code, out, err)
        else:
            assert code == 1 and "no database" in out, (code, out, err)  # status, never ran
        assert "gantry: " not in err and "Error" not in err, err
    assert sorted(p.name for p in tmp.iterdir()) == [name]
    got = sorted(p.relative_to(tmp / name) for p in (tmp / name).rglob("*"))
    want = sorted(p.relative_to(reference) for p in reference.rglob("*"))
    assert got == want
    for rel in want:
        a, b = reference / rel, tmp / name / rel
        if a.is_file() and not a.is_symlink():
            assert a.read_bytes() == b.read_bytes(), rel


def test_a_killed_first_start_leaves_nothing_that_lasts(sandbox: Sandbox, name: str) -> None:
    """A staging dir whose first start was killed is removed by the next first start."""
    tmp = sandbox.new_tmp_dir("tmp-stale")
    dead = next(p for p in range(4_000_000, 3_000_000, -1) if not _alive(p))
    stale = tmp / f"{name}.unpack-{dead}-AbCdEf"
    (stale / "sub").mkdir(parents=True)
    (stale / "sub" / "half-written.so").write_bytes(b"\0" * 1000)
    for p in (stale, stale / "sub", stale / "sub" / "half-written.so"):
        os.chown(p, NONROOT_UID, NONROOT_UID)
    stale.chmod(0o700)
    r = sandbox.run([INSTALL_PATH, "version"], tmp=tmp)
    assert r.returncode == 0, r
    assert sorted(p.name for p in tmp.iterdir()) == [name]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ----------------------------------------------------------------------------- /tmp mistakes


def test_noexec_tmp_says_so_and_the_next_start_works(sandbox: Sandbox, name: str) -> None:
    tmp = sandbox.new_tmp_dir("tmp-noexec")
    r = sandbox.run([INSTALL_PATH, "version"], tmp=tmp, tmp_options="noexec")
    _refused(r, tmp, "/tmp is mounted noexec", "exec", DOC)
    assert _leftovers(tmp, name) == []
    again = sandbox.run([INSTALL_PATH, "version"], tmp=tmp)
    assert again.returncode == 0 and again.stdout.startswith("gantry "), again


def test_read_only_tmp_says_so_and_a_complete_copy_still_runs(
    sandbox: Sandbox, name: str
) -> None:
    tmp = sandbox.new_tmp_dir("tmp-ro")
    r = sandbox.run([INSTALL_PATH, "version"], tmp=tmp, tmp_options="ro")
    _refused(r, tmp, "/tmp is read-only", "writable", "MB", DOC)
    assert list(tmp.iterdir()) == []
    assert sandbox.run([INSTALL_PATH, "version"], tmp=tmp).returncode == 0
    # A cached start writes nothing, so a read-only /tmp holding a complete copy is fine.
    cached = sandbox.run([INSTALL_PATH, "version"], tmp=tmp, tmp_options="ro")
    assert cached.returncode == 0 and cached.stdout.startswith("gantry "), cached


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Any]:
    """Host tmpfs mounts (unmounted afterwards) to bind at /tmp."""
    mounts: list[Path] = []

    def _mount(options: str) -> Path:
        d = tmp_path / f"tmpfs-{len(mounts)}"
        d.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"mode=1777,{options}", "tmpfs", str(d)],
                       check=True, capture_output=True)
        mounts.append(d)
        return d

    try:
        yield _mount
    finally:
        for d in mounts:
            subprocess.run(["umount", "-l", str(d)], check=False, capture_output=True)


def test_too_small_tmp_says_how_much_is_needed(
    sandbox: Sandbox, small_tmpfs: Any, build_record: dict[str, Any], name: str
) -> None:
    tmp = small_tmpfs("size=16m")
    for _attempt in range(2):  # and the next start fails the same way, not worse
        r = sandbox.run([INSTALL_PATH, "version"], tmp=tmp)
        _refused(r, tmp, "/tmp is too small", DOC)
        m = re.search(r"needs (\d+) MB free", r.stderr)
        assert m, r.stderr
        needed = int(m.group(1))
        payload_mb = build_record["payload_bytes"] / 1e6
        assert payload_mb <= needed <= payload_mb * 1.1
        assert list(tmp.iterdir()) == []
    roomy = small_tmpfs(f"size={needed + 2}m")
    ok = sandbox.run([INSTALL_PATH, "version"], tmp=roomy)
    assert ok.returncode == 0, ok


def test_running_out_mid_unpack_cleans_up(sandbox: Sandbox, small_tmpfs: Any, name: str) -> None:
    """Enough bytes but too few inodes: the unpack fails half-way, and its staging dir goes."""
    tmp = small_tmpfs("size=256m,nr_inodes=12")
    r = sandbox.run([INSTALL_PATH, "version"], tmp=tmp)
    _refused(r, tmp, "/tmp", "inodes", DOC)
    assert list(tmp.iterdir()) == []
