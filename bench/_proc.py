"""/proc readings shared by the benchmarks: a process tree and its summed RSS."""

from __future__ import annotations

import collections
from pathlib import Path


def tree(pid: int) -> list[int]:
    """pid and its descendants (the onefile bootstrap and its unpacked app)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        todo += [int(k) for k in kids]
    return out


def status_kib(pids: list[int], field: str) -> int:
    """Summed /proc/<pid>/status `field` (e.g. VmRSS, RssAnon) in KiB; gone processes count 0."""
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith(field + ":"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def rss_kib(pids: list[int]) -> int:
    """Summed VmRSS of `pids` in KiB; processes that are gone count as 0."""
    return status_kib(pids, "VmRSS")


SMAPS_FIELDS = ("Rss", "Anonymous", "Private_Dirty", "Private_Clean", "Shared_Clean")


def smaps_by_mapping(pid: int) -> dict[str, collections.Counter[str]]:
    """KiB per mapping name (file basename, [heap], [anon], ...) from /proc/<pid>/smaps: where
    a process's RSS is (anonymous heap vs file pages of the executable and libraries)."""
    out: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    name = "[anon]"
    try:
        lines = Path(f"/proc/{pid}/smaps").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if not parts:
            continue
        if parts[0].endswith(":") and len(parts) >= 2 and parts[1].isdigit():
            if parts[0][:-1] in SMAPS_FIELDS:
                out[name][parts[0][:-1]] += int(parts[1])
        elif "-" in parts[0]:
            path = parts[5] if len(parts) > 5 else "[anon]"
            name = path.rsplit("/", 1)[-1] if path.startswith("/") else path
    return out


def breakdown(pids: list[int], top: int = 8) -> str:
    """A few lines per process: total RSS split into anonymous and file-backed, then the
    largest mappings."""
    lines = []
    for pid in pids:
        maps = smaps_by_mapping(pid)
        total: collections.Counter[str] = collections.Counter()
        for c in maps.values():
            total.update(c)
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            comm = "?"
        lines.append(f"    pid {pid} {comm}: RSS {total['Rss'] / 1024:.1f} MiB = anonymous "
                     f"{total['Anonymous'] / 1024:.1f} + file-backed "
                     f"{(total['Rss'] - total['Anonymous']) / 1024:.1f}")
        for name, c in sorted(maps.items(), key=lambda kv: -kv[1]["Rss"])[:top]:
            lines.append(f"      {name[:44]:<44} RSS {c['Rss'] / 1024:6.1f}  anon "
                         f"{c['Anonymous'] / 1024:6.1f}  private dirty "
                         f"{c['Private_Dirty'] / 1024:6.1f} MiB")
    return "\n".join(lines)
