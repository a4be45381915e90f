"""Recall's English word families: irregular inflections and related words (from WordNet).

The list is gantry/memory/lexicon.txt (made by build/wordnet_lexicon.py, WordNet 3.0 notice
inside), read once per process from the package data, so it is inside the frozen binary too.
Recall looks a query word up here to also find rows that say 'gave' for 'give' (an
inflection, matched like a stem) or 'kid' for 'child' (a related word, weighted lower).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources

ALTERNATES = 8  # related words looked for per query word, at most (the list's order)
LINE_MAX = 4096  # a longer line is not a lexicon line (a damaged file stays bounded)


@dataclass(frozen=True)
class Lexicon:
    """Word → its irregular inflections (both ways) and → its related words."""

    forms: dict[str, tuple[str, ...]] = field(default_factory=dict)
    related: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def inflections(self, word: str) -> list[str]:
        """Other forms of `word`: 'give' → gave, given; 'gave' → give, given."""
        return [w for w in self.forms.get(word, ()) if w != word]

    def alternates(self, word: str, stem: str | None = None) -> tuple[list[str], list[str]]:
        """(inflections, related words) of `word`, looked up as written, else by its stem
        ('kids' → 'kid'). Related words bring their own inflections ('child' → children);
        the related words of an inflection are its base's ('gave' → afford, as 'give');
        none is `word` itself or one of its inflections."""
        key = word if word in self.forms or word in self.related else (stem or word)
        forms = [w for w in (key, *self.forms.get(key, ())) if w != word]
        seen = {word, *forms}
        related: list[str] = []
        heads = [key, *forms]
        for other in [o for h in heads for o in self.related.get(h, ())][:ALTERNATES]:
            for w in (other, *self.inflections(other)):
                if w not in seen:
                    seen.add(w)
                    related.append(w)
        return forms, related


def parse(lines: Iterable[str]) -> Lexicon:
    """The lexicon from its text: `f WORD FORM...` and `s WORD RELATED...` lines; comments
    (#), blank, over-long and unknown lines are skipped, so a damaged file only loses them."""
    families: dict[str, set[str]] = {}
    related: dict[str, tuple[str, ...]] = {}
    for line in lines:
        kind, *words = (line.split() if len(line) <= LINE_MAX else None) or [""]
        if len(words) < 2 or not all(w.isalpha() and w.islower() for w in words):
            continue
        if kind == "f":
            family = set(words)
            for w in words:
                family |= families.get(w, set())
            for w in family:
                families[w] = family
        elif kind == "s":
            related[words[0]] = tuple(dict.fromkeys(words[1:]))
    forms = {w: tuple(sorted(f)) for w, f in families.items()}
    return Lexicon(forms, related)


@functools.cache
def load() -> Lexicon:
    """The packaged lexicon (read once); an empty one, never an error, if it is missing."""
    try:
        text = resources.files("gantry.memory").joinpath("lexicon.txt").read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        return Lexicon()
    return parse(line for line in text.splitlines() if line and not line.startswith("#"))
