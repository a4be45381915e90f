"""Skills through the agent against the fake model (real loopback HTTP): a persona with three
skills (tests/skills_persona.py), the request, `skill_read`, routing, commands, group chats,
`gantry check` and `gantry skills list`."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gantry import db
from gantry.agent import Agent
from gantry.channel.base import Inbound
from gantry.mcp.routing import Router, search_tool
from gantry.model.client import Provider
from gantry.session import SessionStore
from gantry.skills import catalog
from gantry.skills.catalog import Skills, block
from gantry.skills.skill import Skill
from gantry.skills.wiring import setup
from gantry.tools import Registry, Tool, mcp_source
from tests import skills_persona as sp
from tests.fakes.openai import Call, FakeOpenAI, Reply, ToolCalls

pytestmark = pytest.mark.anyio


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI() as f:
        yield f


def msg(text: str, group: bool = False) -> Inbound:
    return Inbound(channel="test", chat_id="g" if group else "1", user_id="u", text=text,
                   group=group)


async def _noop(args: dict[str, Any]) -> str:
    return "12:00 in Tokyo"


def make(fake: FakeOpenAI, tmp_path: Path) -> tuple[Agent, Skills]:
    """An agent whose MCP catalog (31 tools) is routed down to 2 per call: `clock__now`
    is not among them for a message about anything else."""
    sp.write(tmp_path / "persona")
    registry = Registry()
    misc = mcp_source("misc")
    for i in range(30):
        registry.register(Tool(f"misc__widget_{i}", f"Adjust widget number {i} gizmo",
                               {"type": "object"}, _noop, misc))
    registry.register(Tool(sp.CLOCK_TOOL, "Current time in a zone", {"type": "object"},
                           _noop, mcp_source("clock")))
    router = Router(registry, max_per_turn=2)
    registry.register(search_tool(router))
    provider = Provider(fake.base_url, "sk-test-123456", "fake-model")
    agent = Agent(model=provider, sessions=SessionStore(db.connect(tmp_path / "g.db")),
                  tools=registry, persona=lambda: "You are Tim.", router=router)
    skills = setup(tmp_path / "persona", registry, router, agent)
    assert skills is not None
    return agent, skills


def tools_of(request: Any) -> list[str]:
    return [t["function"]["name"] for t in request.body.get("tools", [])]


def tool_results(request: Any) -> list[str]:
    return [m["content"] for m in request.messages if m["role"] == "tool"]


async def test_the_request_carries_names_and_descriptions_only_byte_identical(
    fake: FakeOpenAI, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, "gantry.skills"):
        agent, _skills = make(fake, tmp_path)
    assert await agent(msg("hello")) == "echo: hello"
    assert await agent(msg("again")) == "echo: again"
    first, second = fake.requests[0].messages[0], fake.requests[1].messages[0]
    assert first == second  # cache-friendly: the same bytes turn after turn
    system = first["content"]
    assert system.startswith("You are Tim.\n\nSkills: ")
    assert ("- expense-report: File an expense report: collect the amount, date and "
            "receipt, then submit it.") in system
    assert "- world-clock: Tell the time in any city of the world." in system
    assert system.index("expense-report") < system.index("world-clock")  # name order
    for body in (sp.EXPENSE_BODY, sp.CLOCK_BODY, sp.POLICY, "broken-one"):
        assert body not in system
    assert "skill_read" in tools_of(fake.requests[0])
    broken = [r for r in caplog.records if r.getMessage() == "skill not loaded"]
    assert [r.skill for r in broken] == ["broken-one"]  # type: ignore[attr-defined]
    assert "description" in broken[0].error  # type: ignore[attr-defined]


async def test_skill_read_returns_the_body_and_a_reference_file(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    agent, _skills = make(fake, tmp_path)
    fake.push(ToolCalls([Call("skill_read", {"name": "expense-report"})]),
              ToolCalls([Call("skill_read", {"name": "expense-report",
                                              "file": "references/policy.md"})]),
              Reply("filed"))
    assert await agent(msg("I need to file a taxi receipt")) == "filed"
    body, policy = tool_results(fake.last_request)
    assert sp.EXPENSE_BODY in body
    assert "references/policy.md" in body  # the bundled files are named for the model
    assert policy.strip() == sp.POLICY


@pytest.mark.parametrize("path,why", [
    ("../world-clock/SKILL.md", "`..` is not allowed"),
    ("references/../../world-clock/SKILL.md", "`..` is not allowed"),
    ("/etc/passwd", "is absolute"),
    ("escape.md", "points outside the skill's folder"),
    ("logo.png", "binary file"),
    ("missing.md", "has no file"),
])
async def test_escapes_and_binary_files_are_refused(
    fake: FakeOpenAI, tmp_path: Path, path: str, why: str
) -> None:
    agent, _skills = make(fake, tmp_path)
    fake.push(ToolCalls([Call("skill_read", {"name": "expense-report", "file": path})]),
              Reply("ok"))
    assert await agent(msg("read it")) == "ok"
    [result] = tool_results(fake.last_request)
    assert result.startswith("error: ") and why in result, result
    assert sp.SECRET not in json.dumps([r.body for r in fake.requests])
    assert sp.CLOCK_BODY not in result


async def test_a_loaded_skill_offers_the_tool_routing_left_out(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    agent, _skills = make(fake, tmp_path)
    fake.push(ToolCalls([Call("skill_read", {"name": "world-clock"})]),
              ToolCalls([Call(sp.CLOCK_TOOL, {})]), Reply("noon"))
    assert await agent(msg("what about Tokyo?")) == "noon"
    before, after, last = fake.requests[-3:]
    assert sp.CLOCK_TOOL not in tools_of(before)  # routing left it out
    assert sp.CLOCK_TOOL in tools_of(after)  # the skill's allowed-tools put it on offer
    assert tool_results(last)[-1] == "12:00 in Tokyo"


async def test_slash_skill_starts_a_turn_with_the_skill_loaded(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    agent, _skills = make(fake, tmp_path)
    for command in ("/world_clock what time is it in Tokyo?",
                    "/world-clock what time is it in Tokyo?",
                    "/skill world-clock what time is it in Tokyo?"):
        await agent(msg(command))
        request = fake.last_request
        user = request.last_user_text
        assert sp.CLOCK_BODY in user and user.endswith("what time is it in Tokyo?"), user
        assert sp.CLOCK_TOOL in tools_of(request)
        assert sp.CLOCK_BODY not in request.messages[0]["content"]


async def test_slash_skills_lists_them_without_a_model_call(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    agent, _skills = make(fake, tmp_path)
    reply = await agent(msg("/skills"))
    assert reply.splitlines() == [
        "Skills (2):",
        "/expense_report — File an expense report: collect the amount, date and receipt, "
        "then submit it.",
        "/world_clock — Tell the time in any city of the world.",
        "(1 could not be loaded: `gantry check` says why)",
    ]
    assert await agent(msg("/skill nope")) == "No skill 'nope' here. /skills lists them."
    assert await agent(msg("/nope")) == "Unknown command /nope. /help lists the commands."
    assert "/skills" in await agent(msg("/help"))
    assert fake.requests == []


async def test_a_private_skill_is_not_offered_in_a_group_chat(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    agent, _skills = make(fake, tmp_path)
    fake.push(ToolCalls([Call("skill_read", {"name": "expense-report"})]), Reply("no"))
    assert await agent(msg("file my expenses", group=True)) == "no"
    system = fake.requests[0].messages[0]["content"]
    assert "world-clock" in system and "expense-report" not in system
    [result] = tool_results(fake.last_request)
    assert result.startswith("error: no skill 'expense-report'") and sp.EXPENSE_BODY not in result
    assert "expense" not in await agent(msg("/skills", group=True))
    assert (await agent(msg("/expense_report", group=True))).startswith("Unknown command")


async def test_a_reload_picks_up_new_and_fixed_skills(fake: FakeOpenAI, tmp_path: Path) -> None:
    agent, skills = make(fake, tmp_path)
    (skills.directory / "broken-one" / "SKILL.md").write_text(
        "---\nname: broken-one\ndescription: Fixed now.\n---\nbody\n", encoding="utf-8")
    skills.load()  # what SIGHUP does (gantry/runtime.py)
    await agent(msg("hi"))
    assert "- broken-one: Fixed now." in fake.last_request.messages[0]["content"]
    assert skills.catalog.errors == ()


def _skill(i: int, description: str = "Does one thing well.") -> Skill:
    return Skill(name=f"s{i:03d}", description=description, body="")


def test_the_listing_is_capped_by_count_and_size(caplog: pytest.LogCaptureFixture) -> None:
    text, left = block([_skill(i) for i in range(catalog.MAX_LISTED + 3)])
    assert left == [f"s{i:03d}" for i in range(catalog.MAX_LISTED, catalog.MAX_LISTED + 3)]
    assert text.count("\n- ") == catalog.MAX_LISTED
    text, left = block([_skill(i, "x" * 1000) for i in range(40)])
    assert len(text) <= catalog.BLOCK_MAX_CHARS and left and text.count("\n- ") + len(left) == 40


def test_the_cap_note_is_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(3):
        d = tmp_path / "skills" / f"s{i}"
        d.mkdir(parents=True)
        (d / "SKILL.md").write_text(f"---\nname: s{i}\ndescription: number {i}\n---\n",
                                    encoding="utf-8")
    monkeypatch.setattr(catalog, "MAX_LISTED", 2)
    monkeypatch.setattr(catalog, "block", lambda s: block(s, max_listed=2))
    with caplog.at_level(logging.WARNING, "gantry.skills"):
        skills = Skills(tmp_path / "skills")
        skills.load()
    [note] = [r for r in caplog.records if "left out" in r.getMessage()]
    assert note.left_out == ["s2"]  # type: ignore[attr-defined]
    assert "s2" not in skills.block() and skills.get("s2") is not None  # still usable by name


def test_gantry_check_reports_the_broken_skill(tmp_path: Path) -> None:
    from gantry.check import check_skills
    from gantry.config import load

    sp.write(tmp_path / "persona")
    cfg = load({"LLM_BASE_URL": "http://127.0.0.1:9/v1", "LLM_API_KEY": "k", "LLM_MODEL": "m",
                "PERSONA_DIR": str(tmp_path / "persona"), "CHANNEL": "stdio"}, offline=True)
    results = {r.name: r for r in check_skills(cfg)}
    assert results["skills"].status == "ok"
    assert "2 loaded" in results["skills"].detail
    broken = results["skill broken-one"]
    assert broken.failed and "`description` is missing" in broken.detail
    assert "broken-one/SKILL.md" in broken.detail


def test_gantry_skills_list_prints_what_the_model_sees(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gantry.cli import main

    sp.write(tmp_path / "persona")
    for key, value in {"LLM_BASE_URL": "http://127.0.0.1:9/v1", "LLM_API_KEY": "k",
                       "LLM_MODEL": "m", "CHANNEL": "stdio",
                       "PERSONA_DIR": str(tmp_path / "persona")}.items():
        monkeypatch.setenv(key, value)
    assert main(["skills", "list"]) == 0
    out, err = capsys.readouterr()
    skills = Skills(tmp_path / "persona" / "skills")
    skills.load()
    assert out.startswith(skills.block() + "\n\nskills: 2 listed")
    assert "private (not in group chats): expense-report" in out
    assert "not loaded: broken-one:" in err


def test_gantry_skills_list_imports_no_client_library(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    sp.write(tmp_path / "persona")
    heavy = {"anyio", "httpx", "httpcore", "mcp", "aiogram", "apsw", "aiohttp"}
    code = ("import sys; from gantry.cli import main; rc = main(['skills', 'list']); "
            f"print('HEAVY', sorted({{m.split('.')[0] for m in sys.modules}} & {heavy!r}))")
    env = {**os.environ, "PERSONA_DIR": str(tmp_path / "persona"), "CHANNEL": "stdio",
           "LLM_BASE_URL": "http://127.0.0.1:9/v1", "LLM_API_KEY": "k", "LLM_MODEL": "m"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stdout, r.stdout


async def test_a_configmap_mount_of_the_sample_skill_loads_and_reads(tmp_path: Path) -> None:
    """Kubernetes mounts a ConfigMap's items through symlinks (`skills` → `..data/skills`,
    `..data` → a dated folder): the skill loads and its files read as inside their folder."""
    import shutil

    from gantry.skills.tool import read_tool

    sample = Path(__file__).resolve().parents[1] / "deploy" / "persona"
    mount = tmp_path / "persona"
    dated = mount / "..2026_12_01_00_00_00.1"
    shutil.copytree(sample / "skills", dated / "skills")
    (mount / "..data").symlink_to(dated.name)
    (mount / "skills").symlink_to("..data/skills")
    skills = Skills(mount / "skills")
    assert [s.name for s in skills.load().skills] == ["plan-week"]
    assert skills.catalog.errors == ()
    tool = read_tool(skills, Registry(), None)
    body = await tool.call({"name": "plan-week"})
    assert "# Plan the week" in body and "references/checklist.md" in body
    checklist = await tool.call({"name": "plan-week", "file": "references/checklist.md"})
    assert checklist.startswith("# Checklist before showing the plan")


async def test_the_listing_counts_against_the_prompt_budget(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    """HISTORY_MAX_TOKENS covers the listing like the persona: with it in the system prompt,
    less history fits; without skills, the same budget keeps more."""
    kept = []
    for with_skills in (True, False):
        where = tmp_path / ("with" if with_skills else "without")
        agent, skills = make(fake, where)
        if not with_skills:
            agent.prompt_blocks.clear()
        system = len(agent._persona(False))
        for text in ("one " * 10, "two " * 10):
            await agent(msg(text))
        turn = len(str(fake.last_request.messages[-1]["content"]))  # the message + its footer
        agent.max_tokens = (len("You are Tim.") + len(skills.block()) + turn) // 4 + 30
        await agent(msg("three " * 10))
        kept.append((len(fake.last_request.messages), system))
    (with_count, with_system), (without_count, without_system) = kept
    assert with_system > without_system
    assert with_count < without_count, kept
