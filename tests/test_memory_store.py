"""The builtin memory store: schema, FTS5 sync, TTLs, ranking, forget, safe queries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gantry import db
from gantry.memory import ranking
from gantry.memory.store import (
    CONTENT_MAX,
    PER_TERM,
    MemoryInputError,
    MemoryStore,
    family,
    format_line,
    fts_query,
    iso,
    normalize_time,
    parse_line,
    parse_time,
    render_block,
)


class Clock:
    def __init__(self, t: float = 1_780_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def conn(tmp_path: Path) -> Any:
    c = db.connect(tmp_path / "g.db")
    yield c
    c.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(conn: Any, clock: Clock) -> MemoryStore:
    return MemoryStore(conn, clock=clock)


def test_store_and_recall_with_ids(store: MemoryStore) -> None:
    row, new = store.add("person", "mom", "prefers calls over texts")
    assert new and row.kind == "person" and row.source == "chat" and row.expires_at is None
    store.add("fact", "chris", "climbs on Tuesdays and Thursdays")
    hits = store.search("does mom like texts?")
    assert [h.id for h in hits] == [row.id]


def test_exact_duplicate_is_not_stored_twice(store: MemoryStore, conn: Any) -> None:
    a, new_a = store.add("fact", "chris", "likes  green tea ")
    b, new_b = store.add("fact", "Chris", "likes green tea")
    assert new_a and not new_b and a.id == b.id
    assert conn.execute("SELECT count(*) FROM memory").fetchone()[0] == 1
    _, new_c = store.add("preference", "chris", "likes green tea")  # another kind: a new row
    assert new_c


@pytest.mark.parametrize(
    ("kind", "subject", "content", "needle"),
    [
        ("feeling", "x", "y", "kind must be one of"),
        ("fact", "a: b", "y", "must not contain ':'"),
        ("fact", "x" * 81, "y", "keep it under"),
        ("fact", "x", "   ", "content is empty"),
        ("fact", "x", "y" * (CONTENT_MAX + 1), "one atomic statement"),
    ],
)
def test_invalid_input_says_what_to_fix(
    store: MemoryStore, kind: str, subject: str, content: str, needle: str
) -> None:
    with pytest.raises(MemoryInputError, match=needle):
        store.add(kind, subject, content)


def test_episode_ttl_expires_and_facts_do_not(store: MemoryStore, clock: Clock) -> None:
    ep, _ = store.add("episode", "climbing", "sent the blue route at the gym")
    fact, _ = store.add("fact", "climbing", "the gym closes at 22:00")
    assert ep.expires_at == iso(clock.t + 30 * 86_400) and fact.expires_at is None
    assert {r.id for r in store.search("gym")} == {ep.id, fact.id}
    clock.t += 31 * 86_400
    assert [r.id for r in store.search("gym")] == [fact.id]
    assert store.counts()["inactive"] == 1 and store.counts()["episode"] == 0
    assert [r.id for r in store.rows(include_inactive=True)] == [fact.id, ep.id]
    clock.t += 30 * 86_400
    assert store.purge_expired() == 1 and store.get(int(ep.id)) is None


def test_zero_ttl_means_never(conn: Any, clock: Clock) -> None:
    s = MemoryStore(conn, ttl_days={"episode": 0}, clock=clock)
    row, _ = s.add("episode", "x", "happened once")
    assert row.expires_at is None


def test_recency_breaks_ties(store: MemoryStore, clock: Clock) -> None:
    old, _ = store.add("fact", "tea", "drinks oolong")
    clock.t += 200 * 86_400
    new, _ = store.add("fact", "tea", "drinks sencha")
    assert [r.id for r in store.search("drinks tea")] == [new.id, old.id]


def test_superseded_rows_are_inactive_and_delete_takes_the_chain(store: MemoryStore) -> None:
    a, _ = store.add("fact", "chris", "lives in Berlin")
    b, _ = store.add("fact", "chris", "lives in Berlin, Kreuzberg")
    assert store.supersede([int(a.id)], int(b.id)) == [int(a.id)]
    assert [r.id for r in store.search("berlin")] == [b.id]
    assert store.get(int(a.id)).superseded_by == int(b.id)  # type: ignore[union-attr]
    deleted = store.delete(int(b.id))
    assert {r.id for r in deleted} == {a.id, b.id}
    assert store.search("berlin") == [] and store.rows(include_inactive=True) == []


def test_fts_index_follows_update_and_delete(store: MemoryStore, conn: Any) -> None:
    row, _ = store.add("fact", "car", "drives a red van")
    conn.execute("UPDATE memory SET content = 'drives a blue bike' WHERE id = ?", (int(row.id),))
    assert store.search("van") == [] and [r.id for r in store.search("bike")] == [row.id]
    conn.execute("DELETE FROM memory WHERE id = ?", (int(row.id),))
    assert store.search("bike") == []
    conn.execute("INSERT INTO memory_fts (memory_fts) VALUES ('integrity-check')")


def test_forget_by_query_needs_every_word_and_is_capped(store: MemoryStore) -> None:
    for i in range(8):
        store.add("episode", "run", f"ran {i} km in the park")
    keep, _ = store.add("fact", "park", "the park has a lake")
    deleted, more = store.forget("ran park")
    assert len(deleted) == 5 and more == 3
    assert keep.id not in {r.id for r in deleted}
    assert store.forget("nothing like this") == ([], 0)


def test_hydrate_is_capped_and_puts_hits_first(store: MemoryStore) -> None:
    for i in range(40):
        store.add("fact", f"thing{i}", f"statement number {i}")
    store.add("episode", "dentist", "appointment moved to Friday")
    rows = store.hydrate("when is the dentist?")
    assert len(rows) == 30
    assert rows[0].subject == "dentist"
    block = render_block(rows)
    assert block.startswith("[memory]\n- (episode) dentist: appointment moved to Friday")
    assert block.count("\n- ") == 30


def test_counts_and_flags(store: MemoryStore) -> None:
    store.add("fact", "a", "b")
    fid = store.flag("user is vegetarian", "USER.md: eats fish", [1])
    assert store.counts()["fact"] == 1 and store.counts()["flagged"] == 1
    assert store.flags()[0][:3] == (fid, "user is vegetarian", "USER.md: eats fish")
    assert store.resolve_flag(fid) and store.counts()["flagged"] == 0


# ---------------------------------------------------------------------- pure helpers

NASTY = st.text(
    alphabet=st.sampled_from(list('abc xyz"\'()*-+:^{}[],.;NEAR AND OR NOT\\\x00\n\tüß日本')),
    max_size=60,
) | st.text(max_size=60)


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=NASTY)
def test_any_text_is_a_safe_query(store: MemoryStore, conn: Any, query: str) -> None:
    """Recall, forget-by-query and hydration never raise on arbitrary text."""
    if not store.search("seed"):
        store.add("fact", "seed", 'NEAR AND "quoted" (paren * star -minus')
    store.search(query)
    store.hydrate(query)
    store.forget(query + " zzzunmatched")  # never matches, so the seed row stays
    match = fts_query(query)
    if match is not None:
        conn.execute("SELECT count(*) FROM memory_fts WHERE memory_fts MATCH ?", (match,))


def test_operators_are_plain_words(store: MemoryStore) -> None:
    row, _ = store.add("fact", "logic", "NEAR AND OR NOT are words here")
    assert [r.id for r in store.search('NEAR(')] == [row.id]
    assert [r.id for r in store.search('"or')] == [row.id]
    assert fts_query("*** --- ()") is None


@given(
    kind=st.sampled_from(["fact", "preference", "person", "episode", "insight"]),
    subject=st.text(st.characters(blacklist_characters=":\n\r"), max_size=20).map(str.strip),
    content=st.text(min_size=1, max_size=80).map(str.strip).filter(bool),
)
def test_line_format_round_trips(kind: str, subject: str, content: str) -> None:
    line = format_line(kind, subject, content)
    assert parse_line(line) == (kind, subject, content.strip())


def test_plain_text_parses_as_a_fact() -> None:
    assert parse_line("syuiはRustを好む") == ("fact", "", "syuiはRustを好む")


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("2026-03-01T12:00:00Z", "2026-03-01T12:00:00.000000Z"),
        ("2026-03-01T13:00:00.5+01:00", "2026-03-01T12:00:00.500000Z"),
        ("2026-03-01T12:00:00.123456Z", "2026-03-01T12:00:00.123456Z"),
    ],
)
def test_times_normalize_to_utc(raw: str, want: str) -> None:
    assert normalize_time(raw) == want


def test_schema_rejects_unknown_kind_even_from_sqlite3(conn: Any) -> None:
    with pytest.raises(apsw.ConstraintError):
        conn.execute(
            "INSERT INTO memory (kind, subject, content, source, created_at, updated_at) "
            "VALUES ('mood', 'x', 'y', 'operator', 'now', 'now')"
        )


# ---------------------------------------------------------------------- dates are total

OFFSETS = st.integers(-(23 * 60 + 59), 23 * 60 + 59).map(
    lambda m: timezone(timedelta(minutes=m)))
AWARE = st.datetimes(timezones=OFFSETS)


@given(AWARE, AWARE)
def test_any_time_normalizes_or_is_refused_and_text_order_is_time_order(
    a: datetime, b: datetime
) -> None:
    """Far past, far future, any offset: a fixed-width UTC string that sorts like the
    instant it names, or a ValueError (the UTC instant is outside years 1-9999)."""
    got = []
    for dt in (a, b):
        try:
            text = normalize_time(dt.isoformat())
        except ValueError as exc:
            assert "outside the years 1-9999" in str(exc)
            return
        assert len(text) == 27 and text.endswith("Z")
        assert parse_time(text) == dt
        got.append(text)
    assert (got[0] < got[1]) == (a < b) and (got[0] == got[1]) == (a == b)


def test_naive_times_are_utc_and_the_edges_of_utc_are_clear_errors() -> None:
    assert normalize_time("2026-03-01T12:00:00") == "2026-03-01T12:00:00.000000Z"
    assert normalize_time("0001-01-01T00:00:00") == "0001-01-01T00:00:00.000000Z"
    for raw in ("9999-12-31T23:30:00-01:00", "0001-01-01T00:30:00+01:00"):
        with pytest.raises(ValueError, match="outside the years 1-9999 in UTC"):
            normalize_time(raw)


@given(st.floats(), st.floats())
def test_iso_is_total_and_monotone(a: float, b: float) -> None:
    x, y = iso(a), iso(b)
    assert len(x) == len(y) == 27
    if a <= b:  # False for NaN
        assert x <= y


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(created=st.datetimes(timezones=st.just(UTC)), days=st.integers(-(10**12), 10**12))
def test_expiry_is_total_however_far_or_long(conn: Any, created: datetime, days: int) -> None:
    """An episode dated near year 9999 or a huge TTL saturates at the format's range."""
    s = MemoryStore(conn, ttl_days={"episode": days})
    stamp = normalize_time(created.isoformat())
    expires = s.expiry("episode", stamp)
    if days == 0:
        assert expires is None
        return
    assert expires is not None and len(expires) == 27
    assert expires >= stamp if days > 0 else expires <= stamp


def test_episode_dated_at_the_end_of_9999_saturates(store: MemoryStore) -> None:
    row, _ = store.add("episode", "gym", "the last climb", created_at="9999-12-31T00:00:00Z")
    assert row.expires_at == "9999-12-31T23:59:59.999999Z"
    assert store.purge_expired(grace_days=10**15) == 0  # a huge grace: no overflow either


ROWIDS = st.lists(st.integers(1, 500), unique=True, max_size=80).map(
    lambda ids: sorted(ids, reverse=True)[:PER_TERM])


@given(found=ROWIDS, groups=st.lists(
    st.tuples(st.sampled_from([ranking.FORM_WEIGHT, ranking.DERIVED_WEIGHT,
                               ranking.RELATED_WEIGHT]), ROWIDS), max_size=3))
def test_a_words_family_is_its_rows_and_its_irregular_forms_rows(
    found: list[int], groups: list[tuple[float, list[int]]],
) -> None:
    """The newest PER_TERM of the word's rows and its FORM_WEIGHT groups' rows, newest
    first; derivations and related words never count toward its document frequency."""
    out = family(found, [([], factor) for factor, _ in groups], [ids for _, ids in groups])
    forms = {i for factor, ids in groups if factor == ranking.FORM_WEIGHT for i in ids}
    assert out == sorted(set(found) | forms, reverse=True)[:PER_TERM]
    assert len(out) <= PER_TERM and out == sorted(set(out), reverse=True)


def test_recall_reads_the_database_without_mapping_it(tmp_path: Path) -> None:
    """A mapped page stays in the process's RSS once read, so a memory-mapped gantry.db made
    RSS grow with the database for as long as the process ran (issue 44's soak)."""
    path = tmp_path / "mapped.db"
    conn = db.connect(path)
    store = MemoryStore(conn)
    with conn:
        for i in range(3000):
            store.add("fact", f"person{i % 50}", f"likes walking {i} dogs near river {i % 97}")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert path.stat().st_size > 1 << 20
    for i in range(40):
        assert store.search(f"walking dogs river {i}")
    mapped = [line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()]
    assert f"{path}-shm" in mapped  # WAL's small shared index is mapped, as ever
    assert str(path) not in mapped
    conn.close()
