"""Shared HTTP plumbing for the providers: one lazy ``httpx.AsyncClient`` per model, retries
with bounded exponential backoff, stream framing (SSE through ``httpx-sse``, NDJSON here),
error extraction and the base class every HTTP provider builds on.

Retries follow one :class:`RetryPolicy`, in one loop for plain and streamed requests: HTTP
408, 429 and 5xx (except 501) and connection failures (connect errors, resets, timeouts). They
happen only before the first record of a streamed body was handed out, so a caller never sees
a response twice. ``Retry-After`` (seconds or an HTTP date) and ``retry-after-ms`` are
honoured, else the ``google.rpc.RetryInfo`` ``retryDelay`` of a Google error body (Gemini's
429 sends no header), capped by ``max_retry_after``; otherwise the delay is "full jitter":
uniform in ``[0, min(max_backoff, initial_backoff * 2**retry)]``. A wait that would outlast
the deadline of the mesh call being served (:data:`adk_mesh.contexts.serving_deadline`) is not
waited: the failure is raised at once.

API keys live in :class:`Secret` (its repr is ``'***'``), go only into request headers, and
every message we build is passed through :func:`redact` before it reaches an exception or a
log line.
"""

from __future__ import annotations

import abc
import asyncio
import codecs
import email.utils
import json
import logging
import math
import os
import random
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, ClassVar, Final, Literal, ParamSpec, Protocol, TypeVar

import httpx
from httpx_sse import EventSource, SSEError

from adk_mesh.contexts import serving_deadline
from adk_mesh.credentials._redaction import redact_http_logs
from adk_mesh.errors import AdkError, ConfigError, ModelError, model_error
from adk_mesh.models._convert import ToolNames
from adk_mesh.models.base import Llm, LlmRequest
from adk_mesh.telemetry._propagation import trace_headers
from adk_mesh.types import (
    Content,
    FinishReason,
    GroundingMetadata,
    LlmResponse,
    Part,
    UsageMetadata,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "HttpLlm",
    "HttpTransport",
    "LineDecoder",
    "PartsBuilder",
    "RetryPolicy",
    "Secret",
    "SecretHeader",
    "StreamParser",
    "StreamRecord",
    "WireRequest",
    "error_message_from_body",
    "load_json",
    "make_usage",
    "ndjson_records",
    "parse_arguments",
    "parse_retry_after",
    "partial_text",
    "redact",
    "retry_info_delay",
    "sse_records",
]

logger = logging.getLogger("adk_mesh.models")

_T = TypeVar("_T")
_P = ParamSpec("_P")

#: connect / write / pool timeouts are short; the read timeout is long because a model may
#: think for minutes before its first byte.
DEFAULT_TIMEOUT: Final = httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=60.0)

_RETRYABLE_TRANSPORT_ERRORS: Final = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
)


# --------------------------------------------------------------------------- secrets


class Secret:
    """An API key (or any credential) that never shows up in a repr, str or log line."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not value or any(ch.isspace() or ord(ch) < 0x20 for ch in value):
            # The value itself must not appear in the message: it is the secret.
            raise ConfigError("API key is empty or contains whitespace or control characters")
        self._value = value

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def api_key_secret(api_key: str | None, *variables: str) -> Secret | None:
    """The API key given, else the first of the environment ``variables`` set, as a
    :class:`Secret`; ``None`` when there is none. A variable's one trailing newline is
    dropped (one set from a file, such as a Kubernetes Secret made with ``--from-file``,
    keeps the file's); a key that is still not one names where it came from.

    Raises:
        ConfigError: the key holds whitespace or control characters.
    """
    if api_key:
        return Secret(api_key)
    for variable in variables:
        value = os.environ.get(variable, "").removesuffix("\n").removesuffix("\r")
        if value:
            try:
                return Secret(value)
            except ConfigError:
                raise ConfigError(
                    f"${variable} is not an API key: it contains whitespace or control characters"
                ) from None
    return None


@dataclass(frozen=True)
class SecretHeader:
    """A header whose value holds a secret: ``scheme`` + the secret (e.g. ``"Bearer "``)."""

    secret: Secret
    scheme: str = ""

    def value(self) -> str:
        return f"{self.scheme}{self.secret.get()}"


def redact(text: str, secrets: Iterable[Secret | None]) -> str:
    """``text`` with every occurrence of each secret replaced by ``***``."""
    for secret in secrets:
        if secret is not None and secret.get() in text:
            text = text.replace(secret.get(), "***")
    return text


# --------------------------------------------------------------------------- retries


async def _sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before a failed attempt is tried again: the one policy every
    provider request follows (plain and streamed alike).

    Retried: HTTP 408, 429 and 5xx except 501, and connection failures (connect errors,
    resets, timeouts, protocol errors). Anything else (another 4xx, 501, a malformed body)
    fails at once.

    The wait before retry ``n`` (0-based) is the server's ``retry-after-ms`` or ``Retry-After``
    (delta-seconds or an HTTP date), or the ``retryDelay`` of a Google error body's
    ``google.rpc.RetryInfo``, capped by ``max_retry_after``; without one it is "full
    jitter", uniform in ``[0, min(max_backoff, initial_backoff * 2**n)]``. A wait that would
    not end before the call's deadline is not waited: the last failure is raised instead.

    Attributes:
        max_attempts: total attempts, the first one included (1 disables retries).
        initial_backoff: the backoff cap of the first retry, in seconds; doubles per retry.
        max_backoff: the largest backoff cap, in seconds.
        max_retry_after: the longest server-requested wait honoured; longer ones are cut to
            it. It is apart from ``max_backoff`` because a server that asks for 30 s and is
            called again after 8 s answers 429 again.
        sleep: how to wait (tests inject one that records the delays and returns at once).
        uniform: the random source of the jitter, ``random.uniform``'s signature.
        clock: the wall clock (``time.time``) an HTTP-date ``Retry-After`` is measured from.
    """

    max_attempts: int = 3
    initial_backoff: float = 0.5
    max_backoff: float = 8.0
    max_retry_after: float = 60.0
    sleep: Callable[[float], Awaitable[None]] = field(default=_sleep, repr=False, compare=False)
    uniform: Callable[[float, float], float] = field(
        default=random.uniform, repr=False, compare=False
    )
    clock: Callable[[], float] = field(default=time.time, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError("RetryPolicy.max_attempts must be at least 1")
        delays = (self.initial_backoff, self.max_backoff, self.max_retry_after)
        if not all(math.isfinite(value) and value >= 0 for value in delays):
            raise ConfigError("RetryPolicy delays must be finite and not negative")

    @staticmethod
    def retries_status(status: int) -> bool:
        """Whether an HTTP error status is worth another attempt."""
        return status in (408, 429) or (status >= 500 and status != 501)

    @staticmethod
    def retries_error(exc: BaseException) -> bool:
        """Whether a transport failure is worth another attempt."""
        return isinstance(exc, _RETRYABLE_TRANSPORT_ERRORS)

    def backoff(self, retry: int) -> float:
        """The full-jitter wait before retry number ``retry`` (0-based)."""
        # 2.0**1000 is still a float; a larger exponent would overflow and the cap holds anyway.
        cap = min(self.max_backoff, self.initial_backoff * 2.0 ** min(retry, 1000))
        return self.uniform(0.0, cap)

    def retry_after(self, headers: Mapping[str, str]) -> float | None:
        """The wait the server asked for (uncapped), or ``None`` when it asked for none."""
        return parse_retry_after(headers, now=self.clock())

    def delay(
        self, retry: int, retry_after: float | None = None, *, time_left: float | None = None
    ) -> float | None:
        """The wait before retry number ``retry`` (0-based), or ``None``: do not retry.

        Args:
            retry: how many retries came before this one.
            retry_after: the server's requested wait in seconds, if it sent one.
            time_left: seconds until the call's deadline, if it has one.
        """
        if retry + 1 >= self.max_attempts:
            return None
        if retry_after is not None:
            wait = min(max(retry_after, 0.0), self.max_retry_after)
        else:
            wait = self.backoff(retry)
        if time_left is not None and wait >= time_left:
            return None  # the retry could not start before the deadline
        return wait


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date).

    ``now`` is the wall-clock time an HTTP date is measured from (default: ``time.time()``).
    A date in the past means "now" (0); a value that is neither, or is negative, is ignored.
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            value = math.nan
        if math.isfinite(value) and value >= 0:
            return value
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when.tzinfo is None:  # "-0000": an HTTP date is always UTC
            when = when.replace(tzinfo=UTC)
        current = time.time() if now is None else now
        return max(0.0, when.timestamp() - current)
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


#: ``google.rpc.RetryInfo``'s ``retryDelay`` (a protobuf Duration in JSON: ``"47.43s"``).
_RETRY_INFO_TYPE: Final = "type.googleapis.com/google.rpc.RetryInfo"


def retry_info_delay(body: bytes) -> float | None:
    """Seconds to wait from a Google API error body's ``google.rpc.RetryInfo`` detail, or
    ``None``. Gemini's 429 names its wait there, not in a ``Retry-After`` header."""
    try:
        data: Any = json.loads(body)
    except ValueError:
        return None
    if isinstance(data, list) and data:
        data = data[0]
    error = data.get("error") if isinstance(data, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    for detail in details if isinstance(details, list) else []:
        if not isinstance(detail, dict) or detail.get("@type") != _RETRY_INFO_TYPE:
            continue
        delay = detail.get("retryDelay")
        if isinstance(delay, str) and delay.endswith("s"):
            try:
                seconds = float(delay[:-1])
            except ValueError:
                return None
            return seconds if math.isfinite(seconds) and seconds >= 0 else None
    return None


def _time_left() -> float | None:
    """Seconds until the deadline of the mesh call being served, if there is one."""
    deadline = serving_deadline.get()
    return None if deadline is None else deadline - time.monotonic()


# --------------------------------------------------------------------------- errors


def error_message_from_body(body: bytes) -> tuple[str, str | None]:
    """The provider's error message and error kind from an error body.

    Understands ``{"error": {"message", "type" | "status"}}`` (Gemini, OpenAI, Anthropic),
    ``{"error": "..."}`` (Ollama), ``{"message": ...}`` / ``{"detail": ...}`` (vLLM and other
    compatible servers) and a JSON list of those; falls back to the start of the raw text.
    """
    text = body.decode("utf-8", errors="replace").strip()
    try:
        data: Any = json.loads(text) if text else None
    except ValueError:
        data = None
    if isinstance(data, list) and data:
        data = data[0]
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, str):
            return error, None
        if isinstance(error, dict):
            message = error.get("message") or error.get("detail")
            kind = error.get("status") or error.get("type")
            if message is not None:
                return str(message), str(kind) if kind is not None else None
    if not text:
        return "(empty body)", None
    return (text[:500] + "...") if len(text) > 500 else text, None


def _is_json(body: bytes) -> bool:
    """Whether an error body is JSON (an empty body counts: there is nothing to hide)."""
    if not body.strip():
        return True
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------- transport


@dataclass(frozen=True)
class WireRequest:
    """One HTTP request a provider wants sent: POST ``path`` with a JSON body."""

    path: str
    body: dict[str, Any]
    params: dict[str, str] = field(default_factory=dict)
    #: Headers of this request only (e.g. the ``anthropic-beta`` a server tool needs).
    headers: dict[str, str] = field(default_factory=dict)


class HttpTransport:
    """One lazily created ``httpx.AsyncClient`` with retries, for one model instance.

    Safe to share between concurrent tasks of one event loop. :meth:`aclose` releases the
    connection pool; a later request opens a new one. Call :meth:`aclose` before the loop
    that used it ends, or its sockets stay open until garbage collection.
    """

    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        headers: Mapping[str, str] | None = None,
        secret_headers: Mapping[str, SecretHeader] | None = None,
        timeout: httpx.Timeout | float | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.provider = provider
        self.base_url = base_url
        self._headers = dict(headers or {})
        self._secret_headers = dict(secret_headers or {})
        self._timeout = (
            timeout
            if isinstance(timeout, httpx.Timeout)
            else DEFAULT_TIMEOUT
            if timeout is None
            else httpx.Timeout(timeout)
        )
        self.retry = retry or RetryPolicy()
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return f"HttpTransport(provider={self.provider!r}, base_url={self.base_url!r})"

    @property
    def secrets(self) -> list[Secret]:
        return [header.secret for header in self._secret_headers.values()]

    def _get_client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._client.is_closed or self._loop is not loop:
            # A pool belongs to the loop that opened its connections; a model reused under a
            # new loop (successive asyncio.run calls) gets a fresh one.
            self._loop = loop
            # httpx logs each request's URL: a base URL's password or key shows redacted.
            redact_http_logs()
            self._client = httpx.AsyncClient(
                base_url=self.base_url,
                timeout=self._timeout,
                headers={"content-type": "application/json", **self._headers},
                follow_redirects=False,
            )
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def _build(self, client: httpx.AsyncClient, wire: WireRequest) -> httpx.Request:
        headers = dict(wire.headers)
        headers.update({name: header.value() for name, header in self._secret_headers.items()})
        # The model call's span continues at the provider (traceparent only, no baggage).
        headers.update(trace_headers())
        content = json.dumps(wire.body, separators=(",", ":"), ensure_ascii=False).encode()
        return client.build_request(
            "POST", wire.path, content=content, params=wire.params or None, headers=headers
        )

    def _redact(self, text: str) -> str:
        return redact(text, self.secrets)

    def error_from_response(self, status: int, body: bytes) -> ModelError:
        message, kind = error_message_from_body(body)
        if not _is_json(body):
            # Not the provider's API speaking (a proxy's or load balancer's page, which can
            # name internal hosts): the body goes to this service's log, not into the error.
            logger.warning(
                "%s at %s answered HTTP %d with a body that is not JSON: %s",
                self.provider,
                self.base_url,
                status,
                self._redact(message),
            )
            message = "(a body that is not JSON; the service's log has it)"
        text = f"{self.provider} returned HTTP {status}: {message}"
        if kind:
            text += f" ({kind})"
        metadata = {"provider": self.provider}
        if kind:
            metadata["error_type"] = kind
        return model_error(self._redact(text), status_code=status, metadata=metadata)

    def _transport_error(self, exc: Exception, what: str) -> ModelError:
        detail = self._redact(str(exc) or type(exc).__name__)
        if isinstance(exc, SSEError):
            # What the stream looked like (its content type), never where it came from.
            return ModelError(
                f"{self.provider} {what}: {type(exc).__name__}: {detail}",
                metadata={"provider": self.provider},
            )
        # A network failure's text can name the provider's host and address: it goes to this
        # service's log, with the base URL, not into the error a client may be sent.
        logger.warning(
            "%s %s at %s: %s: %s", self.provider, what, self.base_url, type(exc).__name__, detail
        )
        return ModelError(
            f"{self.provider} {what}: {type(exc).__name__}", metadata={"provider": self.provider}
        )

    async def _send(
        self,
        wire: WireRequest,
        *,
        stream: bool,
        start: Callable[[httpx.Response], Awaitable[_T]],
    ) -> tuple[httpx.Response, _T]:
        """Send ``wire`` until an attempt succeeds or :attr:`retry` gives up.

        ``start`` runs on a successful (< 400) response; a retryable transport failure inside
        it is retried like one while sending, so it should read as little as it needs to know
        the response is good. Returns the response, still open when ``stream`` is set (the
        caller closes it), and what ``start`` returned.
        """
        client = self._get_client()
        policy = self.retry
        retry = 0
        while True:
            response: httpx.Response | None = None
            retry_after: float | None = None
            cause: Exception | None = None
            try:
                response = await client.send(self._build(client, wire), stream=stream)
                if response.status_code < 400:
                    return response, await start(response)
                status = response.status_code
                body = await response.aread()
                error = self.error_from_response(status, body)
                retryable = policy.retries_status(status)
                if retryable:
                    retry_after = policy.retry_after(response.headers)
                    if retry_after is None:
                        retry_after = retry_info_delay(body)
                reason = f"HTTP {status}"
            except httpx.HTTPError as exc:
                what = "request failed" if response is None else "stream failed"
                error, cause = self._transport_error(exc, what), exc
                retryable = policy.retries_error(exc)
                reason = type(exc).__name__
            except BaseException:
                if response is not None:
                    await response.aclose()
                raise
            if response is not None:
                await response.aclose()
            delay = policy.delay(retry, retry_after, time_left=_time_left()) if retryable else None
            if delay is None:
                if retry_after is not None:
                    # The provider's own wait goes on with the error (to a caller's RetryInfo
                    # and the gateway's Retry-After), not this service's capped one.
                    error.retry_delay = retry_after
                logger.warning(
                    "%s call failed after %d attempt(s): %s", self.provider, retry + 1, error
                )
                raise error from cause
            logger.info(
                "%s request failed (%s); retry %d/%d in %.3fs",
                self.provider,
                self._redact(reason),
                retry + 1,
                policy.max_attempts - 1,
                delay,
            )
            await policy.sleep(delay)
            retry += 1

    async def post_json(self, wire: WireRequest) -> Any:
        """POST and return the decoded JSON body, retrying as the policy allows."""
        response, _ = await self._send(wire, stream=False, start=_nothing)
        try:
            return json.loads(response.content)
        except ValueError as exc:
            raise ModelError(
                f"{self.provider} returned a body that is not JSON (HTTP {response.status_code})",
                status_code=response.status_code,
            ) from exc

    @asynccontextmanager
    async def stream(
        self,
        wire: WireRequest,
        records: Callable[[httpx.Response], AsyncGenerator[StreamRecord, None]],
    ) -> AsyncIterator[AsyncIterator[StreamRecord]]:
        """POST and yield an iterator over the records ``records(response)`` decodes.

        Retries happen while opening, up to and including the decoding of the first record;
        once a record was handed out, failures raise :class:`ModelError`. Leaving the context
        closes the response (and with it the connection, when the body was not read to the
        end).
        """

        async def first_record(
            response: httpx.Response,
        ) -> tuple[StreamRecord | None, AsyncGenerator[StreamRecord, None]]:
            decoded = records(response)
            try:
                return await anext(decoded), decoded
            except StopAsyncIteration:
                return None, decoded

        response, (first, decoded) = await self._send(wire, stream=True, start=first_record)
        try:
            yield _RecordStream(first, decoded, self)
        finally:
            try:
                await decoded.aclose()
            finally:
                await response.aclose()


async def _nothing(response: httpx.Response) -> None:
    return None


class _RecordStream:
    """The records of an open streamed response; transport failures become
    :class:`ModelError`."""

    __slots__ = ("_first", "_rest", "_transport")

    def __init__(
        self,
        first: StreamRecord | None,
        rest: AsyncIterator[StreamRecord],
        transport: HttpTransport,
    ) -> None:
        self._first = first
        self._rest = rest
        self._transport = transport

    def __aiter__(self) -> _RecordStream:
        return self

    async def __anext__(self) -> StreamRecord:
        if self._first is not None:
            record, self._first = self._first, None
            return record
        try:
            return await anext(self._rest)
        except httpx.HTTPError as exc:
            raise self._transport._transport_error(exc, "stream interrupted") from exc


# --------------------------------------------------------------------------- stream decoding


class LineDecoder:
    """Bytes in, complete lines out.

    Decodes UTF-8 incrementally (a character split across chunks is held back until it is
    whole) and splits on ``\\n``, ``\\r\\n`` and ``\\r``, wherever the chunks were cut. Only those
    three characters end a line: JSON may hold U+2028 and friends unescaped.
    """

    __slots__ = ("_decoder", "_pieces", "_skip_lf")

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self._pieces: list[str] = []
        self._skip_lf = False

    def feed(self, data: bytes) -> list[str]:
        try:
            text = self._decoder.decode(data)
        except UnicodeDecodeError as exc:
            raise ModelError(f"provider stream is not valid UTF-8: {exc.reason}") from exc
        return self._split(text)

    def flush(self) -> list[str]:
        """End of input: the unterminated last line, if any."""
        try:
            tail = self._decoder.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            raise ModelError("provider stream ended inside a UTF-8 character") from exc
        lines = self._split(tail) if tail else []
        if self._pieces:
            lines.append("".join(self._pieces))
            self._pieces.clear()
        return lines

    def _split(self, text: str) -> list[str]:
        if self._skip_lf:
            # The previous chunk ended with "\r": a "\n" right after it belongs to that line end.
            if not text:
                return []
            self._skip_lf = False
            if text[0] == "\n":
                text = text[1:]
        if "\n" not in text and "\r" not in text:
            if text:
                self._pieces.append(text)
            return []
        if text[-1] == "\r":
            self._skip_lf = True
        if "\r" in text:
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        lines = text.split("\n")
        if self._pieces:
            self._pieces.append(lines[0])
            lines[0] = "".join(self._pieces)
            self._pieces.clear()
        rest = lines.pop()
        if rest:
            self._pieces.append(rest)
        return lines


class StreamRecord(Protocol):
    """One record of a provider stream: an SSE event, or one NDJSON line (event "message")."""

    @property
    def event(self) -> str: ...

    @property
    def data(self) -> str: ...


async def sse_records(response: httpx.Response) -> AsyncGenerator[StreamRecord, None]:
    """The events of a ``text/event-stream`` response, decoded by ``httpx-sse``.

    Lines end only at CR, LF or CRLF, as the SSE spec says (never at U+2028, U+0085 and the
    other characters ``str.splitlines`` splits on, which JSON leaves unescaped). A block with
    no data (a lone ``event:``, ``id:`` or ``retry:``) is not an event. Bytes that are not
    UTF-8 become U+FFFD, as the spec's decoding says. A response whose content type is not
    ``text/event-stream`` raises ``httpx_sse.SSEError`` (an ``httpx.TransportError``).
    """
    events = EventSource(response).aiter_sse()
    try:
        async for event in events:
            if event.data:
                yield event
    finally:
        await events.aclose()


@dataclass(frozen=True, slots=True)
class _JsonLine:
    data: str
    event: str = "message"


async def ndjson_records(response: httpx.Response) -> AsyncGenerator[StreamRecord, None]:
    """The non-blank lines of a newline-delimited JSON response (Ollama), one record each."""
    lines = LineDecoder()
    async for chunk in response.aiter_bytes():
        for line in lines.feed(chunk):
            if line and not line.isspace():
                yield _JsonLine(line)
    for line in lines.flush():
        if line and not line.isspace():
            yield _JsonLine(line)


# --------------------------------------------------------------------------- responses


class _TextRun:
    __slots__ = ("pieces", "signature", "thought")

    def __init__(self, text: str, thought: bool, signature: bytes | None) -> None:
        self.pieces = [text]
        self.thought = thought
        self.signature = signature


class PartsBuilder:
    """Collects the parts of one model turn, joining consecutive text deltas cheaply.

    A text delta joins the previous run when both are text with the same ``thought`` flag
    and the run has no signature yet (a signature closes a run, as Gemini sends it on the
    last part of a thought).
    """

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: list[_TextRun | Part] = []

    def add_text(self, text: str, *, thought: bool = False, signature: bytes | None = None) -> None:
        last = self._items[-1] if self._items else None
        if isinstance(last, _TextRun) and last.thought == thought and last.signature is None:
            last.pieces.append(text)
            if signature is not None:
                last.signature = signature
            return
        self._items.append(_TextRun(text, thought, signature))

    def add_part(self, part: Part) -> None:
        self._items.append(part)

    def __bool__(self) -> bool:
        return bool(self._items)

    def parts(self) -> list[Part]:
        parts: list[Part] = []
        for item in self._items:
            if isinstance(item, _TextRun):
                parts.append(
                    Part(
                        text="".join(item.pieces),
                        thought=item.thought,
                        thought_signature=item.signature,
                    )
                )
            else:
                parts.append(item)
        return parts

    def content(self) -> Content | None:
        return Content(role="model", parts=self.parts()) if self._items else None


def partial_text(
    text: str, *, thought: bool = False, model_version: str | None = None
) -> LlmResponse:
    """A streaming chunk holding one text (or thought) delta."""
    return LlmResponse(
        content=Content(role="model", parts=[Part(text=text, thought=thought)]),
        partial=True,
        model_version=model_version,
    )


def _int_or_zero(value: Any) -> int:
    return value if isinstance(value, int) else 0


def make_usage(
    prompt: Any,
    candidates: Any,
    total: Any = None,
    *,
    cached: Any = None,
    thoughts: Any = None,
) -> UsageMetadata:
    prompt_count = _int_or_zero(prompt)
    candidates_count = _int_or_zero(candidates)
    return UsageMetadata(
        prompt_token_count=prompt_count,
        candidates_token_count=candidates_count,
        total_token_count=total if isinstance(total, int) else prompt_count + candidates_count,
        cached_content_token_count=cached if isinstance(cached, int) else None,
        thoughts_token_count=thoughts if isinstance(thoughts, int) else None,
    )


class StreamParser(abc.ABC):
    """Turns a provider's stream records into partial responses, then one final response.

    :meth:`feed` takes one record (an SSE event or an NDJSON line) and returns the partial
    responses it produced (text and thought deltas; function calls only appear in the final
    response, once their arguments are whole). :meth:`final` returns the aggregate and raises
    :class:`ModelError` when the stream ended before the provider said it was complete.
    """

    def __init__(self) -> None:
        self.parts = PartsBuilder()
        self.usage: UsageMetadata | None = None
        self.finish_reason: FinishReason | None = None
        self.grounding_metadata: GroundingMetadata | None = None
        self.model_version: str | None = None
        self.complete = False

    @abc.abstractmethod
    def feed(self, event: StreamRecord) -> list[LlmResponse]: ...

    def check_complete(self) -> None:
        if not self.complete:
            raise ModelError("the provider's stream ended before the response was complete")

    def final(self) -> LlmResponse:
        self.check_complete()
        return LlmResponse(
            content=self.parts.content(),
            usage_metadata=self.usage,
            finish_reason=self.finish_reason,
            partial=False,
            turn_complete=True,
            grounding_metadata=self.grounding_metadata,
            model_version=self.model_version,
        )


def load_json(data: str, what: str) -> Any:
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ModelError(f"the provider sent {what} that is not valid JSON") from exc


def parse_arguments(raw: str | None, tool_name: str) -> dict[str, Any]:
    """Tool-call arguments from their JSON text ("" means no arguments)."""
    if raw is None or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ModelError(
            f"the model returned arguments for tool {tool_name!r} that are not valid JSON"
            f" ({len(raw)} characters; a call cut at the output token limit ends this way: "
            "raise max_output_tokens if the response stopped for length)"
        ) from exc
    if not isinstance(value, dict):
        raise ModelError(
            f"the model returned arguments for tool {tool_name!r} that are not a JSON object"
        )
    return value


# --------------------------------------------------------------------------- the base class


class HttpLlm(Llm):
    """Base of the HTTP providers: the request/stream/error lifecycle lives here once.

    Subclasses implement :meth:`_build_request` (an :class:`LlmRequest` to a
    :class:`WireRequest`, raising :class:`ModelError` for anything the API cannot carry),
    :meth:`_parse_response` (a non-streamed body to one response) and :meth:`_new_stream_parser`.

    Use it as an async context manager, or call :meth:`aclose`, to release the connection pool.
    """

    #: The registry prefix and the name used in error messages.
    provider: ClassVar[str] = "http"
    framing: ClassVar[Literal["sse", "ndjson"]] = "sse"
    #: The tool names the API takes (``None``: any). A tool it refuses (``files.read`` on
    #: OpenAI) is sent under a name that fits, in declarations and history alike, and the
    #: model's calls get the real name back (:class:`~adk_mesh.models._convert.ToolNames`).
    accepted_tool_names: ClassVar[re.Pattern[str] | None] = None

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: Secret | None,
        headers: Mapping[str, str] | None = None,
        secret_headers: Mapping[str, SecretHeader] | None = None,
        timeout: httpx.Timeout | float | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        model = model.strip()
        if not model:
            raise ConfigError(f"{self.provider}: the model name is empty")
        super().__init__(model)
        self._api_key = api_key
        self._transport = HttpTransport(
            provider=self.provider,
            base_url=base_url.rstrip("/"),
            headers=headers,
            secret_headers=secret_headers,
            timeout=timeout,
            retry=retry,
        )

    @property
    def model(self) -> str:
        return self.name

    @property
    def base_url(self) -> str:
        return self._transport.base_url

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.name!r}, base_url={self.base_url!r})"

    async def aclose(self) -> None:
        """Close the HTTP connection pool (a later call opens a new one)."""
        await self._transport.aclose()

    async def __aenter__(self) -> HttpLlm:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _model_for(self, request: LlmRequest) -> str:
        """The request's model when it names one (``provider/`` prefix stripped), else ours."""
        name = (request.model or "").strip()
        if not name:
            return self.name
        prefix = f"{self.provider}/"
        return name[len(prefix) :] if name.startswith(prefix) else name

    def _check_credentials(self) -> None:
        """Raise :class:`ConfigError` when the provider needs a key and none was given."""

    @abc.abstractmethod
    def _build_request(self, request: LlmRequest, *, stream: bool) -> WireRequest: ...

    @abc.abstractmethod
    def _parse_response(self, data: Any) -> LlmResponse: ...

    @abc.abstractmethod
    def _new_stream_parser(self) -> StreamParser: ...

    def _records(self, response: httpx.Response) -> AsyncGenerator[StreamRecord, None]:
        """The stream's records, framed as :attr:`framing` says."""
        return sse_records(response) if self.framing == "sse" else ndjson_records(response)

    def _wrap(self, exc: Exception) -> ModelError:
        message = redact(
            f"{self.provider}: malformed response ({type(exc).__name__}: {exc})",
            [self._api_key],
        )
        return ModelError(message, metadata={"provider": self.provider})

    async def generate_content(
        self, request: LlmRequest, *, stream: bool = False
    ) -> AsyncIterator[LlmResponse]:
        self._check_credentials()
        names = ToolNames(request, self.accepted_tool_names)
        wire = self._build_request(names.request(request), stream=stream)
        if not stream:
            data = await self._transport.post_json(wire)
            yield names.response(self._guarded(self._parse_response, data))
            return
        parser = self._new_stream_parser()
        async with self._transport.stream(wire, self._records) as records:
            async for record in records:
                for partial in self._guarded(parser.feed, record):
                    yield names.response(partial)
            final = self._guarded(parser.final)
        yield names.response(final)

    def _guarded(self, step: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """``step(...)``, a malformed response's failure raised as :class:`ModelError`."""
        try:
            return step(*args, **kwargs)
        except AdkError:
            raise
        except Exception as exc:
            raise self._wrap(exc) from exc
