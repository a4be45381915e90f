"""The arm64 binary under qemu-user beside the amd64 one, in the same harness (prints; never fails).

    python bench/binary_arch.py [--runs 7] [--binary dist/gantry] [--other dist/gantry-linux-arm64]

Both run in the distroless-like root of tests/binary (tests/binary/rootfs.py: uid 65532,
read-only root, the foreign one through binfmt_misc's qemu with QEMU_CPU, neoverse-n1 unless
set). Needs root. Per binary, in one run on this machine, round-robin so noise falls on both:

* `gantry version` on an empty /tmp (unpacks the payload), then cached;
* `gantry status` against a fresh heartbeat row (cached payload);
* `gantry run` on stdio against the loopback fake model: start to the first reply, then
  one more turn (send to reply) in the running process.

Each figure is the median of `--runs`; the last column is other / binary. The floor it is
judged against, measured in the same run when build/arm64.py's root exists: a CPU-bound
pure-Python loop in the root's arm64 python3 under qemu-user against the host's python3
(timed inside each interpreter, so neither start-up nor the chroot counts).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.binary.rootfs import (  # noqa: E402
    INSTALL_PATH,
    NONROOT_UID,
    Sandbox,
    binary_machine,
    ensure_base_rootfs,
)
from tests.fakes.openai import FakeOpenAI  # noqa: E402
from tests.procs import ChildIO  # noqa: E402

KEY = "sk-bench-arch"


def make_heartbeat(data_dir: Path) -> None:
    """A fresh heartbeat row written by the app's own code (source install), readable by 65532."""
    from gantry import __version__, db, heartbeat

    conn = db.connect(data_dir / "gantry.db")
    heartbeat.touch(conn, __version__)
    conn.close()
    for path in data_dir.iterdir():
        os.chown(path, NONROOT_UID, NONROOT_UID)


LOOP = ("import time\nt = time.perf_counter()\nx = 0\nfor i in range(3_000_000):\n"
        "    x += i % 7\nprint(time.perf_counter() - t)")


def python_floor() -> tuple[float, float] | None:
    """(host python3, emulated arm64 python3) seconds for LOOP; None without the root."""
    import subprocess

    sys.path.insert(0, str(ROOT / "build"))
    import arm64

    if not (arm64.ROOTFS / ".gantry-rootfs").is_file():
        return None
    env = {"QEMU_CPU": os.environ.get("QEMU_CPU", arm64.QEMU_CPU)}
    native = subprocess.run(["python3", "-c", LOOP], capture_output=True, text=True, check=True)
    emulated = subprocess.run(arm64.chroot_command(["/usr/bin/python3", "-c", LOOP], env),
                              capture_output=True, text=True, check=True)
    return float(native.stdout), float(emulated.stdout)


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


class Subject:
    """One binary in its own sandbox."""

    def __init__(self, binary: Path, work: Path, base: Path) -> None:
        self.name = f"{binary.name} ({binary_machine(binary)})"
        work.mkdir(parents=True)
        self.sandbox = Sandbox.create(work, binary, base)
        self.status_data = self.sandbox.new_data_dir("data-status")
        self.rounds = 0

    def check(self, argv: list[str], **kw: object) -> None:
        done = self.sandbox.run(argv, timeout=600, **kw)  # type: ignore[arg-type]
        if done.returncode != 0:
            raise SystemExit(f"{self.name}: {argv} failed: {done.stderr[-2000:]}")

    def version_first(self) -> float:
        self.rounds += 1
        tmp = self.sandbox.new_tmp_dir(f"tmp-first-{self.rounds}")
        return timed(lambda: self.check([INSTALL_PATH, "version"], tmp=tmp))

    def version(self) -> float:
        return timed(lambda: self.check([INSTALL_PATH, "version"]))

    def status(self) -> float:
        make_heartbeat(self.status_data)  # fresh, so status answers 0 (healthy)
        return timed(lambda: self.check([INSTALL_PATH, "status"], env={"DATA_DIR": "/data"},
                                        data=self.status_data))

    def turns(self, fake: FakeOpenAI) -> tuple[float, float]:
        """(start to first reply, one more turn) of `gantry run` on stdio."""
        self.rounds += 1
        data = self.sandbox.new_data_dir(f"data-run-{self.rounds}")
        persona = self.sandbox.new_tmp_dir(f"persona-{self.rounds}")
        (persona / "PERSONA.md").write_text("You are the bench persona.\n")
        persona.chmod(0o755)
        env = {"CHANNEL": "stdio", "LLM_BASE_URL": fake.base_url, "LLM_API_KEY": KEY,
               "LLM_MODEL": "fake-model", "DATA_DIR": "/data", "PERSONA_DIR": "/persona"}
        start = time.perf_counter()
        run = ChildIO(self.sandbox.popen([INSTALL_PATH, "run"], env=env, data=data,
                                         binds={"/persona": persona}))
        try:
            run.send("first")
            run.expect("echo: first\n", timeout=600)
            first = time.perf_counter() - start
            start = time.perf_counter()
            run.send("second")
            run.expect("echo: second\n", timeout=600)
            second = time.perf_counter() - start
            run.close_stdin()
            run.wait_exit(120)
        finally:
            run.kill()
        return first, second


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--binary", type=Path, default=ROOT / "dist" / "gantry")
    ap.add_argument("--other", type=Path, default=ROOT / "dist" / "gantry-linux-arm64")
    args = ap.parse_args(argv)
    import tempfile

    base = ensure_base_rootfs()
    with tempfile.TemporaryDirectory(prefix="bench-arch-") as tmp:
        subjects = [Subject(b.resolve(), Path(tmp) / str(i), base)
                    for i, b in enumerate((args.binary, args.other))]
        fake = FakeOpenAI(api_key=KEY)
        fake.start_in_thread()
        figures: dict[str, list[list[float]]] = {}
        try:
            for _ in range(args.runs):
                floor = python_floor()
                if floor is not None:
                    for i, value in enumerate(floor):
                        figures.setdefault("floor: pure-Python loop (python3)",
                                           [[], []])[i].append(value)
                for i, s in enumerate(subjects):
                    first, second = s.turns(fake)
                    for key, value in (("version, first start (unpacks)", s.version_first()),
                                       ("version, cached", s.version()),
                                       ("status, cached", s.status()),
                                       ("run: start to first stdio reply", first),
                                       ("run: one more stdio turn", second)):
                        figures.setdefault(key, [[], []])[i].append(value)
        finally:
            fake.stop()
    a, b = (s.name for s in subjects)
    cpu = os.environ.get("QEMU_CPU", "unset: neoverse-n1")
    print(f"median of {args.runs} runs, seconds; QEMU_CPU={cpu}")
    print(f"{'':34} {a:>28} {b:>32}  ratio")
    for key, (xs, ys) in figures.items():
        mx, my = statistics.median(xs), statistics.median(ys)
        print(f"{key:34} {mx:28.3f} {my:32.3f}  {my / mx:5.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
