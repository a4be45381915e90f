"""The MCP manifest (`MCP_MANIFEST`): `[[server]]` tables → validated `ServerSpec`s.

Every problem is collected and reported at once, each naming the server and the key, so one
boot attempt tells the operator everything that is wrong. Nothing here imports `mcp`.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from typing import Any

import msgspec

DEFAULT_PATH = "/etc/gantry/mcp.toml"
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_VAR = re.compile(r"\$\{([^}]*)\}")
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEFAULT_TIMEOUT = 60.0
MAX_TIMEOUT = 3600.0


class ServerSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One `[[server]]` table as written (after `${VAR}` expansion)."""

    name: str
    command: str
    args: list[str] = msgspec.field(default_factory=list)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    cwd: str | None = None
    timeout_seconds: float = DEFAULT_TIMEOUT
    # OAuth for a remote server (gantry/mcp/oauth.py, docs/mcp.md "OAuth").
    auth: str | None = None
    client_id: str | None = None
    client_secret: str | None = None
    scopes: list[str] | None = None
    redirect_uri: str | None = None

    def __repr__(self) -> str:
        """Like the default, with the secret-bearing values (env, client_secret) hidden."""
        shown = {f: getattr(self, f) for f in self.__struct_fields__}
        shown["env"] = {k: "[REDACTED]" for k in self.env}
        if self.client_secret is not None:
            shown["client_secret"] = "[REDACTED]"
        return f"ServerSpec({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


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


def expand(value: str, environ: Mapping[str, str], missing: set[str]) -> str:
    """Replace each `${VAR}` with gantry's environment value; unset names go to `missing`.

    Explicit on purpose: nothing reaches a child unless the manifest names it.
    """

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in environ:
            missing.add(name)
            return ""
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
        field = msg.split("`")[1] if "`" in msg else "?"
        return f"{where}: unknown key {field!r} (allowed: {', '.join(ALLOWED)})"
    if msg.startswith("Object missing required field"):
        field = msg.split("`")[1] if "`" in msg else "?"
        return f"{where}: missing required key {field!r}"
    return f"{where}: {key or 'value'}: {msg}"


ALLOWED = ("name", "command", "args", "env", "cwd", "timeout_seconds",
           "auth", "client_id", "client_secret", "scopes", "redirect_uri")


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
        try:
            spec = msgspec.convert(raw, ServerSpec)
        except msgspec.ValidationError as exc:
            problems.append(_decode_error(where, exc))
            # Keep checking what can be checked on its own, so problems come all at once.
            name = raw.get("name")
            if isinstance(name, str) and name and not NAME_RE.fullmatch(name):
                problems.append(f"{where}: name must match [A-Za-z0-9][A-Za-z0-9_-]*")
            continue
        problems.extend(_check(spec, where, environ))
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


def _check(spec: ServerSpec, where: str, environ: Mapping[str, str]) -> list[str]:
    problems: list[str] = []
    if not NAME_RE.fullmatch(spec.name):
        problems.append(f"{where}: name must match [A-Za-z0-9][A-Za-z0-9_-]*")
    if not 0 < spec.timeout_seconds <= MAX_TIMEOUT:
        problems.append(f"{where}: timeout_seconds must be between 0 and {MAX_TIMEOUT:g}")
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
        problems.append(
            f"{where}: command {command!r} is neither an executable path nor found on PATH"
        )
    if spec.cwd is not None and not missing and not os.path.isdir(expand(spec.cwd, environ, set())):
        problems.append(f"{where}: cwd {spec.cwd!r} is not a directory")
    problems.extend(_check_oauth(spec, where, environ))
    return problems


_SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # RFC 6749 §3.3 scope-token


def _check_oauth(spec: ServerSpec, where: str, environ: Mapping[str, str]) -> list[str]:
    """The OAuth keys: `auth = "oauth"` only, and the others only with it."""
    problems: list[str] = []
    if spec.auth is not None and spec.auth != "oauth":
        problems.append(f"{where}: auth must be \"oauth\" (the only kind there is), "
                        f"not {spec.auth!r}")
    extras = [k for k in ("client_id", "client_secret", "scopes", "redirect_uri")
              if getattr(spec, k) is not None]
    if spec.auth is None and extras:
        problems += [f"{where}: {k} is used only with auth = \"oauth\"" for k in extras]
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
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(spec.redirect_uri)
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            problems.append(f"{where}: redirect_uri {spec.redirect_uri!r} must be an absolute "
                            "http(s) URL (the one registered for client_id)")
        elif parts.fragment:
            problems.append(f"{where}: redirect_uri must not have a #fragment")
    return problems


def _expanded(spec: ServerSpec, environ: Mapping[str, str]) -> ServerSpec:
    unused: set[str] = set()

    def x(value: str) -> str:
        return expand(value, environ, unused)

    command = x(spec.command)
    return msgspec.structs.replace(
        spec,
        command=_resolve_command(command, environ.get("PATH")) or command,
        args=[x(a) for a in spec.args],
        env={k: x(v) for k, v in spec.env.items()},
        cwd=x(spec.cwd) if spec.cwd is not None else None,
        client_secret=x(spec.client_secret) if spec.client_secret is not None else None,
    )


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
    return parse(text, environ, path)
