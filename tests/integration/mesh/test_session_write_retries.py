"""Retry-safe session writes: ``UpdateSessionStateRequest.event_id`` is a client-chosen
idempotency key. A client that lost the answer of an update (a deadline, a dropped connection,
an answer over its receive limit) retries with the same id and gets the first call's answer
without a second append; the same id with another delta is refused, naming the id. Real
AgentServers on 127.0.0.1 over each store (in memory, a SQLite file, PostgreSQL when marked)."""

from __future__ import annotations

from typing import Any

import grpc
import grpc.aio
import httpx
import pytest

from adk_mesh import codec
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.sessions._common import MAX_EVENT_ID_CHARS
from adk_mesh.types import Event, EventActions
from adk_mesh.v1 import session_pb2, session_pb2_grpc
from gateway import GatewaySettings
from tests.gateway.conftest import serve_gateway
from tests.integration.mesh.test_session_service import (
    APP,
    Served,
    codec_state,
    get_session,
    on_stores,
    refusal,
    serve,
    state_of,
    stop,
    stores,
)

__all__ = ["on_stores", "stores"]


def update(event_id: str, delta: dict[str, Any]) -> session_pb2.UpdateSessionStateRequest:
    return session_pb2.UpdateSessionStateRequest(
        user_id="ada", session_id="s1", event_id=event_id, state_delta=codec_state(delta)
    )


async def create(stub: session_pb2_grpc.SessionServiceStub, **fields: Any) -> None:
    await stub.CreateSession(
        session_pb2.CreateSessionRequest(user_id="ada", session_id="s1", **fields), timeout=10
    )


async def test_a_retried_update_is_written_once_and_answered_as_the_first_call(
    on_stores: Served,
) -> None:
    stub = on_stores.stub
    await create(stub, state=codec_state({"count": 1}))

    first = await stub.UpdateSessionState(
        update("patch-1", {"count": 2, "user:seen": True}), timeout=10
    )
    event = codec.event_from_proto(first.event)
    assert event.id == "patch-1" and event.author == "user"
    assert event.invocation_id.startswith("p-")

    retried = await stub.UpdateSessionState(
        update("patch-1", {"count": 2, "user:seen": True}), timeout=10
    )
    # The stored event (its invocation id too), and the session as it is: nothing moved.
    assert retried == first

    _, events, _ = await get_session(stub, user_id="ada", session_id="s1")
    assert [e.id for e in events] == ["patch-1"]
    assert events[0].invocation_id == event.invocation_id


async def test_a_retry_after_later_writes_answers_the_stored_event_and_the_state_now(
    on_stores: Served,
) -> None:
    stub = on_stores.stub
    await create(stub)
    first = await stub.UpdateSessionState(update("patch-1", {"step": 1}), timeout=10)
    later = await stub.UpdateSessionState(update("patch-2", {"step": 2}), timeout=10)

    retried = await stub.UpdateSessionState(update("patch-1", {"step": 1}), timeout=10)

    assert retried.event == first.event
    assert state_of(retried.session) == {"step": 2}
    assert retried.session.last_update_time == later.session.last_update_time
    _, events, _ = await get_session(stub, user_id="ada", session_id="s1")
    assert [e.id for e in events] == ["patch-1", "patch-2"]


async def test_the_same_event_id_with_another_delta_is_refused_naming_the_id(
    on_stores: Served,
) -> None:
    stub = on_stores.stub
    await create(stub)
    await stub.UpdateSessionState(update("patch-1", {"count": 1}), timeout=10)

    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.UpdateSessionState(update("patch-1", {"count": 2}), timeout=10)
    error = error_from_rpc_error(raised.value)
    assert raised.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "patch-1" in (raised.value.details() or "")
    assert error.metadata.get("event_id") == "patch-1"

    session, events, _ = await get_session(stub, user_id="ada", session_id="s1")
    assert state_of(session) == {"count": 1}
    assert [e.id for e in events] == ["patch-1"]


async def test_an_event_id_an_agent_event_holds_is_not_taken_for_an_update(
    on_stores: Served,
) -> None:
    stub = on_stores.stub
    # An event of the history that is not a state update, with the very delta of the update.
    agent_event = Event.new(author=APP, invocation_id="e-1").model_copy(
        update={"id": "taken", "actions": EventActions(state_delta={"count": 1})}
    )
    request = session_pb2.CreateSessionRequest(user_id="ada", session_id="s1")
    request.events.append(codec.event_to_proto(agent_event))
    await stub.CreateSession(request, timeout=10)

    assert await refusal(
        lambda: stub.UpdateSessionState(update("taken", {"count": 1}), timeout=10)
    ) == (grpc.StatusCode.ALREADY_EXISTS, "ALREADY_EXISTS")
    _, events, _ = await get_session(stub, user_id="ada", session_id="s1")
    assert [e.author for e in events] == [APP]


@pytest.mark.parametrize("event_id", ["x" * (MAX_EVENT_ID_CHARS + 1), "nul\x00id"])
async def test_an_event_id_not_every_store_keeps_is_refused_before_writing(
    on_stores: Served, event_id: str
) -> None:
    stub = on_stores.stub
    await create(stub)

    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.UpdateSessionState(update(event_id, {"count": 1}), timeout=10)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "event_id" in (raised.value.details() or "")

    session, events, _ = await get_session(stub, user_id="ada", session_id="s1")
    assert events == [] and state_of(session) == {}


async def test_an_answer_lost_to_the_clients_receive_limit_is_recovered_by_a_retry(
    on_stores: Served,
) -> None:
    stub = on_stores.stub
    await create(stub, state=codec_state({"big": "x" * 8192}))
    # A client whose receive limit is smaller than the answer (the whole state comes back).
    small = grpc.aio.insecure_channel(
        on_stores.target, options=[("grpc.max_receive_message_length", 4096)]
    )
    try:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await session_pb2_grpc.SessionServiceStub(small).UpdateSessionState(
                update("patch-1", {"count": 1}), timeout=10
            )
        assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        await small.close()

    # The update was written; the retry (over a channel that can read the answer) says so,
    # and writes it no second time.
    retried = await stub.UpdateSessionState(update("patch-1", {"count": 1}), timeout=10)
    assert retried.event.id == "patch-1"
    assert state_of(retried.session)["count"] == 1
    _, events, _ = await get_session(stub, user_id="ada", session_id="s1")
    assert [e.id for e in events] == ["patch-1"]


async def test_updates_without_an_event_id_each_get_their_own_event(on_stores: Served) -> None:
    stub = on_stores.stub
    await create(stub)
    first = await stub.UpdateSessionState(update("", {"count": 1}), timeout=10)
    second = await stub.UpdateSessionState(update("", {"count": 1}), timeout=10)

    assert first.event.id and second.event.id and first.event.id != second.event.id
    _, events, _ = await get_session(stub, user_id="ada", session_id="s1")
    assert len(events) == 2


async def test_the_gateways_patch_is_retry_safe_with_an_idempotency_key() -> None:
    served = await serve()
    try:
        await create(served.stub)
        settings = GatewaySettings(apps={APP: served.target}, sse_ping_seconds=0)
        async with (
            serve_gateway(settings) as url,
            httpx.AsyncClient(base_url=url, timeout=30) as gateway,
        ):
            path = f"/apps/{APP}/users/ada/sessions/s1"
            keyed = {"Idempotency-Key": "patch-1"}
            first = await gateway.patch(path, json={"stateDelta": {"n": 1}}, headers=keyed)
            retried = await gateway.patch(path, json={"stateDelta": {"n": 1}}, headers=keyed)
            assert first.status_code == retried.status_code == 200
            assert retried.json() == first.json()
            assert [e["id"] for e in retried.json()["events"]] == ["patch-1"]

            reused = await gateway.patch(path, json={"stateDelta": {"n": 2}}, headers=keyed)
            assert reused.status_code == 409
            assert reused.json()["metadata"]["event_id"] == "patch-1"
    finally:
        await stop(served)
