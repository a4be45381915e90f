"""aiogram's method and type classes created on first use in the binary, not at `import aiogram`.

`aiogram/methods/__init__.py` imports all ~180 method modules, `aiogram/types/__init__.py` all
~450 type names, and `aiogram/client/bot.py` imports every method and ~70 types at module
level, though it uses each method only inside the `async def` that sends it and the types
only in (string) annotations. Creating a pydantic model class costs ~2.4 ms even when its
building is deferred (gantry.channel.telegram.lazy_aiogram), so creating them all is most of the
binary's Telegram start-up, while gantry's channel sends eight methods and, before its first
getUpdates, reads one type (User) (issue 14). build/build.py writes these replacements
into a Nuitka package configuration (`module_code`: the whole module replaced; site-packages
is never edited):

* `aiogram.methods`: a package exporting the same `__all__`, each name imported from its
  submodule on first attribute access. The name → submodule map is read from the installed
  file's ast; anything there besides `from .x import Name` and `__all__` fails the build.
* `aiogram.types`: the same, and the `_types_namespace` dict + `model_rebuild` loop ending
  the installed file are dropped; the dict's entries besides `__all__` (List, Optional, ...)
  are kept as `_NAMESPACE_EXTRA` for gantry.channel.telegram.lazy_aiogram, which builds each class
  on first use against them and the names its annotations reach. Any other shape (a changed
  loop, another statement) fails the build.
* `aiogram.client.bot`: the installed file with its `aiogram.methods` and `aiogram.types`
  imports moved into each function that uses those names (ast rewrite; the types are only in
  annotations, strings under `from __future__ import annotations`, so none is moved). A name
  used at def or class time (a default, a decorator, a class attribute) fails the build
  rather than ship a module that breaks.

* `aiogram.types.base` and `aiogram.dispatcher.event.bases`: the installed files without
  `from unittest.mock import sentinel`, which they import for a few named marker objects
  (`sentinel.UNSET`, ...) and which brings unittest, difflib and pprint into every Telegram
  process (~1 MiB, issue 44). Each `sentinel.NAME` becomes a module-level marker of the same
  repr (`sentinel.NAME`), one object per name and module, as stock's are per name; any other
  use of `sentinel` fails the build.

Nuitka cannot see an import by computed name, so the configuration also declares every
method and type module an implicit import of its package: all stay in the binary, as
bytecode. tests/test_build_aiogram_lean.py checks the replacements against the installed
aiogram.
"""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import aiogram_trim
from lean_common import LeanError, installed, loads
from lean_common import package_config as _package_config

METHODS = "aiogram.methods"
TYPES = "aiogram.types"
BOT = "aiogram.client.bot"
# The rebuild loop ending the installed aiogram/types/__init__.py, as ast.unparse writes it;
# the lazy replacement drops it (gantry.channel.telegram.lazy_aiogram builds each class on first
# use).
REBUILD_LOOP = """for _entity_name in __all__:
    _entity = globals()[_entity_name]
    if hasattr(_entity, 'model_rebuild'):
        _entity.model_rebuild(_types_namespace=_types_namespace)"""
NAMESPACE = "_types_namespace"
ALL_ENTRY = "{name: globals()[name] for name in __all__}"
LOOP_NAMES = {"_entity", "_entity_name", NAMESPACE}
SENTINEL_MODULES = ("aiogram.types.base", "aiogram.dispatcher.event.bases")
# What each marker is in the rewritten modules: as unittest.mock's, a named object whose repr
# says its name.
_MARKER = '''class _Marker:
    """A named marker object, in place of unittest.mock.sentinel's (build/aiogram_lean.py)."""
    __slots__ = ('name',)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return 'sentinel.' + self.name
'''
# The packages whose names client/bot.py imports at module level and the rewrite moves.
LAZY_PACKAGES = ("methods", "types")

# The module-level lookup both lazy packages share: each name imported on first access.
_LAZY_LOOKUP = '''
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

LAZY_METHODS = '''"""aiogram.methods, as frozen into gantry: the same names, each imported from its
module on first use (build/aiogram_lean.py explains why)."""

import importlib as _importlib

# name -> (submodule, name there); gantry.channel.telegram.lazy_aiogram reads it.
_LAZY_WHERE = {where!r}

''' + _LAZY_LOOKUP


LAZY_TYPES = '''"""aiogram.types, as frozen into gantry: the same names, each imported from its
module on first use, and no rebuild loop (build/aiogram_lean.py explains why)."""

import importlib as _importlib
{kept}

# name -> (submodule, name there); gantry.channel.telegram.lazy_aiogram reads it.
_LAZY_WHERE = {where!r}

# What aiogram's rebuild loop added to its forward-reference namespace besides __all__;
# gantry.channel.telegram.lazy_aiogram builds each class against these and the names it needs.
_NAMESPACE_EXTRA = {{{extra}}}

''' + _LAZY_LOOKUP


def methods_map(path: Path | None = None) -> tuple[dict[str, tuple[str, str]], tuple[str, ...]]:
    """(name -> (".submodule", name there), __all__) of the installed methods/__init__.py."""
    where, all_names, _kept, _extra = _package_map(path or installed(METHODS), types=False)
    return where, all_names


def types_map(path: Path | None = None) -> tuple[dict[str, tuple[str, str]], tuple[str, ...],
                                                 list[str], dict[str, str]]:
    """The installed types/__init__.py: (name -> (".submodule", name there), __all__, the
    other imports' source, and the rebuild namespace's extra entries: name -> source)."""
    return _package_map(path or installed(TYPES), types=True)


def _package_map(path: Path, types: bool) -> tuple[dict[str, tuple[str, str]], tuple[str, ...],
                                                  list[str], dict[str, str]]:
    """What a lazy replacement of the package __init__ at `path` needs; LeanError on anything
    else at module level. `types`: aiogram.types' shape (other imports kept, the namespace and
    rebuild loop ending it understood and dropped)."""
    tree = ast.parse(path.read_text())
    where: dict[str, tuple[str, str]] = {}
    kept: list[str] = []
    bound: set[str] = set()
    extra: dict[str, str] | None = None
    loop = False
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
        elif types and isinstance(node, ast.ImportFrom) and node.level != 1 and extra is None:
            if any(a.name == "*" for a in node.names):
                raise LeanError(f"{path}:{node.lineno}: star import")
            bound.update(a.asname or a.name for a in node.names)
            kept.append(ast.unparse(node))
        elif (types and extra is None and isinstance(node, ast.Assign)
              and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
              and node.targets[0].id == NAMESPACE):
            extra = _namespace_extra(path, node, bound)
        elif types and extra is not None and not loop and ast.unparse(node) == REBUILD_LOOP:
            loop = True
        elif (types and loop and isinstance(node, ast.Delete)
              and all(isinstance(t, ast.Name) and t.id in LOOP_NAMES for t in node.targets)):
            continue
        else:
            raise LeanError(f"{path}:{node.lineno}: unexpected {type(node).__name__} at module "
                            "level; re-check build/aiogram_lean.py against this aiogram")
    if all_names is None:
        raise LeanError(f"{path}: no __all__")
    missing = [n for n in all_names if n not in where]
    if missing:
        raise LeanError(f"{path}: __all__ names not imported from a submodule: {missing[:5]}")
    if types and (extra is None or not loop):
        raise LeanError(f"{path}: no `{NAMESPACE}` dict and rebuild loop over __all__ at the "
                        "end; re-check build/aiogram_lean.py and "
                        "gantry.channel.telegram.lazy_aiogram")
    clash = sorted(bound & set(where))
    if clash:
        raise LeanError(f"{path}: {clash} both imported lazily and kept")
    return where, all_names, kept, extra or {}


def _namespace_extra(path: Path, node: ast.Assign, bound: set[str]) -> dict[str, str]:
    """The `_types_namespace = {"Name": value, ..., **{every name of __all__}}` entries
    besides __all__: name -> the value's source, which may use only the kept imports."""
    value = node.value
    if not isinstance(value, ast.Dict):
        raise LeanError(f"{path}:{node.lineno}: {NAMESPACE} is not a dict display")
    extra: dict[str, str] = {}
    spread = 0
    for key, item in zip(value.keys, value.values, strict=True):
        if key is None:
            if ast.unparse(item) != ALL_ENTRY:
                raise LeanError(f"{path}:{node.lineno}: {NAMESPACE} spreads "
                                f"{ast.unparse(item)}, not every name of __all__")
            spread += 1
        elif isinstance(key, ast.Constant) and isinstance(key.value, str):
            unknown = loads([item]) - bound - set(dir(builtins))
            if unknown:
                raise LeanError(f"{path}:{node.lineno}: {NAMESPACE}[{key.value!r}] uses "
                                f"{sorted(unknown)}, which no kept import binds")
            extra[key.value] = ast.unparse(item)
        else:
            raise LeanError(f"{path}:{node.lineno}: {NAMESPACE} has a computed key")
    if spread != 1:
        raise LeanError(f"{path}:{node.lineno}: {NAMESPACE} does not spread __all__ once")
    return extra


def methods_source(path: Path | None = None) -> str:
    """The lazy replacement of aiogram/methods/__init__.py."""
    where, all_names = methods_map(path)
    return LAZY_METHODS.format(where=dict(sorted(where.items())), all_names=all_names)


def types_source(path: Path | None = None) -> str:
    """The lazy replacement of aiogram/types/__init__.py."""
    where, all_names, kept, extra = types_map(path)
    return LAZY_TYPES.format(where=dict(sorted(where.items())), all_names=all_names,
                             kept="\n".join(kept),
                             extra=", ".join(f"{k!r}: {v}" for k, v in extra.items()))


def _lazy_import_of(node: ast.AST) -> str | None:
    """"methods" or "types" for a module-level import from aiogram.methods/aiogram.types
    (as client/bot.py writes them: `from ..methods import ...`), else None."""
    if not isinstance(node, ast.ImportFrom):
        return None
    for package in LAZY_PACKAGES:
        if ((node.level == 2 and node.module == package)
                or (node.level == 0 and node.module == f"aiogram.{package}")):
            return package
    return None


def _move_into(fn: ast.FunctionDef | ast.AsyncFunctionDef, lazy: dict[str, str],
               where: str) -> None:
    """Fail on a lazy name evaluated at def time; import the ones the body uses inside it."""
    at_def = loads([*fn.decorator_list, *fn.args.defaults,
                     *(d for d in fn.args.kw_defaults if d is not None)]) & set(lazy)
    if at_def:
        raise LeanError(f"{where}:{fn.lineno}: {sorted(at_def)} evaluated at def time of "
                        f"{fn.name}()")
    used = sorted(loads(list(fn.body)) & set(lazy))
    if not used:
        return
    if any(isinstance(n, (ast.Global, ast.Nonlocal)) and set(n.names) & set(lazy)
           for n in ast.walk(fn)):
        raise LeanError(f"{where}:{fn.lineno}: {fn.name}() declares a lazy name global")
    imports: list[ast.stmt] = [
        ast.ImportFrom(module=package, level=2,
                       names=[ast.alias(name=n) for n in used if lazy[n] == package])
        for package in LAZY_PACKAGES if any(lazy[n] == package for n in used)]
    at = 1 if (fn.body and isinstance(fn.body[0], ast.Expr)
               and isinstance(fn.body[0].value, ast.Constant)
               and isinstance(fn.body[0].value.value, str)) else 0
    fn.body[at:at] = imports


def bot_source(path: Path | None = None, packages: tuple[str, ...] = LAZY_PACKAGES) -> str:
    """The installed client/bot.py with the method and type names (of `packages`) imported
    where used."""
    path = path or installed(BOT)
    tree = ast.parse(path.read_text())
    if not any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
               and any(a.name == "annotations" for a in n.names) for n in tree.body):
        raise LeanError(f"{path}: no `from __future__ import annotations`")
    lazy: dict[str, str] = {}
    body: list[ast.stmt] = []
    for node in tree.body:
        package = _lazy_import_of(node)
        if package is not None and package in packages:
            assert isinstance(node, ast.ImportFrom)
            for alias in node.names:
                if alias.name == "*" or alias.asname not in (None, alias.name):
                    raise LeanError(f"{path}:{node.lineno}: `{alias.name} as {alias.asname}` "
                                    f"from aiogram.{package}")
                if alias.name in lazy:
                    raise LeanError(f"{path}:{node.lineno}: {alias.name} imported again")
                lazy[alias.name] = package
        else:
            body.append(node)
    missing = [p for p in packages if p not in lazy.values()]
    if missing:
        raise LeanError(f"{path}: no module-level import from aiogram.{missing[0]}")
    names = set(lazy)
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            hit = {a.asname or a.name.split(".")[0] for a in node.names} & names
            if hit:
                raise LeanError(f"{path}:{node.lineno}: {sorted(hit)} imported again")
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            _move_into(node, lazy, str(path))
            continue
        if isinstance(node, ast.ClassDef):
            at_def = loads([*node.bases, *node.keywords, *node.decorator_list]) & names
            if at_def:
                raise LeanError(f"{path}:{node.lineno}: {sorted(at_def)} used by class "
                                f"{node.name}'s bases or decorators")
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    _move_into(stmt, lazy, str(path))
                    continue
                hit = loads([stmt]) & names
                if hit:
                    raise LeanError(f"{path}:{stmt.lineno}: {sorted(hit)} used at class level "
                                    f"in {node.name}")
            continue
        hit = loads([node]) & names
        if hit:
            raise LeanError(f"{path}:{node.lineno}: {sorted(hit)} used at module level")
    tree.body = body
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def sentinel_source(module: str, path: Path | None = None) -> str:
    """The installed `module` with `from unittest.mock import sentinel` gone and each
    `sentinel.NAME` read from a module-level marker `_SENTINEL_NAME`."""
    path = path or installed(module)
    tree = ast.parse(path.read_text())
    imports = [n for n in tree.body
               if isinstance(n, ast.ImportFrom) and n.module == "unittest.mock"]
    if (len(imports) != 1 or [(a.name, a.asname) for a in imports[0].names] != [("sentinel", None)]
            or any(isinstance(n, (ast.Import, ast.ImportFrom)) and n not in imports
                   and "unittest" in ast.unparse(n) for n in ast.walk(tree))):
        raise LeanError(f"{path}: not exactly one `from unittest.mock import sentinel`")
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.name for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    if "_Marker" in taken or any(t.startswith("_SENTINEL_") for t in taken):
        raise LeanError(f"{path}: already defines _Marker or a _SENTINEL_ name")
    names: list[str] = []

    class Markers(ast.NodeTransformer):
        def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
            if isinstance(node.value, ast.Name) and node.value.id == "sentinel":
                if not isinstance(node.ctx, ast.Load):
                    raise LeanError(f"{path}:{node.lineno}: sentinel.{node.attr} assigned")
                if node.attr not in names:
                    names.append(node.attr)
                return ast.copy_location(ast.Name(f"_SENTINEL_{node.attr}", ast.Load()), node)
            return self.generic_visit(node)

    tree = Markers().visit(tree)
    left = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "sentinel"]
    if left or not names:
        line = left[0].lineno if left else imports[0].lineno
        raise LeanError(f"{path}:{line}: `sentinel` used other than as sentinel.NAME")
    at = tree.body.index(imports[0])
    markers = ast.parse(_MARKER + "".join(f"_SENTINEL_{n} = _Marker({n!r})\n" for n in names))
    tree.body[at:at + 1] = markers.body
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def sources() -> dict[str, str]:
    """Module name -> replacement source, for the installed aiogram."""
    return {METHODS: methods_source(), TYPES: types_source(), BOT: bot_source(),
            **{module: sentinel_source(module) for module in SENTINEL_MODULES},
            **aiogram_trim.sources()}


def module_path(module: str, root: Path) -> Path:
    """Where `module`'s replacement goes under a copy of site-packages at `root`."""
    package = root / module.replace(".", "/")
    return package / "__init__.py" if module in (METHODS, TYPES) else package.with_suffix(".py")


def package_config() -> str:
    """A Nuitka user package configuration (YAML) with the three replacements."""
    methods, _ = methods_map()
    types, *_ = types_map()
    codes = sources()
    why = {METHODS: "create aiogram method classes on first use",
           TYPES: "create aiogram type classes on first use, without the rebuild loop",
           BOT: "import aiogram method and type classes where they are used",
           **{module: "named markers without importing unittest.mock"
              for module in SENTINEL_MODULES},
           **{module: "fields gantry never reads typed Any (build/aiogram_trim.py)"
              for module in aiogram_trim.KEEP}}
    return _package_config("aiogram_lean.py", codes, why,
                           {METHODS: sorted({METHODS + mod for mod, _name in methods.values()}),
                            TYPES: sorted({TYPES + mod for mod, _name in types.values()})})


def write_lean_copy(root: Path, types: bool = True, trim: bool = True) -> Path:
    """Copy the installed aiogram under `root` with the replacements written, as the binary
    has it; for tests and bench/, which put `root` first on sys.path. `types` False: the
    methods only (aiogram.types stock, bot.py's type imports left), for comparison in bench/;
    `trim` False: Update, Message and Chat with every field typed (build/aiogram_trim.py), likewise.
    Returns `root`."""
    import shutil

    source = installed(METHODS).parent.parent
    shutil.copytree(source, root / "aiogram", ignore=shutil.ignore_patterns("__pycache__"))
    codes = sources() if types else {METHODS: methods_source(),
                                     BOT: bot_source(packages=("methods",))}
    codes.update({module: sentinel_source(module) for module in SENTINEL_MODULES})
    if not trim:
        for module in aiogram_trim.KEEP:
            codes.pop(module, None)
    elif not types:
        codes.update(aiogram_trim.sources())
    for module, code in codes.items():
        module_path(module, root).write_text(code)
    return root
