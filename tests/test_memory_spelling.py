"""Recall of a word no row holds: near spellings and run-together words (issue 45), the
question-frame stopwords, and the recall bench's reading of evidence ids."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gantry import db
from gantry.memory import ranking
from gantry.memory import store as store_mod
from gantry.memory.store import MemoryStore

ROOT = Path(__file__).resolve().parent.parent
LETTERS = st.text(alphabet="abcde", max_size=9)


@pytest.fixture
def store(tmp_path: Path) -> Any:
    conn = db.connect(tmp_path / "g.db")
    yield MemoryStore(conn)
    conn.close()


def osa(a: str, b: str) -> int:
    """The textbook optimal-string-alignment distance, unbounded (the reference)."""
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


@given(LETTERS, LETTERS, st.integers(0, 3))
def test_edits_is_the_distance_cut_at_its_limit(a: str, b: str, limit: int) -> None:
    assert ranking.edits(a, b, limit) == min(osa(a, b), limit + 1)
    assert ranking.edits(a, b, limit) == ranking.edits(b, a, limit)


@given(st.text(max_size=30), st.text(max_size=30))
def test_close_never_raises_and_short_words_never_match(word: str, term: str) -> None:
    near = ranking.close(word, term)
    assert not near or (len(word) >= 4 and word != term)


def test_close_knows_the_usual_slips() -> None:
    assert ranking.close("persu", "pursu")  # persue / pursue: a letter changed
    assert ranking.close("torunament", "tournament")  # two letters swapped
    assert ranking.close("reccomend", "recommend")  # two edits in a long word
    assert ranking.close("educaton", "educ")  # the stem plus what the stemmer missed
    assert not ranking.close("wise", "wish")  # under 5 letters: too many neighbours
    assert not ranking.close("mel", "melani")


@given(st.text(alphabet="abcxyz", max_size=12))
def test_splits_join_back_into_the_word(word: str) -> None:
    for a, b in ranking.splits(word):
        assert a + b == word and len(a) >= 3 and len(b) >= 3


def test_a_misspelt_word_finds_the_row_spelt_right(store: MemoryStore) -> None:
    """'persue' is in no row: before, the question found only rows naming Caroline."""
    store.add("fact", "Caroline", "Caroline wants to pursue counseling as a career")
    for thing in ("a dog", "to see Sweden", "a bike", "tea"):
        store.add("fact", "Caroline", f"Caroline wants {thing}")
    top = store.search("What does Caroline want to persue?", 5)
    assert top[0].content.startswith("Caroline wants to pursue")


def test_a_run_together_word_finds_its_two_words(store: MemoryStore) -> None:
    store.add("fact", "Melanie", "Melanie's family went on a road trip to the canyon")
    for place in ("the gym", "a museum", "the beach", "school"):
        store.add("fact", "Melanie", f"Melanie went to {place}")
    top = store.search("When did Melanie go on a roadtrip?", 5)
    assert "road trip" in top[0].content


def test_a_word_some_row_holds_is_never_respelt(store: MemoryStore) -> None:
    store.add("fact", "Jon", "Jon sold his house")
    store.add("fact", "Jon", "Jon saw a horse")
    assert [r.content for r in store.search("house", 5)] == ["Jon sold his house"]


def test_the_question_frame_does_not_match(store: MemoryStore) -> None:
    """'What kind of writing': 'kind' is the question's frame; it matched 'kind words'."""
    store.add("fact", "Joanna", "Joanna appreciates Nate's kind words and encouragement")
    store.add("fact", "Joanna", "Joanna is heavily invested in writing projects for the screen")
    top = store.search("What kind of writing does Joanna do?", 5)
    assert top[0].content.startswith("Joanna is heavily invested in writing")


def test_respelling_reads_a_bounded_part_of_the_vocabulary(
    store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_mod, "FUZZY_SCAN", 5)
    for i in range(40):
        store.add("fact", "x", f"pword{i:02d} pwords{i:02d}")
    reads: list[Any] = []
    store.conn.exec_trace = lambda _c, sql, b: reads.append((sql, b)) or True
    store.search("pwordzzq", 5)
    scans = [b for sql, b in reads if "memory_vocab WHERE term >=" in sql]
    assert scans and all(b[-1] == 5 for b in scans)


def test_the_bench_reads_evidence_ids_given_as_one_list() -> None:
    """`[text, ["D15:3", "D15:5"]]`: the bench stored such rows with no evidence id."""
    spec = importlib.util.spec_from_file_location("mq", ROOT / "bench" / "memory_quality.py")
    assert spec is not None and spec.loader is not None
    mq = importlib.util.module_from_spec(spec)
    sys.modules["mq"] = mq
    spec.loader.exec_module(mq)
    assert mq.dia_ids([["D15:3", "D15:5"]]) == {"D15:3", "D15:5"}
    assert mq.dia_ids(["D1:2", ["D:3:4"], 7]) == {"D1:2", "D3:4"}
