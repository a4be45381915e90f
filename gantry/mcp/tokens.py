"""OAuth tokens and client registrations of remote MCP servers, in gantry.db (`mcp_oauth`).

One row per manifest server with `auth = "oauth"`. The values are secrets: they are never
logged, never put in a child's environment, and `repr` of anything here leaves them out.
Nothing here imports `mcp`; the SDK's TokenStorage over these rows is gantry/mcp/oauth.py.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

BUSY_TIMEOUT_MS = 5000
LOGIN_HINT = "run `gantry mcp login {name}`"


@dataclass(frozen=True, repr=False)
class Record:
    """A `mcp_oauth` row. JSON columns stay text: only the SDK's models interpret them."""

    server: str
    url: str
    client_info: str | None = None
    tokens: str | None = None
    expires_at: float | None = None
    as_metadata: str | None = None
    resource_metadata: str | None = None
    login_required: str | None = None
    updated_at: float = 0.0

    def __repr__(self) -> str:
        return (f"Record(server={self.server!r}, url={self.url!r}, "
                f"client={'yes' if self.client_info else 'no'}, "
                f"tokens={'yes' if self.tokens else 'no'}, expires_at={self.expires_at!r}, "
                f"login_required={self.login_required!r})")

    @property
    def refreshable(self) -> bool:
        """Whether the stored tokens include a refresh token."""
        return bool(self.tokens and json.loads(self.tokens).get("refresh_token"))


_COLUMNS = tuple(f.name for f in fields(Record))


def problem(record: Record | None, name: str, url: str, now: float) -> str | None:
    """Why the daemon cannot call `name` at `url` with what is stored, or None if it can.

    The sentence ends with what to do, so `/status`, `gantry check` and the chat show it as is.
    """
    hint = LOGIN_HINT.format(name=name)
    if record is None or not record.tokens:
        return f"not logged in; {hint}"
    if record.url != url:
        return f"the login was for another URL ({record.url}); {hint}"
    if record.login_required:
        return f"{record.login_required}; {hint}"
    if record.expires_at is not None and record.expires_at <= now and not record.refreshable:
        return f"the access token expired and there is no refresh token; {hint}"
    return None


class TokenStore:
    """The `mcp_oauth` rows of one database file.

    Each operation opens its own short connection: the daemon, `gantry mcp login` and
    `gantry check` are different processes, and writes are rare (a login, a refresh).
    `read_only` (gantry check): reads only, and any write is refused with an error.
    """

    def __init__(self, db_path: str | os.PathLike[str], *, read_only: bool = False,
                 clock: Callable[[], float] = time.time) -> None:
        self.db_path = os.fspath(db_path)
        self.read_only = read_only
        self.clock = clock

    def __repr__(self) -> str:
        return f"TokenStore({self.db_path!r}, read_only={self.read_only})"

    def get(self, server: str) -> Record | None:
        sql = f"SELECT {', '.join(_COLUMNS)} FROM mcp_oauth WHERE server = ?"
        if self.read_only:
            from gantry.readonly import ReadError, query

            if not os.path.exists(self.db_path):
                return None
            try:
                row = query(self.db_path, lambda c: c.execute(sql, (server,)).fetchone())
            except ReadError as exc:
                if exc.missing_table:
                    return None
                raise
        else:
            with self._connect() as conn:
                row = conn.execute(sql, (server,)).fetchone()
        return Record(**dict(zip(_COLUMNS, row, strict=True))) if row else None

    def save_login(self, server: str, url: str, *, client_info: str | None, tokens: str,
                   expires_at: float | None, as_metadata: str | None,
                   resource_metadata: str | None) -> None:
        """Everything a finished login learnt, in one transaction; clears `login_required`."""
        self._write(
            "INSERT INTO mcp_oauth (server, url, client_info, tokens, expires_at, as_metadata, "
            "resource_metadata, login_required, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?) "
            "ON CONFLICT (server) DO UPDATE SET url = excluded.url, "
            "client_info = excluded.client_info, tokens = excluded.tokens, "
            "expires_at = excluded.expires_at, as_metadata = excluded.as_metadata, "
            "resource_metadata = excluded.resource_metadata, login_required = NULL, "
            "updated_at = excluded.updated_at",
            (server, url, client_info, tokens, expires_at, as_metadata, resource_metadata,
             self.clock()))

    def save_tokens(self, server: str, url: str, tokens: str, expires_at: float | None) -> bool:
        """New tokens from a refresh; False (nothing written) if the row is gone or is for
        another URL, i.e. a login or logout happened meanwhile."""
        return self._write(
            "UPDATE mcp_oauth SET tokens = ?, expires_at = ?, login_required = NULL, "
            "updated_at = ? WHERE server = ? AND url = ?",
            (tokens, expires_at, self.clock(), server, url)) > 0

    def save_client(self, server: str, url: str, client_info: str) -> bool:
        return self._write(
            "UPDATE mcp_oauth SET client_info = ?, updated_at = ? WHERE server = ? AND url = ?",
            (client_info, self.clock(), server, url)) > 0

    def require_login(self, server: str, url: str, reason: str, *, tokens: str | None) -> bool:
        """The stored tokens stopped working (`reason`); only if they are still `tokens`, so a
        login that finished meanwhile is not undone."""
        return self._write(
            "UPDATE mcp_oauth SET login_required = ?, updated_at = ? "
            "WHERE server = ? AND url = ? AND tokens IS ?",
            (reason, self.clock(), server, url, tokens)) > 0

    def expire_access(self, server: str, url: str, tokens: str | None) -> bool:
        """Mark the access token expired, so the next connection refreshes it first; only if
        the tokens are still `tokens` (tests, and an operator's way to force a refresh)."""
        return self._write(
            "UPDATE mcp_oauth SET expires_at = 0, updated_at = ? "
            "WHERE server = ? AND url = ? AND tokens IS ?",
            (self.clock(), server, url, tokens)) > 0

    def delete(self, server: str) -> bool:
        return self._write("DELETE FROM mcp_oauth WHERE server = ?", (server,)) > 0

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        if self.read_only:
            raise PermissionError("the token store is read-only here (gantry check)")
        with self._connect() as conn, conn:
            conn.execute(sql, params)
            return int(conn.changes())

    def _connect(self) -> Any:
        """A read-write connection to the (existing, migrated) database."""
        import apsw

        conn = apsw.Connection(self.db_path, flags=apsw.SQLITE_OPEN_READWRITE)
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        return _Closing(conn)


class _Closing:
    """`with` on an apsw connection is a transaction; this one closes it afterwards."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def __enter__(self) -> Any:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


def login_check(spec: Any, db_path: str | os.PathLike[str], now: float) -> tuple[bool, str] | None:
    """`gantry check`'s verdict on an OAuth server's stored login before probing it:
    (passed, detail), or None to go on and probe with the stored access token. An expired one
    is not refreshed: check writes nothing, and a refresh token the daemon holds may rotate."""
    record = TokenStore(db_path, read_only=True).get(spec.name)
    why = problem(record, spec.name, spec.url, now)
    if why is not None:
        return False, why
    assert record is not None
    if record.expires_at is not None and record.expires_at <= now + 5:
        return True, ("logged in; the access token has expired and gantry run refreshes it "
                      "(not probed: check stores no tokens)")
    return None
