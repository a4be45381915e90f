"""Recall ranking (issue 30): stems, exact over stem, content words, subject, recency as a
tie-breaker; the query builder never makes an FTS5 syntax error; migration 0008 re-indexes
an existing database in place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gantry import db
from gantry.memory import ranking
from gantry.memory.ranking import Term, Tokens
from gantry.memory.store import MemoryStore
from tests.schema import database_at

DAY = 86_400.0


class Clock:
    def __init__(self, t: float = 1_780_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(tmp_path: Path, clock: Clock) -> Any:
    conn = db.connect(tmp_path / "g.db")
    yield MemoryStore(conn, clock=clock)
    conn.close()


def ids(rows: list[Any]) -> list[str]:
    return [r.id for r in rows]


# ---------------------------------------------------------------------- ranking


def test_word_forms_match_by_stem_and_exact_words_rank_first(store: MemoryStore) -> None:
    stem_only, _ = store.add("fact", "ana", "adopted a cat from the shelter")
    exact, _ = store.add("fact", "ana", "wants to adopt a dog one day")
    assert ids(store.search("adopt")) == [exact.id, stem_only.id]
    assert ids(store.search("which games")) == []
    game, _ = store.add("fact", "ana", "plays a board game on Sundays")
    assert ids(store.search("which games does she play?")) == [game.id]


def test_a_strong_old_match_beats_a_weak_fresh_one(store: MemoryStore, clock: Clock) -> None:
    """Recency breaks ties; it no longer divides relevance by 1 + age/30 days."""
    old, _ = store.add("fact", "chris", "climbs at the boulder gym on Tuesdays")
    clock.t += 300 * DAY
    store.add("episode", "chris", "went to the gym")
    assert ids(store.search("where does chris climb boulders?"))[0] == old.id


def test_rows_about_the_named_subject_win(store: MemoryStore) -> None:
    about, _ = store.add("person", "mom", "drinks green tea every morning")
    store.add("fact", "chris", "drinks green tea with mom")
    assert ids(store.search("what does mom drink?"))[0] == about.id


def test_stopwords_do_not_pull_rows_in(store: MemoryStore) -> None:
    for i in range(80):
        store.add("episode", "log", f"it was what it was, and that is the way {i}")
    target, _ = store.add("fact", "mom", "her birthday is in March")
    assert ids(store.search("what is the birthday that it was?")) == [target.id]
    assert store.search("what is it?")  # nothing but stopwords: they are the query


def test_forget_by_query_still_needs_every_word_as_written(store: MemoryStore) -> None:
    plural, _ = store.add("fact", "ana", "plays games in the park")
    singular, _ = store.add("fact", "ana", "plays a game in the park")
    deleted, more = store.forget("games park")
    assert ids(deleted) == [plural.id] and more == 0
    assert ids(store.search("game park")) == [singular.id]


def test_every_query_word_counts_for_a_candidate_beyond_the_per_term_cap(
    store: MemoryStore,
) -> None:
    """A common word's newest matches are capped (PER_TERM); the re-score still credits an
    older row holding it (a guard for the re-score, not a fix: the old ranking passed too)."""
    old, _ = store.add("fact", "nate", "plays video games with friends")
    for i in range(100):
        store.add("episode", "nate", f"nate said hello {i}")
    store.add("fact", "joanna", "watched a video about cooking")
    assert ids(store.search("what video games does nate play?"))[0] == old.id


def test_the_row_stored_next_completes_the_best_match(store: MemoryStore) -> None:
    """Issue 45: an answer often goes on in the next statement. The sequel that holds the
    query word the best row lacks ranks first; one that only follows ranks right after."""
    race, _ = store.add("fact", "Melanie", "Melanie ran a charity race for mental health")
    realizing, _ = store.add("fact", "Melanie", "Melanie is realizing the value of self-care")
    store.add("fact", "Melanie", "Melanie went to a charity concert")
    assert ids(store.search("What did Melanie realize after the charity race?"))[:2] == [
        realizing.id, race.id]
    for i in range(3):
        store.add("fact", "Melanie", f"Melanie read a book about race history {i}")
    game, _ = store.add("fact", "Nate", "Nate won a big tournament playing Valorant")
    after, _ = store.add("fact", "Nate", "Nate was proud of it, a dream come true")
    store.add("fact", "Nate", "Nate says tournament prizes keep him going")
    assert ids(store.search("What tournament did Nate win playing Valorant?"))[:2] == [
        game.id, after.id]


def test_a_sequel_needs_the_same_subject_the_same_hour_and_a_query_word(
    store: MemoryStore, clock: Clock,
) -> None:
    race, _ = store.add("fact", "mel", "mel ran a charity race")
    store.add("fact", "caro", "caro is realizing things")  # another subject
    assert ids(store.search("what did mel realize after the race?"))[0] == race.id
    bowl, _ = store.add("fact", "mel", "mel made a clay bowl")
    clock.t += 2 * 3600.0
    store.add("fact", "mel", "mel is realizing pottery calms her")  # two hours later
    assert ids(store.search("what did mel realize about the clay bowl?"))[0] == bowl.id
    cup, _ = store.add("fact", "ana", "ana bought a blue cup")
    store.add("fact", "ana", "it was on sale")  # no word of the query: never shown for it
    assert ids(store.search("where is the blue cup?")) == [cup.id]


def test_an_irregular_form_counts_toward_its_words_frequency(store: MemoryStore) -> None:
    """'gone' is as common as 'went' is: a row saying 'went' does not outweigh the one
    saying 'beach' for 'gone to the beach' (family document frequency)."""
    for place in ("the gym", "work", "a concert", "the park", "school", "a party"):
        store.add("fact", "mel", f"mel went to {place} with friends")
    beach, _ = store.add("fact", "mel", "mel loves family beach trips with her kids")
    for i in range(3):
        store.add("fact", "ana", f"ana swims at the beach on day {i} of her summer holiday")
    assert ids(store.search("how many times has mel gone to the beach?"))[0] == beach.id


# ---------------------------------------------------------------------- pure parts


def test_query_words_drop_stopwords_unless_nothing_is_left() -> None:
    assert ranking.query_words("What did Caroline research?") == ["caroline", "research"]
    assert ranking.query_words("who am I") == ["who", "am", "i"]
    assert ranking.query_words("*** --- ()") == []
    assert len(ranking.query_words(" ".join(f"w{i}" for i in range(50)))) == ranking.QUERY_TERMS


def test_query_words_drop_the_frame_of_how_long_and_how_many() -> None:
    assert ranking.query_words("How long has Nate had his turtles?") == ["nate", "had", "turtles"]
    assert ranking.query_words("how many times has she won?") == ["times", "won"]
    assert ranking.query_words("Was the walk long?") == ["walk", "long"]
    assert ranking.query_words("how long") == ["how", "long"]


def test_query_words_keep_have_where_it_is_the_main_verb() -> None:
    assert ranking.query_words("What pets does Nate have?") == ["pets", "nate", "have"]
    assert ranking.query_words("When did Caroline and Mel have a picnic?") == [
        "caroline", "mel", "have", "picnic"]
    assert ranking.query_words("How long has Nate had his turtles?") == ["nate", "had", "turtles"]
    # an auxiliary: of a perfect ('has faced'), before 'been' or 'to', with no auxiliary first
    assert ranking.query_words("What changes has Caroline faced?") == ["changes", "caroline",
                                                                       "faced"]
    assert ranking.query_words("Would Caroline have been happy?") == ["caroline", "happy"]
    assert ranking.query_words("Does John have to work?") == ["john", "work"]
    assert ranking.query_words("Have you had lunch?") == ["had", "lunch"]
    assert ranking.query_words("Nate had turtles") == ["nate", "turtles"]  # not a question
    assert ranking.query_words("What does Nate do?") == ["nate"]
    assert ranking.query_words("What console does Nate own?") == ["console", "nate", "own"]
    assert ranking.query_words("Did she start her own store?") == ["start", "store"]


AUX = st.sampled_from(["does", "did", "will", "has", "is", "was", "and", "the"])
NAME = st.lists(st.sampled_from(["nate", "mel", "ana", "her", "kids"]), min_size=1, max_size=4)


@given(aux=AUX, subject=NAME, verb=st.sampled_from(["have", "had", "own"]),
       after=st.sampled_from(["turtles", "been", "to", "a", ""]))
def test_have_counts_only_after_an_auxiliary_and_a_short_subject(
    aux: str, subject: list[str], verb: str, after: str,
) -> None:
    """The main-verb reading needs an auxiliary (do, a modal, have) one to three words before
    the verb, not a possessive right before it ('her own') and no 'been' / 'to' after it;
    otherwise 'have' / 'own' stays a stopword."""
    query = " ".join(["what", aux, *subject, verb, after, "today"])
    main = (aux in {"does", "did", "will", "has"} and len(subject) <= 3
            and subject[-1] != "her" and after not in {"been", "to"})
    assert (verb in ranking.query_words(query)) == main


def test_a_question_about_what_someone_has_finds_the_row_saying_has(store: MemoryStore) -> None:
    has, _ = store.add("fact", "nate", "nate has two turtles at home")
    store.add("fact", "nate", "nate saw turtles at a zoo")  # newer, as long
    assert ids(store.search("how many turtles does nate have?"))[0] == has.id


WORDS = st.sampled_from(["race", "realize", "charity", "mel", "walk", "cake"])
ROW = st.lists(WORDS, min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(query=st.lists(st.tuples(WORDS, st.floats(0.1, 6.0)), min_size=1, max_size=4,
                      unique_by=lambda t: t[0]),
       best=ROW, sequel=ROW, best_bonus=st.floats(0.0, 5.0), own=st.floats(0.0, 30.0))
def test_sequel_score_never_lowers_and_outranks_only_with_new_words(
    query: list[tuple[str, float]], best: list[str], sequel: list[str], best_bonus: float,
    own: float,
) -> None:
    terms = [Term((w,), (w,), weight) for w, weight in query]
    best_tokens, sequel_tokens = _tokens(["x"], best), _tokens(["x"], sequel)
    head = ranking.Candidate(ranking.relevance(terms, best_tokens, 5.0) + best_bonus, 1, None,
                             best_tokens)
    after = ranking.Candidate(own, 2, None, sequel_tokens)
    score = ranking.sequel_score(terms, head, after, 5.0)
    assert score >= own
    if not any(ranking.holds(t, sequel_tokens) for t in terms):
        assert score == own
        return
    new = [t for t in terms
           if not ranking.holds(t, best_tokens) and ranking.holds(t, sequel_tokens)]
    if score > max(own, head.score):
        assert new  # it passes the best row only with query words that row lacks
    if not new:
        assert score == max(own, ranking.SEQUEL_WEIGHT * head.score)


def _tokens(subject: list[str], content: list[str], stems: list[str] | None = None) -> Tokens:
    return Tokens(subject, subject + content, subject + (content if stems is None else stems))


def test_relevance_prefers_exact_and_subject_matches() -> None:
    term = Term(("adopt",), ("adopt",), 2.0)
    exact = ranking.relevance([term], _tokens(["ana"], ["adopt", "a", "dog"]), 3.0)
    stem = ranking.relevance(
        [term], _tokens(["ana"], ["adopted", "a", "dog"], ["adopt", "a", "dog"]), 3.0
    )
    assert exact > stem > 0
    name = Term(("ana",), ("ana",), 1.0)
    about = ranking.relevance([name], _tokens(["ana"], ["has", "a", "dog"]), 3.0)
    naming = ranking.relevance([name], _tokens(["bo"], ["ana", "a", "dog"]), 3.0)
    assert about > naming > 0
    assert ranking.relevance([term], _tokens([], ["no", "match"]), 2.0) == 0.0


@settings(max_examples=300, deadline=None)
@given(query=st.lists(st.tuples(WORDS, st.floats(0.1, 6.0)), min_size=1, max_size=4,
                      unique_by=lambda t: t[0]),
       rows=st.lists(ROW, min_size=0, max_size=9), sequel=st.booleans())
def test_first_order_reorders_only_the_first_rows(
    query: list[tuple[str, float]], rows: list[list[str]], sequel: bool,
) -> None:
    """first_order changes which row is first, never which rows are the first FIRST_ROWS nor
    anything after them, and keeps every candidate's score."""
    terms = [Term((w,), (w,), weight) for w, weight in query]
    tokens = [_tokens(["x"], r) for r in rows]
    ranked = sorted(
        (ranking.Candidate(ranking.relevance(terms, t, 5.0) + ranking.pairs_bonus(terms, t, 5.0),
                           i, None, t) for i, t in enumerate(tokens)),
        key=lambda c: (c.score, c.id), reverse=True)
    passage = (ranked[0], ranked[1]) if sequel and len(ranked) > 1 else None
    out = ranking.first_order(terms, ranked, 5.0, passage)
    n = ranking.FIRST_ROWS
    assert out[n:] == ranked[n:]
    assert sorted(out[:n], key=lambda c: c.id) == sorted(ranked[:n], key=lambda c: c.id)


@settings(max_examples=300, deadline=None)
@given(query=st.lists(st.tuples(WORDS, st.floats(0.1, 6.0)), min_size=1, max_size=4,
                      unique_by=lambda t: t[0]),
       subject=st.lists(WORDS, max_size=2), row=ROW, avg=st.floats(1.0, 30.0),
       k1=st.floats(0.1, 2.0), b=st.floats(0.0, 1.0))
def test_a_rows_parts_give_its_score_under_any_k1_and_b(
    query: list[tuple[str, float]], subject: list[str], row: list[str], avg: float, k1: float,
    b: float,
) -> None:
    """first_order scores the first rows again from their Parts, not their tokens."""
    terms = [Term((w,), (w,), weight) for w, weight in query]
    tokens = _tokens(subject, row)
    assert ranking.bm25(ranking.parts(terms, tokens), avg, k1, b) == pytest.approx(
        ranking.relevance(terms, tokens, avg, k1, b)
        + ranking.pairs_bonus(terms, tokens, avg, k1, b))


def _said(exact: str, stems: str) -> Tokens:
    """A row about 'caroline' as its exact and stemmed tokens, each a space-separated text."""
    return Tokens(["caroline"], exact.split(), stems.split())


def test_first_place_goes_to_the_rarer_word_in_the_longer_row() -> None:
    """Issue 45, LoCoMo: for 'what workshop did Caroline attend recently?' BM25 (K1, B)
    ranked the short row saying 'attended ... recently' above the longer one saying
    'attended ... workshop', the rarer word; the flatter BM25 of the first rows puts the
    workshop first. The two rows and the candidates' mean length as recall had them."""
    terms = [Term(("workshop",), ("workshop",), 4.3), Term(("caroline",), ("carolin",), 0.46),
             Term(("attend",), ("attend",), 2.97), Term(("recently",), ("recent",), 3.35)]
    group = _said(
        "caroline caroline attended an lgbtq support group recently and found the "
        "transgender stories inspiring",
        "carolin carolin attend an lgbtq support group recent and found the transgend stori "
        "inspir")
    workshop = _said(
        "caroline caroline attended an lgbtq counseling workshop focused on therapeutic "
        "methods and supporting trans individuals finding it enlightening and inspiring",
        "carolin carolin attend an lgbtq counsel workshop focus on therapeut method and "
        "support tran individu find it enlighten and inspir")
    avg = 17.5
    ranked = sorted(
        (ranking.Candidate(ranking.relevance(terms, t, avg) + ranking.pairs_bonus(terms, t, avg),
                           i, None, t) for i, t in enumerate([workshop, group])),
        key=lambda c: (c.score, c.id), reverse=True)
    assert ranked[0].tokens is group
    assert ranking.first_order(terms, ranked, avg)[0].tokens is workshop


def test_recency_is_a_bounded_tie_breaker() -> None:
    assert ranking.recency(0) == pytest.approx(1 + ranking.RECENCY_WEIGHT)
    assert 1.0 <= ranking.recency(10_000) < ranking.recency(30) < ranking.recency(0)


TEXT_WORDS = st.lists(
    st.sampled_from(["Ana", "ana", "Paris", "Bo", "for", "three", "years", "since", "ago",
                     "painted", ".", "'Dune'", "a", "while", "Friday"]),
    max_size=10,
).map(" ".join)


def test_answer_shape_reads_what_a_question_asks_for() -> None:
    shape = ranking.answer_shape
    assert shape("How long has Melanie been practicing art?") == "duration"
    assert shape("For how long has Nate had his turtles?") == "duration"
    assert shape("How long ago was Caroline's 18th birthday?") is None  # a time
    assert shape("What book did Caroline recommend?") == "name"
    assert shape("Which US cities has John been to?") == "name"
    assert shape("What fantasy movies does Tim like?") == "name"
    assert shape("What is the name of Maria's puppy?") == "name"
    assert shape("What are Maria's dogs' names?") == "name"
    assert shape("What type of movies does Nate enjoy?") is None  # a genre
    assert shape("What did John's team win?") is None
    assert shape("In which month's game did he score?") is None
    assert shape("What did Melanie paint?") is None
    assert shape("How many games has John won?") is None


def test_a_duration_is_an_amount_of_time_not_a_time() -> None:
    assert ranking.states_duration("Melanie has been into art for seven years")
    assert ranking.states_duration("has known her friends for 4 years, since moving")
    assert ranking.states_duration("has been surfing since college")
    assert ranking.states_duration("kept the pose for a while")
    assert not ranking.states_duration("went camping two weeks ago")
    assert not ranking.states_duration("enjoys painting sunsets every year")


def test_a_name_is_a_new_capitalised_word_inside_a_sentence() -> None:
    known = frozenset({"tim", "john", "book"})
    assert ranking.names_something("Tim is reading a book by Patrick Rothfuss.", known)
    assert ranking.names_something("Tim finished reading 'A Dance with Dragons'.", known)
    assert ranking.names_something("Tim loves NYC", known)
    assert not ranking.names_something("Tim told John about a book.", known)  # known
    assert not ranking.names_something("Tim read a book last Friday. Great read", known)
    assert not ranking.names_something("Reading calms Tim; Books help too.", known)
    assert not ranking.names_something("", known)


@given(query=st.sampled_from(["How long has Ana painted?", "What book does Ana like?",
                              "What does Ana paint?"]),
       content=TEXT_WORDS, known=st.frozensets(st.sampled_from(["ana", "bo", "paris"])))
def test_shape_factor_only_ever_lifts_a_row_of_the_asked_shape(
    query: str, content: str, known: frozenset[str],
) -> None:
    kind = ranking.answer_shape(query)
    factor = ranking.shape_factor(None if kind is None else ranking.Shape(kind, known), content)
    if kind == "duration":
        want = ranking.DURATION_BOOST if ranking.states_duration(content) else 1.0
    elif kind == "name":
        want = ranking.NAME_BOOST if ranking.names_something(content, known) else 1.0
    else:
        want = 1.0
    assert factor == want
    assert ranking.shape_factor(None, content) == 1.0


def test_a_how_long_question_finds_the_row_stating_a_duration(store: MemoryStore) -> None:
    duration, _ = store.add("fact", "mel", "mel has been into art for seven years")
    store.add("fact", "mel", "mel enjoys expressing emotions through art and abstract art")
    store.add("fact", "mel", "mel admires art about self-acceptance")
    assert ids(store.search("how long has mel been practicing art?"))[0] == duration.id


def test_a_question_for_a_book_finds_the_row_naming_one(store: MemoryStore) -> None:
    named, _ = store.add("fact", "tim", "tim is reading a fantasy book by Patrick Rothfuss")
    store.add("fact", "tim", "tim is reading a fantasy book that he loves")  # newer, alike
    assert ids(store.search("what fantasy book is tim reading?"))[0] == named.id


TEXT = st.text(
    alphabet=st.sampled_from(list('abc xyz"\'()*-+:^{}[],.;NEAR AND OR NOT\\\x00\n\tüß日本_')),
    max_size=60,
) | st.text(max_size=80)


@settings(max_examples=300, deadline=None)
@given(text=TEXT, joiner=st.sampled_from(["OR", "AND"]))
def test_no_text_makes_an_fts5_syntax_error(text: str, joiner: str) -> None:
    """The builder's output, and each word it quotes, are valid MATCH expressions for the
    stemmed index (a quoted string is a plain token sequence to FTS5)."""
    conn = apsw.Connection(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5 (subject, content, "
                 "tokenize = 'porter unicode61 remove_diacritics 2')")
    conn.execute("INSERT INTO t VALUES ('seed', 'NEAR AND \"quoted\" (paren * star')")
    words = ranking.query_words(text)
    expr = ranking.match_expr(words, joiner)
    assert (expr is None) == (not words)
    for query in [expr, *(ranking.quoted(w) for w in words)]:
        if query is not None:
            conn.execute("SELECT count(*) FROM t WHERE t MATCH ?", (query,)).fetchone()


@settings(max_examples=200, deadline=None)
@given(query=TEXT)
def test_recall_ranks_any_text_without_error(query: str, tmp_path_factory: Any) -> None:
    conn = db.connect(tmp_path_factory.mktemp("r") / "g.db")
    store = MemoryStore(conn)
    store.add("fact", "seed", 'NEAR AND "quoted" (paren * star -minus üß 日本')
    assert len(store.search(query)) <= 1
    assert len(store.hydrate(query)) <= 1
    conn.close()


# ---------------------------------------------------------------------- migration 0008


def test_migration_0008_reindexes_a_0007_database_in_place(tmp_path: Path) -> None:
    path = tmp_path / "gantry.db"
    conn = database_at(path, 7)
    t = "2026-01-01T00:00:00.000000Z"
    rows = [
        ("fact", "ana", "adopted a cat from the shelter", "chat", 1.0, t, t, None, None),
        ("episode", "ana", "played board games on Sunday", "consolidation", 0.5, t, t,
         "2099-01-01T00:00:00.000000Z", None),
        ("fact", "ana", "had a cat", "chat", 1.0, t, t, None, 1),
    ]
    with conn:
        for r in rows:
            conn.execute(
                "INSERT INTO memory (kind, subject, content, source, confidence, created_at, "
                "updated_at, expires_at, superseded_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", r)
    before = conn.execute("SELECT * FROM memory ORDER BY id").fetchall()
    assert conn.execute("SELECT rowid FROM memory_fts WHERE memory_fts MATCH 'adopt'"
                        ).fetchall() == []  # the 0007 index has no stems
    conn.close()

    conn = db.connect(path)  # applies 0008 and later (0012 adds a column at the end)
    after = conn.execute("SELECT * FROM memory ORDER BY id").fetchall()
    assert [r[: len(before[0])] for r in after] == before
    conn.execute("INSERT INTO memory_fts (memory_fts) VALUES ('integrity-check')")
    store = MemoryStore(conn, clock=lambda: 1_767_225_600.0)  # 2026-01-01
    assert [r.content for r in store.search("adopt")] == [rows[0][2]]
    assert [r.content for r in store.search("which game")] == [rows[1][2]]
    new, _ = store.add("fact", "bo", "likes hiking")  # the re-created triggers index new rows
    assert ids(store.search("hike")) == [new.id]
    store.delete(int(new.id))
    assert store.search("hike") == []
    conn.close()
