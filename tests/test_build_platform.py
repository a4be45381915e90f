"""The build names no platform: the loader it carries is the one the running platform's
binaries ask for (build/elf.py), whatever the machine, class or byte order of the ELF."""

from __future__ import annotations

import importlib.util
import os
import re
import struct
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
EM_X86_64, EM_AARCH64, EM_ARM, EM_PPC64 = 62, 183, 40, 21


def _elf_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gantry_build_elf", ROOT / "build" / "elf.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


elf = _elf_module()


def fake_elf(machine: int, interp: str | None, wide: bool = True, little: bool = True) -> bytes:
    """A minimal ELF image: header, a PT_LOAD, and (if given) a PT_INTERP naming `interp`."""
    o = "<" if little else ">"
    ehsize, phentsize = (64, 56) if wide else (52, 32)
    headers = [(1, 0, 0)]  # PT_LOAD first: the PT_INTERP must be found, not assumed first
    data = (interp.encode() + b"\0") if interp is not None else b""
    if interp is not None:
        headers.append((3, ehsize + phentsize * 2, len(data)))
    ident = b"\x7fELF" + bytes([2 if wide else 1, 1 if little else 2, 1]) + bytes(9)
    if wide:
        head = ident + struct.pack(o + "HHIQQQIHHHHHH", 2, machine, 1, 0, ehsize, 0, 0, ehsize,
                                   phentsize, len(headers), 0, 0, 0)
        table = b"".join(struct.pack(o + "IIQQQQQQ", t, 0, off, 0, 0, size, size, 1)
                         for t, off, size in headers)
    else:
        head = ident + struct.pack(o + "HHIIIIIHHHHHH", 2, machine, 1, 0, ehsize, 0, 0, ehsize,
                                   phentsize, len(headers), 0, 0, 0)
        table = b"".join(struct.pack(o + "IIIIIIII", t, off, 0, 0, size, size, 0, 1)
                         for t, off, size in headers)
    pad = b"\0" * (ehsize + phentsize * 2 - len(head) - len(table))
    return head + table + pad + data


@pytest.mark.parametrize(("machine", "loader", "wide", "little"), [
    (EM_X86_64, "/lib64/ld-linux-x86-64.so.2", True, True),
    (EM_AARCH64, "/lib/ld-linux-aarch64.so.1", True, True),
    (EM_ARM, "/lib/ld-linux-armhf.so.3", False, True),
    (EM_PPC64, "/lib64/ld64.so.1", True, False),
])
def test_the_loader_is_read_from_the_binary_on_any_platform(
        machine: int, loader: str, wide: bool, little: bool) -> None:
    assert elf.elf_interpreter(fake_elf(machine, loader, wide, little)) == loader
    assert elf.elf_interpreter(fake_elf(machine, None, wide, little)) is None  # static


@pytest.mark.parametrize(("machine", "name"), [(EM_X86_64, "x86_64"), (EM_AARCH64, "aarch64")])
def test_the_smoke_test_knows_the_machine_a_binary_is_for(
        tmp_path: Path, machine: int, name: str) -> None:
    """tests/binary/rootfs.py reads it to decide on emulation (issue 43)."""
    from tests.binary.rootfs import binary_machine, emulator_for

    path = tmp_path / "bin"
    path.write_bytes(fake_elf(machine, None))
    assert binary_machine(path) == name
    if name == os.uname().machine:
        assert emulator_for(name) is None  # the host runs its own binaries


def test_not_an_elf_is_an_error() -> None:
    with pytest.raises(ValueError, match="not an ELF"):
        elf.elf_interpreter(b"#!/bin/sh\n")


def test_the_running_interpreter_names_its_own_loader() -> None:
    """What the build carries on this machine: the loader this Python was linked against."""
    loader = elf.elf_interpreter(Path(sys.executable).resolve().read_bytes())
    assert loader is not None and Path(loader).name.startswith("ld"), loader
    assert Path(loader).exists()


# The one build file that is about a platform: the arm64 cross-build driver (issue 43), which
# runs build/build.py unchanged inside an arm64 root.
CROSS_DRIVER = "arm64.py"


def test_build_names_no_platform() -> None:
    """No architecture, triplet or loader name is written into the build (issue 25): not in
    build/ (the arm64 driver aside) and not in the Dockerfile's builder; the Dockerfile's
    prebuilt-binary stages (dist-amd64, dist-arm64) are named after the arch they serve."""
    pattern = re.compile(r"x86[_-]64|amd64|aarch64|arm64|ld-linux|lib64|linux-gnu", re.I)
    found = [f"{path.name}:{n}" for path in sorted((ROOT / "build").glob("*.[pc]*"))
             if path.suffix in (".py", ".c") and path.name != CROSS_DRIVER
             for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    lines = [line for line in (ROOT / "Dockerfile.distroless").read_text().splitlines()
             if not line.lstrip().startswith("#")]
    builder = lines[:next(i for i, line in enumerate(lines) if line.startswith("FROM scratch"))]
    dockerfile = [line for line in builder if pattern.search(line)]
    assert found == [] and dockerfile == []
    assert any(line.startswith("FROM python:") for line in builder)
