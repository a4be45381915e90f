"""Logging to stderr, with secrets redacted from every record.

JSON lines for machines; short text lines when a person watches a terminal (LOG_FORMAT).
stdout belongs to the stdio REPL, so logs never go there. Redaction runs in the one
handler on the root logger, so records from httpx, aiogram and mcp pass through it too.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

# Telegram puts the bot token in every API URL: https://api.telegram.org/bot<id>:<key>/...
_BOT_URL_TOKEN = re.compile(r"bot[0-9]{3,}:[A-Za-z0-9_-]{10,}")
_BARE_TOKEN = re.compile(r"\b[0-9]{5,}:[A-Za-z0-9_-]{30,}\b")
# Credentials inside any URL: scheme://user:password@host (e.g. LLM_BASE_URL via a proxy).
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\"]+@")
REDACTED = "[REDACTED]"
MEMO = 512  # strings a Redactor's memo() keeps before it starts again

# Secrets learnt after the redactors were made (an MCP server's header values): every
# Redactor hides these too, so logs, `gantry check` and boot errors need no re-wiring.
_SHARED: list[str] = []
# Bumped whenever _SHARED changes, so each Redactor re-sorts its list once per change, not
# once per string it looks at.
_shared_version = 0

# Attributes every LogRecord has; anything else was passed via `extra=` and is a field.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


class Redactor:
    """Replaces known secret values and token-shaped strings in text."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets: list[str] = []
        self._version = 0  # bumped by add(), like _shared_version
        # (version of _SHARED and of our own list, all secrets, their JSON-escaped forms)
        self._all: tuple[tuple[int, int], list[str], list[str]] = ((-1, -1), [], [])
        self._memo: tuple[tuple[int, int], dict[Any, str]] = ((-1, -1), {})
        self.add(*secrets)

    def add(self, *secrets: str) -> None:
        for s in secrets:
            # Very short values would redact ordinary words; real keys are long.
            if s and len(s) >= 6 and s not in self.secrets:
                self.secrets.append(s)
                self._version += 1
        self.secrets.sort(key=len, reverse=True)

    def _current(self) -> tuple[tuple[int, int], list[str], list[str]]:
        """The secrets and their escaped forms, recomputed only when a list changed."""
        cached = self._all
        if cached[0] != (_shared_version, self._version):
            every = (sorted({*self.secrets, *_SHARED}, key=len, reverse=True) if _SHARED
                     else list(self.secrets))
            encoded = ((s, json.dumps(s, ensure_ascii=False)[1:-1]) for s in every)
            escaped = [e for s, e in encoded if e != s]
            cached = self._all = ((_shared_version, self._version), every, escaped)
        return cached

    def all(self) -> list[str]:
        """This redactor's secrets and the shared ones, longest first."""
        return self._current()[1]

    def escaped(self) -> list[str]:
        """The JSON-escaped forms of the secrets that json.dumps changes (quotes, \\, controls)."""
        return self._current()[2]

    def memo(self) -> dict[Any, str]:
        """text() of strings that come from code, not data (logger names, field names, a
        message without arguments), and the formatter's pieces of lines made of them, kept
        for the next record: valid while no secret list changes (then it starts empty), at
        most MEMO entries."""
        memo = self._memo
        if memo[0] != (_shared_version, self._version) or len(memo[1]) >= MEMO:
            memo = self._memo = ((_shared_version, self._version), {})
        return memo[1]

    def text(self, s: str) -> str:
        for secret in self._current()[1]:
            if secret in s:
                s = s.replace(secret, REDACTED)
        if ":" not in s:  # each of the shapes below has one: most strings are done here
            return s
        s = _BOT_URL_TOKEN.sub("bot" + REDACTED, s)
        s = strip_url_credentials(s)
        return _BARE_TOKEN.sub(REDACTED, s)

    def value(self, v: Any) -> Any:
        if isinstance(v, str):
            return self.text(v)
        if v is None or isinstance(v, _PLAIN):
            return v
        if isinstance(v, dict):
            return {self.text(str(k)): self.value(x) for k, x in v.items()}
        if isinstance(v, list | tuple | set):
            return [self.value(x) for x in v]
        return self.text(repr(v) if not isinstance(v, BaseException) else str(v))


_PLAIN = (bool, int, float)

# Where a record made by emit() says it was logged from: what the stdlib itself writes when
# it is told not to look (logging._srcfile = None).
_NO_FILE, _NO_FUNC = "(unknown file)", "(unknown function)"


def emit(logger: logging.Logger, level: int, msg: str, fields: dict[str, Any]) -> None:
    """`logger.log(level, msg, extra=fields)` for a record made on every tool call, to the
    same line. With gantry's JSON handler the only place it would go, the line is written
    without a LogRecord (_sole_handler); else the same LogRecord goes through the same
    filters and handlers, only made without the stdlib's walk up the stack for the file,
    line and function that logged it (a third of the record's cost under asyncio's deep
    stacks), which neither format prints. `fields` must not name a LogRecord attribute
    (logger.log would refuse it; this does not check)."""
    if not logger.isEnabledFor(level):
        return
    handler = _sole_handler(logger, level)
    if handler is None:
        logger.handle(_record(logger.name, level, msg, fields))
    else:
        handler.write_line(time.time(), level, logger.name, msg, fields)


def _sole_handler(logger: logging.Logger, level: int) -> _LineHandler | None:
    """gantry's JSON handler when it is the one place a record of `logger` at `level` would
    go, with no filter on the way (production: setup() installs only it): the line can be
    written without a LogRecord. None when anything else would see the record (a handler
    another part added, pytest's capture, a filter, a text format): then it is made."""
    if logger.disabled or logger.filters:
        return None
    found = None
    node: logging.Logger | None = logger
    while node is not None:
        for h in node.handlers:
            if found is not None or type(h) is not _LineHandler:
                return None
            found = h
        node = node.parent if node.propagate else None
    if (found is None or found.filters or level < found.level
            or type(found.formatter) is not JsonFormatter):
        return None
    return found


# A real LogRecord's attributes, made once per level: an emit() record starts as a copy and
# has its clock, name, message, thread and process set.
_SAME: dict[int, dict[str, Any]] = {}


def _record(name: str, level: int, msg: str, fields: dict[str, Any]) -> logging.LogRecord:
    """What logger.makeRecord(name, level, _NO_FILE, 0, msg, (), None, _NO_FUNC, fields)
    makes (tests compare the two), without LogRecord's path splitting and lookups (half the
    cost of a record). The stdlib's record factory is not consulted: gantry sets none."""
    ct = time.time()
    same = _SAME.get(level)
    if same is None:
        made = logging.LogRecord(name, level, _NO_FILE, 0, msg, (), None, _NO_FUNC)
        same = _SAME[level] = dict(vars(made))  # (in its order, which the fields keep)
    record = _new_record(logging.LogRecord)
    attrs = record.__dict__
    attrs.update(same)
    attrs["name"] = name
    attrs["msg"] = msg
    attrs["created"] = ct
    attrs["msecs"] = int((ct - int(ct)) * 1000) + 0.0
    attrs["relativeCreated"] = (ct - _LOGGING_STARTED) * 1000
    if logging.logThreads:
        attrs["thread"] = threading.get_ident()
        attrs["threadName"] = threading.current_thread().name
    if logging.logProcesses:
        attrs["process"] = _pid[0]
    if "taskName" in same:  # Python 3.12+: the asyncio task's name, as LogRecord reads it
        attrs["taskName"] = _task_name()
    attrs.update(fields)
    attrs["_fields"] = tuple(fields)  # what the formatter prints, without a walk of them all
    return record


_new_record = object.__new__


def _task_name() -> str | None:
    if not getattr(logging, "logAsyncioTasks", False):
        return None
    import asyncio

    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop
        return None
    return task.get_name() if task is not None else None


# This process's id, read again in a forked child: os.getpid() is a system call per record.
_pid = [os.getpid()]
os.register_at_fork(after_in_child=lambda: _pid.__setitem__(0, os.getpid()))
# When logging was imported: what a LogRecord's relativeCreated counts from (not in typeshed).
_LOGGING_STARTED: float = getattr(logging, "_startTime", time.time())


def share_secrets(*secrets: str) -> None:
    """Make every Redactor (made before or after) hide `secrets` too (short ones excepted)."""
    global _shared_version
    for s in secrets:
        if s and len(s) >= 6 and s not in _SHARED:
            _SHARED.append(s)
            _shared_version += 1


def unshare_secrets(*secrets: str) -> None:
    """Stop hiding `secrets` that no longer exist (an OAuth token replaced by its refresh),
    so a long-running daemon's list does not grow with every refresh."""
    global _shared_version
    for s in secrets:
        if s in _SHARED:
            _SHARED.remove(s)
            _shared_version += 1


def strip_url_credentials(text: str) -> str:
    """Every `scheme://user:password@` in `text` with the credentials replaced."""
    return _URL_USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", text)


def url_secrets(url: str) -> list[str]:
    """The password (and user:password) of a URL, for the redactor; [] when it has none."""
    from urllib.parse import unquote, urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    if not parts.password:
        return []
    raw = parts.netloc.rpartition("@")[0]
    return [raw, raw.partition(":")[2], unquote(raw.partition(":")[2])]


def _line_encoder() -> Callable[[Any], str]:
    """json.dumps(..., ensure_ascii=False, default=str), same text, made once: JSONEncoder
    builds its C encoder anew for every line (and a dict to catch cycles, which cannot occur
    here: the redactor has already copied every field into fresh dicts and lists)."""
    from json import encoder

    full = json.JSONEncoder(ensure_ascii=False, default=str).encode
    make = getattr(encoder, "c_make_encoder", None)  # (not in typeshed)
    if make is None:  # no _json accelerator: the pure-Python encoder, built per line
        return full
    chunks = make(None, str, encoder.encode_basestring, None, ": ", ", ", False, False, True)

    def encode(obj: Any) -> str:
        return "".join(chunks(obj, 0))

    return encode


_ENCODE = _line_encoder()
# One string as the encoder writes it (ensure_ascii=False), quotes included.
_STRING: Callable[[str], str] = json.encoder.encode_basestring
_HEAD = frozenset({"time", "level", "logger", "message"})  # the keys every line starts with


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, then structured fields."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor
        # (whole second, its "YYYY-MM-DDTHH:MM:SS"): records come many to a second; one
        # tuple, so a thread never pairs one second with another's text.
        self._second: tuple[int, str] = (-1, "")

    def fields(self, record: logging.LogRecord) -> dict[str, Any]:
        """The record as redacted fields: what both formats print. Time and level are made
        here from a number and a level name, so only the rest goes through the redactor."""
        try:
            message = record.getMessage()
        except Exception:  # a bad %-format in a third-party logger must not kill logging
            message = f"{record.msg!r} {record.args!r}"
        out = self._head(record.created, record.msecs, record.levelname, record.name,
                         message, bool(record.args))
        attrs = record.__dict__
        self._add(out, attrs, attrs.get("_fields") or attrs)  # an emit() record names them
        if record.exc_info and record.exc_info[1] is not None:
            text = self.redactor.text
            exc = record.exc_info[1]
            out["error"] = text(f"{type(exc).__name__}: {exc}")
            if record.levelno >= logging.ERROR or record.levelno <= logging.DEBUG:
                out["traceback"] = text(self.formatException(record.exc_info))
        return out

    def _head(self, created: float, msecs: float, levelname: str, name: Any, message: str,
              args: bool) -> dict[str, Any]:
        """time, level, logger and message; `args`: the message was %-formatted from data
        (else it is the code's text, redacted once and then remembered)."""
        date = self._date(int(created))
        redactor = self.redactor
        text, memo = redactor.text, redactor.memo()
        if type(name) is str:  # None in a makeLogRecord({}) record
            logger = memo.get(name)
            if logger is None:
                logger = memo[name] = text(name)
        else:
            logger = redactor.value(name)
        if args:
            message = text(message)
        else:
            said = memo.get(message)
            message = memo[message] = text(message) if said is None else said
        return {
            "time": f"{date}.{int(msecs):03d}Z",
            "level": _LEVEL_NAMES.get(levelname) or levelname.lower(),
            "logger": logger,
            "message": message,
        }

    def _add(self, out: dict[str, Any], attrs: dict[str, Any], keys: Iterable[str]) -> None:
        """The fields among `keys` (not a LogRecord attribute, not private), redacted."""
        redactor = self.redactor
        text, value, memo = redactor.text, redactor.value, redactor.memo()
        for key in keys:
            if key in _STANDARD or key in out or key[:1] == "_":
                continue
            val = attrs[key]
            field = memo.get(key)
            if field is None:
                field = memo[key] = text(key)
            out[field] = val if type(val) is int else value(val)

    def _scrubbed(self, out: dict[str, Any]) -> str:
        line: str = _ENCODE(out)
        # Secrets may contain characters json escapes; scrub the encoded form too.
        for enc in self.redactor.escaped():
            if enc in line:
                line = line.replace(enc, REDACTED)
        return line

    def format(self, record: logging.LogRecord) -> str:
        return self._scrubbed(self.fields(record))

    def line(self, created: float, level: int, name: str, msg: str,
             fields: dict[str, Any]) -> str:
        """format() of the record log.emit would make, without making it (tests compare).
        Written piece by piece, as the encoder would: the part after the time is the same
        for every line of one (level, logger, message) and is kept, as is each field name's
        `"name": `; values are redacted and encoded each time."""
        memo = self.redactor.memo()
        text = self.redactor.text
        mid = memo.get((level, name, msg))
        if mid is None:
            head = self._head(0.0, 0.0, logging.getLevelName(level), name, msg, False)
            mid = _ENCODE(head)[len('{"time": "1970-01-01T00:00:00.000Z"'):-1]
            memo[(level, name, msg)] = mid
        parts = [self._clock(created), mid]
        for key, val in fields.items():
            named = memo.get((key,))
            if named is None:
                if (key in _STANDARD or key in _HEAD or key[:1] == "_" or text(key) != key):
                    # not printed, or a name the redactor changes (the dict path decides)
                    out = self._head(created, int((created - int(created)) * 1000),
                                     logging.getLevelName(level), name, msg, False)
                    self._add(out, fields, fields)
                    return self._scrubbed(out)
                named = memo[(key,)] = ", " + _STRING(key) + ": "
            parts.append(named)
            kind = type(val)
            if kind is str:
                parts.append(_STRING(text(val)))
            elif kind is int:
                parts.append(int.__repr__(val))
            else:
                parts.append(_ENCODE(self.redactor.value(val)))
        parts.append("}")
        line = "".join(parts)
        for enc in self.redactor.escaped():
            if enc in line:
                line = line.replace(enc, REDACTED)
        return line

    def _clock(self, created: float) -> str:
        """`{"time": "…Z"`: the line's start (the time is ASCII: nothing to escape)."""
        second = int(created)
        return f'{{"time": "{self._date(second)}.{int((created - second) * 1000):03d}Z"'

    def _date(self, second: int) -> str:
        """The UTC date and time of `second` to the second, made once per second."""
        cached = self._second
        if cached[0] != second:
            cached = self._second = (second, time.strftime("%Y-%m-%dT%H:%M:%S",
                                                           time.gmtime(second)))
        return cached[1]


class TextFormatter(JsonFormatter):
    """`12:04:05 warning gantry.agent: message key=value`: for a person at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        out = self.fields(record)
        clock = out.pop("time")[11:19]
        head = f"{clock} {out.pop('level')} {out.pop('logger')}: {out.pop('message')}"
        tb = out.pop("traceback", None)
        extra = " ".join(f"{k}={_short(v)}" for k, v in out.items())
        line = f"{head} {extra}" if extra else head
        return f"{line}\n{tb}" if tb else line


def _short(value: Any) -> str:
    """A field value as a person reads it: a word bare, text with spaces in quotes, lists
    and maps spelled out once (`files=[PERSONA.md, USER.md]`), never JSON inside quotes."""
    if isinstance(value, str):
        bare = value and not any(c.isspace() or c in '"\\,' for c in value)
        return value if bare else json.dumps(value, ensure_ascii=False)
    if type(value) is int:  # what json.dumps gives for a plain int, without its setup
        return int.__repr__(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_short(str(k))}: {_short(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False, default=str)


_LEVEL_NAMES = {name: name.lower() for name in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")}

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


FORMATS = ("auto", "json", "text")


def resolve_format(fmt: str, stream: TextIO) -> str:
    """`auto` means text when a person is watching (a terminal), else JSON for machines."""
    if fmt != "auto":
        return fmt
    try:
        return "text" if stream.isatty() else "json"
    except (AttributeError, ValueError):
        return "json"


def setup(
    level: str = "info",
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
    fmt: str = "json",
) -> Redactor:
    """Install the redacting handler on the root logger (idempotent); return its redactor."""
    redactor = Redactor(secrets)
    out = stream or sys.stderr
    handler = _LineHandler(out)
    formatter = TextFormatter if resolve_format(fmt, out) == "text" else JsonFormatter
    handler.setFormatter(formatter(redactor))
    handler.set_name("gantry")
    root = logging.getLogger()
    for h in list(root.handlers):
        if h.get_name() == "gantry":
            root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(_LEVELS.get(level, logging.INFO))
    # Chatty libraries log request URLs (which carry the Telegram token) at INFO/DEBUG;
    # the redactor covers them, but they are noise at info level.
    quiet = logging.WARNING if root.level > logging.DEBUG else logging.DEBUG
    for name in ("httpx", "httpx2", "httpcore", "aiogram.event", "mcp.client", "mcp.server"):
        logging.getLogger(name).setLevel(quiet)
    logging.captureWarnings(True)
    _route_uncaught(redactor)
    return redactor


class _LineHandler(logging.StreamHandler):
    """A StreamHandler that flushes each line under the lock handle() already holds, not
    taking it a second time as StreamHandler.flush() does (one line per tool call)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
            stream = self.stream
            stream.write(line + self.terminator)
            stream.flush()
        except RecursionError:  # as StreamHandler.emit: a stack overflow is not swallowed
            raise
        except Exception:
            self.handleError(record)

    def write_line(self, created: float, level: int, name: str, msg: str,
                   fields: dict[str, Any]) -> None:
        """What handle() of an emit() record writes, with no record made (_sole_handler)."""
        formatter = self.formatter
        assert isinstance(formatter, JsonFormatter)
        self.acquire()
        try:
            stream = self.stream
            stream.write(formatter.line(created, level, name, msg, fields) + self.terminator)
            stream.flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(_record(name, level, msg, fields))
        finally:
            self.release()


def _route_uncaught(redactor: Redactor) -> None:
    """Uncaught exceptions (main thread or any other) become one redacted JSON line, never
    a raw traceback on stderr past the redactor."""
    import threading

    crash = logging.getLogger("gantry.crash")

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        crash.critical("uncaught exception", exc_info=(kind, exc, tb))

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None and not isinstance(args.exc_value, SystemExit):
            crash.critical("uncaught exception in a thread",
                           exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
                           extra={"thread_name": args.thread.name if args.thread else None})

    sys.excepthook = hook
    threading.excepthook = thread_hook


class _AroundLines:
    """A log stream that calls `before()` and `after()` around each line it writes."""

    def __init__(self, stream: TextIO, before: Callable[[], None],
                 after: Callable[[], None]) -> None:
        self.stream, self.before, self.after = stream, before, after

    def write(self, text: str) -> int:
        self.before()
        written = self.stream.write(text)
        self.stream.flush()
        self.after()
        return written

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextmanager
def around_terminal_lines(before: Callable[[], None],
                          after: Callable[[], None]) -> Iterator[None]:
    """While inside, each log line gantry writes to a terminal is wrapped in `before()` and
    `after()`: the REPL takes its prompt and typed line off the screen and draws them again
    below the line, instead of the line landing in the middle of them."""
    handler = next((h for h in logging.getLogger().handlers
                    if h.get_name() == "gantry" and isinstance(h, logging.StreamHandler)), None)
    try:
        terminal = handler is not None and handler.stream.isatty()
    except (AttributeError, ValueError):
        terminal = False
    if handler is None or not terminal:
        yield
        return
    old = handler.setStream(_AroundLines(handler.stream, before, after))
    try:
        yield
    finally:
        if old is not None:
            handler.setStream(old)
