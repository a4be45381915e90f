"""MEMORY_BACKEND=mcp end to end: real stdio children via the SDK client, both shapes.

Shape (a) and (b) against `gantry mcp-memory` (for (b) its memory_* tools are hidden so
the aigpt tools are used), shape (b) against an aigpt look-alike (tests/fakes/aigpt.py),
and a real third-party server (mcp-server-time) that has neither shape.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gantry import db
from gantry.memory.mcp_backend import (
    AigptMemory,
    BackendError,
    SessionPort,
    ToolsMemory,
    connect_backend,
    detect,
    parse_records,
    rank_local,
)
from gantry.memory.store import MemoryInputError, MemoryStore, Row
from gantry.memory.tools import memory_tools
from gantry.tools import Registry

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ROOT = Path(__file__).parent.parent


class Hidden:
    """A port without memory_* tools, so detection picks the aigpt shape."""

    def __init__(self, port: SessionPort, keep: Callable[[str], bool] | None = None) -> None:
        self.port = port
        self.keep = keep or (lambda n: not n.startswith("memory_"))

    def tool_names(self) -> list[str]:
        return [n for n in self.port.tool_names() if self.keep(n)]

    def instructions(self) -> str:
        return self.port.instructions()

    async def call(self, tool: str, args: dict[str, Any]) -> tuple[str, bool]:
        return await self.port.call(tool, args)


@pytest.fixture
async def spawn(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async with AsyncExitStack() as stack:

        async def start(*args: str) -> SessionPort:
            params = StdioServerParameters(
                command=sys.executable, args=list(args), cwd=str(ROOT),
                env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT)},
            )
            read, write = await stack.enter_async_context(stdio_client(params))
            session = await stack.enter_async_context(ClientSession(read, write))
            return await SessionPort.open(session)

        yield start


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    data, persona = tmp_path / "data", tmp_path / "persona"
    persona.mkdir()
    (persona / "SOUL.md").write_text("You are Tim, a climbing coach.")
    return data, persona


async def gantry_child(spawn: Callable[..., Any], dirs: tuple[Path, Path], *extra: str) -> Any:
    data, persona = dirs
    return await spawn("-m", "gantry", "mcp-memory", "--data-dir", str(data),
                       "--persona-dir", str(persona), *extra)


async def test_shape_a_against_gantry_mcp_memory(
    spawn: Callable[..., Any], dirs: tuple[Path, Path]
) -> None:
    port = await gantry_child(spawn, dirs)
    assert port.instructions() == "You are Tim, a climbing coach."
    mem = detect(port, "mem")
    assert isinstance(mem, ToolsMemory)
    row, new = await mem.store("person", "mom", "prefers calls over texts")
    assert new and row.id == "1"
    assert (await mem.store("person", "mom", "prefers calls over texts"))[1] is False
    await mem.store("episode", "gym", "sent the blue route")
    hits = await mem.recall("mom texts")
    assert [(h.id, h.line()) for h in hits] == [("1", "(person) mom: prefers calls over texts")]
    assert next(r.subject for r in await mem.hydrate("the blue route")) == "gym"
    with pytest.raises(MemoryInputError, match="kind must be one of"):
        await mem.store("mood", "x", "y")
    deleted, more = await mem.forget("1", None)
    assert [r.id for r in deleted] == ["1"] and more == 0
    assert await mem.recall("mom") == []
    # the same rows are in the child's SQLite file
    store = MemoryStore(db.connect(dirs[0] / "gantry.db"))
    assert [r.line() for r in store.rows()] == ["(episode) gym: sent the blue route"]


async def test_shape_a_hydration_shows_durable_rows_without_a_matching_word(
    spawn: Callable[..., Any], dirs: tuple[Path, Path]
) -> None:
    """Facts, preferences and people are in every turn's block, as with the builtin store:
    read fresh via read_memory when the server has it, else the initialize snapshot plus
    what this run stored (forgotten rows leave it)."""
    data, _ = dirs
    db.ensure_data_dir(data)
    MemoryStore(db.connect(data / "gantry.db")).add("preference", "chris", "no fluff")
    full = await gantry_child(spawn, dirs)
    only_a = Hidden(full, lambda n: n.startswith("memory_"))
    for port in (full, only_a):
        mem = detect(port, "mem")
        assert isinstance(mem, ToolsMemory)
        await mem.store("fact", "car", f"drives a red van {id(port)}")
        await mem.store("episode", "gym", f"sent the blue route {id(port)}")
        lines = [r.line() for r in await mem.hydrate("anything planned for today?")]
        assert f"(fact) car: drives a red van {id(port)}" in lines
        assert "(preference) chris: no fluff" in lines
        assert not [x for x in lines if x.startswith("(episode)")], lines
        await mem.forget(None, f"red van {id(port)}")
        lines = [r.line() for r in await mem.hydrate("anything planned for today?")]
        assert not [x for x in lines if "red van" in x], lines


async def test_tools_over_the_mcp_backend(
    spawn: Callable[..., Any], dirs: tuple[Path, Path]
) -> None:
    mem = detect(await gantry_child(spawn, dirs), "mem")
    tools = {t.name: t for t in memory_tools(mem)}
    assert (await tools["memory_store"].call(
        {"kind": "fact", "subject": "car", "content": "drives a red van"})).startswith("stored #1")
    assert (await tools["memory_recall"].call({"query": "van"})).startswith("#1 (fact) car:")
    out = await tools["memory_forget"].call({"query": "red van"})
    assert out.startswith("deleted 1:\n#1 (fact) car: drives a red van")


async def test_instructions_carry_memories_capped(
    spawn: Callable[..., Any], dirs: tuple[Path, Path]
) -> None:
    data, _ = dirs
    db.ensure_data_dir(data)
    store = MemoryStore(db.connect(data / "gantry.db"))
    for i in range(5):
        store.add("fact", f"s{i}", f"statement {i}")
    port = await gantry_child(spawn, dirs, "--max-records", "3")
    lines = port.instructions().splitlines()
    assert lines[0] == "You are Tim, a climbing coach." and "[memory]" in lines
    assert [x for x in lines if x.startswith("- ")] == [
        "- (fact) s2: statement 2", "- (fact) s3: statement 3", "- (fact) s4: statement 4"]
    text, error = await port.call("read_memory", {})
    assert not error and len(json.loads(text)) == 3
    core, _ = await port.call("read_core", {})
    assert json.loads(core)["value"]["content"]["text"] == "You are Tim, a climbing coach."


async def test_shape_b_against_gantry_mcp_memory(
    spawn: Callable[..., Any], dirs: tuple[Path, Path]
) -> None:
    mem = detect(Hidden(await gantry_child(spawn, dirs)), "mem")
    assert isinstance(mem, AigptMemory)
    await shape_b_contract(mem)


async def test_shape_b_against_an_aigpt_lookalike(
    spawn: Callable[..., Any], tmp_path: Path
) -> None:
    did = "did:plc:test123"
    port = await spawn("-m", "tests.fakes.aigpt", str(tmp_path / "aigpt"), did)
    mem = detect(port, "aigpt")
    assert isinstance(mem, AigptMemory)
    await shape_b_contract(mem)
    # a directory aigpt wrote imports into the builtin store
    await port.call("save_memory", {"content": "(preference) chris: drinks sencha"})
    store = MemoryStore(db.connect(tmp_path / "g.db"))
    from gantry.memory.atproto import import_dir

    result = import_dir(store, tmp_path / "aigpt", did)
    assert result.added == 2 and not result.skipped
    assert sorted(r.line() for r in store.rows()) == [
        "(fact) : syuiはRustを好む", "(preference) chris: drinks sencha"]


async def shape_b_contract(mem: AigptMemory) -> None:
    _row, new = await mem.store("preference", "chris", "drinks sencha")
    assert new
    assert (await mem.store("preference", "chris", "drinks sencha"))[1] is False
    await mem.store("episode", "gym", "sent the blue route")
    await mem.port.call("save_memory", {"content": "syuiはRustを好む"})  # a plain aigpt line
    hits = await mem.recall("what does chris drink? sencha")
    assert next(h.line() for h in hits) == "(preference) chris: drinks sencha"
    assert len(hits[0].id) == 13  # the record's TID
    block = [r.line() for r in await mem.hydrate("blue route")]
    assert block[0] == "(episode) gym: sent the blue route" and len(block) == 3
    deleted, _ = await mem.forget(None, "blue route")
    assert [r.line() for r in deleted] == ["(episode) gym: sent the blue route"]
    remaining = sorted(r.line() for r in await mem.recall("chris sencha syuiはrustを好む"))
    assert remaining == ["(fact) : syuiはRustを好む", "(preference) chris: drinks sencha"]
    rows = parse_records((await mem.port.call("read_memory", {}))[0])
    assert len(rows) == 2
    assert await mem.forget(None, "") == ([], 0)  # an empty query matches nothing: no wipe
    deleted, _ = await mem.forget(rows[0].id, None)
    assert len(deleted) == 1
    last = parse_records((await mem.port.call("read_memory", {}))[0])  # compress may renumber
    with pytest.raises(MemoryInputError, match="refused: this would delete every memory"):
        await mem.forget(last[0].id, None)
    assert len(parse_records((await mem.port.call("read_memory", {}))[0])) == 1


def record_files(directory: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(directory.glob("*.json"))}


def record_texts(directory: Path) -> list[str]:
    return [json.loads(text)["value"]["content"]["text"]
            for text in record_files(directory).values()]


async def test_aigpt_forget_keeps_every_other_record_byte_for_byte(
    spawn: Callable[..., Any], tmp_path: Path
) -> None:
    """forget rewrites the set with compress; the records it did not delete go back with
    their text exactly as aigpt held it, not re-rendered as `(fact) : …`."""
    did = "did:plc:bytes"
    port = await spawn("-m", "tests.fakes.aigpt", str(tmp_path / "aigpt"), did)
    mem = detect(port, "aigpt")
    kept = ["syuiはRustを好む", "  ATProto設計に詳しい\n- and *markdown*  ",
            "(preference) chris:  drinks  sencha"]
    for text in [kept[0], "(episode) gym: sent the blue route", *kept[1:]]:
        await port.call("save_memory", {"content": text})
    deleted, more = await mem.forget(None, "blue route")
    assert [r.line() for r in deleted] == ["(episode) gym: sent the blue route"] and more == 0
    assert record_texts(tmp_path / "aigpt" / did / "ai.syui.gpt.memory") == kept


async def test_aigpt_forget_refuses_when_a_record_is_unreadable(
    spawn: Callable[..., Any], tmp_path: Path
) -> None:
    """A record gantry cannot parse would not survive a compress rewrite: forget refuses
    with a tool error and the server's files are left exactly as they were."""
    did = "did:plc:unread"
    port = await spawn("-m", "tests.fakes.aigpt", str(tmp_path / "aigpt"), did)
    await port.call("save_memory", {"content": "(episode) gym: sent the blue route"})
    await port.call("save_memory", {"content": "likes tea"})
    directory = tmp_path / "aigpt" / did / "ai.syui.gpt.memory"
    image = {"uri": f"at://{did}/ai.syui.gpt.memory/3zzzzzzzzzzzz",
             "value": {"$type": "ai.syui.gpt.memory", "did": did,
                       "content": {"$type": "ai.syui.gpt.memory#image", "ref": "bafy"},
                       "createdAt": "2026-03-01T12:00:00Z"}}
    (directory / "3zzzzzzzzzzzz.json").write_text(json.dumps(image), encoding="utf-8")
    before = record_files(directory)
    registry = Registry()
    for tool in memory_tools(detect(port, "aigpt")):
        registry.register(tool)
    result = await registry.call("memory_forget", json.dumps({"query": "blue route"}))
    assert result.error
    assert result.text.startswith("error: refused: 1 of the aigpt server's records"), result
    assert record_files(directory) == before


async def test_aigpt_forget_refuses_on_a_one_record_server() -> None:
    """An older aigpt keeps every memory in one record: rewriting it item by item would
    change the others, so forget refuses and never calls compress."""

    class OldAigpt:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def tool_names(self) -> list[str]:
            return ["save_memory", "read_memory", "compress"]

        def instructions(self) -> str:
            return ""

        async def call(self, tool: str, args: dict[str, Any]) -> tuple[str, bool]:
            self.calls.append(tool)
            body = "- likes tea\n- (episode) gym: sent the blue route"
            return json.dumps({"value": {"content": {"text": body}}}), False

    port = OldAigpt()
    mem = detect(port, "old")
    with pytest.raises(MemoryInputError, match="keeps every memory in one record"):
        await mem.forget(None, "blue route")
    assert port.calls == ["read_memory"]


async def test_a_server_with_neither_shape_fails_clearly(spawn: Callable[..., Any]) -> None:
    port = await spawn("-m", "mcp_server_time")
    with pytest.raises(BackendError, match=r"exposes neither .* \(it has: convert_time"):
        detect(port, "time")


async def test_missing_server_or_host_fails_clearly() -> None:
    class Host:
        def names(self) -> list[str]:
            return ["time"]

    with pytest.raises(BackendError, match=r"no MCP server named 'mem' .*servers: time"):
        await connect_backend(Host(), "mem")
    with pytest.raises(BackendError, match=r"add \[servers.mem\] to MCP_MANIFEST"):
        await connect_backend(None, "mem")


def test_parse_records_tolerates_aigpt_versions() -> None:
    with pytest.raises(MemoryInputError, match="boom"):
        parse_records('{"error": "boom"}')
    old = {"value": {"content": {"text": "- likes tea\n- (person) mom: calls"}}}
    assert [r.line() for r in parse_records(json.dumps(old))] == [
        "(fact) : likes tea", "(person) mom: calls"]
    assert [r.content for r in parse_records("not json\nsecond")] == ["not json", "second"]


def test_rank_local_prefers_more_words_then_newer() -> None:
    rows = [Row("1", "fact", "a", "tea", created_at="2026-01-01"),
            Row("2", "fact", "a", "green tea", created_at="2025-01-01"),
            Row("3", "fact", "a", "tea", created_at="2026-06-01")]
    assert [r.id for r in rank_local(rows, "green tea", 5)] == ["2", "3", "1"]
    assert [r.id for r in rank_local(rows, "green tea", 5, every=True)] == ["2"]
    assert rank_local(rows, "*** ()", 5) == []


@given(st.text(max_size=120))
def test_aigpt_parsing_and_ranking_never_crash(text: str) -> None:
    """Whatever a server returns and whatever the user asks: rows or a clear error."""
    try:
        rows = parse_records(text)
    except MemoryInputError:
        rows = []
    rank_local([*rows, Row("1", "fact", "", "tea")], text, 5)
    rank_local(rows, text, 5, every=True)


class ListAigpt:
    """aigpt's storage semantics in process: read_memory lists records, compress replaces."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = list(texts)

    def tool_names(self) -> list[str]:
        return ["save_memory", "read_memory", "compress"]

    def instructions(self) -> str:
        return ""

    async def call(self, tool: str, args: dict[str, Any]) -> tuple[str, bool]:
        if tool == "compress":
            self.texts = [str(t) for t in args["items"]]
            return '{"success": true}', False
        records = [{"uri": f"at://did:plc:x/ai.syui.gpt.memory/{i:013d}",
                    "value": {"content": {"text": t}}} for i, t in enumerate(self.texts)]
        return json.dumps(records), False


@given(st.lists(st.text(max_size=40), min_size=2, max_size=6), st.data())
def test_aigpt_forget_by_id_keeps_the_rest_exactly(texts: list[str], data: Any) -> None:
    import anyio

    port = ListAigpt(texts)
    victim = data.draw(st.integers(0, len(texts) - 1))
    deleted, _ = anyio.run(AigptMemory(port, "x").forget, f"{victim:013d}", None)
    assert len(deleted) == 1
    assert port.texts == texts[:victim] + texts[victim + 1:]


async def test_rows_stored_over_gantry_mcp_memory_say_mcp(
    spawn: Callable[..., Any], dirs: tuple[Path, Path]
) -> None:
    """docs/memory.md: `source=mcp` means the row came in via `gantry mcp-memory`, whichever
    tool family wrote it (memory_store used to record `chat`)."""
    port = await gantry_child(spawn, dirs)
    await detect(port, "mem").store("person", "mom", "prefers calls over texts")
    await port.call("save_memory", {"content": "(episode) gym: sent the blue route"})
    store = MemoryStore(db.connect(dirs[0] / "gantry.db"))
    assert sorted((r.subject, r.source) for r in store.rows()) == [("gym", "mcp"), ("mom", "mcp")]
