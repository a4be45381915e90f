"""aiogram's method classes created on first use in the binary, not all at `import aiogram`.

`aiogram/methods/__init__.py` imports all ~180 method modules and `aiogram/client/bot.py`
imports every method class at module level, though it uses each one only inside the `async
def` that sends it. Creating a pydantic model class costs ~2.4 ms even when its building is
deferred (gantry.channel.aiogram_lazy), so the methods are ~0.4 s of the binary's Telegram
start-up, and gantry's channel sends eight of them (issue 14). build/build.py writes these
two replacements into a Nuitka package configuration (`module_code`: the whole module
replaced; site-packages is never edited):

* `aiogram.methods`: a package exporting the same `__all__`, each name imported from its
  submodule on first attribute access. The name → submodule map is read from the installed
  file's ast; anything there besides `from .x import Name` and `__all__` fails the build.
* `aiogram.client.bot`: the installed file with its `aiogram.methods` import moved into each
  function that uses those names (ast rewrite). A name used at def or class time (a default,
  a decorator, a class attribute) fails the build rather than ship a module that breaks.

Nuitka cannot see an import by computed name, so the configuration also declares every
method module an implicit import of `aiogram.methods`: all stay in the binary, as bytecode.
tests/test_build_aiogram_lean.py checks the replacements against the installed aiogram.
"""

from __future__ import annotations

import ast
from pathlib import Path

from lean_common import LeanError, installed, loads
from lean_common import package_config as _package_config

METHODS = "aiogram.methods"
BOT = "aiogram.client.bot"

LAZY_METHODS = '''"""aiogram.methods, as frozen into gantry: the same names, each imported from its
module on first use (build/aiogram_lean.py explains why)."""

import importlib as _importlib

# name -> (submodule, name there); gantry.channel.aiogram_lazy reads it.
_LAZY_WHERE = {where!r}


def __getattr__(name):
    where = _LAZY_WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {{__name__!r}} has no attribute {{name!r}}")
    value = getattr(_importlib.import_module(where[0], __name__), where[1])
    globals()[name] = value
    return value


def __dir__():
    return sorted({{*globals(), *_LAZY_WHERE}})


__all__ = {all_names!r}
'''


def methods_map(path: Path | None = None) -> tuple[dict[str, tuple[str, str]], tuple[str, ...]]:
    """(name -> (".submodule", name there), __all__) of the installed methods/__init__.py."""
    path = path or installed(METHODS)
    tree = ast.parse(path.read_text())
    where: dict[str, tuple[str, str]] = {}
    all_names: tuple[str, ...] | None = None
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                if alias.name == "*":
                    raise LeanError(f"{path}:{node.lineno}: star import")
                where[alias.asname or alias.name] = ("." + node.module, alias.name)
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1
              and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "__all__"):
            value = ast.literal_eval(node.value)
            if not isinstance(value, (tuple, list)) or not all(isinstance(v, str)
                                                               for v in value):
                raise LeanError(f"{path}:{node.lineno}: __all__ is not a list of names")
            all_names = tuple(value)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        else:
            raise LeanError(f"{path}:{node.lineno}: unexpected {type(node).__name__} at module "
                            "level; re-check build/aiogram_lean.py against this aiogram")
    if all_names is None:
        raise LeanError(f"{path}: no __all__")
    missing = [n for n in all_names if n not in where]
    if missing:
        raise LeanError(f"{path}: __all__ names not imported from a submodule: {missing[:5]}")
    return where, all_names


def methods_source(path: Path | None = None) -> str:
    """The lazy replacement of aiogram/methods/__init__.py."""
    where, all_names = methods_map(path)
    return LAZY_METHODS.format(where=dict(sorted(where.items())), all_names=all_names)


def _is_methods_import(node: ast.AST) -> bool:
    return isinstance(node, ast.ImportFrom) and (
        (node.level == 2 and node.module == "methods")
        or (node.level == 0 and node.module == METHODS))


def _move_into(fn: ast.FunctionDef | ast.AsyncFunctionDef, lazy: set[str], where: str) -> None:
    """Fail on a lazy name evaluated at def time; import the ones the body uses inside it."""
    at_def = loads([*fn.decorator_list, *fn.args.defaults,
                     *(d for d in fn.args.kw_defaults if d is not None)]) & lazy
    if at_def:
        raise LeanError(f"{where}:{fn.lineno}: {sorted(at_def)} evaluated at def time of "
                        f"{fn.name}()")
    used = sorted(loads(list(fn.body)) & lazy)
    if not used:
        return
    if any(isinstance(n, (ast.Global, ast.Nonlocal)) and set(n.names) & lazy
           for n in ast.walk(fn)):
        raise LeanError(f"{where}:{fn.lineno}: {fn.name}() declares a method name global")
    imp = ast.ImportFrom(module="methods", names=[ast.alias(name=n) for n in used], level=2)
    at = 1 if (fn.body and isinstance(fn.body[0], ast.Expr)
               and isinstance(fn.body[0].value, ast.Constant)
               and isinstance(fn.body[0].value.value, str)) else 0
    fn.body[at:at] = [imp]


def bot_source(path: Path | None = None) -> str:
    """The installed client/bot.py with the method names imported where they are used."""
    path = path or installed(BOT)
    tree = ast.parse(path.read_text())
    if not any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
               and any(a.name == "annotations" for a in n.names) for n in tree.body):
        raise LeanError(f"{path}: no `from __future__ import annotations`")
    lazy: set[str] = set()
    body: list[ast.stmt] = []
    for node in tree.body:
        if _is_methods_import(node):
            assert isinstance(node, ast.ImportFrom)
            for alias in node.names:
                if alias.name == "*" or alias.asname not in (None, alias.name):
                    raise LeanError(f"{path}:{node.lineno}: `{alias.name} as {alias.asname}` "
                                    "from aiogram.methods")
                lazy.add(alias.name)
        else:
            body.append(node)
    if not lazy:
        raise LeanError(f"{path}: no module-level import from aiogram.methods")
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            hit = {a.asname or a.name.split(".")[0] for a in node.names} & lazy
            if hit:
                raise LeanError(f"{path}:{node.lineno}: {sorted(hit)} imported again")
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            _move_into(node, lazy, str(path))
            continue
        if isinstance(node, ast.ClassDef):
            at_def = loads([*node.bases, *node.keywords, *node.decorator_list]) & lazy
            if at_def:
                raise LeanError(f"{path}:{node.lineno}: {sorted(at_def)} used by class "
                                f"{node.name}'s bases or decorators")
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    _move_into(stmt, lazy, str(path))
                    continue
                hit = loads([stmt]) & lazy
                if hit:
                    raise LeanError(f"{path}:{stmt.lineno}: {sorted(hit)} used at class level "
                                    f"in {node.name}")
            continue
        hit = loads([node]) & lazy
        if hit:
            raise LeanError(f"{path}:{node.lineno}: {sorted(hit)} used at module level")
    tree.body = body
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def sources() -> dict[str, str]:
    """Module name -> replacement source, for the installed aiogram."""
    return {METHODS: methods_source(), BOT: bot_source()}


def module_path(module: str, root: Path) -> Path:
    """Where `module`'s replacement goes under a copy of site-packages at `root`."""
    package = root / module.replace(".", "/")
    return package / "__init__.py" if module == METHODS else package.with_suffix(".py")


def package_config() -> str:
    """A Nuitka user package configuration (YAML) with both replacements."""
    where, _ = methods_map()
    codes = sources()
    return _package_config("aiogram_lean.py", codes,
                           dict.fromkeys(codes, "create aiogram method classes on first use"),
                           {METHODS: sorted({METHODS + mod for mod, _name in where.values()})})


def write_lean_copy(root: Path) -> Path:
    """Copy the installed aiogram under `root` with both replacements written, as the binary
    has it; for tests and bench/, which put `root` first on sys.path. Returns `root`."""
    import shutil

    source = installed(METHODS).parent.parent
    shutil.copytree(source, root / "aiogram", ignore=shutil.ignore_patterns("__pycache__"))
    for module, code in sources().items():
        module_path(module, root).write_text(code)
    return root
