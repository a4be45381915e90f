"""Provider against the loopback fake (real httpx, real sockets) and a few mock transports."""

from __future__ import annotations

import email.utils
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator

import anyio
import httpx
import pytest

from gantry.model.assemble import Completion
from gantry.model.client import Done, Provider, StreamEvent, TextDelta
from gantry.model.errors import ProviderError
from gantry.model.messages import (
    FunctionDef,
    Message,
    SystemMessage,
    ToolDef,
    ToolMessage,
    UserMessage,
    encode,
)
from gantry.model.retry import RetryPolicy
from tests.fakes.openai import (
    BadGzip,
    Call,
    CutJSON,
    CutStream,
    Echo,
    FakeOpenAI,
    HTTPError,
    Malformed,
    RawSSE,
    Reply,
    ToolCalls,
    rate_limited,
)
from tests.test_sse import recorded

pytestmark = pytest.mark.anyio

KEY = "sk-test-SUPERSECRET-0123456789"


class FakeTime:
    """Injected clock + sleep: retries are instant and every delay is recorded."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    async with FakeOpenAI(api_key=KEY) as server:
        yield server


@pytest.fixture
async def make_provider(
    fake_time: FakeTime,
) -> AsyncIterator[Callable[..., Provider]]:
    made: list[Provider] = []

    def make(base_url: str, **kwargs: object) -> Provider:
        kwargs.setdefault("sleep", fake_time.sleep)
        kwargs.setdefault("clock", fake_time.clock)
        provider = Provider(base_url, str(kwargs.pop("api_key", KEY)), "fake-model", **kwargs)  # type: ignore[arg-type]
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


HELLO: list[Message] = [SystemMessage("You are terse."), UserMessage("hello")]


async def collect(events: AsyncIterator[StreamEvent]) -> tuple[list[str], Completion]:
    texts: list[str] = []
    done: list[Completion] = []
    async for event in events:
        if isinstance(event, TextDelta):
            assert not done, "TextDelta after Done"
            texts.append(event.text)
        else:
            assert isinstance(event, Done)
            done.append(event.completion)
    assert len(done) == 1, "exactly one Done"
    return texts, done[0]


# ----------------------------------------------------------------------------- happy paths


async def test_complete_sends_exact_prompt(fake: FakeOpenAI, make_provider) -> None:
    provider = make_provider(fake.base_url)
    tool = ToolDef(FunctionDef("time__now", "Now.", {"type": "object", "properties": {}}))
    history: list[Message] = [*HELLO, ToolMessage(tool_call_id="c1", content="12:00")]
    completion = await provider.complete(history, [tool], max_tokens=50)
    assert completion.text == "echo: hello"
    assert completion.finish_reason == "stop"
    request = fake.last_request
    assert request.path == "/v1/chat/completions"
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    assert request.body == {
        "model": "fake-model",
        "messages": json.loads(encode(history)),
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "time__now",
                    "description": "Now.",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
        ],
        "max_tokens": 50,
    }


def test_the_connection_pool_is_made_at_the_first_call_not_at_boot() -> None:
    """Making httpx's pool imports httpcore; a Telegram start should not pay it before it
    polls. A provider that never calls closes cleanly."""
    import subprocess
    import sys

    code = ("import sys, anyio\n"
            "from gantry.model.client import Provider\n"
            "p = Provider('https://llm.invalid/v1', 'k', 'm')\n"
            "print('httpcore' in sys.modules, p._http is None)\n"
            "anyio.run(p.aclose)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out == ["False", "True"]


async def test_one_pool_serves_every_call(fake: FakeOpenAI, make_provider) -> None:
    provider = make_provider(fake.base_url)
    assert provider._http is None
    await provider.complete(HELLO, [])
    pool = provider._http
    assert pool is not None
    texts, _done = await collect(provider.stream(HELLO, []))
    assert "".join(texts) == "echo: hello" and provider._http is pool
    await provider.aclose()
    assert pool.is_closed


async def test_empty_tools_are_not_sent(fake: FakeOpenAI, make_provider) -> None:
    await make_provider(fake.base_url).complete(HELLO, [])
    assert "tools" not in fake.last_request.body


async def test_stream_yields_deltas_then_done(fake: FakeOpenAI, make_provider) -> None:
    fake.push(Reply("Hello, world!", chunk_size=3))
    texts, completion = await collect(make_provider(fake.base_url).stream(HELLO))
    assert texts == ["Hel", "lo,", " wo", "rld", "!"]
    assert completion.text == "Hello, world!"
    assert completion.usage is not None and completion.usage.total_tokens
    body = fake.last_request.body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


async def test_stream_tool_calls_interleaved(fake: FakeOpenAI, make_provider) -> None:
    calls = [Call("a__x", {"q": "alpha beta"}, id="call_1"), Call("b__y", '{"n": 12345}', "c2")]
    fake.push(ToolCalls(calls, text="thinking", pieces=4, interleave=True))
    texts, completion = await collect(make_provider(fake.base_url).stream(HELLO))
    assert texts == ["thinking"]
    assert [
        (c.id, c.function.name, json.loads(c.function.arguments)) for c in completion.tool_calls
    ] == [
        ("call_1", "a__x", {"q": "alpha beta"}),
        ("c2", "b__y", {"n": 12345}),
    ]
    assert completion.finish_reason == "tool_calls"


async def test_complete_tool_calls(fake: FakeOpenAI, make_provider) -> None:
    fake.push(ToolCalls([Call("a", {"k": 1}, id="x"), Call("b")]))
    completion = await make_provider(fake.base_url).complete(HELLO)
    assert (completion.tool_calls[0].id, completion.tool_calls[0].function.name) == ("x", "a")
    assert completion.tool_calls[1].function.arguments == "{}"
    assert completion.text == ""


async def test_gemini_recorded_stream_over_the_wire(fake: FakeOpenAI, make_provider) -> None:
    fake.push(RawSSE(recorded("gemini_whole_calls"), pieces=[1, 7, 50, 3]))
    _, completion = await collect(make_provider(fake.base_url).stream(HELLO))
    assert completion.tool_calls[0].extra_content == {
        "google": {"thought_signature": "CiQBcsjafE=="}
    }
    assert completion.finish_reason == "tool_calls"


async def test_stream_request_answered_with_plain_json(fake: FakeOpenAI, make_provider) -> None:
    body = json.dumps({"choices": [{"message": {"content": "whole"}, "finish_reason": "stop"}]})
    fake.push(RawSSE(body.encode(), content_type="application/json"))
    texts, completion = await collect(make_provider(fake.base_url).stream(HELLO))
    assert texts == ["whole"] and completion.text == "whole"


async def test_no_api_key_means_no_authorization_header(make_provider) -> None:
    async with FakeOpenAI() as open_fake:
        await make_provider(open_fake.base_url, api_key="").complete(HELLO)
        assert "Authorization" not in open_fake.last_request.headers


def test_bad_base_url_fails_fast() -> None:
    with pytest.raises(ValueError, match="LLM_BASE_URL"):
        Provider("localhost:11434/v1", KEY, "m")


# ----------------------------------------------------------------------------- retries


async def test_honours_retry_after_seconds(fake: FakeOpenAI, make_provider, fake_time) -> None:
    fake.push(rate_limited("3"), Reply("ok"))
    completion = await make_provider(fake.base_url).complete(HELLO)
    assert completion.text == "ok"
    assert fake_time.sleeps == [3.0]
    assert len(fake.requests) == 2


async def test_honours_retry_after_http_date(fake: FakeOpenAI, make_provider, fake_time) -> None:
    fake.push(rate_limited(email.utils.formatdate(time.time() + 20, usegmt=True)), Reply("ok"))
    assert (await make_provider(fake.base_url).complete(HELLO)).text == "ok"
    (delay,) = fake_time.sleeps
    assert 17.0 <= delay <= 20.0


async def test_retry_after_beyond_deadline_gives_up_now(
    fake: FakeOpenAI, make_provider, fake_time
) -> None:
    fake.push(rate_limited("120", message="slow down"))
    provider = make_provider(fake.base_url, retry=RetryPolicy(deadline=60))
    with pytest.raises(ProviderError) as caught:
        await provider.complete(HELLO)
    assert caught.value.status == 429
    assert "slow down" in str(caught.value) and "deadline" in str(caught.value)
    assert fake_time.sleeps == [] and len(fake.requests) == 1


async def test_retry_after_ms_header(make_provider, fake_time) -> None:
    replies = iter(
        [
            httpx.Response(429, headers={"retry-after-ms": "250", "retry-after": "9"}),
            httpx.Response(200, json={"choices": [{"message": {"content": "ok"}}]}),
        ]
    )
    transport = httpx.MockTransport(lambda request: next(replies))
    provider = make_provider("http://llm.invalid/v1", transport=transport)
    assert (await provider.complete(HELLO)).text == "ok"
    assert fake_time.sleeps == [0.25]


async def test_retries_500_then_succeeds(fake: FakeOpenAI, make_provider, fake_time) -> None:
    fake.push(HTTPError(500, "upstream exploded"), Reply("ok"))
    assert (await make_provider(fake.base_url).complete(HELLO)).text == "ok"
    (delay,) = fake_time.sleeps
    assert 0.5 <= delay <= 0.625  # base_delay plus up to 25% jitter


async def test_backoff_grows_and_attempts_are_bounded(
    fake: FakeOpenAI, make_provider, fake_time
) -> None:
    fake.default = HTTPError(503, "overloaded")
    with pytest.raises(ProviderError) as caught:
        await make_provider(fake.base_url).complete(HELLO)
    assert caught.value.status == 503 and "overloaded" in caught.value.message
    assert len(fake.requests) == 4
    bases = [0.5, 1.0, 2.0]
    assert len(fake_time.sleeps) == 3
    for delay, base in zip(fake_time.sleeps, bases, strict=True):
        assert base <= delay <= base * 1.25


async def test_gives_up_within_the_deadline(fake: FakeOpenAI, make_provider, fake_time) -> None:
    fake.default = HTTPError(502, "bad gateway")
    policy = RetryPolicy(max_attempts=100, base_delay=1.0, max_delay=8.0, deadline=20.0)
    with pytest.raises(ProviderError, match="deadline"):
        await make_provider(fake.base_url, retry=policy).complete(HELLO)
    assert sum(fake_time.sleeps) <= 20.0
    assert all(delay <= 8.0 * 1.25 for delay in fake_time.sleeps)
    assert len(fake.requests) == len(fake_time.sleeps) + 1


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_are_never_retried(
    fake: FakeOpenAI, make_provider, fake_time, status: int
) -> None:
    fake.push(HTTPError(status, "Invalid value for 'messages[1].role'"))
    with pytest.raises(ProviderError) as caught:
        await make_provider(fake.base_url).complete(HELLO)
    assert caught.value.status == status
    assert caught.value.message == "Invalid value for 'messages[1].role'"
    assert fake_time.sleeps == [] and len(fake.requests) == 1


async def test_error_messages_say_what_to_do(fake: FakeOpenAI, make_provider) -> None:
    fake.push(HTTPError(404, "The model `gpt-9` does not exist"))
    with pytest.raises(ProviderError) as caught:
        await make_provider(fake.base_url).complete(HELLO)
    assert "HTTP 404" in str(caught.value) and "LLM_MODEL" in str(caught.value)
    with pytest.raises(ProviderError, match="LLM_API_KEY"):
        await make_provider(fake.base_url, api_key="sk-wrong").complete(HELLO)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            '[{"error": {"code": 400, "message": "API key not valid", "status": "INVALID"}}]',
            "API key not valid",
        ),
        (
            '{"error": "model \\"llama9\\" not found, try pulling it first"}',
            'model "llama9" not found, try pulling it first',
        ),
        (
            '{"object": "error", "message": "max_tokens is too large", "code": 400}',
            "max_tokens is too large",
        ),
        ("<html>Bad Request</html>", "<html>Bad Request</html>"),
    ],
)
async def test_error_shapes_of_other_providers(
    fake: FakeOpenAI, make_provider, raw: str, expected: str
) -> None:
    fake.push(HTTPError(400, raw_body=raw))
    with pytest.raises(ProviderError) as caught:
        await make_provider(fake.base_url).complete(HELLO)
    assert caught.value.message == expected


async def test_long_raw_error_is_truncated(fake: FakeOpenAI, make_provider) -> None:
    fake.push(HTTPError(400, raw_body="x" * 5000))
    with pytest.raises(ProviderError) as caught:
        await make_provider(fake.base_url).complete(HELLO)
    assert len(caught.value.message) <= 500


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_connect_error_is_retried_then_reported(make_provider, fake_time) -> None:
    provider = make_provider(f"http://127.0.0.1:{_unused_port()}/v1")
    with pytest.raises(ProviderError) as caught:
        await provider.complete(HELLO)
    assert caught.value.status is None
    assert "ConnectError" in str(caught.value) and "LLM_BASE_URL" in str(caught.value)
    assert len(fake_time.sleeps) == 3


async def test_connect_error_then_success(make_provider, fake_time) -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={"choices": [{"message": {"content": "back"}}]})

    provider = make_provider("http://llm.invalid/v1", transport=httpx.MockTransport(handler))
    assert (await provider.complete(HELLO)).text == "back"
    assert calls == 2 and len(fake_time.sleeps) == 1


async def test_slow_first_byte_times_out_and_is_retried(fake: FakeOpenAI, make_provider) -> None:
    fake.push(Reply("late", delay=1.0), Reply("fast"))
    _, completion = await collect(make_provider(fake.base_url, timeout=0.2).stream(HELLO))
    assert completion.text == "fast"
    assert len(fake.requests) == 2


async def test_stream_retried_before_first_byte(fake: FakeOpenAI, make_provider, fake_time) -> None:
    fake.push(HTTPError(500), rate_limited("1"), Reply("ok"))
    _, completion = await collect(make_provider(fake.base_url).stream(HELLO))
    assert completion.text == "ok" and len(fake.requests) == 3
    assert fake_time.sleeps[1] == 1.0


# ----------------------------------------------------------------------------- broken streams


@pytest.mark.parametrize("abrupt", [True, False])
async def test_stream_cut_midway_is_an_error_not_a_short_reply(
    fake: FakeOpenAI, make_provider, fake_time, abrupt: bool
) -> None:
    fake.push(CutStream("Hello there, this is long", after_chunks=2, abrupt=abrupt))
    seen: list[str] = []
    with pytest.raises(ProviderError, match="stream cut"):
        async for event in make_provider(fake.base_url).stream(HELLO):
            assert isinstance(event, TextDelta), "no Done for a cut stream"
            seen.append(event.text)
    assert "".join(seen) == "Hello th"
    assert len(fake.requests) == 1 and fake_time.sleeps == []  # no retry after the first byte


async def test_non_streamed_truncated_body_is_retried(fake: FakeOpenAI, make_provider) -> None:
    fake.push(CutStream("a whole reply"))
    assert (await make_provider(fake.base_url).complete(HELLO)).text == "echo: hello"
    assert len(fake.requests) == 2


async def test_finish_reason_without_done_is_complete(fake: FakeOpenAI, make_provider) -> None:
    raw = b'data: {"choices": [{"delta": {"content": "hi"}, "finish_reason": "stop"}]}\n\n'
    fake.push(RawSSE(raw))
    _, completion = await collect(make_provider(fake.base_url).stream(HELLO))
    assert completion.text == "hi"


async def test_malformed_chunk_is_an_error(fake: FakeOpenAI, make_provider) -> None:
    fake.push(Malformed(after_chunks=1))
    with pytest.raises(ProviderError, match="malformed stream chunk"):
        await collect(make_provider(fake.base_url).stream(HELLO))


async def test_malformed_body_is_an_error(fake: FakeOpenAI, make_provider, fake_time) -> None:
    fake.push(Malformed())
    with pytest.raises(ProviderError, match="malformed JSON"):
        await make_provider(fake.base_url).complete(HELLO)
    assert len(fake.requests) == 1


async def test_error_inside_stream(fake: FakeOpenAI, make_provider) -> None:
    raw = b'data: {"error": {"message": "quota exceeded mid-stream", "code": 429}}\n\n'
    fake.push(RawSSE(raw))
    with pytest.raises(ProviderError, match="quota exceeded mid-stream"):
        await collect(make_provider(fake.base_url).stream(HELLO))


async def test_error_with_200_status(fake: FakeOpenAI, make_provider) -> None:
    fake.push(RawSSE(b'{"error": {"message": "safety block"}}', content_type="application/json"))
    with pytest.raises(ProviderError, match="safety block"):
        await make_provider(fake.base_url).complete(HELLO)


# ----------------------------------------------------------------------------- secrets


async def test_api_key_never_in_errors_or_logs(
    fake: FakeOpenAI, make_provider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    echoed = f"Incorrect API key provided: {KEY}"
    fake.push(HTTPError(500, echoed), HTTPError(500, echoed), HTTPError(401, echoed))
    with pytest.raises(ProviderError) as caught:
        await make_provider(fake.base_url).complete(HELLO)
    err = caught.value
    assert err.status == 401
    for text in (str(err), repr(err), err.message, *map(str, err.args)):
        assert KEY not in text
    assert "[redacted]" in str(err)
    chained: BaseException | None = err
    while chained is not None:
        assert KEY not in str(chained)
        chained = chained.__cause__ or chained.__context__
    retries = [r for r in caplog.records if r.name == "gantry.provider"]
    assert len(retries) == 2
    assert {r.attempt for r in retries} == {1, 2}  # type: ignore[attr-defined]
    assert all(r.status == 500 and r.delay > 0 for r in retries)  # type: ignore[attr-defined]
    for record in caplog.records:
        assert KEY not in record.getMessage()
        assert KEY not in repr(record.__dict__)
    assert KEY not in caplog.text


# ----------------------------------------------------------------------------- every HTTP error


@pytest.mark.parametrize("script", [CutJSON(), BadGzip()], ids=["cut-json", "bad-gzip"])
@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_every_httpx_error_becomes_a_provider_error(
    fake: FakeOpenAI, make_provider, script: object, stream: bool
) -> None:
    """A streamed request answered with a cut JSON body (RemoteProtocolError while reading
    it) or a corrupt gzip body (DecodingError): both are ProviderErrors, never raw httpx."""
    fake.default = script  # type: ignore[assignment]
    provider = make_provider(fake.base_url, retry=RetryPolicy(max_attempts=2))
    with pytest.raises(ProviderError) as caught:
        if stream:
            await collect(provider.stream(HELLO))
        else:
            await provider.complete(HELLO)
    assert isinstance(caught.value, ProviderError)
    assert ("RemoteProtocolError" if isinstance(script, CutJSON) else "DecodingError") in str(
        caught.value) or "gave up" in str(caught.value)


# ----------------------------------------------------------------------------- deadline


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_deadline_bounds_a_single_slow_attempt(fake: FakeOpenAI, stream: bool) -> None:
    """One attempt cannot outlive the deadline (timeout 120 s, deadline 1 s)."""
    fake.push(Reply("too late", delay=10))
    async with Provider(fake.base_url, KEY, "fake-model", timeout=120,
                        retry=RetryPolicy(deadline=1.0)) as provider:
        started = time.monotonic()
        with pytest.raises(ProviderError, match="deadline") as caught:
            if stream:
                await collect(provider.stream(HELLO))
            else:
                await provider.complete(HELLO)
        elapsed = time.monotonic() - started
    assert elapsed < 3.0, elapsed
    assert caught.value.retryable and len(fake.requests) == 1


async def test_deadline_bounds_retries_and_their_attempts(fake: FakeOpenAI) -> None:
    """A quick failure, a wait, then a slow attempt: the whole call still ends on time."""
    fake.push(HTTPError(500), Reply("too late", delay=10))
    async with Provider(fake.base_url, KEY, "fake-model",
                        retry=RetryPolicy(base_delay=0.2, deadline=1.5)) as provider:
        started = time.monotonic()
        with pytest.raises(ProviderError, match="deadline"):
            await provider.complete(HELLO)
        assert time.monotonic() - started < 3.0
    assert len(fake.requests) == 2


# ----------------------------------------------------------------------------- URL credentials


def test_credentials_in_base_url_are_refused_and_never_shown() -> None:
    """A URL login would go as Basic auth in the header the Bearer key needs: refused."""
    for url in ("http://gantry:pr0xy-Pa55word@127.0.0.1:9/v1",
                "ftp://gantry:pr0xy-Pa55word@host/v1"):
        with pytest.raises(ValueError) as refused:
            Provider(url, "sk-x-123456", "fake-model")
        assert "pr0xy-Pa55word" not in str(refused.value)
        assert "gantry:" not in str(refused.value)
    with pytest.raises(ValueError, match="HTTPS_PROXY"):
        Provider("https://u:p4ss-word@h/v1", "k", "m")


# ----------------------------------------------------------------------------- the fake itself


async def test_hang_can_be_cancelled(make_provider) -> None:
    async with FakeOpenAI(default=Echo(delay=30)) as hanging:
        started = time.monotonic()
        with anyio.move_on_after(0.3):
            await make_provider(hanging.base_url).complete(HELLO)
        assert time.monotonic() - started < 2
    assert time.monotonic() - started < 5  # closing the fake does not wait for the hang


@pytest.fixture
def threaded_fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start_in_thread()
    yield server
    server.stop()


def test_fake_runs_in_a_thread_for_subprocess_tests(threaded_fake: FakeOpenAI) -> None:
    threaded_fake.push(Reply("scripted"))
    url = threaded_fake.base_url + "/chat/completions"
    body = {"model": "m", "messages": [{"role": "user", "content": "ping"}]}
    first = httpx.post(url, json=body).json()
    second = httpx.post(url, json=body).json()
    assert first["choices"][0]["message"]["content"] == "scripted"
    assert second["choices"][0]["message"]["content"] == "echo: ping"
    assert threaded_fake.pending == 0 and len(threaded_fake.requests) == 2


async def test_stream_abandoned_midway_closes_cleanly(fake: FakeOpenAI, make_provider) -> None:
    fake.push(Reply("a long reply in many chunks", chunk_size=2))
    stream = make_provider(fake.base_url).stream(HELLO)
    first = await anext(stream)
    assert first == TextDelta("a ")
    await stream.aclose()
    assert (await make_provider(fake.base_url).complete(HELLO)).text == "echo: hello"


def test_retry_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
