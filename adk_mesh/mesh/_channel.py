"""Channels and servers with the mesh's settings, in one place.

Clients get :func:`open_channel`: message-size limits set on purpose (agents carry whole
session views and artifacts inline), keepalive so a dead peer is noticed on an idle channel,
round-robin balancing over every address a ``dns:///`` target resolves to, and a retry policy
for the idempotent reads (``Describe``, ``ListTools``) only: ``Run`` and ``CallTool`` have
effects and are never retried by the transport. (A server's refusal at its limit of calls at
once, ``SERVER_BUSY``, ran nothing: RemoteAgent and RemoteToolset send such a call again
themselves, by that reason, which a ``retryPolicy`` cannot tell from RESOURCE_EXHAUSTED after
effects; see :mod:`adk_mesh.mesh._status`.)

Servers derive from :class:`MeshServer`, which registers gRPC health (``SERVING`` once started,
``NOT_SERVING`` as soon as stopping begins) and reflection for the services it serves, keeps
the door of each call (see :mod:`adk_mesh.mesh.security`) and bounds the calls it runs at once.

Both sides speak TLS when told (:class:`~adk_mesh.mesh.security.ServerTLS`,
:class:`~adk_mesh.mesh.security.ClientTLS`; a client reads ``ADK_MESH_TLS_*`` by default), and
both follow their certificate files: a renewed certificate needs no restart.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from adk_mesh.errors import AdkIOError, ConfigError
from adk_mesh.mesh._doors import DoorKeeper
from adk_mesh.mesh._drain import CallGate
from adk_mesh.mesh._interceptors import TracedChannel, server_interceptors
from adk_mesh.mesh._status import add_servicer
from adk_mesh.mesh._watched import WatchedFiles
from adk_mesh.mesh.security import (
    ClientTLS,
    ServerSecurity,
    check_transport,
    plaintext_beyond_loopback,
)

__all__ = [
    "DEFAULT_MAX_CONCURRENT_CALLS",
    "DEFAULT_MAX_CONNECTION_AGE",
    "MAX_MESSAGE_BYTES",
    "MeshServer",
    "channel_options",
    "open_channel",
]

logger = logging.getLogger(__name__)

#: Calls a server runs at once (streams included); more are refused with RESOURCE_EXHAUSTED.
DEFAULT_MAX_CONCURRENT_CALLS = 256

#: Seconds a client connection lives before the server asks the client to reconnect (GOAWAY;
#: gRPC adds ±10 % jitter). Calls running on it go on to their end. A client balancing over the
#: replicas behind a name resolves it again when it reconnects, so replicas added since share
#: its calls within this time.
DEFAULT_MAX_CONNECTION_AGE = 300.0

# Marks "read ADK_MESH_TLS_* from the environment" apart from an explicit ``tls=None``.
_FROM_ENV: ClientTLS = ClientTLS()

#: Largest message sent or received (32 MiB): gRPC's 4 MiB default is too small for a session
#: view with inline artifacts, and an unbounded limit lets one bad peer exhaust memory.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024

_AGENT_SERVICE = "adk_mesh.v1.AgentService"
_TOOL_SERVICE = "adk_mesh.v1.ToolService"

_SERVICE_CONFIG = {
    "loadBalancingConfig": [{"round_robin": {}}],
    "methodConfig": [
        {
            "name": [
                {"service": _AGENT_SERVICE, "method": "Describe"},
                {"service": _TOOL_SERVICE, "method": "ListTools"},
            ],
            "retryPolicy": {
                "maxAttempts": 3,
                "initialBackoff": "0.1s",
                "maxBackoff": "1s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"],
            },
        }
    ],
}

_COMMON_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
]


def channel_options() -> list[tuple[str, Any]]:
    """The options every mesh client channel uses."""
    return [
        *_COMMON_OPTIONS,
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.enable_retries", 1),
        # Each channel its own connections: with gRPC's process-wide pool, a new channel to an
        # address whose server had gone (a restarted service, a reused port) inherits the old
        # connection's failure and backoff, and its first calls fail UNAVAILABLE at once.
        ("grpc.use_local_subchannel_pool", 1),
        ("grpc.service_config", json.dumps(_SERVICE_CONFIG)),
    ]


def open_channel(target: str, *, tls: ClientTLS | None = _FROM_ENV) -> grpc.aio.Channel:
    """A channel to ``target`` (``host:port`` or ``dns:///host:port``): TLS with ``tls``
    (by default from ``ADK_MESH_TLS_CA`` / ``_CERT`` / ``_KEY``), plaintext when there is none."""
    if not target:
        raise ConfigError("a mesh target must not be empty; write host:port or dns:///host:port")
    if tls is _FROM_ENV:
        tls = ClientTLS.from_env()
    if tls is None:
        return TracedChannel(grpc.aio.insecure_channel(target, options=channel_options()), target)
    if not tls.files:
        return TracedChannel(
            grpc.aio.secure_channel(target, tls.credentials(), options=channel_options()), target
        )
    return _RenewingChannel(target, tls)


def _secure_channel(target: str, credentials: grpc.ChannelCredentials) -> TracedChannel:
    return TracedChannel(
        grpc.aio.secure_channel(target, credentials, options=channel_options()), target
    )


class _Generation:
    """One underlying channel of a :class:`_RenewingChannel`, and the calls running on it."""

    __slots__ = ("active", "channel", "credentials", "retired")

    def __init__(self, channel: TracedChannel, credentials: grpc.ChannelCredentials) -> None:
        self.channel = channel
        self.credentials = credentials
        self.active = 0
        self.retired = False


class _RenewingChannel(grpc.aio.Channel):  # type: ignore[misc]
    """A TLS channel that follows its certificate files.

    grpcio has dynamic credentials for servers only: a client channel keeps the certificate it
    was made with, so once that expires every reconnection (one each max_connection_age) is
    refused. Here each call first checks the files (one ``stat`` each, through
    :class:`~adk_mesh.mesh._watched.WatchedFiles`); once they changed and load as a matching
    certificate and key, new calls go to a new channel made with them, and the previous
    channel is closed when the last call running on it ends (a stream is never cut). Files
    that do not load yet (a renewal half-written) leave the current channel in use.
    """

    def __init__(self, target: str, tls: ClientTLS) -> None:
        self._target = target
        self._files = WatchedFiles(tls.files, tls.credentials)
        credentials = self._files.get()
        self._current = _Generation(_secure_channel(target, credentials), credentials)
        self._retired: set[_Generation] = set()
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    def _generation(self) -> _Generation:
        """The generation new calls use, renewed first if the files changed."""
        if self._closed:
            return self._current
        credentials = self._files.get_or_kept(
            f"calls to {self._target} keep the previous client certificate"
        )
        if credentials is not self._current.credentials:
            previous = self._current
            self._current = _Generation(_secure_channel(self._target, credentials), credentials)
            logger.info(
                "client TLS certificate for %s reloaded from %s: new calls use it",
                self._target,
                ", ".join(str(path) for path in self._files.paths),
            )
            self._retire(previous)
        return self._current

    def _retire(self, generation: _Generation) -> None:
        generation.retired = True
        if generation.active or not self._close_soon(generation):
            self._retired.add(generation)

    def _call_started(self, generation: _Generation, call: Any) -> None:
        generation.active += 1

        def done(_: Any) -> None:
            generation.active -= 1
            if generation.retired and not generation.active and generation in self._retired:
                if self._close_soon(generation):
                    self._retired.discard(generation)

        call.add_done_callback(done)

    def _close_soon(self, generation: _Generation) -> bool:
        """Close ``generation``'s channel in a task; ``False``: no running loop here (then
        :meth:`close` closes it)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover - gRPC runs done-callbacks in the loop
            return False
        task = loop.create_task(generation.channel.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        return True

    async def __aenter__(self) -> _RenewingChannel:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    async def close(self, grace: float | None = None) -> None:
        self._closed = True
        retired, self._retired = self._retired, set()
        await asyncio.gather(
            *(generation.channel.close(grace) for generation in (*retired, self._current)),
            *self._closing,
        )

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self._current.channel.get_state(try_to_connect)

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        await self._current.channel.wait_for_state_change(last_observed_state)

    async def channel_ready(self) -> None:
        while True:
            generation = self._generation()
            try:
                await generation.channel.channel_ready()
                return
            except grpc.aio.UsageError:
                # "Channel is closed": a renewal retired the channel waited on (and closed it,
                # no call running on it). Wait for its successor; only our own close ends this.
                if self._closed or generation is self._current:
                    raise

    def unary_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        _registered_method: bool | None = False,
    ) -> _RenewingMultiCallable:
        return _RenewingMultiCallable(
            self,
            "unary_unary",
            (method, request_serializer, response_deserializer, _registered_method),
        )

    def unary_stream(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        _registered_method: bool | None = False,
    ) -> _RenewingMultiCallable:
        return _RenewingMultiCallable(
            self,
            "unary_stream",
            (method, request_serializer, response_deserializer, _registered_method),
        )

    def stream_unary(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        _registered_method: bool | None = False,
    ) -> _RenewingMultiCallable:
        return _RenewingMultiCallable(
            self,
            "stream_unary",
            (method, request_serializer, response_deserializer, _registered_method),
        )

    def stream_stream(
        self,
        method: str,
        request_serializer: Callable[[Any], bytes] | None = None,
        response_deserializer: Callable[[bytes], Any] | None = None,
        _registered_method: bool | None = False,
    ) -> _RenewingMultiCallable:
        return _RenewingMultiCallable(
            self,
            "stream_stream",
            (method, request_serializer, response_deserializer, _registered_method),
        )


class _RenewingMultiCallable:
    """A stub's multi-callable on a :class:`_RenewingChannel`: each call goes to the channel's
    current generation (the real multi-callable is made again when that changed)."""

    __slots__ = ("_arguments", "_channel", "_generation", "_inner", "_kind")

    def __init__(self, channel: _RenewingChannel, kind: str, arguments: tuple[Any, ...]) -> None:
        self._channel = channel
        self._kind = kind
        self._arguments = arguments
        self._generation: _Generation | None = None
        self._inner: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        generation = self._channel._generation()
        if generation is not self._generation:
            self._inner = getattr(generation.channel, self._kind)(*self._arguments)
            self._generation = generation
        call = self._inner(*args, **kwargs)
        self._channel._call_started(generation, call)
        return call


class MeshServer:
    """A ``grpc.aio`` server with health and reflection; subclasses add their servicer.

    Subclasses implement :meth:`_register` and name their service in ``_service_names``.
    """

    _service_names: Sequence[str] = ()

    def __init__(self) -> None:
        #: The mesh door's port once started with a mesh address; else ``None``.
        self.mesh_port: int | None = None
        self._server: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer()
        self._gate = CallGate(exempt=(health.SERVICE_NAME, reflection.SERVICE_NAME))

    def _register(self, server: grpc.aio.Server) -> None:
        raise NotImplementedError

    async def warm_up(self) -> None:
        """Connect what the first calls would otherwise wait for (MCP servers the served
        toolsets front), before :meth:`start`; the default has nothing to connect.

        ``adk-mesh serve`` (:func:`~adk_mesh.mesh.serve.serve_until_signal`) calls it before
        the server starts, so health reports SERVING only once it is done; code that starts
        a server itself calls ``await server.warm_up()`` first (:meth:`start` does not). It
        never raises for what fails to connect: that is logged, and the first call tries
        again.
        """

    async def start(
        self,
        address: str = "127.0.0.1:0",
        *,
        security: ServerSecurity | None = None,
        mesh_address: str | None = None,
        max_concurrent_calls: int = DEFAULT_MAX_CONCURRENT_CALLS,
        max_connection_age: float | None = DEFAULT_MAX_CONNECTION_AGE,
    ) -> int:
        """Bind ``address`` (the front door), start serving and return the bound port.

        Args:
            security: TLS, the mesh door's allow-list, end-user authentication (default:
                plaintext, for loopback).
            mesh_address: where the mesh door listens, with mutual TLS (``security`` must have
                a client CA); its port is :attr:`mesh_port` afterwards.
            max_concurrent_calls: calls run at once; more get RESOURCE_EXHAUSTED.
            max_connection_age: seconds before a client connection is asked to reconnect
                (see :data:`DEFAULT_MAX_CONNECTION_AGE`; ``None``: never); running calls
                are never cut.

        Raises:
            ConfigError: plaintext beyond loopback without ``security.insecure``, or a mesh
                address without mutual TLS.
        """
        if self._server is not None:
            raise ConfigError(f"{type(self).__name__} is already started")
        if max_concurrent_calls < 1:
            raise ConfigError(f"max_concurrent_calls must be 1 or more, not {max_concurrent_calls}")
        if max_connection_age is not None and not 0 < max_connection_age < 2**31 / 1000:
            raise ConfigError(
                f"max_connection_age must be positive seconds, not {max_connection_age}"
            )
        age = (
            []
            if max_connection_age is None
            else [("grpc.max_connection_age_ms", round(max_connection_age * 1000))]
        )
        security = security or ServerSecurity()
        check_transport(address, security)
        if mesh_address is not None and not security.mutual_tls:
            raise ConfigError("a mesh door port needs mutual TLS: a certificate, key and client CA")
        server = grpc.aio.server(
            # Tracing outermost, so a call the gate or the doors refuse still has its span.
            interceptors=[*server_interceptors(), self._gate, DoorKeeper(security)],
            options=[
                *_COMMON_OPTIONS,
                # Accept the clients' keepalive pings on idle connections.
                ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
                ("grpc.keepalive_permit_without_calls", 1),
                # A port another process holds is an error, not a silently shared port.
                ("grpc.so_reuseport", 0),
                # Clients reconnect now and then, and so find replicas added since; with no
                # max_connection_age_grace, a call running at that moment goes on to its end.
                *age,
            ],
            # No maximum_concurrent_rpcs: it counts health checks too; the gate keeps the limit.
        )
        self._gate.limit = max_concurrent_calls
        self._register(server)
        # As the mesh's services are: request bytes that do not parse are INVALID_ARGUMENT,
        # not the UNKNOWN gRPC reports when a generated deserializer raises.
        add_servicer(health_pb2_grpc.add_HealthServicer_to_server, self._health, server)
        reflection.enable_server_reflection(
            (*self._service_names, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
        try:
            if security.tls is None:
                port: int = server.add_insecure_port(address)
            else:
                front = security.tls.credentials(require_client_certificate=False)
                port = server.add_secure_port(address, front)
            if mesh_address is not None:
                assert security.tls is not None
                mesh = security.tls.credentials(require_client_certificate=True)
                self.mesh_port = server.add_secure_port(mesh_address, mesh)
        except RuntimeError as error:
            raise AdkIOError(f"cannot bind {address!r}: {error}") from error
        await server.start()
        self._server = server
        for name in ("", *self._service_names):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        _log_doors(address, mesh_address, security)
        return port

    async def stop(self, grace: float | None = None) -> None:
        """Report NOT_SERVING, then stop; running calls get ``grace`` seconds to finish."""
        server = self._server
        if server is None:
            return
        self._server = None
        await self._health.enter_graceful_shutdown()
        await server.stop(grace)

    async def drain(self, grace: float) -> None:
        """Stop gracefully: report NOT_SERVING and refuse new calls with UNAVAILABLE (health
        and reflection stay open, so probes read NOT_SERVING), let running calls finish for up
        to ``grace`` seconds, then stop, cancelling whatever still runs."""
        if self._server is None:
            return
        await self._health.enter_graceful_shutdown()
        self._gate.close()
        loop = asyncio.get_running_loop()
        started = loop.time()
        await self._gate.wait_idle(grace)
        remaining = max(0.0, grace - (loop.time() - started))
        # Finished calls still flush their status; open health watches get at most a second.
        await self.stop(min(remaining, 1.0))

    async def wait_for_termination(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()


def _log_doors(address: str, mesh_address: str | None, security: ServerSecurity) -> None:
    if plaintext_beyond_loopback(address, security):
        logger.warning(
            "serving PLAINTEXT on %s (--insecure): anyone on the network can read and forge "
            "calls; the mesh door stays open to this machine's processes only",
            address,
        )
    elif security.tls is None:
        logger.info("no TLS on %s: the mesh door is open to this machine's processes only", address)
    elif mesh_address is None:
        logger.info("TLS on %s; no mesh door (no client CA): mesh-door calls are refused", address)
    else:
        logger.info(
            "TLS on %s; mesh door (mutual TLS) on %s for %s",
            address,
            mesh_address,
            ", ".join(sorted(security.allow_peers)) or "no peer (empty allow-list)",
        )
    if not security.authenticators:
        logger.info("no authenticator: a root run's user is whoever the request names")
