"""Pure MCP ↔ model translations: tool names, schemas, result text."""

from __future__ import annotations

from types import SimpleNamespace as NS

from hypothesis import given
from hypothesis import strategies as st

from gantry.mcp.convert import exposed_names, first_line, parameters, result_text
from gantry.tools import NAME_RE


@given(st.lists(st.text(max_size=80), max_size=12),
       st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,20}", fullmatch=True))
def test_names_are_valid_unique_and_order_independent(tools: list[str], server: str) -> None:
    names = exposed_names(server, tools)
    assert set(names) == set(tools)
    assert len(set(names.values())) == len(names)
    for name in names.values():
        assert NAME_RE.match(name), name
    assert exposed_names(server, list(reversed(tools))) == names


def test_names_keep_the_prefix_and_break_ties_deterministically() -> None:
    assert exposed_names("time", ["get_time"]) == {"get_time": "time__get_time"}
    names = exposed_names("s", ["a.b", "a b", "a_b"])
    assert names == {"a b": "s__a_b", "a.b": "s__a_b_2", "a_b": "s__a_b_3"}
    long = exposed_names("s", ["x" * 100, "x" * 101])
    assert all(len(n) <= 64 for n in long.values()) and len(set(long.values())) == 2


def test_parameters_are_always_an_object_schema() -> None:
    assert parameters(None) == {"type": "object", "properties": {}}
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    assert parameters(schema) == schema
    assert first_line("\n  First.\nSecond") == "First."


def test_result_text_maps_each_content_kind() -> None:
    text = NS(type="text", text="hello")
    image = NS(type="image", data="A" * 4000, mime_type="image/png")
    audio = NS(type="audio", data="AAAA", mime_type="audio/wav")
    res = NS(type="resource", resource=NS(uri="file:///a.txt", text="inside", mime_type=None))
    blob = NS(type="resource", resource=NS(uri="file:///b", text=None, blob="AAAA",
                                            mime_type="application/pdf"))
    link = NS(type="resource_link", uri="file:///c")
    out = result_text([text, image, audio, res, blob, link], None, False)
    assert out.splitlines() == ["hello", "[image/png, 3 kB]", "[audio/wav, 3 B]",
                                "[resource file:///a.txt]", "inside",
                                "[resource file:///b, application/pdf, 3 B]",
                                "[resource link file:///c]"]


def test_structured_content_is_used_when_there_is_no_text() -> None:
    assert result_text([], {"temp": 3}, False) == '{"temp":3}'
    assert result_text([NS(type="text", text="t")], {"temp": 3}, False) == "t"
    assert result_text([], None, False) == "(no output)"
    assert "error" in result_text([], None, True)
    assert result_text([NS(type="text", text="")], None, False) == "(no output)"
    assert "error" in result_text([NS(type="text", text="")], None, True)
