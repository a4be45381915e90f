"""LLM_PRICES: what each model's tokens cost, parsed once at boot (pure; docs/models.md).

`model=input/cached/output; other=input/output` in USD per 1M tokens. A model given two
prices pays the input price for cached tokens too. Models not named have no price: their
calls are counted, with no cost.
"""

from __future__ import annotations

import math
from typing import NamedTuple

__all__ = ["Price", "PricesError", "cost", "parse_prices"]

MAX_MODELS = 64
MAX_PRICE = 1_000_000.0  # USD per 1M tokens: anything above is a typo, not a price


class PricesError(ValueError):
    """LLM_PRICES could not be read; the message names the entry and says what is expected."""


class Price(NamedTuple):
    """USD per 1M tokens: uncached prompt, cached prompt, completion."""

    input: float
    cached: float
    output: float


def _number(text: str, entry: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise PricesError(f"LLM_PRICES entry {entry!r}: {text.strip()!r} is not a number "
                          "(USD per 1M tokens, e.g. 0.15)") from None
    if not math.isfinite(value) or not 0 <= value <= MAX_PRICE:
        raise PricesError(f"LLM_PRICES entry {entry!r}: {text.strip()!r} must be between 0 "
                          f"and {MAX_PRICE:,.0f} USD per 1M tokens")
    return value


def parse_prices(text: str) -> dict[str, Price]:
    """`gpt-4o-mini=0.15/0.075/0.60; llama3=0/0` → {model: Price}; PricesError when malformed.

    Entries are separated by `;` or newlines; the model is everything before the last `=`
    (model names may hold `/` and `:`), so `meta-llama/Llama-3=0.1/0.1/0.2` reads as meant.
    """
    prices: dict[str, Price] = {}
    for raw in text.replace("\n", ";").split(";"):
        entry = raw.strip()
        if not entry:
            continue
        model, eq, values = entry.rpartition("=")
        model = model.strip()
        if not eq or not model:
            raise PricesError(f"LLM_PRICES entry {entry!r} is not MODEL=INPUT/CACHED/OUTPUT "
                              "(USD per 1M tokens, e.g. gpt-4o-mini=0.15/0.075/0.60)")
        parts = values.split("/")
        if len(parts) not in (2, 3):
            raise PricesError(f"LLM_PRICES entry {entry!r} needs INPUT/CACHED/OUTPUT or "
                              "INPUT/OUTPUT (USD per 1M tokens)")
        numbers = [_number(p, entry) for p in parts]
        if model in prices:
            raise PricesError(f"LLM_PRICES names {model!r} twice")
        prices[model] = Price(numbers[0], numbers[1], numbers[2]) if len(numbers) == 3 else (
            Price(numbers[0], numbers[0], numbers[1]))
        if len(prices) > MAX_MODELS:
            raise PricesError(f"LLM_PRICES names more than {MAX_MODELS} models")
    return prices


def cost(price: Price | None, prompt: int, cached: int, completion: int) -> float | None:
    """USD for one call; None without a price. Cached tokens are part of `prompt`."""
    if price is None:
        return None
    cached = max(0, min(cached, prompt))
    return ((prompt - cached) * price.input + cached * price.cached
            + completion * price.output) / 1_000_000
