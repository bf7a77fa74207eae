"""The buffer between a served run and a slow client is bounded in bytes, not only in events.

With batches, a served run goes on in a task of its own ahead of its client, its events
waiting in a buffer for the client to read them. A count of events alone does not bound that
buffer's memory: a run of large events (inline media, big tool results, up to 32 MiB each)
would have the server hold hundreds of MB for one slow client. The buffer holds at most
MAX_PENDING_BYTES of events (their estimated memory), whichever bound comes first; the run
waits for room instead (back-pressure), and an event larger than the bound alone still goes,
alone. Tested on a real AgentServer with a client that reads slowly, for the run's own events
and for the partial events a RemoteAgent relays from its peer.

"Slow" is a client that lets the event loop run a while between two reads (the server runs in
this process): without the bound the run makes every event before the client reads the third.
Nothing here asserts a duration.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from adk_mesh import codec
from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import InvocationContext
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.mesh import _relay as relay_module
from adk_mesh.mesh import agent_server as agent_server_module
from adk_mesh.mesh._channel import open_channel
from adk_mesh.testing import FunctionModel, call
from adk_mesh.types import Content, Event
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc

MIB = 1024 * 1024
#: The bound in these tests: small, so a run of a few dozen MiB passes it many times over.
CAP = 4 * MIB
#: What may be between the run and the client besides the buffer: the event the run is
#: handing over and the one on its way up the generators, and the responses gRPC and the
#: loopback connection hold (flow-control windows).
IN_FLIGHT = 2 * MIB + 32 * MIB


class Large(BaseAgent):
    """Streams ``count`` partial events of ``size`` characters each, then a short final one,
    counting the characters it made (before each event goes up)."""

    made: int = 0
    count: int = 0
    size: int = 0

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        text = "x" * self.size  # one string, shared: the events are what the server holds
        for _ in range(self.count):
            self.made += len(text)
            yield Event.new(
                author=self.name,
                invocation_id=ctx.invocation_id,
                branch=ctx.branch,
                content=Content.from_text("model", text),
                partial=True,
            )
        yield Event.new(
            author=self.name,
            invocation_id=ctx.invocation_id,
            branch=ctx.branch,
            content=Content.from_text("model", "done"),
        )


def record_peak(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The most bytes any served stream's buffer held, as it counts them, after each send."""
    peak = [0]
    backlog = agent_server_module._Backlog

    class Recorded(backlog):  # type: ignore[misc, valid-type]
        async def send(self, event: Any) -> None:
            await super().send(event)
            peak[0] = max(peak[0], self.bytes)

    monkeypatch.setattr(agent_server_module, "_Backlog", Recorded)
    return peak


async def read_slowly(target: str, made: Any) -> tuple[list[Event], int]:
    """Run a turn, pausing after each response; return the events and the most characters
    the run had made beyond what the client had read, at any read."""
    request = agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="u", new_message=codec.content_to_proto(Content.from_text("user", "go"))
        ),
        accept_event_batches=True,
    )
    events: list[Event] = []
    read = 0
    ahead = 0
    async with open_channel(target, tls=None) as channel:
        async for response in agent_pb2_grpc.AgentServiceStub(channel).Run(request, timeout=120):
            for event in codec.run_response_events(response):
                events.append(event)
                if event.partial:
                    read += len(event.text or "")
            ahead = max(ahead, made() - read)
            await asyncio.sleep(0.01)  # a slow client: the run may go on meanwhile
    return events, ahead


@pytest.mark.timeout(120)
async def test_a_slow_client_holds_a_run_of_large_events_back_by_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(agent_server_module, "MAX_PENDING_BYTES", CAP)
    peak = record_peak(monkeypatch)
    agent = Large(name="large", description="Streams large events.")
    agent.count, agent.size = 120, MIB  # 120 MiB in all: 30 times the bound
    server = AgentServer(agent)
    port = await server.start("127.0.0.1:0")
    try:
        events, ahead = await read_slowly(f"127.0.0.1:{port}", lambda: agent.made)
    finally:
        await server.stop(None)
    partials = [event for event in events if event.partial]
    assert len(partials) == 120 and all(len(e.text or "") == MIB for e in partials)
    assert events[-1].text == "done"
    # The server's buffer never held more than the bound (every event is smaller than it)...
    assert 0 < peak[0] <= CAP
    # ... and the run went no further ahead of the client than the buffer and the transport.
    assert ahead <= CAP + IN_FLIGHT


@pytest.mark.timeout(120)
async def test_an_event_larger_than_the_bound_still_goes_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(agent_server_module, "MAX_PENDING_BYTES", MIB)
    peak = record_peak(monkeypatch)
    agent = Large(name="large", description="Streams large events.")
    agent.count, agent.size = 12, 3 * MIB
    server = AgentServer(agent)
    port = await server.start("127.0.0.1:0")
    try:
        events, _ = await read_slowly(f"127.0.0.1:{port}", lambda: agent.made)
    finally:
        await server.stop(None)
    partials = [event for event in events if event.partial]
    assert len(partials) == 12 and all(len(e.text or "") == 3 * MIB for e in partials)
    assert events[-1].text == "done"
    # One such event at a time: never two of them waiting together.
    assert 3 * MIB <= peak[0] < 6 * MIB


@pytest.mark.timeout(120)
async def test_partial_events_relayed_from_a_peer_are_bounded_by_bytes_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(agent_server_module, "MAX_PENDING_BYTES", CAP)
    peak = record_peak(monkeypatch)
    relayed = [0]
    forward = relay_module.PartialRelay.forward

    async def counted(self: relay_module.PartialRelay, message: Any) -> None:
        relayed[0] += 1
        await forward(self, message)

    monkeypatch.setattr(relay_module.PartialRelay, "forward", counted)
    worker = Large(name="worker", description="Streams large events.")
    worker.count, worker.size = 60, MIB
    b = AgentServer(worker)
    b_port = await b.start("127.0.0.1:0")
    remote = RemoteAgent("worker", f"127.0.0.1:{b_port}", description="Streams large events.")
    front = LlmAgent(
        name="front",
        model=FunctionModel(lambda _: call("transfer_to_agent", {"agent_name": "worker"})),
        sub_agents=[remote],
    )
    a = AgentServer(front)
    a_port = await a.start("127.0.0.1:0")
    try:
        # What the worker made may be held by its own server's buffer, B's and A's gRPC, and
        # A's buffer: `ahead` is not asserted here, A's buffer is.
        events, _ = await read_slowly(f"127.0.0.1:{a_port}", lambda: worker.made)
    finally:
        await a.stop(None)
        await b.stop(None)
        await remote.close()
    partials = [event for event in events if event.partial and event.author == "worker"]
    assert len(partials) == 60 and all(len(e.text or "") == MIB for e in partials)
    assert [e.text for e in events if e.author == "worker" and not e.partial] == ["done"]
    assert relayed[0] > 0  # A's buffer held the worker's partial events as relayed messages
    # Both servers' buffers (A's holding the relayed messages) stayed under the bound.
    assert 0 < peak[0] <= CAP
