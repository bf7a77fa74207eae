"""A RemoteAgent learns from its service's AgentCard whether the agent it stands for keeps the
conversation (``AgentCard.keeps_conversation``), so that the user's next turn goes where it
would with the same tree in one process:

- a served workflow (Sequential, Parallel, Loop) that answered last does not get the next
  turn: the caller's root answers it, in one process and across services, in the same process
  as the first turn and in a new one (the root's tree built anew, as after a restart);
- a served LlmAgent still keeps it;
- ``keeps_conversation`` given explicitly wins over the card; a card without the field (an
  older service) leaves today's default (yes), asked once.

Each parity case is played in one process and across a real AgentServer (127.0.0.1, port 0),
the root's Runner on a SQLite session file (the helpers of ``test_remote_resume``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.agents.workflow import LoopAgent, ParallelAgent, SequentialAgent
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.testing import ScriptedModel
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc
from tests.integration.mesh.test_parity import IN_PROCESS, REMOTE, Outcome
from tests.integration.mesh.test_remote_resume import (
    Play,
    _authors_and_contents,
    _play,
    _stored,
    _transfer,
)

APP = "app"

WORKFLOWS: dict[str, Callable[..., BaseAgent]] = {
    "sequential": lambda **kw: SequentialAgent(**kw),
    "parallel": lambda **kw: ParallelAgent(**kw),
    "loop": lambda **kw: LoopAgent(max_iterations=1, **kw),
}


def _flow_tree(play: Play, kind: str) -> Callable[[], BaseAgent]:
    """A factory of the workflow ``flow`` (two LLM steps), its models registered once."""
    # A second answer each: if the workflow ran again, the run would not fail, it would differ.
    one = play.model("one", ["Step one done.", "Step one again."])
    two = play.model("two", ["Step two done.", "Step two again."])

    def build() -> BaseAgent:
        return WORKFLOWS[kind](
            name="flow",
            description="Runs the two steps.",
            sub_agents=[
                LlmAgent(name="one", description="Step one.", model=one),
                LlmAgent(name="two", description="Step two.", model=two),
            ],
        )

    return build


async def _two_turns(
    play: Play,
    served_tree: Callable[[], BaseAgent],
    *,
    restarted: bool,
    root_answers: list[Any],
) -> None:
    """root → transfer to the served agent, which answers the first turn; then a second turn.
    ``restarted``: the root's tree (its RemoteAgent included) is built anew for the second
    turn, so nothing it learned in the first is left."""
    root_model = play.model("root", root_answers)
    served = await play.served(served_tree())
    port = int(served.target.rsplit(":", 1)[1]) if isinstance(served, RemoteAgent) else 0

    def root() -> BaseAgent:
        if isinstance(served, RemoteAgent):
            here: BaseAgent = play.remote(served.name, port, served.description)
        else:
            here = served_tree()
        return LlmAgent(name="root", model=root_model, sub_agents=[here])

    tree = root()
    await play.turn(tree, "Please run it.")
    await play.turn(root() if restarted else tree, "Thanks. Anything else?")


async def _same_in_process_and_remote(
    tmp_path: Path, case: Callable[[Play], Any]
) -> tuple[Outcome, Outcome]:
    local = await _play(IN_PROCESS, tmp_path, case)
    remote = await _play(REMOTE, tmp_path, case)
    assert local["errors"] == []
    assert remote["errors"] == []
    assert _authors_and_contents(remote) == _authors_and_contents(local)
    assert _stored(remote) == _stored(local)
    assert remote["seen"] == local["seen"]
    return local, remote


def _second_turn_authors(outcome: Outcome) -> list[str]:
    stored = outcome["stored"]
    users = [i for i, event in enumerate(stored) if event["author"] == "user"]
    return [event["author"] for event in stored[users[1] + 1 :]]


@pytest.mark.parametrize("restarted", [False, True], ids=["same_process", "restarted"])
@pytest.mark.parametrize("kind", sorted(WORKFLOWS))
async def test_a_served_workflow_does_not_keep_the_conversation(
    tmp_path: Path, kind: str, restarted: bool
) -> None:
    async def case(play: Play) -> None:
        await _two_turns(
            play,
            _flow_tree(play, kind),
            restarted=restarted,
            root_answers=[_transfer("flow"), "Root here: nothing else."],
        )

    local, remote = await _same_in_process_and_remote(tmp_path, case)
    # In one process the root answers the second turn (a workflow starts over); so remotely.
    assert _second_turn_authors(local) == ["root"]
    assert _second_turn_authors(remote) == ["root"]


@pytest.mark.parametrize("restarted", [False, True], ids=["same_process", "restarted"])
async def test_a_served_llm_agent_still_keeps_the_conversation(
    tmp_path: Path, restarted: bool
) -> None:
    async def case(play: Play) -> None:
        helper_model = play.model("helper", ["Helper here.", "Helper again."])

        def helper() -> BaseAgent:
            return LlmAgent(name="helper", description="Helps.", model=helper_model)

        await _two_turns(play, helper, restarted=restarted, root_answers=[_transfer("helper")])

    local, remote = await _same_in_process_and_remote(tmp_path, case)
    assert _second_turn_authors(local) == ["helper"]
    assert _second_turn_authors(remote) == ["helper"]


# --- the card ------------------------------------------------------------------------------------


async def _describe(port: int, agent_name: str = "") -> agent_pb2.AgentCard:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        response = await stub.Describe(agent_pb2.DescribeRequest(agent_name=agent_name))
    card: agent_pb2.AgentCard = response.card
    return card


def _workflow() -> BaseAgent:
    return SequentialAgent(
        name="flow",
        sub_agents=[
            LlmAgent(name="one", model=ScriptedModel([])),
            LlmAgent(name="strict", model=ScriptedModel([]), disallow_transfer_to_parent=True),
        ],
    )


async def test_the_card_says_whether_the_agent_keeps_the_conversation() -> None:
    workflow = AgentServer(_workflow(), app_name=APP)
    llm = AgentServer(LlmAgent(name="helper", model=ScriptedModel([])), app_name=APP)
    workflow_port = await workflow.start("127.0.0.1:0")
    llm_port = await llm.start("127.0.0.1:0")
    try:
        card = await _describe(workflow_port)
        assert card.HasField("keeps_conversation")
        assert card.keeps_conversation is False
        # A served sub-agent says what it says in its tree.
        assert (await _describe(workflow_port, "one")).keeps_conversation is True
        assert (await _describe(workflow_port, "strict")).keeps_conversation is False
        card = await _describe(llm_port)
        assert card.HasField("keeps_conversation")
        assert card.keeps_conversation is True
    finally:
        await workflow.stop(None)
        await llm.stop(None)


async def test_a_service_serving_a_remote_agent_passes_the_card_on() -> None:
    """A middle service whose agent is a RemoteAgent to a workflow: its card says what the
    workflow's says; a RemoteAgent given the value explicitly says that value."""
    backend = AgentServer(_workflow(), app_name=APP)
    backend_port = await backend.start("127.0.0.1:0")
    learning = RemoteAgent("flow", f"127.0.0.1:{backend_port}")
    told = RemoteAgent("flow", f"127.0.0.1:{backend_port}", keeps_conversation=True)
    middles = [AgentServer(learning, app_name=APP), AgentServer(told, app_name=APP)]
    try:
        ports = [await middle.start("127.0.0.1:0") for middle in middles]
        card = await _describe(ports[0])
        assert card.HasField("keeps_conversation")
        assert card.keeps_conversation is False
        assert (await _describe(ports[1])).keeps_conversation is True
    finally:
        for middle in middles:
            await middle.stop(None)
        await learning.close()
        await told.close()
        await backend.stop(None)


async def test_a_remote_agent_learns_from_the_card_unless_told() -> None:
    server = AgentServer(_workflow(), app_name=APP)
    port = await server.start("127.0.0.1:0")
    learning = RemoteAgent("flow", f"127.0.0.1:{port}")
    told = RemoteAgent("flow", f"127.0.0.1:{port}", keeps_conversation=True)
    try:
        assert learning.keeps_conversation is True  # unknown until described: today's default
        assert await learning.load_keeps_conversation() is False
        assert learning.keeps_conversation is False
        assert await told.load_keeps_conversation() is True
        assert told.keeps_conversation is True
    finally:
        await learning.close()
        await told.close()
        await server.stop(None)


async def test_the_schemas_card_teaches_it_too() -> None:
    """An AgentTool's RemoteAgent reads the card for its schemas; that card says it too."""
    server = AgentServer(_workflow(), app_name=APP)
    port = await server.start("127.0.0.1:0")
    remote = RemoteAgent("flow", f"127.0.0.1:{port}")
    try:
        await remote.load_schemas()
        assert remote.keeps_conversation is False
    finally:
        await remote.close()
        await server.stop(None)


class _OldService(agent_pb2_grpc.AgentServiceServicer):
    """An agent service older than ``AgentCard.keeps_conversation``: its card has no such
    field."""

    def __init__(self) -> None:
        self.describes = 0

    async def Describe(
        self, request: agent_pb2.DescribeRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.DescribeResponse:
        self.describes += 1
        return agent_pb2.DescribeResponse(
            card=agent_pb2.AgentCard(name="flow", agent_type="SequentialAgent")
        )


async def test_a_card_without_the_field_means_unknown_and_is_asked_once() -> None:
    service = _OldService()
    server = grpc.aio.server()
    agent_pb2_grpc.add_AgentServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    remote = RemoteAgent("flow", f"127.0.0.1:{port}")
    try:
        assert await remote.load_keeps_conversation() is True
        assert await remote.load_keeps_conversation() is True
        assert service.describes == 1
    finally:
        await remote.close()
        await server.stop(None)


async def test_an_unreachable_service_leaves_the_default() -> None:
    """The card cannot be had: the default (yes), no error; the turn's decision goes on."""
    probe = grpc.aio.server()
    port = probe.add_insecure_port("127.0.0.1:0")
    await probe.start()
    await probe.stop(None)  # nothing listens on the port any more
    remote = RemoteAgent("flow", f"127.0.0.1:{port}")
    try:
        assert await remote.load_keeps_conversation() is True
    finally:
        await remote.close()
