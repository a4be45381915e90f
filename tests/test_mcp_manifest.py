"""The MCP manifest: decoding, every problem at once, ${VAR} expansion, missing files."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gantry.log import Redactor
from gantry.mcp.manifest import (
    ALLOWED,
    DEFAULT_PATH,
    ManifestError,
    ServerSpec,
    load,
    parse,
    secrets,
)

PY = sys.executable
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TOKEN": "s3cret", "HOME": "/home/x"}


def problems(text: str, env: dict[str, str] = ENV) -> list[str]:
    with pytest.raises(ManifestError) as info:
        parse(text, env)
    return info.value.problems


def test_a_full_server_decodes_and_expands() -> None:
    specs = parse(
        f"""
[[server]]
name = "time"
command = "{PY}"
args = ["-m", "x", "--token=${{TOKEN}}"]
env = {{ API_TOKEN = "${{TOKEN}}", PLAIN = "1" }}
cwd = "/"
timeout_seconds = 5

[[server]]
name = "sh-2"
command = "sh"
""",
        ENV,
    )
    assert specs[0] == ServerSpec(
        name="time", command=PY, args=["-m", "x", "--token=s3cret"],
        env={"API_TOKEN": "s3cret", "PLAIN": "1"}, cwd="/", timeout_seconds=5.0,
        expanded=("s3cret",),
    )
    assert specs[1].name == "sh-2" and os.path.isabs(specs[1].command)  # resolved on PATH
    assert specs[1].timeout_seconds == 60 and specs[1].args == [] and specs[1].env == {}


def test_every_expanded_value_of_a_command_server_is_a_secret() -> None:
    """Issue 35 item 4: what a `${VAR}` put in command, args, env or cwd is hidden from repr
    and `where`, and handed to the redactor; what the manifest wrote itself is shown."""
    env = {**ENV, "ARG_KEY": "arg-key-0123456789", "ENV_KEY": "env-key-0123456789",
           "BIN": os.path.dirname(PY), "WORK": "/"}
    (spec,) = parse(f"""
[[server]]
name = "s"
command = "${{BIN}}/{os.path.basename(PY)}"
args = ["-m", "x", "--key=${{ARG_KEY}}"]
env = {{ K = "${{ENV_KEY}}" }}
cwd = "${{WORK}}"
""", env)
    assert spec.args[-1] == "--key=arg-key-0123456789" and spec.env == {"K": "env-key-0123456789"}
    shown = [repr(spec), str(spec), repr([spec]), spec.where]
    for text in shown:
        assert "arg-key-0123456789" not in text and "env-key-0123456789" not in text, text
        assert os.path.dirname(PY) not in text, text
    assert "'--key=[REDACTED]'" in repr(spec) and "'-m'" in repr(spec)
    assert set(secrets([spec])) >= {"arg-key-0123456789", "env-key-0123456789",
                                    os.path.dirname(PY), "/"}
    assert os.path.dirname(PY) not in Redactor(secrets([spec])).text(f"ran {spec.command}")


def test_a_manifest_cannot_set_what_was_expanded() -> None:
    found = problems(f'[[server]]\nname = "s"\ncommand = "{PY}"\nexpanded = []\n')
    assert found == ["server 's': unknown key 'expanded'; allowed: name, command, args, env, "
                     "cwd, url, transport, headers, allow_http, required, timeout_seconds, "
                     "resources, auth, client_id, client_secret, scopes, redirect_uri, "
                     "oauth_client_metadata_url, protocol"]


def test_an_expanded_command_not_found_is_not_quoted() -> None:
    found = problems('[[server]]\nname = "s"\ncommand = "/nowhere/${TOKEN}/bin"\n')
    assert found == ["server 's': command '/nowhere/${TOKEN}/bin' is neither an executable "
                     "path nor found on PATH"]  # as written: the value is never quoted


def test_every_problem_is_reported_at_once_naming_server_and_key() -> None:
    found = problems(
        f"""
[[server]]
name = "a"
command = "{PY}"

[[server]]
name = "a"
command = "{PY}"

[[server]]
name = "bad name!"
command = "{PY}"

[[server]]
name = "typo"
command = "{PY}"
argz = ["x"]

[[server]]
name = "wrongtype"
command = 5

[[server]]
name = "nocmd"
command = "definitely-not-a-command-xyz"

[[server]]
name = "unset"
command = "{PY}"
env = {{ K = "${{NOT_SET_ANYWHERE}}" }}

[[server]]
command = "{PY}"
"""
    )
    text = "\n".join(found)
    assert "server 'a': duplicate name" in text
    assert "server 'bad name!': name must match" in text
    assert "server 'typo': unknown key 'argz'" in text
    assert "server 'wrongtype': command: Expected `str | null`, got `int`" in text
    assert "server 'nocmd': command 'definitely-not-a-command-xyz' is neither" in text
    assert "server 'unset': ${NOT_SET_ANYWHERE} is used but not set" in text
    assert "server #8: missing required key 'name'" in text
    assert len(found) == 7, found


def test_not_toml_and_wrong_shapes() -> None:
    assert "not valid TOML" in problems("[[server]\nname=")[0]
    assert "only [[server]] tables" in problems("[servers]\nx=1\n")[0]
    assert "'server' must be an array" in problems("server = 3\n")[0]
    assert "must be between" in problems(
        f'[[server]]\nname="x"\ncommand="{PY}"\ntimeout_seconds=0\n')[0]
    env_key = f'[[server]]\nname="x"\ncommand="{PY}"\nenv={{"1X"="v"}}\n'
    assert "env key '1X'" in problems(env_key)[0]


def test_empty_manifest_means_no_servers() -> None:
    assert parse("", ENV) == []
    assert parse("# only comments\n", ENV) == []


def test_missing_file_at_default_path_is_no_servers_elsewhere_an_error(tmp_path: Path) -> None:
    if not os.path.exists(DEFAULT_PATH):
        assert load(DEFAULT_PATH, ENV) == []
    with pytest.raises(ManifestError, match="file not found"):
        load(str(tmp_path / "mcp.toml"), ENV)
    bad = tmp_path / "bin.toml"
    bad.write_bytes(b"\xff\xfe")
    with pytest.raises(ManifestError, match="not UTF-8"):
        load(str(bad), ENV)


def test_sample_manifest_is_valid_and_empty() -> None:
    sample = Path(__file__).resolve().parents[1] / "deploy" / "mcp.toml"
    assert load(str(sample), ENV) == []


_value = st.one_of(
    st.text(max_size=12), st.integers(), st.booleans(), st.lists(st.text(max_size=5), max_size=3),
    st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2), st.none(),
)
_keys = st.sampled_from(["name", "command", "args", "env", "cwd", "timeout_seconds", "extra",
                        "url", "transport", "headers", "allow_http", "required"])


def _toml(servers: list[dict[str, object]]) -> str:
    import json

    out = []
    for server in servers:
        out.append("[[server]]")
        for key, value in server.items():
            if value is None:
                continue
            if isinstance(value, dict):
                inner = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in value.items())
                out.append(f"{key} = {{ {inner} }}")
            elif isinstance(value, bool):
                out.append(f"{key} = {str(value).lower()}")
            else:
                out.append(f"{key} = {json.dumps(value)}")
    return "\n".join(out) + "\n"


@settings(max_examples=150, deadline=None)
@given(st.lists(st.dictionaries(_keys, _value, max_size=6), max_size=4))
def test_any_manifest_decodes_or_fails_with_named_problems(
    servers: list[dict[str, object]],
) -> None:
    """Never a traceback: either valid specs, or a ManifestError whose lines name a server."""
    try:
        text = _toml(servers)
    except (TypeError, ValueError):
        return
    try:
        specs = parse(text, ENV)
    except ManifestError as exc:
        assert exc.problems
        for line in exc.problems:
            assert line.startswith(("server ", "not valid TOML")), line
        assert str(exc).startswith("MCP manifest")
        return
    assert len({s.name for s in specs}) == len(specs)


def test_errors_point_at_what_exists_outside_a_clone() -> None:
    """deploy/mcp.toml is in the repository only; a binary's operator has docs and `init`."""
    with pytest.raises(ManifestError) as info:
        parse("[[server]]\nname = 'x'\n", ENV)
    text = str(info.value)
    assert "deploy/mcp.toml" not in text
    assert "docs/mcp.md" in text and "gantry init --manifest" in text


def test_oauth_keys_are_checked_naming_server_and_key() -> None:
    found = problems(
        f"""
[[server]]
name = "kind"
url = "https://mcp.example.test/mcp"
auth = "basic"

[[server]]
name = "stray"
url = "https://mcp.example.test/mcp"
client_id = "abc"
scopes = ["read"]

[[server]]
name = "secret-alone"
url = "https://mcp.example.test/mcp"
auth = "oauth"
client_secret = "${{UNSET_SECRET}}"

[[server]]
name = "shapes"
url = "https://mcp.example.test/mcp"
headers = {{ authorization = "Bearer x" }}
auth = "oauth"
client_id = " "
scopes = ["read write", "ok"]
redirect_uri = "urn:ietf:wg:oauth:2.0:oob"

[[server]]
name = "child"
command = "{PY}"
auth = "oauth"
"""
    )
    assert found == [
        "server 'kind': auth must be \"oauth\" (the only kind there is), not 'basic'",
        "server 'stray': client_id is used only with auth = \"oauth\"",
        "server 'stray': scopes is used only with auth = \"oauth\"",
        "server 'secret-alone': client_secret needs client_id (a client registered in "
        "advance); without both gantry registers itself",
        "server 'secret-alone': client_secret: ${UNSET_SECRET} is used but not set in "
        "gantry's environment",
        "server 'shapes': headers: 'authorization' is what auth = \"oauth\" sets; remove one",
        "server 'shapes': client_id is empty",
        "server 'shapes': scopes: 'read write' is not one scope (no spaces, quotes or "
        "backslashes; list each scope apart)",
        "server 'shapes': redirect_uri 'urn:ietf:wg:oauth:2.0:oob' must be an absolute "
        "http(s) URL (the one registered for client_id)",
        "server 'child': auth is only for url servers (this one has a command)",
    ], found


def test_oauth_client_metadata_url_is_an_https_address_and_not_with_client_id() -> None:
    found = problems(
        """
[[server]]
name = "plain"
url = "https://mcp.example.test/mcp"
auth = "oauth"
oauth_client_metadata_url = "http://example.test/gantry.json"

[[server]]
name = "root"
url = "https://mcp.example.test/mcp"
auth = "oauth"
oauth_client_metadata_url = "https://example.test/"
client_id = "abc"

[[server]]
name = "stray"
url = "https://mcp.example.test/mcp"
oauth_client_metadata_url = "https://example.test/gantry.json"
"""
    )
    assert found == [
        "server 'plain': oauth_client_metadata_url: 'http://example.test/gantry.json' must "
        "be an https URL (the authorization server fetches it)",
        "server 'root': oauth_client_metadata_url: must have a path (the document's address, "
        "e.g. https://example.com/gantry.json)",
        "server 'root': oauth_client_metadata_url and client_id are two ways to name gantry "
        "to the authorization server; keep one",
        "server 'stray': oauth_client_metadata_url is used only with auth = \"oauth\"",
    ], found
    [spec] = parse('[[server]]\nname = "ok"\nurl = "https://mcp.example.test/mcp"\n'
                   'auth = "oauth"\noauth_client_metadata_url = '
                   '"https://example.test/gantry.json"\n', {})
    assert spec.oauth_client_metadata_url == "https://example.test/gantry.json"
    assert "oauth_client_metadata_url='https://example.test/gantry.json'" in repr(spec)


def test_oauth_client_secret_is_expanded_and_kept_out_of_repr() -> None:
    [spec] = parse(
        """
[[server]]
name = "gh"
url = "https://mcp.example.test/mcp"
headers = { X-Api = "${TOKEN}" }
auth = "oauth"
client_id = "gantry-app"
client_secret = "${TOKEN}"
scopes = ["repo", "read:org"]
redirect_uri = "https://example.test/callback"
""",
        ENV,
    )
    assert spec.client_secret == "s3cret" and spec.scopes == ["repo", "read:org"]
    assert "s3cret" not in repr(spec) and "gantry-app" in repr(spec)


def test_a_misspelt_key_is_named_with_a_guess_and_the_rest_still_checked() -> None:
    """Issue 36 #7: `comand` hid that the server then has no command; both are said."""
    found = problems('[[server]]\nname = "time"\ncomand = "mcp-server-time"\nrequird = false\n'
                     'zzzqqq = 1\n')
    assert found == [
        "server 'time': unknown key 'comand'; did you mean `command`?",
        "server 'time': unknown key 'requird'; did you mean `required`?",
        f"server 'time': unknown key 'zzzqqq'; allowed: {', '.join(ALLOWED)}",
        "server 'time': needs either command (a child over stdio) or url (a remote server)",
    ]


def test_allowed_keys_are_the_spec_s_fields() -> None:
    """Keys outside ALLOWED are dropped before decoding: a field missing from it would be
    silently ignored (`expanded` is gantry's to fill in, never a manifest key)."""
    assert sorted(ALLOWED) == sorted(set(ServerSpec.__struct_fields__) - {"expanded"})


def test_resources_switch_is_a_boolean_per_server_default_on() -> None:
    """Issue 41 item 3: `resources = false` keeps the resource tools off one server; any
    other value is a named problem, and a misspelling gets its guess."""
    specs = parse(f"""
[[server]]
name = "on"
command = "{PY}"

[[server]]
name = "off"
command = "{PY}"
resources = false
""", ENV)
    assert [s.resources for s in specs] == [True, False]
    assert "resources=False" in repr(specs[1]) and "resources" not in repr(specs[0])
    remote = parse('[[server]]\nname = "r"\nurl = "https://example.org/mcp"\n'
                   'resources = false\n', ENV)
    assert remote[0].resources is False and "resources=False" in repr(remote[0])
    assert problems(f'[[server]]\nname = "x"\ncommand = "{PY}"\nresources = "no"\n') == [
        "server 'x': resources: Expected `bool`, got `str`"]
    assert problems(f'[[server]]\nname = "x"\ncommand = "{PY}"\nresource = false\n') == [
        "server 'x': unknown key 'resource'; did you mean `resources`?"]
