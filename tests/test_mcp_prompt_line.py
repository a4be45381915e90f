"""The pure parts of MCP prompts and resources: the /prompt line's words and their binding to
arguments (property tests), a prompt's messages as one user message, the bounded listings."""

from __future__ import annotations

import base64
import shlex
from types import SimpleNamespace as NS

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gantry.mcp import prompt_line
from gantry.mcp.prompt_command import LIST_MAX_CHARS, listing, usage_of
from gantry.mcp.prompt_line import LineError, bind, split_words
from gantry.mcp.prompts import ASSISTANT, MAX_IMAGES, Argument, ListedPrompt, prompt_message
from gantry.mcp.resource_tool import MAX_SHOWN, Entry, listing_text, read_text

words_st = st.lists(st.text(min_size=1, max_size=30).filter(lambda w: "\0" not in w),
                    max_size=prompt_line.MAX_WORDS)


@given(words_st)
def test_quoted_words_split_back_into_themselves(words: list[str]) -> None:
    assert split_words(" ".join(shlex.quote(w) for w in words)) == words


@given(st.text(max_size=200))
def test_any_line_splits_or_says_why(text: str) -> None:
    try:
        words = split_words(text)
    except LineError as exc:
        assert str(exc)
    else:
        assert all(words) and len(words) <= prompt_line.MAX_WORDS


def test_quotes_keep_spaces_and_curly_quotes_count() -> None:
    assert split_words('every args-prompt city="New York" state=\'New  York\'') == [
        "every", "args-prompt", "city=New York", "state=New  York"]
    assert split_words("city=\u201cSan Francisco\u201d") == ["city=San Francisco"]
    assert split_words("don\u2019t stop") == ["don\u2019t", "stop"]  # an apostrophe
    with pytest.raises(LineError, match="a quote is not closed"):
        split_words('city="New York')
    with pytest.raises(LineError, match="too many words"):
        split_words("x " * (prompt_line.MAX_WORDS + 1))


@given(st.lists(st.from_regex(r"[a-z]{1,8}", fullmatch=True), unique=True, max_size=6),
       st.data())
def test_binding_by_name_and_position_gives_each_value_once(names: list[str],
                                                           data: st.DataObject) -> None:
    values = {n: data.draw(st.text(max_size=20).filter(lambda v: "=" not in v))
              for n in names}
    named = data.draw(st.sets(st.sampled_from(names))) if names else set()
    words = [f"{n}={values[n]}" for n in names if n in named]
    words += [values[n] for n in names if n not in named]
    got = bind(words, names)
    assert got == {n: values[n] for n in names}
    assert list(got) == names  # the prompt's order


def test_binding_problems_are_named() -> None:
    names = ["city", "state"]
    assert bind(["Paris"], names) == {"city": "Paris"}
    assert bind(["state=TX", "Austin"], names) == {"city": "Austin", "state": "TX"}
    assert bind(["city=a=b"], names) == {"city": "a=b"}
    assert bind(["2+2=4"], names) == {"city": "2+2=4"}  # not a name: a value
    with pytest.raises(LineError, match=r"no argument 'town' \(its arguments: city, state"):
        bind(["town=x"], names)
    with pytest.raises(LineError, match="city is given twice"):
        bind(["city=a", "city=b"], names)
    with pytest.raises(LineError, match="'c' fits no argument"):
        bind(["a", "b", "c"], names)
    with pytest.raises(LineError, match="too long"):
        bind(["x" * (prompt_line.MAX_VALUE + 1)], names)


def _image(data: bytes, mime: str = "image/png") -> NS:
    return NS(type="image", data=base64.b64encode(data).decode(), mime_type=mime)


def test_a_prompt_becomes_one_user_message() -> None:
    kept: list[tuple[str, str]] = []

    def keep(b64: str, mime: str, name: str) -> str:
        kept.append((mime, name))
        return "0123456789ab"

    messages = [
        NS(role="user", content=NS(type="text", text="Look at this:")),
        NS(role="user", content=_image(b"\x89PNG fake")),
        NS(role="assistant", content=NS(type="text", text="I see it.")),
        NS(role="user", content=NS(type="resource", resource=NS(
            uri="demo://x", text=None, blob=base64.b64encode(b"pdf").decode(),
            mime_type="application/pdf"))),
        NS(role="user", content=NS(type="resource_link", uri="demo://y", name="Y",
                                   mime_type="text/plain")),
    ]
    got = prompt_message(messages, 10_000, keep, reader="every")
    assert got.text.split("\n\n") == [
        "Look at this:", "[image 1, image/png]", f"{ASSISTANT}I see it.",
        "[resource demo://x, application/pdf, 3 B; attachment 0123456789ab: send_attachment "
        "can send it to the user]",
        "[resource link demo://y (Y, text/plain); resource_read can read it: server 'every', "
        "this uri]"]
    assert len(got.images) == 1 and got.images[0].image_url.url.startswith(
        "data:image/png;base64,")
    assert kept == [("application/pdf", "demo://x")]


def test_a_prompt_is_bounded() -> None:
    many = [NS(role="user", content=_image(b"img")) for _ in range(MAX_IMAGES + 2)]
    got = prompt_message(many, 10_000)
    assert len(got.images) == MAX_IMAGES
    assert got.text.count("[image/png, 3 B]") == 2  # the others: placeholders
    bad = prompt_message([NS(role="user", content=NS(type="image", data="%%%",
                                                      mime_type="image/png"))], 100)
    assert bad.images == ()
    long = prompt_message([NS(role="user", content=NS(type="text", text="x" * 5000))], 1000)
    assert len(long.text) == 1000 and "[truncated:" in long.text
    assert prompt_message([], 100).text == "(the prompt is empty)"


def test_the_prompt_list_is_bounded_and_says_how_to_type_each() -> None:
    p = ListedPrompt("args-prompt", "Arguments Prompt", "Two arguments",
                     (Argument("city", required=True), Argument("state")))
    assert usage_of("every", p) == "/prompt every args-prompt city=… [state=…]"
    shown = listing([("every", p)])
    assert "/prompt every args-prompt city=… [state=…] — Arguments Prompt: Two arguments" \
        in shown
    many = [("s", ListedPrompt(f"p{i}", description="d" * 200)) for i in range(200)]
    text = listing(many)
    assert len(text) <= LIST_MAX_CHARS + 100 and "more; /prompts SERVER lists" in text
    assert listing([]) == "No MCP server offers prompts."
    assert listing(many, "other") == "MCP server 'other' offers no prompts."


def test_resource_listing_and_reading_text_are_bounded() -> None:
    entries = [Entry(f"x://{i}", f"n{i}") for i in range(MAX_SHOWN + 5)]
    text = listing_text("s", entries, True)
    assert text.count("\n- x://") == MAX_SHOWN and "(5 more not shown)" in text
    assert listing_text("s", [], True) == "MCP server 's' lists no resources now."
    assert read_text("x://a", [], None) == "resource x://a has no content"
    blob = NS(uri="x://b", text=None, blob="AAAA", mime_type=None)
    assert read_text("x://b", [blob], None) == "[resource x://b, binary, 3 B]"
