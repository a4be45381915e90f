"""The synthetic memory rows and queries of the recall benchmarks (bench/memory.py,
bench/recall_speed.py): a 2,000-word Zipf-ish vocabulary, so a few words hit thousands of
rows and most hit a handful. No gantry import: recall_speed.py's workers load this beside
an older gantry tree."""

from __future__ import annotations

import itertools
import random

WORDS = [f"w{i}" for i in range(2000)]
CUM = list(itertools.accumulate(1.0 / (i + 1) for i in range(len(WORDS))))
SUBJECTS = ["chris", "mom", "climbing", "work", "tea", "berlin", "gym", "dentist", "ana", "car"]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(WORDS, cum_weights=CUM, k=n))


def queries(count: int, seed: int = 7) -> list[str]:
    """`count` queries of 2-4 words drawn like the rows' words."""
    rng = random.Random(seed)
    return [sentence(rng, rng.randint(2, 4)) for _ in range(count)]
