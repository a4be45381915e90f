"""Files gantry keeps on disk for a while — tool files in DATA_DIR/outbox, files users sent
in DATA_DIR/media — and their pruning: by age, and within a total size budget, oldest first.

An entry is one child of the folder: a file, or a folder of files (the outbox keeps one
folder per file). Its age is its modification time, so touching it keeps it longer.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Entry:
    path: Path
    mtime: float
    size: int


def entries(root: Path) -> list[Entry]:
    """The folder's entries, oldest first ([] when it does not exist or cannot be read)."""
    out: list[Entry] = []
    try:
        children = list(root.iterdir())
    except OSError:
        return []
    for path in children:
        try:
            st = path.lstat()
            size = st.st_size
            if path.is_dir() and not path.is_symlink():
                size = sum(f.lstat().st_size for f in path.iterdir())
        except OSError:
            continue
        out.append(Entry(path, st.st_mtime, size))
    out.sort(key=lambda e: (e.mtime, e.path.name))
    return out


def remove(path: Path) -> bool:
    """Delete one entry (a file, or a folder and the files in it); False if it stays."""
    try:
        if path.is_dir() and not path.is_symlink():
            for f in path.iterdir():
                f.unlink()
            path.rmdir()
        else:
            path.unlink()
    except OSError:
        return False
    return True


def tidy(root: Path, keep_seconds: float, budget: int | None = None,
         busy: Collection[Path] = ()) -> tuple[int, bool]:
    """Forget entries older than keep_seconds, then, with a budget, the oldest others until
    the folder holds at most `budget` bytes; `busy` entries (being written or read) are never
    removed. (how many went, whether the folder is now within the budget)."""
    cutoff = time.time() - keep_seconds
    gone = 0
    left: list[Entry] = []
    for entry in entries(root):
        if entry.path not in busy and entry.mtime < cutoff and remove(entry.path):
            gone += 1
        else:
            left.append(entry)
    if budget is None:
        return gone, True
    total = sum(e.size for e in left)
    for entry in left:
        if total <= budget:
            break
        if entry.path not in busy and remove(entry.path):
            gone += 1
            total -= entry.size
    return gone, total <= budget

