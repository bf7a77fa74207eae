"""Sessions that cannot break: no JSON depth, history length or event size makes a turn fail.

One mesh of real gRPC servers on 127.0.0.1:

    client ──Run(root)──▶ A "coordinator" (SQLite store)
                            ├─CallTool──────────────▶ T  tool "dig" (ToolServer)
                            ├─AgentTool "helper"────▶ B  "specialist"   (delegated run)
                            └─transfer "specialist"─▶ B  "specialist" ──CallTool──▶ T

Turn "first": the coordinator calls ``dig`` (deep args, a deep result, deep progress data
and a deep state value), then the AgentTool, and answers. Turn "second", over that history:
the same, then a transfer; the specialist calls ``dig`` again and answers. Turn "third":
whoever answers it digs once more. The client reads every response (none is empty or
unparsable); what crosses to B is the history window, never the whole history.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from adk_mesh import codec
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import ToolContext
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset, ToolServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions import SqliteSessionService
from adk_mesh.sessions.base import Session
from adk_mesh.testing import FunctionModel, call, text
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, Event, FunctionResponse, LlmResponse, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

APP = "coordinator"
USER = "u1"


def nested(depth: int, leaf: str = "bottom") -> dict[str, Any]:
    """A JSON object ``depth`` levels deep (the top object is level 1): objects and arrays by
    turns, with every kind of JSON scalar at the bottom."""
    value: Any = {"leaf": leaf, "n": 42, "x": 0.5, "yes": True, "none": None}
    for level in range(depth - 1, 0, -1):
        value = {"k": value} if level % 2 else [value, level]
    assert isinstance(value, dict)
    return value


@dataclass
class Mesh:
    target: str
    store: SqliteSessionService
    depth: int
    #: What ``dig`` received, per call: (caller agent, args, the state it could read).
    dig_calls: list[tuple[str, dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    specialist_requests: list[LlmRequest] = field(default_factory=list)
    helper_requests: list[LlmRequest] = field(default_factory=list)


def last_part(request: LlmRequest) -> Any:
    return request.contents[-1].parts[-1] if request.contents else None


def answered(request: LlmRequest, name: str) -> bool:
    part = last_part(request)
    return (
        part is not None
        and part.function_response is not None
        and (part.function_response.name == name)
    )


def turn_word(request: LlmRequest) -> str:
    """The user's message of this turn: "first", "second" or "third"."""
    for content in reversed(request.contents):
        for part in content.parts:
            if part.text in ("first", "second", "third"):
                return part.text
    return ""


def coordinator_model(depth: int) -> Callable[[LlmRequest], LlmResponse | str]:
    """Each turn: dig; then (first and second turns) ask the helper; then answer (first
    turn) or transfer to the specialist (second turn)."""

    def answer(request: LlmRequest) -> LlmResponse | str:
        word = turn_word(request)
        if answered(request, "dig") and word != "third":
            return call("helper", {"request": "look"})
        if answered(request, "helper") and word == "second":
            return call("transfer_to_agent", {"agent_name": "specialist"})
        if answered(request, "helper") or answered(request, "dig"):
            return "coordinator is done"
        return call("dig", {"tree": nested(depth - 1, leaf=word)})

    return answer


def specialist_model(mesh: Mesh) -> Callable[[LlmRequest], LlmResponse | str]:
    """As the AgentTool's child (it is asked to "look"): answer. After a transfer: dig, then
    answer."""

    def answer(request: LlmRequest) -> LlmResponse | str:
        part = last_part(request)
        if part is not None and part.text == "look":
            mesh.helper_requests.append(request)
            return "looked"
        mesh.specialist_requests.append(request)
        if answered(request, "dig"):
            return text("specialist is done")
        return call("dig", {"tree": nested(mesh.depth - 1, leaf="specialist")})

    return answer


@asynccontextmanager
async def mesh_of(tmp_path: Path, depth: int, **remote_options: Any) -> AsyncIterator[Mesh]:
    store = SqliteSessionService(tmp_path / "sessions.db")
    mesh = Mesh(target="", store=store, depth=depth)

    async def dig(tree: dict[str, Any], tool_context: ToolContext) -> dict[str, Any]:
        """Digs a tree."""
        mesh.dig_calls.append((tool_context.agent_name, tree, tool_context.state.to_dict()))
        await tool_context.report_progress("digging", data=nested(depth), fraction=0.5)
        tool_context.state["tree"] = nested(depth, leaf=tool_context.agent_name)
        return {"echo": tree}

    tools = ToolServer([FunctionTool(dig)], name="diggers")
    tools_port = await tools.start("127.0.0.1:0")
    tools_target = f"127.0.0.1:{tools_port}"
    specialist_tools = RemoteToolset(tools_target)
    specialist = LlmAgent(
        name="specialist",
        model=FunctionModel(specialist_model(mesh)),
        tools=[specialist_tools],
        description="Knows everything.",
    )
    specialist_server = AgentServer(specialist)
    specialist_port = await specialist_server.start("127.0.0.1:0")
    specialist_target = f"127.0.0.1:{specialist_port}"

    coordinator_tools = RemoteToolset(tools_target)
    helper = RemoteAgent("helper", specialist_target, description="Helps.", **remote_options)
    transferee = RemoteAgent(
        "specialist", specialist_target, description="Knows everything.", **remote_options
    )
    coordinator = LlmAgent(
        name="coordinator",
        model=FunctionModel(coordinator_model(depth)),
        tools=[coordinator_tools, AgentTool(helper, include_parent_history=True)],
        sub_agents=[transferee],
    )
    server = AgentServer(coordinator, session_service=store)
    port = await server.start("127.0.0.1:0")
    mesh.target = f"127.0.0.1:{port}"
    try:
        yield mesh
    finally:
        await server.stop(None)
        await specialist_server.stop(None)
        await tools.stop(None)
        for closable in (helper, transferee, coordinator_tools, specialist_tools):
            await closable.close()
        await store.close()


async def turn(
    mesh: Mesh, message: str, *, session_id: str = "", agent_name: str = ""
) -> tuple[str, list[Event]]:
    """One root run as a client sees it: every response parses and carries an event."""
    request = agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id=USER,
            session_id=session_id,
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text=message)]),
        ),
        agent_name=agent_name,
    )
    events: list[Event] = []
    async with open_channel(mesh.target) as channel:
        async for response in agent_pb2_grpc.AgentServiceStub(channel).Run(request):
            assert response is not None, "a response did not parse"
            assert response.HasField("event") or response.events, "an empty RunResponse"
            session_id = session_id or response.session_id
            events.extend(codec.run_response_events(response))
    return session_id, events


async def stored(mesh: Mesh, session_id: str) -> Session:
    session = await mesh.store.get_session(app_name=APP, user_id=USER, session_id=session_id)
    assert session is not None
    return session


def responses_of(events: list[Event], name: str) -> list[dict[str, Any]]:
    return [
        reply.response
        for event in events
        for reply in event.function_responses()
        if reply.name == name
    ]


def texts(events: list[Event]) -> list[tuple[str, str]]:
    return [(event.author, event.text) for event in events if event.text and not event.partial]


def progress_data(events: list[Event]) -> list[Any]:
    return [event.tool_progress.data for event in events if event.tool_progress is not None]


def state_writes(events: list[Event], key: str) -> list[Any]:
    return [event.actions.state_delta[key] for event in events if key in event.actions.state_delta]


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize("depth", [100, 200])
async def test_json_100_and_200_levels_deep_crosses_every_hop_and_the_store(
    tmp_path: Path, depth: int
) -> None:
    async with mesh_of(tmp_path, depth) as mesh:
        session_id, first = await turn(mesh, "first")
        # Later turns over the deep history: AgentTool and transfer again, then one more.
        _, second = await turn(mesh, "second", session_id=session_id)
        _, third = await turn(mesh, "third", session_id=session_id)
        kept = await stored(mesh, session_id)

    # Turn 1: dig through the tool service, the AgentTool's remote child, an answer.
    assert responses_of(first, "dig") == [{"echo": nested(depth - 1, leaf="first")}]
    assert progress_data(first) == [nested(depth)]
    assert state_writes(first, "tree") == [nested(depth, leaf="coordinator")]
    assert responses_of(first, "helper") == [{"result": "looked"}]
    assert texts(first)[-1] == ("coordinator", "coordinator is done")
    # The AgentTool's remote child saw the parent's deep history (include_parent_history).
    seen = [
        part.text or "" for content in mesh.helper_requests[0].contents for part in content.parts
    ]
    assert any(compact({"echo": nested(depth - 1, leaf="first")}) in text for text in seen)

    # Turn 2: the same again, then a transfer to the remote specialist, which digs too.
    assert responses_of(second, "dig") == [
        {"echo": nested(depth - 1, leaf="second")},
        {"echo": nested(depth - 1, leaf="specialist")},
    ]
    assert progress_data(second) == [nested(depth)] * 2
    assert state_writes(second, "tree") == [
        nested(depth, leaf="coordinator"),
        nested(depth, leaf="specialist"),
    ]
    assert responses_of(second, "helper") == [{"result": "looked"}]
    assert texts(second)[-1] == ("specialist", "specialist is done")

    # Turn 3: whoever answers it (the specialist, which answered last, or the coordinator).
    assert len(responses_of(third, "dig")) == 1
    assert texts(third)[-1] in {
        ("specialist", "specialist is done"),
        ("coordinator", "coordinator is done"),
    }

    # The tool service got the deep args, and the deep state of the session: the specialist's
    # came to it in the delegated run's session view.
    by_caller = [(caller, args, state.get("tree")) for caller, args, state in mesh.dig_calls]
    assert by_caller[:3] == [
        ("coordinator", nested(depth - 1, leaf="first"), None),
        ("coordinator", nested(depth - 1, leaf="second"), nested(depth, leaf="coordinator")),
        ("specialist", nested(depth - 1, leaf="specialist"), nested(depth, leaf="coordinator")),
    ]
    assert by_caller[3][2] == nested(depth, leaf="specialist")

    # Kept whole in the SQLite store and read back whole, as every client saw it.
    streamed = [event for event in first + second + third if not event.partial]
    assert {event.id for event in streamed} <= {event.id for event in kept.events}
    assert responses_of(kept.events, "dig") == responses_of(streamed, "dig")
    assert kept.state["tree"] == state_writes(third, "tree")[-1]


# --- long histories and large events ----------------------------------------------------------

MIB = 1024 * 1024


def filler(index: int, size: int) -> Event:
    """One event of an old conversation, about ``size`` bytes: user and model text by turns,
    and every fourth a tool's response."""
    body = f"{index:06d}" + "x" * (size - 6)
    if index % 4 == 3:
        content = Content(
            role="user",
            parts=[
                Part(function_response=FunctionResponse(name="old_tool", response={"body": body}))
            ],
        )
        return Event.new(author="coordinator", invocation_id=f"old-{index // 4}", content=content)
    author = "user" if index % 2 == 0 else "coordinator"
    role = "user" if author == "user" else "model"
    return Event.new(
        author=author, invocation_id=f"old-{index // 4}", content=Content.from_text(role, body)
    )


async def fill_history(store: SqliteSessionService, session_id: str, sizes: list[int]) -> int:
    session = await store.create_session(app_name=APP, user_id=USER, session_id=session_id)
    total = 0
    for index, size in enumerate(sizes):
        event = filler(index, size)
        total += len(event.model_dump_json())
        await store.append_event(session, event)
    return total


@pytest.mark.timeout(120)
async def test_a_40_mib_history_leaves_later_turns_transfers_and_agent_tool_calls_working(
    tmp_path: Path,
) -> None:
    async with mesh_of(tmp_path, 5) as mesh:
        # 400 events of ~75 KiB, the newest one 12 MiB: larger than the whole window.
        stored_bytes = await fill_history(mesh.store, "long", [75 * 1024] * 399 + [12 * MIB])
        session_id, first = await turn(mesh, "first", session_id="long")
        _, second = await turn(mesh, "second", session_id=session_id)
        _, third = await turn(mesh, "third", session_id=session_id)
        kept = await stored(mesh, session_id)
    assert stored_bytes > 40 * MIB

    assert texts(first)[-1] == ("coordinator", "coordinator is done")
    assert responses_of(first, "helper") == [{"result": "looked"}]
    assert texts(second)[-1] == ("specialist", "specialist is done")
    assert responses_of(second, "helper") == [{"result": "looked"}]
    assert texts(third)[-1][1].endswith("is done")
    assert len(kept.events) > 400

    # What crossed to the remote agent is the window, not the history: bounded in bytes,
    # newest events whole, the 12 MiB event abridged.
    for request in (mesh.helper_requests[0], mesh.specialist_requests[0]):
        sent = sum(len(compact(content.model_dump(mode="json"))) for content in request.contents)
        # (8 MiB of protobuf is a little more as pydantic JSON, with the model's framing.)
        assert 4 * MIB < sent < codec.DEFAULT_HISTORY_MAX_BYTES + MIB
        seen = "".join(part.text or "" for content in request.contents for part in content.parts)
        assert "000398" in seen  # the newest old event, whole
        assert "000010" not in seen  # long out of the window
        # The 12 MiB one (a tool's response), abridged; no other.
        assert seen.count("was omitted") == 1
        assert re.search(r"the response was omitted \(125829\d\d bytes", seen), seen[-3000:]


async def test_a_smaller_window_is_a_remote_agent_setting(tmp_path: Path) -> None:
    async with mesh_of(tmp_path, 3, history_max_events=9, history_max_bytes=MIB) as mesh:
        await fill_history(mesh.store, "chat", [1000] * 40)
        await turn(mesh, "second", session_id="chat")
    seen = "".join(
        part.text or ""
        for content in mesh.specialist_requests[0].contents
        for part in content.parts
    )
    # The last 9 events: this turn's seven before the transfer (the user's message, three
    # calls and their responses) and two of the old conversation.
    assert "000039" in seen
    assert "000038" in seen
    assert "000037" not in seen
