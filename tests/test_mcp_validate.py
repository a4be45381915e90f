"""Tool argument validation: the compiled fast path never accepts what jsonschema rejects,
the error names the field, and the schemas MCP servers really send take the fast path."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from jsonschema import Draft7Validator, Draft202012Validator
from jsonschema.exceptions import SchemaError

from gantry.mcp.validate import (
    FAST_DRAFTS,
    FAST_META_SCHEMAS,
    Unsupported,
    compile_check,
    compile_schema,
    fast_draft,
    violation,
)

ROOT = Path(__file__).resolve().parents[1]

NAMES = st.sampled_from(["a", "b", "n", "text"])
PRIMITIVES = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from(
    [0.0, 1.0, 2.5, -1.5, math.inf, math.nan]), st.sampled_from(["", "a", "ab", "abc", "x"]))
JSON = st.recursive(PRIMITIVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(NAMES, inner, max_size=4)), max_leaves=12)
TYPE_NAMES = ["object", "array", "string", "integer", "number", "boolean", "null"]
TYPES = st.sampled_from(TYPE_NAMES)
NUM = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, -1.5, 2.0]))


def _some(**keys: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=keys)


def _leaf() -> st.SearchStrategy[Any]:
    """Small schemas: a few keywords each, so that instances both pass and fail them."""
    plain = PRIMITIVES.filter(lambda v: v == v)
    return st.one_of(
        st.booleans(),
        _some(type=st.one_of(TYPES, st.lists(TYPES, min_size=1, max_size=3, unique=True)),
              description=st.just("d"), title=st.just("t"), default=PRIMITIVES,
              format=st.just("email"), **{"x-vendor": st.just(1)}),
        _some(type=st.just("string"), minLength=st.integers(0, 3), maxLength=st.integers(0, 3)),
        _some(type=st.sampled_from(["integer", "number"]), minimum=NUM, maximum=NUM,
              exclusiveMinimum=NUM, exclusiveMaximum=NUM),
        _some(minItems=st.integers(0, 3), maxItems=st.integers(0, 3)),
        st.fixed_dictionaries({"enum": st.lists(plain, min_size=1, max_size=4)}),
        st.fixed_dictionaries({"const": plain}),
    )


def _extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.fixed_dictionaries({}, optional={
            "type": st.just("object"),
            "properties": st.dictionaries(NAMES, inner, max_size=3),
            "required": st.lists(NAMES, max_size=3, unique=True),
            "additionalProperties": st.one_of(st.booleans(), inner),
        }),
        st.fixed_dictionaries({"items": inner}, optional={"type": st.just("array"),
                                                          "minItems": st.integers(0, 2)}),
        st.fixed_dictionaries({"anyOf": st.lists(inner, min_size=1, max_size=3)}),
        st.fixed_dictionaries({"allOf": st.lists(inner, min_size=1, max_size=3)}),
    )


SCHEMAS = st.recursive(_leaf(), _extend, max_leaves=8)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SCHEMAS, st.lists(JSON, min_size=1, max_size=6), st.booleans())
def test_the_fast_path_accepts_only_what_jsonschema_accepts(
    schema: Any, instances: list[Any], draft7: bool
) -> None:
    cls = Draft7Validator if draft7 else Draft202012Validator
    try:
        cls.check_schema(schema)
    except SchemaError:
        assume(False)
    fast = compile_check(schema)
    full = cls(schema)
    for x in instances:
        if fast(x):
            assert full.is_valid(x), (schema, x)


def _integral_float(x: Any) -> bool:
    if isinstance(x, float):
        return x.is_integer()
    if isinstance(x, list):
        return any(_integral_float(v) for v in x)
    return isinstance(x, dict) and any(_integral_float(v) for v in x.values())


GRID_SCHEMAS: list[Any] = [
    True, False, {}, {"description": "only words"}, *({"type": t} for t in TYPE_NAMES),
    {"type": ["string", "null"]}, {"type": ["integer", "boolean"]},
    *({key: n} for key in ("minLength", "maxLength", "minItems", "maxItems") for n in (0, 1, 2)),
    *({key: b} for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
      for b in (0, 1, 1.5, -1)),
    {"enum": ["a", 1, None]}, {"enum": [True]}, {"enum": [0, 2.5]}, {"const": "x"},
    {"const": False}, {"required": ["a"]}, {"properties": {"a": {"type": "string"}}},
    {"properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False},
    {"properties": {"a": {}}, "additionalProperties": {"type": "integer"}},
    {"items": {"type": "string"}}, {"items": False}, {"type": "array", "items": {"minimum": 0}},
    {"anyOf": [{"type": "string"}, {"type": "null"}]}, {"allOf": [{"minimum": 0}, {"maximum": 1}]},
]
GRID_VALUES: list[Any] = [
    None, True, False, 0, 1, 2, -1, 0.0, 1.0, 1.5, 2.5, -1.5, math.inf, "", "a", "x", "ab",
    "abc", [], ["a"], ["a", "b"], [1, 2], [-1], [1.0], {}, {"a": "s"}, {"a": 1}, {"a": 1.0},
    {"a": None}, {"b": 1}, {"a": 1, "b": 2}, {"a": 1, "b": "s"},
]


@pytest.mark.parametrize("schema", GRID_SCHEMAS, ids=str)
def test_the_fast_path_agrees_with_jsonschema_on_every_keyword(schema: Any) -> None:
    """Exact agreement on a grid, except a float with an integral value (1.0), which the fast
    path leaves to jsonschema on purpose."""
    fast = compile_check(schema)
    full = Draft202012Validator(schema)
    for x in GRID_VALUES:
        valid = full.is_valid(x)
        if fast(x):
            assert valid, x
        else:
            assert not valid or _integral_float(x), x


@settings(max_examples=200, deadline=None)
@given(SCHEMAS.filter(lambda s: isinstance(s, dict)).map(lambda s: {**s, "type": "object"}),
       st.dictionaries(NAMES, JSON, max_size=4))
def test_a_violation_is_reported_exactly_when_jsonschema_finds_one(
    schema: dict[str, Any], args: dict[str, Any]
) -> None:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError:
        assume(False)
    v = compile_schema(schema)
    assert v is not None and v.fast is not None
    problem = violation(v, args)
    assert (problem is None) == Draft202012Validator(schema).is_valid(args), (schema, args)
    if problem is not None:
        assert problem.startswith("invalid arguments: at ")


# Input schemas as real servers send them: the official SDK's MCPServer (pydantic: titles,
# defaults, Optional as anyOf with null) and zod-based TypeScript servers (draft-07 $schema,
# additionalProperties false).
PYDANTIC = {"type": "object", "title": "countArguments", "required": ["path"], "properties": {
    "path": {"title": "Path", "type": "string"},
    "label": {"title": "Label", "type": "string", "default": ""},
    "limit": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}], "default": None},
}}
ZOD = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
       "additionalProperties": False, "required": ["message"], "properties": {
           "message": {"type": "string", "description": "Message to echo", "minLength": 1},
           "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
           "level": {"type": "number", "exclusiveMinimum": 0, "maximum": 10}}}


@pytest.mark.parametrize(("schema", "good", "bad", "field"), [
    (PYDANTIC, {"path": "/x", "limit": None}, {"path": "/x", "limit": 0}, "limit"),
    (PYDANTIC, {"path": "/x", "label": "l", "limit": 3}, {"label": "l"}, "(the arguments object)"),
    (ZOD, {"message": "hi", "tags": ["a"], "level": 10}, {"message": "hi", "tags": ["c"]},
     "tags.0"),
    (ZOD, {"message": "hi"}, {"message": "hi", "extra": 1}, "(the arguments object)"),
    (ZOD, {"message": "hi", "level": 0.5}, {"message": "", "level": 1}, "message"),
])
def test_real_server_schemas_take_the_fast_path_and_errors_name_the_field(
    schema: dict[str, Any], good: dict[str, Any], bad: dict[str, Any], field: str
) -> None:
    v = compile_schema(schema)
    assert v is not None and v.fast is not None
    assert v.fast(good) and violation(v, good) is None
    assert not v.fast(bad)
    assert str(violation(v, bad)).startswith(f"invalid arguments: at {field}: ")


@pytest.mark.parametrize(("schema", "bad"), [
    ({"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}},
      "$defs": {"P": {"type": "string"}}}, {"p": 1}),
    ({"type": "object", "properties": {"s": {"type": "string", "pattern": "^a"}}}, {"s": "b"}),
    ({"type": "object", "properties": {"s": {"oneOf": [{"type": "string"}, {"type": "null"}]}}},
     {"s": 1}),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
      "properties": {"t": {"type": "array", "items": [{"type": "string"}]}}}, {"t": [1]}),
])
def test_what_the_fast_path_does_not_know_goes_to_jsonschema(
    schema: dict[str, Any], bad: dict[str, Any]
) -> None:
    with pytest.raises(Unsupported):
        compile_check(schema)
    v = compile_schema(schema)
    assert v is not None and v.fast is None
    assert str(violation(v, bad)).startswith(f"invalid arguments: at {next(iter(bad))}")
    assert violation(v, {}) is None


def test_draft4_and_floats_as_integers_are_left_to_jsonschema() -> None:
    draft4 = compile_schema({"$schema": "http://json-schema.org/draft-04/schema#",
                             "type": "object", "properties": {"n": {"type": "integer"}}})
    assert draft4 is not None and draft4.fast is None
    assert violation(draft4, {"n": 1.5}) == "invalid arguments: at n: 1.5 is not of type 'integer'"
    v = compile_schema({"type": "object", "properties": {"n": {"type": "integer"}}})
    assert v is not None and v.fast is not None
    assert not v.fast({"n": 1.0}) and violation(v, {"n": 1.0}) is None  # 2020-12: 1.0 is one


def test_argument_validation_names_the_field_and_tolerates_broken_schemas(
    caplog: pytest.LogCaptureFixture,
) -> None:
    v = compile_schema({"type": "object", "properties": {"n": {"type": "integer"},
                                                         "o": {"type": "object", "properties": {
                                                             "x": {"enum": ["a", "b"]}}}},
                        "required": ["n"]})
    assert v is not None and v.fast is not None
    assert violation(v, {"n": 1}) is None
    assert violation(v, {"n": "1"}) == "invalid arguments: at n: '1' is not of type 'integer'"
    assert violation(v, {}) == ("invalid arguments: at (the arguments object): "
                                "'n' is a required property")
    assert "at o.x:" in str(violation(v, {"n": 1, "o": {"x": "c"}}))
    broken = compile_schema({"type": "object", "properties": {"a": {"type": "nope"}}})
    assert broken.fast is None and not caplog.records  # found at first need, not at tools/list
    with caplog.at_level(logging.WARNING, logger="gantry.mcp"):
        assert violation(broken, {"a": 1}) is None
        assert violation(broken, {"a": "x"}) is None
    assert [r.getMessage() for r in caplog.records] == [
        "tool input schema is unusable; arguments not validated"]  # once per tool
    assert violation(None, {"a": 1}) is None


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"q": {"$ref": "#/$defs/a"}},
     "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}},
    {"type": "object", "properties": {"q": {"$ref": "#/$defs/q"}},
     "$defs": {"q": {"allOf": [{"$ref": "#/$defs/q"}]}}},
    {"type": "object", "properties": {"q": {"$ref": "#/$defs/missing"}}},
], ids=["ref-cycle", "allof-cycle", "dangling-ref"])
def test_a_schema_that_breaks_validation_itself_is_warned_once_and_calls_go_through(
    caplog: pytest.LogCaptureFixture, schema: dict[str, Any],
) -> None:
    """Issue 24 #11: such schemas pass the meta-schema, then every call raised (a $ref
    cycle: RecursionError, with a ~4,000-line traceback logged per call)."""
    v = compile_schema(schema, "srv__tool")
    with caplog.at_level(logging.WARNING, logger="gantry.mcp"):
        for q in (1, "x", {"deep": [1]}):
            assert v.violation({"q": q}) is None
    assert [(r.getMessage(), getattr(r, "tool", "")) for r in caplog.records] == [
        ("tool input schema is unusable; arguments not validated", "srv__tool")]
    assert not any(r.exc_info for r in caplog.records)


def test_the_draft_table_follows_the_installed_jsonschema() -> None:
    """fast_draft decides without jsonschema what validator_for would pick: the table's URIs
    are exactly the meta-schemas of FAST_DRAFTS, however they are spelled in `$schema`."""
    from jsonschema import validators

    for uri in FAST_META_SCHEMAS:
        for spelled in (uri, uri + "#"):
            assert validators.validator_for({"$schema": spelled}).__name__ in FAST_DRAFTS
            assert fast_draft({"$schema": spelled, "type": "object"})
    ids = {urlsplit(getattr(validators, name).META_SCHEMA["$id"]).geturl()
           for name in FAST_DRAFTS}
    assert ids == FAST_META_SCHEMAS
    assert fast_draft({"type": "object"}) and fast_draft(True)
    for other in ("http://json-schema.org/draft-04/schema#", "http://json-schema.org/schema#",
                  "https://example.com/my-dialect", 7):
        assert not fast_draft({"$schema": other})
        assert compile_schema({"$schema": other, "type": "object"}).fast is None


LAZY_JSONSCHEMA = """
import json, os, sys, anyio
from gantry.mcp.host import Host
from gantry.mcp.manifest import parse
from gantry.tools import Registry

async def main():
    host = Host(parse({manifest!r}, os.environ), Registry(), os.environ)
    async with anyio.create_task_group() as tg:
        await host.start(tg)
        tg.cancel_scope.cancel()
    (server,) = host.servers.values()
    tools = {{lt.name: lt.validator for lt in server.listed.values()}}
    good = {{"get_current_time": {{"timezone": "Europe/Paris"}},
             "convert_time": {{"source_timezone": "UTC", "time": "12:00",
                               "target_timezone": "Asia/Tokyo"}}}}
    out = {{"tools": sorted(tools), "fast": sorted(n for n, v in tools.items() if v.fast)}}
    out["good"] = [tools[n].violation(a) for n, a in good.items()]
    out["before"] = "jsonschema" in sys.modules
    out["bad"] = tools["get_current_time"].violation({{"timezone": 5}})
    out["after"] = "jsonschema" in sys.modules
    print(json.dumps(out))

anyio.run(main)
"""


@pytest.mark.slow
def test_a_real_server_s_schemas_validate_without_importing_jsonschema() -> None:
    """mcp-server-time's tools, listed by gantry's host in a fresh process: good arguments are
    decided by the fast path alone; the first bad one loads jsonschema to word the error."""
    from tests.fakes.mcp_servers import time_command, toml_server

    code = LAZY_JSONSCHEMA.format(manifest=toml_server("time", [time_command()]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["tools"] == ["convert_time", "get_current_time"]
    assert out["fast"] == out["tools"]
    assert out["good"] == [None, None]
    assert out["before"] is False
    assert str(out["bad"]).startswith("invalid arguments: at timezone: 5 is not of type")
    assert out["after"] is True
