"""The three built-in memory tools the model gets (spec §7.2), over any `Memory` backend.

Auto-save is off: the model stores deliberately, one atomic statement per call. All three are
`private`: a group turn is neither offered them nor allowed to run them.
"""

from __future__ import annotations

from typing import Any

from gantry.memory import Memory
from gantry.memory.store import (
    CONTENT_MAX,
    FORGET_MAX,
    KINDS,
    RECALL_MAX,
    SUBJECT_MAX,
    MemoryInputError,
    render_hits,
    stored_reply,
)
from gantry.tools import Source, Tool, ToolError

SOURCE = Source("memory")

STORE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kind": {"type": "string", "enum": list(KINDS),
                 "description": "fact | preference | person | episode (decays) | insight"},
        "subject": {"type": "string", "maxLength": SUBJECT_MAX,
                    "description": "who or what it is about, e.g. 'mom', 'climbing'"},
        "content": {"type": "string", "maxLength": CONTENT_MAX,
                    "description": "one atomic statement"},
    },
    "required": ["kind", "subject", "content"],
}
RECALL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "words to look for"}},
    "required": ["query"],
}
FORGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": ["integer", "string"], "description": "a memory id from memory_recall"},
        "query": {"type": "string",
                  "description": f"delete up to {FORGET_MAX} memories containing all these words"},
    },
}


def _text(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str):
        raise ToolError(f"'{key}' must be a string")
    return value


def memory_tools(memory: Memory) -> list[Tool]:
    """memory_store / memory_recall / memory_forget bound to `memory`."""

    async def store(args: dict[str, Any]) -> str:
        try:
            row, new = await memory.store(
                _text(args, "kind"), _text(args, "subject"), _text(args, "content")
            )
        except MemoryInputError as exc:
            raise ToolError(str(exc)) from None
        return stored_reply(row, new)

    async def recall(args: dict[str, Any]) -> str:
        query = _text(args, "query")
        try:
            rows = await memory.recall(query, RECALL_MAX)
        except MemoryInputError as exc:  # an MCP backend that is down or answered an error
            raise ToolError(str(exc)) from None
        if not rows:
            return f"no memories match {query[:80]!r}"
        return render_hits(rows)

    async def forget(args: dict[str, Any]) -> str:
        row_id, query = args.get("id"), args.get("query")
        if row_id is None and not (isinstance(query, str) and query.strip()):
            raise ToolError("give 'id' (from memory_recall) or a non-empty 'query'")
        if row_id is not None and not isinstance(row_id, int | str):
            raise ToolError("'id' must be a number like 12")
        try:
            deleted, more = await memory.forget(
                None if row_id is None else str(row_id), None if row_id is not None else query
            )
        except MemoryInputError as exc:
            raise ToolError(str(exc)) from None
        if not deleted:
            target = f"#{row_id}" if row_id is not None else repr(str(query)[:80])
            return f"nothing deleted: no memory matches {target}"
        out = f"deleted {len(deleted)}:\n{render_hits(deleted)}"
        if more:
            out += f"\n({more} more matched and were kept; forget by id or narrow the query)"
        return out

    return [
        Tool("memory_store", "Remember one atomic statement for later conversations. "
             "Store deliberately; never guess.", STORE_SCHEMA, store, SOURCE, private=True),
        Tool("memory_recall", "Search long-term memory; results show ids and dates.",
             RECALL_SCHEMA, recall, SOURCE, private=True),
        Tool("memory_forget", "Delete memories for good, by id or by words they contain.",
             FORGET_SCHEMA, forget, SOURCE, private=True),
    ]
