"""Consolidation, the "sleep cycle" (spec §7.3): episodes + summaries → durable rows.

A bounded batch per pass; the model answers JSON decoded with msgspec. Duplicates are linked
via superseded_by (never deleted), contradictions with the persona are flagged for the human,
invalid output is retried and then the batch is quarantined. One pass at a time; it runs in
its own task, so a reply never waits for it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec

from gantry.memory.store import (
    MemoryInputError,
    MemoryStore,
    Row,
    clean,
    render_hits,
    validate,
)
from gantry.model.budget import BudgetReached
from gantry.model.ledger import Tab, attributed
from gantry.model.messages import SystemMessage, UserMessage

log = logging.getLogger("gantry.memory.consolidate")

BATCH = 20
SUMMARIES = 5
EXISTING = 60
TRIES = 3
PERSONA_CHARS = 8_000
OUTPUT_KEEP = 4_000
DURABLE_KINDS = ("fact", "preference", "person", "insight")
STATE_SUMMARIES = "summaries_through"

INSTRUCTIONS = """You consolidate an assistant's long-term memory. You get the persona \
(authoritative), the existing memories with ids, new episode notes with ids and recent \
conversation summaries.
Reply with ONE JSON object and nothing else:
{"memories": [{"kind": "fact|preference|person|insight", "subject": "short name", \
"content": "one atomic statement", "confidence": 0.0-1.0, "supersedes": [ids]}],
 "contradictions": [{"statement": "what memory suggests", "persona_says": "what the persona says", \
"source_ids": [ids]}]}
Rules: extract only durable facts, preferences and people; add an insight for a pattern seen \
across several notes. When a new row restates or updates existing memories, list their ids in \
"supersedes". Never store anything that contradicts the persona: report it under \
"contradictions" instead. Subjects contain no ':'. Empty lists are fine."""


class Durable(msgspec.Struct, kw_only=True):
    kind: str
    subject: str = ""
    content: str
    confidence: float = 1.0
    supersedes: list[int] = []


class Contradiction(msgspec.Struct, kw_only=True):
    statement: str
    persona_says: str
    source_ids: list[int] = []


class Plan(msgspec.Struct, kw_only=True):
    memories: list[Durable] = []
    contradictions: list[Contradiction] = []


class InvalidOutput(ValueError):
    """The model's answer is not a usable plan; the text says why (logged, then retried)."""


def parse_plan(text: str) -> Plan:
    """Decode and check the model's JSON (a ```json fence or prose around it is tolerated)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise InvalidOutput("no JSON object in the reply")
    try:
        plan = msgspec.json.decode(text[start : end + 1], type=Plan)
    except msgspec.DecodeError as exc:
        raise InvalidOutput(f"not a valid plan: {exc}") from None
    checked = []
    for item in plan.memories:
        if item.kind not in DURABLE_KINDS:
            raise InvalidOutput(f"kind {item.kind[:30]!r} is not one of {', '.join(DURABLE_KINDS)}")
        try:
            kind, subject, content = validate(item.kind, item.subject, item.content)
        except MemoryInputError as exc:
            raise InvalidOutput(str(exc)) from None
        checked.append(
            Durable(kind=kind, subject=subject, content=content,
                    confidence=max(0.0, min(1.0, item.confidence)), supersedes=item.supersedes)
        )
    for c in plan.contradictions:
        if not clean(c.statement):
            raise InvalidOutput("a contradiction has an empty statement")
    return Plan(memories=checked, contradictions=plan.contradictions)


def build_prompt(
    persona: str, existing: Sequence[Row], episodes: Sequence[Row], summaries: Sequence[str]
) -> str:
    """The user message of a pass (pure, so it can be inspected in tests)."""
    persona = persona.strip()[:PERSONA_CHARS] or "(no persona files)"
    parts = [
        f"Persona (authoritative):\n{persona}",
        f"Existing memories:\n{render_hits(existing) or '(none)'}",
        f"New episode notes:\n{render_hits(episodes) or '(none)'}",
        "Recent conversation summaries:\n"
        + ("\n".join(f"- {s}" for s in summaries) if summaries else "(none)"),
    ]
    return "\n\n".join(parts)


@dataclass(frozen=True)
class Outcome:
    """What one pass did (for logs and tests)."""

    status: str  # idle | done | quarantined | deferred | skipped (a budget reached)
    created: tuple[int, ...] = ()
    linked: tuple[int, ...] = ()
    flagged: tuple[int, ...] = ()


class Consolidator:
    """The periodic pass; `run_once` never overlaps itself."""

    def __init__(
        self,
        store: MemoryStore,
        model: Any,
        persona: Callable[[], str],
        batch: int = BATCH,
        tries: int = TRIES,
    ) -> None:
        self.store, self.model, self.persona = store, model, persona
        self.batch, self.tries = batch, tries
        self._lock = anyio.Lock()
        self._tab = Tab(store.conn)

    async def every(self, seconds: float) -> None:
        """Run a pass every `seconds` for ever; a failing pass is logged and contained."""
        while True:
            await anyio.sleep(seconds)
            try:
                await self.run_once()
            except Exception:
                log.exception("consolidation pass failed; will try again next interval")

    async def run_once(self) -> Outcome:
        if self._lock.locked():
            return Outcome("busy")
        async with self._lock:
            # The pass's model calls are counted as consolidation; each is closed in the
            # transaction that stores what came of it (or, when nothing does, after).
            self._tab = Tab(self.store.conn)
            try:
                with attributed("consolidation"):
                    return await self._pass()
            finally:
                self._tab.close()

    # ------------------------------------------------------------------ one pass

    def _pending(self) -> list[Row]:
        conn = self.store.conn
        ids = [
            int(v[0])
            for v in conn.execute(
                "SELECT id FROM memory WHERE kind = 'episode' AND consolidation IS NULL "
                "AND superseded_by IS NULL ORDER BY id LIMIT ?",
                (self.batch,),
            )
        ]
        return [r for r in (self.store.get(i) for i in ids) if r is not None]

    def _summaries(self) -> tuple[list[str], float | None]:
        conn = self.store.conn
        mark = conn.execute(
            "SELECT value FROM memory_state WHERE key = ?", (STATE_SUMMARIES,)
        ).fetchone()
        since = float(mark[0]) if mark else 0.0
        rows = list(
            conn.execute(
                "SELECT summary, updated_at FROM session_summary WHERE updated_at > ? "
                "ORDER BY updated_at LIMIT ?",
                (since, SUMMARIES),
            )
        )
        return [str(r[0]) for r in rows], (float(rows[-1][1]) if rows else None)

    async def _pass(self) -> Outcome:
        from gantry.model.errors import ProviderError

        episodes = self._pending()
        summaries, through = self._summaries()
        if not episodes and not summaries:
            return Outcome("idle")
        existing = self.store.durable(EXISTING)
        prompt = build_prompt(self.persona(), existing, episodes, summaries)
        allowed = {int(r.id) for r in existing} | {int(r.id) for r in episodes}
        episode_ids = [int(r.id) for r in episodes]
        output, error = "", ""
        for attempt in range(1, self.tries + 1):
            try:
                done = await self.model.complete(
                    [SystemMessage(INSTRUCTIONS), UserMessage(prompt)], None
                )
            except ProviderError as exc:
                return self._deferred(episode_ids, str(exc), through)
            except BudgetReached as exc:  # nothing marked: the episodes wait for the next pass
                log.warning("consolidation skipped: budget reached", extra={"error": exc.reason})
                return Outcome("skipped")
            self._tab.add(done.charge)
            output = done.text
            try:
                plan = parse_plan(output)
            except InvalidOutput as exc:
                error = str(exc)
                log.warning(
                    "consolidation output invalid",
                    extra={"attempt": attempt, "of": self.tries, "error": error[:300]},
                )
                continue
            return self._apply(plan, allowed, episode_ids, through)
        return self._quarantine(episode_ids, error, output, through)

    def _advance(self, through: float | None) -> None:
        if through is not None:
            self.store.conn.execute(
                "INSERT INTO memory_state (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (STATE_SUMMARIES, repr(through)),
            )

    def _mark(self, episode_ids: Sequence[int], state: str) -> None:
        for eid in episode_ids:
            self.store.conn.execute(
                "UPDATE memory SET consolidation = ? WHERE id = ?", (state, eid)
            )

    def _apply(
        self, plan: Plan, allowed: set[int], episode_ids: list[int], through: float | None
    ) -> Outcome:
        created: list[int] = []
        linked: list[int] = []
        flagged: list[int] = []
        with self.store.conn:
            for item in plan.memories:
                row, new = self.store.add(
                    item.kind, item.subject, item.content, source="consolidation",
                    confidence=item.confidence,
                )
                if new:
                    created.append(int(row.id))
                targets = [i for i in item.supersedes if i in allowed and i not in episode_ids]
                linked += self.store.supersede(targets, int(row.id))
            for c in plan.contradictions:
                sources = [i for i in c.source_ids if i in allowed]
                flagged.append(self.store.flag(c.statement, c.persona_says, sources))
                log.warning(
                    "memory contradicts the persona; flagged for the human "
                    "(see `gantry memory flagged`)",
                    extra={"flag": flagged[-1], "statement": clean(c.statement)[:200]},
                )
            self._mark(episode_ids, "done")
            self._advance(through)
            self._tab.settle()
        log.info(
            "consolidation pass done",
            extra={"episodes": len(episode_ids), "rows_created": len(created),
                   "linked": len(linked), "flagged": len(flagged)},
        )
        return Outcome("done", tuple(created), tuple(linked), tuple(flagged))

    def _quarantine(
        self, episode_ids: list[int], error: str, output: str, through: float | None
    ) -> Outcome:
        with self.store.conn:
            self.store.conn.execute(
                "INSERT INTO memory_quarantine (memory_ids, error, output, created_at) "
                "VALUES (?, ?, ?, ?)",
                (json.dumps(episode_ids), error[:1000], output[:OUTPUT_KEEP], self.store.now()),
            )
            self._mark(episode_ids, "quarantined")
            self._advance(through)
            self._tab.settle()
        log.error(
            "consolidation batch quarantined after invalid output",
            extra={"episodes": episode_ids, "tries": self.tries, "error": error[:300]},
        )
        return Outcome("quarantined")

    def _deferred(self, episode_ids: list[int], error: str, through: float | None) -> Outcome:
        """The model call failed: count it against the batch; quarantine at the limit."""
        with self.store.conn:
            for eid in episode_ids:
                self.store.conn.execute(
                    "UPDATE memory SET attempts = attempts + 1 WHERE id = ?", (eid,)
                )
            spent = [
                int(v[0])
                for v in self.store.conn.execute(
                    f"SELECT id FROM memory WHERE attempts >= ? AND id IN "
                    f"({','.join('?' * len(episode_ids)) or 'NULL'})",
                    (self.tries, *episode_ids),
                )
            ]
        log.warning("consolidation deferred: model call failed", extra={"error": error[:300]})
        if spent:
            return self._quarantine(spent, f"model call failed: {error}", "", through)
        return Outcome("deferred")
