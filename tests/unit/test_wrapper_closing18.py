"""Every wrapper the mesh puts around a served stream closes the stream it wraps when it is
closed itself.

gRPC closes only the outermost generator of a call it gives up on (a client's cancel that
finds the handler waiting to send). A wrapper relaying with a bare ``async for`` left the
wrapped generator to the garbage collector's finalizer, which closes it later, in a task of
its own: its ``finally`` (a span's end, a store's cleanup) ran after the drain gate had
counted the call done, or after the tracing wrapper had ended the call's span.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from adk_mesh.mesh._doors import DoorKeeper
from adk_mesh.mesh._drain import CallGate
from adk_mesh.mesh._interceptors import _wrap_unary_stream
from adk_mesh.mesh._status import _guard_handler
from adk_mesh.mesh.security import ServerSecurity
from adk_mesh.v1 import agent_pb2

METHOD = "/adk_mesh.v1.AgentService/Run"


class _Context:
    """What the wrappers read of a servicer context, for a plain call from loopback."""

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    def auth_context(self) -> dict[str, Any]:
        return {}


def _stream(closed: list[bool]) -> Callable[[Any, Any], AsyncIterator[str]]:
    """A servicer's stream (an async generator function, as servicers' are) that records in
    ``closed`` when its ``finally`` ran."""

    async def stream(request: Any, context: Any) -> AsyncIterator[str]:
        try:
            for number in range(10):
                yield f"response {number}"
        finally:
            closed.append(True)

    return stream


def _gate(behaviour: Any) -> Any:
    return CallGate().wrap_unary_stream(behaviour, METHOD)


def _status(behaviour: Any) -> Any:
    return _guard_handler(grpc.unary_stream_rpc_method_handler(behaviour), METHOD).unary_stream


def _untraced(behaviour: Any) -> Any:
    return _wrap_unary_stream(behaviour, METHOD, False)


def _door(behaviour: Any) -> Any:
    return DoorKeeper(ServerSecurity()).wrap_unary_stream(behaviour, METHOD)


@pytest.mark.parametrize(
    "wrap",
    [_gate, _status, _untraced, _door],
    ids=["drain-gate", "status-guard", "untraced-interceptor", "door-keeper"],
)
async def test_closing_a_wrapper_closes_the_stream_it_wraps(
    wrap: Callable[[Any], Any],
) -> None:
    closed: list[bool] = []
    outer = wrap(_stream(closed))(agent_pb2.RunRequest(), _Context())
    assert await anext(outer) == "response 0"
    await outer.aclose()
    # Closed by the time the wrapper is, not later by the finalizer's task.
    assert closed == [True]


async def test_the_drain_gate_counts_the_call_until_the_wrapped_stream_is_closed() -> None:
    gate = CallGate()
    seen_in_flight: list[int] = []

    async def servicer(request: Any, context: Any) -> AsyncIterator[str]:
        try:
            yield "one"
            yield "two"
        finally:
            seen_in_flight.append(gate.in_flight)

    outer = gate.wrap_unary_stream(servicer, METHOD)(agent_pb2.RunRequest(), _Context())
    await anext(outer)
    await outer.aclose()
    assert seen_in_flight == [1]  # its cleanup still counts as the call in flight
    assert gate.in_flight == 0
