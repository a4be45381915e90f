"""The one entry `gantry run` calls: memory tools, the hydration hook, status and tasks.

`runtime.py` stays a composer: it hands over the registry, the model and the persona and gets
back what to plug into the agent and which background tasks to start.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from gantry.config import Config
from gantry.memory import Memory
from gantry.memory.store import HYDRATE_MAX, MemoryInputError, render_block
from gantry.tools import Registry

log = logging.getLogger("gantry.memory")


@dataclass
class MemoryParts:
    """What memory adds to a running gantry (all empty when MEMORY_ENABLED=false)."""

    memory: Memory | None = None
    memory_block: Callable[[str, str], Awaitable[str]] | None = None
    status_lines: list[Callable[[str], str]] = field(default_factory=list)  # session → line
    tasks: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)


def hydrator(memory: Memory, limit: int = HYDRATE_MAX) -> Callable[[str, str], Awaitable[str]]:
    """The agent's memory_block hook: the `[memory]` block for this message. An MCP backend
    that is down costs this turn its block (one warning), not the reply."""

    async def block(session_id: str, text: str) -> str:
        try:
            rows = await memory.hydrate(text, limit)
        except MemoryInputError as exc:
            log.warning("memory hydration skipped: the memory backend failed",
                        extra={"error": str(exc)[:300]})
            return ""
        return render_block(rows)

    return block


PLURALS = {"person": "people"}  # the kinds whose plural is not kind + "s"


def counted(n: int, kind: str) -> str:
    """`1 fact`, `0 facts`, `2 people`: a count of memory rows of one kind, in English."""
    return f"{n} {kind if n == 1 else PLURALS.get(kind, kind + 's')}"


def counts_line(counts: dict[str, int], backend: str) -> str:
    """`/status` row counts: active rows per kind, then inactive and flagged."""
    shown = ", ".join(counted(n, k) for k, n in counts.items() if k not in ("inactive", "flagged"))
    return (
        f"memory ({backend}): {shown}; {counts.get('inactive', 0)} inactive, "
        f"{counts.get('flagged', 0)} flagged"
    )


async def build(
    cfg: Config,
    conn: Any,
    registry: Registry,
    model: Any = None,
    persona: Callable[[], str] | None = None,
    host: Any = None,
) -> MemoryParts:
    """Memory for `gantry run`; raises ValueError with an operator message on a bad backend."""
    if not cfg.memory_enabled:
        log.info("memory disabled (MEMORY_ENABLED=false)")
        return MemoryParts()
    from gantry.memory.store import BuiltinMemory, MemoryStore
    from gantry.memory.tools import SOURCE, memory_tools

    parts = MemoryParts()
    if cfg.memory_backend == "builtin":
        store = MemoryStore(conn)
        purged = store.purge_expired()
        if purged:
            log.info("expired memories purged", extra={"rows": purged})
        memory: Memory = BuiltinMemory(store)
        parts.status_lines.append(lambda _session: counts_line(store.counts(), "builtin"))
        if cfg.memory_consolidate_minutes > 0 and model is not None and persona is not None:
            from gantry.memory.consolidate import Consolidator

            consolidator = Consolidator(store, model, persona)
            parts.tasks.append(lambda: consolidator.every(cfg.memory_consolidate_minutes * 60))
    else:
        from gantry.memory.mcp_backend import connect_backend

        memory = await connect_backend(host, cfg.memory_backend.removeprefix("mcp:"))
        parts.status_lines.append(lambda _session: f"memory: {cfg.memory_backend} ({memory.name})")
    parts.memory = memory
    registry.replace_source(SOURCE, memory_tools(memory))
    parts.memory_block = hydrator(memory)
    log.info("memory ready", extra={"backend": cfg.memory_backend})
    return parts
