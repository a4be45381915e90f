"""MCP prompts and resources through the host, against real servers: npm server-everything
over stdio and Streamable HTTP (it has prompts, some with required arguments, and text and
blob resources), PyPI mcp-server-time (no resources) and the SDK fixture (prompts and
resources added at run time, announced with list_changed). Issue 41 items 2 and 3."""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import pytest

from gantry.mcp.host import Host
from gantry.mcp.manifest import parse
from gantry.mcp.prompts import PromptError
from gantry.mcp.resource_tool import LIST_TOOL, SOURCE
from gantry.outbox import Outbox, attachment_tool
from gantry.tools import CALLER, Registry
from tests.fakes.mcp_remote import everything_http, toml_remote
from tests.fakes.mcp_servers import (
    EVERYTHING,
    NPM_PREFIX,
    everything_command,
    python_fixture_toml,
    time_command,
    toml_server,
)
from tests.test_mcp_host import until

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "LANG": "C.UTF-8"}
BOOT = 120.0
SESSION = "stdio:local"
MODES = ["stdio", "streamableHttp"]
READ = "resource_read"


@contextmanager
def everything(mode: str, extra: str = "") -> Iterator[str]:
    """A manifest with server-everything as `every`, over `mode`."""
    if mode == "stdio":
        yield toml_server("every", everything_command(), timeout=20) + extra
        return
    with everything_http(mode) as srv:
        yield toml_remote("every", srv.url, timeout=20) + extra


@asynccontextmanager
async def running(manifest: str, tmp_path: Path) -> AsyncIterator[tuple[Host, Registry, Outbox]]:
    registry = Registry()
    outbox = Outbox(tmp_path / "outbox")
    registry.register(attachment_tool(outbox))
    host = Host(parse(manifest, ENV), registry, ENV, keep=outbox.keep)
    token = CALLER.set(SESSION)
    try:
        async with anyio.create_task_group() as tg:
            with anyio.fail_after(BOOT):
                await host.start(tg)
            try:
                yield host, registry, outbox
            finally:
                tg.cancel_scope.cancel()
    finally:
        CALLER.reset(token)


async def call(registry: Registry, name: str, /, **args: object) -> str:
    result = await registry.call(name, json.dumps(args))
    assert not result.error, result.text
    return result.text


@pytest.mark.parametrize("mode", MODES)
async def test_resources_are_listed_and_read_text_and_blob(mode: str, tmp_path: Path) -> None:
    with everything(mode) as manifest:
        async with running(manifest, tmp_path) as (_host, registry, outbox):
            tools = {t.name: t for t in registry.tools() if t.source == SOURCE}
            assert sorted(tools) == [LIST_TOOL, READ]
            assert tools[READ].parameters["properties"]["server"]["enum"] == ["every"]
            listed = await call(registry, LIST_TOOL, server="every")
            assert "- demo://resource/static/document/architecture.md — architecture.md " \
                   "(text/markdown)" in listed
            assert "- template demo://resource/dynamic/blob/{resourceId}" in listed
            # A text resource: its text, as the server's file has it.
            doc = NPM_PREFIX / "node_modules" / EVERYTHING / "dist" / "docs" / "features.md"
            text = await call(registry, READ, server="every",
                              uri="demo://resource/static/document/features.md")
            first = doc.read_text(encoding="utf-8").strip().splitlines()[0]
            assert text.startswith("[resource demo://resource/static/document/features.md]\n")
            assert first in text
            # A blob: kept in the outbox, named by its attachment id, sendable.
            blob = await call(registry, READ, server="every",
                              uri="demo://resource/dynamic/blob/7")
            found = re.search(r"attachment ([0-9a-f]{12}): send_attachment", blob)
            assert found, blob
            kept = outbox.find(found.group(1), SESSION)
            assert kept is not None and kept.mime == "text/plain"
            assert Path(kept.path).read_bytes().startswith(b"Resource 7: This is a base64 blob")
            assert "UmVzb3VyY2Ug" not in blob  # the base64 never reaches the model
            sent = await call(registry, "send_attachment", id=found.group(1))
            assert "will be sent as a file" in sent
            # A server that is not one of them, and a uri the server does not know.
            wrong = await registry.call(READ, json.dumps({"server": "nope", "uri": "x://y"}))
            assert wrong.error and "these do: every" in wrong.text
            unknown = await registry.call(READ, json.dumps(
                {"server": "every", "uri": "demo://resource/nothing"}))
            assert unknown.error and "could not read demo://resource/nothing" in unknown.text


@pytest.mark.parametrize("mode", MODES)
async def test_a_resource_link_in_a_tool_result_is_readable(mode: str, tmp_path: Path) -> None:
    with everything(mode) as manifest:
        async with running(manifest, tmp_path) as (_host, registry, _outbox):
            links = await call(registry, "every__get-resource-links", count=2)
            line = next(x for x in links.splitlines() if "dynamic/text/2" in x)
            assert line == ("[resource link demo://resource/dynamic/text/2 (Text Resource 2, "
                            "text/plain); resource_read can read it: server 'every', this uri]")
            uri = line.split()[2]
            text = await call(registry, READ, server="every", uri=uri)
            assert "Resource 2: This is a plaintext resource" in text


@pytest.mark.parametrize("mode", MODES)
async def test_prompts_are_listed_and_got(mode: str, tmp_path: Path) -> None:
    with everything(mode) as manifest:
        async with running(manifest, tmp_path) as (host, _registry, outbox):
            prompts = {p.name: p for s, p in host.prompts() if s == "every"}
            assert {"simple-prompt", "args-prompt", "completable-prompt",
                    "resource-prompt"} <= set(prompts)
            assert prompts["args-prompt"].required == ["city"]
            assert [a.name for a in prompts["args-prompt"].arguments] == ["city", "state"]
            got = await host.get_prompt("every", "args-prompt", {"city": "New York"})
            assert got.text == "What's weather in New York?" and got.images == ()
            both = await host.get_prompt("every", "args-prompt", {"city": "Paris",
                                                                  "state": "Texas"})
            assert both.text == "What's weather in Paris, Texas?"
            # An embedded text resource comes with its text; a blob is kept, not inlined.
            text = await host.get_prompt("every", "resource-prompt",
                                         {"resourceType": "Text", "resourceId": "3"})
            assert "[resource demo://resource/dynamic/text/3]\nResource 3: This is a " \
                   "plaintext resource" in text.text
            blob = await host.get_prompt("every", "resource-prompt",
                                         {"resourceType": "Blob", "resourceId": "4"})
            found = re.search(r"attachment ([0-9a-f]{12})", blob.text)
            assert found and outbox.find(found.group(1), SESSION) is not None
            with pytest.raises(PromptError, match="refused the prompt 'resource-prompt'"):
                await host.get_prompt("every", "resource-prompt",
                                      {"resourceType": "Neither", "resourceId": "1"})


async def test_a_server_without_resources_gets_no_resource_tool(tmp_path: Path) -> None:
    manifest = toml_server("time", [time_command()])
    async with running(manifest, tmp_path) as (host, registry, _outbox):
        assert host.tools("time")
        assert not {LIST_TOOL, READ} & set(registry.names())
        assert host.prompts() == []


async def test_the_manifest_switch_turns_the_resource_tool_off(tmp_path: Path) -> None:
    with everything("stdio", "resources = false\n") as manifest:
        async with running(manifest, tmp_path) as (host, registry, _outbox):
            assert not {LIST_TOOL, READ} & set(registry.names())
            links = await call(registry, "every__get-resource-links", count=2)
            assert "[resource link demo://resource/dynamic/text/2 (Text Resource 2, " \
                   "text/plain)]" in links
            assert READ not in links
            assert host.prompts()  # prompts are not resources: still there


async def test_list_changed_refreshes_prompts_and_offers_resources_once_there(
    tmp_path: Path,
) -> None:
    """The SDK fixture declares both capabilities with empty lists: no resource tool until
    a resource is added; each list_changed brings the new list."""
    async with running(python_fixture_toml("fx"), tmp_path) as (host, registry, _outbox):
        assert host.prompts() == [] and READ not in registry.names()
        await call(registry, "fx__add_prompt", name="later")
        await until(lambda: [p.name for _s, p in host.prompts()] == ["later"],
                    what="the prompt list refreshed")
        got = await host.get_prompt("fx", "later", {"topic": "owls"})
        assert got.text == "Tell me about owls (later)."
        await call(registry, "fx__add_doc", name="notes")
        await until(lambda: READ in registry.names(), what="the resource tool offered")
        text = await call(registry, READ, server="fx", uri="fixture://doc/notes")
        assert text == "[resource fixture://doc/notes]\nthe document notes"
