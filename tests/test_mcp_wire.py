"""Decoding a server's stdout lines (strict, then lenient) and checking arguments to write."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp_types import JSONRPCNotification, JSONRPCResponse

from gantry.mcp.wire import decode, lone_surrogate, top_level_id

HEAD = b'{"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "'


def text_of(line: bytes) -> str:
    message = decode(line).message
    assert isinstance(message, JSONRPCResponse)
    return str(message.result["content"][0]["text"])


def test_a_valid_line_takes_the_strict_path_and_keeps_surrogate_pairs() -> None:
    line = HEAD + b'\\ud83d\\ude00 ok"}]}}'
    assert decode(line).repaired == () and text_of(line) == "\U0001f600 ok"


@pytest.mark.parametrize(
    ("raw", "text", "repaired"),
    [
        (b"cut: \\ud83d", "cut: \ufffd", ("lone surrogates",)),
        (b"\\udc00 and \\ud83d\\ude00", "\ufffd and \U0001f600", ("lone surrogates",)),
        (b"byte \xff here", "byte \ufffd here", ("invalid UTF-8",)),
        (b"\xc3(\\ud800", "\ufffd(\ufffd", ("invalid UTF-8", "lone surrogates")),
    ],
)
def test_lone_surrogates_and_invalid_utf8_become_replacement_characters(
    raw: bytes, text: str, repaired: tuple[str, ...]
) -> None:
    line = HEAD + raw + b'"}]}}'
    assert decode(line).repaired == repaired
    assert text_of(line) == text


def test_lone_surrogates_in_keys_and_notifications_are_replaced_too() -> None:
    decoded = decode(b'{"jsonrpc": "2.0", "method": "notifications/message", '
                     b'"params": {"level": "info", "data": {"k\\ud800": "v"}}}')
    assert isinstance(decoded.message, JSONRPCNotification)
    assert decoded.message.params == {"level": "info", "data": {"k\ufffd": "v"}}


@pytest.mark.parametrize(
    ("line", "reply_to"),
    [
        (HEAD + b"cut off", 7),  # not JSON: the id is read from the text
        (b'{"jsonrpc": "2.0", "result": {"id": 1, "x": "{"}, "id": "abc"', "abc"),
        (b'{"jsonrpc": "2.0", "id": 3}', 3),  # JSON, but neither result nor error
        (b'{"jsonrpc": "2.0", "id": 3, "result": 5}', 3),
        (b'{"jsonrpc": "2.0", "id": 3, "method": 5}', None),  # a request of its own
        (b'{"jsonrpc": "2.0", "method": "x", "id": 4', None),
        (b'{"jsonrpc": "2.0", "id": true}', None),
        (b"listening on port 8080", None),
        (b"[1, 2", None),
    ],
)
def test_a_line_that_is_no_message_names_the_request_it_answers(
    line: bytes, reply_to: int | str | None
) -> None:
    decoded = decode(line)
    assert decoded.message is None and decoded.reply_to == reply_to


def test_top_level_id_ignores_ids_nested_or_inside_strings() -> None:
    assert top_level_id('{"a": {"id": 1}, "s": "\\"id\\": 2", "id": -5, "r": ') == -5
    assert top_level_id('{"result": [{"id": 1}], "id": "x\\"y"') == 'x"y'
    assert top_level_id('{"id": }') is None
    assert top_level_id('{"a": 1') is None


def test_lone_surrogate_names_where_it_is() -> None:
    assert lone_surrogate({"text": "fine \U0001f600", "n": 3, "ok": [True, None]}) is None
    assert lone_surrogate({"text": "half \ud83d"}) == "text"
    assert lone_surrogate({"a": [1, {"b": "x\udfff"}]}) == "a.1.b"
    assert lone_surrogate({"k\udc00": 1}) == "the key 'k\\udc00'"
    assert lone_surrogate({"a": {"k\udc00": 1}}) == "a.'k\\udc00'"


def _surrogate_anywhere(value: object) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(_surrogate_anywhere(k) or _surrogate_anywhere(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_surrogate_anywhere(v) for v in value)
    return False


TEXT = st.text(st.characters(codec=None, blacklist_categories=()), max_size=6) | st.sampled_from(
    ["plain", "caf\u00e9", "\ud83d", "x\udfff", "\U0001f600"])
NESTED = st.recursive(st.none() | st.integers() | st.booleans() | TEXT,
                      lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(TEXT | st.integers(), inner, max_size=3), max_leaves=10)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(TEXT, NESTED, max_size=4))
def test_lone_surrogate_finds_one_wherever_it_is(args: dict[object, object]) -> None:
    """The ASCII fast path answers None exactly when no key or string holds a surrogate."""
    assert (lone_surrogate(args) is not None) == _surrogate_anywhere(args)
