"""The builtin memory store: typed rows in SQLite, FTS5 recall, TTLs, hydration (spec §7).

Everything here is synchronous and fast (an indexed query is well under a millisecond at
personal scale), so the async backends call it inline. Pure helpers (query escaping, line
formatting) are separate functions so they can be property-tested.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import apsw

from gantry.memory import lexicon, ranking
from gantry.memory.ranking import QUERY_TERMS, Term, Tokens, idf, match_expr, quoted, recency

KINDS = ("fact", "preference", "person", "episode", "insight")
DURABLE = ("fact", "preference", "person")
SUBJECT_MAX = 80
CONTENT_MAX = 500
HYDRATE_MAX = 30
HYDRATE_HITS = 10
RECALL_MAX = 10
FORGET_MAX = 5
CANDIDATES = 200  # rows an all-words (forget) match considers, newest first
PER_TERM = 64  # newest matches read per query word: bounds recall's cost on a common word
RESCORE = 20  # best rows by matched IDF that are re-scored with BM25 from their own tokens
ALT_CACHE = 4096  # query words whose lexicon alternates a store keeps tokenized
SEQUEL_MINUTES = 60  # a row stored this soon after another, same subject: one conversation
TOKENIZER = ("unicode61", "remove_diacritics", "2")  # memory_fts's, under its Porter stemmer
TTL_DAYS = {"episode": 30}  # per kind; kinds not listed never expire (spec §7.1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
FIRST = datetime.min.replace(tzinfo=UTC)  # the stored format's range (4-digit years)
LAST = datetime.max.replace(tzinfo=UTC)
_SPACE = re.compile(r"\s+")
_LINE = re.compile(r"\((fact|preference|person|episode|insight)\) ([^:\n]*): (.*)\Z", re.DOTALL)

COLUMNS = (
    "id, kind, subject, content, source, confidence, created_at, updated_at, expires_at, "
    "superseded_by"
)


class MemoryInputError(ValueError):
    """A store/forget request the caller must fix; `str()` says how (shown to the model)."""


@dataclass(frozen=True)
class Row:
    """One memory row as read back; `id` is a string so every backend can use its own ids."""

    id: str
    kind: str
    subject: str
    content: str
    source: str = "chat"
    confidence: float = 1.0
    created_at: str = ""
    updated_at: str = ""
    expires_at: str | None = None
    superseded_by: int | None = None

    def line(self) -> str:
        return format_line(self.kind, self.subject, self.content)


# ---------------------------------------------------------------------- pure helpers


def fmt(dt: datetime) -> str:
    """A UTC datetime → the stored time format. Fixed width (strftime does not pad years
    before 1000), so the text order SQLite compares is the time order."""
    return (
        f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:"
        f"{dt.second:02d}.{dt.microsecond:06d}Z"
    )


def iso(ts: float) -> str:
    """Unix seconds → the stored time format; total: saturates at years 1 and 9999 (the
    format's range), and NaN is the epoch."""
    if math.isnan(ts):
        ts = 0.0
    try:
        return fmt(datetime.fromtimestamp(ts, UTC))
    except (OverflowError, OSError, ValueError):  # out of range
        return fmt(LAST if ts > 0 else FIRST)


def parse_time(text: str) -> datetime:
    """Any RFC 3339 / ISO 8601 time (with 'Z' or an offset; none = UTC) → aware UTC datetime.

    ValueError if it is not a time or its UTC instant is outside the years 1–9999
    (`9999-12-31T23:30:00-01:00` is year 10000 in UTC): never OverflowError.
    """
    t = text.strip()
    if t.endswith(("Z", "z")):
        t = t[:-1] + "+00:00"
    dt = datetime.fromisoformat(t)
    if dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    try:
        return dt.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{text.strip()[:40]!r} is outside the years 1-9999 in UTC") from None


def normalize_time(text: str) -> str:
    """Canonical stored form of a time string; raises ValueError if it is not a time."""
    return fmt(parse_time(text))


def add_days(dt: datetime, days: float) -> datetime:
    """`dt` + `days`, saturating at years 1 and 9999 however large the TTL."""
    try:
        return dt + timedelta(days=days)
    except OverflowError:
        return LAST if days > 0 else FIRST


def micros(dt: datetime) -> int:
    """Microseconds since the Unix epoch, exact for any aware datetime (before 1970 too)."""
    return (dt - EPOCH) // timedelta(microseconds=1)


def clean(text: str) -> str:
    """One line of text: whitespace runs collapsed, NULs dropped, ends stripped."""
    return _SPACE.sub(" ", text.replace("\x00", "")).strip()


def format_line(kind: str, subject: str, content: str) -> str:
    """`(kind) subject: content` — the one-line form used in prompts and by aigpt servers."""
    return f"({kind}) {subject}: {content}"


def parse_line(text: str, default_kind: str = "fact") -> tuple[str, str, str]:
    """Inverse of format_line; any other text becomes (default_kind, '', text)."""
    m = _LINE.match(text.strip())
    if m:
        return m.group(1), m.group(2), m.group(3)
    return default_kind, "", text.strip()


def terms(text: str, limit: int = QUERY_TERMS) -> list[str]:
    """Distinct lowercase words of `text` (first `limit`)."""
    return ranking.words(text, limit)


def grams_text(subject: str, content: str) -> str:
    """The `grams` column of a row: its CJK letters and letter pairs (ranking.grams)."""
    return " ".join(ranking.grams(f"{subject} {content}"))


def row_text(subject: str, content: str) -> str:
    """A row as memory_fts indexes it: subject, content and their CJK grams."""
    extra = grams_text(subject, content)
    return f"{subject} {content} {extra}" if extra else f"{subject} {content}"


def fts_query(text: str, mode: str = "or", limit: int = QUERY_TERMS) -> str | None:
    """An FTS5 MATCH expression that can never be a syntax error, or None if no words.

    Every word becomes a double-quoted string, so operators (AND/OR/NOT/NEAR), `*`, `-`,
    `:`, `^`, quotes and parentheses in user text are plain characters to FTS5.
    """
    return match_expr(terms(text, limit), "OR" if mode == "or" else "AND")


def validate(kind: str, subject: str, content: str) -> tuple[str, str, str]:
    """Checked and cleaned (kind, subject, content), or MemoryInputError saying what to fix."""
    kind = clean(str(kind)).lower()
    subject, content = clean(str(subject)), clean(str(content))
    if kind not in KINDS:
        raise MemoryInputError(f"kind must be one of {', '.join(KINDS)}, not {kind[:40]!r}")
    if ":" in subject:
        raise MemoryInputError("subject must not contain ':'; use a short name like 'mom'")
    if len(subject) > SUBJECT_MAX:
        raise MemoryInputError(f"subject is {len(subject)} chars; keep it under {SUBJECT_MAX}")
    if not content:
        raise MemoryInputError("content is empty; store one atomic statement")
    if len(content) > CONTENT_MAX:
        raise MemoryInputError(
            f"content is {len(content)} chars (max {CONTENT_MAX}); store one atomic statement "
            "per call, not a paragraph"
        )
    return kind, subject, content


def render_block(rows: Sequence[Row]) -> str:
    """The compact hydration block of spec §7.4 ('' when there is nothing to show)."""
    if not rows:
        return ""
    return "[memory]\n" + "\n".join(f"- {r.line()}" for r in rows)


def render_hits(rows: Sequence[Row]) -> str:
    """Recall / forget output for the model and the CLI: ids and dates shown."""
    return "\n".join(f"#{r.id} {r.line()} ({r.created_at[:10]})" for r in rows)


def stored_reply(row: Row, new: bool) -> str:
    """What storing says, to the model (memory_store) and on the CLI (`gantry memory add`)."""
    return f"{'stored' if new else 'already stored as'} #{row.id}: {row.line()}"


def estimate_df(found: Sequence[int], top: int, per_term: int) -> float:
    """Rows containing a term, from its newest `found` rowids (descending).

    Fewer than `per_term` found means that is all of them; otherwise the density of the
    newest matches over their rowid span is extrapolated to the whole table.
    """
    if len(found) < per_term:
        return float(len(found))
    span = max(1, top - found[-1] + 1)
    return min(float(top), len(found) * top / span)


def family(found: Sequence[int], groups: Sequence[tuple[Any, float]],
           matches: Sequence[Sequence[int]]) -> list[int]:
    """The newest PER_TERM rowids (descending) holding a word or an irregular form of it
    (the FORM_WEIGHT group): a word's document frequency counts its irregular forms, as
    the stemmed index counts its regular ones. 'gone' is as common as 'went' is, so a row
    saying 'went' no longer outweighs one saying 'beach' for 'gone to the beach'."""
    out = set(found)
    for (_, factor), got in zip(groups, matches, strict=True):
        if factor == ranking.FORM_WEIGHT:
            out.update(got)
    return sorted(out, reverse=True)[:PER_TERM]


# ---------------------------------------------------------------------- the store


def _row(values: Sequence[Any]) -> Row:
    return Row(str(values[0]), values[1], values[2], values[3], values[4], float(values[5]),
               values[6], values[7], values[8], values[9])


class MemoryStore:
    """The `memory` table behind a small API; one instance per connection."""

    def __init__(
        self,
        conn: Any,
        ttl_days: Mapping[str, int] | None = None,
        clock: Any = time.time,
    ) -> None:
        self.conn = conn
        # Not memory-mapped: every page a mapping has read stays in the process's RSS, so RSS
        # grew with gantry.db for weeks (+3.2 MiB in a 10,000-turn soak); reads through
        # SQLite's bounded page cache cost recall ~2 % at p50 with 100k rows (docs/packaging.md).
        conn.execute("PRAGMA mmap_size = 0")
        self.ttl_days = dict(TTL_DAYS if ttl_days is None else ttl_days)
        self.clock = clock
        # The index's own tokenizers, so recall's re-scoring sees exactly the words it matched.
        self._stemmer = conn.fts5_tokenizer("porter", list(TOKENIZER))
        self._exact = conn.fts5_tokenizer(TOKENIZER[0], list(TOKENIZER[1:]))
        # word → its lexicon alternates as index stems: a word's stems never change.
        self._alt_cache: dict[str, list[tuple[list[tuple[str, tuple[str, ...]]], float]]] = {}
        self._subject_cache: dict[str, list[str]] = {}
        self.fill_grams()

    def now(self) -> str:
        return iso(self.clock())

    def expiry(self, kind: str, created_at: str) -> str | None:
        """When a row of `kind` created at `created_at` expires (None = never); saturates at
        the end of year 9999 rather than overflowing."""
        days = self.ttl_days.get(kind, 0)
        if not days:
            return None
        return fmt(add_days(parse_time(created_at), days))

    # ------------------------------------------------------------------ writes

    def add(
        self,
        kind: str,
        subject: str,
        content: str,
        source: str = "chat",
        confidence: float = 1.0,
        created_at: str | None = None,
    ) -> tuple[Row, bool]:
        """Store one statement; (row, True) if new, (existing row, False) for an exact duplicate."""
        kind, subject, content = validate(kind, subject, content)
        now = self.now()
        existing = self.find_exact(kind, subject, content, now)
        if existing is not None:
            return existing, False
        created = normalize_time(created_at) if created_at else now
        confidence = max(0.0, min(1.0, confidence))
        expires = self.expiry(kind, created)
        self.conn.execute(
            "INSERT INTO memory (kind, subject, content, source, confidence, created_at, "
            "updated_at, expires_at, grams) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (kind, subject, content, source, confidence, created, created, expires,
             grams_text(subject, content)),
        )
        row_id = str(self.conn.last_insert_rowid())
        return Row(row_id, kind, subject, content, source, confidence, created, created,
                   expires), True

    def fill_grams(self) -> int:
        """Index the CJK grams of rows that have none yet (NULL: rows from before migration
        0012, or added or edited with sqlite3); how many were filled. Rows without CJK get
        '', which changes nothing in the index."""
        todo = [
            (grams_text(subject, content), rid)
            for rid, subject, content in self.conn.execute(
                "SELECT id, subject, content FROM memory WHERE grams IS NULL"
            )
        ]
        if todo:
            with self.conn:
                self.conn.executemany(
                    "UPDATE memory SET grams = ? WHERE id = ? AND grams IS NULL", todo
                )
        return len(todo)

    def find_exact(
        self, kind: str, subject: str, content: str, now: str | None = None
    ) -> Row | None:
        """An active row with exactly this kind, subject (any case) and content."""
        for values in self.conn.execute(
            f"SELECT {COLUMNS} FROM memory WHERE content = ? AND kind = ? "
            "AND superseded_by IS NULL AND (expires_at IS NULL OR expires_at > ?)",
            (content, kind, now or self.now()),
        ):
            if values[2].lower() == subject.lower():
                return _row(values)
        return None

    def supersede(self, old_ids: Iterable[int], new_id: int) -> list[int]:
        """Link older rows to the row that replaces them (never a silent delete)."""
        linked = []
        for old in old_ids:
            if old == new_id:
                continue
            self.conn.execute(
                "UPDATE memory SET superseded_by = ?, updated_at = ? "
                "WHERE id = ? AND superseded_by IS NULL",
                (new_id, self.now(), old),
            )
            if self.conn.changes():
                linked.append(old)
        return linked

    def delete(self, row_id: int) -> list[Row]:
        """Hard-delete a row and the older rows it superseded; return what was deleted."""
        row = self.get(row_id)
        if row is None:
            return []
        doomed = [row]
        frontier = [row_id]
        while frontier and len(doomed) < 1000:
            placeholders = ",".join("?" * len(frontier))
            older = [
                _row(v)
                for v in self.conn.execute(
                    f"SELECT {COLUMNS} FROM memory WHERE superseded_by IN ({placeholders})",
                    frontier,
                )
            ]
            doomed += older
            frontier = [int(r.id) for r in older]
        with self.conn:
            for r in reversed(doomed):
                self.conn.execute("DELETE FROM memory WHERE id = ?", (int(r.id),))
        return doomed

    def forget(self, query: str, cap: int = FORGET_MAX) -> tuple[list[Row], int]:
        """Delete the best `cap` active rows containing every word of `query`.

        Returns (deleted rows, how many more matched and were kept).
        """
        matches = self.search(query, limit=cap + 50, mode="and")
        deleted: list[Row] = []
        for row in matches[:cap]:
            deleted += self.delete(int(row.id))
        return deleted, max(0, len(matches) - cap)

    def purge_expired(self, grace_days: int = 30) -> int:
        """Hard-delete rows that expired more than `grace_days` ago (TTL decay)."""
        cutoff = fmt(add_days(parse_time(self.now()), -grace_days))
        self.conn.execute(
            "DELETE FROM memory WHERE expires_at IS NOT NULL AND expires_at < ?", (cutoff,)
        )
        return int(self.conn.changes())

    # ------------------------------------------------------------------ reads

    def get(self, row_id: int) -> Row | None:
        for values in self.conn.execute(f"SELECT {COLUMNS} FROM memory WHERE id = ?", (row_id,)):
            return _row(values)
        return None

    def search(
        self, query: str, limit: int = RECALL_MAX, mode: str = "or", active: bool = True
    ) -> list[Row]:
        """Rows matching the words of `query`, best first (BM25 × a small recency bonus).

        FTS5's bm25() counts every match of every term to get its IDF, which costs O(matches)
        per query (hundreds of ms at 100k rows for a common word). Here each content word
        reads only its newest PER_TERM matches in the stemmed index (FTS5 walks a doclist in
        rowid order and stops at the LIMIT), and the IDF comes from those: exact for rare
        terms, estimated for common ones. The RESCORE rows with the most matched IDF are then
        scored with BM25 from their own tokens (ranking.relevance), so a row is credited for
        every query word it holds, not only for words whose newest matches it was among.
        A word's irregular forms and related words (lexicon.py) are read the same way, one
        index read per group, and count below the word itself (Term.alts).
        mode="and" keeps only rows containing every word exactly (used by forget).
        """
        if limit <= 0:
            return []
        if mode == "and":
            return self._containing_all(query, limit, active)
        return [c.row for c in self.candidates(query, max(RESCORE, limit * 2), active)[:limit]]

    def candidates(self, query: str, pool: int, active: bool = True) -> list[ranking.Candidate]:
        """Up to `pool` rows for `query` with their tokens and BM25 score, best first (the
        first FIRST_ROWS in ranking.first_order's order)."""
        wanted, coarse = self.query_terms(query)
        best = sorted(coarse, key=lambda r: (coarse[r], r), reverse=True)[:pool]
        rows = self._fetch(best, active)
        if not rows:
            return []
        tokens = [self._row_tokens(r) for r in rows]
        avg = sum(len(t.stems) for t in tokens) / len(tokens)
        wanted = ranking.present(wanted, {s for t in tokens for s in t.stems})
        now = self.clock()
        shape = self._shape(query, rows)
        scored = [self._scored(wanted, r, t, avg, now, shape)
                  for r, t in zip(rows, tokens, strict=True)]
        scored.sort(key=lambda c: (c.score, c.id), reverse=True)
        ranked, passage = self._with_sequel(scored, wanted, avg, active, now, shape)
        return ranking.first_order(wanted, ranked, avg, passage)

    @staticmethod
    def _shape(query: str, rows: Sequence[Row]) -> ranking.Shape | None:
        """What `query` asks for (ranking.answer_shape); for a name, the words that are
        none: the query's own and the candidates' subjects."""
        kind = ranking.answer_shape(query)
        if kind != "name":
            return None if kind is None else ranking.Shape(kind)
        known = {*ranking.words(query, 10 * QUERY_TERMS)}
        for r in rows:
            known.update(ranking.words(r.subject, 10 * QUERY_TERMS))
        return ranking.Shape(kind, frozenset(known))

    def _scored(self, wanted: Sequence[Term], row: Row, tokens: Tokens, avg: float,
                now: float, shape: ranking.Shape | None = None) -> ranking.Candidate:
        """A candidate row's BM25 (ranking.relevance), phrase bonus, answer shape
        (ranking.shape_factor) and recency."""
        made = ranking.parts(wanted, tokens)
        factor = ranking.shape_factor(shape, row.content) * recency(self._age_days(row, now))
        return ranking.Candidate(ranking.bm25(made, avg) * factor, int(row.id), row, tokens,
                                 factor, made)

    def _with_sequel(
        self, scored: list[ranking.Candidate], wanted: Sequence[Term], avg: float,
        active: bool, now: float, shape: ranking.Shape | None = None,
    ) -> tuple[list[ranking.Candidate], tuple[ranking.Candidate, ranking.Candidate] | None]:
        """`scored` with the sequel of its best row re-scored (ranking.sequel_score): the next
        row by id, if it is about the same subject and was stored within SEQUEL_MINUTES of
        the best one, read (one indexed lookup) when it was not a candidate already; and
        (best, sequel) when it was placed so, else None."""
        if not scored:
            return scored, None
        best = scored[0]
        sequel = next((c for c in scored if c.id == best.id + 1), None)
        out = [c for c in scored if c is not sequel]
        if sequel is None:
            rows = self._fetch([best.id + 1], active)
            if not rows:
                return scored, None
            sequel = self._scored(wanted, rows[0], self._row_tokens(rows[0]), avg, now, shape)
        if not self._continues(best.row, sequel.row):
            return scored, None
        lifted = ranking.sequel_score(wanted, best, sequel, avg)
        if lifted <= 0:
            return scored, None
        out.append(ranking.Candidate(lifted, sequel.id, sequel.row, sequel.tokens,
                                     sequel.factor, sequel.parts))
        out.sort(key=lambda c: (c.score, c.id), reverse=True)
        return out, (best, sequel)

    @staticmethod
    def _continues(first: Row, then: Row) -> bool:
        """Whether `then` goes on from `first`: same subject (any case), stored within
        SEQUEL_MINUTES after it."""
        if first.subject.lower() != then.subject.lower():
            return False
        try:
            gap = parse_time(then.created_at) - parse_time(first.created_at)
        except ValueError:
            return False
        return timedelta(0) <= gap <= timedelta(minutes=SEQUEL_MINUTES)

    def query_terms(self, query: str) -> tuple[list[Term], dict[int, float]]:
        """The query's words as Terms, and the coarse score (matched IDF) of every row
        among the newest PER_TERM matches of a word or of its alternates."""
        top = int(self.conn.execute("SELECT coalesce(max(id), 0) FROM memory").fetchone()[0])
        coarse: dict[int, float] = {}
        wanted: list[Term] = []
        seen: set[tuple[str, ...]] = set()
        for word in ranking.query_words(query):
            stems = tuple(self._tokens(word, stem=True))
            if not stems or stems in seen:
                continue
            seen.add(stems)
            found = self._newest(quoted(word))
            groups = self._alternates(word, stems)
            if not found and not groups:
                groups = self._near(word, stems)
            matches = [self._newest(match_expr([w for w, _ in group])) for group, _ in groups]
            weight = idf(estimate_df(family(found, groups, matches), top, PER_TERM), max(top, 1))
            for rid in found:
                coarse[rid] = coarse.get(rid, 0.0) + weight
            alts: list[tuple[tuple[str, ...], float]] = []
            direct = set(found)
            for (group, factor), got in zip(groups, matches, strict=True):
                alts += [(stems_of, factor) for _, stems_of in group]
                for rid in got:
                    if rid not in direct:  # a row holding the word itself is credited once
                        coarse[rid] = coarse.get(rid, 0.0) + weight * factor
            wanted.append(Term(tuple(self._tokens(word, stem=False)), stems, weight, tuple(alts)))
        return wanted, coarse

    def _alternates(
        self, word: str, stems: tuple[str, ...]
    ) -> list[tuple[list[tuple[str, tuple[str, ...]]], float]]:
        """The lexicon's other words for `word` with their index stems, in up to three
        groups: inflections (FORM_WEIGHT), derivations (DERIVED_WEIGHT) and related words
        (RELATED_WEIGHT). A word the stemmer
        already joins to `word` is left out: it is found as `word`."""
        cached = self._alt_cache.get(word)
        if cached is not None:
            return cached
        if len(self._alt_cache) >= ALT_CACHE:
            self._alt_cache.clear()
        alt = lexicon.load().alternates(word, stems[0] if len(stems) == 1 else None)
        out: list[tuple[list[tuple[str, tuple[str, ...]]], float]] = []
        skip = {stems}
        for group, factor in ((alt.forms, ranking.FORM_WEIGHT),
                              (alt.derived, ranking.DERIVED_WEIGHT),
                              (alt.related, ranking.RELATED_WEIGHT)):
            kept = []
            for w in group:
                s = tuple(self._tokens(w, stem=True))
                if s and s not in skip:
                    skip.add(s)
                    kept.append((w, s))
            if kept:
                out.append((kept, factor))
        self._alt_cache[word] = out
        return out

    def _near(
        self, word: str, stems: tuple[str, ...]
    ) -> list[tuple[list[tuple[str, tuple[str, ...]]], float]]:
        """For a word no row holds and the lexicon does not know: the spellings one edit
        away from its stem ('persue' → pursu), the stem it starts with ('educaton' → educ)
        and the two words it may run together ('roadtrip' → road trip), as one FUZZY_WEIGHT
        group (ranking.variants). Most of them are no word at all: candidates() keeps only
        those its rows hold. The group is looked up like any other, in one bounded read."""
        if len(stems) != 1 or not stems[0].isascii() or not stems[0].isalpha():
            return []
        group = [(v, tuple(self._tokens(v, stem=True))) for v in ranking.variants(word, stems[0])]
        return [(group, ranking.FUZZY_WEIGHT)] if group else []

    def _newest(self, match: str | None) -> list[int]:
        """Rowids of the newest PER_TERM rows matching an FTS5 expression."""
        if match is None:
            return []
        return [
            int(r[0])
            for r in self.conn.execute(
                "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? "
                "ORDER BY rowid DESC LIMIT ?",
                (match, PER_TERM),
            )
        ]

    def _containing_all(self, query: str, limit: int, active: bool) -> list[Row]:
        """Active rows holding every word of `query` as written (the stemmed index finds
        candidates, the exact tokens decide), most recently updated first."""
        words = terms(query)
        match = match_expr(words, "AND")
        if match is None:
            return []
        ids = [
            int(r[0])
            for r in self.conn.execute(
                "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? "
                "ORDER BY rowid DESC LIMIT ?",
                (match, CANDIDATES),
            )
        ]
        need = [tuple(self._tokens(w, stem=False)) for w in words]
        out = []
        for row in self._fetch(ids, active):
            have = set(self._tokens(row_text(row.subject, row.content), stem=False))
            if all(set(n) <= have for n in need):
                out.append(row)
        out.sort(key=lambda r: (r.updated_at, int(r.id)), reverse=True)
        return out[:limit]

    def _fetch(self, ids: Sequence[int], active: bool) -> list[Row]:
        """The rows with these ids (only active ones if `active`), in no particular order."""
        if not ids:
            return []
        where = (
            "AND superseded_by IS NULL AND (expires_at IS NULL OR expires_at > ?)"
            if active
            else ""
        )
        params: list[Any] = [*ids, self.now()] if active else list(ids)
        return [
            _row(v)
            for v in self.conn.execute(
                f"SELECT {COLUMNS} FROM memory WHERE id IN ({','.join('?' * len(ids))}) {where}",
                params,
            )
        ]

    def _tokens(self, text: str, stem: bool) -> list[str]:
        """`text` as memory_fts sees it: Porter stems, or (stem=False) the unstemmed words."""
        tokenizer = self._stemmer if stem else self._exact
        out: list[str] = tokenizer(
            text.encode("utf-8", "replace"), apsw.FTS5_TOKENIZE_DOCUMENT, None,
            include_offsets=False, include_colocated=False,
        )
        return out

    def _row_tokens(self, row: Row) -> Tokens:
        text = row_text(row.subject, row.content)
        return Tokens(self._subject_tokens(row.subject), self._tokens(text, False),
                      self._tokens(text, True))

    def _subject_tokens(self, subject: str) -> list[str]:
        """A subject's exact tokens: a store has few subjects, and every candidate of every
        recall needs its own tokenized, so they are kept (at most ALT_CACHE)."""
        cached = self._subject_cache.get(subject)
        if cached is None:
            if len(self._subject_cache) >= ALT_CACHE:
                self._subject_cache.clear()
            cached = self._subject_cache[subject] = self._tokens(row_text(subject, ""), False)
        return cached

    @staticmethod
    def _age_days(row: Row, now: float) -> float:
        try:
            return max(0.0, now - parse_time(row.updated_at).timestamp()) / 86_400
        except ValueError:
            return 0.0

    def durable(self, limit: int = HYDRATE_MAX) -> list[Row]:
        """Active facts, preferences and people, most recently updated first."""
        return [
            _row(v)
            for v in self.conn.execute(
                f"SELECT {COLUMNS} FROM memory WHERE superseded_by IS NULL "
                "AND kind IN ('fact', 'preference', 'person') "
                "AND (expires_at IS NULL OR expires_at > ?) ORDER BY updated_at DESC LIMIT ?",
                (self.now(), limit),
            )
        ]

    def hydrate(self, text: str, limit: int = HYDRATE_MAX) -> list[Row]:
        """At most `limit` rows for a turn: FTS hits for `text`, then durable rows."""
        out: dict[str, Row] = {}
        for row in self.search(text, limit=min(HYDRATE_HITS, limit)):
            out[row.id] = row
        if len(out) < limit:
            for row in self.durable(limit):
                out.setdefault(row.id, row)
                if len(out) >= limit:
                    break
        return list(out.values())

    def rows(
        self, kind: str | None = None, include_inactive: bool = False, limit: int = 100
    ) -> list[Row]:
        """Rows for the inspection CLI, newest first."""
        clauses, params = [], []
        if kind:
            clauses.append("kind = ?")
            params.append(kind)
        if not include_inactive:
            clauses.append("superseded_by IS NULL AND (expires_at IS NULL OR expires_at > ?)")
            params.append(self.now())
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        return [
            _row(v)
            for v in self.conn.execute(
                f"SELECT {COLUMNS} FROM memory {where} ORDER BY id DESC LIMIT ?",
                (*params, limit),
            )
        ]

    def active_all(self) -> list[Row]:
        """Every active row, oldest first (aigpt's read_memory, export)."""
        return [
            _row(v)
            for v in self.conn.execute(
                f"SELECT {COLUMNS} FROM memory WHERE superseded_by IS NULL "
                "AND (expires_at IS NULL OR expires_at > ?) ORDER BY created_at, id",
                (self.now(),),
            )
        ]

    def counts(self) -> dict[str, int]:
        """Active rows per kind, plus 'inactive' (expired or superseded) and 'flagged'."""
        out = dict.fromkeys(KINDS, 0)
        out["inactive"] = 0
        for kind, active, n in self.conn.execute(
            "SELECT kind, superseded_by IS NULL AND (expires_at IS NULL OR expires_at > ?), "
            "count(*) FROM memory GROUP BY 1, 2",
            (self.now(),),
        ):
            out[kind if active else "inactive"] += int(n)
        out["flagged"] = int(
            self.conn.execute(
                "SELECT count(*) FROM memory_flag WHERE resolved_at IS NULL"
            ).fetchone()[0]
        )
        return out

    # ------------------------------------------------------------------ flags

    def flag(self, statement: str, persona_says: str, source_ids: Sequence[int]) -> int:
        import json

        self.conn.execute(
            "INSERT INTO memory_flag (statement, persona_says, source_ids, created_at) "
            "VALUES (?, ?, ?, ?)",
            (clean(statement)[:CONTENT_MAX], clean(persona_says)[:CONTENT_MAX],
             json.dumps(list(source_ids)), self.now()),
        )
        return int(self.conn.last_insert_rowid())

    def flags(self, include_resolved: bool = False) -> list[tuple[int, str, str, str, str]]:
        """(id, statement, persona_says, source_ids, created_at) of contradictions."""
        where = "" if include_resolved else "WHERE resolved_at IS NULL"
        return [
            (int(v[0]), v[1], v[2], v[3], v[4])
            for v in self.conn.execute(
                "SELECT id, statement, persona_says, source_ids, created_at FROM memory_flag "
                f"{where} ORDER BY id"
            )
        ]

    def resolve_flag(self, flag_id: int) -> bool:
        self.conn.execute(
            "UPDATE memory_flag SET resolved_at = ? WHERE id = ? AND resolved_at IS NULL",
            (self.now(), flag_id),
        )
        return bool(self.conn.changes())


class BuiltinMemory:
    """The `Memory` interface over the local store (MEMORY_BACKEND=builtin)."""

    name = "builtin"

    def __init__(self, store: MemoryStore) -> None:
        self.db = store

    async def store(self, kind: str, subject: str, content: str) -> tuple[Row, bool]:
        return self.db.add(kind, subject, content, source="chat")

    async def recall(self, query: str, limit: int = RECALL_MAX) -> list[Row]:
        return self.db.search(query, limit=limit)

    async def forget(self, row_id: str | None, query: str | None) -> tuple[list[Row], int]:
        if row_id is not None:
            try:
                rid = int(row_id.lstrip("#"))
            except ValueError:
                raise MemoryInputError(
                    f"id must be a number like 12, not {row_id[:20]!r}"
                ) from None
            return self.db.delete(rid), 0
        return self.db.forget(query or "")

    async def hydrate(self, text: str, limit: int = HYDRATE_MAX) -> list[Row]:
        return self.db.hydrate(text, limit)

    async def counts(self) -> dict[str, int]:
        return self.db.counts()
