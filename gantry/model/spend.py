"""The usage ledger's reading side: what was spent in a time range, and by what.

Lean on purpose (sqlite rows in, numbers out, no msgspec or httpx): `gantry usage` and the
budget checks before every call read through it. Counted per row: done, failed and lost rows
with their tokens; a row still open (a call in flight) with its prompt estimate.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["AUTONOMOUS_SQL", "BY", "Group", "Spent", "breakdown", "is_autonomous", "spent"]

AUTONOMOUS_SQL = "(source LIKE 'cron:%' OR source LIKE 'watch:%' OR source = 'consolidation')"
"""The sources gantry starts by itself: scheduled turns, watch wakes, consolidation."""
BY = ("source", "model", "day", "chat")

_PROMPT = "CASE WHEN state = 'open' THEN prompt_estimate ELSE prompt_tokens END"
_SUMS = (f"COUNT(*), COALESCE(SUM({_PROMPT}), 0), COALESCE(SUM(completion_tokens), 0), "
         "COALESCE(SUM(cached_tokens), 0), SUM(cost), COALESCE(SUM(estimated), 0), "
         "COALESCE(SUM(state = 'failed'), 0), COALESCE(SUM(state = 'lost'), 0)")


def is_autonomous(source: str) -> bool:
    """Whether `source` is one gantry starts by itself (see AUTONOMOUS_SQL)."""
    return source.startswith(("cron:", "watch:")) or source == "consolidation"


class Spent(NamedTuple):
    """Totals of a range: calls, tokens (prompt + completion) and cost (USD; 0.0 when no
    call had a price), then the parts."""

    calls: int
    tokens: int
    cost: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    estimated: int = 0  # calls whose tokens are gantry's estimate
    failed: int = 0
    lost: int = 0
    priced: bool = False  # some call in the range had a price

    @property
    def cache_hit_rate(self) -> float | None:
        """Cached ÷ prompt tokens; None without prompt tokens."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    def as_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "cached_tokens": self.cached_tokens,
                "tokens": self.tokens, "cost": round(self.cost, 6) if self.priced else None,
                "cache_hit_rate": _rate(self.cache_hit_rate), "estimated": self.estimated,
                "failed": self.failed, "lost": self.lost}


def _rate(rate: float | None) -> float | None:
    return None if rate is None else round(rate, 4)


def _spent(row: tuple[Any, ...]) -> Spent:
    calls, prompt, completion, cached, total_cost, estimated, failed, lost = row
    return Spent(int(calls), int(prompt) + int(completion), float(total_cost or 0.0),
                 int(prompt), int(completion), int(cached), int(estimated), int(failed),
                 int(lost), total_cost is not None)


def _where(since: float, until: float | None, autonomous: bool | None) -> tuple[str, list[Any]]:
    sql, params = "started_at >= ?", [since]
    if until is not None:
        sql += " AND started_at < ?"
        params.append(until)
    if autonomous is not None:
        sql += f" AND {'' if autonomous else 'NOT '}{AUTONOMOUS_SQL}"
    return sql, params


def spent(conn: Any, since: float, until: float | None = None, *,
          autonomous: bool | None = None) -> Spent:
    """What calls started in [since, until) spent; `autonomous` True or False keeps only the
    autonomous sources or only the others (None: all)."""
    where, params = _where(since, until, autonomous)
    row = next(iter(conn.execute(f"SELECT {_SUMS} FROM usage WHERE {where}", params)))
    return _spent(tuple(row))


class Group(NamedTuple):
    """One line of a breakdown: its key (a source, model, chat or YYYY-MM-DD) and totals."""

    key: str
    spent: Spent


def breakdown(conn: Any, since: float, until: float | None, by: str,
              day_of: Any = None) -> list[Group]:
    """Totals of [since, until) per `by` (one of BY), largest first (days: in order).
    `day_of(unix) -> "YYYY-MM-DD"` names a call's day in the user's zone."""
    if by not in BY:
        raise ValueError(f"--by must be one of {', '.join(BY)}")
    where, params = _where(since, until, None)
    if by != "day":
        column = "COALESCE(chat, '-')" if by == "chat" else by
        rows = conn.execute(f"SELECT {column}, {_SUMS} FROM usage WHERE {where} "
                            f"GROUP BY 1 ORDER BY 3 + 4 DESC, 1", params)
        return [Group(str(r[0]), _spent(tuple(r[1:]))) for r in rows]
    # Days are the user's, not UTC's: quarter hours are summed in SQL (every zone's offset
    # is a whole number of them, so none straddles a midnight), then put into days.
    rows = conn.execute(f"SELECT CAST(started_at / 900 AS INTEGER), {_SUMS} FROM usage "
                        f"WHERE {where} GROUP BY 1 ORDER BY 1", params)
    days: dict[str, list[Spent]] = {}
    for r in rows:
        days.setdefault(day_of(int(r[0]) * 900), []).append(_spent(tuple(r[1:])))
    return [Group(day, _sum(parts)) for day, parts in days.items()]


def _sum(parts: list[Spent]) -> Spent:
    return Spent(sum(p.calls for p in parts), sum(p.tokens for p in parts),
                 sum(p.cost for p in parts), sum(p.prompt_tokens for p in parts),
                 sum(p.completion_tokens for p in parts), sum(p.cached_tokens for p in parts),
                 sum(p.estimated for p in parts), sum(p.failed for p in parts),
                 sum(p.lost for p in parts), any(p.priced for p in parts))
