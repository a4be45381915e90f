"""Scheduled backups inside `gantry run`: BACKUP_DIR, BACKUP_EVERY, BACKUP_KEEP.

One task in run's task group sleeps until the newest backup in BACKUP_DIR is BACKUP_EVERY
old (so a restart neither repeats nor skips one), then copies the database in a worker
thread with its own read-only connection: in WAL mode the copy blocks no turn. A failure is
logged, counted for /status, and retried after a pause; it never stops gantry.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from gantry.store.backup import NAME_PREFIX, NAME_SUFFIX, BackupError, prune, stamped_name, take

if TYPE_CHECKING:
    from gantry.config import Config

log = logging.getLogger("gantry.backup")

RETRY_SECONDS = 600.0  # after a failure (a full disk is not freed in a second)


def newest(directory: Path) -> Path | None:
    """The newest stamped backup in `directory` (the names sort by time)."""
    try:
        found = sorted(p for p in directory.glob(f"{NAME_PREFIX}*{NAME_SUFFIX}") if p.is_file())
    except OSError:
        return None
    return found[-1] if found else None


def leftovers(directory: Path) -> None:
    """Remove temporary copies a killed run left behind (never a finished backup)."""
    for p in directory.glob(f".{NAME_PREFIX}*.tmp-*"):
        if not p.name.endswith(f".tmp-{os.getpid()}"):
            p.unlink(missing_ok=True)


@dataclass
class Scheduled:
    data_dir: Path
    directory: Path
    every: float
    keep: int
    every_text: str = ""
    failures: int = 0  # in a row; 0 after a success
    failed_total: int = 0
    last_error: str = ""
    last_ok: str = ""

    def due_in(self, now: float) -> float:
        last = newest(self.directory)
        if last is None:
            return 0.0
        return max(0.0, last.stat().st_mtime + self.every - now)

    def take(self) -> str:
        """One backup and the pruning after it (blocking: runs in a worker thread)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        leftovers(self.directory)
        written = take(self.data_dir, self.directory / stamped_name())
        prune(self.directory, self.keep)
        return f"{written[0].path.name} ({written[0].size} bytes)"

    async def once(self) -> bool:
        try:
            done = await anyio.to_thread.run_sync(self.take, abandon_on_cancel=True)
        except Exception as exc:  # an error boundary: a backup never stops gantry
            self.failures += 1
            self.failed_total += 1
            if isinstance(exc, BackupError):
                self.last_error = str(exc)
            elif isinstance(exc, OSError):
                self.last_error = f"{self.directory}: {exc.strerror}"
            else:
                self.last_error = f"unexpected {type(exc).__name__}"
            log.error("scheduled backup failed", extra={
                "error": self.last_error, "failures_in_a_row": self.failures},
                exc_info=None if isinstance(exc, (BackupError, OSError)) else exc)
            return False
        self.failures, self.last_ok = 0, done
        log.info("scheduled backup written", extra={"backup": done, "dir": str(self.directory)})
        return True

    async def run(self) -> None:
        while True:
            await anyio.sleep(self.due_in(time.time()))
            if not await self.once():
                await anyio.sleep(min(self.every, RETRY_SECONDS))

    def status(self, _session_id: str = "") -> str:
        """The /status line: where backups go, the last one, failures in a row."""
        every = self.every_text or f"{int(self.every)}s"
        line = f"backups: every {every} to {self.directory}, keeping {self.keep}"
        line += f"; last {self.last_ok}" if self.last_ok else ""
        if self.failures:
            line += f"; FAILING ({self.failures} in a row, {self.failed_total} in all): " \
                    f"{self.last_error}"
        return line


def setup(cfg: Config) -> Scheduled | None:
    """The scheduled backups BACKUP_DIR asks for, or None when it is unset."""
    if not cfg.backup_dir:
        return None
    return Scheduled(Path(cfg.data_dir), Path(cfg.backup_dir), cfg.backup_every_seconds,
                     cfg.backup_keep, cfg.backup_every)
