"""Channels and servers with the mesh's settings, in one place.

Clients get :func:`open_channel`: message-size limits set on purpose (agents carry whole
session views and artifacts inline), keepalive so a dead peer is noticed on an idle channel,
round-robin balancing over every address a ``dns:///`` target resolves to, and a retry policy
for the idempotent reads (``Describe``, ``ListTools``) only: ``Run`` and ``CallTool`` have
effects and are never retried by the transport.

Servers derive from :class:`MeshServer`, which registers gRPC health (``SERVING`` once started,
``NOT_SERVING`` as soon as stopping begins) and reflection for the services it serves.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from adk_mesh.errors import AdkIOError, ConfigError
from adk_mesh.mesh._drain import CallGate
from adk_mesh.mesh._interceptors import TracedChannel, server_interceptors

__all__ = ["MAX_MESSAGE_BYTES", "MeshServer", "channel_options", "open_channel"]

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
        ("grpc.service_config", json.dumps(_SERVICE_CONFIG)),
    ]


def open_channel(target: str) -> grpc.aio.Channel:
    """An insecure channel to ``target`` (``host:port`` or ``dns:///host:port``)."""
    if not target:
        raise ConfigError("a mesh target must not be empty; write host:port or dns:///host:port")
    return TracedChannel(grpc.aio.insecure_channel(target, options=channel_options()))


class MeshServer:
    """A ``grpc.aio`` server with health and reflection; subclasses add their servicer.

    Subclasses implement :meth:`_register` and name their service in ``_service_names``.
    """

    _service_names: Sequence[str] = ()

    def __init__(self) -> None:
        self._server: grpc.aio.Server | None = None
        self._health = health.aio.HealthServicer()
        self._gate = CallGate(exempt=(health.SERVICE_NAME, reflection.SERVICE_NAME))

    def _register(self, server: grpc.aio.Server) -> None:
        raise NotImplementedError

    async def start(self, address: str = "127.0.0.1:0") -> int:
        """Bind ``address``, start serving and return the bound port (useful with port 0)."""
        if self._server is not None:
            raise ConfigError(f"{type(self).__name__} is already started")
        server = grpc.aio.server(
            # Tracing outermost, so a call the gate refuses still has its span.
            interceptors=[*server_interceptors(), self._gate],
            options=[
                *_COMMON_OPTIONS,
                # Accept the clients' keepalive pings on idle connections.
                ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
                ("grpc.keepalive_permit_without_calls", 1),
                # A port another process holds is an error, not a silently shared port.
                ("grpc.so_reuseport", 0),
            ],
        )
        self._register(server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        reflection.enable_server_reflection(
            (*self._service_names, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
        try:
            port: int = server.add_insecure_port(address)
        except RuntimeError as error:
            raise AdkIOError(f"cannot bind {address!r}: {error}") from error
        await server.start()
        self._server = server
        for name in ("", *self._service_names):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
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
