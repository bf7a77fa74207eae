"""Events too large for one message: streamed abridged, batches bounded in bytes.

An event whose encoding would pass the mesh's message limit (32 MiB) still reaches the
client, abridged (its large parts replaced by placeholders); it stays whole in the session,
and the next turn, a transfer to a remote agent, works over it. A batch of events never grows
past MAX_BATCH_BYTES unless one event alone does.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

from adk_mesh import codec
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.mesh import agent_server as agent_server_module
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES, open_channel
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions import SqliteSessionService
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.types import Content, Event, LlmResponse
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

MIB = 1024 * 1024
HUGE = MAX_MESSAGE_BYTES + MIB


def fetch_everything() -> dict[str, Any]:
    """Returns more than one message can hold."""
    return {"body": "z" * HUGE}


async def run(target: str, text: str, session_id: str = "") -> tuple[str, list[Event]]:
    request = agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id="u1",
            session_id=session_id,
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)]),
        )
    )
    events: list[Event] = []
    async with open_channel(target) as channel:
        async for response in agent_pb2_grpc.AgentServiceStub(channel).Run(request):
            assert response is not None
            assert response.ByteSize() <= MAX_MESSAGE_BYTES
            session_id = session_id or response.session_id
            events.extend(codec.run_response_events(response))
    return session_id, events


@pytest.mark.timeout(120)
async def test_an_event_larger_than_a_message_is_streamed_abridged_and_kept_whole(
    tmp_path: Path,
) -> None:
    def coordinator_answer(request: LlmRequest) -> LlmResponse | str:
        last = request.contents[-1].parts[-1]
        if last.text == "fetch":
            return call("fetch_everything")
        if last.text == "hand over":
            return call("transfer_to_agent", {"agent_name": "specialist"})
        return "fetched"

    specialist_model = ScriptedModel(["over to me"])
    specialist = LlmAgent(name="specialist", model=specialist_model, description="Takes over.")
    specialist_server = AgentServer(specialist)
    specialist_port = await specialist_server.start("127.0.0.1:0")
    remote = RemoteAgent("specialist", f"127.0.0.1:{specialist_port}", description="Takes over.")
    coordinator = LlmAgent(
        name="coordinator",
        model=FunctionModel(coordinator_answer),
        tools=[fetch_everything],
        sub_agents=[remote],
    )
    store = SqliteSessionService(tmp_path / "sessions.db")
    server = AgentServer(coordinator, session_service=store)
    port = await server.start("127.0.0.1:0")
    target = f"127.0.0.1:{port}"
    try:
        session_id, first = await run(target, "fetch")
        _, second = await run(target, "hand over", session_id)
        session = await store.get_session(
            app_name="coordinator", user_id="u1", session_id=session_id
        )
    finally:
        await server.stop(None)
        await specialist_server.stop(None)
        await remote.close()
        await store.close()

    replies = [reply for event in first for reply in event.function_responses()]
    assert [reply.name for reply in replies] == ["fetch_everything"]
    assert "omitted" in replies[0].response["omitted"]
    assert [event.text for event in first if event.text] == ["fetched"]
    assert [(event.author, event.text) for event in second if event.text][-1] == (
        "specialist",
        "over to me",
    )
    assert session is not None
    kept = [reply for event in session.events for reply in event.function_responses()]
    assert kept[0].response == {"body": "z" * HUGE}
    # The specialist saw the conversation, the huge result abridged.
    seen = specialist_model.requests[0].contents
    assert any("omitted" in (part.text or "") for content in seen for part in content.parts)


async def test_a_batch_is_bounded_in_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agent_server_module, "MAX_BATCH_BYTES", 2500)
    # Batches from the first event on (a run's first events otherwise go one per response).
    monkeypatch.setattr(agent_server_module, "INLINE_EVENTS", 0)
    sizes = [1000, 1000, 1000, 3000, 10, 10]

    async def events() -> AsyncGenerator[Event, None]:
        for index, size in enumerate(sizes):
            yield Event.new(author="a", content=Content.from_text("model", f"{index}" + "x" * size))

    responses = [
        response
        async for response in agent_server_module._responses(events(), session_id="s", batches=True)
    ]
    batches = [[event.text[0] for event in codec.run_response_events(r)] for r in responses]
    assert [index for batch in batches for index in batch] == ["0", "1", "2", "3", "4", "5"]
    for response, batch in zip(responses, batches, strict=True):
        events_bytes = (
            sum(event.ByteSize() for event in response.events) or response.event.ByteSize()
        )
        assert len(batch) == 1 or events_bytes <= 2500
        # A batch of one is carried in ``event``, as without batches.
        assert response.HasField("event") == (len(batch) == 1)
    assert responses[0].session_id == "s"
    assert batches == [["0", "1"], ["2"], ["3"], ["4", "5"]]
