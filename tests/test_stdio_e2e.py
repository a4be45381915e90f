"""`gantry run` end to end: a real subprocess on the stdio channel against the fake model.

These tests exist because the unit tests cannot see what only the assembled process does:
the persona reaching the wire, history persisting across turns in SQLite, retries and
error replies surviving the trip through the channel, signals, the heartbeat row, and
the promise that stderr is JSON lines with no secret in them. Every wait is bounded and
every subprocess is killed by PID in teardown, so a hung gantry fails a test instead of
hanging the suite.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from gantry.agent import NO_ANSWER, NUDGE
from gantry.runtime import DRAIN_SECONDS
from tests.fakes.openai import Call, FakeOpenAI, HTTPError, Reply, ToolCalls, without_footer
from tests.procs import ChildIO

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-e2e-7f3a9c1b5d2e4f60a8b7c6d5e4f3a2b1"
MODEL = "e2e-model"
PERSONA = "You are Quill, the end-to-end test persona.\n\nAnswer in one short sentence."
WAIT = 15.0  # generous bound for one reply; the retry test needs ~4 s of backoff
EXIT_WAIT = 10.0


class Gantry(ChildIO):
    """`python -m gantry run` with CHANNEL=stdio; stdout and stderr drained by threads.

    Draining in threads keeps the child from blocking on a full pipe and lets every wait
    carry its own timeout. `expect` consumes stdout like pexpect, so consecutive replies
    (including multi-line ones such as /status) are matched in order.
    """

    default_wait = WAIT

    def __init__(self, tmp_path: Path, base_url: str, env: Mapping[str, str]) -> None:
        self.data_dir = tmp_path / "data"
        self.persona_dir = tmp_path / "persona"
        self.persona_dir.mkdir(exist_ok=True)
        (self.persona_dir / "PERSONA.md").write_text(PERSONA + "\n", encoding="utf-8")
        # A minimal environment: stray LLM_*/HISTORY_*/NOTIFY_SOCKET variables from the
        # developer's shell must not change what is being tested.
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "CHANNEL": "stdio",
            "LLM_BASE_URL": base_url,
            "LLM_API_KEY": KEY,
            "LLM_MODEL": MODEL,
            "DATA_DIR": str(self.data_dir),
            "PERSONA_DIR": str(self.persona_dir),
            **env,
        }
        super().__init__(
            subprocess.Popen(
                [sys.executable, "-m", "gantry", "run"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.env,
                cwd=ROOT,
            )
        )

    def logs(self) -> list[dict[str, Any]]:
        """stderr parsed as JSON lines; fails on any line that is not one JSON object."""
        lines = self.stderr.splitlines()
        records = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:
                pytest.fail(f"stderr line is not JSON: {line!r}")
            assert isinstance(record, dict), line
            records.append(record)
        return records

    def ask(self, text: str, reply: str, timeout: float = WAIT) -> str:
        """Send one line and wait for `reply` followed by the newline that ends it."""
        self.send(text)
        return self.expect(reply + "\n", timeout)

    def wait_log(self, message: str, timeout: float = WAIT) -> dict[str, Any]:
        """Wait for a stderr record whose message is `message`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for record in self.logs():
                if record.get("message") == message:
                    return record
            with self._cond:
                self._cond.wait(0.2)
        pytest.fail(f"no {message!r} log record within {timeout} s{self._diag()}")

    def wait_exit(self, timeout: float | None = EXIT_WAIT) -> int:
        return super().wait_exit(timeout)

    def status(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`python -m gantry status` against the same DATA_DIR (the container healthcheck)."""
        return subprocess.run(
            [sys.executable, "-m", "gantry", "status", *args],
            env=self.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def assert_clean(self) -> None:
        """stderr is JSON lines without tracebacks, and the API key is nowhere in the output."""
        records = self.logs()
        assert "Traceback" not in self.stderr, self.stderr
        assert not [r for r in records if "traceback" in r], self.stderr
        assert KEY not in self.stdout and KEY not in self.stderr


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    """The model, requiring the bearer key, so every test also proves the key is sent."""
    server = FakeOpenAI(api_key=KEY, model=MODEL)
    server.start_in_thread()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def spawn(tmp_path: Path, fake: FakeOpenAI) -> Iterator[Callable[..., Gantry]]:
    """Start gantry processes against `fake`; each is killed by PID in teardown."""
    started: list[Gantry] = []

    def start(**env: str) -> Gantry:
        g = Gantry(tmp_path, fake.base_url, env)
        started.append(g)
        return g

    try:
        yield start
    finally:
        for g in started:
            g.kill()


def roles(request_messages: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(role, content) pairs: the shape of a recorded prompt, for compact assertions (the
    time footer on the turn's user message left off; test_time_block covers it)."""
    return [(m["role"], without_footer(m["content"]) if m["role"] == "user" else m.get("content"))
            for m in request_messages]


def wait_requests(fake: FakeOpenAI, n: int, timeout: float = WAIT) -> None:
    """Block until the model has seen `n` requests: the only proof a turn is in flight."""
    deadline = time.monotonic() + timeout
    while len(fake.requests) < n:
        if time.monotonic() > deadline:
            pytest.fail(f"the fake model got {len(fake.requests)} request(s), expected {n}")
        time.sleep(0.02)


SYSTEM = ("system", PERSONA)


# ----------------------------------------------------------------------------- conversation


def test_conversation_history_grows_and_persona_leads(
    spawn: Callable[..., Gantry], fake: FakeOpenAI
) -> None:
    g = spawn(CRON_ENABLED="false")  # no built-in tools either (test_cron_e2e covers them)
    g.ask("hello there", "echo: hello there")
    g.ask("how are you?", "echo: how are you?")
    g.ask("bye", "echo: bye")

    first, second, third = fake.requests
    assert first.headers.get("Authorization") == f"Bearer {KEY}"
    assert first.body["model"] == MODEL
    names = [t["function"]["name"] for t in first.body["tools"]]
    assert names == ["memory_forget", "memory_recall", "memory_store"]  # built in, no MCP
    assert first.messages[0] == {"role": "system", "content": PERSONA}
    assert roles(first.messages) == [SYSTEM, ("user", "hello there")]
    assert roles(second.messages) == [
        SYSTEM,
        ("user", "hello there"),
        ("assistant", "echo: hello there"),
        ("user", "how are you?"),
    ]
    assert roles(third.messages) == [*roles(second.messages), ("assistant", "echo: how are you?"),
                                     ("user", "bye")]
    assert g.stdout == "echo: hello there\necho: how are you?\necho: bye\n"
    g.assert_clean()


def test_memory_disabled_means_no_tools_and_no_status_line(
    spawn: Callable[..., Gantry], fake: FakeOpenAI
) -> None:
    g = spawn(MEMORY_ENABLED="false", CRON_ENABLED="false")
    g.ask("hello", "echo: hello")
    assert "tools" not in fake.last_request.body  # an empty tool list is a 400 upstream
    g.send("/status")
    status = g.expect("schema tokens per request (est.)\n")
    assert "\ntools offered: 0 (0 built in), ~0 " in status and "memory" not in status
    g.assert_clean()


def test_new_and_status(spawn: Callable[..., Gantry], fake: FakeOpenAI) -> None:
    g = spawn(CRON_ENABLED="false")  # /status ends at its tools line (cron adds one after)
    g.ask("remember the number 7", "echo: remember the number 7")
    g.ask("and the colour blue", "echo: and the colour blue")

    g.send("/status")
    status = g.expect(" schema tokens per request (est.)\nmemory (builtin): 0 facts, "
                      "0 preferences, 0 people, 0 episodes, 0 insights;")
    assert "\ntools offered: 3 (3 built in), ~" in status
    assert re.search(r"\bup \d+h \d+m \d+s\b", status), status
    assert f"model: {MODEL}" in status
    assert re.search(r"history: 4 messages, ~\d+ tokens \(est\.\)", status), status
    assert "summary: no" in status

    g.ask("/new", "Started a new conversation. (Long-term memory is unchanged.)")
    g.send("/status")
    assert "history: 0 messages" in g.expect("\ntools offered: 3 (3 built in), ~")
    assert len(fake.requests) == 2  # commands never reach the model

    g.ask("what number?", "echo: what number?")
    assert roles(fake.last_request.messages) == [SYSTEM, ("user", "what number?")]
    g.assert_clean()


def test_sighup_reloads_persona(spawn: Callable[..., Gantry], fake: FakeOpenAI) -> None:
    g = spawn()
    g.ask("one", "echo: one")
    (g.persona_dir / "PERSONA.md").write_text("You are Quill, version two.\n", encoding="utf-8")
    os.kill(g.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + WAIT
    while sum(r["message"] == "persona loaded" for r in g.logs()) < 2:
        assert time.monotonic() < deadline, "persona was not reloaded on SIGHUP"
        time.sleep(0.05)
    g.ask("two", "echo: two")
    assert fake.last_request.messages[0] == {
        "role": "system",
        "content": "You are Quill, version two.",
    }
    assert g.proc.poll() is None
    g.assert_clean()


# ----------------------------------------------------------------------------- failures


def test_model_500_gets_apology_then_recovers(
    spawn: Callable[..., Gantry], fake: FakeOpenAI
) -> None:
    g = spawn()
    g.ask("first", "echo: first")
    # Enough 500s to outlast RetryPolicy's default 4 attempts; the key in the upstream
    # message must be scrubbed before it reaches the user or the log.
    fake.push(*[HTTPError(500, message=f"upstream exploded (key {KEY})")] * 4)
    g.send("second")
    apology = g.expect("Please try again in a moment.\n")
    assert apology.startswith("Sorry — the model call failed"), apology
    # short and generic for the user; the provider's own words go to the log only
    assert "HTTP 500" in apology and "upstream exploded" not in apology
    assert len(fake.requests) == 5
    assert fake.pending == 0

    g.ask("third", "echo: third")
    # The failed turn's user message was recorded first and is never lost.
    assert roles(fake.last_request.messages) == [
        SYSTEM,
        ("user", "first"),
        ("assistant", "echo: first"),
        ("user", "second"),
        ("user", "third"),
    ]
    assert g.proc.poll() is None
    records = g.logs()
    retries = [r for r in records if r["message"] == "provider call failed; retrying"]
    assert [r["attempt"] for r in retries] == [1, 2, 3]
    assert all(r["level"] == "warning" for r in retries)
    failed = [r for r in records if r["message"] == "model call failed; turn ended"]
    assert len(failed) == 1 and failed[0]["level"] == "error" and failed[0]["status"] == 500
    assert "upstream exploded" in failed[0]["error"]
    g.assert_clean()


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_unknown_tool_call_is_an_error_result_for_the_model(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, stream: bool
) -> None:
    g = spawn(STREAM_REPLIES=str(stream).lower())
    fake.push(ToolCalls([Call("lookup_weather", {"city": "Oslo"}, id="call_w1")]))
    g.ask("weather in Oslo?", "echo: weather in Oslo?")

    assert len(fake.requests) == 2
    assert all(r.stream is stream for r in fake.requests)
    after = fake.requests[1].messages
    assert roles(after[:2]) == [("system", PERSONA), ("user", "weather in Oslo?")]
    call = after[2]
    assert call["role"] == "assistant"
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
            for c in call["tool_calls"]] == [("call_w1", "lookup_weather", {"city": "Oslo"})]
    tool = after[3]
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_w1"
    assert "unknown tool" in tool["content"] and "lookup_weather" in tool["content"]
    assert len(after) == 4

    # The round is history now: the next turn replays the call and its result.
    g.ask("thanks", "echo: thanks")
    assert roles(fake.last_request.messages)[:5] == [*roles(after),
                                                     ("assistant", "echo: weather in Oslo?")]
    assert g.stdout == "echo: weather in Oslo?\necho: thanks\n"
    g.assert_clean()


def test_malformed_tool_arguments_do_not_crash(
    spawn: Callable[..., Gantry], fake: FakeOpenAI
) -> None:
    g = spawn()
    broken = '{"city": "Oslo", "days":'
    fake.push(ToolCalls([Call("lookup_weather", broken, id="call_bad")]))
    g.ask("forecast?", "echo: forecast?")

    after = fake.requests[1].messages
    assert after[2]["tool_calls"][0]["function"]["arguments"] == broken  # replayed verbatim
    tool = after[3]
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_bad"
    assert tool["content"].startswith("error: ")
    g.ask("still alive?", "echo: still alive?")
    g.assert_clean()


def test_tool_round_cap_forces_a_final_answer(
    spawn: Callable[..., Gantry], fake: FakeOpenAI
) -> None:
    g = spawn(TOOL_MAX_ITERATIONS="2")
    fake.push(*[ToolCalls([Call("loop_forever", {"n": i})]) for i in range(4)])
    g.ask("spin", NO_ANSWER)
    assert len(fake.requests) == 4  # two tool rounds, one capped call, one nudge
    capped = fake.requests[2].messages
    assert capped[-1]["role"] == "user" and "tool-call limit" in capped[-1]["content"]
    assert "tools" not in fake.requests[2].body and "tools" not in fake.requests[3].body
    assert fake.requests[3].messages[-1] == {"role": "user", "content": NUDGE}
    # The fake kept calling tools with none offered; the agent must not loop or crash.
    assert g.proc.poll() is None
    g.ask("next", "echo: next")
    g.assert_clean()


# ----------------------------------------------------------------------------- output modes


def test_stream_replies_prints_the_full_reply_once(
    spawn: Callable[..., Gantry], fake: FakeOpenAI
) -> None:
    g = spawn(STREAM_REPLIES="true")
    text = "The quick brown fox jumps over the lazy dog, twice — and then rests."
    fake.push(Reply(text, chunk_size=3))
    g.ask("tell me", text)
    g.ask("again", "echo: again")
    assert fake.requests[0].stream
    assert g.stdout == f"{text}\necho: again\n"
    g.assert_clean()


def test_secrets_never_printed_even_at_debug(
    spawn: Callable[..., Gantry], fake: FakeOpenAI
) -> None:
    g = spawn(LOG_LEVEL="debug", STREAM_REPLIES="true")
    fake.push(
        HTTPError(400, message=f"invalid api key {KEY}"),
        HTTPError(401, raw_body=f"denied for Bearer {KEY}"),
        ToolCalls([Call("leak", {"key": KEY})]),
    )
    g.send("one")
    # the user reads a generic apology; the provider's (scrubbed) words go to the log
    assert "(HTTP 400)" in g.expect("Please try again in a moment.\n")
    g.send("two")
    g.expect("Please try again in a moment.\n")
    g.send("three")
    g.expect("echo: three\n")
    assert g.logs()
    assert "[redacted]" in g.stderr
    g.assert_clean()
    assert KEY[7:] not in g.stdout and KEY[7:] not in g.stderr


# ----------------------------------------------------------------------------- lifecycle


def test_eof_drains_piped_input_and_exits_0(
    spawn: Callable[..., Gantry], fake: FakeOpenAI
) -> None:
    g = spawn()
    fake.push(Reply("slowly", delay=0.5))
    g.send("first")
    g.send("second")
    g.close_stdin()  # like `printf 'first\nsecond\n' | gantry run`
    assert g.wait_exit() == 0
    assert g.stdout == "slowly\necho: second\n"
    assert g.logs()[-1]["message"] == "gantry stopped"
    g.assert_clean()


def test_sigterm_mid_turn_finishes_the_reply_and_exits_0(
    spawn: Callable[..., Gantry], fake: FakeOpenAI
) -> None:
    g = spawn()
    fake.push(Reply("worth the wait", delay=2.0))
    g.send("take your time")
    wait_requests(fake, 1)
    sent = time.monotonic()
    os.kill(g.proc.pid, signal.SIGTERM)
    assert g.wait_exit(DRAIN_SECONDS + 5) == 0
    took = time.monotonic() - sent
    assert took < DRAIN_SECONDS, took
    assert g.stdout == "worth the wait\n"
    messages = [r["message"] for r in g.logs()]
    assert "shutdown requested" in messages
    assert "waiting for the in-flight turn" in messages
    assert "drain timed out; cancelling the in-flight turn" not in messages
    assert messages[-1] == "gantry stopped"
    assert len(fake.requests) == 1
    g.assert_clean()


def test_sigterm_drain_is_bounded_when_the_model_hangs(
    spawn: Callable[..., Gantry], fake: FakeOpenAI
) -> None:
    g = spawn()
    fake.push(Reply("never arrives", delay=60.0))
    g.send("hang")
    wait_requests(fake, 1)
    sent = time.monotonic()
    os.kill(g.proc.pid, signal.SIGTERM)
    assert g.wait_exit(DRAIN_SECONDS + 5) == 0
    took = time.monotonic() - sent
    assert DRAIN_SECONDS - 0.5 < took < DRAIN_SECONDS + 3, took
    # A turn cut at the deadline is aborted: no half answer, no apology on stdout.
    assert g.stdout == ""
    messages = [r["message"] for r in g.logs()]
    assert "drain timed out; cancelling the in-flight turn" in messages
    assert messages[-1] == "gantry stopped"
    g.assert_clean()

    # The message was recorded before the model call; sending it again after a restart
    # must not put it in the history twice.
    again = spawn()
    again.ask("hang", "echo: hang")
    assert roles(fake.last_request.messages) == [SYSTEM, ("user", "hang")]
    again.assert_clean()


def test_sigterm_while_idle_exits_with_stdin_open(
    spawn: Callable[..., Gantry], fake: FakeOpenAI
) -> None:
    g = spawn()
    g.ask("hi", "echo: hi")
    time.sleep(0.5)  # let the channel get back to its blocking stdin read
    os.kill(g.proc.pid, signal.SIGTERM)
    try:
        code = g.proc.wait(5)
    except subprocess.TimeoutExpired:
        g.close_stdin()  # unstick it so the teardown is quick, then report the hang
        pytest.fail("gantry hung after SIGTERM until its stdin was closed")
    assert code == 0


def test_heartbeat_status_while_running_and_after_exit(
    spawn: Callable[..., Gantry], fake: FakeOpenAI
) -> None:
    g = spawn()
    g.ask("ping", "echo: ping")
    running = g.status()
    assert running.returncode == 0, running.stdout + running.stderr
    assert running.stdout.startswith("healthy:")
    assert f"pid {g.proc.pid}" in running.stdout

    g.close_stdin()
    assert g.wait_exit() == 0
    # A clean exit leaves the "stopped" mark: unhealthy at once, not after --max-age.
    stopped = g.status()
    assert stopped.returncode == 1, stopped.stdout + stopped.stderr
    assert stopped.stdout.startswith("unhealthy: gantry stopped cleanly"), stopped.stdout
    g.assert_clean()


# ----------------------------------------------------------------------------- URL login


def test_login_in_llm_base_url_stops_boot_before_any_call(tmp_path: Path) -> None:
    """Behind a proxy that wants Basic auth the URL login would replace the Bearer key and
    every call would be a 401: boot refuses it, names where a login goes, shows neither."""
    password = "pr0xy-s3cret-9"
    proxy = FakeOpenAI(api_key=KEY, basic_auth=("gantry", password))
    proxy.start_in_thread()
    g = Gantry(tmp_path, proxy.credentialed_url, {})
    try:
        assert g.wait_exit() == 1
    finally:
        g.kill()
        proxy.stop()
    assert proxy.requests == []
    assert "LLM_BASE_URL must not hold a user:password@" in g.stderr
    assert "HTTPS_PROXY" in g.stderr and "Traceback" not in g.stderr
    assert password not in g.stderr + g.stdout and "gantry:pr0xy" not in g.stderr


# ----------------------------------------------------------------------------- printed calls

FORGET_EXAMPLE = ('<tool_call>\n{"name": "memory_forget", "arguments": {"query": "Tama"}}\n'
                  "</tool_call>")
EXPLAINED = ("Qwen prints a tool call as a tagged JSON object, like this:\n\n```xml\n"
             f"{FORGET_EXAMPLE}\n```\n\nThe runtime parses the block and runs the tool.")


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_a_tool_call_shown_as_an_example_runs_nothing(
    spawn: Callable[..., Gantry], fake: FakeOpenAI, stream: bool
) -> None:
    """Issue 35 item 2: the model explains Qwen's format with a fenced memory_forget call;
    the memory stays, no tool round happens, and the user reads the whole answer."""
    g = spawn(STREAM_REPLIES=str(stream).lower(), CRON_ENABLED="false")
    fake.push(ToolCalls([Call("memory_store", {"kind": "fact", "subject": "cat",
                                               "content": "The user's cat is called Tama."},
                              id="s1")]), Reply("Noted."))
    g.ask("my cat is called Tama", "Noted.")
    assert len(fake.requests) == 2
    fake.push(Reply(EXPLAINED, chunk_size=5))
    g.ask("what does Qwen's tool-call format look like?", EXPLAINED)
    assert len(fake.requests) == 3  # no tool round: the example was an answer
    assert g.stdout == f"Noted.\n{EXPLAINED}\n"
    listed = subprocess.run([sys.executable, "-m", "gantry", "memory", "list"], env=g.env,
                            cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert "The user's cat is called Tama." in listed.stdout, listed
    assert not [r for r in g.logs() if "printed" in str(r.get("message"))], g.stderr
    g.assert_clean()


def _rss_anon_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no RssAnon for {pid}")


def test_a_heartbeat_gives_the_heap_freed_by_big_turns_back(
    spawn: Callable[..., Gantry], fake: FakeOpenAI
) -> None:
    """Big requests leave free pages in the middle of the C heap that glibc keeps; each
    heartbeat trims them (gantry.memtrim), so a long run's RSS does not creep (issue 44)."""
    import sqlite3

    g = spawn(LOG_LEVEL="warning")
    g.ask("ping", "echo: ping")
    for i in range(40):
        g.send(f"t{i} " + "lorem ipsum dolor " * 2000)
        g.expect(f"echo: t{i} ")
        g.expect("\n")
    db = sqlite3.connect(f"file:{g.data_dir / 'gantry.db'}?mode=ro", uri=True)
    beat = db.execute("SELECT ts FROM heartbeat").fetchone()[0]
    after_burst = _rss_anon_mib(g.proc.pid)
    deadline = time.monotonic() + 40
    while db.execute("SELECT ts FROM heartbeat").fetchone()[0] == beat:
        assert time.monotonic() < deadline, "no heartbeat in 40 s"
        time.sleep(0.2)
    time.sleep(0.5)  # the trim follows the row's write
    db.close()
    after_beat = _rss_anon_mib(g.proc.pid)
    assert after_beat < after_burst - 1.0, (after_burst, after_beat)
    g.close_stdin()
    assert g.wait_exit() == 0
