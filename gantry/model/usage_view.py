"""What `gantry usage` and the owner's `/usage` show: a range's totals and one breakdown.

Pure parts (`since_of`, `render`) plus `report`, one read of the ledger (gantry.model.spend).
Days are the user's (CRON_TZ), so "today" is the day the user is living in.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from typing import Any

from gantry.model.spend import breakdown, spent

__all__ = ["SINCE_HELP", "day_start", "plug", "render", "reply", "report", "since_of", "today_line"]

SINCE_HELP = ("today, month, all, a duration back from now (90m, 24h, 7d, 2w) or a date "
              "YYYY-MM-DD in CRON_TZ")
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_GROUPS = 50  # a breakdown by chat or source prints the largest 50 and a count of the rest


def day_start(now: float, zone: tzinfo) -> float:
    """Unix time of the start of `now`'s day in `zone`."""
    local = datetime.fromtimestamp(now, zone)
    return local.replace(hour=0, minute=0, second=0, microsecond=0).timestamp()


def since_of(text: str, zone: tzinfo, now: float) -> float:
    """`--since` as unix seconds; ValueError naming the accepted forms."""
    t = text.strip().lower()
    local = datetime.fromtimestamp(now, zone)
    if t == "today":
        return day_start(now, zone)
    if t == "month":
        return local.replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()
    if t == "all":
        return 0.0
    if len(t) >= 2 and t[:-1].isdigit() and t[-1] in _UNITS:
        return max(0.0, now - int(t[:-1]) * _UNITS[t[-1]])
    try:
        day = datetime.strptime(t, "%Y-%m-%d")
    except ValueError:
        raise ValueError(f"--since {text[:40]!r}: use {SINCE_HELP}") from None
    return day.replace(tzinfo=zone).timestamp()


def _day_namer(zone: tzinfo) -> Any:
    def day_of(ts: float) -> str:
        return datetime.fromtimestamp(ts, zone).strftime("%Y-%m-%d")
    return day_of


def report(conn: Any, since: float, until: float | None, by: str, zone: tzinfo) -> dict[str, Any]:
    """The range's totals and its breakdown `by` (one of BY), as `--json` prints them."""
    groups = breakdown(conn, since, until, by, _day_namer(zone))
    total = spent(conn, since, until)
    return {
        "since": _iso(since), "until": _iso(until) if until is not None else None,
        "zone": str(zone), "by": by, "total": total.as_dict(),
        "breakdown": [{"key": g.key, **g.spent.as_dict()} for g in groups],
    }


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def _money(cost: float | None) -> str:
    if cost is None:
        return "no price"
    return f"${cost:.2f}" if cost >= 10 else f"${cost:.4f}" if cost >= 0.01 else f"${cost:.6f}"


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.0%}"


def render(data: dict[str, Any], zone: tzinfo) -> str:
    """The report as text: a total line, then one line per group."""
    since = datetime.fromisoformat(data["since"].replace("Z", "+00:00")).astimezone(zone)
    t = data["total"]
    lines = [
        f"usage since {since:%Y-%m-%d %H:%M} {zone} (by {data['by']})",
        f"total: {t['calls']} calls · {t['prompt_tokens']:,} prompt + "
        f"{t['completion_tokens']:,} completion tokens · cached {t['cached_tokens']:,} "
        f"(hit rate {_rate(t['cache_hit_rate'])}) · {_money(t['cost'])}",
    ]
    groups = data["breakdown"]
    width = min(32, max([len(g["key"]) for g in groups] or [0]))
    for g in groups[:MAX_GROUPS]:
        lines.append(f"  {g['key'][:32]:<{width}}  {g['calls']:>5} calls  "
                     f"{g['prompt_tokens']:>10,} + {g['completion_tokens']:>9,} tok  "
                     f"cache {_rate(g['cache_hit_rate']):>4}  {_money(g['cost'])}")
    if len(groups) > MAX_GROUPS:
        lines.append(f"  … and {len(groups) - MAX_GROUPS} more (--json lists all)")
    notes = []
    if t["estimated"]:
        notes.append(f"{t['estimated']} call(s) estimated (the server reported no usage)")
    if t["lost"]:
        notes.append(f"{t['lost']} cut by a stop or kill (counted as billed, estimated)")
    if t["failed"]:
        notes.append(f"{t['failed']} failed")
    if notes:
        lines.append("note: " + "; ".join(notes))
    return "\n".join(lines)


def today_line(conn: Any, zone: tzinfo, now: float) -> str:
    """The /status line: today's calls, tokens, cache hit rate and cost."""
    s = spent(conn, day_start(now, zone), None)
    money = f" · {_money(s.cost)}" if s.priced else ""
    return (f"usage today: {s.calls} calls, {s.tokens:,} tokens, cache hit "
            f"{_rate(s.cache_hit_rate)}{money}")


GROUP_REFUSAL = ("The usage report is for the owner: ask me with /usage in our private chat.")


def reply(conn: Any, zone: tzinfo, text: str, shared: bool, now: float) -> str:
    """The owner's `/usage [since]` (default today), by source; refused in a shared chat,
    which others read."""
    if shared:
        return GROUP_REFUSAL
    words = text.split()
    try:
        since = since_of(words[1] if len(words) > 1 else "today", zone, now)
    except ValueError:
        return "Usage: /usage [today|month|7d|YYYY-MM-DD]"
    return render(report(conn, since, None, "source", zone), zone)


def plug(agent: Any, conn: Any) -> None:
    """The owner's view of the ledger in chat: the agent's `/usage`, and today's line among
    its private `/status` lines (left out of group chats)."""
    import time

    zone = agent.zone
    agent.usage = lambda text, shared: reply(conn, zone, text, shared, time.time())
    agent.private_status_lines.append(lambda _sid: today_line(conn, zone, time.time()))
