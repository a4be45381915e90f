"""A child's environment and its stderr turned into log records (capped, limited, redacted)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from gantry import log as logsetup
from gantry.mcp.child import LINE_MAX, STDERR_BURST, StderrLog, child_env

SECRET = "sk-child-secret-0123456789"


def test_child_env_is_minimal_plus_grants() -> None:
    environ = {"PATH": "/bin", "HOME": "/h", "LANG": "C.UTF-8", "LC_TIME": "de_DE", "TZ": "UTC",
               "SSL_CERT_FILE": "/etc/ssl/ca.pem", "SSL_CERT_DIR": "", "LLM_API_KEY": SECRET,
               "TELEGRAM_BOT_TOKEN": "1:x", "RANDOM": "r", "USER": "u"}
    env = child_env(environ, {"GRANTED": "g", "LLM_API_KEY": "explicit"})
    assert env == {"PATH": "/bin", "HOME": "/h", "LANG": "C.UTF-8", "LC_TIME": "de_DE",
                   "TZ": "UTC", "SSL_CERT_FILE": "/etc/ssl/ca.pem", "GRANTED": "g",
                   "LLM_API_KEY": "explicit"}
    assert "LLM_API_KEY" not in child_env(environ, {})


@pytest.fixture
def records() -> Iterator[io.StringIO]:
    out = io.StringIO()
    logsetup.setup("info", [SECRET], stream=out)
    yield out
    root = logging.getLogger()
    for h in list(root.handlers):
        if h.get_name() == "gantry":
            root.removeHandler(h)


def lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(x) for x in out.getvalue().splitlines()]


def test_stderr_lines_are_tagged_capped_and_redacted(records: io.StringIO) -> None:
    err = StderrLog("srv")
    err.line(f"token is {SECRET}\n")
    err.line("y" * (LINE_MAX + 500))
    got = lines(records)
    assert got[0]["message"] == "mcp server stderr" and got[0]["server"] == "srv"
    assert got[0]["line"] == "token is [REDACTED]"
    long = str(got[1]["line"])
    assert long.startswith("y" * LINE_MAX) and long.endswith("[500 chars cut]")
    assert err.tail[-1].startswith("yyy")


def test_stderr_flood_is_rate_limited_and_the_drop_is_counted(records: io.StringIO) -> None:
    err = StderrLog("srv")
    for i in range(STDERR_BURST * 5):
        err.line(f"flood {i}")
    logged = [r for r in lines(records) if r["message"] == "mcp server stderr"]
    assert STDERR_BURST <= len(logged) < STDERR_BURST + 20
    assert err.dropped > 0
    err.tokens = 5  # time passes
    err.line("after the flood")
    dropped = [r for r in lines(records) if r["message"].startswith("mcp server stderr lines")]
    assert dropped and int(dropped[0]["dropped"]) > STDERR_BURST * 3  # type: ignore[call-overload]
    assert len(err.tail) == 20 and err.tail[-1] == "after the flood"
