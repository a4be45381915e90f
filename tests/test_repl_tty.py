"""The REPL on a real terminal: `gantry run` with CHANNEL=stdio on a pseudo-terminal.

What a person at a terminal sees only shows on a TTY: the start line, the prompt redrawn
around a scheduled message, Ctrl-C as a key (here written to the pty's master, so the line
discipline turns it into SIGINT unless gantry made it an ordinary key), Ctrl-D. The pty is
the child's controlling terminal, so it behaves as under a shell. Every wait is bounded and
the child is killed by PID in teardown.
"""

from __future__ import annotations

import codecs
import fcntl
import json
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gantry.channel.stdio.editor import LineEditor
from gantry.channel.stdio.output import MARK_MAX, mark
from gantry.session import CANCELLED_RESULT, STOPPED_ANSWER
from tests.fakes.mcp_servers import python_fixture_toml
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls
from tests.test_cron_e2e import schedule_script, soon
from tests.test_stdio_e2e import KEY, MODEL, PERSONA, ROOT, SYSTEM, fake, roles, wait_requests

pytestmark = pytest.mark.slow
__all__ = ["fake"]
WAIT = 20.0
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class Repl:
    """`python -m gantry run` with its stdin and stdout on a pty; stderr a pipe (JSON)."""

    def __init__(self, tmp_path: Path, base_url: str, env: dict[str, str],
                 stderr_on_tty: bool = False) -> None:
        persona = tmp_path / "persona"
        persona.mkdir(exist_ok=True)
        (persona / "PERSONA.md").write_text(PERSONA + "\n", encoding="utf-8")
        self.data_dir = tmp_path / "data"
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 200, 0, 0))
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
                    "CHANNEL": "stdio", "LLM_BASE_URL": base_url, "LLM_API_KEY": KEY,
                    "LLM_MODEL": MODEL, "DATA_DIR": str(self.data_dir),
                    "PERSONA_DIR": str(persona), "TERM": "xterm", **env}

        def controlling_tty() -> None:  # as a shell starts a job: the pty is its terminal
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gantry", "run"], stdin=slave, stdout=slave,
            stderr=slave if stderr_on_tty else subprocess.PIPE, env=self.env, cwd=ROOT,
            start_new_session=True, preexec_fn=controlling_tty,
        )
        os.close(slave)
        self._cond = threading.Condition()
        self.raw = ""
        self.stderr = ""
        self._cursor = 0
        decoder = codecs.getincrementaldecoder("utf-8")("replace")

        def pump_tty() -> None:
            while True:
                try:
                    data = os.read(self.master, 4096)
                except OSError:
                    data = b""
                with self._cond:
                    if not data:
                        self.closed = True
                        self._cond.notify_all()
                        return
                    self.raw += decoder.decode(data)
                    self._cond.notify_all()

        def pump_err() -> None:
            if self.proc.stderr is None:  # on the pty: part of the screen
                return
            for line in self.proc.stderr:
                with self._cond:
                    self.stderr += line.decode("utf-8", "replace")

        self.closed = False
        self._threads = [threading.Thread(target=pump_tty, daemon=True),
                         threading.Thread(target=pump_err, daemon=True)]
        for t in self._threads:
            t.start()

    @property
    def screen(self) -> str:
        """What was written, escape sequences removed, line ends as \\n."""
        with self._cond:
            return ANSI.sub("", self.raw).replace("\r\n", "\n")

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def expect(self, needle: str, timeout: float = WAIT) -> str:
        """Wait for `needle` on the screen past the last match; return what was consumed."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen
            at = text.find(needle, self._cursor)
            if at >= 0:
                chunk = text[self._cursor : at + len(needle)]
                self._cursor = at + len(needle)
                return chunk
            left = deadline - time.monotonic()
            if left <= 0 or self.closed:
                pytest.fail(f"no {needle!r} on the terminal within {timeout} s\n"
                            f"screen: {text[self._cursor:]!r}\nstderr: {self.stderr[-2000:]}")
            with self._cond:
                self._cond.wait(min(left, 0.2))

    def logs(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stderr.splitlines() if line.strip()]

    def wait_exit(self, timeout: float = WAIT) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"gantry did not exit within {timeout} s\nscreen: {self.screen!r}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        for t in self._threads:
            t.join(5)
        os.close(self.master)

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        conn = apsw.Connection(str(self.data_dir / "gantry.db"), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            return list(conn.execute(sql))
        finally:
            conn.close()

    def wait_rows(self, sql: str, n: int, timeout: float = WAIT) -> None:
        deadline = time.monotonic() + timeout
        while len(self.rows(sql)) < n:
            if time.monotonic() > deadline:
                pytest.fail(f"fewer than {n} rows for {sql!r}")
            time.sleep(0.05)


@pytest.fixture
def repl(tmp_path: Path, fake: FakeOpenAI) -> Iterator[Callable[..., Repl]]:
    started: list[Repl] = []

    def start(stderr_on_tty: bool = False, **env: str) -> Repl:
        r = Repl(tmp_path, fake.base_url, env, stderr_on_tty)
        started.append(r)
        return r

    try:
        yield start
    finally:
        for r in started:
            r.kill()


# ----------------------------------------------------------------------------- start and end


def test_start_line_tells_model_tools_and_carried_history(
    repl: Callable[..., Repl], fake: FakeOpenAI
) -> None:
    r = repl(CRON_ENABLED="false")
    r.expect(f"gantry · model {MODEL} · 3 tool(s) · new conversation · /help lists commands\n")
    r.expect("> ")
    r.type("hello\r")
    r.expect("hello\necho: hello\n> ")
    r.type("\x04")  # Ctrl-D at an empty prompt
    assert r.wait_exit() == 0
    assert r.screen.endswith("> \n")  # the shell's prompt gets a line of its own

    again = repl(CRON_ENABLED="false")
    again.expect("continuing: 2 earlier message(s) carried over (/new starts fresh)")
    again.expect("> ")
    again.type("\x04")
    assert again.wait_exit() == 0


def test_unknown_command_is_answered_and_help_lists_commands_and_keys(
    repl: Callable[..., Repl], fake: FakeOpenAI
) -> None:
    r = repl(CRON_ENABLED="false")
    r.expect("> ")
    r.type("/stauts\r")
    r.expect("Unknown command /stauts. /help lists the commands.\n> ")
    r.type("/help\r")
    shown = r.expect("Ctrl-D exits\n> ")
    for command in ("/new", "/status", "/help", "/decline", "Ctrl-C stops a reply"):
        assert command in shown, shown
    r.type("/decline\r")  # no question open: said so, not "unknown", not sent to the model
    r.expect("Nothing to decline: no MCP server is asking a question.\n> ")
    r.type("/usr/bin is where?\r")  # a path is a message, not a command
    r.expect("echo: /usr/bin is where?\n")
    assert [q.last_user_text for q in fake.requests] == ["/usr/bin is where?"]
    r.type("\x04")
    assert r.wait_exit() == 0


# ----------------------------------------------------------------------------- Ctrl-C


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_ctrl_c_stops_a_slow_turn_at_once_and_the_session_lives_on(
    repl: Callable[..., Repl], fake: FakeOpenAI, stream: bool
) -> None:
    r = repl(CRON_ENABLED="false", STREAM_REPLIES=str(stream).lower())
    r.expect("> ")
    fake.push(Reply("never arrives", delay=60.0))
    r.type("take your time\r")
    wait_requests(fake, 1)
    r.type("\x03")
    r.expect("(stopped)\n> ")  # well before the 60 s reply or an 8 s drain
    assert r.proc.poll() is None
    r.type("next\r")
    r.expect("echo: next\n> ")
    assert roles(fake.last_request.messages) == [SYSTEM, ("user", "take your time"),
                                                 ("assistant", STOPPED_ANSWER),
                                                 ("user", "next")]
    r.type("\x03")  # Ctrl-C at an idle, empty prompt: leave
    assert r.wait_exit() == 0
    messages = [rec["message"] for rec in r.logs()]
    assert "turn stopped by the user" in messages and "shutdown requested" not in messages
    assert "drain timed out; cancelling the in-flight turn" not in messages
    assert messages[-1] == "gantry stopped"


def test_typed_stop_does_what_ctrl_c_does(repl: Callable[..., Repl], fake: FakeOpenAI) -> None:
    r = repl(CRON_ENABLED="false")
    r.expect("> ")
    r.type("/stop\r")
    r.expect("Nothing to stop: no reply is being written.\n> ")
    fake.push(Reply("never arrives", delay=60.0))
    r.type("take your time\r")
    wait_requests(fake, 1)
    r.type("/cancel\r")
    r.expect("(stopped)\n> ")
    r.type("next\r")
    r.expect("echo: next\n> ")
    assert len(fake.requests) == 2
    r.type("\x04")
    assert r.wait_exit() == 0


def test_ctrl_c_clears_a_typed_line_before_it_exits(
    repl: Callable[..., Repl], fake: FakeOpenAI
) -> None:
    r = repl(CRON_ENABLED="false")
    r.expect("> ")
    r.type("half a thou")
    r.expect("half a thou")
    r.type("\x03")
    r.expect("> ")
    assert r.proc.poll() is None
    r.type("whole\r")
    r.expect("echo: whole\n")
    assert [q.last_user_text for q in fake.requests] == ["whole"]
    r.type("\x03")
    assert r.wait_exit() == 0


def test_a_log_line_and_ctrl_c_redraw_the_prompt_with_the_typed_text(
    repl: Callable[..., Repl], fake: FakeOpenAI
) -> None:
    """Log lines share the terminal (stderr): one lands above the prompt, which is drawn again
    with the half-typed line; Ctrl-C stopping a reply keeps what was typed ahead."""
    r = repl(stderr_on_tty=True, CRON_ENABLED="false", LOG_FORMAT="text", LOG_LEVEL="info")
    r.expect("> ", timeout=60)
    r.type("hi\r")
    r.expect("echo: hi\n> ")  # by now the signal handlers are surely installed
    r.type("half a thou")
    r.expect("half a thou")
    os.kill(r.proc.pid, signal.SIGHUP)  # reloading the persona logs a line
    r.expect("persona")
    r.expect("\n> half a thou")
    r.type("ght\r")
    r.expect("echo: half a thought\n> ")
    fake.push(Reply("never arrives", delay=60.0))
    r.type("take your time\r")
    wait_requests(fake, 3)
    r.type("typed ahead")
    r.type("\x03")
    r.expect("(stopped)\n> typed ahead")
    r.type("\r")
    r.expect("echo: typed ahead\n")
    r.type("\x04")
    assert r.wait_exit() == 0


def test_ctrl_c_during_an_mcp_tool_call_cancels_it_and_ends_the_turn_at_once(
    repl: Callable[..., Repl], fake: FakeOpenAI, tmp_path: Path
) -> None:
    """Issue 35 #10: Ctrl-C while a 30 s MCP call runs shows "(stopped)" within a few
    seconds, the server gets notifications/cancelled (the fixture's `slow` writes it down),
    nothing runs after it, and the history records the call as cancelled (a valid
    transcript: the call's id has a result), the turn as stopped."""
    manifest = tmp_path / "mcp.toml"
    manifest.write_text(python_fixture_toml("fx"), encoding="utf-8")
    marks = tmp_path / "slow.txt"
    r = repl(CRON_ENABLED="false", MCP_MANIFEST=str(manifest))
    r.expect("> ", timeout=60)
    fake.push(ToolCalls([Call("fx__slow", {"path": str(marks), "seconds": 30}, id="call_s")]))
    r.type("wait for it\r")
    deadline = time.monotonic() + WAIT
    while "started" not in (marks.read_text() if marks.exists() else ""):
        assert time.monotonic() < deadline, "the slow call never started"
        time.sleep(0.05)
    stopped_at = time.monotonic()
    r.type("\x03")  # while the 30 s call runs
    r.expect("(stopped)\n> ", timeout=3.0)  # it used to wait the whole 30 s
    print(f"\nCtrl-C → (stopped) in {(time.monotonic() - stopped_at) * 1000:.0f} ms")
    while "cancelled" not in marks.read_text():
        assert time.monotonic() < stopped_at + 5, f"no cancellation: {marks.read_text()!r}"
        time.sleep(0.05)
    assert marks.read_text().split() == ["started", "cancelled"]
    assert len(fake.requests) == 1  # nothing after the tool call
    r.type("and now?\r")
    r.expect("echo: and now?\n")
    sent = fake.last_request.messages
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant",
                                         "user"]
    assert sent[2]["tool_calls"][0]["id"] == "call_s"
    assert sent[3] == {"role": "tool", "tool_call_id": "call_s", "content": CANCELLED_RESULT}
    assert sent[4]["content"] == STOPPED_ANSWER
    assert any(e.get("message") == "tool call cancelled: the user stopped the turn"
               for e in r.logs())
    r.type("\x04")
    assert r.wait_exit() == 0
    assert "finished" not in marks.read_text()


def test_sigint_sent_with_kill_is_still_a_graceful_shutdown(
    repl: Callable[..., Repl], fake: FakeOpenAI
) -> None:
    r = repl(CRON_ENABLED="false")
    r.expect("> ")
    r.type("hi\r")
    r.expect("echo: hi\n> ")  # by now the signal handlers are surely installed
    os.kill(r.proc.pid, signal.SIGINT)
    assert r.wait_exit() == 0
    assert "shutdown requested" in [rec["message"] for rec in r.logs()]


# ----------------------------------------------------------------------------- pushes


def test_scheduled_push_is_marked_and_the_prompt_redrawn_with_the_typed_text(
    repl: Callable[..., Repl], fake: FakeOpenAI
) -> None:
    r = repl(CRON_TICK_SECONDS="1")
    r.expect("> ", timeout=60)
    fake.push(*schedule_script(soon(3), "Tell the user the kettle is done."),
              Reply("The kettle is done!"))
    r.type("remind me about the kettle\r")
    r.expect("Scheduled.\n> ")
    r.type("hal")  # mid-typing when the push lands
    r.expect("[scheduled] The kettle is done!\n> hal")
    r.type("lo\r")
    r.expect("echo: hallo\n")
    assert fake.last_request.last_user_text == "hallo"
    r.type("\x04")
    assert r.wait_exit() == 0


def test_a_watch_wake_is_marked_as_that_watch_not_as_scheduled(
    repl: Callable[..., Repl], fake: FakeOpenAI, tmp_path: Path
) -> None:
    from tests.test_watch_e2e import FAST, add_script, polls, setup_feed, wait

    feed, manifest = setup_feed(tmp_path)
    r = repl(MCP_MANIFEST=manifest, **FAST)
    r.expect("> ", timeout=60)
    fake.push(*add_script(), Reply("New alert: flood warning."))
    r.type("tell me about new alerts\r")
    r.expect("Watching.\n> ")
    wait(lambda: polls(feed) >= 1, 30, "the seed poll")
    with open(feed, "a") as fh:
        fh.write(json.dumps({"id": "a2", "title": "flood warning"}) + "\n")
    r.expect("[watch #1 alerts] New alert: flood warning.\n> ", timeout=30)
    assert "[scheduled] New alert" not in r.screen
    r.type("\x04")
    assert r.wait_exit() == 0


# ----------------------------------------------------------------------------- the editor


def test_line_editor_keys() -> None:
    ed = LineEditor()
    events = ed.feed("héllo wörld\x7f\x17x\x1b[D\x1bOAy\r".encode())
    assert events[-1] == ("submit", "héllo xy")
    assert ("redraw", "") in events
    assert ed.buffer == ""
    assert ed.feed(b"\x04") == [("eof", "")]
    assert ed.feed(b"a\x04") == [("insert", "a")]  # Ctrl-D with text typed: nothing
    assert ed.feed(b"\x15\x03") == [("redraw", ""), ("interrupt", "")]
    assert ed.feed("\u4e2d".encode()[:2]) == []  # half a character waits for the rest
    assert ed.feed("\u4e2d".encode()[2:] + b"\n") == [("insert", "\u4e2d"), ("submit", "\u4e2d")]


@given(st.text(max_size=300))
def test_a_push_mark_is_one_bounded_printable_line(origin: str) -> None:
    shown = mark(origin)
    assert shown and len(shown) <= MARK_MAX and shown.isprintable() and shown == shown.strip()


# ----------------------------------------------------------------------------- follow-ups


def test_a_line_typed_during_a_tool_call_steers_the_running_reply(
    repl: Callable[..., Repl], fake: FakeOpenAI, tmp_path: Path
) -> None:
    """Issue 40 #4: a line typed while the reply waits on a tool joins that turn (shown as it
    joins): the next model call reads it after the tool result, and one reply answers both."""
    from gantry.steer import FOLLOWUP_MARK

    manifest = tmp_path / "mcp.toml"
    manifest.write_text(python_fixture_toml("fx"), encoding="utf-8")
    marks = tmp_path / "slow.txt"
    r = repl(CRON_ENABLED="false", MCP_MANIFEST=str(manifest))
    r.expect("> ", timeout=60)
    fake.push(ToolCalls([Call("fx__slow", {"path": str(marks), "seconds": 4}, id="call_s")]),
              Reply("Both done."))
    r.type("book a table\r")
    deadline = time.monotonic() + WAIT
    while "started" not in (marks.read_text() if marks.exists() else ""):
        assert time.monotonic() < deadline, "the slow call never started"
        time.sleep(0.05)
    r.type("and make it Friday\r")
    r.expect("> and make it Friday\n")
    r.expect("Both done.\n> ")
    assert len(fake.requests) == 2
    assert roles(fake.requests[1].messages)[-1] == ("user",
                                                     FOLLOWUP_MARK + "and make it Friday")
    r.type("next\r")
    r.expect("echo: next\n> ")
    assert "echo: and make it Friday" not in r.screen and len(fake.requests) == 3
    r.type("\x04")
    assert r.wait_exit() == 0


@pytest.mark.parametrize("followups", ["steer", "queue"])
def test_a_line_typed_while_the_answer_is_written_gets_its_own_turn(
    repl: Callable[..., Repl], fake: FakeOpenAI, followups: str
) -> None:
    """Too late to join (the model writes the final answer), or FOLLOWUPS=queue: the typed
    line is answered after, by a turn of its own, never lost."""
    r = repl(CRON_ENABLED="false", FOLLOWUPS=followups)
    r.expect("> ")
    fake.push(Reply("First answer.", delay=2.0))
    r.type("one\r")
    wait_requests(fake, 1)
    r.type("two\r")
    r.expect("First answer.\n")
    r.expect("echo: two\n> ")
    assert roles(fake.last_request.messages)[-1] == ("user", "two")
    assert len(fake.requests) == 2
    r.type("\x04")
    assert r.wait_exit() == 0
