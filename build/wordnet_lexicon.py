"""Make gantry/memory/lexicon.txt, recall's English inflections and related words, from
WordNet 3.0 (Princeton; Debian's `wordnet-base` and `wordnet-sense-index` packages).

Run by hand when the list should change (`apt-get install wordnet-base wordnet-sense-index`,
then `python build/wordnet_lexicon.py > gantry/memory/lexicon.txt`); the build only copies
the file. Kept small on purpose (≈220 KB):

* `f` lines: irregular inflections (WordNet's *.exc morphology exceptions: 'gave' → 'give',
  'children' → 'child'), only where the Porter stemmer does not already join the two.
* `d` lines: derivationally related words (WordNet's `+` pointers: 'marry' ↔ 'marriage',
  'speech' ↔ 'speak'), both in a commonly used sense (as for `s`), where the stems differ.
* `s` lines: words that share a WordNet synset in a sense people actually use (a sense with
  at least MIN_TAGS tagged occurrences in WordNet's sense-tagged corpus, among the word's
  first MAX_SENSE senses), single words only, only where the stems differ.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

import apsw

WN = Path("/usr/share/wordnet")
POS = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
SS_TYPE = {1: "n", 2: "v", 3: "a", 4: "r", 5: "a"}
MIN_TAGS = 1
MAX_SENSE = 3
_WORD = re.compile(r"[a-z]+\Z")
NOTICE = """\
# gantry recall lexicon, made by build/wordnet_lexicon.py from WordNet 3.0.
# f WORD FORM...   irregular inflections of WORD (matched like a stem)
# d WORD DERIVED... derivationally related words (weighted between a stem and `s`)
# s WORD RELATED... words sharing a commonly used WordNet sense (weighted below a stem)
#
# WordNet 3.0 Copyright 2006 by Princeton University.  All rights reserved.
# THIS SOFTWARE AND DATABASE IS PROVIDED "AS IS" AND PRINCETON UNIVERSITY MAKES NO
# REPRESENTATIONS OR WARRANTIES, EXPRESS OR IMPLIED.  BY WAY OF EXAMPLE, BUT NOT
# LIMITATION, PRINCETON UNIVERSITY MAKES NO REPRESENTATIONS OR WARRANTIES OF MERCHANT-
# ABILITY OR FITNESS FOR ANY PARTICULAR PURPOSE OR THAT THE USE OF THE LICENSED SOFTWARE,
# DATABASE OR DOCUMENTATION WILL NOT INFRINGE ANY THIRD PARTY PATENTS, COPYRIGHTS,
# TRADEMARKS OR OTHER RIGHTS.
# The name of Princeton University or Princeton may not be used in advertising or
# publicity pertaining to distribution of the software and/or database.  Title to
# copyright in this software, database and any associated documentation shall at all
# times remain with Princeton University and LICENSEE agrees to preserve same.
"""


def senses() -> dict[tuple[str, str, str], tuple[int, int]]:
    """(lemma, pos, synset offset) → (sense number, tagged count), from index.sense."""
    out = {}
    for line in (WN / "index.sense").read_text().splitlines():
        key, offset, number, count = line.split()
        lemma, rest = key.split("%", 1)
        out[(lemma, SS_TYPE[int(rest.split(":")[0])], offset)] = (int(number), int(count))
    return out


Synset = tuple[str, str]  # (pos, offset)
Link = tuple[Synset, int, Synset, int]  # a derivation: synset, word number → synset, number


def synsets() -> tuple[dict[Synset, list[str]], list[Link]]:
    """(pos, offset) → the synset's lemmas, lowercased, and the derivation links between
    words of synsets, from data.*."""
    out: dict[Synset, list[str]] = {}
    links: list[Link] = []
    for pos, name in POS.items():
        for line in (WN / f"data.{name}").read_text(encoding="latin-1").splitlines():
            if line.startswith(" "):
                continue
            parts = line.split("|", 1)[0].split()
            n = int(parts[3], 16)
            out[(pos, parts[0])] = [
                re.sub(r"\(.*\)\Z", "", parts[4 + 2 * i]).lower() for i in range(n)
            ]
            at = 5 + 2 * n
            for k in range(int(parts[at - 1])):
                symbol, offset, other, numbers = parts[at + 4 * k : at + 4 * k + 4]
                if symbol == "+":
                    links.append(((pos, parts[0]), int(numbers[:2], 16),
                                  (other.replace("s", "a"), offset), int(numbers[2:], 16)))
    return out, links


def main() -> None:
    conn = apsw.Connection(":memory:")
    porter = conn.fts5_tokenizer("porter", ["unicode61", "remove_diacritics", "2"])

    def stem(word: str) -> str:
        return "".join(porter(word.encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None,
                              include_offsets=False, include_colocated=False))

    tags = senses()
    common = {lemma for (lemma, _, _), (number, count) in tags.items()
              if count >= MIN_TAGS and number <= MAX_SENSE}
    forms: dict[str, set[str]] = defaultdict(set)
    for name in POS.values():
        for line in (WN / f"{name}.exc").read_text().splitlines():
            form, *bases = line.split()
            for base in bases:
                if (_WORD.match(form) and _WORD.match(base) and base in common
                        and stem(form) != stem(base)):
                    forms[base].add(form)
    def used(word: str, synset: Synset) -> bool:
        number, count = tags.get((word, synset[0], synset[1]), (99, 0))
        return bool(_WORD.match(word)) and count >= MIN_TAGS and number <= MAX_SENSE

    table, links = synsets()
    related: dict[str, set[str]] = defaultdict(set)
    for synset, lemmas in table.items():
        kept = [w for w in lemmas if used(w, synset)]
        for a in kept:
            related[a].update(b for b in kept if stem(b) != stem(a))
    derived: dict[str, set[str]] = defaultdict(set)
    for source, i, target, j in links:
        if target not in table or not (0 < i <= len(table[source]) and 0 < j <= len(table[target])):
            continue
        a, b = table[source][i - 1], table[target][j - 1]
        if used(a, source) and used(b, target) and stem(a) != stem(b):
            derived[a].add(b)
            derived[b].add(a)
    out = [NOTICE.rstrip("\n")]
    out += [f"f {w} {' '.join(sorted(forms[w]))}" for w in sorted(forms)]
    out += [f"d {w} {' '.join(sorted(derived[w]))}" for w in sorted(derived)]
    out += [f"s {w} {' '.join(sorted(related[w]))}" for w in sorted(related) if related[w]]
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
