"""Cron: scheduled turns pushed to the chat they were scheduled from (docs/cron.md).

`setup` is the one entry `gantry run` calls: it registers the cron_* tools and returns the
ticker task plus a /status line. Nothing here runs when CRON_ENABLED=false.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gantry.config import Config
from gantry.cron.store import CronStore
from gantry.cron.ticker import Clock, Respond, SystemClock, Ticker
from gantry.cron.tools import CronTools, job_line
from gantry.tools import Registry

STATUS_JOBS = 5


@dataclass
class Cron:
    store: CronStore
    ticker: Ticker
    tools: CronTools

    async def run(self) -> None:
        await self.ticker.run()

    def status(self, session_id: str) -> str:
        """The /status lines: this chat's active jobs with their next fire time."""
        jobs = self.store.active(session_id)
        if not jobs:
            return "cron: no scheduled jobs in this chat"
        lines = [f"cron: {len(jobs)} scheduled job(s) in this chat"]
        lines += [f"  {job_line(j)}" for j in jobs[:STATUS_JOBS]]
        if len(jobs) > STATUS_JOBS:
            lines.append(f"  … and {len(jobs) - STATUS_JOBS} more")
        return "\n".join(lines)


def setup(
    cfg: Config, conn: Any, registry: Registry, respond: Respond, channel: Any,
    clock: Clock | None = None,
) -> Cron:
    """Register cron_schedule/cron_list/cron_cancel and build the ticker for `channel`."""
    clock = clock or SystemClock()
    store = CronStore(conn)
    ticker = Ticker(store, respond, channel.push, channel.name, cfg.cron_tick_seconds, clock)
    tools = CronTools(store, cfg.cron_tz, cfg.cron_max_jobs, clock.now, ticker.poke,
                      channel.can_push)
    for tool in tools.tools():
        registry.register(tool)
    return Cron(store, ticker, tools)
