"""Every provider against transcripts of its documented wire format, replayed over a real socket.

Each transcript in ``transcripts/`` was written by hand from the provider's public API
reference (they are not recordings of the live services): ``<name>.json`` holds the request the
documentation shows and the response's status and headers, ``<name>.sse`` / ``<name>.ndjson``
the response body byte for byte. :class:`ReplayServer`, a minimal HTTP/1.1 server on
``127.0.0.1`` port 0, answers with that body, flushing it one record at a time as the
providers do, and records what it received. Each transcript checks both directions: the
request our provider sends has the documented path, query, headers and JSON body, and the
responses parsed from the body are the expected partials and final aggregate.

Gemini and Ollama send a function call whole in one record, so only the OpenAI and Anthropic
transcripts have arguments split across records.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qsl, urlsplit

import pytest

from adk_mesh.models import (
    AnthropicModel,
    GeminiModel,
    GenerateContentConfig,
    LlmRequest,
    OllamaModel,
    OpenAIModel,
)
from adk_mesh.models._http import HttpLlm
from adk_mesh.types import (
    Content,
    FinishReason,
    FunctionCall,
    LlmResponse,
    Part,
    ToolDeclaration,
    UsageMetadata,
)

TRANSCRIPTS = Path(__file__).parent / "transcripts"

#: A case's call id that the provider generates (Ollama sends none): any ``call_`` + 32 hex.
GENERATED_ID = "<generated>"
_GENERATED = re.compile(r"call_[0-9a-f]{32}")

#: One record of a body: an SSE event up to its blank line, or one NDJSON line.
_RECORD = re.compile(rb".*?(?:\r\n\r\n|\n\n|\r\r)|[^\n]*\n|.+", re.DOTALL)


@dataclass(frozen=True)
class Transcript:
    """One documented exchange: the expected request and the response to replay."""

    name: str
    request: dict[str, Any]
    status: int
    headers: dict[str, str]
    body: bytes

    @classmethod
    def load(cls, name: str) -> Self:
        spec = json.loads((TRANSCRIPTS / f"{name}.json").read_text(encoding="utf-8"))
        response = spec["response"]
        return cls(
            name=name,
            request=spec["request"],
            status=response["status"],
            headers=response["headers"],
            body=(TRANSCRIPTS / response["body"]).read_bytes(),
        )

    def records(self) -> list[bytes]:
        """The body cut where the provider flushes: after each SSE event or NDJSON line."""
        if self.headers["content-type"].startswith("text/event-stream"):
            return _RECORD.findall(self.body)
        return self.body.splitlines(keepends=True)


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


class ReplayServer:
    """A minimal HTTP/1.1 server on 127.0.0.1 that answers each request with one transcript's
    response (chunked, one record per chunk) and closes the connection."""

    def __init__(self, transcript: Transcript) -> None:
        self.transcript = transcript
        self.requests: list[Received] = []
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
        await asyncio.gather(*self._handlers)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            self.requests.append(await self._read_request(reader))
            await self._reply(writer)
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except ConnectionError:
                pass

    @staticmethod
    async def _read_request(reader: asyncio.StreamReader) -> Received:
        method, target, _ = (await reader.readline()).decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        url = urlsplit(target)
        return Received(method, url.path, dict(parse_qsl(url.query)), headers, body)

    async def _reply(self, writer: asyncio.StreamWriter) -> None:
        transcript = self.transcript
        head = [f"HTTP/1.1 {transcript.status} OK"]
        head += [f"{name}: {value}" for name, value in transcript.headers.items()]
        head += ["transfer-encoding: chunked", "connection: close", "", ""]
        writer.write("\r\n".join(head).encode("latin-1"))
        for record in transcript.records():
            writer.write(f"{len(record):x}\r\n".encode() + record + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()


# --------------------------------------------------------------------------- the cases

WEATHER_TOOL = ToolDeclaration(
    name="get_weather",
    description="Get the current weather in a given location",
    parameters_schema={
        "type": "object",
        "properties": {
            "location": {
                "type": "string",
                "description": "The city and country, e.g. Paris, France",
            },
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["location"],
    },
)
PARIS = {"location": "Paris, France", "unit": "celsius"}


def ask(text: str, **kwargs: Any) -> LlmRequest:
    return LlmRequest(contents=[Content.from_text("user", text)], **kwargs)


SKY = "Why is the sky blue?"
WEATHER = "What's the weather like in Paris today?"


@dataclass(frozen=True)
class Case:
    """A transcript, the model and request that produce its request, and what it parses to."""

    transcript: str
    model: Callable[[str], HttpLlm]
    request: LlmRequest
    partial_texts: list[str]
    parts: list[Part]
    finish_reason: FinishReason
    usage: UsageMetadata
    model_version: str


def gemini(url: str) -> HttpLlm:
    return GeminiModel("gemini-2.5-flash", api_key="test-gemini-key", base_url=url)


def openai(url: str) -> HttpLlm:
    return OpenAIModel("gpt-4o-mini", api_key="test-openai-key", base_url=f"{url}/v1")


def anthropic(url: str) -> HttpLlm:
    return AnthropicModel("claude-sonnet-4-5", api_key="test-anthropic-key", base_url=url)


def ollama(url: str) -> HttpLlm:
    return OllamaModel("llama3.2", host=url)


GEMINI_SKY = [
    "The sky looks blue because the molecules in the air scatter",
    " short-wavelength blue sunlight much more strongly than red light (Rayleigh scattering),",
    " so blue light reaches your eyes from every part of the sky.",
]
OPENAI_HELLO = ["Hello", "!", " How", " can", " I", " help", " you", " today", "?"]
ANTHROPIC_SKY = [
    "Sunlight is scattered by air molecules, and short blue wavelengths scatter",
    " far more than long red ones (Rayleigh scattering), so the sky",
    " glows blue in every direction.",
]
ANTHROPIC_WEATHER = ["I'll check the current weather", " in Paris for you."]
OLLAMA_SKY = ["The", " sky", " is", " blue", " because of Rayleigh scattering."]

CASES = [
    Case(
        transcript="gemini_text",
        model=gemini,
        request=ask(
            SKY,
            system_instruction="Answer in one sentence.",
            config=GenerateContentConfig(temperature=0.2, max_output_tokens=256),
        ),
        partial_texts=GEMINI_SKY,
        parts=[Part(text="".join(GEMINI_SKY))],
        finish_reason=FinishReason.STOP,
        usage=UsageMetadata(
            prompt_token_count=12,
            # Gemini's 29 candidates + 390 thoughts: output tokens count the thinking.
            candidates_token_count=419,
            total_token_count=431,
            thoughts_token_count=390,
        ),
        model_version="gemini-2.5-flash",
    ),
    Case(
        transcript="gemini_function_call",
        model=gemini,
        request=ask(WEATHER, tools=[WEATHER_TOOL]),
        partial_texts=["I'll look up the current weather in Paris."],
        parts=[
            Part(text="I'll look up the current weather in Paris."),
            Part(
                function_call=FunctionCall(name="get_weather", args=PARIS),
                thought_signature=base64.b64decode(
                    "CiIB0e2KbzxeEZBKewLDnV8XjqRhCzMt8BmEu0IGfOWaEA=="
                ),
            ),
        ],
        finish_reason=FinishReason.STOP,  # Gemini ends a function call turn with STOP
        usage=UsageMetadata(
            prompt_token_count=58,
            candidates_token_count=103,
            total_token_count=161,
            thoughts_token_count=72,
        ),
        model_version="gemini-2.5-flash",
    ),
    Case(
        transcript="openai_text",
        model=openai,
        request=ask("Hello!", system_instruction="You are a helpful assistant."),
        partial_texts=OPENAI_HELLO,
        parts=[Part(text="Hello! How can I help you today?")],
        finish_reason=FinishReason.STOP,
        usage=UsageMetadata(
            prompt_token_count=19,
            candidates_token_count=10,
            total_token_count=29,
            cached_content_token_count=0,
            thoughts_token_count=0,
        ),
        model_version="gpt-4o-mini-2024-07-18",
    ),
    Case(
        transcript="openai_tool_call",
        model=openai,
        request=ask(WEATHER, tools=[WEATHER_TOOL]),
        partial_texts=[],
        parts=[
            Part(
                function_call=FunctionCall(
                    name="get_weather", args=PARIS, id="call_Zb2cLbpLz0RvVtBdtdVR3gWG"
                )
            )
        ],
        finish_reason=FinishReason.TOOL_CALLS,
        usage=UsageMetadata(
            prompt_token_count=81,
            candidates_token_count=24,
            total_token_count=105,
            cached_content_token_count=0,
            thoughts_token_count=0,
        ),
        model_version="gpt-4o-mini-2024-07-18",
    ),
    Case(
        transcript="anthropic_text",
        model=anthropic,
        request=ask(
            SKY,
            system_instruction="Answer in one sentence.",
            config=GenerateContentConfig(max_output_tokens=1024),
        ),
        partial_texts=ANTHROPIC_SKY,
        parts=[Part(text="".join(ANTHROPIC_SKY))],
        finish_reason=FinishReason.STOP,
        usage=UsageMetadata(
            prompt_token_count=21,
            candidates_token_count=33,
            total_token_count=54,
            cached_content_token_count=0,
        ),
        model_version="claude-sonnet-4-5-20250929",
    ),
    Case(
        transcript="anthropic_tool_use",
        model=anthropic,
        request=ask(
            WEATHER, tools=[WEATHER_TOOL], config=GenerateContentConfig(max_output_tokens=1024)
        ),
        partial_texts=ANTHROPIC_WEATHER,
        parts=[
            Part(text="".join(ANTHROPIC_WEATHER)),
            Part(
                function_call=FunctionCall(
                    name="get_weather", args=PARIS, id="toolu_01T1x1fJ34qAmk2tNTrN7Up6"
                )
            ),
        ],
        finish_reason=FinishReason.TOOL_CALLS,
        usage=UsageMetadata(
            prompt_token_count=403,
            candidates_token_count=79,
            total_token_count=482,
            cached_content_token_count=0,
        ),
        model_version="claude-sonnet-4-5-20250929",
    ),
    Case(
        transcript="ollama_text",
        model=ollama,
        request=ask(SKY, config=GenerateContentConfig(temperature=0)),
        partial_texts=OLLAMA_SKY,
        parts=[Part(text="".join(OLLAMA_SKY))],
        finish_reason=FinishReason.STOP,
        usage=UsageMetadata(prompt_token_count=31, candidates_token_count=9, total_token_count=40),
        model_version="llama3.2",
    ),
    Case(
        transcript="ollama_tool_call",
        model=ollama,
        request=ask(WEATHER, tools=[WEATHER_TOOL]),
        partial_texts=[],
        parts=[
            Part(
                function_call=FunctionCall(
                    # Ollama sends no call id: ours is a new random one (compared apart).
                    name="get_weather",
                    args=PARIS,
                    id=GENERATED_ID,
                )
            )
        ],
        # Ollama's done_reason is "stop" after a tool call; we say TOOL_CALLS, as for OpenAI.
        finish_reason=FinishReason.TOOL_CALLS,
        usage=UsageMetadata(
            prompt_token_count=187, candidates_token_count=25, total_token_count=212
        ),
        model_version="llama3.2",
    ),
]


@dataclass(frozen=True)
class Replayed:
    transcript: Transcript
    received: Received
    responses: list[LlmResponse]


@pytest.fixture(params=CASES, ids=[case.transcript for case in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
async def replayed(case: Case) -> AsyncIterator[Replayed]:
    transcript = Transcript.load(case.transcript)
    async with ReplayServer(transcript) as server:
        async with case.model(server.url) as model:
            responses = [r async for r in model.generate_content(case.request, stream=True)]
    (received,) = server.requests
    yield Replayed(transcript, received, responses)


# --------------------------------------------------------------------------- the tests


def test_transcripts_are_all_replayed() -> None:
    on_disk = {path.stem for path in TRANSCRIPTS.glob("*.json")}

    assert on_disk == {case.transcript for case in CASES}


def test_the_request_has_the_documented_path_headers_and_body(replayed: Replayed) -> None:
    expected, received = replayed.transcript.request, replayed.received

    assert (received.method, received.path) == (expected["method"], expected["path"])
    assert received.query == expected["query"]
    for name, value in expected["headers"].items():
        assert received.headers.get(name) == value, name
    assert json.loads(received.body) == expected["body"]


def test_the_responses_are_parsed_from_the_transcript(case: Case, replayed: Replayed) -> None:
    *partials, final = replayed.responses

    assert all(p.partial and not p.turn_complete for p in partials)
    assert [p.content.text if p.content else None for p in partials] == case.partial_texts
    assert final.turn_complete and not final.partial
    assert final.content is not None and final.content.role == "model"
    assert _with_generated_ids(final.content.parts, case.parts) == case.parts
    assert final.finish_reason is case.finish_reason
    assert final.usage_metadata == case.usage
    assert final.model_version == case.model_version


def _with_generated_ids(parts: list[Part], expected: list[Part]) -> list[Part]:
    """``parts`` with each call id that the case expects generated checked and replaced by
    :data:`GENERATED_ID`, so the rest compares as is."""
    checked: list[Part] = []
    for part, wanted in zip(parts, expected, strict=False):
        call, wanted_call = part.function_call, wanted.function_call
        if call is not None and wanted_call is not None and wanted_call.id == GENERATED_ID:
            assert _GENERATED.fullmatch(call.id or ""), call.id
            part = part.model_copy(
                update={"function_call": call.model_copy(update={"id": GENERATED_ID})}
            )
        checked.append(part)
    return checked + parts[len(checked) :]
