"""The tool registry: names, collisions, per-source replacement, error results, truncation."""

from __future__ import annotations

from typing import Any

import pytest

from gantry.tools import Registry, Source, Tool, mcp_source, truncate


async def _echo(args: dict[str, Any]) -> str:
    return str(args)


def tool(name: str, source: str = "srv", *, builtin: bool = False) -> Tool:
    origin = Source(source) if builtin else mcp_source(source)
    return Tool(name, f"{name} tool", {"type": "object"}, _echo, origin)


def test_names_and_collisions() -> None:
    reg = Registry()
    reg.register(tool("srv__a"))
    reg.register(tool("srv__a"))  # the same source may re-register (refresh)
    with pytest.raises(ValueError, match="collides"):
        reg.register(tool("srv__a", source="other"))
    with pytest.raises(ValueError, match="not allowed"):
        reg.register(tool("bad name!"))
    assert reg.names() == ["srv__a"] and len(reg) == 1


def test_replace_source_swaps_only_that_source() -> None:
    reg = Registry()
    reg.register(tool("srv__a"))
    reg.register(tool("srv__b"))
    reg.register(tool("mem__x", source="memory", builtin=True))
    reg.replace_source(mcp_source("srv"), [tool("srv__c")])
    assert reg.names() == ["mem__x", "srv__c"]
    assert [s.function.name for s in reg.schemas()] == ["mem__x", "srv__c"]


@pytest.mark.anyio
async def test_call_results() -> None:
    reg = Registry(result_max_chars=200)
    reg.register(tool("srv__a"))
    ok = await reg.call("srv__a", '{"q": 1}')
    assert ok.text == "{'q': 1}" and not ok.error
    assert (await reg.call("srv__a", "")).text == "{}"
    for args, needle in (("[1]", "must be a JSON object"), ("{", "not valid JSON")):
        bad = await reg.call("srv__a", args)
        assert bad.error and needle in bad.text
    unknown = await reg.call("nope", "{}")
    assert unknown.error and "srv__a" in unknown.text


def test_truncate_says_what_was_cut() -> None:
    assert truncate("abc", 10) == "abc"
    out = truncate("x" * 1000, 100)
    assert len(out) <= 100 and "truncated" in out and "of 1000 chars" in out
