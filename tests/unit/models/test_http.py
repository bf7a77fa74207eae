"""The shared HTTP plumbing: decoders, retries, errors, secrets."""

from __future__ import annotations

import itertools
import socket
from datetime import UTC, datetime
from email.utils import format_datetime

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adk_mesh.errors import ConfigError, ModelError
from adk_mesh.models import GeminiModel, LlmRequest, OpenAIModel, RetryPolicy
from adk_mesh.models._http import (
    LineDecoder,
    NdjsonDecoder,
    Secret,
    ServerSentEvent,
    SseDecoder,
    error_message_from_body,
    parse_retry_after,
    redact,
)
from adk_mesh.testing.fake_providers import (
    Disconnect,
    ErrorReply,
    FakeGemini,
    FakeOpenAI,
    ScriptedTurn,
)
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


# --------------------------------------------------------------------------- SSE


def sse(pieces: list[bytes]) -> list[ServerSentEvent]:
    decoder = SseDecoder()
    events = [event for piece in pieces for event in decoder.feed(piece)]
    return events + decoder.flush()


def test_sse_fields_comments_names_and_multiline_data() -> None:
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
        b"data: tail without blank line"
    )

    assert sse([stream]) == [
        ServerSentEvent("content_block_delta", "first line\nsecond line\n"),
        ServerSentEvent("message", "plain"),
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

    assert sse(split_at(stream, cuts)) == [
        ServerSentEvent("a", '{"t": "héllo 🎉"}'),
        ServerSentEvent("message", "x\ny"),
        ServerSentEvent("b", "日本"),
    ]


def test_ndjson_skips_blank_lines_and_flushes_the_last_line() -> None:
    decoder = NdjsonDecoder()
    records = decoder.feed(b'{"a":1}\n\n{"b"') + decoder.feed(b':2}\r\n  \n{"c":3}')
    records += decoder.flush()

    assert [r.data for r in records] == ['{"a":1}', '{"b":2}', '{"c":3}']


# --------------------------------------------------------------------------- retries


def test_retry_after_in_seconds_http_date_and_milliseconds() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
    later = format_datetime(datetime(2025, 1, 1, 12, 0, 30, tzinfo=UTC), usegmt=True)

    assert parse_retry_after({"retry-after": "7"}) == 7.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after": later}, now=now) == 30.0
    assert parse_retry_after({"retry-after": later}, now=now + 60) == 0.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after": "-3"}) is None
    assert parse_retry_after({}) is None


def test_backoff_is_full_jitter_under_a_doubling_bounded_cap() -> None:
    policy = RetryPolicy(initial_backoff=1.0, max_backoff=4.0, max_retry_after=10.0)

    for retry, cap in [(0, 1.0), (1, 2.0), (2, 4.0), (6, 4.0)]:
        delays = [policy.delay(retry) for _ in range(200)]
        assert all(0.0 <= d <= cap for d in delays)
        assert max(delays) > cap / 2  # jittered over the whole range, not fixed
    assert policy.delay(0, retry_after=3.0) == 3.0
    assert policy.delay(0, retry_after=120.0) == 10.0


def test_retry_policy_rejects_nonsense() -> None:
    with pytest.raises(ConfigError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ConfigError):
        RetryPolicy(initial_backoff=-1)


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
