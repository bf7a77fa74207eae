"""A turn resumes with an agent that exists only in a remote service's tree, as it would with
the same tree in one process:

- a long-running call made by an agent the remote root transferred to ("booker", served behind
  ``RemoteAgent("planner")``), answered by the client turns later, reaches that agent;
- a plain follow-up turn after a transfer that ended two services away resumes there.

Each case is played in one process and across real AgentServers (127.0.0.1, port 0), the root's
Runner on a SQLite session file; the two playings must store the same events, authored by the
same agents, and the agents' models must see the same requests. In the long-running case the
root's tree (``RemoteAgent`` included) is built anew for every turn, as in a restarted service or
another replica: what the root knows of the remote tree does not depend on the earlier turns'
objects.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.errors import AdkError
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.runner import Runner
from adk_mesh.sessions.sqlite import SqliteSessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, LlmResponse, Part
from adk_mesh.v1 import agent_pb2_grpc
from tests.integration.mesh.test_parity import (
    IN_PROCESS,
    REMOTE,
    Outcome,
    _event,
    _numbered,
    _request,
)

APP = "app"
USER = "u"


def book_flight(destination: str) -> None:
    """Book a flight; the booking's result comes later, from the client."""
    del destination


def _transfer(agent_name: str) -> LlmResponse:
    return call("transfer_to_agent", {"agent_name": agent_name})


class Play:
    """One playing of a case: the root's SQLite sessions, the models, the servers."""

    def __init__(self, where: str, directory: Path, stack: AsyncExitStack) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.where = where
        self.sessions = SqliteSessionService(directory / "sessions.db")
        self.models: dict[str, ScriptedModel] = {}
        self.errors: list[str] = []
        self.session_id = ""
        self._stack = stack

    def model(self, name: str, responses: list[LlmResponse | str]) -> ScriptedModel:
        model = self.models[name] = ScriptedModel(responses, name=name)
        return model

    async def served(self, agent: BaseAgent) -> BaseAgent:
        """``agent`` itself in process; else served by an AgentServer, reached through a
        RemoteAgent of the same name."""
        if self.where == IN_PROCESS:
            return agent
        server = AgentServer(agent, app_name=APP)
        port = await server.start("127.0.0.1:0")
        self._stack.push_async_callback(server.stop, None)
        return self.remote(agent.name, port, agent.description)

    def remote(self, name: str, port: int, description: str) -> RemoteAgent:
        remote = RemoteAgent(name, f"127.0.0.1:{port}", description=description)
        self._stack.push_async_callback(remote.close)
        return remote

    async def turn(self, root: BaseAgent, message: str | Content) -> None:
        if not self.session_id:
            session = await self.sessions.create_session(app_name=APP, user_id=USER)
            self.session_id = session.id
        runner = Runner(agent=root, app_name=APP, session_service=self.sessions)
        content = Content.from_text("user", message) if isinstance(message, str) else message
        try:
            async for _ in runner.run(
                user_id=USER, session_id=self.session_id, new_message=content
            ):
                pass
        except AdkError as error:
            self.errors.append(f"{type(error).__name__}: {error.message}")

    async def outcome(self) -> Outcome:
        session = await self.sessions.get_session(
            app_name=APP, user_id=USER, session_id=self.session_id
        )
        assert session is not None
        return _numbered(
            {
                "stored": [_event(event) for event in session.events],
                "seen": {
                    name: [_request(request) for request in model.requests]
                    for name, model in self.models.items()
                },
                "errors": self.errors,
            }
        )


async def _play(where: str, directory: Path, case: Callable[[Play], Any]) -> Outcome:
    async with AsyncExitStack() as stack:
        play = Play(where, directory / where, stack)
        await case(play)
        outcome = await play.outcome()
        await play.sessions.close()
        return outcome


def _authors_and_contents(outcome: Outcome) -> list[tuple[str, Any]]:
    return [
        (event["author"], (event["llm_response"].get("content") or {}).get("parts"))
        for event in outcome["stored"]
    ]


def _stored(outcome: Outcome) -> list[dict[str, Any]]:
    """The stored events, but for the transfer a remote tree carried out within itself, which
    reaches the caller without ``transfer_to_agent`` (RemoteAgent's docstring)."""
    events = []
    for event in outcome["stored"]:
        event = dict(event, actions=dict(event["actions"]))
        event["actions"].pop("transfer_to_agent", None)
        events.append(event)
    return events


# --- (1) a long-running call of a remote tree's agent, answered turns later ---------------------


async def _long_running_answered_later(play: Play) -> None:
    coordinator_model = play.model(
        "coordinator",
        [_transfer("planner"), "The weather is fine."],
    )
    planner_model = play.model(
        "planner",
        [_transfer("booker"), _transfer("coordinator")],
    )
    booker_model = play.model(
        "booker",
        [
            call("book_flight", {"destination": "Lisbon"}, id="flight-1"),
            _transfer("planner"),
            "Booked: seat 12A to Lisbon.",
        ],
    )
    booker = LlmAgent(
        name="booker",
        description="Books flights.",
        model=booker_model,
        tools=[FunctionTool(book_flight, is_long_running=True)],
    )
    planner = LlmAgent(
        name="planner", description="The planner.", model=planner_model, sub_agents=[booker]
    )
    served = await play.served(planner)
    port = int(served.target.rsplit(":", 1)[1]) if isinstance(served, RemoteAgent) else 0

    def root() -> BaseAgent:
        # Built anew for each turn (a restarted service, another replica), RemoteAgent included.
        if isinstance(served, RemoteAgent):
            planner_here: BaseAgent = play.remote("planner", port, planner.description)
        else:
            planner.parent_agent = None
            planner_here = planner
        return LlmAgent(name="coordinator", model=coordinator_model, sub_agents=[planner_here])

    await play.turn(root(), "Book me a flight to Lisbon.")
    # Meanwhile the conversation went back to the coordinator.
    await play.turn(root(), "While it books: what is the weather?")
    answer = Content(
        role="user",
        parts=[Part.from_function_response("book_flight", {"seat": "12A"}, id="flight-1")],
    )
    await play.turn(root(), answer)


async def _same_in_process_and_remote(tmp_path: Path, case: Callable[[Play], Any]) -> Outcome:
    """Play ``case`` in one process and across services; both without errors, with the same
    events, stored events and model requests. The in-process outcome."""
    local = await _play(IN_PROCESS, tmp_path, case)
    remote = await _play(REMOTE, tmp_path, case)
    assert local["errors"] == []
    assert remote["errors"] == []
    assert _authors_and_contents(remote) == _authors_and_contents(local)
    assert _stored(remote) == _stored(local)
    assert remote["seen"] == local["seen"]
    return local


async def test_a_long_running_answer_reaches_the_remote_agent_that_made_the_call(
    tmp_path: Path,
) -> None:
    local = await _same_in_process_and_remote(tmp_path, _long_running_answered_later)
    # The answer went to booker, whose model read it and answered last.
    last = local["stored"][-1]
    assert last["author"] == "booker"
    assert last["llm_response"]["content"]["parts"][0]["text"] == "Booked: seat 12A to Lisbon."
    read = local["seen"]["booker"][-1]["contents"]
    assert {"seat": "12A"} in [
        part["function_response"]["response"]
        for content in read
        for part in content["parts"]
        if "function_response" in part
    ]
    # The coordinator's model was not asked again by the answer.
    assert len(local["seen"]["coordinator"]) == 2


# --- (2) a plain follow-up turn after a transfer that ended two services away -------------------


async def _follow_up_two_services_away(play: Play, *, restarted: bool) -> None:
    """coordinator → planner (a second service) → booker (a third) → payer, who asks; the
    user's next turn is payer's. ``restarted``: the root's tree and the planner's service are
    built anew for the second turn (what they learned from the first is gone)."""
    payer_model = play.model("payer", ["Which card?", "Paid with the blue card."])
    booker_model = play.model("booker", [_transfer("payer")])
    planner_model = play.model("planner", [_transfer("booker")])
    coordinator_model = play.model("coordinator", [_transfer("planner")])

    def booker_tree() -> BaseAgent:
        payer = LlmAgent(name="payer", description="Takes payments.", model=payer_model)
        return LlmAgent(
            name="booker", description="Books flights.", model=booker_model, sub_agents=[payer]
        )

    booker_service = await play.served(booker_tree())

    async def root() -> BaseAgent:
        if isinstance(booker_service, RemoteAgent):
            port = int(booker_service.target.rsplit(":", 1)[1])
            booker = play.remote("booker", port, booker_service.description)
        else:
            booker = booker_tree()
        planner = LlmAgent(
            name="planner", description="The planner.", model=planner_model, sub_agents=[booker]
        )
        return LlmAgent(
            name="coordinator", model=coordinator_model, sub_agents=[await play.served(planner)]
        )

    coordinator = await root()
    await play.turn(coordinator, "Pay for my flight.")
    if restarted:
        coordinator = await root()
    await play.turn(coordinator, "The blue one.")


@pytest.mark.parametrize("restarted", [False, True], ids=["same_services", "restarted"])
async def test_a_follow_up_turn_resumes_the_agent_two_services_away(
    tmp_path: Path, restarted: bool
) -> None:
    async def case(play: Play) -> None:
        await _follow_up_two_services_away(play, restarted=restarted)

    local = await _same_in_process_and_remote(tmp_path, case)
    last = local["stored"][-1]
    assert last["author"] == "payer"
    assert last["llm_response"]["content"]["parts"][0]["text"] == "Paid with the blue card."


class _RefusingDescribe(agent_pb2_grpc.AgentServiceServicer):
    """An agent service whose Describe always fails, counting the calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def Describe(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.calls += 1
        await context.abort(grpc.StatusCode.INTERNAL, "cards unavailable")


async def test_a_service_that_cannot_describe_its_tree_is_not_asked_on_every_turn() -> None:
    """A failed walk of the cards is not tried again for a while: each turn that needs the
    names would otherwise wait on the service again (up to the Describe timeout)."""
    servicer = _RefusingDescribe()
    server = grpc.aio.server()
    agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    remote = RemoteAgent("planner", f"127.0.0.1:{port}")
    try:
        for _ in range(3):
            assert await remote.load_agents_behind() == frozenset()
        assert servicer.calls == 1
    finally:
        await remote.close()
        await server.stop(None)
