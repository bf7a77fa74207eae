"""The shared HTTP plumbing: stream framing, retries, errors, secrets."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import socket
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adk_mesh.contexts import serving_deadline
from adk_mesh.errors import ConfigError, ModelError
from adk_mesh.models import AnthropicModel, GeminiModel, LlmRequest, OpenAIModel, RetryPolicy
from adk_mesh.models._http import (
    HttpLlm,
    LineDecoder,
    Secret,
    StreamRecord,
    error_message_from_body,
    ndjson_records,
    redact,
    sse_records,
)
from adk_mesh.testing.fake_providers import (
    Disconnect,
    ErrorReply,
    FakeAnthropic,
    FakeGemini,
    FakeOllama,
    FakeOpenAI,
    RawReply,
    ScriptedTurn,
)
from adk_mesh.testing.fake_responses import FakeOpenAIResponses
from adk_mesh.types import Content

# --------------------------------------------------------------------------- line decoding


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, start = [], 0
    for point in points:
        pieces.append(data[start:point])
        start = point
    pieces.append(data[start:])
    return pieces


def decode_lines(pieces: list[bytes]) -> list[str]:
    decoder = LineDecoder()
    lines = [line for piece in pieces for line in decoder.feed(piece)]
    return lines + decoder.flush()


LINE_TEXT = st.text(
    alphabet=st.sampled_from(["a", "é", "日", "🎉", "\u2028", "\x85", " ", ":", "{", '"']),
    max_size=12,
)
ENDINGS = st.sampled_from(["\n", "\r\n", "\r"])


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.tuples(LINE_TEXT, ENDINGS), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_line_decoder_is_independent_of_where_chunks_are_cut(
    lines: list[tuple[str, str]], cuts: list[int]
) -> None:
    data = "".join(text + ending for text, ending in lines).encode()

    assert decode_lines(split_at(data, cuts)) == decode_lines([data])
    ambiguous = any(  # "\r" then an empty line ended by "\n" is one CRLF, not two line ends
        ending == "\r" and not following[0] and following[1].startswith("\n")
        for (_, ending), following in itertools.pairwise(lines)
    )
    if not ambiguous:
        assert decode_lines([data]) == [text for text, _ in lines]


def test_line_decoder_keeps_unicode_line_separators_inside_a_line() -> None:
    assert decode_lines(['{"t":"a\u2028b\x85c"}\n'.encode()]) == ['{"t":"a\u2028b\x85c"}']


def test_line_decoder_returns_an_unterminated_last_line_on_flush() -> None:
    assert decode_lines([b"one\ntw", b"o"]) == ["one", "two"]


def test_line_decoder_treats_a_cr_split_from_its_lf_as_one_line_end() -> None:
    assert decode_lines([b"a\r", b"\nb\r", b"", b"\n", b"c\r"]) == ["a", "b", "c"]


def test_invalid_utf8_raises_model_error() -> None:
    with pytest.raises(ModelError, match="UTF-8"):
        LineDecoder().feed(b"ok\xff\xfe\n")


def test_stream_ending_inside_a_character_raises_model_error() -> None:
    decoder = LineDecoder()
    decoder.feed("é".encode()[:1])
    with pytest.raises(ModelError, match="UTF-8"):
        decoder.flush()


# --------------------------------------------------------------------------- SSE and NDJSON framing


class ByteChunks(httpx.AsyncByteStream):
    """A response body that arrives in exactly these pieces."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self._pieces:
            yield piece


async def records(
    pieces: list[bytes],
    *,
    framing: Callable[[httpx.Response], AsyncIterator[StreamRecord]] = sse_records,
    content_type: str = "text/event-stream",
) -> list[tuple[str, str]]:
    response = httpx.Response(
        200, headers={"content-type": content_type}, stream=ByteChunks(pieces)
    )
    try:
        return [(record.event, record.data) async for record in framing(response)]
    finally:
        await response.aclose()


async def test_sse_fields_comments_names_and_multiline_data() -> None:
    stream = (
        b": keep-alive comment\n"
        b"retry: 3000\n"
        b"id: 7\n"
        b"event: content_block_delta\n"
        b"data: first line\n"
        b"data:second line\n"
        b"data\n"
        b"\n"
        b"data: plain\r\n\r\n"
        b"event: ping\n\n"  # an event without data is not dispatched
        b"retry: 10\n\n"
        b"data: tail without blank line"
    )

    assert await records([stream]) == [
        ("content_block_delta", "first line\nsecond line\n"),
        ("message", "plain"),
    ]


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=300), max_size=20))
def test_sse_events_are_independent_of_where_chunks_are_cut(cuts: list[int]) -> None:
    stream = (
        'event: a\r\ndata: {"t": "héllo 🎉"}\r\n\r\n'
        ": comment\n"
        "data: x\ndata: y\n\n"
        "event: b\rdata: 日本\r\r"
    ).encode()

    assert asyncio.run(records(split_at(stream, cuts))) == [
        ("a", '{"t": "héllo 🎉"}'),
        ("message", "x\ny"),
        ("b", "日本"),
    ]


#: Every character ``str.splitlines`` ends a line at, besides CR and LF; JSON leaves them
#: unescaped, so they reach us raw inside a string.
SPLITLINES_ONLY = "\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@pytest.mark.parametrize("write_size", [None, 1], ids=["whole", "every-byte"])
async def test_sse_lines_end_only_at_cr_and_lf_never_inside_a_json_string(
    write_size: int | None,
) -> None:
    text = f"line\u2028separator, next\x85line, all: {SPLITLINES_ONLY}."
    payload = json.dumps({"text": text}, ensure_ascii=False)
    body = f"data: {payload}\r\n\r\ndata: {payload}\n\n".encode()
    pieces = [body] if write_size is None else split_at(body, list(range(len(body))))
    assert len(payload.splitlines()) > 1  # what a splitlines()-based decoder would do

    decoded = await records(pieces)

    assert [json.loads(data)["text"] for _, data in decoded] == [text, text]


async def test_a_stream_answered_with_another_content_type_is_a_model_error(
    retry: RetryPolicy, sleeps: list[float]
) -> None:
    not_a_stream = {"id": "chatcmpl-1", "object": "chat.completion", "choices": []}
    async with FakeOpenAI(RawReply(body=json.dumps(not_a_stream).encode())) as server:
        async with server.make_model(retry=retry) as model:
            request = LlmRequest(contents=[Content.from_text("user", "hi")])
            with pytest.raises(ModelError, match=r"text/event-stream.*application/json"):
                async for _ in model.generate_content(request, stream=True):
                    pass

    assert len(server.requests) == 1 and sleeps == []


@pytest.mark.parametrize("write_size", [None, 1, 3], ids=["whole", "every-byte", "3-bytes"])
async def test_unicode_line_separators_survive_every_provider_stream(
    write_size: int | None,
) -> None:
    deltas = ["a\u2028b ", "c\x85d ", f"all{SPLITLINES_ONLY}"]
    for server_type in (FakeGemini, FakeOpenAI, FakeOpenAIResponses, FakeAnthropic, FakeOllama):
        turn = ScriptedTurn(text=deltas, write_size=write_size)
        async with server_type(turn) as server:
            async with server.make_model() as model:
                request = LlmRequest(contents=[Content.from_text("user", "hi")])
                responses = [r async for r in model.generate_content(request, stream=True)]

        assert [r.content.text for r in responses[:-1] if r.content] == deltas, server_type
        assert responses[-1].content is not None
        assert responses[-1].content.text == "".join(deltas)


async def test_ndjson_skips_blank_lines_and_flushes_the_last_line() -> None:
    pieces = [b'{"a":1}\n\n{"b"', b':2}\r\n  \n{"c":3}']

    decoded = await records(pieces, framing=ndjson_records, content_type="application/x-ndjson")

    assert [data for _, data in decoded] == ['{"a":1}', '{"b":2}', '{"c":3}']


async def test_ndjson_keeps_unicode_line_separators_inside_a_line() -> None:
    line = json.dumps({"t": f"x{SPLITLINES_ONLY}y"}, ensure_ascii=False)

    decoded = await records([f"{line}\n".encode()], framing=ndjson_records)

    assert decoded == [("message", line)]


# --------------------------------------------------------------------------- retries

NOON = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


def jitter_at(fraction: float, calls: list[tuple[float, float]]) -> Callable[[float, float], float]:
    """A ``random.uniform`` that records its bounds and returns the point ``fraction`` along."""

    def uniform(low: float, high: float) -> float:
        calls.append((low, high))
        return low + (high - low) * fraction

    return uniform


def test_backoff_is_full_jitter_under_a_doubling_bounded_cap() -> None:
    calls: list[tuple[float, float]] = []
    policy = RetryPolicy(
        max_attempts=10, initial_backoff=1.0, max_backoff=4.0, uniform=jitter_at(1.0, calls)
    )

    assert [policy.delay(retry) for retry in range(5)] == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert calls == [(0.0, 1.0), (0.0, 2.0), (0.0, 4.0), (0.0, 4.0), (0.0, 4.0)]
    low = RetryPolicy(max_attempts=10, initial_backoff=1.0, uniform=jitter_at(0.0, []))
    assert low.delay(3) == 0.0  # "full" jitter: the whole range down to zero


def test_backoff_of_a_huge_retry_number_is_the_cap_not_an_overflow() -> None:
    policy = RetryPolicy(max_attempts=10**6, max_backoff=8.0, uniform=jitter_at(1.0, []))

    assert policy.backoff(5000) == 8.0


def test_no_delay_once_the_attempts_are_used_up() -> None:
    policy = RetryPolicy(max_attempts=3, uniform=jitter_at(1.0, []))

    assert policy.delay(0) is not None and policy.delay(1) is not None
    assert policy.delay(2) is None
    assert RetryPolicy(max_attempts=1).delay(0, retry_after=0.0) is None


def test_retry_after_in_seconds_is_waited_exactly_without_jitter() -> None:
    calls: list[tuple[float, float]] = []
    policy = RetryPolicy(uniform=jitter_at(0.5, calls))

    assert policy.retry_after({"retry-after": "7"}) == 7.0
    assert policy.retry_after({"retry-after": " 1.5 "}) == 1.5
    assert policy.delay(0, policy.retry_after({"retry-after": "7"})) == 7.0
    assert policy.retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert calls == []


def test_retry_after_as_an_http_date_counts_from_the_clock() -> None:
    policy = RetryPolicy(clock=NOON.timestamp)
    future = format_datetime(NOON + timedelta(seconds=30), usegmt=True)
    past = format_datetime(NOON - timedelta(hours=1), usegmt=True)

    assert future.endswith("GMT")
    assert policy.retry_after({"retry-after": future}) == 30.0
    assert policy.retry_after({"retry-after": past}) == 0.0
    # The obsolete "-0000" zone parses to a naive datetime: still UTC, not local time.
    assert policy.retry_after({"retry-after": "Wed, 01 Jan 2025 12:00:10 -0000"}) == 10.0


@pytest.mark.parametrize(
    "value",
    [
        "soon",
        "-3",
        "nan",
        "inf",
        "",
        "Wed, 32 Foo 2025 99:00:00 GMT",
        "Fri, 31 Dec 99999 0:0:0 GMT",
    ],
)
def test_garbage_retry_after_falls_back_to_jittered_backoff(value: str) -> None:
    calls: list[tuple[float, float]] = []
    policy = RetryPolicy(initial_backoff=1.0, clock=NOON.timestamp, uniform=jitter_at(0.5, calls))

    retry_after = policy.retry_after({"retry-after": value, "retry-after-ms": value})

    assert retry_after is None
    assert policy.delay(1, retry_after) == 1.0
    assert calls == [(0.0, 2.0)]


def test_retry_after_is_capped() -> None:
    policy = RetryPolicy(max_retry_after=10.0, clock=NOON.timestamp)
    in_an_hour = format_datetime(NOON + timedelta(hours=1), usegmt=True)

    assert policy.delay(0, policy.retry_after({"retry-after": "120"})) == 10.0
    assert policy.delay(0, policy.retry_after({"retry-after": in_an_hour})) == 10.0
    assert policy.delay(0, policy.retry_after({"retry-after-ms": "99999999"})) == 10.0


def test_no_retry_when_the_wait_would_not_end_before_the_deadline() -> None:
    policy = RetryPolicy(initial_backoff=4.0, uniform=jitter_at(1.0, []))

    assert policy.delay(0, 3.0, time_left=5.0) == 3.0
    assert policy.delay(0, 3.0, time_left=3.0) is None
    assert policy.delay(0, time_left=10.0) == 4.0
    assert policy.delay(0, time_left=2.0) is None
    assert policy.delay(0, 0.0, time_left=-1.0) is None  # already past


@pytest.mark.parametrize(
    ("status", "retried"),
    [
        (408, True),
        (429, True),
        (500, True),
        (502, True),
        (503, True),
        (504, True),
        (529, True),  # Anthropic's "overloaded"
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (409, False),
        (413, False),
        (422, False),
        (501, False),
    ],
)
def test_retryable_statuses(status: int, retried: bool) -> None:
    assert RetryPolicy.retries_status(status) is retried


def test_retryable_transport_errors() -> None:
    request = httpx.Request("POST", "http://127.0.0.1/")
    assert RetryPolicy.retries_error(httpx.ConnectError("refused", request=request))
    assert RetryPolicy.retries_error(httpx.ReadTimeout("slow", request=request))
    assert RetryPolicy.retries_error(httpx.RemoteProtocolError("reset", request=request))
    assert not RetryPolicy.retries_error(httpx.UnsupportedProtocol("ftp", request=request))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"initial_backoff": -1.0},
        {"max_backoff": math.inf},
        {"max_retry_after": math.nan},
    ],
)
def test_retry_policy_rejects_nonsense(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(**kwargs)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_backoff_delays_come_from_the_policy_for_plain_and_streamed_calls(
    sleeps: list[float], stream: bool
) -> None:
    async def record(seconds: float) -> None:
        sleeps.append(seconds)

    calls: list[tuple[float, float]] = []
    policy = RetryPolicy(
        max_attempts=3, initial_backoff=0.25, sleep=record, uniform=jitter_at(0.5, calls)
    )
    async with FakeOpenAI(
        ErrorReply(503, "busy"), Disconnect(), ScriptedTurn(text="third time")
    ) as server:
        async with server.make_model(retry=policy) as model:
            request = LlmRequest(contents=[Content.from_text("user", "hi")])
            responses = [r async for r in model.generate_content(request, stream=stream)]

    assert responses[-1].content is not None and responses[-1].content.text == "third time"
    assert calls == [(0.0, 0.25), (0.0, 0.5)]
    assert sleeps == [0.125, 0.25]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_a_retry_after_past_the_served_deadline_fails_at_once(
    retry: RetryPolicy, sleeps: list[float], stream: bool
) -> None:
    async with FakeOpenAI(ErrorReply(429, "slow down", retry_after="30")) as server:
        async with server.make_model(retry=retry) as model:
            request = LlmRequest(contents=[Content.from_text("user", "hi")])
            token = serving_deadline.set(time.monotonic() + 20.0)
            try:
                with pytest.raises(ModelError) as caught:
                    async for _ in model.generate_content(request, stream=stream):
                        pass
            finally:
                serving_deadline.reset(token)

    assert caught.value.status_code == 429 and "slow down" in caught.value.message
    assert len(server.requests) == 1 and sleeps == []


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_connection_reset_before_any_byte_is_retried(
    retry: RetryPolicy, sleeps: list[float], stream: bool
) -> None:
    async with FakeOpenAI(Disconnect(), ScriptedTurn(text="recovered")) as server:
        async with server.make_model(retry=retry) as model:
            request = LlmRequest(contents=[Content.from_text("user", "hi")])
            responses = [r async for r in model.generate_content(request, stream=stream)]

    assert responses[-1].content is not None and responses[-1].content.text == "recovered"
    assert len(server.requests) == 2 and len(sleeps) == 1


async def test_stream_dropped_after_headers_before_any_body_byte_is_retried(
    retry: RetryPolicy, sleeps: list[float]
) -> None:
    async with FakeGemini(Disconnect(after_headers=True), ScriptedTurn(text="again")) as server:
        async with server.make_model(retry=retry) as model:
            request = LlmRequest(contents=[Content.from_text("user", "hi")])
            responses = [r async for r in model.generate_content(request, stream=True)]

    assert responses[-1].content is not None and responses[-1].content.text == "again"
    assert len(server.requests) == 2 and len(sleeps) == 1


async def test_connection_refused_is_retried_then_reported(
    retry: RetryPolicy, sleeps: list[float]
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with OpenAIModel("m", base_url=f"http://127.0.0.1:{port}/v1", retry=retry) as model:
        with pytest.raises(ModelError, match="ConnectError"):
            async for _ in model.generate_content(
                LlmRequest(contents=[Content.from_text("user", "hi")])
            ):
                pass

    assert len(sleeps) == 2


async def test_read_timeout_mid_stream_is_a_model_error_without_retry(
    retry: RetryPolicy, sleeps: list[float]
) -> None:
    async with FakeOpenAI(ScriptedTurn(text=["a", "b"], hold_after=2)) as server:
        timeout = httpx.Timeout(5.0, read=0.2)
        async with server.make_model(retry=retry, timeout=timeout) as model:
            request = LlmRequest(contents=[Content.from_text("user", "hi")])
            with pytest.raises(ModelError, match="ReadTimeout"):
                async for _ in model.generate_content(request, stream=True):
                    pass

    assert len(server.requests) == 1 and sleeps == []


async def test_model_is_usable_again_after_aclose(retry: RetryPolicy) -> None:
    async with FakeGemini(ScriptedTurn(text="one"), ScriptedTurn(text="two")) as server:
        model = server.make_model(retry=retry)
        request = LlmRequest(contents=[Content.from_text("user", "hi")])
        first = [r async for r in model.generate_content(request)]
        await model.aclose()
        second = [r async for r in model.generate_content(request)]
        await model.aclose()

    assert [first[0].content.text, second[0].content.text] == ["one", "two"]  # type: ignore[union-attr]


async def test_retry_after_from_the_server_as_http_date(
    retry: RetryPolicy, sleeps: list[float]
) -> None:
    past = format_datetime(datetime(2000, 1, 1, tzinfo=UTC), usegmt=True)
    async with FakeGemini(
        ErrorReply(429, "quota", retry_after=past), ScriptedTurn(text="ok")
    ) as server:
        async with server.make_model(retry=retry) as model:
            request = LlmRequest(contents=[Content.from_text("user", "hi")])
            responses = [r async for r in model.generate_content(request)]

    assert responses[0].content is not None
    assert sleeps == [0.0]


# --------------------------------------------------------------------------- errors and secrets


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            b'{"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}}',
            ("bad", "INVALID_ARGUMENT"),
        ),
        (
            b'[{"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}]',
            ("quota", "RESOURCE_EXHAUSTED"),
        ),
        (
            b'{"error": {"message": "no", "type": "invalid_request_error", "param": null}}',
            ("no", "invalid_request_error"),
        ),
        (
            b'{"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}',
            ("busy", "overloaded_error"),
        ),
        (b'{"error": "model \'x\' not found"}', ("model 'x' not found", None)),
        (
            b'{"object": "error", "message": "vllm says no", "type": "BadRequestError"}',
            ("vllm says no", "BadRequestError"),
        ),
        (b"<html>Bad Gateway</html>", ("<html>Bad Gateway</html>", None)),
        (b"", ("(empty body)", None)),
    ],
)
def test_error_message_is_extracted_from_every_provider_shape(
    body: bytes, expected: tuple[str, str | None]
) -> None:
    assert error_message_from_body(body) == expected


def test_secret_never_shows_its_value() -> None:
    secret = Secret("sk-abc123")

    assert "sk-abc123" not in repr(secret) and "sk-abc123" not in str(secret)
    assert secret.get() == "sk-abc123"
    assert (
        redact("key sk-abc123 leaked, sk-abc123 again", [secret, None])
        == "key *** leaked, *** again"
    )


def test_secret_rejects_whitespace_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as caught:
        Secret("sk-abc\n123")
    assert "sk-abc" not in str(caught.value)


async def test_missing_key_for_the_public_endpoint_is_a_config_error() -> None:
    request = LlmRequest(contents=[Content.from_text("user", "hi")])

    async with GeminiModel("gemini-2.5-flash") as model:
        with pytest.raises(ConfigError, match="GOOGLE_API_KEY"):
            await anext(model.generate_content(request))
    async with OpenAIModel("gpt-4o-mini") as openai:
        with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
            await anext(openai.generate_content(request))


@pytest.mark.parametrize(
    ("build", "variable"),
    [
        (lambda: OpenAIModel("gpt-4o"), "OPENAI_API_KEY"),
        (lambda: AnthropicModel("claude-sonnet-4-5"), "ANTHROPIC_API_KEY"),
        (lambda: GeminiModel("gemini-2.5-flash"), "GOOGLE_API_KEY"),
    ],
)
def test_an_api_key_variable_set_from_a_file_loses_its_newline_and_a_bad_one_is_named(
    monkeypatch: pytest.MonkeyPatch, build: Callable[[], HttpLlm], variable: str
) -> None:
    # A variable from a Kubernetes Secret made with --from-file ends with the file's newline.
    monkeypatch.setenv(variable, "sk-from-a-file-0123\n")
    assert build()._api_key == Secret("sk-from-a-file-0123")
    monkeypatch.setenv(variable, "sk-two words")
    with pytest.raises(ConfigError) as raised:
        build()
    assert f"${variable}" in raised.value.message
    assert "sk-two" not in raised.value.message
