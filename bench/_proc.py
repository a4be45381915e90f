"""/proc readings shared by the benchmarks: a process tree and its summed RSS."""

from __future__ import annotations

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
