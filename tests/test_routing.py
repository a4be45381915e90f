"""Tool routing: the FTS5 index, safe queries, and what each model call is offered."""

from __future__ import annotations

import re
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gantry.mcp.routing import (
    SEARCH_TOOL,
    Router,
    ToolDoc,
    ToolIndex,
    always_match,
    match_query,
    search_tool,
    words,
)
from gantry.tools import CALLER, Registry, Source, Tool, mcp_source, offered

TOPICS = {
    "weather": ("get_current_weather", "Current weather conditions for a city", "city"),
    "calendar": ("createCalendarEvent", "Create an event in the user's calendar", "start_time"),
    "mail": ("send_email", "Send an email message to a recipient", "recipient"),
    "stocks": ("stock.quote", "Latest share price for a ticker symbol", "ticker"),
    "flights": ("searchFlights", "Search airline flights between two airports", "origin"),
    "translate": ("translate_text", "Translate text into another language", "target_language"),
}


async def _noop(args: dict[str, Any]) -> str:
    return "ok"


def _tool(name: str, desc: str, param: str, source: str) -> Tool:
    """An MCP server's tool, or a built-in one for the source "builtin"."""
    schema = {"type": "object", "properties": {param: {"type": "string", "description": param}}}
    return Tool(name, desc, schema, _noop, Source(source, mcp=source != "builtin"))


def _registry(filler: int) -> Registry:
    reg = Registry()
    for _topic, (name, desc, param) in TOPICS.items():
        reg.register(_tool(f"srv__{name.replace('.', '_')}", desc, param, "srv"))
    for i in range(filler):
        reg.register(_tool(f"misc__widget_{i}", f"Adjust widget number {i} gizmo", "knob", "misc"))
    reg.register(_tool("memory_recall", "Recall memories", "query", "builtin"))
    return reg


def _router(reg: Registry, **kw: Any) -> Router:
    router = Router(reg, **kw)
    reg.register(search_tool(router))
    return router


def test_words_split_names() -> None:
    assert words("createCalendarEvent") == ["create", "calendar", "event"]
    assert words("stock.quote get_HTTPResponse") == ["stock", "quote", "get", "http", "response"]
    assert words("日本語 のテキスト") == ["日本語", "のテキスト"]


@given(st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_any_text_is_a_safe_query(text: str) -> None:
    index = ToolIndex()
    index.rebuild([ToolDoc("a__b", "alpha beta"), ToolDoc("c__d", "gamma \"delta\" (x)")])
    assert isinstance(index.search(text, 5), list)
    assert '"' not in match_query(text).replace('" OR "', "").strip('"')


@pytest.mark.parametrize("query", ['NEAR(a b)', 'a AND OR NOT', '"unbalanced', 'x* -y ^z',
                                   "((", "col:val", "AND", "*"])
def test_fts_syntax_is_never_interpreted(query: str) -> None:
    index = ToolIndex()
    index.rebuild([ToolDoc("near__tool", "near and or not tool")])
    index.search(query, 3)


def test_small_catalog_offers_everything() -> None:
    reg = _registry(filler=0)
    offer = _router(reg, max_per_turn=24).offer("s", ["what's the weather in Paris?"])
    assert not offer.routed
    assert set(offer.names) == set(reg.names()) - {SEARCH_TOOL}


def test_builtin_tools_do_not_count_toward_the_routing_threshold() -> None:
    """Issue 36 #1: routing starts when the *MCP* tools outnumber TOOLS_MAX_PER_TURN (as
    docs/mcp.md says); ten built-ins next to sixteen MCP tools used to tip 26 > 24."""
    reg = _registry(filler=18)  # 6 + 18 = 24 MCP tools, the limit itself
    for i in range(9):
        reg.register(_tool(f"builtin_{i}", f"Built-in helper {i}", "x", "builtin"))
    offer = _router(reg, max_per_turn=24).offer("s", ["add four and five"])
    assert not offer.routed and offer.catalog == 24
    assert set(offer.names) == set(reg.names()) - {SEARCH_TOOL}
    reg.register(_tool("misc__widget_extra", "One more widget", "knob", "misc"))
    assert _router(reg, max_per_turn=24).offer("s", ["widget"]).routed  # 25 MCP tools


@pytest.mark.parametrize(("query", "want"), [
    ("will it rain in Paris today? what's the weather", "srv__get_current_weather"),
    ("put a dentist appointment in my calendar on friday", "srv__createCalendarEvent"),
    ("email Bob the report", "srv__send_email"),
    ("what is the share price of ACME", "srv__stock_quote"),
    ("find me flights from SFO to JFK", "srv__searchFlights"),
    ("translate this into German", "srv__translate_text"),
])
def test_large_catalog_offers_the_right_tool(query: str, want: str) -> None:
    reg = _registry(filler=100)
    offer = _router(reg, max_per_turn=5).offer("s", [query])
    assert offer.routed and offer.catalog == 106
    assert want in offer.names
    assert "memory_recall" in offer.names and SEARCH_TOOL in offer.names  # always on
    assert len([n for n in offer.names if n.startswith(("srv__", "misc__"))]) <= 5


def test_offered_asks_the_router_without_touching_its_last_call() -> None:
    """`/status` and `gantry tools list` ask the same function as the request (issue 24
    #14), and asking must not change what the routing line says the last call carried."""
    reg = _registry(filler=100)
    router = _router(reg, max_per_turn=5)
    sent = router.offer("s", ["email Bob the report"])
    shown = offered(reg, router, "s")
    assert router.last is sent
    assert shown.routed and shown.names == ["memory_recall", SEARCH_TOOL]
    assert [t.builtin for t in shown.tools] == [True, True]
    assert shown.summary() == (  # the router's helper is named, not counted as a built-in
        f"tools offered: 2 (1 built in + tools_search), ~{shown.schema_tokens} schema tokens "
        "per request "
        "(est.); routed: the MCP tools are the best of 106 for each message, at most 5")
    assert offered(reg, router, "s", ["email Bob the report"]).names == sent.names


def test_sticky_and_always_tools_stay_offered() -> None:
    reg = _registry(filler=100)
    router = _router(reg, max_per_turn=4, always=["misc__widget_7", "srv__stock*"])
    router.used("s", ["srv__send_email"])
    offer = router.offer("s", ["translate this into German"])
    assert {"srv__send_email", "misc__widget_7", "srv__stock_quote"} <= set(offer.names)
    assert "srv__translate_text" in offer.names
    assert "srv__send_email" not in router.offer("other", ["translate this"]).names
    assert always_match("srv__stock_quote", ["srv__*"]) and not always_match("srv", ["srv__*"])


def test_tools_search_makes_a_tool_callable_in_the_same_turn() -> None:
    reg = _registry(filler=100)
    router = _router(reg, max_per_turn=3)
    first = router.offer("s", ["hello there"])
    assert "srv__searchFlights" not in first.names

    async def turn() -> str:
        CALLER.set("s")
        result = await reg.call(SEARCH_TOOL, '{"query": "airline flights"}')
        return result.text

    text = anyio.run(turn)
    assert "srv__searchFlights" in text
    assert "srv__searchFlights" in router.offer("s", ["hello there"]).names
    router.end_turn("s")
    assert "srv__searchFlights" not in router.offer("s", ["hello there"]).names


def test_index_follows_catalog_changes() -> None:
    reg = _registry(filler=100)
    router = _router(reg, max_per_turn=3)
    assert router.search("kubernetes pods") == []
    reg.replace_source(mcp_source("srv"),
                       [_tool("srv__list_pods", "List kubernetes pods", "ns", "srv")])
    assert [t.name for t in router.search("kubernetes pods")] == ["srv__list_pods"]
    assert "srv__send_email" not in {t.name for t in router.search("send email")}


def test_catalog_files_and_batch_queries(tmp_path: Any, capsys: Any) -> None:
    import json

    from gantry.mcp.routing import CatalogError, load_catalog, search_main

    defs = [{"type": "function", "function": {"name": n.replace(".", "_"), "description": d,
             "parameters": {"type": "object", "properties": {p: {"type": "string"}}}}}
            for n, d, p in TOPICS.values()]
    defs.append({"name": "bare_tool", "description": "A bare definition about llamas"})
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(defs))
    docs = load_catalog(str(path))
    assert len(docs) == 7
    queries = tmp_path / "q.txt"
    queries.write_text("send an email\nllamas\n\n")
    assert search_main(docs, None, str(queries), 2) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert out[0][0] == "send_email" and out[1] == ["bare_tool"] and out[2] == []
    assert search_main(docs, "translate into german", None, 1) == 0
    assert capsys.readouterr().out == "translate_text\n"
    for bad in ("{}", "[1]", "not json", '[{"function": {"description": "x"}}]'):
        path.write_text(bad)
        with pytest.raises(CatalogError):
            load_catalog(str(path))


@pytest.mark.anyio
async def test_agent_offers_routed_tools_and_a_found_tool_in_the_same_turn(tmp_path: Any) -> None:
    """End to end through the agent and the fake model: a big catalog is routed; the model
    finds a tool with tools_search and calls it in its next request of the same turn."""
    from gantry import db
    from gantry.agent import Agent
    from gantry.model.client import Provider
    from gantry.session import SessionStore
    from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls

    reg = _registry(filler=100)
    router = _router(reg, max_per_turn=4)
    async with FakeOpenAI() as fake, Provider(fake.base_url, "sk-x", "m") as provider:
        agent = Agent(model=provider, sessions=SessionStore(db.connect(tmp_path / "g.db")),
                      tools=reg, persona=lambda: "p", router=router)
        fake.push(ToolCalls([Call(SEARCH_TOOL, {"query": "airline flights airports"}, id="a")]),
                  ToolCalls([Call("srv__searchFlights", {"origin": "SFO"}, id="b")]),
                  Reply("found you a flight"))
        from gantry.channel.base import Inbound

        reply = await agent(Inbound(channel="t", chat_id="1", user_id="u",
                                    text="hello, can you help me with something?"))
        offered = [{t["function"]["name"] for t in r.body["tools"]} for r in fake.requests]
        status = agent.status("t:1")
    assert reply == "found you a flight"
    assert SEARCH_TOOL in offered[0] and "srv__searchFlights" not in offered[0]
    assert len([n for n in offered[0] if n.startswith(("srv__", "misc__"))]) <= 4
    assert "srv__searchFlights" in offered[1]  # found mid-turn, offered on the next call
    assert "tool routing: catalog 106" in status
    # Issue 36 #2: /status counts what the last request carried, in parts that add up
    sent = len(offered[-1])
    count = re.search(r"\ntools offered: (\d+) \((\d+) built in \+ tools_search \+ (\d+) MCP\)",
                      status)
    assert count is not None, status
    total, builtin, mcp = map(int, count.groups())
    assert total == sent == builtin + 1 + mcp and f"last call offered {sent} (routed)" in status
    assert router.offer("t:1", ["unrelated words"]).names.count("srv__searchFlights") == 1


def test_tools_search_cli_ranks_a_catalog_file(tmp_path: Any) -> None:
    import json
    import subprocess
    import sys

    defs = [{"name": n.replace(".", "_"), "description": d} for n, d, _p in TOPICS.values()]
    (tmp_path / "c.json").write_text(json.dumps(defs))
    (tmp_path / "q.txt").write_text("send an email\ntranslate to german\n")
    base = [sys.executable, "-m", "gantry", "tools", "search", "--catalog",
            str(tmp_path / "c.json")]
    one = subprocess.run([*base, "--top", "1", "share price please"], capture_output=True,
                         text=True, timeout=60)
    assert one.returncode == 0 and one.stdout == "stock_quote\n"
    many = subprocess.run([*base, "--top", "2", "--queries", str(tmp_path / "q.txt")],
                          capture_output=True, text=True, timeout=60)
    rows = [json.loads(line) for line in many.stdout.splitlines()]
    assert [r[0] for r in rows] == ["send_email", "translate_text"]
    bad = subprocess.run([*base[:-1], str(tmp_path / "missing.json"), "x"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "cannot read it" in bad.stderr and "Traceback" not in bad.stderr
