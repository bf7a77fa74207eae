"""Sending encoded OTLP requests to a collector, over gRPC or HTTP, as the OTel spec configures.

The SDK's exporters take SDK objects and encode them themselves, which is the cost the lean
pipeline removes; :mod:`~adk_mesh.telemetry._otlp` hands over finished request bytes, and a
transport here only sends them: over a gRPC channel whose method has no serializers (the
bytes go as they are), or as the body of an HTTP POST.

A transport is used by one background exporter thread, so :meth:`Transport.send` blocks. It
retries what the OTLP spec calls retryable (gRPC UNAVAILABLE and friends, HTTP 429/502/503/504
and connection failures) with exponential backoff and jitter, honouring the collector's
``Retry-After`` or ``RetryInfo``, until the time the caller gave it runs out. A collector that
stays down costs a warning a minute, not one per batch.

Configuration comes only from the standard variables (signal-specific ones win over the
generic ``OTEL_EXPORTER_OTLP_*``), read once by :meth:`OtlpSettings.from_env`:

* ``..._PROTOCOL``: ``grpc`` (default) or ``http/protobuf``.
* ``..._ENDPOINT``: for gRPC, ``http://`` means plaintext and ``https://`` TLS; without a
  scheme the target goes to gRPC as it is and ``..._INSECURE=true`` asks for plaintext. For
  HTTP the generic endpoint is a base URL that gets ``/v1/traces`` or ``/v1/metrics``
  appended, while the signal's own endpoint is used as it is.
* ``..._HEADERS``: ``key=value`` pairs, comma-separated, values URL-encoded.
* ``..._TIMEOUT``: milliseconds one request may take (default 10 s).
* ``..._COMPRESSION``: ``gzip`` or ``none``.
* ``..._CERTIFICATE``, ``..._CLIENT_KEY``, ``..._CLIENT_CERTIFICATE``: PEM files for TLS.
"""

from __future__ import annotations

import gzip
import logging
import math
import os
import random
import re
import ssl
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol
from urllib.parse import SplitResult, unquote, urlsplit, urlunsplit

import grpc
import httpx
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from adk_mesh.errors import ConfigError

__all__ = ["OtlpSettings", "Transport", "open_transport", "transport_from_env"]

logger = logging.getLogger(__name__)

Signal = Literal["traces", "metrics"]

_PROTOCOLS: Final = ("grpc", "http/protobuf")
_COMPRESSIONS: Final = ("gzip", "none")
_DEFAULT_TIMEOUT: Final = 10.0
_DEFAULT_GRPC_ENDPOINT: Final = "http://localhost:4317"
_DEFAULT_HTTP_ENDPOINT: Final = "http://localhost:4318"

#: First retry after about this many seconds, doubling with every further attempt.
_BACKOFF_BASE: Final = 1.0
_MAX_BACKOFF: Final = 32.0
#: The same warning is logged at most once in this many seconds.
_WARNING_INTERVAL: Final = 60.0

# The OTLP spec's retryable gRPC codes (RESOURCE_EXHAUSTED is a collector shedding load).
_RETRYABLE_GRPC_CODES: Final = frozenset(
    {
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)
_RETRYABLE_HTTP_STATUSES: Final = frozenset({429, 502, 503, 504})

# A header name is an RFC 9110 token; a value may not hold control characters.
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CONTROL_CHARACTER: Final = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class _SignalKind:
    grpc_method: str
    http_path: str
    response_type: type[Message]
    rejected_field: str
    noun: str


_SIGNALS: Final[dict[str, _SignalKind]] = {
    "traces": _SignalKind(
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        "/v1/traces",
        ExportTraceServiceResponse,
        "rejected_spans",
        "spans",
    ),
    "metrics": _SignalKind(
        "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
        "/v1/metrics",
        ExportMetricsServiceResponse,
        "rejected_data_points",
        "data points",
    ),
}


class Transport(Protocol):
    """Sends serialized OTLP export requests of one signal to one collector.

    Called from one background exporter thread; :meth:`send` blocks.
    """

    #: What and where, for logs: ``"otlp/grpc http://127.0.0.1:4317"``.
    description: str
    #: ``"grpc"`` or ``"http/protobuf"``.
    protocol: str

    def send(self, body: bytes, timeout: float) -> bool:
        """Send one serialized request, retrying retryable failures with backoff until
        ``timeout`` seconds have passed. ``True`` once the collector accepted it (even if
        it rejected some of the items, which is logged); ``False`` when it was dropped."""
        ...

    def close(self) -> None:
        """Stop: a send waiting to retry gives up, later sends drop their data. Idempotent."""
        ...


@dataclass(frozen=True, slots=True)
class OtlpSettings:
    """Where and how a transport sends one signal.

    Attributes:
        signal: ``"traces"`` or ``"metrics"``.
        protocol: ``"grpc"`` or ``"http/protobuf"``.
        endpoint: for HTTP the URL posted to; for gRPC the endpoint as configured (a URL, or
            a target gRPC understands, such as ``host:port``).
        secure: whether the connection uses TLS.
        headers: sent with every request (gRPC metadata keys are lowercased).
        timeout: seconds one request may take.
        gzip: whether requests are gzip-compressed.
        certificate: a PEM file of the certificates to trust, instead of the system's.
        client_key: the PEM private key of the client certificate (for mutual TLS).
        client_certificate: the PEM client certificate chain (for mutual TLS).
    """

    signal: Signal
    protocol: str = "grpc"
    endpoint: str = _DEFAULT_GRPC_ENDPOINT
    secure: bool = False
    headers: tuple[tuple[str, str], ...] = ()
    timeout: float = _DEFAULT_TIMEOUT
    gzip: bool = False
    certificate: str | None = None
    client_key: str | None = None
    client_certificate: str | None = None

    @classmethod
    def from_env(cls, signal: Signal) -> OtlpSettings:
        """The settings the ``OTEL_EXPORTER_OTLP_[SIGNAL_]*`` variables give ``signal``.

        Raises:
            ConfigError: a variable has a value the spec (or this implementation) does not
                allow; the message names the variable.
        """
        variable, protocol = _option(signal, "PROTOCOL")
        protocol = protocol or "grpc"
        if protocol not in _PROTOCOLS:
            raise ConfigError(
                f"{variable}={protocol!r} is not supported; use one of {', '.join(_PROTOCOLS)}"
            )
        if protocol == "grpc":
            endpoint, secure = _grpc_endpoint(signal)
        else:
            endpoint = _http_endpoint(signal)
            secure = endpoint.startswith("https:")
        key_variable, client_key = _option(signal, "CLIENT_KEY")
        certificate_variable, client_certificate = _option(signal, "CLIENT_CERTIFICATE")
        if bool(client_key) != bool(client_certificate):
            raise ConfigError(
                f"{key_variable} and {certificate_variable} go together: set both or neither"
            )
        return cls(
            signal=signal,
            protocol=protocol,
            endpoint=endpoint,
            secure=secure,
            headers=_headers(*_option(signal, "HEADERS")),
            timeout=_timeout(*_option(signal, "TIMEOUT")),
            gzip=_gzip(*_option(signal, "COMPRESSION")),
            certificate=_option(signal, "CERTIFICATE")[1] or None,
            client_key=client_key or None,
            client_certificate=client_certificate or None,
        )


def _option(signal: Signal, name: str) -> tuple[str, str]:
    """The variable that sets option ``name`` for ``signal``, and its value ("" if unset)."""
    specific = f"OTEL_EXPORTER_OTLP_{signal.upper()}_{name}"
    value = os.environ.get(specific, "").strip()
    if value:
        return specific, value
    generic = f"OTEL_EXPORTER_OTLP_{name}"
    return generic, os.environ.get(generic, "").strip()


def _checked_url(variable: str, value: str) -> SplitResult:
    parts = urlsplit(value)
    try:
        valid = parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # the port is not a number, or out of range
        valid = False
    if not valid:
        raise ConfigError(f"{variable}={value!r} is not an http:// or https:// URL with a host")
    return parts


def _http_endpoint(signal: Signal) -> str:
    variable, value = _option(signal, "ENDPOINT")
    if variable.endswith(f"_{signal.upper()}_ENDPOINT"):
        parts = _checked_url(variable, value)
        path = parts.path or "/"
    else:
        # The generic endpoint is a base URL: the signal's path goes under its path.
        parts = _checked_url(variable, value or _DEFAULT_HTTP_ENDPOINT)
        path = parts.path.rstrip("/") + _SIGNALS[signal].http_path
    return str(urlunsplit((parts.scheme, parts.netloc, path, parts.query, "")))


def _grpc_endpoint(signal: Signal) -> tuple[str, bool]:
    """The endpoint and whether it is secure: by its scheme, else by ``..._INSECURE``."""
    variable, value = _option(signal, "ENDPOINT")
    value = value or _DEFAULT_GRPC_ENDPOINT
    if value.lower().startswith(("http://", "https://")):
        return value, _checked_url(variable, value).scheme == "https"
    insecure_variable, insecure = _option(signal, "INSECURE")
    if insecure.lower() not in ("", "true", "false"):
        logger.warning(
            "%s=%r is neither true nor false: taken as false", insecure_variable, insecure
        )
    return value, insecure.lower() != "true"


def _grpc_target(endpoint: str) -> str:
    if endpoint.lower().startswith(("http://", "https://")):
        return urlsplit(endpoint).netloc
    return endpoint


def _headers(variable: str, value: str) -> tuple[tuple[str, str], ...]:
    headers = []
    for number, entry in enumerate(value.split(","), start=1):
        if not entry.strip():
            continue
        name, equals, encoded = entry.partition("=")
        name = name.strip()
        header_value = unquote(encoded.strip())
        if (
            not equals
            or not _HEADER_NAME.fullmatch(name)
            or _CONTROL_CHARACTER.search(header_value)
        ):
            # Not quoted back: headers hold secrets.
            raise ConfigError(
                f"{variable}: entry {number} is malformed; expected comma-separated name=value "
                "pairs, each name a token and each value URL-encoded"
            )
        headers.append((name, header_value))
    return tuple(headers)


def _timeout(variable: str, value: str) -> float:
    if not value:
        return _DEFAULT_TIMEOUT
    try:
        milliseconds = float(value)
    except ValueError:
        milliseconds = math.nan
    if not (0 < milliseconds < math.inf):
        raise ConfigError(f"{variable}={value!r} is not a positive number of milliseconds")
    return milliseconds / 1000


def _gzip(variable: str, value: str) -> bool:
    compression = value.lower() or "none"
    if compression not in _COMPRESSIONS:
        raise ConfigError(
            f"{variable}={value!r} is not supported; use one of {', '.join(_COMPRESSIONS)}"
        )
    return compression == "gzip"


def transport_from_env(signal: Signal) -> Transport:
    """A transport for ``signal`` as the ``OTEL_EXPORTER_OTLP_*`` variables configure it.

    Raises:
        ConfigError: a variable has a value that is not allowed, or a certificate file
            cannot be read.
    """
    return open_transport(OtlpSettings.from_env(signal))


def open_transport(settings: OtlpSettings, *, backoff_base: float = _BACKOFF_BASE) -> Transport:
    """A transport for ``settings``; ``backoff_base`` is about the first retry's delay.

    Raises:
        ConfigError: a certificate file cannot be read.
    """
    from adk_mesh import __version__

    user_agent = f"adk-mesh/{__version__}"
    if settings.protocol == "grpc":
        return _GrpcTransport(settings, user_agent, backoff_base)
    return _HttpTransport(settings, user_agent, backoff_base)


class _Warnings:
    """Logs each kind of warning (by its format string) at most once per ``interval``,
    telling how many like it were held back in between."""

    def __init__(self, interval: float) -> None:
        self._interval = interval
        self._lock = threading.Lock()
        # format string -> (when it may be logged again, how many were held back)
        self._state: dict[str, tuple[float, int]] = {}

    def warn(self, message: str, *args: object) -> None:
        now = time.monotonic()
        with self._lock:
            next_time, held_back = self._state.get(message, (0.0, 0))
            if now < next_time:
                self._state[message] = (next_time, held_back + 1)
                return
            self._state[message] = (now + self._interval, 0)
        if held_back:
            logger.warning(f"{message} (and %d more like it)", *args, held_back)
        else:
            logger.warning(message, *args)


@dataclass(frozen=True, slots=True)
class _Outcome:
    """How one attempt went; ``retry_after`` is the wait the server asked for, if it did."""

    ok: bool
    retryable: bool = False
    retry_after: float | None = None
    error: str = ""


_SENT: Final = _Outcome(ok=True)


class _RetryingTransport(ABC):
    """The retry loop, the warnings and the partial-success check both transports share."""

    protocol: str
    description: str

    def __init__(self, settings: OtlpSettings, backoff_base: float) -> None:
        self._settings = settings
        self._signal = _SIGNALS[settings.signal]
        self._backoff_base = backoff_base
        self._closed = threading.Event()
        self._warnings = _Warnings(_WARNING_INTERVAL)
        self._pid = os.getpid()
        self._connection: object = None
        self._inherited: list[object] = []

    @abstractmethod
    def _attempt(self, body: bytes, timeout: float) -> _Outcome:
        """Send ``body`` once, waiting at most ``timeout`` seconds."""

    @abstractmethod
    def _connect(self) -> object:
        """Open the connection (a gRPC channel, an HTTP client) and return it."""

    def _check_fork(self) -> None:
        """In the child of a ``fork``, open a connection of its own: the parent's sockets and
        gRPC's state belong to the parent. The inherited one is kept, never used or closed
        (closing it would act on the parent's connection)."""
        pid = os.getpid()
        if pid != self._pid:
            self._inherited.append(self._connection)
            self._pid = pid
            self._connection = self._connect()

    @abstractmethod
    def _close(self) -> None:
        """Release the connection."""

    def send(self, body: bytes, timeout: float) -> bool:
        if self._closed.is_set():
            self._warnings.warn(
                "%s is closed: %d bytes of %s dropped",
                self.description,
                len(body),
                self._signal.noun,
            )
            return False
        start = time.monotonic()
        deadline = start + timeout
        attempts = 0
        while True:
            attempts += 1
            outcome = self._attempt(body, min(self._settings.timeout, deadline - time.monotonic()))
            if outcome.ok:
                return True
            if not outcome.retryable:
                self._warnings.warn(
                    "%s: export failed, %d bytes of %s dropped: %s",
                    self.description,
                    len(body),
                    self._signal.noun,
                    outcome.error,
                )
                return False
            delay = outcome.retry_after
            if delay is None:
                delay = min(self._backoff_base * 2 ** (attempts - 1), _MAX_BACKOFF)
                delay *= random.uniform(0.5, 1.0)
            # Give up when the wait would outlast the time left, or when closed while waiting.
            if delay >= deadline - time.monotonic() or self._closed.wait(delay):
                self._warnings.warn(
                    "%s: export failed (%d attempts in %.1f s), %d bytes of %s dropped: %s",
                    self.description,
                    attempts,
                    time.monotonic() - start,
                    len(body),
                    self._signal.noun,
                    outcome.error,
                )
                return False

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._close()

    def _check_partial_success(self, response: bytes) -> None:
        """Warn about the items a collector that accepted the request still rejected."""
        if not response:
            return
        try:
            message: Any = self._signal.response_type.FromString(response)
        except DecodeError:
            logger.debug("%s: the response is not an OTLP export response", self.description)
            return
        partial = message.partial_success
        rejected = getattr(partial, self._signal.rejected_field)
        if rejected or partial.error_message:
            self._warnings.warn(
                "%s: the collector rejected %d %s: %s",
                self.description,
                rejected,
                self._signal.noun,
                partial.error_message or "(no reason given)",
            )


def _read_pem(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as error:
        raise ConfigError(f"cannot read the OTLP TLS file {path!r}: {error}") from error


class _GrpcTransport(_RetryingTransport):
    """OTLP/gRPC over a sync channel; the method sends and receives raw bytes."""

    protocol = "grpc"

    def __init__(self, settings: OtlpSettings, user_agent: str, backoff_base: float) -> None:
        super().__init__(settings, backoff_base)
        target = _grpc_target(settings.endpoint)
        self.description = f"otlp/grpc {settings.endpoint}"
        if target == settings.endpoint:  # no scheme to tell
            self.description += " (tls)" if settings.secure else " (insecure)"
        self._target = target
        self._options = [("grpc.primary_user_agent", user_agent)]
        self._credentials: grpc.ChannelCredentials | None = None
        if settings.secure:
            self._credentials = grpc.ssl_channel_credentials(
                root_certificates=_read_pem(settings.certificate) if settings.certificate else None,
                private_key=_read_pem(settings.client_key) if settings.client_key else None,
                certificate_chain=(
                    _read_pem(settings.client_certificate) if settings.client_certificate else None
                ),
            )
        self._metadata = tuple((name.lower(), value) for name, value in settings.headers)
        self._compression = grpc.Compression.Gzip if settings.gzip else None
        self._connection = self._connect()

    def _connect(self) -> grpc.Channel:
        if self._credentials is not None:
            self._channel = grpc.secure_channel(self._target, self._credentials, self._options)
        else:
            self._channel = grpc.insecure_channel(self._target, self._options)
        # No serializers: the request bytes go as they are and the response comes back raw.
        self._export = self._channel.unary_unary(self._signal.grpc_method)
        return self._channel

    def _attempt(self, body: bytes, timeout: float) -> _Outcome:
        self._check_fork()
        try:
            response = self._export(
                body, timeout=timeout, metadata=self._metadata, compression=self._compression
            )
        except grpc.RpcError as error:
            code = error.code()
            return _Outcome(
                ok=False,
                retryable=code in _RETRYABLE_GRPC_CODES,
                retry_after=_retry_info_delay(error.trailing_metadata()),
                error=f"{code.name} {error.details()}",
            )
        self._check_partial_success(response)
        return _SENT

    def _close(self) -> None:
        self._channel.close()


def _retry_info_delay(trailing_metadata: Any) -> float | None:
    """The delay a ``google.rpc.RetryInfo`` in the status details asks for, if there is one."""
    for key, value in trailing_metadata or ():
        if key != "grpc-status-details-bin":
            continue
        try:
            status = status_pb2.Status.FromString(value)
        except DecodeError:
            return None
        for detail in status.details:
            if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                info = error_details_pb2.RetryInfo()
                detail.Unpack(info)
                return float(info.retry_delay.seconds + info.retry_delay.nanos / 1e9)
    return None


class _HttpTransport(_RetryingTransport):
    """OTLP/HTTP with binary protobuf bodies, over one pooled ``httpx.Client``."""

    protocol = "http/protobuf"

    def __init__(self, settings: OtlpSettings, user_agent: str, backoff_base: float) -> None:
        super().__init__(settings, backoff_base)
        self.description = f"otlp/http {settings.endpoint}"
        headers = [("User-Agent", user_agent), *settings.headers]
        headers.append(("Content-Type", "application/x-protobuf"))
        if settings.gzip:
            headers.append(("Content-Encoding", "gzip"))
        self._headers = headers
        self._verify = _tls_context(settings)
        self._connection = self._connect()

    def _connect(self) -> httpx.Client:
        self._client = httpx.Client(headers=self._headers, verify=self._verify)
        return self._client

    def send(self, body: bytes, timeout: float) -> bool:
        # Compressed once, not on every attempt.
        return super().send(
            gzip.compress(body, compresslevel=6) if self._settings.gzip else body, timeout
        )

    def _attempt(self, body: bytes, timeout: float) -> _Outcome:
        self._check_fork()
        try:
            response = self._client.post(self._settings.endpoint, content=body, timeout=timeout)
        except httpx.TransportError as failure:
            return _Outcome(ok=False, retryable=True, error=f"{type(failure).__name__}: {failure}")
        status = response.status_code
        if 200 <= status < 300:
            self._check_partial_success(response.content)
            return _SENT
        error = f"HTTP {status} {response.reason_phrase}: {_error_message(response)}"
        if status in _RETRYABLE_HTTP_STATUSES:
            return _Outcome(
                ok=False,
                retryable=True,
                retry_after=_retry_after(response.headers.get("Retry-After")),
                error=error,
            )
        return _Outcome(ok=False, error=error)

    def _close(self) -> None:
        self._client.close()


def _tls_context(settings: OtlpSettings) -> ssl.SSLContext | bool:
    """The TLS context for the configured files; ``True`` (the system's) when none is set."""
    if not (settings.certificate or settings.client_certificate):
        return True
    try:
        context = ssl.create_default_context(cafile=settings.certificate)
        if settings.client_certificate:
            context.load_cert_chain(settings.client_certificate, settings.client_key)
    except OSError as error:  # ssl.SSLError is one
        raise ConfigError(f"cannot use the OTLP TLS files: {error}") from error
    return context


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds; ``None`` when absent or an HTTP date (backoff applies)."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def _error_message(response: httpx.Response) -> str:
    """A failed request's reason: OTLP/HTTP collectors send a ``google.rpc.Status``, proxies
    and other servers on the way some text."""
    body = response.content
    if response.headers.get("Content-Type", "").startswith("application/x-protobuf"):
        try:
            return str(status_pb2.Status.FromString(body).message) or "(no message)"
        except DecodeError:
            pass
    return body[:200].decode("utf-8", "replace") or "(no body)"
