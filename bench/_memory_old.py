"""The recall ranking before issue 30, kept for bench/memory.py's side-by-side figures only.

The schema of migrations 0001-0007 (memory_fts without the Porter stemmer) and its query:
every word's newest PER_TERM matches, IDF summed, divided by 1 + age_days / 30.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw

from gantry import db
from gantry.memory.ranking import idf, quoted
from gantry.memory.store import (
    COLUMNS,
    HYDRATE_HITS,
    HYDRATE_MAX,
    PER_TERM,
    RECALL_MAX,
    MemoryStore,
    Row,
    _row,
    estimate_df,
    parse_time,
    terms,
)

OLD_SCHEMA = 7
RECENCY_DAYS = 30.0


def connect(path: Path) -> apsw.Connection:
    """A database at schema 0007, opened the way gantry.db.connect opens one."""
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    with conn:
        for version, _name, sql in db.migrations()[:OLD_SCHEMA]:
            conn.execute(sql)
            conn.execute(f"PRAGMA user_version = {version}")
        # Today's MemoryStore writes a `grams` column (migration 0012); the old triggers
        # never index it, so the old ranking reads exactly what it did.
        conn.execute("ALTER TABLE memory ADD COLUMN grams TEXT")
    return conn


def search(store: MemoryStore, query: str, limit: int = RECALL_MAX) -> list[Row]:
    """The old `MemoryStore.search` (mode "or", active rows)."""
    words = terms(query)
    if not words or limit <= 0:
        return []
    conn = store.conn
    top = int(conn.execute("SELECT coalesce(max(id), 0) FROM memory").fetchone()[0])
    scores: dict[int, float] = {}
    for word in words:
        found = [int(r[0]) for r in conn.execute(
            "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? ORDER BY rowid DESC LIMIT ?",
            (quoted(word), PER_TERM))]
        weight = idf(estimate_df(found, top, PER_TERM), max(top, 1))
        for rid in found:
            scores[rid] = scores.get(rid, 0.0) + weight
    best = sorted(scores, key=lambda r: (scores[r], r), reverse=True)[: max(20, limit * 2)]
    if not best:
        return []
    rows = [_row(v) for v in conn.execute(
        f"SELECT {COLUMNS} FROM memory WHERE id IN ({','.join('?' * len(best))}) "
        "AND superseded_by IS NULL AND (expires_at IS NULL OR expires_at > ?)",
        [*best, store.now()])]
    now = store.clock()

    def score(row: Row) -> tuple[float, int]:
        try:
            age = max(0.0, now - parse_time(row.updated_at).timestamp()) / 86_400
        except ValueError:
            age = 0.0
        return scores[int(row.id)] / (1.0 + age / RECENCY_DAYS), int(row.id)

    return sorted(rows, key=score, reverse=True)[:limit]


def hydrate(store: MemoryStore, text: str, limit: int = HYDRATE_MAX) -> list[Any]:
    """The old hydration: the old recall's hits, then durable rows."""
    out: dict[str, Row] = {r.id: r for r in search(store, text, min(HYDRATE_HITS, limit))}
    for row in store.durable(limit):
        if len(out) >= limit:
            break
        out.setdefault(row.id, row)
    return list(out.values())
