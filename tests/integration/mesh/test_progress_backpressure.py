"""A tool's progress is back-pressured: a tool reporting in a tight loop to a slow reader runs
at the reader's pace, with at most MAX_UNREAD_TOOL_EVENTS updates waiting, instead of
buffering without end — in process (a Runner's consumer) and across a ToolServer (a slow
gRPC client). Nothing is dropped (AgentTool's forwarded events included), order is kept,
parallel calls share the bound, and a turn cancelled while a tool waits ends cleanly.

"Slow" here is a reader that lets the event loop run between two reads: without the bound,
the tool (whose ``report_progress`` then never suspends) makes every update before the reader
reads the first. The counters compare what the tool made with what the reader got."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh._tasks import TaskFeed
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import MAX_UNREAD_TOOL_EVENTS, ToolContext
from adk_mesh.mesh import AgentServer, RemoteToolset, ToolServer
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, Event, LlmResponse, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2, tool_pb2, tool_pb2_grpc

UPDATES = 20_000

#: Beyond the feed's bound, the reader may trail the tool by the update the tool is waiting
#: to hand over (one per running call) and the one on its way up the generators.
IN_HAND = 2


@dataclass
class Chatty:
    """A tool that reports ``updates`` progress updates in a tight loop, counting them."""

    updates: int = UPDATES
    padding: str = ""
    made: int = 0
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: bool = False

    def tool(self) -> FunctionTool:
        async def chatty(worker: int, tool_context: ToolContext) -> dict[str, Any]:
            """Reports progress, a lot of it."""
            try:
                for number in range(self.updates):
                    self.made += 1
                    data = {"pad": self.padding} if self.padding else None
                    await tool_context.report_progress(f"{worker}:{number}", data)
            except asyncio.CancelledError:
                self.cancelled = True
                raise
            finally:
                self.ended.set()
            return {"worker": worker, "reported": self.updates}

        return FunctionTool(chatty)


def calls_of(*workers: int) -> LlmResponse:
    """One model step calling chatty once per worker."""
    return LlmResponse(
        content=Content(
            role="model",
            parts=[
                Part.from_function_call("chatty", {"worker": worker}, id=f"c{worker}")
                for worker in workers
            ],
        )
    )


async def slow_run(runner: Runner, chatty: Chatty, *, bound: int) -> tuple[list[Event], int]:
    """Run one turn, reading slowly; the events and how far the reader ever trailed."""
    service = runner.session_service
    session = await service.create_session(app_name="app", user_id="u1")
    events: list[Event] = []
    received = 0
    trailed = 0
    async for event in runner.run(
        user_id="u1", session_id=session.id, new_message=Content.from_text("user", "go")
    ):
        events.append(event)
        if event.tool_progress is not None:
            received += 1
            trailed = max(trailed, chatty.made - received)
            assert chatty.made - received <= bound, "the tool ran ahead of its reader"
        await asyncio.sleep(0)  # the reader is slow: the tool may run meanwhile
    return events, trailed


def progress_of(events: list[Event], call_id: str) -> list[str]:
    return [
        event.tool_progress.message
        for event in events
        if event.tool_progress is not None and event.tool_progress.function_call_id == call_id
    ]


def expected(worker: int, updates: int) -> list[str]:
    return [f"{worker}:{number}" for number in range(updates)]


def runner_of(agent: LlmAgent) -> Runner:
    return Runner(agent=agent, app_name="app", session_service=InMemorySessionService())


async def test_a_chatty_tool_runs_at_its_slow_reader_s_pace_in_process() -> None:
    chatty = Chatty()
    agent = LlmAgent(
        name="desk", model=ScriptedModel([calls_of(1), "Done."]), tools=[chatty.tool()]
    )
    events, trailed = await slow_run(
        runner_of(agent), chatty, bound=MAX_UNREAD_TOOL_EVENTS + IN_HAND
    )
    assert progress_of(events, "c1") == expected(1, UPDATES)
    assert trailed >= MAX_UNREAD_TOOL_EVENTS  # the tool did wait on a full feed
    assert [event.text for event in events if event.is_final_response()] == ["Done."]


async def test_parallel_calls_all_waiting_on_one_full_feed_lose_nothing() -> None:
    workers = (1, 2, 3)
    chatty = Chatty(updates=3_000)
    agent = LlmAgent(
        name="desk", model=ScriptedModel([calls_of(*workers), "Done."]), tools=[chatty.tool()]
    )
    events, _ = await slow_run(
        runner_of(agent), chatty, bound=MAX_UNREAD_TOOL_EVENTS + len(workers) + IN_HAND
    )
    for worker in workers:
        assert progress_of(events, f"c{worker}") == expected(worker, chatty.updates)
    responses = [part for event in events for part in event.function_responses()]
    assert sorted(part.id or "" for part in responses) == ["c1", "c2", "c3"]
    assert [event.text for event in events if event.is_final_response()] == ["Done."]


async def test_an_agent_tool_s_forwarded_events_and_a_sibling_s_progress_all_arrive() -> None:
    """The child's events are forwarded by a synchronous callback, so they go in even when
    the sibling's progress has filled the feed: never dropped, never waited on."""
    chatty = Chatty(updates=5_000)
    child_replies = 4

    async def note(number: int) -> dict[str, Any]:
        """Takes a note."""
        return {"noted": number}

    child = LlmAgent(
        name="scribe",
        description="Takes notes.",
        model=ScriptedModel(
            [call("note", {"number": n}, id=f"n{n}") for n in range(child_replies)] + ["noted"]
        ),
        tools=[FunctionTool(note)],
    )
    both = LlmResponse(
        content=Content(
            role="model",
            parts=[
                Part.from_function_call("chatty", {"worker": 1}, id="c1"),
                Part.from_function_call("scribe", {"request": "note it"}, id="c2"),
            ],
        )
    )
    agent = LlmAgent(
        name="desk",
        model=ScriptedModel([both, "Done."]),
        tools=[chatty.tool(), AgentTool(child, forward_events=True)],
    )
    # Forwarded events may sit past the bound: each is counted as one more the reader owes.
    events, _ = await slow_run(
        runner_of(agent), chatty, bound=MAX_UNREAD_TOOL_EVENTS + 2 * child_replies + 2 + IN_HAND
    )
    assert progress_of(events, "c1") == expected(1, chatty.updates)
    forwarded = [event for event in events if event.author == "scribe"]
    calls = [part.args["number"] for event in forwarded for part in event.function_calls()]
    answers = [part.response for event in forwarded for part in event.function_responses()]
    assert calls == list(range(child_replies))
    assert answers == [{"noted": n} for n in range(child_replies)]
    assert [event.text for event in forwarded if event.is_final_response()] == ["noted"]
    own = [event for event in events if event.author == "desk" and event.is_final_response()]
    assert [event.text for event in own] == ["Done."]


@pytest.fixture
async def chatty_server() -> AsyncIterator[tuple[Chatty, str]]:
    chatty = Chatty(padding="x" * 1000)
    server = ToolServer([chatty.tool()], name="chatty")
    port = await server.start("127.0.0.1:0")
    try:
        yield chatty, f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


#: What a client's HTTP/2 flow-control window (64 KiB, BDP probing off) holds of 1 KB updates,
#: with room to spare for the transport's own write buffer.
IN_FLIGHT = 4 * 65_535 // 1000


async def test_a_tool_server_streams_progress_at_a_slow_grpc_reader_s_pace(
    chatty_server: tuple[Chatty, str],
) -> None:
    chatty, target = chatty_server
    received: list[str] = []
    # A fixed window: what gRPC holds in flight is known, the rest waits in the tool.
    options = [("grpc.http2.bdp_probe", 0)]
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        stub = tool_pb2_grpc.ToolServiceStub(channel)
        request = tool_pb2.CallToolRequest(tool_name="chatty")
        request.args.update({"worker": 1})
        result = None
        async for response in stub.CallTool(request, timeout=50):
            if response.HasField("progress"):
                received.append(response.progress.message)
                assert chatty.made - len(received) <= MAX_UNREAD_TOOL_EVENTS + IN_FLIGHT
            else:
                result = response.result
            await asyncio.sleep(0)
    assert received == expected(1, UPDATES)
    assert result is not None and not result.HasField("error")


async def test_progress_through_a_remote_toolset_arrives_whole_and_in_order(
    chatty_server: tuple[Chatty, str],
) -> None:
    """ToolServer → RemoteToolset → agent → Runner: each hop waits for the next one."""
    chatty, target = chatty_server
    chatty.updates = 5_000
    toolset = RemoteToolset(target)
    try:
        agent = LlmAgent(name="desk", model=ScriptedModel([calls_of(1), "Done."]), tools=[toolset])
        events, _ = await slow_run(runner_of(agent), chatty, bound=chatty.updates)
    finally:
        await toolset.close()
    assert progress_of(events, "c1") == expected(1, chatty.updates)
    assert [event.text for event in events if event.is_final_response()] == ["Done."]


async def _no_task_left() -> list[asyncio.Task[Any]]:
    for _ in range(5):  # let cancelled tasks finish cancelling
        await asyncio.sleep(0)
    return [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]


@pytest.fixture
async def loop_errors() -> AsyncIterator[list[str]]:
    """What the event loop reports ("Task was destroyed but it is pending!", ...)."""
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(str(context.get("message"))))
    yield reported
    gc.collect()
    loop.set_exception_handler(previous)


async def test_a_turn_cancelled_while_a_tool_waits_to_report_ends_cleanly(
    loop_errors: list[str],
) -> None:
    """The client cancels its Run while the tool waits in report_progress (it is always
    there once started: that is its only await, and it never ends first)."""
    chatty = Chatty(updates=100_000)
    agent = LlmAgent(
        name="desk", model=ScriptedModel([calls_of(1), "Done."]), tools=[chatty.tool()]
    )
    server = AgentServer(agent)
    port = await server.start("127.0.0.1:0")
    try:
        request = agent_pb2.RunRequest(
            root=agent_pb2.RootRun(
                user_id="u1",
                new_message=content_pb2.Content(role="user", parts=[content_pb2.Part(text="go")]),
            )
        )
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            run = agent_pb2_grpc.AgentServiceStub(channel).Run(request, timeout=50)
            async for response in run:
                if response.event.HasField("tool_progress"):
                    break  # the tool runs; read no more
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run.read()
            await chatty.ended.wait()
    finally:
        await server.stop(None)
    assert chatty.cancelled and chatty.made < chatty.updates
    assert await _no_task_left() == []
    assert loop_errors == []


async def test_a_tool_call_cancelled_while_its_tool_waits_to_report_ends_cleanly(
    loop_errors: list[str],
) -> None:
    """The same through a ToolServer: its client cancels CallTool and reads no more."""
    chatty = Chatty(updates=100_000)
    server = ToolServer([chatty.tool()], name="chatty")
    port = await server.start("127.0.0.1:0")
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            request = tool_pb2.CallToolRequest(tool_name="chatty")
            request.args.update({"worker": 1})
            call_tool = tool_pb2_grpc.ToolServiceStub(channel).CallTool(request, timeout=50)
            first = await call_tool.read()
            assert first.HasField("progress")
            call_tool.cancel()
            await chatty.ended.wait()
    finally:
        await server.stop(None)
    assert chatty.cancelled and chatty.made < chatty.updates
    assert await _no_task_left() == []
    assert loop_errors == []


async def test_a_send_cancelled_while_it_waits_for_room_leaves_the_room_to_the_others() -> None:
    """Waiting sends wait on futures of their own: cancelling one neither cancels the others
    nor keeps the room a read frees from them."""
    async with TaskFeed[str, bool](max_pending=1) as feed:
        feed.start(asyncio.Event().wait())
        await feed.send("first")
        doomed = asyncio.create_task(feed.send("doomed"))
        waiting = asyncio.create_task(feed.send("kept"))
        await asyncio.sleep(0)  # both wait for room now
        doomed.cancel()
        assert await anext(feed) == "first"
        await waiting
        assert doomed.cancelled()
        assert feed.take_ready(10) == ["kept"]


async def test_what_a_synchronous_sender_sends_goes_past_the_bound_and_holds_senders_back() -> None:
    async with TaskFeed[str, bool](max_pending=1) as feed:
        feed.start(asyncio.Event().wait())
        await feed.send("progress")
        feed.send_anyway("forwarded")  # a full feed: kept all the same
        assert feed.pending == 2
        later = asyncio.create_task(feed.send("later"))
        assert await anext(feed) == "progress"
        await asyncio.sleep(0)
        assert not later.done()  # one is still unread: the bound holds
        assert await anext(feed) == "forwarded"
        await later
        assert feed.take_ready(10) == ["later"]
