"""deploy/systemd/gantry.service under a real systemd 252, installed by the unit's own steps.

The unit runs dist/gantry on the Telegram channel against loopback fakes. What only a real
service manager shows: `systemctl start` returning after READY=1 (Type=notify, from the
unpacked child: NotifyAccess=all), STATUS= in `systemctl status`, WATCHDOG=1 pings, a clean
stop that drains the in-flight turn (exit 0), a restart after kill -9, and `gantry status`
saying "stopped" right after a clean stop.

Tests named ``*_issue9_*`` need the bootstrap to forward SIGHUP to the app (issue 9 §5): they
fail, not skip, on a binary that exits on SIGHUP instead.
"""

from __future__ import annotations

import shlex
import time
from typing import Any

import pytest

from tests.systemd.conftest import Fakes, Machine
from tests.systemd.unit import directives, install_steps

pytestmark = [pytest.mark.systemd, pytest.mark.slow]

PERSONA = "/etc/gantry/persona/PERSONA.md"
BOOT = 90.0  # aiogram's import and the first unpack on a busy 2-core machine


@pytest.fixture(scope="module")
def installed(machine: Machine) -> dict[str, float]:
    """Run the unit header's install steps verbatim in /src; the last one is
    `systemctl enable --now gantry`, which for Type=notify blocks until READY=1."""
    times = {}
    for step in install_steps():
        t0 = time.monotonic()
        r = machine.sh(step, check=False, cwd="/src", timeout=300)
        times[step] = time.monotonic() - t0
        assert r.returncode == 0, f"install step failed: {step}\n{r.stdout}\n{r.stderr}\n" \
                                  f"{machine.journal()[-3000:]}"
    return times


def ensure_running(m: Machine) -> None:
    if m.show("ActiveState")["ActiveState"] != "active":
        m.sh("systemctl reset-failed gantry; systemctl start gantry", timeout=BOOT + 30)


def say(fakes: Fakes, text: str, count: int) -> list[str]:
    """Send a Telegram message and wait for the `count`-th reply to the test user."""
    fakes.telegram.push_text(user_id=Fakes.USER, text=text)
    return fakes.telegram.wait_sent_sync(chat_id=Fakes.USER, count=count, timeout=BOOT)


def replies(fakes: Fakes) -> int:
    return len(fakes.telegram.sent_texts(Fakes.USER))


def persona_loads(m: Machine) -> int:
    return m.journal().count('"persona loaded"')


def test_enable_now_returns_after_ready_with_status(machine: Machine, installed: Any) -> None:
    state = machine.show("ActiveState", "SubState", "StatusText", "Type", "NotifyAccess")
    assert (state["ActiveState"], state["SubState"]) == ("active", "running"), state
    assert state["StatusText"].startswith("receiving on telegram; ")  # STATUS= from sd_notify
    assert state["Type"] == "notify" and state["NotifyAccess"] == "all"
    machine.wait_for("the 'receiving' log line", lambda: '"receiving"' in machine.journal(), 10)
    status = machine.sh("systemctl status gantry --no-pager", check=False).stdout
    assert "Status: \"receiving on telegram; " in status, status


def test_documentation_points_at_installed_files(machine: Machine, installed: Any) -> None:
    shown = machine.show("Documentation")["Documentation"].split()
    assert shown == directives()["Documentation"]
    for uri in shown:
        path = uri.removeprefix("file://")
        assert machine.sh(f"test -s {shlex.quote(path)}", check=False).returncode == 0, path


def test_answers_telegram_inside_the_unit_sandbox(
    machine: Machine, installed: Any, fakes: Fakes
) -> None:
    ensure_running(machine)
    sent = say(fakes, "hello from systemd", replies(fakes) + 1)
    assert sent[-1] == "echo: hello from systemd"
    r = machine.sh("DATA_DIR=/var/lib/gantry /usr/local/bin/gantry status", check=False)
    assert r.returncode == 0 and r.stdout.startswith("healthy:"), r


def test_watchdog_pings_arrive(machine: Machine, installed: Any) -> None:
    ensure_running(machine)
    assert machine.show("WatchdogUSec")["WatchdogUSec"] == "1min"
    first = machine.show("WatchdogTimestampMonotonic")["WatchdogTimestampMonotonic"]
    assert first not in ("", "0")
    # The heartbeat sends WATCHDOG=1 every 15 s; systemd records the time of the last one.
    machine.wait_for("a second WATCHDOG=1", lambda: machine.show("WatchdogTimestampMonotonic")[
        "WatchdogTimestampMonotonic"] != first, timeout=25)


def _reload_check(m: Machine, fakes: Fakes, how: str, marker: str) -> None:
    ensure_running(m)
    pid = m.show("MainPID")["MainPID"]
    loads = persona_loads(m)
    m.sh(f"printf 'You are the {marker} persona.\\n' > {PERSONA}")
    r = m.sh(how, check=False)
    assert r.returncode == 0, f"{how}: {r.stderr}"
    m.wait_for(f"a persona reload after `{how}`", lambda: persona_loads(m) > loads, 20)
    time.sleep(1)  # a bootstrap that dies on SIGHUP takes the service down right here
    state = m.show("ActiveState", "MainPID", "NRestarts")
    assert state["ActiveState"] == "active" and state["MainPID"] == pid, (
        f"`{how}` ended the service (the bootstrap must forward SIGHUP): {state}\n"
        f"{m.journal()[-2000:]}")
    say(fakes, f"after {marker}", replies(fakes) + 1)
    system = fakes.model.last_request.messages[0]["content"]
    assert f"the {marker} persona" in system, system


def test_issue9_systemctl_reload_rereads_persona_and_keeps_running(
    machine: Machine, installed: Any, fakes: Fakes
) -> None:
    """ExecReload= sends SIGHUP to MAINPID, the onefile bootstrap: it must forward it."""
    _reload_check(machine, fakes, "systemctl reload gantry", "reloaded")


def test_issue9_systemctl_kill_hup_rereads_persona_and_keeps_running(
    machine: Machine, installed: Any, fakes: Fakes
) -> None:
    """`systemctl kill -s HUP` signals every process of the unit, the bootstrap included."""
    _reload_check(machine, fakes, "systemctl kill -s HUP gantry", "hup-killed")


def test_stop_drains_the_turn_exits_0_and_status_says_stopped(
    machine: Machine, installed: Any, fakes: Fakes
) -> None:
    from tests.fakes.openai import Echo

    ensure_running(machine)
    before = replies(fakes)
    asked = len(fakes.model.requests)
    fakes.model.push(Echo(delay=3))
    fakes.telegram.push_text(user_id=Fakes.USER, text="slow turn")
    machine.wait_for("the slow turn reaching the model",
                     lambda: len(fakes.model.requests) > asked, BOOT)
    t0 = time.monotonic()
    machine.sh("systemctl stop gantry", timeout=60)
    took = time.monotonic() - t0
    state = machine.show("ActiveState", "Result", "ExecMainCode", "ExecMainStatus")
    assert state["ActiveState"] == "inactive", state
    assert state["Result"] == "success", state
    assert state["ExecMainStatus"] == "0", state  # the bootstrap exited 0, no SIGKILL
    assert took < 15, f"stop took {took:.1f} s (TimeoutStopSec=15 would have killed it)"
    texts = fakes.telegram.sent_texts(Fakes.USER)
    assert len(texts) == before + 1 and texts[-1] == "echo: slow turn", texts
    journal = machine.journal()
    assert "waiting for the in-flight turn" in journal
    assert '"gantry stopped"' in journal
    # `gantry status` right after: the stopped mark, not a 60 s wait for a stale heartbeat.
    r = machine.sh("DATA_DIR=/var/lib/gantry /usr/local/bin/gantry status", check=False)
    assert r.returncode == 1, r
    assert r.stdout.startswith("unhealthy: gantry stopped cleanly"), r.stdout


def test_kill_9_is_restarted(machine: Machine, installed: Any, fakes: Fakes) -> None:
    ensure_running(machine)
    restarts = int(machine.show("NRestarts")["NRestarts"])
    pid = machine.show("MainPID")["MainPID"]
    machine.sh("systemctl kill -s KILL gantry")

    def restarted() -> bool:
        s = machine.show("NRestarts", "ActiveState", "SubState", "MainPID")
        return (int(s["NRestarts"]) == restarts + 1 and s["ActiveState"] == "active"
                and s["SubState"] == "running" and s["MainPID"] != pid)

    machine.wait_for("a restart after kill -9 (Restart=on-failure, RestartSec=5)", restarted,
                     BOOT + 10)
    sent = say(fakes, "after the crash", replies(fakes) + 1)
    assert sent[-1] == "echo: after the crash"
