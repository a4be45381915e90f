"""The namespaces aiogram's classes are built against, and typing's compile memo.

One dict of every name after aiogram's rebuild loop, or, for the binary's lazy aiogram.types
(build/aiogram_lean.py), per-class views that create only the names a class's annotations
reach. Used by lazy_aiogram; imports neither aiogram nor pydantic.
"""

from __future__ import annotations

import ast
import contextlib
import typing
from collections.abc import Iterator
from typing import Any


class ShapeChanged(Exception):
    """aiogram or pydantic no longer looks like what this shim was written against."""



@contextlib.contextmanager
def compile_once() -> Iterator[None]:
    """typing.ForwardRef's compile() memoised while aiogram's classes are created."""
    if "compile" in vars(typing):  # someone else shadows it already: leave typing alone
        yield
        return
    codes: dict[str, Any] = {}

    def compile_once(source: Any, filename: Any, mode: Any, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs or not all(isinstance(a, str) for a in (source, filename, mode)):
            return compile(source, filename, mode, *args, **kwargs)
        key = f"{mode}\0{filename}\0{source}"
        code = codes.get(key)
        if code is None:
            code = codes[key] = compile(source, filename, mode)
        return code

    typing.compile = compile_once  # type: ignore[attr-defined]
    try:
        yield
    finally:
        del typing.compile  # type: ignore[attr-defined]


class Namespaces:
    """The forward-reference namespace each aiogram class is built against: with aiogram's
    rebuild loop, the one dict the loop passed (every name, all classes created)."""

    lazy = False

    def __init__(self, namespace: dict[str, Any]) -> None:
        self.namespace = namespace

    def of(self, cls: Any) -> dict[str, Any]:
        return self.namespace


class _Reach:
    """The names of aiogram.types a class's annotations reach, created on demand, for a lazy
    aiogram.types (build/aiogram_lean.py): stock's namespace holds every name, but building a
    class only ever resolves the names its annotations, and its fields' classes' annotations,
    mention. `shared` holds the extra names and every name created so far (the same objects
    stock's namespace holds)."""

    def __init__(self, types_mod: Any, extra: dict[str, Any]) -> None:
        self.module = types_mod
        self.names = frozenset(types_mod.__all__)
        self.shared: dict[str, Any] = dict(extra)
        self.walked: set[Any] = set()

    def require(self, *roots: Any) -> None:
        """Create every aiogram.types name the annotations under `roots` reach."""
        stack = list(roots)
        while stack:
            obj = stack.pop()
            if isinstance(obj, typing.ForwardRef):
                obj = obj.__forward_arg__
            if isinstance(obj, str):
                if obj in self.walked:
                    continue
                self.walked.add(obj)
                stack.extend(self._names_in(obj))
            elif isinstance(obj, type) and hasattr(obj, "__pydantic_fields__"):
                if obj in self.walked:
                    continue
                self.walked.add(obj)
                for klass in obj.__mro__:
                    stack.extend(vars(klass).get("__annotations__", {}).values())
                stack.extend(typing.get_args(obj))  # a parametrized generic's arguments
            elif type(obj).__name__ == "TypeAliasType":  # typing's or typing_extensions'
                stack.append(obj.__value__)
            else:
                stack.extend(typing.get_args(obj))

    def _names_in(self, annotation: str) -> list[Any]:
        """The values of the aiogram.types names an annotation string mentions (strings
        inside it, such as Optional["X"], walked as well)."""
        try:
            tree = ast.parse(annotation, mode="eval")
        except SyntaxError:
            return []
        found: list[Any] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in self.names:
                if node.id not in self.shared:
                    self.shared[node.id] = getattr(self.module, node.id)
                found.append(self.shared[node.id])
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append(node.value)
        return found


class _View(dict[str, Any]):
    """One class's `__pydantic_parent_namespace__` with a lazy aiogram.types. pydantic reads
    it only through `.items()` (unpack_lenient_weakvaluedict, in model_rebuild and when a
    parametrized generic is created; tests/test_aiogram_lazy.py checks both), which first
    creates the names the class's annotations reach, then yields those and every other name
    created so far. The dict itself stays empty: one shared copy, not one per class. `owner`
    None: Response, whose parametrized forms' arguments are walked as they are made
    (`Response.__class_getitem__`)."""

    def __init__(self, reach: _Reach, owner: Any) -> None:
        super().__init__()
        self._reach = reach
        self._owner = owner

    def items(self) -> Any:
        if self._owner is not None:
            with compile_once():
                self._reach.require(self._owner)
        return self._reach.shared.items()


class LazyNamespaces(Namespaces):
    """Per-class views that create only what the class reaches (see _Reach)."""

    lazy = True

    def __init__(self, reach: _Reach, response: Any) -> None:
        super().__init__(_View(reach, None))
        self.reach = reach
        self.response = response

    def of(self, cls: Any) -> dict[str, Any]:
        if cls is self.response:
            return self.namespace
        view = cls.__dict__.get("__pydantic_parent_namespace__")
        return view if isinstance(view, _View) else _View(self.reach, cls)


def lazy_types_namespaces(types_mod: Any, response: Any) -> LazyNamespaces:
    """Namespaces for a lazy aiogram.types, and `Response[...]` walking its arguments."""
    extra = vars(types_mod).get("_NAMESPACE_EXTRA")
    where = vars(types_mod).get("_LAZY_WHERE")
    if not (isinstance(extra, dict) and isinstance(where, dict)
            and set(types_mod.__all__) <= set(where)):
        raise ShapeChanged("aiogram.types is lazy but lacks _NAMESPACE_EXTRA or does not map "
                           "every name of __all__")
    getitem = response.__dict__.get("__class_getitem__", None)
    if getitem is not None or not callable(getattr(response, "__class_getitem__", None)):
        raise ShapeChanged("aiogram.methods.base.Response defines its own __class_getitem__")
    reach = _Reach(types_mod, extra)
    inherited = response.__class_getitem__.__func__

    def class_getitem(cls: Any, params: Any) -> Any:
        with compile_once():
            reach.require(*(params if isinstance(params, tuple) else (params,)))
        return inherited(cls, params)

    response.__class_getitem__ = classmethod(class_getitem)
    return LazyNamespaces(reach, response)
