"""text/event-stream framing: server-sent events cut from arbitrary byte chunks (pure)."""

from __future__ import annotations

import msgspec

__all__ = ["SSEEvent", "SSEParser"]


class SSEEvent(msgspec.Struct, frozen=True):
    """One dispatched server-sent event (multi-line `data:` joined with newlines)."""

    data: str
    event: str = "message"
    id: str | None = None


_BOM = "\ufeff"


class SSEParser:
    """Incremental text/event-stream parser (WHATWG rules), fed arbitrary byte chunks.

    Lines may end in LF, CR or CRLF, and a chunk boundary may fall anywhere — inside a
    line, inside a CRLF, inside a UTF-8 sequence. `close()` flushes an event that the
    server did not terminate with a blank line (lenient: the spec would drop it).
    """

    def __init__(self) -> None:
        self._buf = b""
        self._skip_lf = False
        self._first_line = True
        self._data: list[str] = []
        self._event = ""
        self._last_id: str | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume bytes; return the events completed by them."""
        if not chunk:
            return []
        if self._skip_lf and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._skip_lf = False
        lines = (self._buf + chunk).splitlines(keepends=True)
        if lines and not lines[-1].endswith((b"\n", b"\r")):
            self._buf = lines.pop()
        else:
            self._buf = b""
        # Only a CR at the very end of the data may be the first half of a CRLF split across
        # chunks; a CR-terminated line followed by more text in this chunk was a bare CR.
        self._skip_lf = not self._buf and bool(lines) and lines[-1].endswith(b"\r")
        events: list[SSEEvent] = []
        for raw in lines:
            self._line(raw.rstrip(b"\r\n"), events)
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: process any unterminated line and pending event."""
        events: list[SSEEvent] = []
        if self._buf:
            self._line(self._buf, events)
            self._buf = b""
        self._dispatch(events)
        return events

    def _line(self, raw: bytes, events: list[SSEEvent]) -> None:
        line = raw.decode("utf-8", errors="replace")
        if self._first_line:
            self._first_line = False
            line = line.removeprefix(_BOM)
        if not line:
            self._dispatch(events)
            return
        if line.startswith(":"):
            return  # comment / keep-alive
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._last_id = value

    def _dispatch(self, events: list[SSEEvent]) -> None:
        if self._data:
            events.append(
                SSEEvent(
                    data="\n".join(self._data), event=self._event or "message", id=self._last_id
                )
            )
        self._data = []
        self._event = ""
