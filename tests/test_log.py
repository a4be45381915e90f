"""Redaction: secrets never reach stderr, whichever logger carries them."""

from __future__ import annotations

import io
import json
import logging
import sys
import threading

import pytest

from gantry import log

KEY = "sk-live-Abc123\"quoted\\slash"
TOKEN = "7312345678:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
LOGGERS = ["gantry", "gantry.provider", "gantry.channel.telegram", "httpx", "httpcore",
           "aiogram", "aiogram.event", "aiohttp.client", "mcp", "mcp.client.stdio", "asyncio", ""]


@pytest.fixture(autouse=True)
def restore_logging():  # type: ignore[no-untyped-def]
    """log.setup changes global state; put it back so other tests' caplog still works."""
    root = logging.getLogger()
    names = ["httpx", "httpcore", "aiogram.event", "mcp.client", "mcp.server"]
    saved = (list(root.handlers), root.level, {n: logging.getLogger(n).level for n in names})
    hooks = (sys.excepthook, threading.excepthook)
    yield
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    for n, level in saved[2].items():
        logging.getLogger(n).setLevel(level)
    logging.captureWarnings(False)
    sys.excepthook, threading.excepthook = hooks


@pytest.fixture
def stream():  # type: ignore[no-untyped-def]
    buf = io.StringIO()
    log.setup("debug", [KEY, TOKEN], stream=buf)
    return buf


@pytest.mark.parametrize("name", LOGGERS)
def test_secret_never_reaches_output(stream: io.StringIO, name: str) -> None:
    lg = logging.getLogger(name)
    lg.setLevel(logging.DEBUG)
    lg.warning("key=%s url=https://api.telegram.org/bot%s/getUpdates", KEY, TOKEN)
    lg.error("in extra", extra={"headers": {"Authorization": f"Bearer {KEY}"}, "t": [TOKEN]})
    try:
        raise RuntimeError(f"failed calling bot{TOKEN}/sendMessage with {KEY}")
    except RuntimeError:
        lg.exception("boom")
    lg.debug(f"f-string {TOKEN}")
    lg.setLevel(logging.NOTSET)
    out = stream.getvalue()
    assert out.count("\n") == 4
    assert TOKEN not in out and KEY not in out
    assert json.dumps(KEY)[1:-1] not in out
    assert TOKEN.split(":")[1] not in out
    for line in out.splitlines():
        rec = json.loads(line)
        assert {"time", "level", "logger", "message"} <= set(rec)


def test_token_shape_redacted_even_if_unknown(stream: io.StringIO) -> None:
    other = "5550001111:ZZHdqTcvCH1vGWJxfSeofSAs0K5PALDzzz"
    logging.getLogger("aiogram").error("GET https://api.telegram.org/bot%s/getMe", other)
    assert other not in stream.getvalue()
    assert "bot[REDACTED]" in stream.getvalue()


def test_structured_fields_and_level(stream: io.StringIO) -> None:
    logging.getLogger("gantry.x").info("turn done", extra={"session": "stdio:1", "ms": 12})
    rec = json.loads(stream.getvalue())
    assert rec["level"] == "info" and rec["logger"] == "gantry.x"
    assert rec["session"] == "stdio:1" and rec["ms"] == 12


def test_level_honoured() -> None:
    buf = io.StringIO()
    log.setup("warning", [], stream=buf)
    logging.getLogger("gantry").info("hidden")
    logging.getLogger("gantry").warning("shown")
    assert "hidden" not in buf.getvalue() and "shown" in buf.getvalue()


def test_url_credentials_stripped_from_every_line(stream: io.StringIO) -> None:
    url = "http://gantry:pw-short@proxy.local:8080/v1"
    logging.getLogger("httpx").error("HTTP Request: POST %s/chat/completions", url)
    try:
        raise ConnectionError(f"POST to {url} failed")
    except ConnectionError:
        logging.getLogger("gantry.agent").exception("turn failed")
    out = stream.getvalue()
    assert "pw-short" not in out and "gantry:" not in out
    assert "http://[REDACTED]@proxy.local:8080/v1" in out
    assert log.url_secrets(url) == ["gantry:pw-short", "pw-short", "pw-short"]
    assert log.url_secrets("https://host/v1") == []


def test_uncaught_exceptions_go_through_the_redactor(stream: io.StringIO) -> None:
    try:
        raise RuntimeError(f"crash with bot{TOKEN}/getMe and {KEY}")
    except RuntimeError:
        sys.excepthook(*sys.exc_info())

    def boom() -> None:
        raise RuntimeError(f"thread crash {KEY}")

    t = threading.Thread(target=boom, name="worker")
    t.start()
    t.join()
    out = stream.getvalue()
    assert TOKEN not in out and KEY not in out and json.dumps(KEY)[1:-1] not in out
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["message"] for r in records] == [
        "uncaught exception", "uncaught exception in a thread"]
    assert all(r["level"] == "critical" and "Traceback" in r["traceback"] for r in records)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_text_format_is_short_and_redacted() -> None:
    buf = io.StringIO()
    log.setup("info", [KEY, TOKEN], stream=buf, fmt="text")
    logging.getLogger("gantry.agent").warning(
        "turn failed for %s", KEY, extra={"session": "stdio:local", "detail": f"x {TOKEN}"})
    line = buf.getvalue().strip()
    assert line.endswith("warning gantry.agent: turn failed for [REDACTED] "
                         'session=stdio:local detail="x [REDACTED]"'), line
    assert not line.startswith("{") and KEY not in line and TOKEN not in line


def test_text_format_spells_out_lists_and_maps_without_json_escapes() -> None:
    """`files="[\\"PERSONA.md\\", …]"` was JSON inside quotes; a person reads plain values."""
    buf = io.StringIO()
    log.setup("info", [KEY], stream=buf, fmt="text")
    logging.getLogger("gantry.run").warning("persona loaded", extra={
        "files": ["PERSONA.md", "USER.md"], "chars": 812, "tools": {"time": 2, "my notes": 1},
        "empty": [], "none": None, "said": 'a "quoted" word', "paths": ["a b.md", KEY]})
    line = buf.getvalue().strip()
    assert line.endswith(
        'persona loaded files=[PERSONA.md, USER.md] chars=812 tools={time: 2, "my notes": 1} '
        'empty=[] none=null said="a \\"quoted\\" word" paths=["a b.md", [REDACTED]]'), line
    assert "\\\\" not in line and KEY not in line


def test_auto_format_follows_the_terminal() -> None:
    assert log.resolve_format("auto", _Tty()) == "text"
    assert log.resolve_format("auto", io.StringIO()) == "json"
    assert log.resolve_format("json", _Tty()) == "json"
    assert log.resolve_format("text", io.StringIO()) == "text"


def test_repl_on_a_terminal_hides_routine_lines_unless_asked() -> None:
    from gantry import config
    from gantry.runtime import log_level

    base = {"LLM_BASE_URL": "http://127.0.0.1:1/v1", "LLM_API_KEY": "k", "LLM_MODEL": "m",
            "CHANNEL": "stdio"}
    cfg = config.load(base)
    assert log_level(cfg, base, _Tty()) == "warning"
    assert log_level(cfg, base, io.StringIO()) == "info"  # machines get everything
    asked = {**base, "LOG_LEVEL": "info"}
    assert log_level(config.load(asked), asked, _Tty()) == "info"
    tg = {**base, "CHANNEL": "telegram", "TELEGRAM_BOT_TOKEN": "1:abc",
          "TELEGRAM_ALLOWED_USERS": "1"}
    assert log_level(config.load(tg), tg, _Tty()) == "info"


def test_no_log_call_uses_a_reserved_record_attribute() -> None:
    """`extra={"created": …}` makes logging raise KeyError at that call, which once broke
    every memory consolidation pass at LOG_LEVEL=info: check every literal key in gantry/."""
    import ast
    from pathlib import Path

    reserved = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
    bad = []
    for path in Path(log.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "extra" and isinstance(
                    node.value, ast.Dict):
                keys = [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
                bad += [f"{path.name}:{node.value.lineno} {k}" for k in keys if k in reserved]
    assert bad == []


def test_secrets_learnt_later_are_hidden_by_a_formatter_already_in_use() -> None:
    """The redactor keeps its sorted list (and the JSON-escaped forms) between lines: a
    secret shared, added or unshared after the first line must still change the next one."""
    buf = io.StringIO()
    redactor = log.setup("info", [], stream=buf)
    lg = logging.getLogger("gantry.x")
    shared, own = 'shared-"header"-value', "own-secret-added-later"
    lg.info("first", extra={"v": shared})
    log.share_secrets(shared)
    redactor.add(own)
    try:
        lg.info("second %s", own, extra={"v": shared})
    finally:
        log.unshare_secrets(shared)
    lg.info("third", extra={"v": shared})
    first, second, third = (json.loads(line) for line in buf.getvalue().splitlines())
    assert first["v"] == shared and third["v"] == shared
    assert second["v"] == log.REDACTED and second["message"] == f"second {log.REDACTED}"
    assert json.dumps(shared)[1:-1] not in buf.getvalue().splitlines()[1]


def test_strings_without_a_colon_skip_only_the_shape_patterns() -> None:
    """Token and URL shapes all contain ':', so strings without one skip those patterns;
    known secrets are still replaced in them, and strings with one still get every pattern."""
    r = log.Redactor(["plain-secret-value"])
    assert r.text("no colon plain-secret-value here") == f"no colon {log.REDACTED} here"
    assert r.text(f"t {TOKEN}") == f"t {log.REDACTED}"
    assert r.text("see https://u:p@h/x") == f"see https://{log.REDACTED}@h/x"
    assert r.text("bot1234567:AAAAAAAAAAAA/x") == f"bot{log.REDACTED}/x"


def test_tool_call_line_fields_and_time(stream: io.StringIO) -> None:
    """The per-call line keeps its shape: time to the millisecond in UTC, level, logger,
    message, then the fields in the order they were passed (the second is cached)."""
    import re as _re

    lg = logging.getLogger("gantry.tools")
    for ms in (3, 4):
        lg.info("tool call", extra={"tool": "st__echo", "ms": ms, "chars": 42})
    lines = stream.getvalue().splitlines()
    recs = [json.loads(line) for line in lines]
    assert list(recs[0]) == ["time", "level", "logger", "message", "tool", "ms", "chars"]
    assert recs[1] == {**recs[1], "level": "info", "logger": "gantry.tools",
                       "message": "tool call", "tool": "st__echo", "ms": 4, "chars": 42}
    assert all(_re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["time"]) for r in recs)
    assert lines[0].startswith('{"time": "') and ', "tool": "st__echo", "ms": 3, ' in lines[0]


def test_text_format_prints_ints_as_json_does() -> None:
    buf = io.StringIO()
    log.setup("info", [], stream=buf, fmt="text")
    logging.getLogger("gantry.tools").info(
        "tool call", extra={"tool": "st__echo", "ms": 12, "chars": -3, "ok": True, "f": 1.5})
    assert buf.getvalue().strip().endswith(
        "info gantry.tools: tool call tool=st__echo ms=12 chars=-3 ok=true f=1.5")


def test_emit_makes_the_record_logger_log_would(stream: io.StringIO) -> None:
    """log.emit's record is makeRecord's (same attributes, in the same order, same values
    but the clock), goes through the same handlers, and prints the same line as logger.info
    with extra= (but the time), secrets in its fields redacted."""
    lg = logging.getLogger("gantry.tools")
    fields = {"tool": "st__echo", "ms": 3, "chars": 42, "note": f"k={KEY}"}
    made = lg.makeRecord(lg.name, logging.INFO, "(unknown file)", 0, "tool call", (), None,
                         "(unknown function)", fields)
    ours = log._record(lg.name, logging.INFO, "tool call", fields)
    mine, theirs = vars(ours), vars(made)
    assert [k for k in mine if k != "_fields"] == list(theirs)
    clock = {"created", "msecs", "relativeCreated"}
    assert {k: v for k, v in mine.items() if k not in clock | {"_fields"}} == {
        k: v for k, v in theirs.items() if k not in clock}
    assert abs(ours.relativeCreated - made.relativeCreated) < 50
    log.emit(lg, logging.INFO, "tool call", fields)
    lg.info("tool call", extra=fields)
    log.emit(lg, logging.DEBUG - 1, "not enabled", fields)
    a, b = (json.loads(line) for line in stream.getvalue().splitlines())
    assert {**a, "time": ""} == {**b, "time": ""} and a["note"] == f"k={log.REDACTED}"
    assert KEY not in stream.getvalue()


def test_line_encoder_writes_what_json_dumps_does() -> None:
    value = {"a": "é \u2028 \"q\" \\", "n": [1, 2.5, None, True], "d": {"k": -3}, "e": {}}
    assert log._ENCODE(value) == json.dumps(value, ensure_ascii=False, default=str)


def test_memo_forgets_when_a_secret_is_learnt() -> None:
    """A remembered field name stops being shown as it was once it becomes a secret."""
    buf = io.StringIO()
    redactor = log.setup("info", [], stream=buf)
    lg = logging.getLogger("gantry.tools")
    lg.info("m", extra={"abcdefgh-field": 1})
    redactor.add("abcdefgh-field")
    lg.info("m", extra={"abcdefgh-field": 1})
    first, second = (json.loads(line) for line in buf.getvalue().splitlines())
    assert "abcdefgh-field" in first and log.REDACTED in second


def test_emit_record_has_the_pid_of_a_forked_child() -> None:
    import os

    lg = logging.getLogger("gantry.tools")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its records carry its own pid
        rec = log._record(lg.name, logging.INFO, "m", {})
        os.write(w, str(rec.process == os.getpid()).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 10) == b"True"
    assert log._record(lg.name, logging.INFO, "m", {}).process == os.getpid()


def test_emit_with_gantry_handler_alone_writes_the_record_line() -> None:
    """With gantry's JSON handler the only one (production; pytest adds its own, so this test
    takes them off), emit writes the line without a record: the same line logger.info
    writes (but the time), redacted; any other handler, a filter or the text format gets a
    real record again."""
    buf = io.StringIO()
    log.setup("info", [KEY], stream=buf)
    root = logging.getLogger()
    lg = logging.getLogger("gantry.tools")
    ours = [h for h in root.handlers if h.get_name() == "gantry"]
    saved = list(root.handlers)
    root.handlers[:] = ours
    try:
        assert log._sole_handler(lg, logging.INFO) is ours[0]
        fields = {"tool": "st__echo", "ms": 7, "chars": 3, "note": f"k={KEY}", "_x": 1}
        log.emit(lg, logging.INFO, "tool call", fields)
        lg.info("tool call", extra=fields)
        a, b = (json.loads(line) for line in buf.getvalue().splitlines())
        assert {**a, "time": ""} == {**b, "time": ""} and list(a) == list(b)
        assert a["note"] == f"k={log.REDACTED}" and KEY not in buf.getvalue()
        lg.addFilter(lambda r: True)
        assert log._sole_handler(lg, logging.INFO) is None
        lg.filters.clear()
        root.addHandler(logging.NullHandler())
        assert log._sole_handler(lg, logging.INFO) is None
    finally:
        root.handlers[:] = saved
    assert log._sole_handler(lg, logging.INFO) is None  # pytest's capture handlers are back


def test_emit_line_is_the_record_line_for_every_kind_of_value() -> None:
    """The line written piece by piece equals format() of the record, whatever the values
    (text to escape, secrets plain and JSON-escaped, bools, floats, None, lists, maps) and
    when a field is not printed (private, a LogRecord name) or a name is itself redacted."""
    quoted = 'se"cret\\value'
    buf = io.StringIO()
    log.setup("info", [KEY, quoted], stream=buf)
    fmt = next(h for h in logging.getLogger().handlers if h.get_name() == "gantry").formatter
    assert isinstance(fmt, log.JsonFormatter)
    lg = logging.getLogger("gantry.tools")
    cases = [
        {"tool": "st__echo", "ms": 7, "chars": 3},
        {"s": 'a "quoted" \\ é \u2028 \n', "b": True, "f": 1.5, "n": None, "neg": -3},
        {"l": [1, "x", KEY], "d": {"k": quoted, 2: "v"}, "t": (1, 2), "o": object()},
        {"v": f"key {KEY}", "q": quoted, "u": "https://u:pw@h/x", "_private": 1},
        {"tool": "x", KEY: 1},  # a field name that is a secret: the record path decides
        {},
    ]
    for fields in cases:
        for name, msg in (("gantry.tools", "tool call"), ("gantry.mcp", f"m {KEY}")):
            created = 1796295776.044
            record = log._record(name, logging.INFO, msg, fields)
            record.created, record.msecs = created, int((created - int(created)) * 1000) + 0.0
            for _ in range(2):  # the second time from the memo
                assert fmt.line(created, logging.INFO, name, msg, fields) == fmt.format(record)
    assert KEY not in fmt.line(1.0, logging.INFO, "gantry.tools", "m", cases[2])
    lg.info("done")
