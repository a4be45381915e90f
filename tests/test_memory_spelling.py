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
from gantry.memory.store import MemoryStore

ROOT = Path(__file__).resolve().parent.parent
LETTERS = st.text(alphabet="abcde", max_size=9)


@pytest.fixture
def store(tmp_path: Path) -> Any:
    conn = db.connect(tmp_path / "g.db")
    yield MemoryStore(conn)
    conn.close()


@given(st.text(max_size=14), st.text(alphabet="abcdefgh", max_size=14))
def test_variants_are_bounded_and_never_the_word_itself(word: str, stem: str) -> None:
    out = ranking.variants(word, stem)
    assert len(out) <= ranking.VARIANTS_MAX and stem not in out
    assert len(stem) >= 5 or out == []
    assert all(v not in ranking.STOPWORDS for v in out)


@given(st.text(alphabet="abcdefgh", min_size=5, max_size=12))
def test_every_variant_is_one_slip_from_the_stem_or_a_split(stem: str) -> None:
    """A swap of neighbours, a dropped letter, a cut after 4+ letters, or a split word."""
    for v in ranking.variants(stem, stem):
        if " " in v:
            assert v.replace(" ", "") == stem
        elif len(v) == len(stem):
            i = next(i for i in range(len(v)) if v[i] != stem[i])
            assert v[i] == stem[i + 1] and v[i + 1] == stem[i] and v[i + 2 :] == stem[i + 2 :]
        else:
            assert len(v) >= 4 and (stem.startswith(v) or any(
                stem[:i] + stem[i + 1 :] == v for i in range(len(stem))))


def test_variants_know_the_usual_slips() -> None:
    assert "receiv" in ranking.variants("recieved", "reciev")  # two letters swapped
    assert "festiv" in ranking.variants("fesetival", "fesetiv")  # a letter too many
    assert "educ" in ranking.variants("educaton", "educaton")  # what the stemmer missed
    assert "road trip" in ranking.variants("roadtrip", "roadtrip")
    assert ranking.variants("wise", "wise") == []  # under 5 letters: too many neighbours


def test_only_variants_some_candidate_holds_are_kept() -> None:
    many = tuple(((f"v{i}",), 0.8) for i in range(ranking.VARIANTS_KEEP + 5))
    term = ranking.Term(("x",), ("x",), 1.0, many)
    kept = ranking.present([term], {"v3", "v7", "zz"})
    assert [a[0] for a in kept[0].alts] == [("v3",), ("v7",)]
    few = ranking.Term(("y",), ("y",), 1.0, many[:3])
    assert ranking.present([few], set())[0] == few  # a lexicon's few words stay as they are


@given(st.text(alphabet="abcxyz", max_size=12))
def test_splits_join_back_into_the_word(word: str) -> None:
    for a, b in ranking.splits(word):
        assert a + b == word and len(a) >= 3 and len(b) >= 3


CASES = {
    # 'recieved' is in no row: before, the question found only rows naming Joanna.
    "misspelt": ("What has Joanna recieved?", "Joanna received a letter from the studio",
                 "Joanna", ["Joanna wants a dog", "Joanna wants to see Paris", "Joanna wants tea"]),
    "run together": ("When did Melanie go on a roadtrip?", "Melanie's family went on a road trip",
                     "Melanie", ["Melanie went to the gym", "Melanie went to a museum",
                                 "Melanie went to the beach", "Melanie went to school"]),
    # 'What kind of writing': 'kind' is the question's frame; it matched 'kind words'.
    "question frame": ("What kind of writing does Joanna do?",
                       "Joanna is heavily invested in writing projects for the screen",
                       "Joanna", ["Joanna appreciates Nate's kind words and encouragement"]),
}


@pytest.mark.parametrize("case", CASES)
def test_the_row_meant_ranks_first(store: MemoryStore, case: str) -> None:
    question, meant, subject, others = CASES[case]
    store.add("fact", subject, meant)
    for other in others:
        store.add("fact", subject, other)
    assert store.search(question, 5)[0].content == meant


def test_a_word_some_row_holds_is_never_respelt(store: MemoryStore) -> None:
    store.add("fact", "Jon", "Jon sold his house")
    store.add("fact", "Jon", "Jon saw a horse")
    assert [r.content for r in store.search("house", 5)] == ["Jon sold his house"]


def test_a_misspelt_word_costs_one_bounded_index_read(store: MemoryStore) -> None:
    for i in range(40):
        store.add("fact", "x", f"pword{i:02d} pwords{i:02d}")
    reads: list[Any] = []
    store.conn.exec_trace = lambda _c, sql, b: reads.append(b) or True
    store.search("pwordzzq", 5)
    matches = [b[0] for b in reads if b and isinstance(b[0], str) and '"' in b[0]]
    assert len(matches) == 2  # the word itself, then its variants at once
    assert matches[1].count(" OR ") < ranking.VARIANTS_MAX


def test_the_bench_reads_evidence_ids_given_as_one_list() -> None:
    """`[text, ["D15:3", "D15:5"]]`: the bench stored such rows with no evidence id."""
    spec = importlib.util.spec_from_file_location("mq", ROOT / "bench" / "memory_quality.py")
    assert spec is not None and spec.loader is not None
    mq = importlib.util.module_from_spec(spec)
    sys.modules["mq"] = mq
    spec.loader.exec_module(mq)
    assert mq.dia_ids([["D15:3", "D15:5"]]) == {"D15:3", "D15:5"}
    assert mq.dia_ids(["D1:2", ["D:3:4"], 7]) == {"D1:2", "D3:4"}
