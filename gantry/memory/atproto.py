"""aigpt interop: TIDs and its ATProto record layout, export and import (seed 001).

Layout: DIR/{did}/ai.syui.gpt.memory/{tid}.json (one statement per record) and
DIR/{did}/ai.syui.gpt.core/self.json (the persona). A memory's text is the one-line
`(kind) subject: content` form, so kind and subject survive a round trip; a plain line
written by aigpt imports as a fact.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gantry.memory.store import (
    MemoryInputError,
    MemoryStore,
    Row,
    iso,
    micros,
    normalize_time,
    parse_line,
    parse_time,
)

ALPHABET = "234567abcdefghijklmnopqrstuvwxyz"
MEMORY = "ai.syui.gpt.memory"
CORE = "ai.syui.gpt.core"
_DECODE = {c: i for i, c in enumerate(ALPHABET)}
_lock = threading.Lock()
_last = 0


def encode_tid(value: int) -> str:
    """A 64-bit value as 13 base32-sortable characters (the first bit is always 0)."""
    if not 0 <= value < 1 << 63:
        raise ValueError("a TID is a 63-bit value")
    out = []
    for _ in range(13):
        out.append(ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def decode_tid(tid: str) -> int:
    if len(tid) != 13 or any(c not in _DECODE for c in tid):
        raise ValueError(f"{tid[:20]!r} is not a 13-character TID")
    value = 0
    for c in tid:
        value = value << 5 | _DECODE[c]
    if value >> 63:
        raise ValueError(f"{tid!r} is not a TID (top bit set)")
    return value


TID_TIME_MAX = (1 << 53) - 1  # microseconds: the TID's time field ends in year 2255


def tid_time(micros: int) -> int:
    """A time in microseconds as a TID's 53-bit time field: clamped, not wrapped, so a time
    before 1970 or after 2255 still sorts first or last instead of anywhere."""
    return min(max(micros, 0), TID_TIME_MAX)


def tid_for(micros: int, clock_id: int = 0) -> str:
    """The TID for a time in microseconds since the epoch (ATProto: 53 bits time, 10 bits clock)."""
    return encode_tid(tid_time(micros) << 10 | (clock_id & 1023))


def next_tid(micros: int) -> str:
    """A TID for `micros`, strictly greater than every TID this process made before."""
    global _last
    with _lock:
        value = max(tid_time(micros) << 10, _last + 1)
        _last = value
    return encode_tid(value)


def tid_micros(tid: str) -> int:
    return decode_tid(tid) >> 10


def micros_of(time_text: str) -> int:
    """Microseconds since the epoch of a time string (exact, before 1970 too); ValueError
    if it is not a time."""
    return micros(parse_time(time_text))


def memory_record(did: str, tid: str, text: str, created_at: str) -> dict[str, Any]:
    """Exactly aigpt's memory record shape."""
    return {
        "uri": f"at://{did}/{MEMORY}/{tid}",
        "value": {
            "$type": MEMORY,
            "did": did,
            "content": {"$type": f"{MEMORY}#markdown", "text": text},
            "createdAt": created_at,
        },
    }


def core_record(did: str, handle: str, text: str, created_at: str) -> dict[str, Any]:
    """Exactly aigpt's core record shape (rkey `self`)."""
    return {
        "uri": f"at://{did}/{CORE}/self",
        "value": {
            "$type": CORE,
            "did": did,
            "handle": handle,
            "content": {"$type": f"{CORE}#markdown", "text": text},
            "createdAt": created_at,
        },
    }


def row_tid(row: Row) -> int:
    """A row's stable TID value: its creation time, with the row id as the clock id."""
    return tid_time(micros_of(row.created_at)) << 10 | (int(row.id) & 1023)


def records(rows: Sequence[Row], did: str) -> list[tuple[str, dict[str, Any]]]:
    """(tid, record) per row: stable TIDs (the same on every read), unique within the set."""
    out, seen = [], set()
    for r in rows:
        try:
            value = row_tid(r)
        except ValueError:  # a created_at edited by hand into something that is not a time
            raise ValueError(
                f"memory #{r.id}: created_at {r.created_at[:40]!r} is not a time; correct it "
                f"with sqlite3 or delete it (gantry memory forget {r.id})"
            ) from None
        while value in seen:
            value = (value + 1) & ((1 << 63) - 1)  # past the last TID: wrap, never overflow
        seen.add(value)
        tid = encode_tid(value)
        out.append((tid, memory_record(did, tid, r.line(), r.created_at)))
    return out


def record_text(record: Any) -> tuple[str, str | None]:
    """(text, createdAt) of a memory record; tolerant of aigpt versions (missing fields)."""
    if isinstance(record, str):
        return record, None
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    value = record.get("value", record)
    content = value.get("content") if isinstance(value, dict) else None
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        text = content["text"]
    elif isinstance(content, str):
        text = content
    elif isinstance(value, dict) and isinstance(value.get("text"), str):
        text = value["text"]
    else:
        raise ValueError("no value.content.text")
    created = value.get("createdAt") if isinstance(value, dict) else None
    return text, created if isinstance(created, str) else None


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _check_did(did: str) -> str:
    did = did.strip()
    if not did or "/" in did or did in (".", "..") or "\x00" in did:
        raise ValueError(f"--did {did[:60]!r} cannot name a directory; use e.g. did:plc:abc123")
    return did


def export(
    store: MemoryStore, directory: str | os.PathLike[str], did: str, core: str | None,
    handle: str = "handle.invalid",
) -> tuple[int, Path]:
    """Write every active row (and the persona as core, unless `core` is None) in aigpt's
    layout; (count, root)."""
    did = _check_did(did)
    root = Path(directory) / did
    mem_dir, core_dir = root / MEMORY, root / CORE
    mem_dir.mkdir(parents=True, exist_ok=True)
    rows = store.active_all()
    for tid, record in records(rows, did):
        _write_json(mem_dir / f"{tid}.json", record)
    if core is not None:
        core_dir.mkdir(parents=True, exist_ok=True)
        _write_json(core_dir / "self.json", core_record(did, handle, core, iso(store.clock())))
    return len(rows), root


@dataclass
class ImportResult:
    added: int = 0
    duplicates: int = 0
    skipped: list[str] | None = None
    core_chars: int = 0


def import_dir(store: MemoryStore, directory: str | os.PathLike[str], did: str) -> ImportResult:
    """Read DIR/{did}/ai.syui.gpt.memory/*.json into the store (exact duplicates skipped)."""
    did = _check_did(did)
    root = Path(directory) / did
    mem_dir = root / MEMORY
    if not mem_dir.is_dir():
        raise FileNotFoundError(f"{mem_dir} does not exist; check DIR and --did")
    result = ImportResult(skipped=[])
    assert result.skipped is not None
    for path in sorted(mem_dir.glob("*.json")):
        try:
            text, created = record_text(json.loads(path.read_text(encoding="utf-8")))
            if created is None:
                created = iso(tid_micros(path.stem) / 1_000_000)
            created = normalize_time(created)
            kind, subject, content = parse_line(text)
            _row, new = store.add(kind, subject, content, source="import", created_at=created)
        except (OSError, ValueError, MemoryInputError, RecursionError) as exc:
            result.skipped.append(f"{path.name}: {exc}")
            continue
        if new:
            result.added += 1
        else:
            result.duplicates += 1
    core = root / CORE / "self.json"
    if core.is_file():
        try:
            result.core_chars = len(record_text(json.loads(core.read_text("utf-8")))[0])
        except (OSError, ValueError, RecursionError) as exc:
            result.skipped.append(f"{core.name}: {exc}")
    return result
