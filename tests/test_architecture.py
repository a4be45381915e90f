"""docs/architecture.md stays true: it names every module under one floor, and the code's own
imports (function-level ones included) form no cycle, never reach a floor above, and break
none of the rules it states."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gantry"
DOC = ROOT / "docs" / "architecture.md"
# A rule line in the doc: "- `gantry.channel` never imports `gantry.mcp`" (prefixes: a module
# or a package and everything under it).
RULE = re.compile(r"^- `(gantry[\w.]*)` never imports `(gantry[\w.]*)`", re.MULTILINE)
FLOOR = re.compile(r"^### Floor (\d+): ", re.MULTILINE)
ROW = re.compile(r"^\| `(gantry/[\w/]+\.py)` \|", re.MULTILINE)


def modules() -> dict[str, Path]:
    """Every module under gantry/, by dotted name (a package by its own name)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the gantry modules it imports anywhere in its body (ast.walk: top-level,
    function-level and TYPE_CHECKING imports alike)."""

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(resolve(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                targets.update(resolve(f"{base}.{alias.name}") for alias in node.names)
        edges[name] = {t for t in targets if t is not None and t != name}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def floors(text: str) -> dict[str, int]:
    """Module path → the floor whose table lists it (a row under "### Floor N: …")."""
    found: dict[str, int] = {}
    heads = list(FLOOR.finditer(text))
    for head, after in zip(heads, [*heads[1:], None], strict=True):
        body = text[head.end(): after.start() if after else len(text)]
        for path in ROW.findall(body):
            assert path not in found, f"{path} is listed under two floors"
            found[path] = int(head.group(1))
    return found


def test_every_module_is_listed_under_one_floor() -> None:
    listed = floors(DOC.read_text(encoding="utf-8"))
    paths = {str(p.relative_to(ROOT)) for p in modules().values()}
    assert sorted(paths - set(listed)) == [], "docs/architecture.md does not list these"
    assert sorted(set(listed) - paths) == [], "docs/architecture.md lists modules that are gone"


def test_no_import_reaches_a_floor_above() -> None:
    listed = floors(DOC.read_text(encoding="utf-8"))
    mods = modules()
    floor = {name: listed[str(path.relative_to(ROOT))] for name, path in mods.items()
             if str(path.relative_to(ROOT)) in listed}  # the unlisted: the test above
    up = sorted(f"{src} (floor {floor[src]}) imports {dst} (floor {floor[dst]})"
                for src, dsts in imports(mods).items() if src in floor for dst in dsts
                if dst in floor and floor[dst] > floor[src])
    assert not up, "\n".join(up)


def test_no_import_cycle() -> None:
    assert cycles(imports(modules())) == []


def test_the_cycle_finder_finds_one() -> None:
    """Guard: the finder is not blind (a two-module and a three-module circle)."""
    edges = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c"}, "f": {"a"}}
    assert sorted(cycles(edges)) == [["a", "b"], ["c", "d", "e"]]


def test_no_import_breaks_a_stated_rule() -> None:
    rules = RULE.findall(DOC.read_text(encoding="utf-8"))
    assert len(rules) >= 5, "the map states its rules as '- `A` never imports `B`' lines"
    mods = modules()
    for importer, imported in rules:
        assert any(within(m, importer) for m in mods), f"rule names no module: {importer}"
        assert any(within(m, imported) for m in mods), f"rule names no module: {imported}"
    broken = sorted(f"{src} imports {dst} (rule: {importer} never imports {imported})"
                    for src, dsts in imports(mods).items() for dst in dsts
                    for importer, imported in rules
                    if within(src, importer) and within(dst, imported))
    assert not broken, "\n".join(broken)


def test_the_walk_sees_function_level_imports() -> None:
    """Guard: a lazy import inside a function is an edge (cli imports its commands so)."""
    edges = imports(modules())
    assert "gantry.runtime" in edges["gantry.cli"]
