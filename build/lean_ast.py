"""The one ast question the build/*_lean.py rewrites share: which names does this code load?"""

from __future__ import annotations

import ast
from collections.abc import Iterable


def loads(nodes: Iterable[ast.AST]) -> set[str]:
    """Names the nodes load when run (a `global`/`nonlocal` counts as a use). Parameter
    annotations are skipped: with `from __future__ import annotations` they are strings,
    never evaluated."""
    found: set[str] = set()
    stack = list(nodes)
    while stack:
        n = stack.pop()
        if isinstance(n, ast.arg):
            continue
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend(n.body)
            stack.extend(n.decorator_list)
            stack.extend(d for d in (*n.args.defaults, *n.args.kw_defaults) if d is not None)
            continue
        if isinstance(n, ast.AnnAssign):
            stack.extend(x for x in (n.target, n.value) if x is not None)
            continue
        if isinstance(n, ast.Name):
            found.add(n.id)
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            found.update(n.names)
        stack.extend(ast.iter_child_nodes(n))
    return found
