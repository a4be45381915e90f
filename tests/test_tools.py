"""The tool registry: names, collisions, per-source replacement, error results, truncation."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gantry.tools import Registry, Source, Tool, mcp_source, offered, truncate


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


def test_mcp_servers_have_their_own_namespace_of_sources() -> None:
    """Issue 24 #6: an MCP server named like a built-in source (memory, cron, routing) used
    to replace the built-in tools of that name along with its own."""
    reg = Registry()
    for name, source in (("memory_store", "memory"), ("cron_list", "cron"),
                         ("tools_search", "routing")):
        reg.register(tool(name, source, builtin=True))
    for server in ("memory", "cron", "routing"):
        reg.replace_source(mcp_source(server), [tool(f"{server}__x", server)])
        reg.replace_source(mcp_source(server), [tool(f"{server}__y", server)])  # a restart
    assert reg.names() == ["cron__y", "cron_list", "memory__y", "memory_store", "routing__y",
                           "tools_search"]
    assert [t.name for t in reg.tools() if t.builtin] == ["cron_list", "memory_store",
                                                        "tools_search"]
    reg.replace_source(Source("memory"), [])
    assert "memory__y" in reg.names() and "memory_store" not in reg.names()
    with pytest.raises(ValueError, match="do not belong"):
        reg.replace_source(mcp_source("cron"), [tool("cron_list", "cron", builtin=True)])
    assert str(mcp_source("memory")) == "MCP server 'memory'"


def test_offered_is_every_tool_without_a_router_and_counts_its_schemas() -> None:
    reg = Registry()
    reg.register(tool("memory_store", "memory", builtin=True))
    reg.register(tool("srv__a"))
    offer = offered(reg)
    assert offer.names == ["memory_store", "srv__a"] and len(offer) == 2
    wire = [msgspec.json.encode(s).decode() for s in offer.schemas()]
    assert offer.schema_tokens == sum((len(w) + 3) // 4 for w in wire)
    assert offer.summary() == (f"tools offered: 2 (1 built in + 1 MCP), ~{offer.schema_tokens} "
                               "schema tokens per request (est.)")
    assert offered(Registry()).summary().startswith("tools offered: 0 (0 built in), ~0 ")


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
