"""SSE framing and stream assembly against chunk shapes that real providers send."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from gantry.model.assemble import Completion, StreamAssembler, ToolCallAssembler
from gantry.model.sse import SSEEvent, SSEParser
from gantry.model.wire import ToolCallDelta, decode_chunk

# ----------------------------------------------------------------------------- helpers


def parse(*pieces: bytes) -> list[SSEEvent]:
    parser = SSEParser()
    events = [e for piece in pieces for e in parser.feed(piece)]
    return events + parser.close()


def assemble(raw: bytes) -> tuple[list[str], Completion, bool]:
    """Run recorded bytes through parser + assembler: (text deltas, completion, saw [DONE])."""
    assembler = StreamAssembler()
    deltas: list[str] = []
    done = False
    for event in parse(raw):
        if event.data == "[DONE]":
            done = True
            break
        text = assembler.add(decode_chunk(event.data))
        if text:
            deltas.append(text)
    return deltas, assembler.result(), done


def sse(*payloads: object, sep: bytes = b"\n") -> bytes:
    out = b""
    for payload in payloads:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        out += b"data: " + data.encode() + sep + sep
    return out


# ----------------------------------------------------------------------------- SSE parser


def test_data_with_and_without_space() -> None:
    assert [e.data for e in parse(b"data: a\n\ndata:b\n\ndata:  c\n\n")] == ["a", "b", " c"]


def test_comments_keepalives_and_blank_lines_are_skipped() -> None:
    raw = b": OPENROUTER PROCESSING\n\n:\n\n\n\ndata: x\n\n: ping\n\n"
    assert parse(raw) == [SSEEvent(data="x")]


def test_multi_line_data_is_joined_with_newlines() -> None:
    assert parse(b'data: {\ndata: "a": 1\ndata: }\n\n') == [SSEEvent(data='{\n"a": 1\n}')]


def test_event_and_id_fields() -> None:
    events = parse(b"event: error\nid: 7\ndata: boom\n\ndata: next\n\n")
    assert events == [
        SSEEvent(data="boom", event="error", id="7"),
        SSEEvent(data="next", event="message", id="7"),
    ]


def test_crlf_and_cr_line_endings() -> None:
    assert [e.data for e in parse(b"data: a\r\n\r\ndata: b\r\rdata: c\n\n")] == ["a", "b", "c"]


def test_crlf_split_across_chunks() -> None:
    assert [e.data for e in parse(b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n")] == ["a", "b"]


def test_utf8_split_across_chunks() -> None:
    raw = "data: héllo ✓\n\n".encode()
    assert parse(raw[:8], raw[8:13], raw[13:]) == [SSEEvent(data="héllo ✓")]


def test_bom_is_stripped() -> None:
    assert parse(b"\xef\xbb", b"\xbfdata: x\n\n") == [SSEEvent(data="x")]


def test_done_sentinel_is_an_ordinary_event() -> None:
    assert [e.data for e in parse(b"data: {}\n\ndata: [DONE]\n\n")] == ["{}", "[DONE]"]


def test_unterminated_final_event_is_flushed_on_close() -> None:
    assert parse(b"data: [DONE]") == [SSEEvent(data="[DONE]")]


def test_field_without_colon_and_unknown_fields() -> None:
    assert parse(b"data\n\nretry: 10\nfoo: bar\ndata: x\n\n") == [
        SSEEvent(data=""),
        SSEEvent(data="x"),
    ]


_text = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"),
    max_size=20,
)
_event = st.tuples(
    st.sampled_from(["", "message", "error", "ping"]),
    st.lists(_text, min_size=1, max_size=3),
    st.booleans(),
)


_NEWLINES = [b"\n", b"\r\n", b"\r"]


@st.composite
def _stream_and_events(draw: st.DrawFn) -> tuple[bytes, list[SSEEvent]]:
    # Either one line ending for the whole stream or a different one per line: bare CR
    # followed by LF-terminated lines is where a split CRLF is easiest to misread.
    fixed = draw(st.sampled_from([None, *_NEWLINES]))
    last = [b""]

    def newline() -> bytes:
        # A bare CR followed at once by an LF is one CRLF, so that pair is not drawn.
        options = [n for n in _NEWLINES if not (last[0] == b"\r" and n == b"\n")]
        last[0] = fixed if fixed is not None else draw(st.sampled_from(options))
        return last[0]

    events = draw(st.lists(_event, max_size=6))
    raw = b""
    expected: list[SSEEvent] = []
    for name, lines, comment in events:
        if comment:
            raw += b": keep-alive" + newline()
        if name:
            raw += b"event: " + name.encode() + newline()
        for line in lines:
            raw += b"data: " + line.encode() + newline()
        raw += newline()
        expected.append(SSEEvent(data="\n".join(lines), event=name or "message"))
    return raw, expected


@given(_stream_and_events(), st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_any_split_yields_the_same_events(
    sample: tuple[bytes, list[SSEEvent]], cuts: list[int]
) -> None:
    raw, expected = sample
    points = sorted({min(c, len(raw)) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
    assert parse(*pieces) == expected
    assert parse(raw) == expected
    for i in range(len(raw) + 1):  # every single cut too: random cuts rarely follow a bare CR
        assert parse(raw[:i], raw[i:]) == expected


@given(st.binary(max_size=300), st.lists(st.integers(min_value=0, max_value=300), max_size=10))
def test_arbitrary_bytes_never_crash_and_split_invariant(raw: bytes, cuts: list[int]) -> None:
    points = sorted({min(c, len(raw)) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
    assert parse(*pieces) == parse(raw)


# Line-ending-heavy bytes: random binary almost never puts a bare CR before text and an LF.
_framing_bytes = st.lists(
    st.tuples(st.sampled_from([b"data:x", b"", b":", b"event: e", b"data: y"]),
              st.sampled_from(_NEWLINES)),
    max_size=12,
).map(lambda units: b"".join(line + end for line, end in units))


@settings(max_examples=300)
@given(_framing_bytes, st.lists(st.integers(min_value=0, max_value=200), max_size=10))
def test_line_ending_soup_split_invariant(raw: bytes, cuts: list[int]) -> None:
    whole = parse(raw)
    points = sorted({min(c, len(raw)) for c in cuts})
    pieces = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)], strict=True)]
    assert parse(*pieces) == whole
    for i in range(len(raw) + 1):  # every single cut too: the random ones rarely hit a CR
        assert parse(raw[:i], raw[i:]) == whole


def test_bare_cr_line_then_text_in_the_same_chunk_keeps_the_next_lf() -> None:
    # "data: a\r" ends a line; "data: b" follows in the same chunk, so the LF that opens
    # the next chunk ends "data: b" and the second LF dispatches: two events, not one.
    assert parse(b"data: a\r\rdata: b", b"\n\n") == [SSEEvent(data="a"), SSEEvent(data="b")]
    assert parse(b"data: a\rdata: b", b"\n\ndata: c\n\n") == [
        SSEEvent(data="a\nb"), SSEEvent(data="c")]


# ----------------------------------------------------------------------------- provider shapes

FIXTURES = Path(__file__).parent / "fixtures" / "sse"


def recorded(name: str) -> bytes:
    """A provider stream as recorded (tests/fixtures/sse/<name>.sse, LF line endings)."""
    return (FIXTURES / f"{name}.sse").read_bytes()


def test_openai_parallel_tool_calls() -> None:
    deltas, completion, done = assemble(recorded("openai_parallel_tool_calls"))
    assert done and deltas == []
    assert [(c.id, c.function.name, c.function.arguments) for c in completion.tool_calls] == [
        ("call_w", "weather__get", '{"city": "Oslo"}'),
        ("call_t", "time__now", "{}"),
    ]
    assert completion.finish_reason == "tool_calls"
    assert completion.usage is not None and completion.usage.total_tokens == 100


def test_gemini_indexless_whole_calls() -> None:
    """Gemini: no `index`, two whole calls in one delta, thought signature, finish "stop"."""
    _, completion, done = assemble(recorded("gemini_whole_calls"))
    assert done
    first, second = completion.tool_calls
    assert first.id == "function-call-9321447316148375761"
    assert first.function.arguments == '{"city":"Oslo"}'
    assert first.extra_content == {"google": {"thought_signature": "CiQBcsjafE=="}}
    assert second.function.name == "time__now" and second.extra_content is None
    assert completion.finish_reason == "tool_calls"  # normalised from Gemini's "stop"


def test_gemini_indexless_fragments_and_late_signature() -> None:
    """Gemini via proxies: `id: ""`, indexless argument pieces, signature sent on its own."""
    deltas, completion, _ = assemble(recorded("gemini_split_late_signature"))
    assert deltas == ["Let me check. "]
    save, now = completion.tool_calls
    assert save.function.name == "memory__save"
    assert json.loads(save.function.arguments) == {"content": "likes tea"}
    assert save.extra_content == {"google": {"thought_signature": "late=="}}
    assert save.id.startswith("call_") and save.id != now.id
    assert now.function.name == "time__now"


def test_ollama_whole_call_in_one_chunk() -> None:
    _, completion, _ = assemble(recorded("ollama_tool_call"))
    (call,) = completion.tool_calls
    assert (call.id, call.function.name) == ("call_x1y2z3", "weather__get")
    assert completion.text == ""


def test_llamacpp_text_then_call_with_timings() -> None:
    deltas, completion, _ = assemble(recorded("llamacpp_text_then_call"))
    assert deltas == ["Checking"] and completion.text == "Checking"
    (call,) = completion.tool_calls
    assert call.function.arguments == '{"city":"Oslo"}'
    assert completion.usage is not None and completion.usage.completion_tokens == 12


def test_vllm_repeated_id_and_name() -> None:
    """vLLM/gateways repeat id and name on every fragment and send `"tool_calls": null`."""
    _, completion, _ = assemble(recorded("vllm_repeated_id"))
    (call,) = completion.tool_calls
    assert (call.id, call.function.name, call.function.arguments) == (
        "chatcmpl-tool-a1",
        "search",
        '{"q": "tea"}',
    )


def test_openrouter_keepalives_and_late_usage() -> None:
    deltas, completion, done = assemble(recorded("openrouter_keepalive_text"))
    assert done and deltas == ["Hi", " there"]
    assert completion.finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens == 11


ALL_RECORDED = sorted(p.stem for p in FIXTURES.glob("*.sse"))


@given(
    st.sampled_from(ALL_RECORDED),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
    st.lists(st.integers(min_value=0, max_value=2000), max_size=15),
)
def test_recorded_streams_survive_any_framing(name: str, newline: bytes, cuts: list[int]) -> None:
    raw = recorded(name)
    expected = [e.data for e in parse(raw)]
    reframed = raw.replace(b"\n", newline)
    points = sorted({min(c, len(reframed)) for c in cuts})
    pieces = [reframed[a:b] for a, b in zip([0, *points], [*points, len(reframed)], strict=True)]
    assert [e.data for e in parse(*pieces)] == expected


def _frag(raw: Mapping[str, object]) -> ToolCallDelta:
    return msgspec.convert(raw, ToolCallDelta)


def test_index_reused_for_a_new_id_starts_a_new_call() -> None:
    assembler = ToolCallAssembler()
    for raw in (
        {"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}},
        {"index": 0, "id": "b", "function": {"name": "g", "arguments": "{"}},
        {"index": 0, "function": {"arguments": "}"}},
    ):
        assembler.add(_frag(raw))
    assert [(c.id, c.function.name, c.function.arguments) for c in assembler.result()] == [
        ("a", "f", "{}"),
        ("b", "g", "{}"),
    ]


def test_interleaved_fragments_by_index() -> None:
    assembler = ToolCallAssembler()
    assembler.add(_frag({"index": 0, "id": "a", "function": {"name": "f"}}))
    assembler.add(_frag({"index": 1, "id": "b", "function": {"name": "g"}}))
    for index, piece in [(1, '{"y"'), (0, '{"x"'), (0, ":1}"), (1, ":2}")]:
        assembler.add(_frag({"index": index, "function": {"arguments": piece}}))
    assert [(c.id, c.function.name, c.function.arguments) for c in assembler.result()] == [
        ("a", "f", '{"x":1}'),
        ("b", "g", '{"y":2}'),
    ]


def test_indexless_new_id_is_a_new_call_and_repeated_id_continues() -> None:
    assembler = ToolCallAssembler()
    for raw in (
        {"id": "x", "function": {"name": "f", "arguments": '{"a":'}},
        {"id": "x", "function": {"name": "f", "arguments": "1}"}},
        {"id": "y", "function": {"name": "f", "arguments": "{}"}},
    ):
        assembler.add(_frag(raw))
    assert [(c.id, c.function.arguments) for c in assembler.result()] == [
        ("x", '{"a":1}'),
        ("y", "{}"),
    ]


def test_metadata_only_fragment_without_a_call_is_dropped() -> None:
    assembler = ToolCallAssembler()
    assembler.add(_frag({"extra_content": {"google": {"thought_signature": "s"}}}))
    assert assembler.result() == []


def test_text_only_stream_and_other_choices_ignored() -> None:
    raw = sse(
        {"choices": [{"index": 0, "delta": {"content": "Hel"}}]},
        {"choices": [{"index": 1, "delta": {"content": "IGNORED"}}]},
        {"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]},
        "[DONE]",
    )
    deltas, completion, _ = assemble(raw)
    assert deltas == ["Hel", "lo"]
    assert completion == Completion(text="Hello", tool_calls=[], finish_reason="stop")


def test_assembler_reports_finished() -> None:
    assembler = StreamAssembler()
    assembler.add(decode_chunk(b'{"choices": [{"delta": {"content": "x"}}]}'))
    assert not assembler.finished and assembler.text_length == 1
    assembler.add(decode_chunk(b'{"choices": [{"delta": {}, "finish_reason": "length"}]}'))
    assert assembler.finished and assembler.result().finish_reason == "length"
