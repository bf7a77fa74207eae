"""Relaying events across a hop, reviewed: what a caller reads of a delegated run that fails
mid-batch, and how the relay, the batches and the channels behave at their edges."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import grpc
import pytest

from adk_mesh import codec
from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import InvocationContext, serving_deadline
from adk_mesh.errors import AgentError
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.mesh import agent_server as agent_server_module
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.mesh.pki import DevCertificateAuthority
from adk_mesh.mesh.security import ClientTLS, ServerSecurity, ServerTLS
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.types import Content, Event, EventActions
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc


async def serve(agent: BaseAgent, **kwargs: Any) -> tuple[AgentServer, str]:
    server = AgentServer(agent, **kwargs)
    port = await server.start("127.0.0.1:0")
    return server, f"127.0.0.1:{port}"


def root_request(text: str = "go") -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="u", new_message=codec.content_to_proto(Content.from_text("user", text))
        ),
        accept_event_batches=True,
    )


# --- a delegated run failing mid-batch: the events before the failure still reach the caller


class StepsThenTooLarge(BaseAgent):
    """Records a step (a state change), then changes state by more than a message carries."""

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        yield Event.new(
            author=self.name,
            invocation_id=ctx.invocation_id,
            branch=ctx.branch,
            content=Content.from_text("model", "step one done"),
            actions=EventActions(state_delta={"step": "one"}),
        )
        yield Event.new(
            author=self.name,
            invocation_id=ctx.invocation_id,
            branch=ctx.branch,
            content=Content.from_text("model", "and a large result"),
            actions=EventActions(state_delta={"big": "x" * 200_000}),
        )


async def test_events_before_a_failing_event_of_a_batch_reach_the_caller_and_its_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Batches from the first event on, and a small message limit, so the two events of the
    # worker travel in one batch and the second cannot go whole.
    monkeypatch.setattr(agent_server_module, "INLINE_EVENTS", 0)
    monkeypatch.setattr(agent_server_module, "MAX_EVENT_BYTES", 64 * 1024)
    b, b_target = await serve(StepsThenTooLarge(name="worker", description="Works."))
    sessions = InMemorySessionService()
    front = LlmAgent(
        name="front",
        model=FunctionModel(lambda _: call("transfer_to_agent", {"agent_name": "worker"})),
        sub_agents=[RemoteAgent("worker", b_target, description="Works.")],
    )
    a, a_target = await serve(front, app_name="app", session_service=sessions)
    received: list[Event] = []
    session_id = ""
    try:
        async with open_channel(a_target, tls=None) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                async for response in stub.Run(root_request(), timeout=60):
                    session_id = session_id or response.session_id
                    received.extend(codec.run_response_events(response))
    finally:
        await a.stop(None)
        await b.stop(None)
        await front.sub_agents[0].close()  # type: ignore[attr-defined]
    error = error_from_rpc_error(raised.value)
    assert isinstance(error, AgentError)
    assert "'big'" in error.message
    # The step the worker made before the failure reached the client and the session, as it
    # is stored in process before the failing event.
    assert [e.text for e in received if e.author == "worker"] == ["step one done"]
    session = await sessions.get_session(app_name="app", user_id="u", session_id=session_id)
    assert session is not None
    assert session.state.get("step") == "one"


# --- Describe of a served RemoteAgent reaches its service as the RemoteAgent does ------------


async def test_the_card_of_a_remote_agent_is_asked_over_that_agents_own_tls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The TLS is the RemoteAgent's own (not ADK_MESH_TLS_*): its service is reached with it.
    for name in ("ADK_MESH_TLS_CA", "ADK_MESH_TLS_CERT", "ADK_MESH_TLS_KEY"):
        monkeypatch.delenv(name, raising=False)
    ca = DevCertificateAuthority(tmp_path / "mesh")
    server, peer = ca.issue("researcher"), ca.issue("coordinator")
    b = AgentServer(
        LlmAgent(name="researcher", description="Finds.", model=ScriptedModel(["found"]))
    )
    await b.start(
        "127.0.0.1:0",
        security=ServerSecurity(
            tls=ServerTLS(server.cert_file, server.key_file, ca.ca_file),
            allow_peers=frozenset({peer.identity}),
        ),
        mesh_address="127.0.0.1:0",
    )
    remote = RemoteAgent(
        "researcher",
        f"127.0.0.1:{b.mesh_port}",
        tls=ClientTLS(ca_file=ca.ca_file, cert_file=peer.cert_file, key_file=peer.key_file),
    )
    front = LlmAgent(name="front", model=ScriptedModel(["hi"]), sub_agents=[remote])
    a, a_target = await serve(front)
    try:
        async with open_channel(a_target, tls=None) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            answer = await stub.Describe(
                agent_pb2.DescribeRequest(agent_name="researcher"), timeout=30
            )
            whole = await stub.Describe(agent_pb2.DescribeRequest(), timeout=30)
    finally:
        await a.stop(None)
        await b.stop(None)
        await remote.close()
    assert answer.card.name == "researcher"
    assert answer.card.description == "Finds."
    assert [sub.name for sub in whole.card.sub_agents] == ["researcher"]


# --- a root run that yields no event still names the session it created -----------------------


class Silent(BaseAgent):
    """Yields nothing (a workflow whose steps all had nothing to say)."""

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        return
        yield  # pragma: no cover - an async generator


@pytest.mark.parametrize("batches", [True, False])
async def test_a_run_without_events_still_names_the_new_session(batches: bool) -> None:
    sessions = InMemorySessionService()
    a, a_target = await serve(Silent(name="silent"), app_name="app", session_service=sessions)
    request = root_request()
    request.accept_event_batches = batches
    try:
        async with open_channel(a_target, tls=None) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            responses = [r async for r in stub.Run(request, timeout=30)]
    finally:
        await a.stop(None)
    # The turn created a session and stored the user's message there: the client learns
    # which, to send the next turn to it.
    assert [r.session_id for r in responses if r.session_id] != []
    session_id = responses[0].session_id
    assert [codec.run_response_events(r) for r in responses] == [[]]
    session = await sessions.get_session(app_name="app", user_id="u", session_id=session_id)
    assert session is not None
    assert [e.author for e in session.events] == ["user"]


# --- a far deadline (a client's "no deadline" as its largest one) travels as a usable one ------

#: The largest deadline of gRPC's Go and Java clients (a signed 64-bit count of nanoseconds,
#: about 292 years), which some use for "no deadline"; a service serving such a call has it.
FAR = 2**63 / 1e9


async def test_a_far_deadline_does_not_fail_the_next_hop_at_once() -> None:
    b, b_target = await serve(
        LlmAgent(name="talker", description="Talks.", model=ScriptedModel(["hello"]))
    )
    remote = RemoteAgent("talker", b_target, description="Talks.")
    sessions = InMemorySessionService()
    runner = Runner(agent=remote, app_name="app", session_service=sessions)
    session = await sessions.create_session(app_name="app", user_id="u")
    # As AgentServer sets it for the call it serves (contexts.serving_deadline).
    token = serving_deadline.set(time.monotonic() + FAR * 0.99)
    try:
        events = [
            event
            async for event in runner.run(
                user_id="u", session_id=session.id, new_message=Content.from_text("user", "hi")
            )
        ]
    finally:
        serving_deadline.reset(token)
        await remote.close()
        await b.stop(None)
    assert [event.text for event in events] == ["hello"]
