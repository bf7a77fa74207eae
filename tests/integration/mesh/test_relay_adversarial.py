"""Client <- A <- B, adversarially: what a client reads through A (which batches its stream and
relays B's partial events undecoded, mesh._relay) is what the same tree yields in one process —
same events, same order, partials never stored — also with plugins on A, parallel branches,
transfers inside B's tree, B failing mid-stream and a client that goes away mid-relay."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh import codec
from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.agents.workflow import ParallelAgent, SequentialAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import InvocationContext, RunConfig, StreamingMode, ToolContext
from adk_mesh.errors import ModelError
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.mesh import _relay as relay_module
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.mesh.agent_server import INLINE_EVENTS
from adk_mesh.models.base import Llm, LlmRequest
from adk_mesh.plugins.base import Plugin
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, call
from adk_mesh.types import Content, Event, LlmResponse, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc

SSE = RunConfig(streaming_mode=StreamingMode.SSE)


class Streamer(Llm):
    """Streams ``count`` partials ``<prefix><i> `` (and ``pad`` dots) then their whole text;
    ``fail`` raises in place of the whole text, ``block`` waits forever there (until
    cancelled)."""

    def __init__(
        self,
        prefix: str,
        count: int,
        *,
        fail: Exception | None = None,
        block: bool = False,
        pad: int = 0,
    ) -> None:
        super().__init__(f"streamer-{prefix}")
        self.prefix = prefix
        self.count = count
        self.fail = fail
        self.block = block
        self.pad = "." * pad
        self.streamed = 0
        self.closed = asyncio.Event()

    async def generate_content(
        self, request: LlmRequest, *, stream: bool = False
    ) -> AsyncIterator[LlmResponse]:
        try:
            for i in range(self.count if stream else 0):
                self.streamed += 1
                yield LlmResponse(
                    content=Content(
                        role="model", parts=[Part(text=f"{self.prefix}{i} {self.pad}")]
                    ),
                    partial=True,
                )
            if self.fail is not None:
                raise self.fail
            if self.block:
                await asyncio.Event().wait()
            whole = "".join(f"{self.prefix}{i} {self.pad}" for i in range(self.count))
            yield LlmResponse(content=Content.from_text("model", whole), turn_complete=True)
        finally:
            self.closed.set()


def transfer_to(name: str) -> FunctionModel:
    return FunctionModel(lambda _: call("transfer_to_agent", {"agent_name": name}))


def talker_front(talker: RemoteAgent) -> LlmAgent:
    """A's root, which transfers to B's talker through ``talker``."""
    return LlmAgent(name="front", model=transfer_to("talker"), sub_agents=[talker])


async def serve(agent: BaseAgent, **kwargs: Any) -> tuple[AgentServer, str]:
    server = AgentServer(agent, **kwargs)
    port = await server.start("127.0.0.1:0")
    return server, f"127.0.0.1:{port}"


def request(*, batches: bool, text: str = "go") -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="u", new_message=codec.content_to_proto(Content.from_text("user", text))
        ),
        run_config=codec.run_config_to_proto(SSE),
        accept_event_batches=batches,
    )


async def through(target: str, *, batches: bool) -> tuple[str, list[Event]]:
    """The session id and the events a client reads of one turn at ``target``."""
    async with open_channel(target, tls=None) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        responses = [r async for r in stub.Run(request(batches=batches), timeout=60)]
    events = [event for r in responses for event in codec.run_response_events(r)]
    return responses[0].session_id, events


async def in_process(agent: BaseAgent, plugins: list[Plugin] | None = None) -> list[Event]:
    """The events the same tree yields to a Runner of this process."""
    service = InMemorySessionService()
    runner = Runner(agent=agent, app_name="app", session_service=service, plugins=plugins)
    session = await service.create_session(app_name="app", user_id="u")
    return [
        event
        async for event in runner.run(
            user_id="u",
            session_id=session.id,
            new_message=Content.from_text("user", "go"),
            run_config=SSE,
        )
    ]


async def close_remote_agents(tree: BaseAgent) -> None:
    """Close the RemoteAgents of a tree this process ran (their channels to B)."""
    for agent in tree.walk():
        if isinstance(agent, RemoteAgent):
            await agent.close()


Shape = tuple[str, bool, str, str, str | None]


def shape(events: list[Event]) -> list[Shape]:
    """What a client compares across runs (ids and timestamps differ)."""
    return [
        (
            event.author,
            event.partial,
            event.branch,
            event.text or "",
            event.actions.transfer_to_agent,
        )
        for event in events
    ]


async def stored_partials(service: InMemorySessionService, session_id: str) -> list[Event]:
    session = await service.get_session(app_name="app", user_id="u", session_id=session_id)
    assert session is not None
    return [event for event in session.events if event.partial]


@pytest.fixture
def forwarded(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The messages relayed undecoded (so a test knows the relay was used)."""
    messages: list[object] = []
    forward = relay_module.PartialRelay.forward

    async def counted(self: relay_module.PartialRelay, message: Any) -> None:
        messages.append(message)
        await forward(self, message)

    monkeypatch.setattr(relay_module.PartialRelay, "forward", counted)
    return messages


# --- a plugin's on_event sees every event of the turn, relayed partials included ------------


class Bracketing(Plugin):
    """Replaces every partial event's text by ``[text]`` (a redacting plugin, say)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    async def on_event(
        self, *, invocation_context: InvocationContext, event: Event
    ) -> Event | None:
        if not event.partial or event.content is None:
            return None
        self.seen += 1
        parts = [Part(text=f"[{part.text}]") for part in event.content.parts if part.text]
        return event.model_copy(
            update={
                "llm_response": event.llm_response.model_copy(
                    update={"content": Content(role="model", parts=parts)}
                )
            }
        )


TOKENS = 200


@pytest.mark.parametrize("batches", [True, False])
async def test_on_event_plugins_of_a_see_and_replace_every_partial_event(
    batches: bool, forwarded: list[object]
) -> None:
    b, b_target = await serve(
        LlmAgent(name="talker", description="Talks.", model=Streamer("t", TOKENS))
    )
    plugin = Bracketing()
    sessions = InMemorySessionService()
    front = talker_front(RemoteAgent("talker", b_target, description="Talks."))
    a, a_target = await serve(front, app_name="app", session_service=sessions, plugins=[plugin])
    try:
        session_id, events = await through(a_target, batches=batches)
    finally:
        await a.stop(None)
        await b.stop(None)
    partials = [event.text for event in events if event.partial]
    # As in process: the Runner's on_event replaced every partial event it yielded.
    assert partials == [f"[t{i} ]" for i in range(TOKENS)]
    assert plugin.seen == TOKENS
    assert not await stored_partials(sessions, session_id)


# --- differential: the same tree, in one process and through A ------------------------------


def b_tree() -> BaseAgent:
    """What B serves: a talker (300 partials); a desk that transfers to its own expert (300
    partials); a clerk that streams, then hands the conversation back to the caller's front;
    a stopper that streams, then ends the invocation."""

    def stop(tool_context: ToolContext) -> dict[str, Any]:
        """Stop the invocation."""
        tool_context.invocation_context.end_invocation()
        return {"stopped": True}

    def streamed_then(name: str, args: dict[str, Any]) -> LlmResponse:
        said = [Part(text=f"{name} {i} ") for i in range(20)]
        parts = [*said, Part.from_function_call(name, args)]
        return LlmResponse(content=Content(role="model", parts=parts), turn_complete=True)

    return LlmAgent(
        name="talker",
        description="Talks.",
        model=Streamer("t", 300),
        sub_agents=[
            LlmAgent(
                name="desk",
                description="Desk.",
                model=transfer_to("expert"),
                sub_agents=[
                    LlmAgent(name="expert", description="Knows.", model=Streamer("e", 300))
                ],
            ),
            LlmAgent(
                name="clerk",
                description="Clerk.",
                model=FunctionModel(
                    lambda _: streamed_then("transfer_to_agent", {"agent_name": "front"})
                ),
            ),
            LlmAgent(
                name="router",
                description="Router.",
                # Transfers to its specialist and ends the invocation in one step: the
                # specialist, run in B, adds nothing.
                model=FunctionModel(
                    lambda _: LlmResponse(
                        content=Content(
                            role="model",
                            parts=[
                                *(Part(text=f"route {i} ") for i in range(20)),
                                Part.from_function_call(
                                    "transfer_to_agent", {"agent_name": "specialist"}
                                ),
                                Part.from_function_call("stop", {}),
                            ],
                        ),
                        turn_complete=True,
                    )
                ),
                tools=[stop],
                sub_agents=[LlmAgent(name="specialist", model=Streamer("s", 5))],
            ),
            LlmAgent(
                name="stopper",
                model=FunctionModel(lambda _: streamed_then("stop", {})),
                tools=[stop],
            ),
        ],
    )


def sequence_tree(b_target: str) -> BaseAgent:
    return SequentialAgent(
        name="steps",
        sub_agents=[
            LlmAgent(name="intro", model=Streamer("i", 5)),
            RemoteAgent("talker", b_target, keeps_conversation=False),
            LlmAgent(name="outro", model=Streamer("o", 40)),
            RemoteAgent("talker2", b_target, agent_name="talker", keeps_conversation=False),
        ],
    )


def ended_tree(b_target: str) -> BaseAgent:
    # B ends the invocation after its partials: A's next step never runs.
    return SequentialAgent(
        name="steps",
        sub_agents=[
            RemoteAgent("talker", b_target, keeps_conversation=False),
            RemoteAgent("stopper", b_target, agent_name="stopper", keeps_conversation=False),
            LlmAgent(name="outro", model=Streamer("o", 40)),
        ],
    )


def front(b_target: str, remote: str, answer: str) -> BaseAgent:
    """A coordinator that transfers to ``remote`` (in B), then answers ``answer`` when the
    conversation comes back to it."""

    def model(request: LlmRequest) -> LlmResponse | str:
        transferred = any(
            part.function_call is not None for content in request.contents for part in content.parts
        )
        return answer if transferred else call("transfer_to_agent", {"agent_name": remote})

    return LlmAgent(
        name="front",
        model=FunctionModel(model),
        sub_agents=[RemoteAgent(remote, b_target, agent_name=remote, description=remote)],
    )


def transfer_tree(b_target: str) -> BaseAgent:
    # B's desk transfers to its own expert (inside B's tree): A sees the transfer without its
    # action, then the expert's events.
    return front(b_target, "desk", "never")


def handed_back_tree(b_target: str) -> BaseAgent:
    # B's clerk streams, then transfers to A's front (outside B's tree): B's stream ends with
    # that transfer, and A follows it.
    return front(b_target, "clerk", "back at the front")


def routed_tree(b_target: str) -> BaseAgent:
    # B's router transfers to its own specialist and ends the invocation: B's stream ends
    # with that transfer, which A must not follow (the specialist is not in A's tree).
    return front(b_target, "router", "never")


@pytest.mark.parametrize(
    "tree",
    [sequence_tree, ended_tree, transfer_tree, handed_back_tree, routed_tree],
    ids=["sequence", "ended", "transfer", "handed-back", "routed-and-ended"],
)
async def test_a_client_reads_through_a_what_the_tree_yields_in_process(
    tree: Callable[[str], BaseAgent], forwarded: list[object]
) -> None:
    b, b_target = await serve(b_tree())
    sessions = InMemorySessionService()
    a, a_target = await serve(tree(b_target), app_name="app", session_service=sessions)
    local = tree(b_target)
    try:
        expected = shape(await in_process(local))
        forwarded.clear()  # a Runner of this process relays nothing
        session_id, batched = await through(a_target, batches=True)
        assert forwarded, "A relayed B's partial events"
        _, unbatched = await through(a_target, batches=False)
    finally:
        await close_remote_agents(local)
        await a.stop(None)
        await b.stop(None)
    assert shape(batched) == expected
    assert shape(unbatched) == expected
    assert len({event.id for event in batched}) == len(batched)
    assert not await stored_partials(sessions, session_id)
    CHECKS[tree](expected)


def _sequence(events: list[Shape]) -> None:
    assert [e[0] for e in events if not e[1]] == ["intro", "talker", "outro", "talker"]


def _ended(events: list[Shape]) -> None:
    # The stopper's text streamed, its call and response; then nothing (outro never ran).
    assert [e[:2] for e in events][-22:] == [("stopper", True)] * 20 + [("stopper", False)] * 2
    assert "outro" not in {e[0] for e in events}


def _transfer(events: list[Shape]) -> None:
    desk = [e for e in events if e[0] == "desk"]
    assert len(desk) == 2 and desk[-1][4] is None  # carried out in B: no transfer action here
    assert events[-1][:2] == ("expert", False) and events[-2][:2] == ("expert", True)


def _handed_back(events: list[Shape]) -> None:
    assert [e[4] for e in events if e[0] == "clerk"][-1] == "front"
    assert events[-1] == ("front", False, "", "back at the front", None)


def _routed(events: list[Shape]) -> None:
    # As in one process, where the specialist would not run (the invocation ended): the
    # router's call and its response, carried out in B (no transfer action here), last.
    assert [e[:2] for e in events][-2:] == [("router", False)] * 2
    assert events[-1][4] is None
    assert "specialist" not in {e[0] for e in events}


CHECKS: dict[Callable[[str], BaseAgent], Callable[[list[Shape]], None]] = {
    routed_tree: _routed,
    sequence_tree: _sequence,
    ended_tree: _ended,
    transfer_tree: _transfer,
    handed_back_tree: _handed_back,
}


async def test_parallel_branches_keep_each_branchs_order(forwarded: list[object]) -> None:
    b, b_target = await serve(b_tree())
    sessions = InMemorySessionService()

    def tree() -> BaseAgent:
        return ParallelAgent(
            name="fan",
            sub_agents=[
                SequentialAgent(
                    name=f"lane{n}",
                    sub_agents=[
                        LlmAgent(name=f"pre{n}", model=Streamer(f"p{n}.", 10)),
                        RemoteAgent(
                            f"remote{n}", b_target, agent_name="talker", keeps_conversation=False
                        ),
                        LlmAgent(name=f"post{n}", model=Streamer(f"q{n}.", 10)),
                    ],
                )
                for n in range(3)
            ],
        )

    local = tree()
    a, a_target = await serve(tree(), app_name="app", session_service=sessions)
    try:
        expected = shape(await in_process(local))
        forwarded.clear()
        session_id, received = await through(a_target, batches=True)
    finally:
        await close_remote_agents(local)
        await a.stop(None)
        await b.stop(None)

    def by_branch(events: list[Shape]) -> dict[str, list[Shape]]:
        lanes: dict[str, list[Shape]] = {}
        for event in events:
            lanes.setdefault(event[2], []).append(event)
        return lanes

    assert by_branch(shape(received)) == by_branch(expected)
    assert len(received) == len(expected)
    assert not await stored_partials(sessions, session_id)


# --- B fails mid-stream, after A relayed some of its partials -------------------------------


async def test_an_error_of_b_after_relayed_partials_reaches_the_client_after_them(
    forwarded: list[object],
) -> None:
    count = 100
    b, b_target = await serve(
        LlmAgent(
            name="talker",
            description="Talks.",
            model=Streamer("t", count, fail=ModelError("the talker model broke")),
        )
    )
    sessions = InMemorySessionService()
    front = talker_front(RemoteAgent("talker", b_target, description="Talks."))
    a, a_target = await serve(front, app_name="app", session_service=sessions)
    received: list[Event] = []
    session_id = ""
    try:
        async with open_channel(a_target, tls=None) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                async for response in stub.Run(request(batches=True), timeout=60):
                    session_id = session_id or response.session_id
                    received.extend(codec.run_response_events(response))
    finally:
        await a.stop(None)
        await b.stop(None)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    error = error_from_rpc_error(raised.value)
    assert isinstance(error, ModelError)
    assert "the talker model broke" in error.message
    assert forwarded
    assert [e.text for e in received if e.partial] == [f"t{i} " for i in range(count)]
    assert [e.author for e in received if not e.partial] == ["front", "front"]
    assert not await stored_partials(sessions, session_id)


# --- the client goes away mid-relay ---------------------------------------------------------


def watched_front(b_target: str) -> tuple[LlmAgent, asyncio.Event]:
    """A's root, which transfers to B's talker through a RemoteAgent, and an event set once
    that RemoteAgent's run has ended (however it ended)."""
    ended = asyncio.Event()

    class Watched(RemoteAgent):
        async def _run_impl(self, ctx: InvocationContext) -> AsyncIterator[Event]:  # type: ignore[override]
            try:
                async for event in super()._run_impl(ctx):
                    yield event
            finally:
                ended.set()

    front = talker_front(Watched("talker", b_target, description="Talks."))
    return front, ended


async def test_a_client_cancelling_mid_relay_stops_the_run_on_a_and_b(
    forwarded: list[object],
) -> None:
    model = Streamer("t", 50, block=True)
    b, b_target = await serve(LlmAgent(name="talker", description="Talks.", model=model))
    front, ended = watched_front(b_target)
    a, a_target = await serve(front, app_name="app")
    try:
        async with open_channel(a_target, tls=None) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            stream = stub.Run(request(batches=True), timeout=60)
            partials = 0
            async for response in stream:
                partials += sum(e.partial for e in codec.run_response_events(response))
                if partials == 50:
                    break
            assert forwarded
            stream.cancel()
        async with asyncio.timeout(30):
            await model.closed.wait()  # B's model call was cancelled
            await ended.wait()  # A's RemoteAgent ended
    finally:
        await a.stop(None)
        await b.stop(None)


# --- a client that reads slowly holds the run back: no hop buffers without bound ------------


async def settled(count: Callable[[], int]) -> int:
    """``count()`` once it has stopped growing (or the test's patience ran out)."""
    last = -1
    async with asyncio.timeout(120):
        while (now := count()) != last:
            last = now
            await asyncio.sleep(1.0)
    return last


@pytest.mark.parametrize("then", ["read on", "cancel"])
async def test_a_client_that_stops_reading_holds_b_back(then: str, forwarded: list[object]) -> None:
    many = 12_000
    model = Streamer("t", many, pad=4096)
    b, b_target = await serve(LlmAgent(name="talker", description="Talks.", model=model))
    front, ended = watched_front(b_target)
    sessions = InMemorySessionService()
    a, a_target = await serve(front, app_name="app", session_service=sessions)
    try:
        async with open_channel(a_target, tls=None) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            stream = stub.Run(request(batches=True), timeout=300)
            responses = aiter(stream)
            first = await anext(responses)
            session_id = first.session_id
            # The client reads nothing more: B's model is held back well before its end.
            streamed = await settled(lambda: model.streamed)
            assert forwarded, "A relays B's partials"
            assert streamed < many
            assert not model.closed.is_set()
            if then == "cancel":
                stream.cancel()
                async with asyncio.timeout(30):
                    await model.closed.wait()
                    await ended.wait()
                return
            events = codec.run_response_events(first)
            async for response in responses:
                events.extend(codec.run_response_events(response))
    finally:
        await a.stop(None)
        await b.stop(None)
    # Then every event arrives, once, in order.
    assert [e.text for e in events if e.partial] == [f"t{i} {model.pad}" for i in range(many)]
    assert [e.author for e in events if not e.partial] == ["front", "front", "talker"]
    assert len({e.id for e in events}) == len(events)
    assert not await stored_partials(sessions, session_id)


# --- three hops, the middle one over RunDelegated (its caller has stores) --------------------


async def test_partials_relayed_twice_reach_an_application_whole_and_in_order(
    forwarded: list[object],
) -> None:
    # application (Runner, with an artifact store: RunDelegated) -> A -> B -> C.
    c, c_target = await serve(
        LlmAgent(name="talker", description="Talks.", model=Streamer("t", TOKENS))
    )
    b, b_target = await serve(
        LlmAgent(
            name="middle",
            description="Middle.",
            model=transfer_to("talker"),
            sub_agents=[RemoteAgent("talker", c_target, description="Talks.")],
        )
    )
    a, a_target = await serve(
        LlmAgent(
            name="front",
            description="Front.",
            model=transfer_to("middle"),
            sub_agents=[RemoteAgent("middle", b_target, description="Middle.")],
        )
    )
    remote = RemoteAgent("front", a_target)
    service = InMemorySessionService()
    runner = Runner(
        agent=remote,
        app_name="app",
        session_service=service,
        artifact_service=InMemoryArtifactService(),
    )
    try:
        session = await service.create_session(app_name="app", user_id="u")
        events = [
            event
            async for event in runner.run(
                user_id="u",
                session_id=session.id,
                new_message=Content.from_text("user", "go"),
                run_config=SSE,
            )
        ]
    finally:
        await remote.close()
        await a.stop(None)
        await b.stop(None)
        await c.stop(None)
    assert [(e.author, e.partial) for e in events if not e.partial] == [
        ("front", False),
        ("front", False),
        ("middle", False),
        ("middle", False),
        ("talker", False),
    ]
    assert [e.text for e in events if e.partial] == [f"t{i} " for i in range(TOKENS)]
    assert events[-1].text == "".join(f"t{i} " for i in range(TOKENS))
    # B and A each relayed C's partials past their first events.
    assert len(forwarded) >= 2 * (TOKENS - INLINE_EVENTS)
    stored = await service.get_session(app_name="app", user_id="u", session_id=session.id)
    assert stored is not None and not [e for e in stored.events if e.partial]
