"""dist/gantry in a distroless/static-debian12:nonroot look-alike: no libc, no shell, uid 65532,
read-only root, writable /data and /tmp. What only the frozen, static binary can prove:
that it starts at all there, embeds its build info, answers through the real agent loop, trusts
the image's CA bundle, and resolves time zones from the image's tzdata.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.binary.conftest import ROOT
from tests.binary.rootfs import (
    CA_BUNDLE,
    HOST_LIBC,
    INSTALL_PATH,
    NONROOT_UID,
    Sandbox,
    binary_machine,
)
from tests.fakes.pki import PKI
from tests.procs import ChildIO

pytestmark = [pytest.mark.binary, pytest.mark.slow]

KEY = "sk-binary-smoke"
WAIT = 90.0  # first start unpacks the payload; the machine may be busy
STOP_WAIT = 20.0


def _run_env(base_url: str, **extra: str) -> dict[str, str]:
    return {
        "CHANNEL": "stdio",
        "LLM_BASE_URL": base_url,
        "LLM_API_KEY": KEY,
        "LLM_MODEL": "fake-model",
        "DATA_DIR": "/data",
        "PERSONA_DIR": "/persona",
        "MCP_MANIFEST": "/etc/gantry/mcp.toml",
        **extra,
    }


@pytest.fixture(scope="module")
def etc_gantry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("etc-gantry")
    shutil.copy(ROOT / "deploy" / "mcp.toml", d / "mcp.toml")
    d.chmod(0o755)
    return d


@pytest.fixture
def binds(persona_dir: Path, etc_gantry: Path) -> dict[str, Path]:
    return {"/persona": persona_dir, "/etc/gantry": etc_gantry}


class Running(ChildIO):
    """A `gantry run` inside the sandbox; the Popen pid is the onefile bootstrap itself."""

    default_wait = WAIT

    def wait(self, timeout: float = WAIT) -> int:
        """The exit code of a run that ends by itself (e.g. a boot failure)."""
        return self.wait_exit(timeout)

    def stop(self, sig: int = signal.SIGTERM, timeout: float | None = STOP_WAIT) -> int:
        return super().stop(sig, timeout)


@pytest.fixture
def start(sandbox: Sandbox, binds: dict[str, Path]) -> Iterator[Any]:
    started: list[Running] = []

    def _start(env: Mapping[str, str | None], data: Path | None = None,
               extra_binds: Mapping[str, Path] | None = None, uid: int = NONROOT_UID,
               tmp: Path | None = None) -> Running:
        proc = sandbox.popen([INSTALL_PATH, "run"], env=env, data=data, uid=uid, tmp=tmp,
                             binds={**binds, **(extra_binds or {})})
        r = Running(proc)
        started.append(r)
        return r

    try:
        yield _start
    finally:
        for r in started:
            r.kill()


def _status(sandbox: Sandbox, data: Path | None = None) -> subprocess.CompletedProcess[str]:
    return sandbox.run([INSTALL_PATH, "status"], env={"DATA_DIR": "/data"}, data=data, timeout=60)


def _wait_healthy(sandbox: Sandbox, data: Path, run: Running, timeout: float = WAIT) -> str:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = _status(sandbox, data)
        if last.returncode == 0:
            return last.stdout
        if run.proc.poll() is not None:
            break
        time.sleep(0.5)
    pytest.fail(f"gantry status never exited 0: {last}\nrun stderr:\n{run.stderr[-3000:]}")


# ----------------------------------------------------------------------------- the file itself


def test_binary_is_statically_linked(binary: Path) -> None:
    if shutil.which("file") is None or shutil.which("ldd") is None:
        pytest.skip("needs `file` and `ldd` on the host (apt-get install file libc-bin)")
    described = subprocess.run(["file", "-b", str(binary)], capture_output=True, text=True)
    assert "statically linked" in described.stdout, described.stdout
    ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
    assert "not a dynamic executable" in (ldd.stdout + ldd.stderr), ldd


def test_rootfs_is_distroless_like(sandbox: Sandbox) -> None:
    root = sandbox.root
    assert (root / CA_BUNDLE.lstrip("/")).stat().st_size > 100_000
    assert (root / "usr/share/zoneinfo/America/Los_Angeles").is_file()
    assert (root / "etc/services").is_file()  # netbase
    assert "nonroot:x:65532:65532:" in (root / "etc/passwd").read_text()
    assert (root / "tmp").stat().st_mode & 0o7777 == 0o1777
    for absent in ("bin/sh", "usr/bin/sh", "lib64", HOST_LIBC, "usr/bin/python3"):
        assert not (root / absent).exists(), absent
    elfs = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()
            and p.read_bytes()[:4] == b"\x7fELF"]
    assert elfs == [root / INSTALL_PATH.lstrip("/")]


# ----------------------------------------------------------------------------- version, status


def test_version_shows_embedded_build_info(
    sandbox: Sandbox, build_record: dict[str, str]
) -> None:
    r = sandbox.run([INSTALL_PATH, "version"], timeout=120)
    assert r.returncode == 0, r
    assert r.stdout.startswith(f"gantry {build_record['version']}\n"), r.stdout
    fields = dict(line.split(None, 1) for line in r.stdout.splitlines()[1:])
    assert fields["commit"] == build_record["commit"]
    assert fields["build_date"] == build_record["build_date"]
    assert fields["frozen"] == "yes"
    assert r.stderr == ""


def test_version_json_lists_what_the_sbom_lists(sandbox: Sandbox, binary: Path) -> None:
    """The bundled distributions `version --json` names are the SBOM's PyPI components, with
    the same versions, the platform is the binary's machine (issue 43: gantry-linux-arm64
    says linux-aarch64), and the checksums file matches the files next to it (issue 25)."""
    r = sandbox.run([INSTALL_PATH, "version", "--json"], timeout=120)
    assert r.returncode == 0, r
    listed = json.loads(r.stdout)["distributions"]
    assert json.loads(r.stdout)["platform"] == f"linux-{binary_machine(binary)}"
    bom = json.loads((binary.parent / f"{binary.name}.cdx.json").read_text())
    pypi = {c["name"]: c["version"] for c in bom["components"]
            if c["purl"].startswith("pkg:pypi/") and c["type"] == "library"}
    assert listed == pypi and {"aiogram", "mcp", "pydantic", "apsw"} <= set(listed)
    assert bom["metadata"]["component"]["version"] == json.loads(r.stdout)["version"]
    check = subprocess.run(["sha256sum", "-c", f"{binary.name}.sha256"], cwd=binary.parent,
                           capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.count(": OK") == 2, check


def test_status_fails_before_the_daemon_ran(sandbox: Sandbox) -> None:
    data = sandbox.new_data_dir("data-never-ran")
    r = _status(sandbox, data)
    assert r.returncode == 1, r
    assert "unhealthy" in r.stdout and "no database" in r.stdout


def _extraction(sandbox: Sandbox, build_record: dict[str, str]) -> Path:
    return sandbox.tmp / Path(build_record["tempdir_spec"]).relative_to("/tmp")


def test_cached_start_reuses_the_extraction_and_repairs_a_cut_file(
    sandbox: Sandbox, build_record: dict[str, str]
) -> None:
    """A later start rewrites nothing; a file whose size is wrong is unpacked again."""
    assert _status(sandbox).returncode == 1  # unpacks the payload if no test did yet
    where = _extraction(sandbox, build_record)
    files = sorted(p for p in where.rglob("*") if p.is_file() and not p.is_symlink())
    assert where / "gantry.bin" in files and len(files) > 20
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_size) for p in files}
    assert _status(sandbox).returncode == 1
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_size) for p in files} == before

    victim = where / "_json.so"  # not loaded by `status`
    original = victim.read_bytes()
    victim.write_bytes(original[: len(original) // 2])  # a crash mid-extraction
    assert _status(sandbox).returncode == 1
    assert victim.read_bytes() == original


def test_payload_leaves_out_what_gantry_never_needs(
    sandbox: Sandbox, build_record: dict[str, str]
) -> None:
    """frozenlist's C++ accelerator (and with it libstdc++) and aiohttp's websocket reader are
    kept out (build/build.py NOFOLLOW); their pure-Python twins import in their place."""
    assert _status(sandbox).returncode == 1  # unpacks the payload if no test did yet
    names = {p.name for p in _extraction(sandbox, build_record).rglob("*")}
    assert "gantry.bin" in names
    assert not {n for n in names if n.startswith(("libstdc++", "_frozenlist", "reader_c"))}
    r = sandbox.run([INSTALL_PATH, "version", "--json", "--import-times",
                     "frozenlist,aiohttp._websocket.reader"], timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    assert all(isinstance(ms, float) for ms in json.loads(r.stdout)["import_ms"].values()), r


def test_healthcheck_starts_without_inspect(sandbox: Sandbox) -> None:
    """status/version skip Nuitka's start-up import of inspect; run-like starts keep it."""
    verbose = {"DATA_DIR": "/data", "PYTHONVERBOSE": "1"}
    for argv in (["status"], ["version"], ["version", "--json"]):
        r = sandbox.run([INSTALL_PATH, *argv], env=verbose, timeout=60)
        assert "import 'gantry.cli'" in r.stderr, r.stderr[-2000:]  # verbose mode did work
        assert "import 'inspect'" not in r.stderr, argv
    r = sandbox.run([INSTALL_PATH, "version", "--import-times", "json"], env=verbose, timeout=60)
    assert r.returncode == 0 and "import 'inspect'" in r.stderr


def test_bad_cron_tz_fails_boot_clearly(sandbox: Sandbox, start: Any) -> None:
    run = start(_run_env("http://127.0.0.1:9/v1", CRON_TZ="Mars/Olympus"),
                data=sandbox.new_data_dir("data-bad-tz"))
    assert run.wait() == 1, run.stderr
    assert "CRON_TZ 'Mars/Olympus' is not a known IANA time zone" in run.stderr


def test_unusable_proxy_variables_fail_boot_clearly(sandbox: Sandbox, start: Any) -> None:
    """httpx, IDNA and the SOCKS check run inside the binary as from source: one line per
    variable, the proxy login never shown; socks5 needs socksio, which the binary leaves out."""
    run = start(_run_env("http://127.0.0.1:9/v1", HTTPS_PROXY="http://bob:hunter2@px:nope",
                         all_proxy="socks5://127.0.0.1:1080"),
                data=sandbox.new_data_dir("data-bad-proxy"))
    assert run.wait() == 1, run.stderr
    assert "HTTPS_PROXY='http://[REDACTED]@px:nope' is not a proxy URL" in run.stderr
    assert "all_proxy='socks5://127.0.0.1:1080' is not a proxy URL" in run.stderr
    assert "socksio" in run.stderr and "hunter2" not in run.stderr
    assert "Traceback" not in run.stderr


def test_time_zones_come_from_the_image_tzdata(
    sandbox: Sandbox, start: Any, tmp_path: Path
) -> None:
    """With the image's /usr/share/zoneinfo hidden, a valid zone no longer resolves: the
    binary carries no tz database of its own (the `tzdata` wheel is kept out)."""
    empty = tmp_path / "no-zoneinfo"
    empty.mkdir()
    run = start(_run_env("http://127.0.0.1:9/v1", CRON_TZ="America/Los_Angeles"),
                data=sandbox.new_data_dir("data-no-tzdata"),
                extra_binds={"/usr/share/zoneinfo": empty})
    assert run.wait() == 1, run.stderr
    assert "CRON_TZ 'America/Los_Angeles' is not a known IANA time zone" in run.stderr


# ----------------------------------------------------------------------------- gantry run


def test_run_answers_over_stdio_and_is_healthy(
    sandbox: Sandbox, start: Any, fake_openai: Any
) -> None:
    data = sandbox.new_data_dir("data-run")
    assert _status(sandbox, data).returncode == 1
    run = start(_run_env(fake_openai.base_url, CRON_TZ="America/Los_Angeles"), data=data)
    run.send("hello from distroless")
    run.expect("echo: hello from distroless\n")
    healthy = _wait_healthy(sandbox, data, run)
    assert healthy.startswith("healthy:"), healthy
    assert fake_openai.last_request.headers.get("Authorization") == f"Bearer {KEY}"
    # End of input ends the REPL cleanly.
    run.close_stdin()
    assert run.wait(STOP_WAIT) == 0, run.stderr[-3000:]
    assert "gantry stopped" in run.stderr
    assert "Traceback" not in run.stderr
    assert run.stdout == "echo: hello from distroless\n"
    assert KEY not in run.stderr


def test_every_turn_carries_the_local_time_from_the_image_tzdata(
    sandbox: Sandbox, start: Any, fake_openai: Any
) -> None:
    """The time footer inside the binary: CRON_TZ read from the image's tzdata, the offset
    and abbreviation of that zone, the calendar dates; the echo shows only the user's words."""
    data = sandbox.new_data_dir("data-time")
    run = start(_run_env(fake_openai.base_url, CRON_TZ="America/Los_Angeles"), data=data)
    run.send("what's on tomorrow?")
    run.expect("echo: what's on tomorrow?\n")
    content = fake_openai.last_request.messages[-1]["content"]
    assert content.startswith("what's on tomorrow?\n\n[gantry context, not from the user] Now: ")
    found = re.search(r"Now: \w+day (\d{4}-\d\d-\d\d) \d\d:\d\d, UTC(-0[78]):00 "
                      r"\(America/Los_Angeles, (P[SD]T)\)\.", content)
    assert found, content
    assert (found[2], found[3]) in (("-08", "PST"), ("-07", "PDT")), content
    assert "Tomorrow: " in content and " (today)" in content and "Next week: Mon " in content
    run.close_stdin()
    assert run.wait(STOP_WAIT) == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr


def test_cron_job_fires_in_the_frozen_binary(
    sandbox: Sandbox, start: Any, fake_openai: Any
) -> None:
    """cronsim and the image's tzdata inside the binary: a one-shot fires and is pushed on
    stdout with no user message, and `gantry cron list` reads the jobs without sqlite3."""
    from tests.fakes.openai import Call, Reply, ToolCalls

    data = sandbox.new_data_dir("data-cron")
    run = start(_run_env(fake_openai.base_url, CRON_TZ="America/Los_Angeles",
                         CRON_TICK_SECONDS="1"), data=data)
    fake_openai.push(
        ToolCalls([Call("cron_schedule", {"when": "in 2 seconds", "prompt": "Tea is ready."})]),
        Reply("Scheduled."),
        Reply("Your tea is ready."),
    )
    run.send("remind me about the tea in 2 seconds")
    run.expect("Scheduled.\n")
    run.expect("Your tea is ready.\n")
    tool = next(m for m in fake_openai.requests[-2].messages if m["role"] == "tool")
    assert tool["content"].startswith("scheduled job #1 (once); next run "), tool
    assert " PST " in tool["content"] or " PDT " in tool["content"], tool
    listing = sandbox.run([INSTALL_PATH, "cron", "list", "--all"], env={"DATA_DIR": "/data"},
                          data=data, timeout=60)
    assert listing.returncode == 0, listing.stderr
    assert "#1 [done] stdio:local · once" in listing.stdout
    assert run.stop(signal.SIGTERM) == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr


def test_stdio_run_stops_on_sigterm_with_stdin_open(
    sandbox: Sandbox, start: Any, fake_openai: Any
) -> None:
    """`docker compose run -it` REPL: SIGTERM to the bootstrap while the app waits on stdin
    must still end in a clean exit 0, not the bootstrap's SIGKILL after the grace time."""
    run = start(_run_env(fake_openai.base_url), data=sandbox.new_data_dir("data-stdio-term"))
    run.send("ping")
    run.expect("echo: ping\n")
    t0 = time.monotonic()
    assert run.stop(signal.SIGTERM) == 0, run.stderr[-3000:]
    assert time.monotonic() - t0 < 5, "shutdown should not wait for the grace time"
    assert "gantry stopped" in run.stderr


def _telegram_run(start: Any, fake_openai: Any, tg_url: str, data: Path) -> Running:
    """`gantry run` on Telegram (user 7) against the fake Bot API at `tg_url`, receiving."""
    run: Running = start(
        _run_env(fake_openai.base_url, CHANNEL="telegram", TELEGRAM_BOT_TOKEN="123456:smoke",
                 TELEGRAM_ALLOWED_USERS="7", TELEGRAM_API_URL=tg_url),
        data=data,
    )
    run.wait_stderr('"receiving"')
    return run


def test_telegram_run_is_healthy_and_stops_cleanly_on_sigterm(
    sandbox: Sandbox, start: Any, fake_openai: Any
) -> None:
    """The production path: aiogram long-polls a loopback fake Bot API; `docker stop` sends
    SIGTERM to the bootstrap (PID 1), which forwards SIGINT; the app drains and exits 0."""
    from tests.fakes.telegram import FakeTelegram

    tg = FakeTelegram()
    tg_url = tg.start_in_thread()
    try:
        data = sandbox.new_data_dir("data-telegram")
        run = _telegram_run(start, fake_openai, tg_url, data)
        tg.push_text(user_id=7, text="hello from telegram")
        sent = tg.wait_sent_sync(chat_id=7, timeout=WAIT)
        assert "echo: hello from telegram" in sent
        assert _wait_healthy(sandbox, data, run).startswith("healthy:")
        assert run.stop(signal.SIGTERM) == 0, run.stderr[-3000:]
        assert '"signal": "SIGINT"' in run.stderr  # SIGTERM arrived as the bootstrap's SIGINT
        assert "gantry stopped" in run.stderr
        assert "Traceback" not in run.stderr
        assert run.stdout == ""
    finally:
        tg.stop()


def _app_data_pages_kib(bootstrap: int) -> tuple[int, int]:
    """(resident KiB of gantry.bin's read-only data mappings, pid) of the app under the
    bootstrap: what gantry.pages hands back once imports settle."""
    kids = Path(f"/proc/{bootstrap}/task/{bootstrap}/children").read_text().split()
    app = int(kids[0])
    exe = str(Path(f"/proc/{app}/exe").resolve())
    total, keep = 0, False
    for line in Path(f"/proc/{app}/smaps").read_text().splitlines():
        fields = line.split()
        if fields and "-" in fields[0] and not fields[0].endswith(":"):
            keep = len(fields) >= 6 and fields[1] == "r--p" and fields[5].endswith("gantry.bin")
        elif keep and fields[:1] == ["Rss:"]:
            total += int(fields[1])
    assert exe.endswith("gantry.bin"), exe
    return total, app


def test_telegram_run_hands_back_its_import_pages_and_still_imports(
    sandbox: Sandbox, start: Any, fake_openai: Any
) -> None:
    """Issue 44: once imports settle, the app's read-only data pages (the bytecode and
    constants every import read) are out of its RSS; a later turn that imports more (the
    second message reaches code the first did not) still works, read back from the file."""
    from tests.fakes.telegram import FakeTelegram

    tg = FakeTelegram()
    tg_url = tg.start_in_thread()
    try:
        run = _telegram_run(start, fake_openai, tg_url, sandbox.new_data_dir("data-pages"))
        tg.push_text(user_id=7, text="first")
        assert "echo: first" in tg.wait_sent_sync(chat_id=7, timeout=WAIT)
        deadline = time.monotonic() + 30
        kib, _ = _app_data_pages_kib(run.proc.pid)
        while kib > 2048 and time.monotonic() < deadline:  # the blob is ~23 MB, ~15 resident
            time.sleep(0.5)
            kib, _ = _app_data_pages_kib(run.proc.pid)
        assert kib <= 2048, f"{kib} KiB of gantry.bin's read-only data still resident"
        tg.push_text(user_id=7, text="/status")
        tg.push_text(user_id=7, text="second")
        assert "echo: second" in tg.wait_sent_sync(chat_id=7, count=3, timeout=WAIT)
        assert run.stop(signal.SIGTERM) == 0, run.stderr[-3000:]
        assert "Traceback" not in run.stderr
    finally:
        tg.stop()


def test_telegram_stop_ends_a_slow_turn_in_the_frozen_binary(
    sandbox: Sandbox, start: Any, fake_openai: Any
) -> None:
    """/stop from the command menu: a model call that would take 30 s is cut (waits bounded
    far below that), one short reply, then the next message is answered."""
    from tests.fakes.openai import Reply
    from tests.fakes.telegram import FakeTelegram

    tg = FakeTelegram()
    tg_url = tg.start_in_thread()
    try:
        fake_openai.push(Reply("too late", delay=30.0))
        run = start(
            _run_env(fake_openai.base_url, CHANNEL="telegram", TELEGRAM_BOT_TOKEN="123456:stop",
                     TELEGRAM_ALLOWED_USERS="7", TELEGRAM_API_URL=tg_url),
            data=sandbox.new_data_dir("data-telegram-stop"),
        )
        run.wait_stderr('"receiving"')
        commands = tg.wait_calls_sync("setMyCommands", 1, timeout=WAIT)[0].params["commands"]
        assert {"stop", "cancel"} <= {c["command"] for c in commands}
        tg.push_text(user_id=7, text="think hard")
        deadline = time.monotonic() + WAIT
        while not fake_openai.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake_openai.requests, run.stderr[-3000:]
        tg.push_text(user_id=7, text="meanwhile")
        t0 = time.monotonic()
        tg.push_text(user_id=7, text="/stop")
        assert tg.wait_sent_sync(chat_id=7, count=1, timeout=15)[:1] == ["Stopped."]
        print(f"\n/stop in the binary: {(time.monotonic() - t0) * 1000:.0f} ms")
        assert tg.wait_sent_sync(chat_id=7, count=2, timeout=15) == ["Stopped.",
                                                                      "echo: meanwhile"]
        assert run.stop(signal.SIGTERM) == 0, run.stderr[-3000:]
        assert "turn stopped by the user" in run.stderr
        assert "Traceback" not in run.stderr
    finally:
        tg.stop()


def test_sighup_to_the_bootstrap_reloads_the_persona(
    sandbox: Sandbox, start: Any, fake_openai: Any
) -> None:
    """`docker kill -s HUP`, `systemctl reload`: the signal reaches the bootstrap, which
    forwards it to the program and keeps running."""
    run = start(_run_env(fake_openai.base_url), data=sandbox.new_data_dir("data-hup"))
    run.send("before")
    run.expect("echo: before\n")
    assert run.stderr.count("persona loaded") == 1
    run.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + WAIT
    while run.stderr.count("persona loaded") < 2 and time.monotonic() < deadline:
        assert run.proc.poll() is None, run.stderr[-3000:]
        time.sleep(0.1)
    assert run.stderr.count("persona loaded") == 2, run.stderr[-3000:]
    run.send("after")
    run.expect("echo: after\n")
    assert run.proc.poll() is None
    assert run.stop(signal.SIGTERM) == 0, run.stderr[-3000:]
    assert "gantry stopped" in run.stderr


# ----------------------------------------------------------------------------- any environment

# The image's environment (PATH, SSL_CERT_FILE) plus what real deployments add: locale
# variables naming locales that do not exist in distroless (or at all), a TZ, no HOME or one
# that is not there, an OpenShift-style uid with no passwd entry.
LOCALES = ("C.UTF-8", "en_US.UTF-8", "POSIX", "xx_YY.bogus@nonsense")
ENVIRONMENTS: dict[str, dict[str, str | None]] = {
    **{f"{var}={value}": {var: value} for var in ("LANG", "LC_ALL", "LC_CTYPE")
       for value in LOCALES},
    "TZ=America/Los_Angeles": {"TZ": "America/Los_Angeles"},
    "TZ=garbage": {"TZ": "Nowhere/Nothing"},
    "HOME unset": {"HOME": None},
    "HOME=/nonexistent": {"HOME": "/nonexistent"},
    "LC_ALL=en_US.UTF-8, no HOME, uid 1000650000": {"LC_ALL": "en_US.UTF-8", "HOME": None},
}
NO_PASSWD_UID = 1000650000


@pytest.mark.parametrize("extra", ENVIRONMENTS.values(), ids=ENVIRONMENTS.keys())
def test_version_status_and_stdio_run_under_any_environment(
    sandbox: Sandbox, start: Any, fake_openai: Any, build_record: dict[str, str],
    extra: dict[str, str | None], request: pytest.FixtureRequest,
) -> None:
    """Same output, UTF-8 in and out, no abort, whatever the locale variables say."""
    case = request.node.callspec.id
    uid = NO_PASSWD_UID if "uid" in case else NONROOT_UID
    tag = re.sub(r"[^A-Za-z0-9]+", "-", case)
    # Its own /tmp, as its own container would have (a uid may not share another's unpack).
    tmp = sandbox.new_tmp_dir(f"tmp-env-{tag}") if uid != NONROOT_UID else None
    data = sandbox.new_data_dir(f"data-env-{tag}", uid=uid)

    version = sandbox.run([INSTALL_PATH, "version"], env=extra, uid=uid, tmp=tmp, timeout=120)
    assert version.returncode == 0, version
    assert version.stdout.startswith(f"gantry {build_record['version']}\n"), version.stdout
    assert version.stderr == ""

    def status() -> subprocess.CompletedProcess[str]:
        return sandbox.run([INSTALL_PATH, "status"], env={"DATA_DIR": "/data", **extra},
                           uid=uid, tmp=tmp, data=data)

    never_ran = status()
    assert never_ran.returncode == 1 and "no database" in never_ran.stdout, never_ran

    run = start({**_run_env(fake_openai.base_url), **extra}, data=data, uid=uid, tmp=tmp)
    run.send("héllo wörld ✓ 日本")
    run.expect("echo: héllo wörld ✓ 日本\n")
    assert fake_openai.last_request.last_user_text == "héllo wörld ✓ 日本"
    deadline = time.monotonic() + WAIT
    while (healthy := status()).returncode != 0 and time.monotonic() < deadline:
        assert run.proc.poll() is None, run.stderr[-3000:]
        time.sleep(0.5)
    assert healthy.returncode == 0 and healthy.stdout.startswith("healthy:"), healthy
    assert healthy.stderr == ""
    run.close_stdin()
    assert run.wait(STOP_WAIT) == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and "locale" not in run.stderr.lower(), run.stderr


# ----------------------------------------------------------------------------- TLS


class TLSProxy:
    """TLS on 127.0.0.1 in front of the fake (plain HTTP) server, with the test CA's cert."""

    def __init__(self, pki: PKI, upstream_port: int) -> None:
        self.ctx = pki.server_context()
        self.upstream_port = upstream_port
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self.handshake_errors: list[str] = []
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            server = self.loop.run_until_complete(
                asyncio.start_server(self._client, "127.0.0.1", 0, ssl=self.ctx)
            )
            self.port = server.sockets[0].getsockname()[1]
            self.loop.set_exception_handler(
                lambda _l, c: self.handshake_errors.append(str(c.get("exception")))
            )
            ready.set()
            self.loop.run_forever()
            server.close()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert ready.wait(10)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            except (OSError, ssl.SSLError):
                pass
            finally:
                w.close()

        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}/v1"

    @property
    def origin(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def tls_proxy(pki: PKI, fake_openai: Any) -> Iterator[TLSProxy]:
    port = int(fake_openai.base_url.rsplit(":", 1)[1].split("/", 1)[0])
    proxy = TLSProxy(pki, port)
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture
def bundle_with_test_ca(sandbox: Sandbox, pki: PKI, tmp_path: Path) -> Path:
    bundle = tmp_path / "ca-certificates.crt"
    image_bundle = (sandbox.root / CA_BUNDLE.lstrip("/")).read_text()
    bundle.write_text(image_bundle + pki.ca_pem)
    bundle.chmod(0o644)
    return bundle


def test_https_verifies_against_the_image_ca_bundle(
    sandbox: Sandbox, start: Any, tls_proxy: TLSProxy, bundle_with_test_ca: Path
) -> None:
    """The model is reached over TLS only because the image's bundle (SSL_CERT_FILE, as set
    by distroless) holds the test CA: the binary's own certifi copy does not."""
    run = start(_run_env(tls_proxy.base_url), data=sandbox.new_data_dir("data-tls"),
                extra_binds={CA_BUNDLE: bundle_with_test_ca})
    run.send("over tls")
    run.expect("echo: over tls\n")
    assert run.stop() == 0


def test_https_fails_clearly_when_the_ca_is_not_in_the_bundle(
    sandbox: Sandbox, start: Any, tls_proxy: TLSProxy
) -> None:
    run = start(_run_env(tls_proxy.base_url), data=sandbox.new_data_dir("data-tls-bad"))
    run.send("over tls")
    reply = run.expect("\n")
    assert "echo:" not in reply
    assert "Sorry" in reply, reply
    run.wait_stderr("CERTIFICATE_VERIFY_FAILED")
    assert run.stop() == 0


def test_telegram_over_https_trusts_the_image_bundle(
    sandbox: Sandbox, start: Any, fake_openai: Any, pki: PKI, bundle_with_test_ca: Path
) -> None:
    """aiogram on its own would only trust the certifi copy inside the binary; gantry gives it
    the image's bundle ($SSL_CERT_FILE), so a private Bot API server behind a private CA works."""
    from tests.fakes.telegram import FakeTelegram

    tg = FakeTelegram()
    tg_url = tg.start_in_thread()
    proxy = TLSProxy(pki, int(tg_url.rsplit(":", 1)[1]))
    try:
        run = start(
            _run_env(fake_openai.base_url, CHANNEL="telegram", TELEGRAM_BOT_TOKEN="123456:tls",
                     TELEGRAM_ALLOWED_USERS="7", TELEGRAM_API_URL=proxy.origin),
            data=sandbox.new_data_dir("data-telegram-tls"),
            extra_binds={CA_BUNDLE: bundle_with_test_ca},
        )
        run.wait_stderr('"receiving"')
        tg.push_text(user_id=7, text="private bot api")
        assert "echo: private bot api" in tg.wait_sent_sync(chat_id=7, timeout=WAIT)
        assert run.stop(signal.SIGTERM) == 0, run.stderr[-3000:]
    finally:
        proxy.close()
        tg.stop()


def test_unusable_ssl_cert_file_fails_boot_clearly(sandbox: Sandbox, start: Any) -> None:
    run = start(_run_env("http://127.0.0.1:9/v1", SSL_CERT_FILE="/etc/ssl/certs/missing.crt"),
                data=sandbox.new_data_dir("data-bad-ca"))
    assert run.wait() == 1
    assert "SSL_CERT_FILE=/etc/ssl/certs/missing.crt cannot be read" in run.stderr
    assert "Traceback" not in run.stderr


# ----------------------------------------------------------------------------- MCP


@pytest.fixture
def mcp_binds(tmp_path_factory: pytest.TempPathFactory, sandbox: Sandbox) -> dict[str, Path]:
    """A static MCP server at /opt/mcp and a manifest naming it at /etc/gantry/mcp.toml."""
    from tests.fakes.mcp_servers import static_fixture

    opt = tmp_path_factory.mktemp("opt-mcp")  # the server is for gantry's machine, as in an image
    shutil.copy(static_fixture(binary_machine(sandbox.root / INSTALL_PATH.lstrip("/"))),
                opt / "mcp-static")
    (opt / "mcp-static").chmod(0o755)
    opt.chmod(0o755)
    etc = tmp_path_factory.mktemp("etc-gantry-mcp")
    (etc / "mcp.toml").write_text(
        '[[server]]\nname = "st"\ncommand = "/opt/mcp/mcp-static"\n'
        'env = { GRANTED = "${GRANTED}" }\n'
    )
    (etc / "mcp.toml").chmod(0o644)
    etc.chmod(0o755)
    (sandbox.root / "opt" / "mcp").mkdir(parents=True, exist_ok=True)  # the mount point
    return {"/opt/mcp": opt, "/etc/gantry": etc}


def test_run_with_a_static_mcp_child(
    sandbox: Sandbox, start: Any, fake_openai: Any, mcp_binds: dict[str, Path]
) -> None:
    from tests.fakes.openai import Call, Reply, ToolCalls

    data = sandbox.new_data_dir("data-mcp")
    fake_openai.push(
        ToolCalls([Call("st__echo", {"text": "from a static child"}, id="s1"),
                   Call("st__env", {"name": "LLM_API_KEY"}, id="s2"),
                   Call("st__env", {"name": "GRANTED"}, id="s3")]),
        Reply("tools ok"),
        ToolCalls([Call("st__crash", {}, id="s4")]),
        Reply("it crashed"),
    )
    run = start(_run_env(fake_openai.base_url, GRANTED="yes"), data=data, extra_binds=mcp_binds)
    run.send("use the tools")
    run.expect("tools ok\n")
    results = [m["content"] for m in fake_openai.requests[1].messages if m["role"] == "tool"]
    assert results == ["from a static child", "<unset>", "yes"]
    run.send("crash it")
    run.expect("it crashed\n")
    run.wait_stderr("mcp server restarted")
    fake_openai.push(ToolCalls([Call("st__pid", {}, id="s5")]), Reply("back"))
    run.send("again")
    run.expect("back\n")
    pid = [m["content"] for m in fake_openai.requests[-1].messages if m["role"] == "tool"][-1]
    assert str(pid).isdigit()
    run.send("/status")
    assert "mcp st: up, 4 tools" in run.expect("restarts\n")
    run.close_stdin()
    assert run.wait(STOP_WAIT) == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and KEY not in run.stderr


def test_tools_list_in_the_image(sandbox: Sandbox, mcp_binds: dict[str, Path]) -> None:
    done = sandbox.run([INSTALL_PATH, "tools", "list"],
                       env={"MCP_MANIFEST": "/etc/gantry/mcp.toml", "GRANTED": "x"},
                       binds=mcp_binds, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("MCP server st speaks MCP ") for line in lines)  # its era
    names = [line.split()[0] for line in lines[:-1] if not line.startswith("MCP server ")]
    assert names == ["cron_cancel", "cron_list", "cron_schedule", "memory_forget",
                     "memory_recall", "memory_store", "send_attachment", "st__crash",
                     "st__echo", "st__env", "st__pid", "watch_add", "watch_cancel",
                     "watch_list"]  # the built-in tools too (watch_* and send_attachment
    # with MCP servers): what the model is offered
    assert done.stdout.splitlines()[-1].startswith("tools offered: 14 (10 built in + 4 MCP), ~")
