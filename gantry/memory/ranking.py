"""Recall ranking, pure parts: which words of a query count, and how a candidate row scores.

The store (store.py) finds candidates in the Porter-stemmed FTS5 index and tokenizes them
with the same FTS5 tokenizers; everything here works on those token lists, so it can be
property-tested without a database. The constants were tuned on conversational-memory
questions (bench/memory_quality.py); docs/memory.md explains the ranking.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

QUERY_TERMS = 16
K1 = 1.2  # BM25 term-frequency saturation
B = 0.75  # BM25 length normalization
SUBJECT_BOOST = 1.25  # the query names what the row is about (a word of its subject)
STEM_WEIGHT = 0.9  # a match by stem only ('adopted' for 'adopt') against an exact match
FORM_WEIGHT = STEM_WEIGHT  # an irregular inflection ('gave' for 'give') is a stem match
DERIVED_WEIGHT = 0.8  # a derivation ('marriage' for 'married'): the same idea, another word
RELATED_WEIGHT = 0.3  # a related word ('kid' for 'child'): well below any form of the word
PAIR_WEIGHT = 0.25  # two query words side by side in a row: a phrase
PAIR_WINDOW = 2  # ... or one word apart ('friends from church'), counted half
FUZZY_WEIGHT = 0.8  # a near spelling of a word no row holds ('persue' for 'pursue')
VARIANTS_MAX = 48  # spellings looked for per unmatched word, at most (one index read)
VARIANTS_KEEP = 32  # a word with more alternates than this keeps only those rows hold
SEQUEL_WEIGHT = 0.85  # the row stored right after the best one ranks at least this close
SEQUEL_NEW = 0.1  # ... and first when its words the best row lacks score this much of it
RECENCY_WEIGHT = 0.1  # a fresh row scores at most this much more than an old one
RECENCY_DAYS = 30.0  # ... halving with every RECENCY_DAYS of age
DURATION_BOOST = 1.5  # a 'how long' question: a row stating a duration ('for seven years')
NAME_BOOST = 1.2  # a 'which book / city / ...' question: a row naming something new
FIRST_ROWS = 5  # the first rows, which first_order puts in order by a flatter BM25:
FIRST_K1 = 0.5  # ... a word said twice counts little more than once
FIRST_B = 0.5  # ... and a longer row that holds the words asked for is penalized less
_WORD = re.compile(r"\w+")
# Chinese, Japanese and Korean letters: Han (with its radicals, numerals and marks like 々),
# kana (half-width too), bopomofo and Hangul. unicode61 makes a run of them one token, so
# they also get overlapping pairs (see grams); only word characters (\w) ever reach this.
_CJK_CHARS = (
    "\u1100-\u11ff\u2e80-\u2fdf\u3005-\u3007\u3021-\u3029\u3031-\u3035\u3038-\u303c"
    "\u3041-\u309f\u30a1-\u30ff\u3105-\u312f\u3131-\u318f\u31a0-\u31bf\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\uff66-\uff9f"
    "\uffa0-\uffdc\U00020000-\U0003ffff"
)
_CJK = re.compile(f"[{_CJK_CHARS}]+")
_PIECE = re.compile(f"[{_CJK_CHARS}]+|[^{_CJK_CHARS}]+")

# Function words of English questions and statements: they match most rows and carry no
# topic. Dropped from recall queries (never from forget's all-words match), unless a query
# has nothing else.
_STOPWORDS = """
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its
itself just me more most my myself no nor not now of off on once only or other our ours
ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself
yourselves s t ve ll re d m
"""
# A question's frame ('what kind of writing', 'which type of dog'): these words are about
# the question, not its topic, and matched 'kind words' before 'writing' (issue 45).
_FRAME = "kind kinds type types sort sorts"
STOPWORDS = frozenset(_STOPWORDS.split()) | frozenset(_FRAME.split())
# 'How long', 'how many', 'how often': the question asks for a duration, a count, a rate;
# the word after 'how' is its frame too ('long' matched 'a long walk', not the duration).
_HOW = re.compile(r"\bhow (long|many|much|often|far|old)\b")
# 'Have' (or 'own') after an auxiliary and the one to three words of its subject is the
# question's main verb, not an auxiliary (nor 'her own'): 'what pets does Nate have', 'how
# long has Nate had his turtles', 'what do Tim and John own' ask what someone has, which rows
# say with has / had ('Nate has turtles'), so it is looked for (with its forms, lexicon.py)
# like a content word. Not before 'been' or 'to' ('would she have been', 'does he have to'),
# where 'have' is an auxiliary again. 'Do' as a main verb ('what does Nate do') stays a
# stopword: it stands for the activity asked about and names none; so does 'be'.
_HAVE = re.compile(
    r"\b(?:do|does|did|will|would|could|can|should|might|may|must|has|have|had)"
    r"(?: [\w'’]+){0,2}? (?!(?:her|his|my|our|their|your|its) )[\w'’]+ (have|had|own)\b"
    r"(?! (?:been|to)\b)"
)


def words(text: str, limit: int = QUERY_TERMS) -> list[str]:
    """Distinct lowercase words of `text` (first `limit`), as a query looks for them.

    A word without CJK letters is itself (unicode61's word). A CJK run has no spaces
    between its words, so it is looked for as its overlapping pairs of letters ('小白' in
    '我的猫叫小白'), or as the one letter it is; grams() indexes both for every run."""
    out: dict[str, None] = {}
    for word in _WORD.findall(text.lower()):
        for piece in _pieces(word, index=False):
            out.setdefault(piece, None)
            if len(out) >= limit:
                return list(out)
    return list(out)


def grams(text: str) -> list[str]:
    """The extra index words of `text`'s CJK letters: every letter and every overlapping
    pair of each CJK run, plus the non-CJK parts of a word that mixes scripts ('iphone' of
    'iPhone好き'). Empty for text without CJK letters, so its index is what it always was."""
    if _CJK.search(text) is None:
        return []
    return [
        piece
        for word in _WORD.findall(text.lower())
        if _CJK.search(word) is not None
        for piece in _pieces(word, index=True)
    ]


def _pieces(word: str, index: bool) -> list[str]:
    """One `\\w+` word as query (index=False) or index (index=True) words; see words()."""
    if _CJK.search(word) is None:
        return [word]
    out: list[str] = []
    for part in _PIECE.findall(word):
        if _CJK.match(part) is None or len(part) == 1:
            out.append(part)
        else:
            pairs = [part[i : i + 2] for i in range(len(part) - 1)]
            out += [*part, *pairs] if index else pairs
    return out


def query_words(text: str, limit: int = QUERY_TERMS) -> list[str]:
    """The words recall looks for: every distinct content word (stopwords and the word of a
    'how long' / 'how many' frame dropped, 'have' kept where it is the main verb), or all
    words when the query is nothing but those ('who am I')."""
    every = words(text, 10 * limit)
    lower = text.lower()
    frame = set(_HOW.findall(lower))
    main = set(_HAVE.findall(lower))
    content = [w for w in every if (w not in STOPWORDS or w in main) and w not in frame]
    return (content or every)[:limit]


def quoted(word: str) -> str:
    """One FTS5 string token: operators, `*`, `:`, `^`, quotes and brackets lose meaning."""
    return '"' + word.replace('"', '""') + '"'


def match_expr(terms: Sequence[str], joiner: str = "OR") -> str | None:
    """An FTS5 MATCH expression over `terms` that is never a syntax error; None if empty."""
    parts = [quoted(t) for t in terms if t]
    return f" {joiner} ".join(parts) if parts else None


def idf(df: float, total: float) -> float:
    """BM25's inverse document frequency (the +1 form: never negative)."""
    return math.log(1.0 + (total - df + 0.5) / (df + 0.5))


@dataclass(frozen=True)
class Term:
    """One query word: its exact tokens, its stems (as the index has them) and its IDF."""

    exact: tuple[str, ...]
    stems: tuple[str, ...]
    weight: float
    # Other words that count for it, as (stems, factor): an inflection the stemmer misses
    # ('gave' for 'give', FORM_WEIGHT), a derivation ('marriage' for 'marry', DERIVED_WEIGHT)
    # or a related word ('kid' for 'child', RELATED_WEIGHT).
    alts: tuple[tuple[tuple[str, ...], float], ...] = ()


class Tokens(NamedTuple):
    """A candidate row as token lists: its subject's words, and subject + content as exact
    (unicode61) and stemmed (Porter) tokens."""

    subject: Sequence[str]
    exact: Sequence[str]
    stems: Sequence[str]


class Parts(NamedTuple):
    """A row's score for a query before BM25's k1 and b enter it (bm25() puts them in), so
    first_order scores it again without reading its tokens again: each query word the row
    holds as (IDF × match factor, tf), whether one is a word of its subject, each two query
    words close together as (PAIR_WEIGHT × their mean IDF, weighted count), its length.
    Tuples like Tokens and Candidate, not frozen dataclasses: one of each is made for
    every candidate of every recall, and a tuple is made in a fraction of the time."""

    words: tuple[tuple[float, float], ...]
    named: bool
    pairs: tuple[tuple[float, float], ...]
    length: int


class Candidate(NamedTuple):
    """A row recall considers: its score, id, the row itself (any type), its tokens, the
    factor its score includes beyond BM25 (answer shape × recency) and what the score is
    made of (first_order scores it again from those)."""

    score: float
    id: int
    row: Any
    tokens: Tokens
    factor: float = 1.0
    parts: Parts | None = None


def _count(tokens: Sequence[str], want: tuple[str, ...]) -> int:
    """How often the word occurs: the rarest of its tokens (a word may be several tokens)."""
    if len(want) == 1:  # nearly every word: skip the generator
        return tokens.count(want[0])
    return min((tokens.count(t) for t in want), default=0)


def relevance(terms: Sequence[Term], row: Tokens, avg_length: float, k1: float = K1,
              b: float = B) -> float:
    """BM25 of `row` (subject and content as one text) for `terms`, a match by stem alone
    STEM_WEIGHT of an exact one; × SUBJECT_BOOST when a query word is a word of the row's
    subject (a question about Caroline prefers rows about her over rows naming her). A row
    without the word counts the best of its alternates instead (Term.alts: an inflection
    FORM_WEIGHT, a derivation DERIVED_WEIGHT, a related word RELATED_WEIGHT), never more
    than one of them.

    A separate subject column weight (×2) was measured and changed nothing: the boost is
    what makes the subject count. `k1` and `b` are BM25's (first_order uses other ones)."""
    found, named = _words(terms, row)
    return _words_score(found, named, _norm(len(row.stems), avg_length, k1, b), k1)


def parts(terms: Sequence[Term], row: Tokens) -> Parts:
    """What `row`'s score for `terms` is made of (Parts): relevance and pairs_bonus are
    bm25(parts(terms, row), ...)."""
    found, named = _words(terms, row)
    return Parts(tuple(found), named, tuple(_pairs(terms, row)), len(row.stems))


def bm25(made: Parts, avg_length: float, k1: float = K1, b: float = B) -> float:
    """relevance + pairs_bonus of the row `made` was made from, under `k1` and `b`."""
    norm = _norm(made.length, avg_length, k1, b)
    return (_words_score(made.words, made.named, norm, k1)
            + sum(w * n * (k1 + 1.0) / (n + norm) for w, n in made.pairs))


def _norm(length: int, avg_length: float, k1: float, b: float) -> float:
    """BM25's length normalization of a row `length` tokens long."""
    return k1 * (1.0 - b + b * length / max(avg_length, 1.0))


def _words(terms: Sequence[Term], row: Tokens) -> tuple[list[tuple[float, float]], bool]:
    """(IDF × match factor, tf) of each query word `row` holds (by stem, or else its best
    alternate), and whether one of them is a word of the row's subject (see relevance)."""
    found: list[tuple[float, float]] = []
    named = False
    have: set[str] | None = None
    for term in terms:
        tf = _count(row.stems, term.stems)
        if tf > 0:
            named = named or _count(row.subject, term.exact) > 0
            factor = 1.0 if _count(row.exact, term.exact) > 0 else STEM_WEIGHT
        else:
            if not term.alts:
                continue
            if have is None:
                have = set(row.stems)
            tf, factor = _alternate(row.stems, term.alts, have)
            if tf <= 0:
                continue
        found.append((term.weight * factor, tf))
    return found, named


def _words_score(found: Sequence[tuple[float, float]], named: bool, norm: float,
                 k1: float) -> float:
    """BM25 over the words `_words` found, × SUBJECT_BOOST when `named`."""
    score = sum(w * tf * (k1 + 1.0) / (tf + norm) for w, tf in found)
    return score * SUBJECT_BOOST if named else score


def holds(term: Term, row: Tokens) -> bool:
    """Whether `row` holds `term`: the word by stem, or one of its alternates."""
    return _count(row.stems, term.stems) > 0 or _alternate(row.stems, term.alts)[0] > 0


def sequel_score(terms: Sequence[Term], best: Candidate, sequel: Candidate,
                 avg_length: float, k1: float = K1, b: float = B) -> float:
    """The score of `sequel`, the row stored right after `best` (the best-scoring row) about
    the same subject: an answer often goes on in the next statement ('Melanie ran a charity
    race' → 'Melanie is realizing the importance of self-care', for 'what did Melanie
    realize after the race?'), so the two are read as one passage.

    If the sequel holds query words that `best` lacks, by stem (an alternate is too weak a
    sign), and they are worth at least SEQUEL_NEW of `best`'s score, the passage is `best`
    plus what the sequel adds, and the sequel, which completes it, ranks first. Otherwise it
    ranks at least SEQUEL_WEIGHT of `best` (below it, among the first few). Never below its
    own score, and never lifted when it holds no query word at all (recall shows only rows
    that share a word with the query)."""
    if not any(holds(t, sequel.tokens) for t in terms):
        return sequel.score
    missing = [Term(t.exact, t.stems, t.weight) for t in terms if not holds(t, best.tokens)]
    added = relevance(missing, sequel.tokens, avg_length, k1, b)
    if added > 0 and added >= SEQUEL_NEW * best.score:
        return max(sequel.score, best.score + added)
    return max(sequel.score, SEQUEL_WEIGHT * best.score)


def _alternate(
    tokens: Sequence[str], alts: Sequence[tuple[tuple[str, ...], float]],
    have: set[str] | None = None,
) -> tuple[int, float]:
    """(count, factor) of the best-weighted alternate word present in `tokens`, or (0, 0).
    `have` is set(tokens), when the caller has it: a word's dozens of alternates are then
    looked up in it rather than counted in the list one by one."""
    if have is None:
        have = set(tokens)
    best = (0, 0.0)
    for stems, factor in alts:
        if factor > best[1] and stems and stems[0] in have and (tf := _count(tokens, stems)) > 0:
            best = (tf, factor)
    return best


def pairs_bonus(terms: Sequence[Term], row: Tokens, avg_length: float, k1: float = K1,
                b: float = B) -> float:
    """Extra BM25 credit for two query words that stand close together in `row` ('pride
    parade', 'Door Dash', 'church friends' for 'friends from church'): PAIR_WEIGHT × their
    mean IDF per occurrence side by side (either order), half that one word apart,
    saturating like BM25's tf; 0 for a one-word query. Any two of the query's words count,
    not only neighbours in the query ('hiking with her church friends' pairs 'hiking' and
    'friends' too): a full-dependence proximity term, so related words together outrank the
    same words scattered over a row. Measured (issue 45): neighbours in the query only and
    side by side only gave hit@1 0.488, any two within PAIR_WINDOW 0.493, hit@5 unchanged."""
    norm = _norm(len(row.stems), avg_length, k1, b)
    return sum(w * n * (k1 + 1.0) / (n + norm) for w, n in _pairs(terms, row))


def _pairs(terms: Sequence[Term], row: Tokens) -> list[tuple[float, float]]:
    """(PAIR_WEIGHT × mean IDF, weighted count) of each two query words close together in
    `row` (see pairs_bonus); none for a one-word query. Only the positions of the query's
    one-token words are collected, and a row holding fewer than two of them has no pair:
    most candidates, read at no cost beyond one pass over their stems."""
    single = [t for t in terms if len(t.stems) == 1]
    if len(single) < 2:
        return []
    want = {t.stems[0] for t in single}
    at: dict[str, list[int]] = {}
    for i, t in enumerate(row.stems):
        if t in want:
            at.setdefault(t, []).append(i)
    if len(at) < 2:
        return []
    out: list[tuple[float, float]] = []
    for one, two in itertools.combinations(single, 2):
        first, later = at.get(one.stems[0]), at.get(two.stems[0])
        if not first or not later:
            continue
        n = sum(1.0 / abs(y - x) for x in first for y in later
                if 0 < abs(y - x) <= PAIR_WINDOW)
        if n:
            out.append((PAIR_WEIGHT * (one.weight + two.weight) / 2, n))
    return out


def first_order(terms: Sequence[Term], ranked: Sequence[Candidate], avg_length: float,
                passage: tuple[Candidate, Candidate] | None = None) -> list[Candidate]:
    """`ranked` (best first) with its first FIRST_ROWS rows put in order again by the same
    score under a flatter BM25 (k1 FIRST_K1, b FIRST_B); the rest, and so which rows are
    the first FIRST_ROWS, stay as they are. Candidates keep their scores.

    Which rows come first and which one is first are two questions. BM25 as tuned (K1, B)
    picks the first five best; among them, the row that answers is more often the longer
    one holding the rarer word asked for than a short one holding a commoner word, or the
    same word twice ('attended an LGBTQ+ counseling workshop ...' rather than 'attended an
    LGBTQ support group recently ...' for 'what workshop did Caroline attend recently?').
    A lower k1 and b over all candidates (measured, issue 45) let such rows in from
    further down and lost questions at hit@5; at the top only, the same five rows are kept
    and the first place gains (LoCoMo hit@1 0.493 → 0.504: 12 questions won, 4 lost, no
    conversation lower; hit@5 unchanged by construction).
    `passage` is (best, sequel) when the sequel was placed by sequel_score: it is placed
    again from the best row's flatter score, as a passage read with it."""
    head = list(ranked[:FIRST_ROWS])
    if len(head) < 2:
        return list(ranked)

    def flat(c: Candidate) -> float:
        made = c.parts if c.parts is not None else parts(terms, c.tokens)
        return c.factor * bm25(made, avg_length, FIRST_K1, FIRST_B)

    score = {c.id: flat(c) for c in head}
    if passage is not None and passage[1].id in score:
        best, sequel = passage
        score[sequel.id] = sequel_score(
            terms, Candidate(flat(best), best.id, best.row, best.tokens),
            Candidate(score[sequel.id], sequel.id, sequel.row, sequel.tokens),
            avg_length, FIRST_K1, FIRST_B)
    head.sort(key=lambda c: (score[c.id], c.id), reverse=True)
    return head + list(ranked[FIRST_ROWS:])


def variants(word: str, stem: str) -> list[str]:
    """What an unmatched query word may have meant, for the index to check: the word split
    in two ('roadtrip' → 'road trip', a phrase), its stem with two neighbours swapped
    ('torunament') or a letter dropped ('fesetiv' → 'festiv'), and the stem cut after 4+
    letters ('educaton' → 'educ'). A changed or added letter would be 50 times as many
    spellings, too many for one index read (measured: 16 ms for 450 at 1,000 rows). Stems
    under 5 letters get none (too many words are that close); at most VARIANTS_MAX."""
    if len(stem) < 5 or not stem.isascii() or not stem.isalpha():
        return []
    out: dict[str, None] = {}
    for a, b in splits(word):
        out.setdefault(f"{a} {b}", None)
    for i in range(len(stem) - 1):
        out.setdefault(stem[:i] + stem[i + 1] + stem[i] + stem[i + 2 :], None)
    for i in range(len(stem)):
        out.setdefault(stem[:i] + stem[i + 1 :], None)
    for n in range(len(stem) - 1, max(3, len(stem) - 5), -1):
        out.setdefault(stem[:n], None)
    out.pop(stem, None)
    return [v for v in out if v not in STOPWORDS][:VARIANTS_MAX]


def splits(word: str) -> list[tuple[str, str]]:
    """Ways to read a run-together word as two words of 3+ letters ('roadtrip')."""
    return [(word[:i], word[i:]) for i in range(3, len(word) - 2)]


def present(terms: Sequence[Term], stems: set[str]) -> list[Term]:
    """`terms` with only the alternates some candidate row holds (every token of it in
    `stems`): a misspelt word's hundreds of variants shrink to the few that are words."""
    return [
        Term(t.exact, t.stems, t.weight,
             tuple(a for a in t.alts if all(s in stems for s in a[0])))
        if len(t.alts) > VARIANTS_KEEP else t
        for t in terms
    ]


# Answer shapes (issue 45): what some questions ask for has a form a row can be checked
# for, apart from the question's words. A 'how long' question asks for a duration, and the
# row that answers it states one ('Melanie has been into art for seven years') while rows
# merely about art outrank it on the words; a question for a book, a city, a band asks for
# a name, which the answering row holds ('Tim is reading a fantasy book by Patrick
# Rothfuss') and rows about reading in general do not.
_DURATION_ASKED = re.compile(r"\bhow long\b(?! ago\b)")
_AMOUNT = (
    r"(?:\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|"
    r"twenty|thirty|forty|fifty|a few|few|several|a couple of|couple of|many)"
)
_UNIT = r"(?:minute|hour|day|week|month|year|decade)s?"
# 'for seven years', 'three months', 'since 2019', 'for years', not 'two years ago' (a time).
_DURATION = re.compile(
    rf"\b{_AMOUNT} {_UNIT}\b(?! ago\b)|\bsince\b"
    r"|\bfor (?:years|months|weeks|decades|ages|a while|a long time)\b"
)
# Things that have names (answer_shape).
_NAMED = (
    r"books?|novels?|authors?|movies?|films?|shows?|series|songs?|albums?|bands?|artists?|"
    r"musicians?|composers?|games?|teams?|tournaments?|city|cities|country|countries|states?|"
    r"places?|restaurants?|company|companies|brands?|schools?|languages?|superhero(?:e?s)?|"
    r"characters?|titles?"
)
_NAME_ASKED = re.compile(rf"\b(?:what|which)((?: [\w'’]+){{0,2}}?) (?:{_NAMED})\b")
_NAME_WORD = re.compile(r"\b(?:what|which)\b.*\bnames?\b")
_CAPITALISED = re.compile(r"\b[^\W\d_]{2,}")
_SENTENCE_END = re.compile(r"[.!?:;]$")
# Capitalised words that are no name: a time, not a thing ('last Friday', 'in May').
_TIMES = """
monday tuesday wednesday thursday friday saturday sunday january february march april may june
july august september october november december
"""
_NOT_NAMES = frozenset(_TIMES.split())


@dataclass(frozen=True)
class Shape:
    """What a question asks for ('duration' or 'name'), and for a name the lowercase words
    that are none of its answers: the question's own and the candidates' subjects (the
    people talking, whom every row names)."""

    kind: str
    known: frozenset[str] = frozenset()


def answer_shape(query: str) -> str | None:
    """'duration' for a 'how long' question (not 'how long ago': that asks for a time);
    'name' for a what / which question for a name ('what is the name of', 'what are her
    dogs' names') or for a thing with one, the word for it at most two words on ('what
    book', 'which US cities', 'what fantasy movies'), the words between no function word
    and no one's ('what did John's team win', 'in which month's game' ask for something
    else) nor a frame ('what kind of movies' asks for a genre, not a title); else None."""
    lower = query.lower()
    if _DURATION_ASKED.search(lower):
        return "duration"
    if _NAME_WORD.search(lower):
        return "name"
    named = _NAME_ASKED.search(lower)
    if named is None:
        return None
    if any(w in STOPWORDS or w.endswith(("'s", "’s")) for w in named.group(1).split()):
        return None
    return "name"


def states_duration(content: str) -> bool:
    """Whether `content` states a duration: an amount of time units ('for 4 years', 'three
    months', not 'two years ago'), 'since', or 'for years' / 'for a while'."""
    return _DURATION.search(content.lower()) is not None


def names_something(content: str, known: frozenset[str]) -> bool:
    """Whether `content` holds a name that is not in `known`: a capitalised word (two letters
    or more) that does not open a sentence and is no weekday or month ('a fantasy book by
    Patrick Rothfuss', 'Catan', 'NYC'; a title in quotes starts with one)."""
    for m in _CAPITALISED.finditer(content):
        word = m.group(0)
        if not word[0].isupper() or word.lower() in known or word.lower() in _NOT_NAMES:
            continue
        before = content[: m.start()].rstrip(" \t\n\"'‘“(")
        if before and not _SENTENCE_END.search(before):
            return True
    return False


def shape_factor(shape: Shape | None, content: str) -> float:
    """DURATION_BOOST for a row stating a duration on a 'how long' question, NAME_BOOST for
    a row naming something new on a question for a name, else 1.

    Measured on the five LoCoMo dev conversations (issue 45), against hit@1 / hit@5 0.493 /
    0.645: the duration boost alone (1.4–3 alike; 1.3: hit@1 0.497) 0.499 / 0.647, 4
    questions gained at hit@1 and 2 at hit@5, none lost (every reachable 'how long'
    question now first); the
    name boost alone 1.1 / 1.2 / 1.3: 0.492 / 0.649, 0.495 / 0.649, 0.495 / 0.649; both
    (1.5, 1.2) 0.500 / 0.651, 7 gained and 2 lost at hit@1, 6 and 1 at hit@5, no
    conversation lower at either. A quoted title adds nothing a capitalised word does not;
    a frame before the word ('what type of movies does Nate enjoy') counted as a question
    for a name lost that question at hit@5. Counts on 'how many' (numbers, 'twice',
    'another') ×1.1–1.5, rates on 'how often', names on 'who' and 'where' questions
    ×1.1–1.3: no gain, or a question lost."""
    if shape is None:
        return 1.0
    if shape.kind == "duration":
        return DURATION_BOOST if states_duration(content) else 1.0
    if shape.kind == "name":
        return NAME_BOOST if names_something(content, shape.known) else 1.0
    return 1.0


def recency(age_days: float) -> float:
    """A tie-breaker, not a ranking: 1 + RECENCY_WEIGHT for a fresh row, → 1 with age."""
    return 1.0 + RECENCY_WEIGHT * 0.5 ** (max(0.0, age_days) / RECENCY_DAYS)
