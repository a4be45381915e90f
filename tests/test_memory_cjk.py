"""CJK recall (issue 35 item 8): a Chinese, Japanese or Korean word inside a longer run is
found by the store, by `memory_recall` of a real `gantry mcp-memory`, and in a database
written before migration 0012; text without CJK letters is tokenised exactly as before."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gantry import db
from gantry.memory import ranking
from gantry.memory.mcp_backend import rank_local
from gantry.memory.store import MemoryStore, Row
from tests.schema import database_at

ROOT = Path(__file__).parent.parent
T = "2026-01-01T00:00:00.000000Z"
# The rows and a word inside each: Chinese, Japanese (kanji, kana, a single kanji), Korean.
ROWS = {
    "我的猫叫小白": ["小白", "猫", "我的猫"],
    "東京に住んでいて、毎朝コーヒーを飲みます": ["東京", "コーヒー", "飲み"],
    "제 고양이 이름은 나비예요": ["나비", "고양이", "이름"],
}


@pytest.fixture
def store(tmp_path: Path) -> Any:
    conn = db.connect(tmp_path / "g.db")
    yield MemoryStore(conn, clock=lambda: 1_767_225_600.0)
    conn.close()


def contents(rows: list[Row]) -> list[str]:
    return [r.content for r in rows]


def integrity(conn: Any) -> None:
    conn.execute("INSERT INTO memory_fts (memory_fts) VALUES ('integrity-check')")


def test_cjk_words_inside_longer_runs_are_recalled(store: MemoryStore) -> None:
    for text in ROWS:
        store.add("fact", "", text)
    store.add("fact", "ana", "likes cats and coffee")
    for text, queries in ROWS.items():
        for query in queries:
            assert contents(store.search(query)) == [text], query
    assert contents(store.search("我的猫叫什么名字？")) == ["我的猫叫小白"]
    assert contents(store.search("cats")) == ["likes cats and coffee"]
    assert store.search("小黑") == []


def test_the_subject_boost_and_forget_see_cjk_words(store: MemoryStore) -> None:
    about, _ = store.add("person", "お母さん", "毎朝緑茶を飲む")
    store.add("fact", "", "お母さんと緑茶を飲んだ")
    assert store.search("母さんは何を飲む")[0].id == about.id
    deleted, more = store.forget("緑茶 お母さん")
    assert len(deleted) == 2 and more == 0
    store.add("fact", "", "私の猫はタマです")
    assert store.forget("犬")[0] == [] and contents(store.search("タマ")) == ["私の猫はタマです"]


def test_a_database_from_before_0012_becomes_searchable_in_place(tmp_path: Path) -> None:
    """Rows written at schema 11 (no grams) are indexed when the migrated store opens; the
    rows themselves are unchanged, and the index stays consistent."""
    path = tmp_path / "gantry.db"
    conn = database_at(path, 11)
    with conn:
        for text in [*ROWS, "adopted a cat"]:
            conn.execute(
                "INSERT INTO memory (kind, subject, content, source, created_at, updated_at) "
                "VALUES ('fact', '', ?, 'chat', ?, ?)", (text, T, T))
    cols = "id, kind, subject, content, source, created_at, updated_at, superseded_by"
    before = conn.execute(f"SELECT {cols} FROM memory ORDER BY id").fetchall()
    conn.close()

    conn = db.connect(path)  # applies 0012
    store = MemoryStore(conn, clock=lambda: 1_767_225_600.0)
    assert conn.execute(f"SELECT {cols} FROM memory ORDER BY id").fetchall() == before
    integrity(conn)
    for text, queries in ROWS.items():
        for query in queries:
            assert contents(store.search(query)) == [text], query
    assert contents(store.search("adopt")) == ["adopted a cat"]
    assert conn.execute("SELECT count(*) FROM memory WHERE grams IS NULL").fetchone()[0] == 0
    assert MemoryStore(conn).fill_grams() == 0  # nothing left to do on the next open
    conn.close()


def test_rows_added_or_edited_with_sqlite3_are_indexed_on_the_next_open(
    store: MemoryStore,
) -> None:
    conn = store.conn
    conn.execute("INSERT INTO memory (kind, subject, content, source, created_at, updated_at) "
                 "VALUES ('fact', '', '我的猫叫小白', 'operator', ?, ?)", (T, T))
    integrity(conn)
    assert store.search("小白") == []  # sqlite3 does not write grams ...
    store = MemoryStore(conn, clock=store.clock)
    assert contents(store.search("小白")) == ["我的猫叫小白"]  # ... the next open does
    conn.execute("UPDATE memory SET content = '我的狗叫小黑' WHERE content = '我的猫叫小白'")
    integrity(conn)
    assert store.search("小白") == [] and store.search("猫") == []  # stale grams are dropped
    store = MemoryStore(conn, clock=store.clock)
    assert contents(store.search("小黑")) == ["我的狗叫小黑"]
    conn.execute("DELETE FROM memory")
    integrity(conn)
    assert store.search("小黑") == []


def test_rank_local_finds_cjk_words_in_an_aigpt_servers_rows() -> None:
    rows = [Row("1", "fact", "", "syuiはRustを好む"), Row("2", "fact", "", "私の猫はタマです")]
    assert [r.id for r in rank_local(rows, "猫", 5)] == ["2"]
    assert [r.id for r in rank_local(rows, "Rust", 5)] == ["1"]
    assert [r.id for r in rank_local(rows, "タマ 猫", 5, every=True)] == ["2"]


@pytest.mark.anyio
@pytest.mark.slow
async def test_memory_recall_over_gantry_mcp_memory_finds_cjk_words(tmp_path: Path) -> None:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    persona = tmp_path / "persona"
    persona.mkdir()
    (persona / "SOUL.md").write_text("test")
    params = StdioServerParameters(
        command=sys.executable, cwd=str(ROOT),
        args=["-m", "gantry", "mcp-memory", "--data-dir", str(tmp_path / "data"),
              "--persona-dir", str(persona)],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)},
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()

        async def call(name: str, args: dict[str, Any]) -> str:
            out = await session.call_tool(name, args)
            assert not out.is_error, out
            return "".join(getattr(c, "text", "") for c in out.content)

        for text in ROWS:
            assert (await call("memory_store", {"kind": "fact", "subject": "",
                                                "content": text})).startswith("stored #")
        for text, queries in ROWS.items():
            for query in queries:
                hits = (await call("memory_recall", {"query": query})).splitlines()
                assert [re.sub(r"^#\d+ \(fact\) : | \(\d{4}-\d\d-\d\d\)$", "", h)
                        for h in hits] == [text], query


# ---------------------------------------------------------------------- pure parts

CJK = st.sampled_from(list("我的猫叫小白東京に住んでいますコーヒーを飲ｶﾀｶﾅ々〇제고양이나비예요"))
RUN = st.text(alphabet=CJK, min_size=1, max_size=12)
OTHER = st.text(alphabet=st.characters(codec="utf-8").filter(
    lambda c: ranking.grams(c) == []), max_size=30)


def _old_words(text: str, limit: int) -> list[str]:
    """ranking.words before CJK grams: distinct lowercase `\\w+` words."""
    return list(dict.fromkeys(re.findall(r"\w+", text.lower())))[:limit]


@settings(max_examples=300, deadline=None)
@given(text=OTHER, limit=st.integers(1, 20))
def test_text_without_cjk_is_tokenised_as_before(text: str, limit: int) -> None:
    assert ranking.words(text, limit) == _old_words(text, limit)
    assert ranking.grams(text) == []


@settings(max_examples=300, deadline=None)
@given(before=OTHER, run=RUN, after=OTHER, data=st.data())
def test_any_part_of_a_cjk_run_is_found_in_its_grams(
    before: str, run: str, after: str, data: Any
) -> None:
    """Whatever surrounds a run and wherever the query cuts it, each query word of the part
    is an index word of the text, and the query never has more words than it may."""
    start = data.draw(st.integers(0, len(run) - 1))
    part = run[start : data.draw(st.integers(start + 1, len(run)))]
    indexed = set(ranking.grams(f"{before}{run}{after}"))
    wanted = ranking.words(part, 1000)
    assert wanted and set(wanted) <= indexed
    assert all(1 <= len(w) <= 2 for w in wanted)
    assert len(ranking.words(run * 3, 4)) <= 4


@settings(max_examples=100, deadline=None)
@given(run=RUN)
def test_each_gram_is_one_token_of_the_index(run: str) -> None:
    """The stored grams column reads back, through memory_fts's own tokenizer, as exactly
    the grams written, so a query word matches the gram it was made from."""
    conn = apsw.Connection(":memory:")
    tokenize = conn.fts5_tokenizer("porter", ["unicode61", "remove_diacritics", "2"])
    grams = ranking.grams(run)
    got = tokenize(" ".join(grams).encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None,
                   include_offsets=False, include_colocated=False)
    assert got == [g.lower() for g in grams]
