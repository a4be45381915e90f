"""Recall quality on LoCoMo-format conversations: gantry's `memory_recall` against plain BM25.

Prints figures; never pass/fail. For each conversation file, a fresh DATA_DIR and a real
`gantry mcp-memory` child (MCP client over stdio): every observation is stored with
`memory_store(kind="fact", subject=<speaker>, content=<observation>)`, then every question of
category 1-4 (multi-hop, temporal, open-domain, single-hop; 5 = adversarial has no answer)
is sent to `memory_recall`.

Row <-> evidence mapping: each observation carries the dialogue ids (`D3:7`) it was drawn
from. `memory_store`'s reply names the row (`stored #12` or, for an exact duplicate,
`already stored as #12`), so the bench keeps row id -> set of dialogue ids; nothing of the id
goes into the stored text. `memory_recall`'s reply lists rows as `#12 ...` lines, in rank
order. A question is a hit at k when one of its first k rows carries one of the question's
evidence ids.

The reference is FTS5's own `bm25()` (k1 = 1.2, b = 0.75) over the same rows (subject and
content columns, equal weights, the `unicode61 remove_diacritics 2` tokenizer) in an
in-memory SQLite, with the OR of the question's distinct words: plain BM25, no stemming, no
stopwords, no recency. Same rows, same run.

The data is not part of the repository (LoCoMo is CC BY-NC 4.0, evaluation only): pass a
directory of its JSON files. Each file is one conversation (`speaker_a`, `session_N`,
`session_N_observation`, `qa` at the top, or under `conversation` / `observation` as in the
published `locomo10.json`) or a list of them.

Usage: python bench/memory_quality.py DIR [--k 1,5,10] [--by-category]
(DIR defaults to $LOCOMO_DIR; with neither, it says so and exits 0, so `nox -s bench` runs.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio
import apsw

from gantry.memory.store import fts_query

ROOT = Path(__file__).resolve().parent.parent
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
_DIA = re.compile(r"D:?(\d+):(\d+)")  # also reads the odd 'D:11:26' and 'D8:6; D9:17'
_ROW = re.compile(r"#(\d+)\b")


@dataclass
class Conversation:
    name: str
    observations: list[tuple[str, str, frozenset[str]]]  # speaker, text, dialogue ids
    questions: list[tuple[str, int, frozenset[str]]]  # question, category, evidence ids


@dataclass
class Result:
    """Per question: the evidence hit rank (0-based) for gantry and BM25, or None."""

    name: str
    stored: int = 0
    skipped: int = 0
    rows: list[tuple[int, frozenset[str], int | None, int | None]] = field(default_factory=list)


def dia_ids(value: Any) -> frozenset[str]:
    """Every `D<session>:<turn>` in a string or a list of them, nested lists too: a few
    observations cite their turns as one list (`[text, ["D15:3", "D15:5"]]`), and reading
    only flat strings stored those rows with no evidence id at all."""
    if isinstance(value, str):
        return frozenset(f"D{a}:{b}" for a, b in _DIA.findall(value))
    if isinstance(value, list):
        return frozenset().union(*(dia_ids(item) for item in value))
    return frozenset()


def conversations(path: Path) -> Iterator[Conversation]:
    """The conversations in one file (a conversation object or a list of them)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    samples = data if isinstance(data, list) else [data]
    for i, sample in enumerate(samples):
        name = str(sample.get("sample_id") or (
            path.stem if len(samples) == 1 else f"{path.stem}.{i}"))
        obs_root = sample.get("observation", sample)
        observations = []
        for key in sorted((k for k in obs_root if k.endswith("_observation")),
                          key=lambda k: int(re.sub(r"\D", "", k) or 0)):
            for speaker, items in (obs_root[key] or {}).items():
                for item in items:
                    if isinstance(item, list) and item and isinstance(item[0], str):
                        observations.append((speaker, item[0], dia_ids(item[1:])))
        questions = [
            (q["question"], int(q["category"]), dia_ids(q.get("evidence", [])))
            for q in sample.get("qa", [])
            if int(q.get("category", 0)) in CATEGORIES and isinstance(q.get("question"), str)
        ]
        yield Conversation(name, observations, questions)


def first_rank(
    ids: list[int], carries: dict[int, frozenset[str]], evidence: frozenset[str]
) -> int | None:
    """The 0-based rank of the first row carrying any evidence id, None if none does."""
    for rank, rid in enumerate(ids):
        if carries.get(rid, frozenset()) & evidence:
            return rank
    return None


class Bm25:
    """The reference: FTS5 bm25() over the same rows, OR of the question's words."""

    def __init__(self) -> None:
        self.conn = apsw.Connection(":memory:")
        self.conn.execute("CREATE VIRTUAL TABLE t USING fts5 (subject, content, "
                          "tokenize = 'unicode61 remove_diacritics 2')")

    def add(self, rid: int, subject: str, content: str) -> None:
        self.conn.execute("INSERT OR IGNORE INTO t (rowid, subject, content) VALUES (?, ?, ?)",
                          (rid, subject, content))

    def search(self, query: str, limit: int) -> list[int]:
        match = fts_query(query, "or", limit=64)
        if match is None:
            return []
        return [int(r) for (r,) in self.conn.execute(
            "SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t), rowid LIMIT ?", (match, limit))]


async def run_one(conv: Conversation, command: list[str], limit: int) -> Result:
    """Store and ask one conversation through a fresh `gantry mcp-memory`."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    result = Result(conv.name)
    with tempfile.TemporaryDirectory() as tmp:
        data, persona = Path(tmp) / "data", Path(tmp) / "persona"
        persona.mkdir()
        (persona / "SOUL.md").write_text("bench\n")
        params = StdioServerParameters(
            command=command[0],
            args=[*command[1:], "mcp-memory", "--data-dir", str(data),
                  "--persona-dir", str(persona)],
            env={"PYTHONPATH": str(ROOT), "DATA_DIR": str(data), "PERSONA_DIR": str(persona)},
        )
        carries: dict[int, frozenset[str]] = defaultdict(frozenset)
        bm25 = Bm25()
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()

            async def call(name: str, args: dict[str, Any]) -> tuple[str, bool]:
                out = await session.call_tool(name, args)
                text = "".join(getattr(c, "text", "") for c in out.content)
                return text, bool(out.is_error)

            for speaker, text, ids in conv.observations:
                reply, error = await call("memory_store",
                                          {"kind": "fact", "subject": speaker, "content": text})
                m = _ROW.search(reply)
                if error or m is None:
                    result.skipped += 1
                    continue
                rid = int(m.group(1))
                carries[rid] = carries[rid] | ids
                bm25.add(rid, speaker, text)
                result.stored += 1
            for question, category, evidence in conv.questions:
                if not evidence:
                    result.skipped += 1
                    continue
                reply, _ = await call("memory_recall", {"query": question})
                ids = [int(m.group(1)) for line in reply.splitlines()
                       if (m := re.match(r"#(\d+) ", line))]
                result.rows.append((category, evidence, first_rank(ids, carries, evidence),
                                    first_rank(bm25.search(question, limit), carries, evidence)))
    return result


def rates(rows: list[tuple[int, frozenset[str], int | None, int | None]], which: int,
          ks: list[int]) -> list[float]:
    return [sum(1 for r in rows if r[which] is not None and r[which] < k) / max(1, len(rows))
            for k in ks]


def table(results: list[Result], ks: list[int], by_category: bool) -> str:
    head = " ".join(f"{'g@' + str(k):>6}" for k in ks) + "  " + " ".join(
        f"{'b@' + str(k):>6}" for k in ks)
    lines = [f"{'conversation':<14} {'rows':>5} {'qs':>5}  {head}   (g = gantry, b = BM25)"]

    def line(label: str, rows: list[Any], stored: int | str) -> str:
        g = " ".join(f"{v:>6.3f}" for v in rates(rows, 2, ks))
        b = " ".join(f"{v:>6.3f}" for v in rates(rows, 3, ks))
        return f"{label:<14} {stored:>5} {len(rows):>5}  {g}  {b}"

    for r in results:
        lines.append(line(r.name, r.rows, r.stored))
    every = [row for r in results for row in r.rows]
    lines.append(line("all", every, sum(r.stored for r in results)))
    if by_category:
        for cat, label in CATEGORIES.items():
            lines.append(line(f"  {cat} {label}", [row for row in every if row[0] == cat], ""))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path, nargs="?", default=os.environ.get("LOCOMO_DIR") or None,
                    help="a directory of LoCoMo-format JSON files (default: $LOCOMO_DIR)")
    ap.add_argument("--k", default="1,5,10", help="cut-offs (default 1,5,10; at most 10)")
    ap.add_argument("--by-category", action="store_true", help="add a row per question category")
    ap.add_argument("--command", default=f"{sys.executable} -m gantry",
                    help="how to run gantry (default: this python -m gantry; or a binary path)")
    args = ap.parse_args()
    if args.dir is None:
        print("memory_quality: skipped (give a directory of LoCoMo JSON files, or set "
              "LOCOMO_DIR; the data is not part of the repository)")
        return
    ks = sorted({min(10, int(k)) for k in args.k.split(",")})
    if not Path(args.dir).is_dir():
        sys.exit(f"memory_quality: {args.dir} is not a directory")
    files = sorted(p for p in Path(args.dir).iterdir() if p.suffix == ".json")
    if not files:
        sys.exit(f"no *.json files in {args.dir}")
    results = []
    for path in files:
        for conv in conversations(path):
            results.append(anyio.run(run_one, conv, args.command.split(), max(ks)))
    skipped = sum(r.skipped for r in results)
    print(table(results, ks, args.by_category))
    if skipped:
        print(f"({skipped} observations or questions skipped: refused by memory_store, "
              "or no readable evidence id)", file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
