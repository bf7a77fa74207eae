"""A long conversation delegated to replicas behind one round-robin target: each turn names the
history its caller sent before by digest (``SessionView.history_digests``), and the replica that
did not see the last turn loads just what it missed from the caller on the call. Two
``adk-mesh serve agent`` processes, the caller in the test process on a real SQLite store: every
turn, whichever replica answers, the model sees the whole conversation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from adk_mesh.mesh import RemoteAgent
from adk_mesh.runner import Runner
from adk_mesh.sessions import SqliteSessionService
from adk_mesh.types import Content, Event
from tests.e2e.conftest import ServiceFactory

pytestmark = [pytest.mark.e2e]

AGENT = "tests.e2e.apps.replica:root_agent"
PRIOR = 300  # 150 user messages, 150 answers


async def test_every_replica_sees_the_whole_conversation(
    start_service: ServiceFactory, tmp_path: Path
) -> None:
    replicas = [start_service(f"replica-{index}", "agent", AGENT) for index in range(2)]
    target = "ipv4:" + ",".join(replica.wait_ready() for replica in replicas)
    store = SqliteSessionService(str(tmp_path / "sessions.db"))
    agent = RemoteAgent("replica", target)
    runner = Runner(agent=agent, app_name="app", session_service=store)
    try:
        session = await store.create_session(app_name="app", user_id="u")
        for index in range(PRIOR):
            role, author = ("user", "user") if index % 2 == 0 else ("model", "replica")
            await store.append_event(
                session, Event.new(author=author, content=Content.from_text(role, f"old {index}"))
            )
        pids = set()
        for number in range(6):
            events = [
                event
                async for event in runner.run(
                    user_id="u",
                    session_id=session.id,
                    new_message=Content.from_text("user", f"turn {number}"),
                )
            ]
            answer = [e.text for e in events if e.text and not e.partial][-1]
            seen = re.fullmatch(r"replica (\d+) saw (\d+) user messages \(([^)]*)\): (.*)", answer)
            assert seen is not None, answer
            pids.add(seen[1])
            assert int(seen[2]) == PRIOR // 2 + number + 1
            said = seen[4].split(", ")
            assert said[0] == "old 0" and said[-1] == f"turn {number}"
            assert said[-2] == (f"turn {number - 1}" if number else f"old {PRIOR - 2}")
        assert len(pids) == 2  # the turns landed on both replicas
    finally:
        await agent.close()
        await store.close()
