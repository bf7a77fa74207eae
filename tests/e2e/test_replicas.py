"""Replicas: several ``adk-mesh serve agent`` processes on one PostgreSQL database, behind one
target that lists them all (``ipv4:HOST:P1,HOST:P2``: what a headless Service's DNS name
resolves to), reached through one channel with round_robin, as a mesh client reaches them.

* A conversation whose turns land on different replicas continues exactly.
* A replica killed (SIGKILL) in the middle of a turn loses nothing of what it had streamed;
  the next turn, on the same channel, is answered by the other replica and sees it all.
* Concurrent turns on one session through both replicas lose no update: each succeeds or is
  refused with SESSION_CONFLICT having written nothing.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest

from adk_mesh import codec
from adk_mesh.errors import SessionConflictError
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.sessions.base import Session
from adk_mesh.sessions.postgres import PostgresSessionService
from adk_mesh.types import Event
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2
from tests.e2e.conftest import Service, ServiceFactory, wait_for_file

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

APP = "replica"
USER = "u1"
AGENT = "tests.e2e.apps.replica:root_agent"


def request(text: str, session_id: str) -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            user_id=USER,
            session_id=session_id,
            new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)]),
        )
    )


def events_of(responses: list[agent_pb2.RunResponse]) -> list[Event]:
    return [event for response in responses for event in codec.run_response_events(response)]


def answer(responses: list[agent_pb2.RunResponse]) -> str:
    return [event.text for event in events_of(responses) if event.text and not event.partial][-1]


@pytest.fixture
def replicas(start_service: ServiceFactory, postgres_url: str) -> Iterator[list[Service]]:
    started = [
        start_service(
            f"replica-{index}",
            "agent",
            AGENT,
            "--store",
            postgres_url,
            "--artifacts",
            postgres_url,
            "--memory",
            postgres_url,
        )
        for index in range(2)
    ]
    for service in started:
        service.wait_ready()
    yield started


@asynccontextmanager
async def one_name(
    replicas: list[Service], *, warm: bool = False
) -> AsyncIterator[agent_pb2_grpc.AgentServiceStub]:
    """One channel to every replica, round_robin among them; ``warm``: once a turn (on a
    session of its own) was answered by each replica, so the next calls alternate."""
    target = "ipv4:" + ",".join(service.target for service in replicas)
    async with open_channel(target, tls=None) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        answered: set[int] = set()
        for index in range(20 if warm else 0):
            turn = [r async for r in stub.Run(request("hi", f"warm-{index}"), timeout=30)]
            answered.add(pid_in(answer(turn)))
            if len(answered) == len(replicas):
                break
        assert not warm or len(answered) == len(replicas), "the channel never reached them all"
        yield stub


async def stored(postgres_url: str, session_id: str) -> Session:
    store = PostgresSessionService(postgres_url)
    try:
        session = await store.get_session(app_name=APP, user_id=USER, session_id=session_id)
    finally:
        await store.close()
    assert session is not None
    return session


def pid_in(text: str) -> int:
    match = re.search(r"replica (\d+)", text)
    assert match, text
    return int(match.group(1))


async def test_a_conversation_continues_exactly_on_whichever_replica_a_turn_lands(
    replicas: list[Service], postgres_url: str
) -> None:
    said: list[str] = []
    answers: list[str] = []
    async with one_name(replicas) as stub:
        for index in range(6):
            said.append(f"message {index}")
            responses = [r async for r in stub.Run(request(said[-1], "talk"), timeout=30)]
            answers.append(answer(responses))
    for index, text in enumerate(answers):
        assert text.endswith(
            f"saw {index + 1} user messages (every call answered): {', '.join(said[: index + 1])}"
        )
    assert {pid_in(text) for text in answers} == {service.process.pid for service in replicas}

    session = await stored(postgres_url, "talk")
    assert [event.text for event in session.events] == [
        text for pair in zip(said, answers, strict=True) for text in pair
    ]


async def test_a_replica_killed_mid_turn_loses_nothing_it_streamed_and_the_next_turn_goes_on(
    replicas: list[Service], postgres_url: str, tmp_path: Path
) -> None:
    async with one_name(replicas) as stub:
        first = answer([r async for r in stub.Run(request("hello", "kill"), timeout=30)])
        call = stub.Run(request("hold t1", "kill"), timeout=30)
        streamed: list[Event] = []
        async for response in call:
            streamed.extend(codec.run_response_events(response))
            if any(event.function_calls() for event in streamed):
                break
        await wait_for_file(tmp_path / "t1.started")
        holder = int((tmp_path / "t1.started").read_text())
        (victim,) = [s for s in replicas if s.process.pid == holder]
        (survivor,) = [s for s in replicas if s is not victim]
        os.kill(holder, signal.SIGKILL)
        victim.process.wait(10)
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            async for _ in call:
                pass
        assert failure.value.code() == grpc.StatusCode.UNAVAILABLE

        # What the killed replica streamed before it died was stored as it streamed.
        session = await stored(postgres_url, "kill")
        ids = [event.id for event in session.events]
        for event in streamed:
            assert event.id in ids, f"streamed but lost: {event}"

        after = answer([r async for r in stub.Run(request("after", "kill"), timeout=30)])
    assert pid_in(after) == survivor.process.pid
    # The killed turn's call has no response in the store (nothing could record one): the
    # request was repaired when it was built, so the model saw every call answered.
    assert after.endswith("saw 3 user messages (every call answered): hello, hold t1, after")
    assert pid_in(first) in {victim.process.pid, survivor.process.pid}

    session = await stored(postgres_url, "kill")
    texts = [event.text for event in session.events if event.text]
    assert texts[0] == "hello" and texts[-2:] == ["after", after]


async def test_concurrent_turns_through_both_replicas_lose_no_update(
    replicas: list[Service], postgres_url: str
) -> None:
    turns = 20

    async def turn(stub: agent_pb2_grpc.AgentServiceStub) -> list[Event] | grpc.aio.AioRpcError:
        try:
            return events_of([r async for r in stub.Run(request("count", "counter"), timeout=30)])
        except grpc.aio.AioRpcError as error:
            return error

    async with one_name(replicas, warm=True) as stub:
        outcomes = await asyncio.gather(*(turn(stub) for _ in range(turns)))
    successes = [outcome for outcome in outcomes if isinstance(outcome, list)]
    failures = [outcome for outcome in outcomes if isinstance(outcome, grpc.aio.AioRpcError)]
    assert successes and len(successes) + len(failures) == turns
    for failure in failures:
        # Refused at once by the replica that found the session claimed by the other one.
        assert failure.code() == grpc.StatusCode.ABORTED, failure
        assert isinstance(error_from_rpc_error(failure), SessionConflictError)

    session = await stored(postgres_url, "counter")
    assert session.state["counter"] == len(successes)
    answers = [event.text for event in session.events if event.text.startswith("counter is")]
    assert [text.split(" (")[0] for text in answers] == [
        f"counter is {n}" for n in range(1, len(successes) + 1)
    ]
    assert {pid_in(text) for text in answers} <= {service.process.pid for service in replicas}
    invocations = [event.invocation_id for event in session.events]
    assert len(invocations) == 4 * len(successes)
    for start in range(0, len(invocations), 4):  # each turn's four events together
        assert len(set(invocations[start : start + 4])) == 1
    # Both replicas served turns (the channel alternates): a refusal came from the one that
    # found the session claimed, a success from the one holding it.
    assert failures, "20 turns at once through two replicas: some meet the other's claim"
