"""The SKILL.md front matter reader (gantry.skills.frontmatter) and the agentskills checks
(gantry.skills.skill): property tests against PyYAML (a test-only dependency; gantry's
runtime does not ship it) and the specification's rules."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gantry.skills.frontmatter import FrontMatterError, parse, split
from gantry.skills.skill import SkillError, from_text

KEYS = st.from_regex(r"[a-z][a-z0-9_-]{0,15}", fullmatch=True)
# Text a person writes on one line: no control characters, no line or paragraph separators.
LINE = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"),
                             blacklist_characters="\ufeff\x85"), max_size=60)


def _plain_ok(text: str) -> bool:
    """Text YAML reads back as itself when written plain (PyYAML decides)."""
    if text != text.strip() or not text:
        return False
    try:
        return yaml.safe_load(f"k: {text}") == {"k": text}
    except yaml.YAMLError:
        return False


@st.composite
def scalar(draw: Any) -> tuple[str, str]:
    """(how it is written after `key:`, the text it means)."""
    text = draw(LINE)
    style = draw(st.sampled_from(["plain", "double", "single"]))
    if style == "plain" and _plain_ok(text) and text[0] not in "&*!%@`{[|>'\"":
        return " " + text, text
    if style == "single":
        return " '" + text.replace("'", "''") + "'", text
    # \u escapes of astral characters are surrogate pairs, which PyYAML leaves unpaired
    ascii_ok = all(ord(c) < 0x10000 for c in text)
    return " " + json.dumps(text, ensure_ascii=ascii_ok and draw(st.booleans())), text


@st.composite
def block(draw: Any) -> tuple[str, str]:
    lines = draw(st.lists(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9 ,.]{0,30}[A-Za-z0-9.]|",
                                        fullmatch=True), min_size=1, max_size=5))
    assume(any(lines))
    style = draw(st.sampled_from(["|", ">", "|-", ">-"]))
    body = "".join(f"\n  {ln}" if ln else "\n" for ln in lines)
    return " " + style + body, ""


@st.composite
def document(draw: Any) -> list[str]:
    keys = draw(st.lists(KEYS, min_size=1, max_size=6, unique=True))
    out: list[str] = []
    for key in keys:
        kind = draw(st.sampled_from(["scalar", "block", "map", "list"]))
        if kind == "scalar":
            out.append(key + ":" + draw(scalar())[0])
        elif kind == "block":
            out.append(key + ":" + draw(block())[0])
        elif kind == "map":
            sub = draw(st.lists(KEYS, min_size=1, max_size=4, unique=True))
            out.append(key + ":" + "".join(f"\n  {k}:{draw(scalar())[0]}" for k in sub))
        else:
            items = draw(st.lists(scalar(), min_size=1, max_size=4))
            out.append(key + ":" + "".join(f"\n  -{w}" for w, _t in items))
    return "\n".join(out).split("\n")


def _stringly(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    if isinstance(value, list):
        return all(isinstance(v, str) for v in value)
    return isinstance(value, str)


@given(document())
@settings(max_examples=400, deadline=None)
def test_the_subset_reads_as_pyyaml_reads_it(lines: list[str]) -> None:
    expected = yaml.safe_load("\n".join(lines) + "\n")  # a `---` line always follows
    assume(isinstance(expected, dict) and all(isinstance(k, str) and _stringly(v)
                                              for k, v in expected.items()))  # YAML 1.1 typing
    assert parse(lines) == expected


@given(st.text(max_size=400))
@settings(max_examples=400, deadline=None)
def test_any_text_is_read_or_refused_with_a_line_number(text: str) -> None:
    try:
        parts = split(text)
        if parts is not None:
            parse(parts[0])
    except FrontMatterError as exc:
        assert str(exc).startswith("front matter line ")


@given(st.text(max_size=300), st.text(max_size=20))
@settings(max_examples=300, deadline=None)
def test_from_text_raises_only_skill_errors(text: str, folder: str) -> None:
    with contextlib.suppress(SkillError):  # anything else fails the test
        from_text("---\n" + text, folder)


def _skill(front: str, folder: str = "plan-week") -> Any:
    return from_text(f"---\n{front}\n---\nBody.\n", folder)


@pytest.mark.parametrize("name,why", [
    ("Plan-Week", "may hold only"),
    ("plan_week", "may hold only"),
    ("-plan", "may hold only"),
    ("plan-", "may hold only"),
    ("plan--week", "may hold only"),
    ("a" * 65, "at most 64"),
    ("other", "differs from its folder"),
    ("''", "missing or empty"),
])
def test_names_follow_the_specification(name: str, why: str) -> None:
    with pytest.raises(SkillError, match=why):
        _skill(f"name: {name}\ndescription: d", folder="x" if name == "other" else name)


def test_the_specification_s_fields() -> None:
    skill = _skill("name: plan-week\ndescription: |\n  Plan the week.\n  Step by step.\n"
                   "license: Apache-2.0\ncompatibility: needs a calendar\n"
                   "metadata:\n  version: '1.0'\n  gantry-private: 'yes'\n"
                   "allowed-tools: cal__list cal__* Read\nuser-invocable: true")
    assert skill.description == "Plan the week. Step by step."
    assert (skill.license, skill.compatibility) == ("Apache-2.0", "needs a calendar")
    assert skill.metadata == {"version": "1.0", "gantry-private": "yes"} and skill.private
    assert skill.tools == ("cal__list", "cal__*", "Read")
    assert skill.warnings == ("field 'user-invocable' is not in the agentskills "
                              "specification; ignored",)
    assert skill.body == "Body." and skill.command == "/plan_week"
    with pytest.raises(SkillError, match="at most 1024"):
        _skill(f"name: plan-week\ndescription: {'d' * 1025}")
    with pytest.raises(SkillError, match="at most 500"):
        _skill(f"name: plan-week\ndescription: d\ncompatibility: {'c' * 501}")
    with pytest.raises(SkillError, match="`metadata` must be a map"):
        _skill("name: plan-week\ndescription: d\nmetadata: text")
    with pytest.raises(SkillError, match="never closed"):
        from_text("---\nname: plan-week\ndescription: d\n", "plan-week")
    with pytest.raises(SkillError, match="must start with a `---` line"):
        from_text("# just markdown\n", "plan-week")
