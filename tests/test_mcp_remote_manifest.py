"""Remote servers in the manifest: url/transport/headers/allow_http/required, all problems at
once, header values never shown."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from gantry import log as logsetup
from gantry.mcp.manifest import ManifestError, ServerSpec, load, parse, secrets, shown_url

PY = sys.executable
ENV = {"PATH": "/usr/bin:/bin", "TOKEN": "s3cret-header-value", "KEY": "q-key-123456"}


def problems(text: str, env: dict[str, str] = ENV) -> list[str]:
    with pytest.raises(ManifestError) as info:
        parse(text, env)
    return info.value.problems


def test_a_remote_server_decodes_and_expands() -> None:
    (http, sse, local) = parse(
        """
[[server]]
name = "remote"
url = "https://mcp.example.com/mcp?key=${KEY}"
headers = { Authorization = "Bearer ${TOKEN}", X-Plain = "1" }
timeout_seconds = 5

[[server]]
name = "legacy"
url = "http://127.0.0.1:8000/sse"
transport = "sse"
required = false

[[server]]
name = "lan"
url = "http://10.0.0.5/mcp"
allow_http = true
""",
        ENV,
    )
    assert http == ServerSpec(
        name="remote", url="https://mcp.example.com/mcp?key=q-key-123456",
        headers={"Authorization": "Bearer s3cret-header-value", "X-Plain": "1"},
        timeout_seconds=5.0, expanded=("q-key-123456", "s3cret-header-value"),
    )
    assert http.remote and http.transport == "streamable-http" and http.required
    assert sse.transport == "sse" and not sse.required
    assert local.allow_http
    assert http.where == "https://mcp.example.com/mcp"  # no query: it may hold a key


def test_header_values_and_url_keys_never_in_repr_or_str() -> None:
    (spec,) = parse('[[server]]\nname = "r"\nurl = "https://h.example/mcp?key=${KEY}"\n'
                    'headers = { Authorization = "Bearer ${TOKEN}" }\n', ENV)
    for text in (repr(spec), str(spec), repr([spec]), f"{spec}"):
        assert "s3cret-header-value" not in text and "q-key-123456" not in text
        assert "Authorization" in text and "[REDACTED]" in text
    assert set(secrets([spec])) >= {"Bearer s3cret-header-value", "s3cret-header-value",
                                    "key=q-key-123456"}


ZAP = "zap-path-key-0123456789"


def test_a_key_in_the_url_path_is_a_secret() -> None:
    """Issue 35 item 4: hosted servers carry their key in the path (`/mcp/${ZAP_KEY}/sse`);
    it is hidden from `where`, repr and problems, and handed to the redactor."""
    env = {**ENV, "ZAP_KEY": ZAP}
    (spec,) = parse('[[server]]\nname = "z"\nurl = "https://h.example/mcp/${ZAP_KEY}/sse"\n'
                    'headers = { X-Team = "team-${KEY}" }\n', env)
    assert spec.url == f"https://h.example/mcp/{ZAP}/sse"
    assert spec.where == "https://h.example/mcp/[REDACTED]/sse"
    for text in (repr(spec), str(spec), repr([spec]), spec.where):
        assert ZAP not in text and "q-key-123456" not in text, text
    assert set(secrets([spec])) >= {ZAP, "q-key-123456", "team-q-key-123456"}
    redact = logsetup.Redactor(secrets([spec])).text
    assert redact(f"HTTP 404 from {spec.url}") == "HTTP 404 from https://h.example/mcp/[REDACTED]/sse"
    found = problems('[[server]]\nname = "z"\nurl = "http://${ZAP_KEY}.example/mcp"\n', env)
    assert found and all(ZAP not in p for p in found), found
    assert "[REDACTED]" in found[0]


def test_loading_a_manifest_makes_every_redactor_hide_its_header_values(
    tmp_path: Path,
) -> None:
    path = tmp_path / "mcp.toml"
    path.write_text('[[server]]\nname = "r"\nurl = "https://h.example/mcp"\n'
                    'headers = { X-Api-Key = "${TOKEN}" }\n')
    before = logsetup.Redactor()  # made before the manifest is read, as at boot
    load(str(path), ENV)
    assert "s3cret-header-value" not in before.text("sent X-Api-Key: s3cret-header-value")
    assert "s3cret-header-value" not in logsetup.Redactor().text("s3cret-header-value")
    record = logging.makeLogRecord({"msg": "headers", "args": (),
                                    "extra_value": {"X-Api-Key": "s3cret-header-value"}})
    line = logsetup.JsonFormatter(before).format(record)
    assert "s3cret-header-value" not in line


def test_every_remote_problem_at_once_naming_server_and_key() -> None:
    found = problems(
        f"""
[[server]]
name = "both"
command = "{PY}"
url = "https://h.example/mcp"

[[server]]
name = "neither"

[[server]]
name = "ftp"
url = "ftp://h.example/mcp"

[[server]]
name = "plain"
url = "http://h.example/mcp"

[[server]]
name = "badheader"
url = "https://h.example/mcp"
headers = {{ "Bad Name" = "x", "Mcp-Session-Id" = "y", X-Ok = "a\\nb" }}

[[server]]
name = "trans"
url = "https://h.example/mcp"
transport = "websocket"

[[server]]
name = "mixed"
url = "https://h.example/mcp"
args = ["x"]

[[server]]
name = "mixed2"
command = "{PY}"
headers = {{ A = "b" }}

[[server]]
name = "unset"
url = "https://h.example/mcp"
headers = {{ A = "${{NOT_SET_ANYWHERE}}" }}

[[server]]
name = "nohost"
url = "https:///mcp"

[[server]]
name = "req"
url = "https://h.example/mcp"
required = "no"
"""
    )
    text = "\n".join(found)
    assert "server 'both': url and command cannot both be set" in text
    assert "server 'neither': needs either command" in text
    assert "server 'ftp': url: scheme 'ftp'" in text
    assert "server 'plain': url: plain http:// to 'h.example'" in text
    assert "allow_http = true" in text
    assert "server 'badheader': headers: 'Bad Name' is not a valid header name" in text
    assert "server 'badheader': headers: 'Mcp-Session-Id' is set by the MCP transport" in text
    assert "server 'badheader': headers: the value of 'X-Ok' contains a line break" in text
    assert "server 'trans': transport 'websocket' is not one of" in text
    assert "server 'mixed': args is only for command servers" in text
    assert "server 'mixed2': headers is only for url servers" in text
    assert "server 'unset': ${NOT_SET_ANYWHERE} is used but not set" in text
    assert "server 'nohost': url: has no host" in text
    assert "server 'req': required: Expected `bool`" in text
    assert len(found) == 13, found


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/mcp", "http://localhost/mcp",
                                 "http://[::1]:8080/mcp", "http://127.9.9.9/"])
def test_plain_http_to_loopback_needs_no_allow_http(url: str) -> None:
    (spec,) = parse(f'[[server]]\nname = "l"\nurl = "{url}"\n', ENV)
    assert spec.url == url


def test_shown_url_drops_login_query_and_fragment() -> None:
    assert shown_url("https://u:pw@h.example:8443/a/b?k=v#f") == "https://h.example:8443/a/b"
    assert shown_url("http://[::1]:9/x") == "http://[::1]:9/x"
