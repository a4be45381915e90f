"""The MCP manifest (`MCP_MANIFEST`): `[[server]]` tables → validated `ServerSpec`s.

A server is a child started over stdio (`command`) or a remote one reached over Streamable
HTTP or legacy SSE (`url`). Every problem is collected and reported at once, each naming the
server and the key, so one boot attempt tells the operator everything that is wrong. Header
values, and every value a `${VAR}` put anywhere in a spec (a hosted server's key in its URL
path, a token in an argument), are secrets: a spec's repr and `where` hide them, and
`secrets()` hands them to the log redactor. Nothing here imports `mcp` or `httpx`.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import msgspec

DEFAULT_PATH = "/etc/gantry/mcp.toml"
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_VAR = re.compile(r"\$\{([^}]*)\}")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEFAULT_TIMEOUT = 60.0
MAX_TIMEOUT = 3600.0
STREAMABLE_HTTP = "streamable-http"
SSE = "sse"
TRANSPORTS = (STREAMABLE_HTTP, SSE)
# `protocol`: probe for the 2026-07-28 revision and fall back, or pin one era.
PROTOCOLS = ("auto", "2026", "2025")
# RFC 9110 token: what a header field name may be.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Headers the SDK's transports set themselves; a manifest value would break the session.
_TRANSPORT_HEADERS = frozenset({"mcp-session-id", "mcp-protocol-version", "last-event-id",
                                "content-type", "content-length", "transfer-encoding",
                                "accept", "connection"})
_STDIO_KEYS = ("command", "args", "env", "cwd")
_OAUTH_KEYS = ("auth", "client_id", "client_secret", "scopes", "redirect_uri",
               "oauth_client_metadata_url")
_REMOTE_KEYS = ("url", "transport", "headers", "allow_http", *_OAUTH_KEYS)
HIDDEN = "[REDACTED]"


class ServerSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One `[[server]]` table as written (after `${VAR}` expansion).

    Exactly one of `command` (stdio child) and `url` (remote server) is set; `transport`
    says which protocol a `url` speaks. A remote key is a field here, a name in ALLOWED and
    _REMOTE_KEYS, and a check in `_check_remote` (the OAuth keys: `_check_oauth`).
    """

    name: str
    command: str | None = None
    args: list[str] = msgspec.field(default_factory=list)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    transport: str = STREAMABLE_HTTP
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    allow_http: bool = False
    required: bool = True
    timeout_seconds: float = DEFAULT_TIMEOUT
    # The built-in resource_list / resource_read tools read this server's resources
    # (gantry/mcp/resource_tool.py); `resources = false` keeps them off it.
    resources: bool = True
    # Which MCP protocol era to speak (gantry/mcp/era.py): "auto" probes server/discover.
    protocol: str = "auto"
    # OAuth for a remote server (gantry/mcp/oauth.py, docs/mcp.md "OAuth").
    auth: str | None = None
    client_id: str | None = None
    client_secret: str | None = None
    scopes: list[str] | None = None
    redirect_uri: str | None = None
    # Client ID Metadata Document: an https client_id (gantry/mcp/cimd.py).
    oauth_client_metadata_url: str | None = None
    # What `${VAR}`s were replaced with (set by `parse`, never read from the manifest).
    expanded: tuple[str, ...] = ()

    @property
    def remote(self) -> bool:
        """Reached over the network (`url`), not started as a child."""
        return self.url is not None

    @property
    def where(self) -> str:
        """What the server is, for messages: its command, or its URL without query or login;
        what a `${VAR}` put there hidden."""
        if self.url is None:
            return self.hide(self.command or "")
        return self.hide(shown_url(self.url))

    def hide(self, text: str) -> str:
        """`text` with every value a `${VAR}` put in this spec replaced by HIDDEN."""
        for value in sorted(self.expanded, key=len, reverse=True):
            text = text.replace(value, HIDDEN)
        return text

    def __repr__(self) -> str:
        headers = {k: HIDDEN for k in self.headers}
        if self.remote:
            return (f"ServerSpec(name={self.name!r}, url={self.where!r}, "
                    f"transport={self.transport!r}, headers={headers!r}, "
                    f"required={self.required!r}, timeout_seconds={self.timeout_seconds!r}"
                    f"{self._resources_repr()}{self._auth_repr()})")
        env = {k: HIDDEN for k in self.env}
        args = [self.hide(a) for a in self.args]
        cwd = self.hide(self.cwd) if self.cwd is not None else None
        return (f"ServerSpec(name={self.name!r}, command={self.where!r}, args={args!r}, "
                f"env={env!r}, cwd={cwd!r}, required={self.required!r}, "
                f"timeout_seconds={self.timeout_seconds!r}{self._resources_repr()})")

    __str__ = __repr__

    def _resources_repr(self) -> str:
        return "" if self.resources else ", resources=False"

    def _auth_repr(self) -> str:
        if self.auth is None:
            return ""
        secret = ", client_secret=" + repr(HIDDEN) if self.client_secret is not None else ""
        return (f", auth={self.auth!r}, client_id={self.client_id!r}{secret}, "
                f"scopes={self.scopes!r}, redirect_uri={self.redirect_uri!r}"
                + (f", oauth_client_metadata_url={self.oauth_client_metadata_url!r}"
                   if self.oauth_client_metadata_url is not None else ""))


def shown_url(url: str) -> str:
    """A URL as messages and logs show it: scheme, host, port and path; no login, query or
    fragment (either may carry a key)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(an unparsable URL)"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{port}{parts.path}"


def secrets(specs: list[ServerSpec]) -> list[str]:
    """Every value the log redactor must hide: header values, an OAuth client_secret, the
    URL's login and query, and whatever a `${VAR}` put anywhere in the spec."""
    out: list[str] = []
    for spec in specs:
        out += spec.expanded
        out += [v for v in spec.headers.values() if v]
        if spec.client_secret:
            out.append(spec.client_secret)
        for value in spec.headers.values():  # "Bearer abc…": the token alone, too
            scheme, _, token = value.partition(" ")
            if token and scheme.isalpha():
                out.append(token.strip())
        if spec.url is not None:
            parts = urlsplit(spec.url)
            if parts.query:
                out.append(parts.query)
            if "@" in parts.netloc:
                login = parts.netloc.rpartition("@")[0]
                out += [login, login.partition(":")[2]]
    return [s for s in out if s]


class ManifestError(Exception):
    """Every problem found in the manifest; `str()` is the operator-facing message."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        lines = [f"MCP manifest {path} has {len(problems)} problem(s):"]
        lines += [f"  - {p}" for p in problems]
        lines.append("The format: docs/mcp.md, or the commented sample `gantry init --manifest "
                     "PATH` writes (it never overwrites).")
        super().__init__("\n".join(lines))


def expand(value: str, environ: Mapping[str, str], missing: set[str],
           used: list[str] | None = None) -> str:
    """Replace each `${VAR}` with gantry's environment value; unset names go to `missing`,
    the values put in to `used` (they are secrets).

    Explicit on purpose: nothing reaches a child unless the manifest names it.
    """

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in environ:
            missing.add(name)
            return ""
        if used is not None and environ[name]:
            used.append(environ[name])
        return environ[name]

    return _VAR.sub(sub, value)


def _where(index: int, raw: Any) -> str:
    name = raw.get("name") if isinstance(raw, dict) else None
    return f"server {name!r}" if isinstance(name, str) and name else f"server #{index + 1}"


def _decode_error(where: str, exc: msgspec.ValidationError) -> str:
    """msgspec says e.g. "Expected `str`, got `int` - at `$.command`": name the key."""
    text = str(exc)
    msg, _, at = text.partition(" - at `$")
    key = at.rstrip("`").lstrip(".") if at else ""
    if msg.startswith("Object contains unknown field"):
        return _unknown_key(where, msg.split("`")[1] if "`" in msg else "?")
    if msg.startswith("Object missing required field"):
        field = msg.split("`")[1] if "`" in msg else "?"
        return f"{where}: missing required key {field!r}"
    return f"{where}: {key or 'value'}: {msg}"


ALLOWED = ("name", "command", "args", "env", "cwd", "url", "transport", "headers", "allow_http",
           "required", "timeout_seconds", "resources", "auth", "client_id", "client_secret",
           "scopes", "redirect_uri", "oauth_client_metadata_url", "protocol")


def _unknown_key(where: str, key: str) -> str:
    """A key no server takes, with the one it is probably a typo of (`comand`)."""
    import difflib

    near = difflib.get_close_matches(key, ALLOWED, n=1, cutoff=0.6)
    hint = f"did you mean `{near[0]}`?" if near else f"allowed: {', '.join(ALLOWED)}"
    return f"{where}: unknown key {key!r}; {hint}"


def _resolve_command(command: str, path_env: str | None) -> str | None:
    """Absolute path of an executable `command` (a path, or a bare name on PATH)."""
    if os.sep in command:
        return command if os.path.isfile(command) and os.access(command, os.X_OK) else None
    return shutil.which(command, path=path_env)


def parse(text: str, environ: Mapping[str, str], path: str = "mcp.toml") -> list[ServerSpec]:
    """Decode and check a manifest's text; raise ManifestError listing every problem."""
    import tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(path, [f"not valid TOML: {exc}"]) from None
    problems: list[str] = []
    extra = sorted(set(doc) - {"server"})
    if extra:
        problems.append(f"unknown top-level key(s) {', '.join(map(repr, extra))}; "
                        "only [[server]] tables are allowed")
    raw_servers = doc.get("server", [])
    if not isinstance(raw_servers, list):
        raise ManifestError(path, [*problems, "'server' must be an array of tables: [[server]]"])
    specs: list[ServerSpec] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(raw_servers):
        where = _where(index, raw)
        if not isinstance(raw, dict):
            problems.append(f"{where}: must be a table")
            continue
        # Unknown keys are reported, and the rest is checked as if they were not there: a
        # misspelt `comand` also means the server has no command, and both are said.
        # (`expanded` is a field gantry fills in: a manifest naming it is told it is unknown.)
        problems += [_unknown_key(where, str(k)) for k in raw if k not in ALLOWED]
        raw = {k: v for k, v in raw.items() if k in ALLOWED}
        try:
            spec = msgspec.convert(raw, ServerSpec)
        except msgspec.ValidationError as exc:
            problems.append(_decode_error(where, exc))
            # Keep checking what can be checked on its own, so problems come all at once.
            name = raw.get("name")
            if isinstance(name, str) and name and not NAME_RE.fullmatch(name):
                problems.append(f"{where}: name must match [A-Za-z0-9][A-Za-z0-9_-]*")
            continue
        problems.extend(_check(spec, raw, where, environ))
        if spec.name in seen:
            problems.append(
                f"{where}: duplicate name (server #{seen[spec.name] + 1} has it too)"
            )
        else:
            seen[spec.name] = index
        specs.append(spec)
    if problems:
        raise ManifestError(path, problems)
    return [_expanded(s, environ) for s in specs]


def _check(spec: ServerSpec, raw: dict[str, Any], where: str,
           environ: Mapping[str, str]) -> list[str]:
    problems: list[str] = []
    if not NAME_RE.fullmatch(spec.name):
        problems.append(f"{where}: name must match [A-Za-z0-9][A-Za-z0-9_-]*")
    if not 0 < spec.timeout_seconds <= MAX_TIMEOUT:
        problems.append(f"{where}: timeout_seconds must be between 0 and {MAX_TIMEOUT:g}")
    if spec.protocol not in PROTOCOLS:
        problems.append(f"{where}: protocol must be one of {', '.join(map(repr, PROTOCOLS))} "
                        f"(got {spec.protocol!r})")
    elif spec.protocol == "2026" and spec.url is not None and spec.transport == SSE:
        problems.append(f"{where}: protocol = \"2026\" needs transport = \"streamable-http\" "
                        "(the 2026-07-28 revision has no legacy SSE transport)")
    if spec.url is not None and spec.command is not None:
        problems.append(f"{where}: url and command cannot both be set: command starts a "
                        "child over stdio, url reaches a remote server")
        return problems
    if spec.url is None and spec.command is None:
        problems.append(f"{where}: needs either command (a child over stdio) or url "
                        "(a remote server)")
        return problems
    if spec.url is not None:
        wrong = [k for k in _STDIO_KEYS if k in raw]
        problems += [f"{where}: {k} is only for command servers (this one has a url)"
                     for k in wrong]
        return problems + _check_remote(spec, where, environ)
    wrong = [k for k in _REMOTE_KEYS if k in raw]
    problems += [f"{where}: {k} is only for url servers (this one has a command)"
                 for k in wrong]
    return problems + _check_stdio(spec, where, environ)


def _check_remote(spec: ServerSpec, where: str, environ: Mapping[str, str]) -> list[str]:
    problems: list[str] = []
    assert spec.url is not None
    if spec.transport not in TRANSPORTS:
        problems.append(f"{where}: transport {spec.transport!r} is not one of "
                        f"{', '.join(map(repr, TRANSPORTS))}")
    for key in spec.headers:
        if not _TOKEN.fullmatch(key):
            problems.append(f"{where}: headers: {key!r} is not a valid header name "
                            "(letters, digits and !#$%&'*+-.^_`|~ only)")
        elif key.lower() in _TRANSPORT_HEADERS:
            problems.append(f"{where}: headers: {key!r} is set by the MCP transport itself")
    missing: set[str] = set()
    used: list[str] = []
    url = expand(spec.url, environ, missing, used)
    headers = {k: expand(v, environ, missing) for k, v in spec.headers.items()}
    for name in sorted(missing):
        problems.append(f"{where}: ${{{name}}} is used but not set in gantry's environment")
    for key, value in headers.items():
        if any(c in value for c in "\r\n\0"):
            problems.append(f"{where}: headers: the value of {key!r} contains a line break "
                            "or NUL")
    hidden = msgspec.structs.replace(spec, expanded=tuple(used))
    problems += [f"{where}: url: {hidden.hide(p)}" for p in url_problems(url, spec.allow_http)]
    return problems + _check_oauth(spec, where, environ)


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_problems(url: str, allow_http: bool) -> list[str]:
    """Why `url` cannot be a remote server's address ([] if it can). Plain http to a host
    that is not this machine sends the headers (tokens) in the clear: refused unless the
    manifest says `allow_http = true`. The URL itself is never quoted (it may carry a key)."""
    if not url.strip():
        return ["is empty"]
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port
    except ValueError as exc:
        return [f"cannot be parsed ({exc})"]
    if parts.scheme not in ("http", "https"):
        scheme = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
        return [f"{scheme}; it must start with https:// (or http://)"]
    if not host:
        return ["has no host"]
    if parts.scheme == "http" and not allow_http and not _is_loopback(host):
        return [f"plain http:// to {host!r}, which is not this machine, sends the headers "
                "unencrypted; use https://, or set allow_http = true"]
    return []


def _check_stdio(spec: ServerSpec, where: str, environ: Mapping[str, str]) -> list[str]:
    problems: list[str] = []
    assert spec.command is not None
    for key in spec.env:
        if not _ENV_KEY.fullmatch(key):
            problems.append(f"{where}: env key {key!r} is not a valid variable name")
    missing: set[str] = set()
    command = expand(spec.command, environ, missing)
    for value in [*spec.args, *spec.env.values(), spec.cwd or ""]:
        expand(value, environ, missing)
    for name in sorted(missing):
        problems.append(f"{where}: ${{{name}}} is used but not set in gantry's environment")
    if not command.strip():
        problems.append(f"{where}: command is empty")
    elif not missing and _resolve_command(command, environ.get("PATH")) is None:
        problems.append(  # the command as written: what a ${VAR} put there is a secret
            f"{where}: command {spec.command!r} is neither an executable path nor found on PATH"
        )
    if spec.cwd is not None and not missing and not os.path.isdir(expand(spec.cwd, environ, set())):
        problems.append(f"{where}: cwd {spec.cwd!r} is not a directory")
    return problems


_SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # RFC 6749 §3.3 scope-token


def _check_oauth(spec: ServerSpec, where: str, environ: Mapping[str, str]) -> list[str]:
    """The OAuth keys: `auth = "oauth"` only, and the others only with it."""
    problems: list[str] = []
    if spec.auth is not None and spec.auth != "oauth":
        problems.append(f"{where}: auth must be \"oauth\" (the only kind there is), "
                        f"not {spec.auth!r}")
    extras = [k for k in _OAUTH_KEYS[1:] if getattr(spec, k) is not None]
    if spec.auth is None and extras:
        problems += [f"{where}: {k} is used only with auth = \"oauth\"" for k in extras]
    if spec.auth is not None:
        problems += [f"{where}: headers: {k!r} is what auth = \"oauth\" sets; remove one"
                     for k in spec.headers if k.lower() == "authorization"]
    if spec.client_id is not None and not spec.client_id.strip():
        problems.append(f"{where}: client_id is empty")
    if spec.client_secret is not None and spec.client_id is None:
        problems.append(f"{where}: client_secret needs client_id (a client registered in "
                        "advance); without both gantry registers itself")
    missing: set[str] = set()
    expand(spec.client_secret or "", environ, missing)
    problems += [f"{where}: client_secret: ${{{name}}} is used but not set in gantry's "
                 "environment" for name in sorted(missing)]
    for scope in spec.scopes or []:
        if not _SCOPE.fullmatch(scope):
            problems.append(f"{where}: scopes: {scope!r} is not one scope (no spaces, quotes "
                            "or backslashes; list each scope apart)")
    if spec.redirect_uri is not None:
        try:
            parts = urlsplit(spec.redirect_uri)
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            problems.append(f"{where}: redirect_uri {spec.redirect_uri!r} must be an absolute "
                            "http(s) URL (the one registered for client_id)")
        elif parts.fragment:
            problems.append(f"{where}: redirect_uri must not have a #fragment")
    if spec.oauth_client_metadata_url is not None:
        from gantry.mcp.cimd import url_problem

        why = url_problem(spec.oauth_client_metadata_url)
        if why is not None:
            problems.append(f"{where}: oauth_client_metadata_url: {why}")
        if spec.client_id is not None:
            problems.append(f"{where}: oauth_client_metadata_url and client_id are two ways "
                            "to name gantry to the authorization server; keep one")
    return problems


def _expanded(spec: ServerSpec, environ: Mapping[str, str]) -> ServerSpec:
    unused: set[str] = set()
    used: list[str] = []

    def x(value: str) -> str:
        return expand(value, environ, unused, used)

    if spec.url is not None:
        out = msgspec.structs.replace(
            spec, url=x(spec.url), headers={k: x(v) for k, v in spec.headers.items()},
            client_secret=x(spec.client_secret) if spec.client_secret is not None else None)
    else:
        assert spec.command is not None
        command = x(spec.command)
        out = msgspec.structs.replace(
            spec,
            command=_resolve_command(command, environ.get("PATH")) or command,
            args=[x(a) for a in spec.args],
            env={k: x(v) for k, v in spec.env.items()},
            cwd=x(spec.cwd) if spec.cwd is not None else None,
        )
    return msgspec.structs.replace(out, expanded=tuple(dict.fromkeys(used)))


def load(path: str, environ: Mapping[str, str]) -> list[ServerSpec]:
    """The manifest's servers. A missing file at the default path means none (logged once);
    a missing file anywhere the operator pointed MCP_MANIFEST is an error."""
    import logging

    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        if path == DEFAULT_PATH:
            logging.getLogger("gantry.mcp").info(
                "no MCP manifest; running without MCP servers", extra={"path": path}
            )
            return []
        raise ManifestError(path, ["file not found (MCP_MANIFEST points here)"]) from None
    except OSError as exc:
        raise ManifestError(path, [f"cannot be read: {exc.strerror or exc}"]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ManifestError(path, ["is not UTF-8 text"]) from None
    specs = parse(text, environ, path)
    from gantry.log import share_secrets

    share_secrets(*secrets(specs))
    return specs
