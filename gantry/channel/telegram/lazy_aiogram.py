"""Import aiogram with its pydantic models built on first use, not all at import (issue 14).

aiogram 3 declares its ~400 types ``defer_build=True``, yet ``aiogram/types/__init__.py`` then
calls ``model_rebuild(_types_namespace=...)`` on every one of them (upstream issues #1513,
#1876), and its ~180 methods are not deferred at all: ``import aiogram`` builds over 500
validators and serializers, about 3 s and 130 MiB, of which gantry uses a dozen.

Importing this module imports aiogram once, with two pydantic hooks active for the duration
of that import only (nothing in site-packages is edited):

* ``BaseModel.model_rebuild``: aiogram's rebuild loop over its types is answered without
  building; the forward-reference namespace the loop passes is kept instead;
* ``BaseModel.__pydantic_init_subclass__``: records every model class aiogram's ``types`` and
  ``methods`` packages define, and marks ``TelegramMethod`` ``defer_build`` so the method
  classes defined after it are deferred like the types.

Afterwards every recorded class (and ``Response``, whose parametrized forms such as
``Response[list[Update]]`` are created per request) carries that namespace as its
``__pydantic_parent_namespace__``, which pydantic's own first-use rebuild (the ``MockValSer``
placed on deferred models) merges into the names it resolves annotations against: a model is
built, exactly as aiogram's loop would have built it, the first time it validates or
serialises. One more path needs help: an instance made while validating its parent (a
``Message`` inside an ``Update``) exists before its own class is built, and pydantic-core's
serializer, when it meets such an instance where the schema does not say what it is (unions,
``Any``), fetches ``__pydantic_serializer__`` from the instance in Rust, where a ``MockValSer``
cannot rebuild itself. Each deferred class's serializer mock is therefore also a descriptor
that builds the class when read through an instance.

In the binary, ``aiogram.methods`` and ``aiogram.types`` are lazy (build/aiogram_lean.py): a
class is created when first imported, mostly after this module is done. ``TelegramMethod``
and ``TelegramObject`` therefore get their own ``__pydantic_init_subclass__`` (chaining to the
inherited one) that prepares each class created later like the rest; one method (``PROBE``)
and one type (``TYPE_PROBE``) are checked. The lazy ``aiogram.types`` has no rebuild loop, so
there is no namespace to keep, and one of every name would create every class: each class
instead gets a view (``_View``, lazy_types.py) that, when pydantic reads it to build the
class, creates only the names the class's annotations reach (``_Reach``), and
``Response[...]`` walks its arguments as it is parametrized. Falling back to stock there
means running the dropped loop.

tests/test_aiogram_lazy.py checks types, methods and responses validate and serialise as with
stock aiogram, and fails if aiogram's import shape or pydantic's hooks change.

If aiogram is already imported, or any hook or expectation is missing, aiogram is imported
(again) unmodified and one warning is logged: stock behaviour, slower start.

One more saving for the same window (and, with a lazy aiogram.types, for each batch of classes
created on demand later), independent of the hooks: aiogram's annotations are
strings, and ``typing.ForwardRef`` compiles each one it is made from — about 4,100 compiles of
some 640 distinct strings (``"str | None"`` a few hundred times) while the classes are created.
``typing``'s ``compile`` is pointed at a memo for the duration of the import (code objects are
immutable, so sharing one is safe); afterwards ``typing`` is as it was.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
from typing import Any

from gantry.channel.telegram.lazy_types import (
    Namespaces,
    ShapeChanged,
    compile_once,
    lazy_types_namespaces,
)

log = logging.getLogger("gantry.channel.aiogram_lazy")

TYPES = "aiogram.types"
METHODS = "aiogram.methods"
BASE = "aiogram.methods.base"
# A method every Telegram channel sends first and the type it returns; checked to be deferred
# like the rest.
PROBE = "GetMe"
TYPE_PROBE = "User"
# Parameters of pydantic's BaseModel.model_rebuild the rebuild loop and the first-use rebuild
# rely on; a pydantic that renames them must not be patched blindly.
REBUILD_PARAMS = ("force", "raise_errors", "_parent_namespace_depth", "_types_namespace")

# "lazy" once applied, "stock" after a fallback, None before the first import of this module.
state: str | None = None


def _check_pydantic() -> tuple[Any, Any]:
    """pydantic's deferral hooks this shim relies on; (model_rebuild, init_subclass) originals."""
    import pydantic
    from pydantic._internal import _mock_val_ser

    base = pydantic.BaseModel
    rebuild = base.__dict__.get("model_rebuild")
    init_sub = base.__dict__.get("__pydantic_init_subclass__")
    if not isinstance(rebuild, classmethod) or not isinstance(init_sub, classmethod):
        raise ShapeChanged("BaseModel.model_rebuild/__pydantic_init_subclass__ not classmethods")
    params = inspect.signature(rebuild.__func__).parameters
    missing = [p for p in REBUILD_PARAMS if p not in params]
    if missing:
        raise ShapeChanged(f"BaseModel.model_rebuild lacks {missing}")
    if not hasattr(_mock_val_ser, "MockValSer") or not hasattr(_mock_val_ser, "set_model_mocks"):
        raise ShapeChanged("pydantic._internal._mock_val_ser.MockValSer is gone")
    if "__pydantic_parent_namespace__" not in dir(base):
        raise ShapeChanged("BaseModel.__pydantic_parent_namespace__ is gone")
    return rebuild, init_sub


def _models(module: Any) -> list[Any]:
    """The pydantic model classes a package exports in its __all__."""
    out = []
    for name in getattr(module, "__all__", ()):
        obj = getattr(module, name, None)
        if isinstance(obj, type) and hasattr(obj, "model_rebuild"):
            out.append(obj)
    return out


def _serializer_on_demand(cls: Any) -> None:
    """Replace a deferred class's serializer mock with one that builds the class when read
    through an instance (see the module docstring)."""
    from pydantic._internal._mock_val_ser import MockValSer

    class SerializerOnDemand(MockValSer):
        def __init__(self) -> None:
            super().__init__(
                f"`{cls.__name__}` is not fully defined; aiogram's types namespace did not "
                "resolve its annotations", code="class-not-fully-defined",
                val_or_ser="serializer", attempt_rebuild=self.build)

        @staticmethod
        def build() -> Any:
            if cls.model_rebuild(raise_errors=False, _parent_namespace_depth=0) is False:
                return None
            return cls.__dict__.get("__pydantic_serializer__")

        def __get__(self, obj: object, owner: type | None = None) -> Any:
            if obj is None:
                return self
            built = self.build()
            return self if built is None or built is self else built

    if isinstance(cls.__dict__.get("__pydantic_serializer__"), MockValSer):
        cls.__pydantic_serializer__ = SerializerOnDemand()


def _lazy_import() -> None:
    """Import aiogram with the two hooks active; raise ShapeChanged if it did not go as planned."""
    import pydantic

    rebuild, init_sub = _check_pydantic()
    base = pydantic.BaseModel
    created: list[type] = []
    intercepted: dict[type, Any] = {}
    deferred_methods: list[type] = []

    def hooked_init_subclass(cls: type, **kwargs: Any) -> None:
        module = cls.__module__ or ""
        if module.startswith((TYPES + ".", METHODS + ".")):
            created.append(cls)
            if module == BASE and cls.__name__ == "TelegramMethod":
                cls.model_config["defer_build"] = True  # type: ignore[attr-defined]
                deferred_methods.append(cls)
        init_sub.__func__(cls, **kwargs)

    def hooked_rebuild(
        cls: Any,
        *,
        force: bool = False,
        raise_errors: bool = True,
        _parent_namespace_depth: int = 2,
        _types_namespace: Any = None,
    ) -> bool | None:
        if (_types_namespace is not None and not force and not cls.__pydantic_complete__
                and (cls.__module__ or "").startswith(TYPES + ".")):
            intercepted[cls] = _types_namespace
            return None
        depth = _parent_namespace_depth + 1 if _parent_namespace_depth > 0 else 0
        result: bool | None = rebuild.__func__(
            cls, force=force, raise_errors=raise_errors, _parent_namespace_depth=depth,
            _types_namespace=_types_namespace)
        return result

    base.model_rebuild = classmethod(hooked_rebuild)  # type: ignore[assignment,method-assign]
    base.__pydantic_init_subclass__ = classmethod(hooked_init_subclass)  # type: ignore[assignment,method-assign]
    try:
        with compile_once():
            importlib.import_module("aiogram")
            types_mod = importlib.import_module(TYPES)
            methods_mod = importlib.import_module(METHODS)
            base_mod = importlib.import_module(BASE)
    finally:
        base.model_rebuild = rebuild  # type: ignore[method-assign]
        base.__pydantic_init_subclass__ = init_sub  # type: ignore[method-assign]

    telegram_method = deferred_methods[0] if deferred_methods else None
    if telegram_method is None:
        raise ShapeChanged("aiogram.methods.base.TelegramMethod was not seen")
    response = getattr(base_mod, "Response", None)
    if not isinstance(response, type) or not hasattr(response, "__pydantic_generic_metadata__"):
        raise ShapeChanged("aiogram.methods.base.Response is not a generic pydantic model")
    lazy_where = vars(methods_mod).get("_LAZY_WHERE")
    if lazy_where is not None and not (isinstance(lazy_where, dict)
                                       and set(methods_mod.__all__) <= set(lazy_where)):
        raise ShapeChanged("aiogram.methods is lazy but does not map every name of __all__")
    namespaces: Namespaces
    if "_LAZY_WHERE" in vars(types_mod):
        if intercepted:
            raise ShapeChanged("aiogram.types is lazy but still ran its rebuild loop")
        namespaces = lazy_types_namespaces(types_mod, response)
        types_models = [c for c in created if (c.__module__ or "").startswith(TYPES + ".")]
    else:
        types_models = _models(types_mod)
        missed = [c.__name__ for c in types_models if c not in intercepted]
        if not types_models or missed:
            raise ShapeChanged(
                f"aiogram.types' rebuild loop was not seen for {missed[:5] or 'any'}")
        if len({id(ns) for ns in intercepted.values()}) != 1:
            raise ShapeChanged("aiogram.types' rebuild loop passed more than one namespace")
        namespaces = Namespaces(next(iter(intercepted.values())))
    methods_seen = [c for c in created if issubclass(c, telegram_method)]
    eager = [c.__name__ for c in [*types_models, *methods_seen]
             if getattr(c, "__pydantic_complete__", True) and c.__module__ != BASE]
    if eager:
        raise ShapeChanged(f"models built at import despite the shim: {eager[:5]}")
    _on_subclasses(telegram_method, METHODS, namespaces)
    if namespaces.lazy:
        _on_subclasses(types_mod.TelegramObject, TYPES, namespaces)
    cls: Any
    for cls in {*created, response}:
        _prepare(cls, namespaces.of(cls))
    for module, name in ((methods_mod, PROBE), (types_mod, TYPE_PROBE)):
        probe = getattr(module, name)
        if (probe.__pydantic_complete__
                or probe.__pydantic_parent_namespace__ is not namespaces.of(probe)
                or type(probe.__dict__.get("__pydantic_serializer__")).__name__
                != "SerializerOnDemand"):
            raise ShapeChanged(f"{module.__name__}.{name} was not deferred like the others")


def _prepare(cls: Any, namespace: Any) -> None:
    """Make a deferred aiogram class build on first use against aiogram.types' namespace."""
    cls.__pydantic_parent_namespace__ = namespace
    if not cls.__pydantic_complete__:
        _serializer_on_demand(cls)


def _on_subclasses(base: Any, package: str, namespaces: Namespaces) -> None:
    """Prepare every class of `package` derived from `base` (TelegramMethod, TelegramObject)
    as it is created: with the binary's lazy aiogram.methods and aiogram.types
    (build/aiogram_lean.py) most are created after the import."""
    own = base.__dict__.get("__pydantic_init_subclass__")
    if own is not None and not isinstance(own, classmethod):
        raise ShapeChanged(f"{base.__name__}.__pydantic_init_subclass__ is not a classmethod")

    def init_subclass(cls: Any, **kwargs: Any) -> None:
        if own is not None:
            own.__func__(cls, **kwargs)
        else:
            super(base, cls).__pydantic_init_subclass__(**kwargs)
        if (cls.__module__ or "").startswith(package + "."):
            _prepare(cls, namespaces.of(cls))

    base.__pydantic_init_subclass__ = classmethod(init_subclass)


def _rebuild_every_type(types_mod: Any) -> None:
    """What the installed aiogram/types/__init__.py ends with, for the binary's lazy
    aiogram.types (build/aiogram_lean.py drops it): every type created and built against one
    namespace of every name."""
    namespace = {**vars(types_mod).get("_NAMESPACE_EXTRA", {}),
                 **{name: getattr(types_mod, name) for name in types_mod.__all__}}
    for name in types_mod.__all__:
        entity = namespace[name]
        if hasattr(entity, "model_rebuild"):
            entity.model_rebuild(_types_namespace=namespace)


def _stock_import(reason: str) -> None:
    """Forget any half-patched aiogram and import it unmodified."""
    for name in [n for n in sys.modules if n == "aiogram" or n.startswith("aiogram.")]:
        del sys.modules[name]
    importlib.import_module("aiogram")
    types_mod = importlib.import_module(TYPES)
    if "_LAZY_WHERE" in vars(types_mod):
        _rebuild_every_type(types_mod)
    log.warning("aiogram lazy model building not applied; aiogram builds every model at import "
                "(slower start, more memory)", extra={"reason": reason})


def apply() -> str:
    """Import aiogram lazily if possible, else stock; returns "lazy" or "stock"."""
    global state
    if state is not None:
        return state
    if "aiogram" in sys.modules:
        state = "stock"
        log.warning("aiogram lazy model building not applied: aiogram was imported before the "
                    "shim", extra={"reason": "already imported"})
        return state
    try:
        _lazy_import()
        state = "lazy"
    except Exception as exc:  # any surprise in aiogram or pydantic: stock aiogram, one warning
        _stock_import(f"{type(exc).__name__}: {exc}")
        state = "stock"
    return state


apply()
