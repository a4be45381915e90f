"""Watches: an MCP tool polled, or a resource subscribed to, whose new items wake a turn in
the chat that asked (docs/watch.md). Quiet checks never call the model.

`setup` is the one entry `gantry run` calls: it registers the watch_* tools and rides the
cron ticker (gantry.cron.ticker.Ticker.riders); nothing here runs without MCP servers,
with CRON_ENABLED=false or with WATCH_MAX=0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gantry.config import Config
from gantry.cron.ticker import Ticker
from gantry.tools import Registry
from gantry.watch.runner import Runner
from gantry.watch.store import WatchStore
from gantry.watch.tools import WatchTools, watch_line

STATUS_WATCHES = 5


@dataclass
class Watches:
    store: WatchStore
    runner: Runner
    tools: WatchTools
    tz: str

    def status(self, session_id: str) -> str:
        """The /status lines: this chat's watches."""
        watches = self.store.listed(session_id)
        if not watches:
            return "watch: no watches in this chat"
        lines = [f"watch: {len(watches)} watch(es) in this chat"]
        lines += [f"  {watch_line(w, self.tz, w.id in self.runner.subscribed)}"
                  for w in watches[:STATUS_WATCHES]]
        if len(watches) > STATUS_WATCHES:
            lines.append(f"  … and {len(watches) - STATUS_WATCHES} more")
        return "\n".join(lines)


def setup(cfg: Config, conn: Any, registry: Registry, host: Any, ticker: Ticker,
          can_push: Any) -> Watches:
    """Register watch_add/watch_list/watch_cancel and put the runner on `ticker`."""
    store = WatchStore(conn)
    runner = Runner(store, host, ticker)
    ticker.riders.append(runner)
    tools = WatchTools(store, host, runner, cfg.watch_max, cfg.watch_min_interval_seconds,
                       cfg.cron_tz, ticker.clock.now, ticker.poke, can_push)
    for tool in tools.tools():
        registry.register(tool)
    return Watches(store, runner, tools, cfg.cron_tz)
