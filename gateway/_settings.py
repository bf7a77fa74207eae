"""What a gateway serves and how: the apps and their agent services, TLS to the mesh, who may
call, and the limits of a request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from adk_mesh.contexts import check_metadata_key
from adk_mesh.errors import AdkError, ConfigError
from adk_mesh.mesh.auth import Authenticator
from adk_mesh.mesh.security import ClientTLS

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_RUN_TIMEOUT",
    "GatewaySettings",
    "parse_app",
]

#: Largest request body (8 MiB): a message with an inline image fits, a flood does not.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
#: Longest run (seconds) unless the client asks for less (``X-Request-Timeout``).
DEFAULT_RUN_TIMEOUT = 600.0


@dataclass(frozen=True)
class GatewaySettings:
    """A gateway's configuration.

    Attributes:
        apps: app name (as clients name it in paths and bodies) to the ``host:port`` (or
            ``dns:///host:port``) of the agent service that serves it. The gateway reaches
            agents through these addresses only, over the gRPC contract.
        tls: TLS to the agent services (the CA to trust; with a certificate and key, mutual
            TLS); ``None``: plaintext (services on loopback).
        authenticators: how users prove who they are (the services' own authenticators:
            bearer JWT, API keys). The principal is the user: it must be the ``{user}`` of the
            path (or the ``userId`` of a run). None: the user is whoever the request names
            (development on loopback only).
        cors_origins: origins allowed to call from a browser (CORS); empty: same origin only.
        max_body_bytes: largest request body; larger ones get 413.
        run_timeout: the deadline of a run, in seconds; a client may ask for less with the
            ``X-Request-Timeout`` header, never more.
        sse_ping_seconds: a comment line (``: ping``) keeps an idle event stream open through
            proxies this often (0: never).
        trace_dir: where the mesh's trace files are (for the UI's trace routes), if any.
        trace_memory_spans: how many spans read from the trace files the gateway keeps in
            memory (the oldest traces are dropped, whole, past it); ``None``:
            ``ADK_MESH_TRACE_MEMORY_SPANS``, else 50,000.
        request_headers: HTTP headers of a run request (lower-case names) that reach the run
            as its request metadata (``RootRun.request_metadata``; tools read it as
            ``tool_context.request_metadata``); none by default. What the client sends there
            is what it asserts: metadata, never identity.
    """

    apps: Mapping[str, str] = field(default_factory=dict)
    tls: ClientTLS | None = None
    authenticators: tuple[Authenticator, ...] = ()
    cors_origins: tuple[str, ...] = ()
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    run_timeout: float = DEFAULT_RUN_TIMEOUT
    sse_ping_seconds: float = 15.0
    trace_dir: Path | None = None
    trace_memory_spans: int | None = None
    request_headers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for header in self.request_headers:
            try:
                check_metadata_key(header)
            except AdkError as error:
                raise ConfigError(f"request header {header!r}: {error.message}") from None
        if self.max_body_bytes < 1:
            raise ConfigError(f"max_body_bytes must be 1 or more, not {self.max_body_bytes}")
        if not self.run_timeout > 0:
            raise ConfigError(f"run_timeout must be positive seconds, not {self.run_timeout}")
        if self.trace_memory_spans is not None and self.trace_memory_spans < 1:
            raise ConfigError(
                f"trace_memory_spans must be 1 or more, not {self.trace_memory_spans}"
            )
        for origin in self.cors_origins:
            if origin == "*":
                raise ConfigError(
                    "CORS origin '*' would let any web page call the gateway with a user's "
                    "credentials; list the origins (https://app.example.com)"
                )
            if not origin.startswith(("http://", "https://")) or origin.endswith("/"):
                raise ConfigError(
                    f"CORS origin {origin!r} is not an origin: write scheme://host[:port]"
                )


def parse_app(text: str) -> tuple[str, str]:
    """``("travel", "127.0.0.1:50051")`` from ``travel=127.0.0.1:50051``.

    Raises:
        ConfigError: no ``=``, an empty name or address.
    """
    name, separator, address = text.partition("=")
    name, address = name.strip(), address.strip()
    if not separator or not name or not address:
        raise ConfigError(f"--app {text!r}: write NAME=HOST:PORT (e.g. travel=127.0.0.1:50051)")
    if "/" in name:
        raise ConfigError(f"--app {text!r}: an app name has no '/'")
    return name, address
