"""Tool arguments against the tool's input schema: jsonschema, plus a compiled fast path.

jsonschema interprets the schema on every call: ~17 µs for a one-string-field object, the
largest single part of gantry's per-call overhead. The keywords most MCP input schemas use
compile here into a plain predicate. It is one-sided on purpose: it answers True only when
jsonschema would accept the instance too. Whatever it does not know (a keyword, a draft, an
`integer` sent as 1.0) makes it answer False or not compile at all, and jsonschema decides
and words the error. So the fast path can make a call cheaper, never let a bad one through.

jsonschema itself (~2 MiB resident) is imported only when a call first needs it: the fast
path compiles without it, deciding the draft from `$schema` with the table below.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger("gantry.mcp")

Check = Callable[[Any], bool]

# Keywords that never make an instance invalid (with no format checker, `format` is one).
ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$comment", "format", "deprecated",
    "readOnly", "writeOnly", "$schema", "$id", "contentMediaType", "contentEncoding",
})
# What compile_check turns into checks; any other keyword (but x-…) makes it Unsupported.
KNOWN = ANNOTATIONS | {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items",
    "minLength", "maxLength", "minItems", "maxItems", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "anyOf", "allOf",
}
# The drafts whose semantics for the compiled keywords are the ones below (draft 4 and
# earlier differ: boolean exclusiveMinimum, `required` inside properties, type "any").
FAST_DRAFTS = frozenset({"Draft6Validator", "Draft7Validator", "Draft201909Validator",
                         "Draft202012Validator"})
# Their meta-schema URIs as jsonschema's validator_for looks them up (normalised with
# urlsplit(...).geturl(), which drops an empty `#`); tests keep this in step with jsonschema.
FAST_META_SCHEMAS = frozenset({
    "http://json-schema.org/draft-06/schema",
    "http://json-schema.org/draft-07/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "https://json-schema.org/draft/2020-12/schema",
})


class Unsupported(Exception):
    """The schema uses something the fast path does not compile; jsonschema alone decides."""


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


TYPES: dict[str, Check] = {
    "object": lambda x: isinstance(x, dict),
    "array": lambda x: isinstance(x, list),
    "string": lambda x: isinstance(x, str),
    "integer": _is_int,
    "number": _is_number,
    "boolean": lambda x: isinstance(x, bool),
    "null": lambda x: x is None,
}


def _always(_: Any) -> bool:
    return True


def _never(_: Any) -> bool:
    return False


def _type(spec: Any) -> Check:
    names = [spec] if isinstance(spec, str) else spec
    if not isinstance(names, list) or not names or any(n not in TYPES for n in names):
        raise Unsupported("type")
    preds = tuple(TYPES[n] for n in names)
    if len(preds) == 1:
        return preds[0]
    return lambda x: any(p(x) for p in preds)


def _enum(values: Any) -> Check:
    """Membership by type and value, so True never matches 1 (jsonschema agrees)."""
    if not isinstance(values, list):
        raise Unsupported("enum")
    allowed = set()
    for v in values:
        if not (v is None or isinstance(v, str | int | float)):
            raise Unsupported("enum of containers")
        allowed.add((type(v), v))
    return lambda x: (type(x), x) in allowed if x is None or isinstance(
        x, str | int | float) else False


def _bound(schema: Mapping[str, Any], key: str) -> Any:
    value = schema[key]
    if not _is_number(value):
        raise Unsupported(key)
    return value


def _count(schema: Mapping[str, Any], key: str) -> int:
    value = schema[key]
    if not _is_int(value) or value < 0:
        raise Unsupported(key)
    return int(value)


def _joined(join: Callable[[Iterable[bool]], bool], subs: tuple[Check, ...]) -> Check:
    return lambda x: join(s(x) for s in subs)


def _object(schema: Mapping[str, Any], typed: bool = False) -> Check:
    """The object keywords' check; `typed`: the schema's type is "object", so a non-object
    fails here too."""
    props_spec = schema.get("properties", {})
    required = schema.get("required", [])
    extra_spec = schema.get("additionalProperties", True)
    if not isinstance(props_spec, dict) or not isinstance(required, list) or not all(
            isinstance(r, str) for r in required):
        raise Unsupported("properties/required")
    props = {name: compile_check(sub) for name, sub in props_spec.items()}
    extra: Check | None = None if extra_spec is True else compile_check(extra_spec)
    needed = tuple(required)

    def check(x: Any) -> bool:
        if not isinstance(x, dict):
            return not typed
        for key in needed:
            if key not in x:
                return False
        for key, value in x.items():
            sub = props.get(key)
            if sub is None:
                if extra is not None and not extra(value):
                    return False
            elif not sub(value):
                return False
        return True

    return check


def compile_check(schema: Any) -> Check:
    """A predicate that is True only for instances `schema` accepts; raises Unsupported for a
    schema (or subschema) using anything beyond the keywords handled here."""
    if schema is True:
        return _always
    if schema is False:
        return _never
    if not isinstance(schema, dict):
        raise Unsupported("schema is not an object")
    checks: list[Check] = []
    shaped = bool({"properties", "required", "additionalProperties"} & schema.keys())
    # `"type": "object"` with its keywords is one check, not two (the usual input schema).
    typed = shaped and schema.get("type") == "object"
    if "type" in schema and not typed:
        checks.append(_type(schema["type"]))
    if "enum" in schema:
        checks.append(_enum(schema["enum"]))
    if "const" in schema:
        checks.append(_enum([schema["const"]]))
    if shaped:
        checks.append(_object(schema, typed))
    if "items" in schema:
        item = compile_check(schema["items"])  # a list (tuple form) is Unsupported
        checks.append(lambda x: not isinstance(x, list) or all(item(v) for v in x))
    for key, ok in (("minLength", lambda n: lambda x: not isinstance(x, str) or len(x) >= n),
                    ("maxLength", lambda n: lambda x: not isinstance(x, str) or len(x) <= n),
                    ("minItems", lambda n: lambda x: not isinstance(x, list) or len(x) >= n),
                    ("maxItems", lambda n: lambda x: not isinstance(x, list) or len(x) <= n)):
        if key in schema:
            checks.append(ok(_count(schema, key)))
    for key, cmp in (("minimum", lambda b: lambda x: not _is_number(x) or x >= b),
                     ("maximum", lambda b: lambda x: not _is_number(x) or x <= b),
                     ("exclusiveMinimum", lambda b: lambda x: not _is_number(x) or x > b),
                     ("exclusiveMaximum", lambda b: lambda x: not _is_number(x) or x < b)):
        if key in schema:
            checks.append(cmp(_bound(schema, key)))
    for key, join in (("anyOf", any), ("allOf", all)):
        if key in schema:
            subs = schema[key]
            if not isinstance(subs, list) or not subs:
                raise Unsupported(key)
            checks.append(_joined(join, tuple(compile_check(s) for s in subs)))
    unknown = [k for k in schema if k not in KNOWN and not k.startswith("x-")]
    if unknown:
        raise Unsupported(", ".join(sorted(unknown)))
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    every = tuple(checks)

    def check_all(x: Any) -> bool:
        for c in every:  # noqa: SIM110  # a loop, not all(<generator>): it runs on every call
            if not c(x):
                return False
        return True

    return check_all


def fast_draft(schema: Any) -> bool:
    """Whether jsonschema would pick one of FAST_DRAFTS for `schema`, decided without importing
    it: no `$schema` means its default (the latest draft); an unknown URI means no fast path."""
    if not isinstance(schema, Mapping) or "$schema" not in schema:
        return True
    uri = schema["$schema"]
    if not isinstance(uri, str):
        return False
    try:
        return urlsplit(uri).geturl() in FAST_META_SCHEMAS
    except ValueError:
        return False


_UNBUILT: Any = object()


class ArgsValidator:
    """One tool's validator: the fast check compiled at tools/list, jsonschema's validator
    built on the first call the fast check does not decide, then kept."""

    __slots__ = ("_full", "fast", "schema", "tool")

    def __init__(self, schema: Mapping[str, Any], fast: Check | None, tool: str = "") -> None:
        self.schema = schema
        self.fast = fast
        self.tool = tool  # for the log line only
        self._full: Any = _UNBUILT

    def full(self) -> Any | None:
        """jsonschema's validator for the schema, or None when the schema is itself broken
        (logged once, here: the calls then go through unvalidated)."""
        if self._full is _UNBUILT:
            self._full = _build_full(self.schema, self.tool)
        return self._full

    def violation(self, args: Mapping[str, Any]) -> str | None:
        """The first schema violation as one sentence naming the field, or None."""
        if self.fast is not None and self.fast(args):
            return None
        full = self.full()
        if full is None:
            return None
        try:
            return _first_error(full, args)
        except Exception as exc:
            # A schema that passes the meta-schema can still break validation: a $ref cycle
            # (RecursionError), a $ref to nothing. Like any broken schema: warned once, and
            # this and later calls go through unvalidated.
            _unusable(self.tool, f"{type(exc).__name__}: {str(exc)[:160]}")
            self._full = None
            return None


def _first_error(full: Any, args: Mapping[str, Any]) -> str | None:
    if full.is_valid(args):  # is_valid: without building error objects
        return None
    from jsonschema.exceptions import best_match

    error = best_match(full.iter_errors(args))
    if error is None:
        return None
    where = ".".join(str(p) for p in error.absolute_path) or "(the arguments object)"
    return f"invalid arguments: at {where}: {error.message}"


def _unusable(tool: str, error: str) -> None:
    log.warning("tool input schema is unusable; arguments not validated",
                extra={"tool": tool, "error": error[:200]})


def _build_full(schema: Mapping[str, Any], tool: str = "") -> Any | None:
    from jsonschema import validators
    from jsonschema.exceptions import SchemaError

    try:
        cls = validators.validator_for(schema)
        cls.check_schema(schema)
        return cls(schema)
    except SchemaError as exc:
        error = exc.message
    except Exception as exc:  # e.g. an unknown $schema dialect: the call still goes through
        error = f"{type(exc).__name__}: {exc}"
    _unusable(tool, error)
    return None


def compile_schema(schema: Mapping[str, Any], tool: str = "") -> ArgsValidator:
    """The validator for one input schema, with only the fast check compiled (no jsonschema).

    A schema that is itself broken is found when a call first needs jsonschema (the fast
    check does not compile, or answers False): then a warning is logged once and that tool's
    calls go through unvalidated, as before, only no longer at tools/list.
    """
    fast: Check | None = None
    if fast_draft(schema):
        try:
            fast = compile_check(schema)
        except (Unsupported, RecursionError):
            fast = None
    return ArgsValidator(schema, fast, tool)


def violation(validator: ArgsValidator | None, args: Mapping[str, Any]) -> str | None:
    """`validator.violation(args)`, or None when the tool has no usable schema."""
    return None if validator is None else validator.violation(args)
