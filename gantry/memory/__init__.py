"""Long-term memory (spec §7): the builtin SQLite store or an MCP server, behind one interface.

`gantry.memory.wiring.build` is the single entry `gantry run` calls; this module only holds
the interface, so importing it costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gantry.memory.store import Row


class Memory(Protocol):
    """What the tools, hydration and `/status` need; builtin and MCP backends both provide it."""

    name: str

    async def store(self, kind: str, subject: str, content: str) -> tuple[Row, bool]: ...

    async def recall(self, query: str, limit: int = ...) -> list[Row]: ...

    async def forget(self, row_id: str | None, query: str | None) -> tuple[list[Row], int]: ...

    async def hydrate(self, text: str, limit: int = ...) -> list[Row]: ...

    async def counts(self) -> dict[str, int]: ...
