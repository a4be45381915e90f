"""Recall's English word families: irregular inflections and related words (from WordNet).

The list is gantry/memory/lexicon.txt (made by build/wordnet_lexicon.py, WordNet 3.0 notice
inside), read once per process from the package data, so it is inside the frozen binary too.
Recall looks a query word up here to also find rows that say 'gave' for 'give' (an
inflection, matched like a stem), 'marriage' for 'married' (a derivation) or 'kid' for
'child' (a related word, weighted lowest).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources

ALTERNATES = 8  # related words looked for per query word, at most (the list's order)
LINE_MAX = 4096  # a longer line is not a lexicon line (a damaged file stays bounded)
_LINE = re.compile(r"[fds](?: [a-z]+){2,}\Z")  # a kind, then two or more lowercase words


@dataclass(frozen=True)
class Alternates:
    """A query word's other words, by how close they are: irregular inflections ('gave'),
    derivations ('marriage' for 'marry'), related words ('kid' for 'child')."""

    forms: list[str]
    derived: list[str]
    related: list[str]


@dataclass(frozen=True)
class Lexicon:
    """Word → its irregular inflections (both ways), its derivations, its related words."""

    forms: dict[str, tuple[str, ...]] = field(default_factory=dict)
    derived: dict[str, tuple[str, ...]] = field(default_factory=dict)
    related: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def inflections(self, word: str) -> list[str]:
        """Other forms of `word`: 'give' → gave, given; 'gave' → give, given."""
        return [w for w in self.forms.get(word, ()) if w != word]

    def knows(self, word: str) -> bool:
        """Whether `word` heads a line of the list (or is an inflection in one)."""
        return word in self.forms or word in self.derived or word in self.related

    def alternates(self, word: str, stem: str | None = None) -> Alternates:
        """`word`'s other words, looked up as written, else by its stem ('kids' → 'kid').
        An inflection brings its base's words ('gave' → afford, as 'give'); a related word
        brings its own inflections ('kid' → 'children' for 'child'); no word comes twice,
        and none is `word`."""
        key = word if self.knows(word) else (stem or word)
        if not self.knows(key):
            return Alternates([], [], [])
        forms = [w for w in dict.fromkeys((key, *self.forms.get(key, ()))) if w != word]
        heads = [key, *forms]
        seen = {word, *forms}

        def gather(table: dict[str, tuple[str, ...]]) -> list[str]:
            out: list[str] = []
            for other in [o for h in heads for o in table.get(h, ())][:ALTERNATES]:
                for w in (other, *self.inflections(other)):
                    if w not in seen:
                        seen.add(w)
                        out.append(w)
            return out

        derived = gather(self.derived)
        return Alternates(forms, derived, gather(self.related))


def parse(lines: Iterable[str]) -> Lexicon:
    """The lexicon from its text: `f WORD FORM...`, `d WORD DERIVED...` and `s WORD
    RELATED...` lines; comments (#), blank, over-long and unknown lines are skipped, so a
    damaged file only loses them."""
    families: dict[str, set[str]] = {}
    tables: dict[str, dict[str, tuple[str, ...]]] = {"d": {}, "s": {}}
    for line in lines:
        if len(line) > LINE_MAX or _LINE.match(line) is None:
            continue
        kind, *words = line.split()
        if kind == "f":
            family = set(words)
            for w in words:
                family |= families.get(w, set())
            for w in family:
                families[w] = family
        elif kind in tables:
            tables[kind][words[0]] = tuple(dict.fromkeys(words[1:]))
    forms = {w: tuple(sorted(f)) for w, f in families.items()}
    return Lexicon(forms, tables["d"], tables["s"])


@functools.cache
def load() -> Lexicon:
    """The packaged lexicon (read once); an empty one, never an error, if it is missing."""
    try:
        text = resources.files("gantry.memory").joinpath("lexicon.txt").read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        return Lexicon()
    return parse(line for line in text.splitlines() if line and not line.startswith("#"))
