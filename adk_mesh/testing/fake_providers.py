"""Fake LLM provider servers that speak each provider's real HTTP wire format over real sockets.

Each server listens on ``127.0.0.1`` (port 0 by default), implements just enough HTTP/1.1
(keep-alive, ``Content-Length`` and chunked bodies) and answers each request with the next
scripted reply, or with what ``handler(request)`` returns when the script is empty::

    async with FakeOpenAI(ScriptedTurn(text=["Hel", "lo"])) as server:
        async with server.make_model() as model:
            ...
        assert server.requests[0].json()["messages"][0]["content"] == "hi"

A reply is one of:

- :class:`ScriptedTurn`: a model turn (text deltas, thoughts, tool calls, finish reason,
  usage), rendered as the provider's JSON body or, when the request asked to stream, as its
  SSE / NDJSON stream. Stream controls: ``write_size`` splits the body into TCP writes of that
  many bytes (cutting lines, ``data:`` fields and UTF-8 characters anywhere), ``cut_after``
  closes the connection in the middle of the stream, ``hold_after`` stops sending and waits for
  the client to disconnect (recorded in :attr:`FakeProviderServer.aborts`), ``stream_error``
  ends the stream with the provider's in-stream error record.
- :class:`ErrorReply`: an HTTP error with the provider's real error JSON (and ``Retry-After``).
- :class:`RawReply`: exact status, headers and body bytes.
- :class:`Disconnect`: drop the connection without an answer (a reset before any body byte).

Like the real APIs, :class:`FakeOpenAI` and :class:`FakeAnthropic` refuse (HTTP 400,
``invalid_request_error``, the API's own message) a history in which a tool call is not
answered right after it, or a tool result answers no call just before it, and a tool name
they do not take, declared or in the history (OpenAI: ``^[a-zA-Z0-9_-]{1,64}$``, Anthropic:
``{1,128}``), and
:class:`FakeGemini` refuses (400 ``INVALID_ARGUMENT``) contents the API does not take: none,
a content without parts, an empty part, a function response turn that does not follow a
function call turn with as many calls, a function call turn that does not follow a user turn,
on Gemini 3+ an unsigned function call of the current turn (its own calls come signed), and a
function declaration whose name it does not take.
The checks run before a scripted reply is taken. Pass ``check_history=False`` to turn them
off. Always checked: a method and path the API does not serve (its 404) and a body that is not
a JSON object (its 400). ``streamGenerateContent`` without ``alt=sse`` answers one JSON array,
as the API does.

Every request is recorded in :attr:`FakeProviderServer.requests`. The servers run on the
event loop that starts them; :meth:`FakeProviderServer.stop` closes every connection.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import contextlib
import http
import itertools
import json
import re
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Self
from urllib.parse import parse_qsl, urlsplit

from adk_mesh.models import AnthropicModel, GeminiModel, OllamaModel, OpenAIModel
from adk_mesh.models._http import HttpLlm

__all__ = [
    "Disconnect",
    "ErrorReply",
    "FakeAnthropic",
    "FakeGemini",
    "FakeOllama",
    "FakeOpenAI",
    "FakeProviderServer",
    "RawReply",
    "RecordedRequest",
    "Reply",
    "ScriptedCitation",
    "ScriptedCodeRun",
    "ScriptedNative",
    "ScriptedPausedTurn",
    "ScriptedSource",
    "ScriptedToolCall",
    "ScriptedTurn",
    "ScriptedUrlFetch",
    "ScriptedWebSearch",
]

FinishKind = Literal["stop", "length", "tool_calls", "safety"]


@dataclass(frozen=True)
class RecordedRequest:
    """One request the fake server received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class ScriptedToolCall:
    """A tool call in a :class:`ScriptedTurn`."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass
class ScriptedSource:
    """A page a provider-native tool found or fetched."""

    url: str
    title: str = ""


@dataclass
class ScriptedWebSearch:
    """A web search the provider runs in a :class:`ScriptedTurn`: its query and the pages
    it found."""

    query: str
    results: list[ScriptedSource] = field(default_factory=list)


@dataclass
class ScriptedUrlFetch:
    """A page the provider fetches in a :class:`ScriptedTurn` (URL context, web fetch)."""

    url: str
    title: str = ""


@dataclass
class ScriptedCodeRun:
    """Code the provider runs in its sandbox in a :class:`ScriptedTurn`, and its output."""

    code: str
    output: str = ""
    failed: bool = False


@dataclass
class ScriptedCitation:
    """Marks the first occurrence of ``text`` in the turn's text as backed by the page at
    ``url`` (one of the turn's search results or fetches), quoting ``cited_text``."""

    text: str
    url: str
    cited_text: str = ""


ScriptedNative = ScriptedWebSearch | ScriptedUrlFetch | ScriptedCodeRun


@dataclass
class ScriptedTurn:
    """One model turn, rendered in the provider's own format.

    Attributes:
        text: the text deltas (a plain string is one delta).
        thoughts: reasoning deltas, sent before the text.
        tool_calls: tool calls, sent after the text.
        finish: why the turn ended; ``None`` means "tool_calls" when there are tool calls,
            else "stop".
        input_tokens / output_tokens: the usage reported (output tokens count the thinking
            too, as OpenAI and Anthropic report them).
        thought_tokens: how many of ``output_tokens`` were thinking: Gemini reports them
            apart (``thoughtsTokenCount``), its ``candidatesTokenCount`` being the rest.
        model: the model name reported (defaults to the requested one).
        thought_signature: Gemini: on the first tool call (else the last part); Anthropic:
            the thinking block's signature.
        grounding: Gemini ``groundingMetadata``, verbatim (else built from ``native``).
        native: what the provider's own tools do in the turn (searches, fetches, code runs),
            rendered as each provider reports them: Gemini's grounding metadata, URL context
            metadata and code execution parts; Anthropic's ``server_tool_use`` and
            ``*_tool_result`` blocks. Sent before the text.
        citations: spans of the text backed by the pages of ``native``: Gemini's grounding
            supports (UTF-8 byte offsets), Anthropic's cited text blocks.
        argument_chunks: how many deltas each tool call's JSON arguments are split into
            (OpenAI, Anthropic).
        write_size: split the streamed body into TCP writes of this many bytes (a sequence
            is cycled); ``None`` writes one record at a time.
        cut_after: close the connection after this many records and half of the next one
            (negative counts from the end, as in slicing: -1 cuts inside the last record).
        hold_after: after this many records (negative: all but that many), send nothing more
            and wait for the client to go.
        stream_error: end the stream with the provider's in-stream error carrying this text.
        status / headers: the HTTP status and extra headers.
    """

    text: list[str] | str = field(default_factory=list)
    thoughts: list[str] = field(default_factory=list)
    tool_calls: list[ScriptedToolCall] = field(default_factory=list)
    finish: FinishKind | None = None
    input_tokens: int = 11
    output_tokens: int = 7
    thought_tokens: int = 0
    model: str | None = None
    thought_signature: bytes | None = None
    grounding: dict[str, Any] | None = None
    native: list[ScriptedNative] = field(default_factory=list)
    citations: list[ScriptedCitation] = field(default_factory=list)
    argument_chunks: int = 3
    write_size: int | Sequence[int] | None = None
    cut_after: int | None = None
    hold_after: int | None = None
    stream_error: str | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def text_deltas(self) -> list[str]:
        return [self.text] if isinstance(self.text, str) else list(self.text)

    def pages(self) -> list[ScriptedSource]:
        """Every page the turn's native tools found or fetched, each once, in order."""
        pages: dict[str, ScriptedSource] = {}
        for item in self.native:
            if isinstance(item, ScriptedWebSearch):
                for result in item.results:
                    pages.setdefault(result.url, result)
            elif isinstance(item, ScriptedUrlFetch):
                pages.setdefault(item.url, ScriptedSource(item.url, item.title))
        return list(pages.values())

    def cited_spans(self) -> list[tuple[int, int, ScriptedCitation]]:
        """Each citation's (start, end) in the turn's whole text, in order of start."""
        text = "".join(self.text_deltas)
        spans = []
        for citation in self.citations:
            start = text.find(citation.text)
            if start < 0:
                raise ValueError(f"cited text {citation.text!r} is not in the turn's text")
            spans.append((start, start + len(citation.text), citation))
        return sorted(spans, key=lambda span: span[0])

    @property
    def finish_kind(self) -> FinishKind:
        if self.finish is not None:
            return self.finish
        return "tool_calls" if self.tool_calls else "stop"


@dataclass
class ErrorReply:
    """An HTTP error in the provider's error JSON shape."""

    status: int
    message: str
    retry_after: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class RawReply:
    """Exact bytes: ``body`` with a Content-Length, or ``chunks`` sent chunked one per write."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] | None = None
    content_type: str = "application/json"


@dataclass
class Disconnect:
    """Close the connection instead of answering (after sending 200 headers, if asked)."""

    after_headers: bool = False


Reply = ScriptedTurn | ErrorReply | RawReply | Disconnect
Handler = Callable[[RecordedRequest], Reply | Awaitable[Reply]]


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _split_text(text: str, pieces: int) -> list[str]:
    """``text`` in ``pieces`` nearly equal fragments (fewer when it is shorter)."""
    pieces = max(1, min(pieces, len(text)))
    size = -(-len(text) // pieces)
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _split_bytes(data: bytes, write_size: int | Sequence[int] | None) -> list[bytes]:
    if write_size is None:
        return [data]
    sizes = itertools.cycle([write_size] if isinstance(write_size, int) else write_size)
    out: list[bytes] = []
    position = 0
    while position < len(data):
        step = max(1, next(sizes))
        out.append(data[position : position + step])
        position += step
    return out


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "Site Overloaded" if status == 529 else "Unknown"


class FakeProviderServer(abc.ABC):
    """A scriptable HTTP/1.1 server speaking one provider's wire format.

    Args:
        replies: replies to send, in order, one per request.
        handler: builds the reply when no scripted one is left (sync or async).
        model: the model name :meth:`make_model` uses.
    """

    provider: ClassVar[str]
    stream_content_type: ClassVar[str] = "text/event-stream"

    def __init__(
        self,
        *replies: Reply,
        handler: Handler | None = None,
        model: str = "",
        check_history: bool = True,
    ) -> None:
        self.requests: list[RecordedRequest] = []
        self.handler = handler
        self.check_history = check_history
        #: The requests refused as the real API would (see :meth:`refusal`), with the reply.
        self.refused: list[tuple[RecordedRequest, RawReply]] = []
        self.model_name = model or self.default_model
        #: How many times a client went away while a response was still being sent.
        self.aborts = 0
        self._replies: deque[Reply] = deque(replies)
        self._aborted = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._port = 0

    default_model: ClassVar[str] = "fake-model"

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self._port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        # Closing a transport ends its handler's pending read; cancelling is the fallback.
        for writer in list(self._writers):
            writer.transport.abort()
        if self._connections:
            _, pending = await asyncio.wait(set(self._connections), timeout=1.0)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        await server.wait_closed()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._port}"

    @property
    def base_url(self) -> str:
        """What to pass as the model's ``base_url``."""
        return self.url

    def enqueue(self, *replies: Reply) -> None:
        self._replies.extend(replies)

    async def wait_for_abort(self, *, within: float = 5.0) -> None:
        """Wait until a client disconnected in the middle of a response.

        Raises:
            TimeoutError: no client did so ``within`` seconds.
        """
        async with asyncio.timeout(within):
            await self._aborted.wait()

    @abc.abstractmethod
    def make_model(self, **kwargs: Any) -> HttpLlm:
        """A model of this provider pointed at this server (a test key unless given)."""

    # ------------------------------------------------------------------ the wire format

    @abc.abstractmethod
    def is_stream(self, request: RecordedRequest) -> bool: ...

    @abc.abstractmethod
    def render_json(self, turn: ScriptedTurn, request: RecordedRequest) -> Any: ...

    @abc.abstractmethod
    def render_stream(self, turn: ScriptedTurn, request: RecordedRequest) -> list[bytes]:
        """The stream's records (SSE events or NDJSON lines), each with its terminator."""

    @abc.abstractmethod
    def render_stream_error(self, message: str) -> bytes: ...

    @abc.abstractmethod
    def error_body(self, status: int, message: str) -> Any: ...

    def refusal(self, request: RecordedRequest) -> RawReply | None:
        """The error the real API sends for this request before any model runs (a history it
        does not accept), or ``None``. Checked only with ``check_history``."""
        return None

    #: The requests the API serves (``"METHOD /path"``); ``None`` takes any.
    route: ClassVar[re.Pattern[str] | None] = None

    def misrouted(self, request: RecordedRequest) -> RawReply | None:
        """The API's 404 for a method and path it does not serve, or ``None``. Always checked:
        a client building a wrong URL must fail here as it would against the real API."""
        if self.route is None or self.route.fullmatch(f"{request.method} {request.path}"):
            return None
        message = f"Invalid URL ({request.method} {request.path})"
        return RawReply(status=404, body=_json_bytes(self.error_body(404, message)))

    #: What the API answers (HTTP 400) to a body that is not a JSON object.
    unparsable_message: ClassVar[str] = "the request body is not a JSON object"

    def unparsable(self, request: RecordedRequest) -> RawReply | None:
        """The API's 400 for a body that is not a JSON object, or ``None``. Always checked:
        without it the reply was taken from the script and the connection dropped (a
        transport error to the client, retried) while the fake failed to read the body."""
        if not request.body:
            return None
        try:
            body = request.json()
        except ValueError:
            body = None
        if isinstance(body, dict):
            return None
        return RawReply(status=400, body=_json_bytes(self.error_body(400, self.unparsable_message)))

    def requested_model(self, request: RecordedRequest) -> str:
        try:
            body = request.json()
        except ValueError:
            return self.model_name
        model = body.get("model") if isinstance(body, dict) else None
        return model if isinstance(model, str) else self.model_name

    # ------------------------------------------------------------------ HTTP

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._writers.add(writer)
        try:
            while True:
                request = await self._read_request(reader)
                if request is None:
                    break
                self.requests.append(request)
                if not await self._respond(request, reader, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            # Only stop() cancels these tasks; ending normally keeps Python 3.11's
            # StreamReaderProtocol from logging the cancellation as an error.
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()
            self._connections.discard(task)

    async def _read_request(self, reader: asyncio.StreamReader) -> RecordedRequest | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            pieces = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")
                    break
                pieces.append(await reader.readexactly(size))
                await reader.readexactly(2)
            body = b"".join(pieces)
        else:
            length = int(headers.get("content-length", "0") or 0)
            body = await reader.readexactly(length) if length else b""
        split = urlsplit(target)
        return RecordedRequest(
            method=method,
            path=split.path,
            query=dict(parse_qsl(split.query)),
            headers=headers,
            body=body,
        )

    async def _next_reply(self, request: RecordedRequest) -> Reply:
        if self._replies:
            return self._replies.popleft()
        if self.handler is not None:
            result = self.handler(request)
            if isinstance(result, Awaitable):
                return await result
            return result
        return ErrorReply(500, "fake server: no reply scripted for this request")

    async def _respond(
        self, request: RecordedRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Send the reply; False when the connection must not be reused."""
        refused = self.misrouted(request) or self.unparsable(request)
        if refused is None and self.check_history:
            refused = self.refusal(request)
        if refused is not None:
            self.refused.append((request, refused))
            await self._send(writer, refused.status, refused.body, refused.headers)
            return True
        reply = await self._next_reply(request)
        if isinstance(reply, Disconnect):
            if reply.after_headers:
                await self._send_head(writer, 200, {}, self.stream_content_type)
            writer.transport.abort()
            return False
        if isinstance(reply, ErrorReply):
            headers = dict(reply.headers)
            if reply.retry_after is not None:
                headers["retry-after"] = reply.retry_after
            await self._send(
                writer,
                reply.status,
                _json_bytes(self.error_body(reply.status, reply.message)),
                headers,
            )
            return True
        if isinstance(reply, RawReply):
            if reply.chunks is None:
                await self._send(
                    writer, reply.status, reply.body, reply.headers, reply.content_type
                )
                return True
            await self._send_head(writer, reply.status, reply.headers, reply.content_type)
            for chunk in reply.chunks:
                await self._send_chunk(writer, chunk)
            await self._send_chunk(writer, b"")
            return True
        if not self.is_stream(request):
            body = _json_bytes(self.render_json(reply, request))
            await self._send(writer, reply.status, body, reply.headers)
            return True
        return await self._stream(reply, request, reader, writer)

    async def _stream(
        self,
        turn: ScriptedTurn,
        request: RecordedRequest,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> bool:
        records = self.render_stream(turn, request)
        if turn.stream_error is not None:
            records.append(self.render_stream_error(turn.stream_error))
        await self._send_head(writer, turn.status, turn.headers, self.stream_content_type)
        stop_at = turn.cut_after if turn.cut_after is not None else turn.hold_after
        if stop_at is not None and stop_at < 0:
            stop_at = max(0, len(records) + stop_at)
        payload = b"".join(records if stop_at is None else records[:stop_at])
        if turn.cut_after is not None and stop_at is not None and stop_at < len(records):
            following = records[stop_at]
            payload += following[: max(1, len(following) // 2)]
        try:
            for piece in _split_bytes(payload, turn.write_size):
                await self._send_chunk(writer, piece)
        except ConnectionError:
            self._note_abort()
            return False
        if turn.cut_after is not None:
            writer.transport.abort()
            return False
        if turn.hold_after is not None:
            while await reader.read(65536):
                pass
            self._note_abort()
            return False
        await self._send_chunk(writer, b"")
        return True

    def _note_abort(self) -> None:
        self.aborts += 1
        self._aborted.set()

    async def _send_head(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        headers: dict[str, str],
        content_type: str,
        length: int | None = None,
    ) -> None:
        lines = [f"HTTP/1.1 {status} {_phrase(status)}", f"content-type: {content_type}"]
        lines.append(
            "transfer-encoding: chunked" if length is None else f"content-length: {length}"
        )
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        headers: dict[str, str],
        content_type: str = "application/json",
    ) -> None:
        await self._send_head(writer, status, headers, content_type, len(body))
        writer.write(body)
        await writer.drain()

    @staticmethod
    async def _send_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        await writer.drain()


# --------------------------------------------------------------------------- Gemini

_GOOGLE_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


#: Fields of a Gemini part beside its one data member (``text``, ``functionCall``, ...).
_GEMINI_PART_METADATA = frozenset(
    {"thought", "videoMetadata", "video_metadata", "partMetadata", "part_metadata"}
)

#: The ``toolType`` Gemini reports for a server-side call of each scripted native tool.
_GEMINI_TOOL_TYPES = {ScriptedWebSearch: "GOOGLE_SEARCH_WEB", ScriptedUrlFetch: "URL_CONTEXT"}


#: The function names Gemini takes in a declaration.
_GEMINI_FUNCTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}")


class FakeGemini(FakeProviderServer):
    """``generateContent`` and ``streamGenerateContent?alt=sse``.

    Like the real API it refuses (400 ``INVALID_ARGUMENT``) built-in tools beside function
    declarations on a model before Gemini 3, and on Gemini 3+ without
    ``toolConfig.includeServerSideToolInvocations``. With that flag, each scripted search or
    URL fetch of a turn (``native``) also comes back as a ``toolCall`` part (signed
    ``server-tool-signature:<id>``) and a ``toolResponse`` part, before the text.
    """

    provider = "gemini"
    default_model = "gemini-2.5-flash"
    unparsable_message = "Invalid JSON payload received. Expected a JSON object."
    route = re.compile(
        r"POST /v1(?:beta|alpha)?/models/[A-Za-z0-9._-]+:(?:streamG|g)enerateContent"
    )

    def make_model(self, **kwargs: Any) -> GeminiModel:
        kwargs.setdefault("api_key", "test-gemini-key")
        return GeminiModel(kwargs.pop("model", self.model_name), base_url=self.base_url, **kwargs)

    def is_stream(self, request: RecordedRequest) -> bool:
        """SSE only with ``alt=sse``: without it the API streams one JSON array instead."""
        return self._streams(request) and request.query.get("alt") == "sse"

    @staticmethod
    def _streams(request: RecordedRequest) -> bool:
        return request.path.endswith(":streamGenerateContent")

    def _streamed_as_array(self, request: RecordedRequest) -> bool:
        return self._streams(request) and not self.is_stream(request)

    def requested_model(self, request: RecordedRequest) -> str:
        name = request.path.rsplit("/", 1)[-1].split(":", 1)[0]
        return name or self.model_name

    @staticmethod
    def _finish(turn: ScriptedTurn) -> str:
        return {"length": "MAX_TOKENS", "safety": "SAFETY"}.get(turn.finish_kind, "STOP")

    def _usage(self, turn: ScriptedTurn, final: bool) -> dict[str, Any]:
        usage: dict[str, Any] = {"promptTokenCount": turn.input_tokens}
        if final:
            # Gemini counts thinking apart from the answer; the total holds both.
            usage["candidatesTokenCount"] = turn.output_tokens - turn.thought_tokens
            if turn.thought_tokens:
                usage["thoughtsTokenCount"] = turn.thought_tokens
            usage["totalTokenCount"] = turn.input_tokens + turn.output_tokens
        return usage

    @staticmethod
    def _call_parts(turn: ScriptedTurn) -> list[dict[str, Any]]:
        parts = []
        for call in turn.tool_calls:
            function_call: dict[str, Any] = {"name": call.name, "args": call.args}
            if call.id:
                function_call["id"] = call.id
            parts.append({"functionCall": function_call})
        return parts

    def _sign(
        self, turn: ScriptedTurn, request: RecordedRequest, parts: list[dict[str, Any]]
    ) -> None:
        signature = turn.thought_signature
        if signature is None and turn.tool_calls and self._signs_calls(request):
            signature = b"fake-gemini-3-signature"  # Gemini 3 signs every step's first call
        if signature is None or not parts:
            return
        target = next((p for p in parts if "functionCall" in p), parts[-1])
        target["thoughtSignature"] = base64.b64encode(signature).decode()

    def _signs_calls(self, request: RecordedRequest) -> bool:
        """Gemini 3+: signs the first function call of each step, and requires the current
        turn's signatures back."""
        version = re.match(r"gemini-(\d+)", self.requested_model(request))
        return version is not None and int(version.group(1)) >= 3

    def _chunk(
        self, turn: ScriptedTurn, request: RecordedRequest, parts: list[dict[str, Any]], last: bool
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if last:
            candidate["finishReason"] = self._finish(turn)
            grounding = turn.grounding if turn.grounding is not None else self._grounding(turn)
            if grounding is not None:
                candidate["groundingMetadata"] = grounding
            fetched = [item for item in turn.native if isinstance(item, ScriptedUrlFetch)]
            if fetched:
                candidate["urlContextMetadata"] = {
                    "urlMetadata": [
                        {
                            "retrievedUrl": item.url,
                            "urlRetrievalStatus": "URL_RETRIEVAL_STATUS_SUCCESS",
                        }
                        for item in fetched
                    ]
                }
        return {
            "candidates": [candidate],
            "usageMetadata": self._usage(turn, last),
            "modelVersion": turn.model or self.requested_model(request),
            "responseId": "fake-response",
        }

    @staticmethod
    def _grounding(turn: ScriptedTurn) -> dict[str, Any] | None:
        """Gemini's ``groundingMetadata`` for the turn's searches and citations: the pages as
        ``groundingChunks``, each citation a ``groundingSupport`` placed by UTF-8 byte
        offsets in the answer's text, the queries, the search suggestions."""
        searches = [item for item in turn.native if isinstance(item, ScriptedWebSearch)]
        if not searches and not turn.citations:
            return None
        pages = turn.pages()
        position = {page.url: index for index, page in enumerate(pages)}
        text = "".join(turn.text_deltas)
        grounding: dict[str, Any] = {
            "groundingChunks": [{"web": {"uri": page.url, "title": page.title}} for page in pages],
            "groundingSupports": [
                {
                    "segment": {
                        "startIndex": len(text[:start].encode()),
                        "endIndex": len(text[:end].encode()),
                        "text": citation.text,
                    },
                    "groundingChunkIndices": [position[citation.url]],
                }
                for start, end, citation in turn.cited_spans()
            ],
        }
        if searches:
            grounding["webSearchQueries"] = [search.query for search in searches]
            grounding["searchEntryPoint"] = {
                "renderedContent": '<div class="container">Google Search suggestions</div>'
            }
        return grounding

    @staticmethod
    def _code_parts(turn: ScriptedTurn) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = []
        for item in turn.native:
            if isinstance(item, ScriptedCodeRun):
                parts.append({"executableCode": {"language": "PYTHON", "code": item.code}})
                outcome = "OUTCOME_FAILED" if item.failed else "OUTCOME_OK"
                parts.append({"codeExecutionResult": {"outcome": outcome, "output": item.output}})
        return parts

    def _server_tool_parts(
        self, turn: ScriptedTurn, request: RecordedRequest
    ) -> list[dict[str, Any]]:
        """The turn's searches and fetches as ``toolCall`` / ``toolResponse`` parts, when the
        request asked for server-side tool invocations (else none, as the API sends none)."""
        try:
            tool_config = request.json().get("toolConfig") or {}
        except (ValueError, AttributeError):
            return []
        if tool_config.get("includeServerSideToolInvocations") is not True:
            return []
        parts: list[dict[str, Any]] = []
        for index, item in enumerate(turn.native):
            tool_type = _GEMINI_TOOL_TYPES.get(type(item))
            if tool_type is None:
                continue  # code execution stays executableCode / codeExecutionResult parts
            call_id = f"server-{len(self.requests)}-{index}"
            if isinstance(item, ScriptedWebSearch):
                args: dict[str, Any] = {"queries": [item.query]}
                response: dict[str, Any] = {
                    "results": [{"uri": page.url, "title": page.title} for page in item.results]
                }
            else:
                assert isinstance(item, ScriptedUrlFetch)
                args = {"urls": [item.url]}
                response = {"urlMetadata": [{"retrievedUrl": item.url}]}
            signature = base64.b64encode(f"server-tool-signature:{call_id}".encode()).decode()
            parts.append(
                {
                    "toolCall": {"id": call_id, "toolType": tool_type, "args": args},
                    "thoughtSignature": signature,
                }
            )
            parts.append(
                {"toolResponse": {"id": call_id, "toolType": tool_type, "response": response}}
            )
        return parts

    def refusal(self, request: RecordedRequest) -> RawReply | None:
        """The API's 400s for contents it does not take (see :meth:`_contents_refusal`), and
        for built-in tools beside function declarations: refused before Gemini 3, and on
        Gemini 3+ unless the request includes server-side tool invocations."""
        try:
            body = request.json()
        except ValueError:
            return None
        if not isinstance(body, dict):
            return None
        refused = self._contents_refusal(body.get("contents"))
        contents = body.get("contents")
        if refused is None and isinstance(contents, list) and self._signs_calls(request):
            refused = self._signature_refusal(contents)
        if refused is not None:
            return refused
        tools = body.get("tools")
        if not isinstance(tools, list):
            return None
        for index, tool in enumerate(tools):
            declarations = tool.get("functionDeclarations") if isinstance(tool, dict) else None
            for position, declaration in enumerate(
                declarations if isinstance(declarations, list) else []
            ):
                name = declaration.get("name") if isinstance(declaration, dict) else None
                if not isinstance(name, str) or not _GEMINI_FUNCTION_NAME.fullmatch(name):
                    return self._refuse(
                        f"* GenerateContentRequest.tools[{index}].function_declarations"
                        f"[{position}].name: Invalid function name. Must start with a letter "
                        "or an underscore. Must be alphameric (a-z, A-Z, 0-9), underscores "
                        "(_), dots (.), colons (:), or dashes (-), with a maximum length of 64."
                    )
        keys = {key for tool in tools if isinstance(tool, dict) for key in tool}
        if not {"functionDeclarations", "function_declarations"} & keys or not keys - {
            "functionDeclarations",
            "function_declarations",
        }:
            return None
        version = re.match(r"gemini-(\d+)", self.requested_model(request))
        if version is None or int(version.group(1)) < 3:
            return self._refuse("Tool use with function calling is unsupported by the model.")
        tool_config = body.get("toolConfig") or {}
        if tool_config.get("includeServerSideToolInvocations") is not True:
            return self._refuse(
                "Please enable tool_config.include_server_side_tool_invocations to use "
                "Built-in tools with Function calling."
            )
        return None

    def _contents_refusal(self, contents: Any) -> RawReply | None:
        """The API's 400s for ``contents``: none at all; a content without parts; a part with
        no data (``{"text": ""}`` counts as none, unless it carries a thought signature, as
        Gemini's own closing parts do); a turn mixing function calls and responses; a
        function call turn that does not follow a user turn (a function response turn is
        one); a function response turn that does not follow a function call turn, or whose
        number of responses differs from that turn's number of calls."""
        if not contents:
            return self._refuse("* GenerateContentRequest.contents: contents is not specified\n")
        if not isinstance(contents, list):
            return None
        previous_role: str | None = None
        previous_calls = 0
        for index, content in enumerate(contents):
            if not isinstance(content, dict):
                continue
            parts = content.get("parts")
            where = f"* GenerateContentRequest.contents[{index}].parts"
            if not parts:
                return self._refuse(f"{where}: contents.parts must not be empty.\n")
            if not isinstance(parts, list):
                continue
            for position, part in enumerate(parts):
                if isinstance(part, dict) and not self._has_data(part):
                    return self._refuse(
                        f"{where}[{position}].data: required oneof field 'data' must have one "
                        "initialized field\n"
                    )
            calls = sum(1 for p in parts if isinstance(p, dict) and "functionCall" in p)
            responses = sum(1 for p in parts if isinstance(p, dict) and "functionResponse" in p)
            role = content.get("role") or "user"
            if calls and responses:
                return self._refuse(
                    "Please ensure that function call turn contains at least one function_call "
                    "part which can not be mixed with function_response parts."
                )
            if calls and previous_role != "user":
                return self._refuse(
                    "Please ensure that function call turn comes immediately after a user turn "
                    "or after a function response turn."
                )
            if responses and not previous_calls:
                return self._refuse(
                    "Please ensure that function response turn comes immediately after a "
                    "function call turn."
                )
            if responses and responses != previous_calls:
                return self._refuse(
                    "Please ensure that the number of function response parts is equal to the "
                    "number of function call parts of the function call turn."
                )
            previous_role, previous_calls = role, calls
        return None

    def _signature_refusal(self, contents: list[Any]) -> RawReply | None:
        """Gemini 3's 400 for a step of the current turn (the contents after the last user
        message that is not function responses) whose first function call has no signature."""
        start = 0
        for index, content in enumerate(contents):
            parts = content.get("parts") if isinstance(content, dict) else None
            if (
                isinstance(parts, list)
                and (content.get("role") or "user") == "user"
                and not any(isinstance(p, dict) and "functionResponse" in p for p in parts)
            ):
                start = index + 1
        for index in range(start, len(contents)):
            parts = contents[index].get("parts") if isinstance(contents[index], dict) else None
            calls = [p for p in parts or [] if isinstance(p, dict) and "functionCall" in p]
            if calls and not {"thoughtSignature", "thought_signature"} & set(calls[0]):
                name = calls[0]["functionCall"].get("name")
                return self._refuse(
                    "Function call is missing a thought_signature in functionCall parts. This "
                    "is required for tools to work correctly, and missing thought_signature may "
                    "lead to degraded model performance. Additional data, function call "
                    f"`default_api:{name}`, position {index}. Please refer to "
                    "https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
                )
        return None

    @staticmethod
    def _has_data(part: dict[str, Any]) -> bool:
        if "thoughtSignature" in part or "thought_signature" in part:
            return True
        data = set(part) - _GEMINI_PART_METADATA
        return (bool(data) and data != {"text"}) or bool(part.get("text"))

    def _refuse(self, message: str) -> RawReply:
        return RawReply(status=400, body=_json_bytes(self.error_body(400, message)))

    def render_json(self, turn: ScriptedTurn, request: RecordedRequest) -> Any:
        if self._streamed_as_array(request):
            # streamGenerateContent without alt=sse: the chunks as one JSON array.
            return [
                self._chunk(turn, request, parts, last)
                for parts, last in self._stream_parts(turn, request)
            ]
        parts: list[dict[str, Any]] = []
        if turn.thoughts:
            parts.append({"text": "".join(turn.thoughts), "thought": True})
        parts.extend(self._server_tool_parts(turn, request))
        parts.extend(self._code_parts(turn))
        if turn.text_deltas:
            parts.append({"text": "".join(turn.text_deltas)})
        parts.extend(self._call_parts(turn))
        self._sign(turn, request, parts)
        return self._chunk(turn, request, parts, last=True)

    def render_stream(self, turn: ScriptedTurn, request: RecordedRequest) -> list[bytes]:
        return [
            b"data: " + _json_bytes(self._chunk(turn, request, parts, last)) + b"\r\n\r\n"
            for parts, last in self._stream_parts(turn, request)
        ]

    def _stream_parts(
        self, turn: ScriptedTurn, request: RecordedRequest
    ) -> list[tuple[list[dict[str, Any]], bool]]:
        """The parts of each streamed chunk, and whether it is the last."""
        chunks: list[list[dict[str, Any]]] = [
            [{"text": thought, "thought": True}] for thought in turn.thoughts
        ]
        chunks.extend([part] for part in self._server_tool_parts(turn, request))
        chunks.extend([part] for part in self._code_parts(turn))
        chunks.extend([{"text": text}] for text in turn.text_deltas)
        if turn.tool_calls:
            chunks.append(self._call_parts(turn))
        if not chunks:
            chunks.append([{"text": ""}])
        self._sign(turn, request, chunks[-1])
        return [(parts, index == len(chunks) - 1) for index, parts in enumerate(chunks)]

    def render_stream_error(self, message: str) -> bytes:
        return b"data: " + _json_bytes(self.error_body(500, message)) + b"\r\n\r\n"

    def error_body(self, status: int, message: str) -> Any:
        return {
            "error": {
                "code": status,
                "message": message,
                "status": _GOOGLE_STATUS.get(status, "UNKNOWN"),
            }
        }


# --------------------------------------------------------------------------- OpenAI

_OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
}


#: The function names OpenAI's APIs take (Chat Completions and Responses): the pattern its
#: 400 names, and at most 64 characters (another 400).
_OPENAI_FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]+")
_OPENAI_FUNCTION_NAME_MAX = 64


def _openai_name_refusal(name: Any, where: str) -> tuple[str, str] | None:
    """OpenAI's 400 (message, code) for a function ``name`` at ``where``, or ``None``."""
    if not isinstance(name, str) or not _OPENAI_FUNCTION_NAME.fullmatch(name):
        return (
            f"Invalid '{where}': string does not match pattern. Expected a string that "
            "matches the pattern '^[a-zA-Z0-9_-]+$'.",
            "invalid_value",
        )
    if len(name) > _OPENAI_FUNCTION_NAME_MAX:
        return (
            f"Invalid '{where}': string too long. Expected a string with maximum length "
            f"{_OPENAI_FUNCTION_NAME_MAX}, but got a string with length {len(name)} instead.",
            "string_above_max_length",
        )
    return None


class FakeOpenAI(FakeProviderServer):
    """``POST /v1/chat/completions``, plain and streamed (with ``stream_options``)."""

    provider = "openai"
    default_model = "gpt-4o-mini"
    unparsable_message = (
        "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
        "using your HTTP library correctly. The OpenAI API expects a JSON payload, but what "
        "was sent was not valid JSON.)"
    )
    route = re.compile(r"POST /v1/chat/completions")

    def make_model(self, **kwargs: Any) -> OpenAIModel:
        kwargs.setdefault("api_key", "test-openai-key")
        return OpenAIModel(kwargs.pop("model", self.model_name), base_url=self.base_url, **kwargs)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def is_stream(self, request: RecordedRequest) -> bool:
        return bool(request.json().get("stream"))

    @staticmethod
    def _finish(turn: ScriptedTurn) -> str:
        return {"length": "length", "tool_calls": "tool_calls", "safety": "content_filter"}.get(
            turn.finish_kind, "stop"
        )

    @staticmethod
    def _usage(turn: ScriptedTurn) -> dict[str, Any]:
        return {
            "prompt_tokens": turn.input_tokens,
            "completion_tokens": turn.output_tokens,
            "total_tokens": turn.input_tokens + turn.output_tokens,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        }

    def _envelope(self, turn: ScriptedTurn, request: RecordedRequest, kind: str) -> dict[str, Any]:
        return {
            "id": "chatcmpl-fake",
            "object": kind,
            "created": 1_700_000_000,
            "model": turn.model or self.requested_model(request),
            "system_fingerprint": "fp_fake",
        }

    def render_json(self, turn: ScriptedTurn, request: RecordedRequest) -> Any:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(turn.text_deltas) or None,
            "refusal": None,
        }
        if turn.thoughts:
            message["reasoning_content"] = "".join(turn.thoughts)
        if turn.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id or f"call_{index}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.args)},
                }
                for index, call in enumerate(turn.tool_calls)
            ]
        return {
            **self._envelope(turn, request, "chat.completion"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self._finish(turn),
                }
            ],
            "usage": self._usage(turn),
        }

    def render_stream(self, turn: ScriptedTurn, request: RecordedRequest) -> list[bytes]:
        envelope = self._envelope(turn, request, "chat.completion.chunk")
        include_usage = bool((request.json().get("stream_options") or {}).get("include_usage"))

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            body = {
                **envelope,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
            if include_usage:
                body["usage"] = None  # the API's: every chunk but the last has a null usage
            return b"data: " + _json_bytes(body) + b"\n\n"

        records = [chunk({"role": "assistant", "content": "", "refusal": None})]
        records.extend(chunk({"reasoning_content": thought}) for thought in turn.thoughts)
        records.extend(chunk({"content": text}) for text in turn.text_deltas)
        for index, call in enumerate(turn.tool_calls):
            records.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call.id or f"call_{index}",
                                "type": "function",
                                "function": {"name": call.name, "arguments": ""},
                            }
                        ]
                    }
                )
            )
            for fragment in _split_text(json.dumps(call.args), turn.argument_chunks):
                records.append(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
                )
        records.append(chunk({}, self._finish(turn)))
        if include_usage:
            usage = {**envelope, "choices": [], "usage": self._usage(turn)}
            records.append(b"data: " + _json_bytes(usage) + b"\n\n")
        records.append(b"data: [DONE]\n\n")
        return records

    def refusal(self, request: RecordedRequest) -> RawReply | None:
        """Chat Completions' 400s for a function name outside ``^[a-zA-Z0-9_-]{1,64}$`` (in
        ``tools`` and in the history's ``tool_calls``), and for tool messages out of place: an
        assistant message's ``tool_calls`` must each be answered by the ``tool`` messages right
        after it, and a ``tool`` message must answer a call of the assistant message before
        those."""
        try:
            body = request.json()
            messages = body.get("messages")
        except (ValueError, AttributeError):
            return None
        named = self._name_refusal(body.get("tools"), messages)
        if named is not None:
            return named
        if not isinstance(messages, list):
            return None
        open_calls: list[Any] = []  # ids of the last assistant message's calls
        answered: set[str] = set()
        for index, message in enumerate(messages):
            role = message.get("role") if isinstance(message, dict) else None
            if role == "tool":
                call_id = message.get("tool_call_id")
                if call_id not in open_calls:
                    return self._refuse(
                        "Invalid parameter: messages with role 'tool' must be a response to a "
                        "preceeding message with 'tool_calls'.",
                        f"messages.[{index}].role",
                    )
                answered.add(call_id)
                continue
            missing = [call_id for call_id in open_calls if call_id not in answered]
            if missing:
                return self._unanswered(missing, index)
            open_calls, answered = [], set()
            if role == "assistant":
                open_calls = [
                    call.get("id")
                    for call in message.get("tool_calls") or []
                    if isinstance(call, dict)
                ]
        missing = [call_id for call_id in open_calls if call_id not in answered]
        if missing:
            return self._unanswered(missing, len(messages))
        return None

    def _name_refusal(self, tools: Any, messages: Any) -> RawReply | None:
        named: list[tuple[str, Any]] = [
            (f"tools[{index}].function.name", tool["function"].get("name"))
            for index, tool in enumerate(tools if isinstance(tools, list) else [])
            if isinstance(tool, dict) and isinstance(tool.get("function"), dict)
        ]
        for index, message in enumerate(messages if isinstance(messages, list) else []):
            calls = message.get("tool_calls") if isinstance(message, dict) else None
            for position, call in enumerate(calls if isinstance(calls, list) else []):
                if isinstance(call, dict) and isinstance(call.get("function"), dict):
                    where = f"messages[{index}].tool_calls[{position}].function.name"
                    named.append((where, call["function"].get("name")))
        for where, name in named:
            refused = _openai_name_refusal(name, where)
            if refused is not None:
                message, code = refused
                body = self.error_body(400, message)
                body["error"].update(param=where, code=code)
                return RawReply(status=400, body=_json_bytes(body))
        return None

    def _unanswered(self, missing: list[Any], index: int) -> RawReply:
        return self._refuse(
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(map(str, missing))}",
            f"messages.[{index}].role",
        )

    def _refuse(self, message: str, param: str) -> RawReply:
        body = self.error_body(400, message)
        body["error"]["param"] = param
        return RawReply(status=400, body=_json_bytes(body))

    def render_stream_error(self, message: str) -> bytes:
        return b"data: " + _json_bytes(self.error_body(500, message)) + b"\n\n"

    def error_body(self, status: int, message: str) -> Any:
        return {
            "error": {
                "message": message,
                "type": _OPENAI_ERROR_TYPES.get(status, "server_error"),
                "param": None,
                "code": None,
            }
        }


# --------------------------------------------------------------------------- Anthropic

_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


#: The fields of a server tool's result block (``*_tool_result``) the Messages API takes back.
_SERVER_RESULT_FIELDS = frozenset({"type", "tool_use_id", "content", "cache_control"})

#: What the Messages API takes as a ``tool_use`` block's id (and a ``tool_result``'s).
_TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]+")
#: The names the Messages API takes for a custom tool and in a ``tool_use`` block.
_ANTHROPIC_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")

#: What a thinking signature the Messages API issued looks like (the fake cannot check it).
_ISSUED_SIGNATURE = re.compile(r"[A-Za-z0-9+/_-]+={0,2}")


@dataclass
class ScriptedPausedTurn(ScriptedTurn):
    """A :class:`FakeAnthropic` turn the Messages API pauses (``stop_reason: "pause_turn"``,
    as it does in a long server-tool turn): its blocks (``native`` tool use and results, text)
    are sent, and the server then expects the client to continue it: the next request must
    end with an assistant message ending in the paused content, else it is refused (400)."""


class FakeAnthropic(FakeProviderServer):
    """``POST /v1/messages``, plain and streamed with every SSE event type.

    A :class:`ScriptedPausedTurn` stops with ``pause_turn``; the request after it must carry
    the paused content back (what all paused turns since the last finished one sent).
    """

    provider = "anthropic"
    default_model = "claude-sonnet-4-5"
    unparsable_message = "There was an error parsing the body: it is not a JSON object"
    route = re.compile(r"POST /v1/messages")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The paused content the next request must end with, after a pause_turn.
        self._paused: list[dict[str, Any]] | None = None

    def _note_turn(self, turn: ScriptedTurn, content: list[dict[str, Any]]) -> None:
        if isinstance(turn, ScriptedPausedTurn):
            self._paused = [*(self._paused or []), *content]
        else:
            self._paused = None

    def make_model(self, **kwargs: Any) -> AnthropicModel:
        kwargs.setdefault("api_key", "test-anthropic-key")
        return AnthropicModel(
            kwargs.pop("model", self.model_name), base_url=self.base_url, **kwargs
        )

    def is_stream(self, request: RecordedRequest) -> bool:
        return bool(request.json().get("stream"))

    @staticmethod
    def _stop_reason(turn: ScriptedTurn) -> str:
        if isinstance(turn, ScriptedPausedTurn):
            return "pause_turn"
        return {"length": "max_tokens", "tool_calls": "tool_use", "safety": "refusal"}.get(
            turn.finish_kind, "end_turn"
        )

    @staticmethod
    def _signature(turn: ScriptedTurn) -> str:
        return turn.thought_signature.decode() if turn.thought_signature else "c2lnbmF0dXJl"

    def render_json(self, turn: ScriptedTurn, request: RecordedRequest) -> Any:
        message = self._message(turn, request)
        self._note_turn(turn, message["content"])
        return message

    def _message(self, turn: ScriptedTurn, request: RecordedRequest) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if turn.thoughts:
            content.append(
                {
                    "type": "thinking",
                    "thinking": "".join(turn.thoughts),
                    "signature": self._signature(turn),
                }
            )
        for use, result in self._server_blocks(turn, len(self.requests)):
            content.append(use)
            content.append(result)
        if turn.citations:
            for text, citation in self._text_blocks(turn):
                block: dict[str, Any] = {"type": "text", "text": text}
                if citation is not None:
                    block["citations"] = [citation]
                content.append(block)
        elif turn.text_deltas:
            content.append({"type": "text", "text": "".join(turn.text_deltas)})
        content.extend(
            {
                "type": "tool_use",
                "id": call.id or f"toolu_{index:02d}",
                "name": call.name,
                "input": call.args,
            }
            for index, call in enumerate(turn.tool_calls)
        )
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": turn.model or self.requested_model(request),
            "content": content,
            "stop_reason": self._stop_reason(turn),
            "stop_sequence": None,
            "usage": {"input_tokens": turn.input_tokens, "output_tokens": turn.output_tokens},
        }

    def render_stream(self, turn: ScriptedTurn, request: RecordedRequest) -> list[bytes]:
        # The streamed blocks are the plain message's, in deltas.
        self._note_turn(turn, self._message(turn, request)["content"])

        def event(kind: str, data: dict[str, Any]) -> bytes:
            return f"event: {kind}\ndata: ".encode() + _json_bytes({"type": kind, **data}) + b"\n\n"

        records = [
            event(
                "message_start",
                {
                    "message": {
                        "id": "msg_fake",
                        "type": "message",
                        "role": "assistant",
                        "model": turn.model or self.requested_model(request),
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {"input_tokens": turn.input_tokens, "output_tokens": 1},
                    }
                },
            ),
            event("ping", {}),
        ]
        index = 0

        def block(start: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
            nonlocal index
            records.append(event("content_block_start", {"index": index, "content_block": start}))
            records.extend(
                event("content_block_delta", {"index": index, "delta": delta}) for delta in deltas
            )
            records.append(event("content_block_stop", {"index": index}))
            index += 1

        if turn.thoughts:
            block(
                {"type": "thinking", "thinking": ""},
                [{"type": "thinking_delta", "thinking": t} for t in turn.thoughts]
                + [{"type": "signature_delta", "signature": self._signature(turn)}],
            )
        for use, result in self._server_blocks(turn, len(self.requests)):
            block(
                {**use, "input": {}},
                [{"type": "input_json_delta", "partial_json": json.dumps(use["input"])}],
            )
            block(result, [])
        if turn.citations:
            for text, citation in self._text_blocks(turn):
                deltas: list[dict[str, Any]] = []
                if citation is not None:
                    deltas.append({"type": "citations_delta", "citation": citation})
                deltas.append({"type": "text_delta", "text": text})
                block({"type": "text", "text": ""}, deltas)
        elif turn.text_deltas:
            block(
                {"type": "text", "text": ""},
                [{"type": "text_delta", "text": t} for t in turn.text_deltas],
            )
        for call_index, call in enumerate(turn.tool_calls):
            fragments = ["", *_split_text(json.dumps(call.args), turn.argument_chunks)]
            block(
                {
                    "type": "tool_use",
                    "id": call.id or f"toolu_{call_index:02d}",
                    "name": call.name,
                    "input": {},
                },
                [{"type": "input_json_delta", "partial_json": f} for f in fragments],
            )
        records.append(
            event(
                "message_delta",
                {
                    "delta": {"stop_reason": self._stop_reason(turn), "stop_sequence": None},
                    "usage": {"output_tokens": turn.output_tokens},
                },
            )
        )
        records.append(event("message_stop", {}))
        return records

    @staticmethod
    def _server_blocks(
        turn: ScriptedTurn, request_number: int
    ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """Each native tool use of the turn as the Messages API reports it: a
        ``server_tool_use`` block and its ``*_tool_result`` block (ids unique to the request)."""
        blocks: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for index, item in enumerate(turn.native):
            use_id = f"srvtoolu_{request_number:02d}{index:02d}"
            use: dict[str, Any] = {"type": "server_tool_use", "id": use_id}
            result: dict[str, Any] = {"tool_use_id": use_id}
            if isinstance(item, ScriptedWebSearch):
                use.update(name="web_search", input={"query": item.query})
                result["type"] = "web_search_tool_result"
                result["content"] = [
                    {
                        "type": "web_search_result",
                        "url": page.url,
                        "title": page.title,
                        "encrypted_content": "RW5jcnlwdGVkIHBhZ2U=",
                        "page_age": None,
                    }
                    for page in item.results
                ]
            elif isinstance(item, ScriptedUrlFetch):
                use.update(name="web_fetch", input={"url": item.url})
                result["type"] = "web_fetch_tool_result"
                result["content"] = {
                    "type": "web_fetch_result",
                    "url": item.url,
                    "content": {
                        "type": "document",
                        "source": {"type": "text", "media_type": "text/plain", "data": "page"},
                        "title": item.title,
                    },
                    "retrieved_at": "2025-09-10T12:00:00Z",
                }
            else:
                use.update(name="bash_code_execution", input={"command": item.code})
                result["type"] = "bash_code_execution_tool_result"
                result["content"] = {
                    "type": "bash_code_execution_result",
                    "stdout": item.output,
                    "stderr": "",
                    "return_code": 1 if item.failed else 0,
                    "content": [],
                }
            blocks.append((use, result))
        return blocks

    @staticmethod
    def _text_blocks(turn: ScriptedTurn) -> list[tuple[str, dict[str, Any] | None]]:
        """The turn's text cut into blocks at its citations: a cited span is a block of its
        own carrying its ``web_search_result_location`` citation."""
        text = "".join(turn.text_deltas)
        titles = {page.url: page.title for page in turn.pages()}
        blocks: list[tuple[str, dict[str, Any] | None]] = []
        position = 0
        for start, end, citation in turn.cited_spans():
            if start > position:
                blocks.append((text[position:start], None))
            blocks.append(
                (
                    text[start:end],
                    {
                        "type": "web_search_result_location",
                        "url": citation.url,
                        "title": titles.get(citation.url, ""),
                        "encrypted_index": "RW5jcnlwdGVkIGluZGV4",
                        "cited_text": citation.cited_text,
                    },
                )
            )
            position = max(position, end)
        if position < len(text):
            blocks.append((text[position:], None))
        return blocks

    def refusal(self, request: RecordedRequest) -> RawReply | None:
        """The Messages API's 400s for a history it does not take: a message with no content
        (but a final assistant one), an empty or whitespace-only text block, a thinking
        block without a signature it issued (here: base64 text), a tool id outside
        ``[a-zA-Z0-9_-]+``, and tool blocks out of place: every ``tool_use`` block of an
        assistant message needs a ``tool_result`` block in the very next message, ahead of
        its other blocks, and a ``tool_result`` block must
        answer a ``tool_use`` of the message before it; a server tool's result block
        (``*_tool_result``) must follow its ``server_tool_use`` in the same assistant turn and
        hold its ``content`` and no field the API does not know.
        Consecutive messages of one role are not refused: the API joins them into one turn. A
        request without ``max_tokens`` is refused (the API has no default). After a
        ``pause_turn``, a request that does not continue the paused content is refused too
        (the fake's check: the API would start a new turn instead)."""
        try:
            body = request.json()
        except ValueError:
            return None
        if not isinstance(body, dict):
            return None
        if "max_tokens" not in body:
            # The Messages API has no default for it.
            return self._refuse("max_tokens: Field required")
        messages = body.get("messages")
        if not isinstance(messages, list):
            return None
        return (
            self._name_refusal(body.get("tools"), messages)
            or self._content_refusal(messages)
            or self._tool_refusal(messages)
            or self._server_tool_refusal(messages)
            or self._continuation_refusal(messages)
        )

    def _name_refusal(self, tools: Any, messages: list[Any]) -> RawReply | None:
        """The 400 for a tool name outside ``^[a-zA-Z0-9_-]{1,128}$``: a custom tool's (a
        server tool has ``type``, and a fixed name) or a ``tool_use`` block's."""
        named: list[tuple[str, Any]] = [
            (f"tools.{index}.custom.name", tool.get("name"))
            for index, tool in enumerate(tools if isinstance(tools, list) else [])
            if isinstance(tool, dict) and tool.get("type", "custom") == "custom"
        ]
        for index, message in enumerate(messages):
            blocks = message.get("content") if isinstance(message, dict) else None
            for position, block in enumerate(blocks if isinstance(blocks, list) else []):
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    where = f"messages.{index}.content.{position}.tool_use.name"
                    named.append((where, block.get("name")))
        for where, name in named:
            if not isinstance(name, str) or not _ANTHROPIC_TOOL_NAME.fullmatch(name):
                return self._refuse(
                    f"{where}: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
                )
        return None

    def _server_tool_refusal(self, messages: list[Any]) -> RawReply | None:
        uses: set[Any] = set()
        previous_role = None
        for index, message in enumerate(messages):
            if not isinstance(message, dict) or not isinstance(message.get("content"), list):
                continue
            role = message.get("role")
            if role != previous_role:
                uses = set()  # a turn's server tool blocks pair up inside the turn
            previous_role = role
            for position, block in enumerate(message["content"]):
                if not isinstance(block, dict):
                    continue
                kind = str(block.get("type", ""))
                if kind == "server_tool_use" and role == "assistant":
                    uses.add(block.get("id"))
                elif kind.endswith("_tool_result") and kind != "tool_result":
                    if block.get("tool_use_id") not in uses:
                        return self._refuse(
                            f"messages.{index}.content.{position}: `{kind}` block with "
                            f"tool_use_id `{block.get('tool_use_id')}` has no corresponding "
                            "`server_tool_use` block before it in the assistant turn"
                        )
                    where = f"messages.{index}.content.{position}.{kind}"
                    if "content" not in block:
                        return self._refuse(f"{where}.content: Field required")
                    extra = sorted(set(block) - _SERVER_RESULT_FIELDS)
                    if extra:
                        return self._refuse(f"{where}.{extra[0]}: Extra inputs are not permitted")
        return None

    def _continuation_refusal(self, messages: list[Any]) -> RawReply | None:
        paused = self._paused
        if paused is None:
            return None
        last = messages[-1] if messages else None
        content = last.get("content") if isinstance(last, dict) else None
        if (
            isinstance(last, dict)
            and last.get("role") == "assistant"
            and isinstance(content, list)
            and content[len(content) - len(paused) :] == paused
        ):
            return None
        return self._refuse(
            "fake server: the turn was paused (stop_reason pause_turn): the next request "
            "must end with an assistant message ending in the paused content"
        )

    def _content_refusal(self, messages: list[Any]) -> RawReply | None:
        for index, message in enumerate(messages):
            if not isinstance(message, dict):
                continue
            content = message.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            if not isinstance(blocks, list):
                continue
            final_assistant = index == len(messages) - 1 and message.get("role") == "assistant"
            if not blocks and not final_assistant:
                return self._refuse(
                    f"messages.{index}: all messages must have non-empty content except for "
                    "the optional final assistant message"
                )
            for position, block in enumerate(blocks):
                refused = self._block_refusal(index, position, block)
                if refused is not None:
                    return self._refuse(refused)
        return None

    @staticmethod
    def _block_refusal(index: int, position: int, block: Any) -> str | None:
        if not isinstance(block, dict):
            return None
        if block.get("type") == "text":
            text = block.get("text")
            if not text:
                return "messages: text content blocks must be non-empty"
            if isinstance(text, str) and text.isspace():
                return "messages: text content blocks must contain non-whitespace text"
        for kind, key in (("tool_use", "id"), ("tool_result", "tool_use_id")):
            value = block.get(key)
            if block.get("type") == kind and not (
                isinstance(value, str) and _TOOL_USE_ID.fullmatch(value)
            ):
                return (
                    f"messages.{index}.content.{position}.{kind}.{key}: String should match "
                    f"pattern '^[a-zA-Z0-9_-]+$'"
                )
        if block.get("type") == "thinking":
            signature = block.get("signature")
            if not isinstance(signature, str) or not _ISSUED_SIGNATURE.fullmatch(signature):
                where = f"messages.{index}.content.{position}"
                return f"{where}: Invalid `signature` in `thinking` block"
        return None

    def _tool_refusal(self, messages: list[Any]) -> RawReply | None:
        previous_uses: list[str] = []
        for index, message in enumerate(messages):
            blocks = message.get("content") if isinstance(message, dict) else None
            blocks = [b for b in blocks if isinstance(b, dict)] if isinstance(blocks, list) else []
            results = [
                (position, block.get("tool_use_id"))
                for position, block in enumerate(blocks)
                if block.get("type") == "tool_result"
            ]
            for position, use_id in results:
                if use_id not in previous_uses:
                    return self._refuse(
                        f"messages.{index}.content.{position}: unexpected `tool_use_id` found "
                        f"in `tool_result` blocks: {use_id}. Each `tool_result` block must have "
                        "a corresponding `tool_use` block in the previous message."
                    )
            answered = {use_id for _, use_id in results}
            missing = [use_id for use_id in previous_uses if use_id not in answered]
            if previous_uses and results and results[-1][0] != len(results) - 1:
                # The results must lead their message: one after another block is not
                # "immediately after" its tool_use.
                missing = previous_uses
            if missing:
                return self._unanswered(missing, index - 1)
            previous_uses = [
                block.get("id")
                for block in blocks
                if block.get("type") == "tool_use" and message.get("role") == "assistant"
            ]
        if previous_uses:
            return self._unanswered(previous_uses, len(messages) - 1)
        return None

    def _unanswered(self, missing: list[Any], index: int) -> RawReply:
        return self._refuse(
            f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
            f"immediately after: {', '.join(map(str, missing))}. Each `tool_use` block must have a "
            "corresponding `tool_result` block in the next message."
        )

    def _refuse(self, message: str) -> RawReply:
        return RawReply(status=400, body=_json_bytes(self.error_body(400, message)))

    def render_stream_error(self, message: str) -> bytes:
        body = {"type": "error", "error": {"type": "overloaded_error", "message": message}}
        return b"event: error\ndata: " + _json_bytes(body) + b"\n\n"

    def error_body(self, status: int, message: str) -> Any:
        return {
            "type": "error",
            "error": {"type": _ANTHROPIC_ERROR_TYPES.get(status, "api_error"), "message": message},
        }


# --------------------------------------------------------------------------- Ollama


class FakeOllama(FakeProviderServer):
    """``POST /api/chat``; streams NDJSON unless the request says ``"stream": false``."""

    provider = "ollama"
    default_model = "llama3.2"
    unparsable_message = "invalid request body: not a JSON object"
    route = re.compile(r"POST /api/chat")
    stream_content_type = "application/x-ndjson"

    def make_model(self, **kwargs: Any) -> OllamaModel:
        return OllamaModel(kwargs.pop("model", self.model_name), host=self.base_url, **kwargs)

    def is_stream(self, request: RecordedRequest) -> bool:
        return request.json().get("stream", True) is not False

    @staticmethod
    def _done_reason(turn: ScriptedTurn) -> str:
        return "length" if turn.finish_kind == "length" else "stop"

    def _line(self, turn: ScriptedTurn, request: RecordedRequest, **fields: Any) -> dict[str, Any]:
        return {
            "model": turn.model or self.requested_model(request),
            "created_at": "2025-01-01T00:00:00.000000Z",
            **fields,
        }

    def _done(self, turn: ScriptedTurn, request: RecordedRequest, message: dict[str, Any]) -> Any:
        return self._line(
            turn,
            request,
            message=message,
            done=True,
            done_reason=self._done_reason(turn),
            total_duration=1_000_000,
            load_duration=1_000,
            prompt_eval_count=turn.input_tokens,
            prompt_eval_duration=1_000,
            eval_count=turn.output_tokens,
            eval_duration=1_000,
        )

    @staticmethod
    def _calls(turn: ScriptedTurn) -> list[dict[str, Any]]:
        return [{"function": {"name": c.name, "arguments": c.args}} for c in turn.tool_calls]

    def render_json(self, turn: ScriptedTurn, request: RecordedRequest) -> Any:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(turn.text_deltas)}
        if turn.thoughts:
            message["thinking"] = "".join(turn.thoughts)
        if turn.tool_calls:
            message["tool_calls"] = self._calls(turn)
        return self._done(turn, request, message)

    def render_stream(self, turn: ScriptedTurn, request: RecordedRequest) -> list[bytes]:
        lines: list[Any] = [
            self._line(
                turn,
                request,
                message={"role": "assistant", "content": "", "thinking": thought},
                done=False,
            )
            for thought in turn.thoughts
        ]
        lines.extend(
            self._line(turn, request, message={"role": "assistant", "content": text}, done=False)
            for text in turn.text_deltas
        )
        if turn.tool_calls:
            lines.append(
                self._line(
                    turn,
                    request,
                    message={"role": "assistant", "content": "", "tool_calls": self._calls(turn)},
                    done=False,
                )
            )
        lines.append(self._done(turn, request, {"role": "assistant", "content": ""}))
        return [_json_bytes(line) + b"\n" for line in lines]

    def render_stream_error(self, message: str) -> bytes:
        return _json_bytes({"error": message}) + b"\n"

    def error_body(self, status: int, message: str) -> Any:
        return {"error": message}
