"""Wire types: what we send is minimal and valid, what we accept is lenient."""

from __future__ import annotations

import json

import msgspec
import pytest

from gantry.model.assemble import Completion, StreamAssembler, completion_from_response
from gantry.model.messages import (
    AssistantMessage,
    FunctionCall,
    FunctionDef,
    SystemMessage,
    ToolCall,
    ToolDef,
    ToolMessage,
    UserMessage,
    decode_messages,
    encode,
)
from gantry.model.wire import (
    ChatRequest,
    StreamOptions,
    decode_chunk,
    decode_response,
    encode_request,
)


def _json(obj: object) -> object:
    return json.loads(encode(obj))


def test_request_omits_none_fields() -> None:
    body = json.loads(encode_request(ChatRequest(model="m", messages=[UserMessage("hi")])))
    assert body == {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_request_with_everything() -> None:
    tool = ToolDef(FunctionDef("time__now", "Current time", {"type": "object", "properties": {}}))
    request = ChatRequest(
        model="m",
        messages=[SystemMessage("persona"), UserMessage("what time is it?")],
        tools=[tool],
        tool_choice="auto",
        stream=True,
        stream_options=StreamOptions(),
        max_tokens=100,
        temperature=0.2,
    )
    body = json.loads(encode_request(request))
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "time__now",
                "description": "Current time",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    assert body["stream_options"] == {"include_usage": True}
    assert body["tool_choice"] == "auto"
    assert body["max_tokens"] == 100 and body["temperature"] == 0.2


def test_tool_def_without_description_still_has_type() -> None:
    assert _json(ToolDef(FunctionDef("x"))) == {"type": "function", "function": {"name": "x"}}


def test_assistant_tool_call_message_shape() -> None:
    call = ToolCall(
        id="call_1",
        function=FunctionCall("time__now", '{"tz":"UTC"}'),
        extra_content={"google": {"thought_signature": "sig"}},
    )
    assert _json(AssistantMessage(tool_calls=[call])) == {
        "role": "assistant",
        "tool_calls": [
            {
                "type": "function",
                "id": "call_1",
                "function": {"name": "time__now", "arguments": '{"tz":"UTC"}'},
                "extra_content": {"google": {"thought_signature": "sig"}},
            }
        ],
    }
    plain = ToolCall(id="c", function=FunctionCall("f", "{}"))
    assert "extra_content" not in _json(plain)  # type: ignore[operator]


def test_tool_message_shape() -> None:
    assert _json(ToolMessage(tool_call_id="call_1", content="12:00")) == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "12:00",
    }


def test_messages_round_trip_by_role() -> None:
    history = [
        SystemMessage("persona"),
        UserMessage("hi"),
        AssistantMessage(tool_calls=[ToolCall(id="c1", function=FunctionCall("f", "{}"))]),
        ToolMessage(tool_call_id="c1", content="result"),
        AssistantMessage(content="done"),
    ]
    assert decode_messages(encode(history)) == history


def test_unknown_role_is_rejected_on_decode() -> None:
    with pytest.raises(msgspec.ValidationError):
        decode_messages(b'[{"role": "wizard", "content": "x"}]')


def test_response_tolerates_nulls_and_unknown_fields() -> None:
    raw = b"""{"id": "x", "object": "chat.completion", "created": 1, "model": "grok-4",
      "system_fingerprint": null, "x_groq": {"id": "q"},
      "choices": [{"index": 0, "logprobs": null, "finish_reason": "stop",
        "message": {"role": "assistant", "content": null, "tool_calls": null,
                    "reasoning_content": "hmm", "refusal": null}}],
      "usage": {"prompt_tokens": 5, "completion_tokens": null, "total_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": 0}}}"""
    completion = completion_from_response(decode_response(raw))
    assert completion.text == ""
    assert completion.tool_calls == []
    assert completion.finish_reason == "stop"
    assert completion.usage is not None and completion.usage.prompt_tokens == 5


def test_response_tool_calls_are_normalised() -> None:
    raw = json.dumps(
        {
            "choices": [
                {
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {
                                "id": "call_a",
                                "type": "function",
                                "function": {"name": "a", "arguments": '{"q": 1}'},
                            },
                            {"function": {"name": "b", "arguments": {"k": "v"}}},
                            {"id": "call_c", "function": {"name": "c", "arguments": ""}},
                        ],
                    },
                }
            ]
        }
    )
    completion = completion_from_response(decode_response(raw))
    a, b, c = completion.tool_calls
    assert (a.id, a.function.name, a.function.arguments) == ("call_a", "a", '{"q": 1}')
    assert b.id.startswith("call_") and json.loads(b.function.arguments) == {"k": "v"}
    assert c.function.arguments == "{}"
    assert completion.text == ""


def test_gemini_non_streamed_tool_call_keeps_signature_and_fixes_finish_reason() -> None:
    raw = json.dumps(
        {
            "choices": [
                {
                    "finish_reason": "stop",
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "extra_content": {"google": {"thought_signature": "c2ln"}},
                                "function": {"arguments": '{"city":"Oslo"}', "name": "wx"},
                                "id": "function-call-123",
                                "type": "function",
                            }
                        ],
                    },
                }
            ],
            "model": "gemini-2.5-flash",
            "object": "chat.completion",
        }
    )
    completion = completion_from_response(decode_response(raw))
    assert completion.finish_reason == "tool_calls"
    assert completion.tool_calls[0].extra_content == {"google": {"thought_signature": "c2ln"}}
    replay = _json(completion.to_message())
    assert replay["tool_calls"][0]["extra_content"]["google"]["thought_signature"] == "c2ln"  # type: ignore[index]


def test_content_parts_are_joined() -> None:
    raw = b'{"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"text": "b"}]}}]}'
    assert completion_from_response(decode_response(raw)).text == "ab"


def test_no_choices_is_an_error() -> None:
    with pytest.raises(ValueError, match="no choices"):
        completion_from_response(decode_response(b'{"choices": []}'))


def test_error_bodies_decode() -> None:
    assert decode_response(b'{"error": "model \\"x\\" not found"}').error == 'model "x" not found'
    error = decode_response(b'{"error": {"message": "bad", "code": 400}}').error
    assert error is not None and not isinstance(error, str) and error.code == 400


def test_chunk_tolerates_missing_and_null_fields() -> None:
    chunk = decode_chunk(b'{"choices": [{"delta": null, "finish_reason": null}], "foo": 1}')
    assert chunk.choices is not None and chunk.choices[0].delta is None
    chunk = decode_chunk(b'{"choices": null, "usage": {"prompt_tokens": 3}}')
    assert chunk.choices is None and chunk.usage is not None
    chunk = decode_chunk(
        b'{"choices": [{"delta": {"tool_calls": [{"function": {"arguments": "{"}}]}}]}'
    )
    assert chunk.choices is not None and chunk.choices[0].delta is not None
    frag = (chunk.choices[0].delta.tool_calls or [])[0]
    assert frag.index is None and frag.id is None and frag.type is None


def test_malformed_chunk_raises_decode_error() -> None:
    with pytest.raises(msgspec.DecodeError):
        decode_chunk(b'{"choices": [{"delta": {"cont')


def test_completion_to_message_drops_empty_parts() -> None:
    assert _json(Completion(text="hi").to_message()) == {"role": "assistant", "content": "hi"}


def test_reasoning_fields_are_kept_apart_from_the_reply() -> None:
    """DeepSeek/vLLM `reasoning_content` and Ollama/LM Studio `reasoning`: never the text,
    never replayed."""
    streamed = StreamAssembler()
    for delta in ({"reasoning_content": "let me "}, {"reasoning": "think"},
                  {"content": "It is 10:00."}):
        streamed.add(decode_chunk(json.dumps({"choices": [{"index": 0, "delta": delta}]})))
    streamed.add(decode_chunk('{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}'))
    done = streamed.result()
    assert (done.text, done.reasoning) == ("It is 10:00.", "let me think")
    whole = completion_from_response(decode_response(json.dumps({"choices": [{"message": {
        "role": "assistant", "content": "It is 10:00.", "reasoning_content": "hmm"}}]})))
    assert (whole.text, whole.reasoning) == ("It is 10:00.", "hmm")
    assert b"hmm" not in encode(whole.to_message())
