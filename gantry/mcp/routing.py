"""Tool routing for big catalogs: rank the catalog against the conversation, offer the top few.

No embeddings, no vector service (seed 000): an in-memory SQLite FTS5 index with BM25. Most of
the ranking quality comes from the text put into each document — tool names split into words
(snake_case, camelCase, dotted), the description, and every parameter's name, description and
enum values — and from per-field weights; FTS5's porter tokenizer stems both sides.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import apsw

from gantry.tools import ROUTING, Offer, Tool

# Field weights for bm25(): name, server, description, parameters (tuned on BFCL, see bench/).
WEIGHTS = (4.0, 1.0, 2.0, 1.0)
MAX_QUERY_TERMS = 48
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# Words that carry no meaning for choosing a tool; dropping them keeps OR queries small.
STOPWORDS = frozenset(
    """
    a an and are as at be but by can could do does for from give has have he her his how
    i if in into is it its let me my of on or our please she should so some than that the
    their them then there these they this those to us was we were what when where which
    who why will with would you your tell want need like also just get
    """.split()  # noqa: SIM905
)


def words(text: str) -> list[str]:
    """Lower-case words of `text`, splitting snake_case, camelCase and dotted names."""
    out: list[str] = []
    for token in _WORD.findall(text):
        out.extend(p.lower() for p in _CAMEL.split(token) if p)
    return out


@dataclass(frozen=True)
class ToolDoc:
    """What the index knows of one tool: the name the model calls and its schema."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] | None = None
    server: str = ""


def _param_text(schema: Any, depth: int = 0) -> list[str]:
    """Names, descriptions and enum values of every property, nested ones too (bounded)."""
    if not isinstance(schema, Mapping) or depth > 4:
        return []
    out: list[str] = []
    props = schema.get("properties")
    if isinstance(props, Mapping):
        for key, sub in props.items():
            out.append(" ".join(words(str(key))))
            if isinstance(sub, Mapping):
                desc = sub.get("description")
                if isinstance(desc, str):
                    out.append(desc)
                enum = sub.get("enum")
                if isinstance(enum, list):
                    out.extend(str(v) for v in enum[:50])
                out.extend(_param_text(sub, depth + 1))
    items = schema.get("items")
    if isinstance(items, Mapping):
        out.extend(_param_text(items, depth + 1))
    return out


def match_query(text: str, limit: int = MAX_QUERY_TERMS) -> str:
    """An FTS5 MATCH expression for free text: its meaningful words OR-ed, each quoted.

    Any input is safe: only [^\\W_]+ runs reach the expression, so FTS5 syntax (quotes,
    AND/OR/NEAR, *, -, parentheses) in the text is never interpreted.
    """
    seen: dict[str, None] = {}
    for w in words(text):
        if w not in STOPWORDS and (len(w) > 1 or w.isdigit()):
            seen.setdefault(w, None)
        if len(seen) >= limit:
            break
    return " OR ".join(f'"{w}"' for w in seen)


class ToolIndex:
    """An FTS5 index over a tool catalog, rebuilt whole when the catalog changes."""

    def __init__(self, weights: Sequence[float] = WEIGHTS) -> None:
        self._db = apsw.Connection(":memory:")
        self._db.execute(
            "CREATE VIRTUAL TABLE tool USING fts5("
            "name, server, description, params, tokenize='porter unicode61')"
        )
        self._weights = tuple(weights)
        self._names: list[str] = []

    def __len__(self) -> int:
        return len(self._names)

    def rebuild(self, docs: Iterable[ToolDoc]) -> None:
        rows = []
        names = []
        for i, doc in enumerate(docs, 1):
            names.append(doc.name)
            rows.append((i, " ".join(words(doc.name)), " ".join(words(doc.server)),
                         doc.description, "\n".join(_param_text(doc.parameters or {}))))
        with self._db:
            self._db.execute("DELETE FROM tool")
            self._db.executemany(
                "INSERT INTO tool (rowid, name, server, description, params) VALUES (?,?,?,?,?)",
                rows,
            )
        self._names = names

    def search(self, text: str, k: int) -> list[str]:
        """The names of the `k` best tools for `text`, best first (fewer if few match)."""
        query = match_query(text)
        if not query or k <= 0 or not self._names:
            return []
        cursor = self._db.execute(
            "SELECT rowid FROM tool WHERE tool MATCH ? ORDER BY bm25(tool, ?, ?, ?, ?) LIMIT ?",
            (query, *self._weights, k),
        )
        return [self._names[row[0] - 1] for row in cursor]


# ---------------------------------------------------------------------------- per-turn selection

SEARCH_TOOL = "tools_search"
SOURCE = ROUTING
STICKY_PER_SESSION = 8
MAX_SESSIONS = 256
SEARCH_RESULTS = 8


def always_match(name: str, patterns: Sequence[str]) -> bool:
    """TOOLS_ALWAYS entries: exact tool names, or `server__*` prefixes."""
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


class Router:
    """Chooses the tools each model call is offered when the catalog is too big to send whole.

    Catalog tools (`is_catalog`, by default MCP servers') are ranked against the conversation;
    every other registered tool (memory, cron) is always offered, as are TOOLS_ALWAYS matches,
    tools this session used recently (sticky) and tools `tools_search` found during the turn.
    """

    def __init__(
        self,
        registry: Any,
        is_catalog: Callable[[Tool], bool] = lambda t: t.source.mcp,
        max_per_turn: int = 24,
        always: Sequence[str] = (),
    ) -> None:
        self.registry = registry
        self.is_catalog = is_catalog
        self.max_per_turn = max_per_turn
        self.always = tuple(always)
        self.index = ToolIndex()
        self._indexed_version = -1
        self._sticky: dict[str, list[str]] = {}
        self._found: dict[str, list[str]] = {}
        self._last: dict[str, Offer] = {}
        self.last: Offer | None = None

    def _catalog(self) -> list[Any]:
        tools = [t for t in self.registry.tools() if self.is_catalog(t)]
        if self.registry.version != self._indexed_version:
            self.index.rebuild(ToolDoc(t.name, t.description, t.parameters, t.source.name)
                               for t in tools)
            self._indexed_version = self.registry.version
        return tools

    def select(self, session: str, texts: Sequence[str]) -> Offer:
        """The tools for the next model call of `session`; `texts` newest first. Pure (for
        /status and `gantry tools list` too); `record` notes what a request carried."""
        catalog = self._catalog()
        others = [t for t in self.registry.tools()
                  if not self.is_catalog(t) and t.name != SEARCH_TOOL]
        routed = len(catalog) > self.max_per_turn  # MCP tools only: built-ins are always sent
        if not routed:
            names = [t.name for t in (*others, *catalog)]
        else:
            names = [t.name for t in others] + [SEARCH_TOOL]
            names += self._pick(session, texts, {t.name for t in catalog})
        tools = tuple(t for n in sorted(set(names)) if (t := self.registry.get(n)) is not None)
        return Offer(tools, routed, len(catalog), self.max_per_turn)

    def record(self, offer: Offer, session: str = "") -> None:
        """What the last model call (of `session`) was offered, for /status: its count is
        the one the request carried."""
        self.last = offer
        if session:
            self._last.pop(session, None)
            self._last[session] = offer
            while len(self._last) > MAX_SESSIONS:
                del self._last[next(iter(self._last))]

    def last_offer(self, session: str) -> Offer | None:
        """What the last model call of `session` carried (None before its first call)."""
        return self._last.get(session)

    def offer(self, session: str, texts: Sequence[str]) -> Offer:
        """`select`, recorded as the last call's offer."""
        offer = self.select(session, texts)
        self.record(offer, session)
        return offer

    def _pick(self, session: str, texts: Sequence[str], catalog: set[str]) -> list[str]:
        picked: dict[str, None] = {}
        for name in sorted(catalog):
            if always_match(name, self.always):
                picked.setdefault(name, None)
        for name in [*self._found.get(session, ()), *reversed(self._sticky.get(session, ()))]:
            if name in catalog:
                picked.setdefault(name, None)
        room = max(0, self.max_per_turn - len(picked))
        if room:
            for name in self.index.search("\n".join(texts), room + len(picked)):
                if len(picked) >= self.max_per_turn:
                    break
                picked.setdefault(name, None)
        return list(picked)

    def used(self, session: str, names: Iterable[str]) -> None:
        """Remember tools a session called, so follow-up turns keep them on offer."""
        new = list(dict.fromkeys(names))
        recent = [n for n in self._sticky.pop(session, []) if n not in new]
        recent = (recent + new)[-STICKY_PER_SESSION:]
        self._sticky[session] = recent
        _bound(self._sticky)

    def found(self, session: str, names: Iterable[str]) -> None:
        """Tools `tools_search` returned: offered from the next model call of this turn."""
        merged = list(dict.fromkeys([*self._found.pop(session, []), *names]))
        self._found[session] = merged[-self.max_per_turn:]
        _bound(self._found)

    def end_turn(self, session: str) -> None:
        self._found.pop(session, None)

    def status(self, session: str = "") -> str:
        """The /status line: catalog size and what the last model call (of `session`, if
        it made one) was offered."""
        last = self._last.get(session, self.last) if session else self.last
        if last is None:
            return f"tool routing: at most {self.max_per_turn} tools per call; nothing offered yet"
        mode = "routed" if last.routed else "all offered"
        return (f"tool routing: catalog {last.catalog}, last call offered {len(last.names)} "
                f"({mode}), ~{last.schema_tokens} schema tokens (est.)")

    def search(self, query: str, k: int = SEARCH_RESULTS) -> list[Any]:
        """Catalog tools matching `query`, best first (the tools_search tool's answer)."""
        by_name = {t.name: t for t in self._catalog()}
        return [by_name[n] for n in self.index.search(query, k) if n in by_name]


def _bound(sessions: dict[str, list[str]]) -> None:
    while len(sessions) > MAX_SESSIONS:
        del sessions[next(iter(sessions))]


def search_tool(router: Router) -> Tool:
    """The `tools_search` meta-tool: lets the model find a tool the ranking did not offer."""
    from gantry.tools import CALLER, ToolError

    async def call(args: dict[str, Any]) -> str:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("query must be a non-empty string describing the tool you need")
        hits = router.search(query)
        if not hits:
            return "no tool matches that; try other words"
        session = CALLER.get()
        if session:
            router.found(session, [t.name for t in hits])
        lines = [f"- {t.name}: {(t.description or '').strip().splitlines()[0][:160]}"
                 if (t.description or "").strip() else f"- {t.name}" for t in hits]
        return "These tools are now available to call:\n" + "\n".join(lines)

    return Tool(
        SEARCH_TOOL,
        "Find tools by what they do when none of the offered tools fits. Returns matching tool "
        "names, which become callable right after.",
        {"type": "object", "properties": {"query": {
            "type": "string", "description": "what the tool should do, in a few words"}},
         "required": ["query"]},
        call,
        source=SOURCE,
    )


# ---------------------------------------------------------------------------- operator CLI


class CatalogError(Exception):
    """A --catalog file that is not a JSON list of function definitions; `str()` says why."""


def load_catalog(path: str) -> list[ToolDoc]:
    """OpenAI-style function definitions (`{"type": "function", "function": {...}}` or the
    bare `{"name", "description", "parameters"}`) from a JSON file, for offline ranking."""
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CatalogError(f"--catalog {path}: cannot read it as JSON ({exc})") from None
    if not isinstance(data, list):
        raise CatalogError(f"--catalog {path}: expected a JSON list of function definitions")
    docs: list[ToolDoc] = []
    for i, item in enumerate(data):
        fn = item.get("function", item) if isinstance(item, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise CatalogError(f"--catalog {path}: item {i} has no function name")
        params = fn.get("parameters")
        docs.append(ToolDoc(fn["name"], str(fn.get("description") or ""),
                            params if isinstance(params, dict) else None))
    return docs


def search_main(docs: Sequence[ToolDoc], query: str | None, queries_file: str | None,
                top: int) -> int:
    """`gantry tools search`: ranked names, one per line; with --queries one JSON array per
    query line, in order, from one index built once."""
    import json
    import sys

    index = ToolIndex()
    index.rebuild(docs)
    if queries_file is None:
        for name in index.search(query or "", top):
            print(name)
        return 0
    try:
        with open(queries_file, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        print(f"gantry tools search: --queries {queries_file}: {exc}", file=sys.stderr)
        return 1
    for line in lines:
        print(json.dumps(index.search(line, top)))
    return 0
