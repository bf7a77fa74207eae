"""Parity: one behaviour with the child agent in this process and in another one.

One suite, parametrised. Each case builds a root agent and an agent that may run elsewhere
(the *child*: an AgentTool's child, or a transfer target), and plays a conversation three
times: with the child in this process; served by a real AgentServer on 127.0.0.1 (port 0) in
this process, reached through a RemoteAgent; and served by an AgentServer in **another OS
process**. For that playing the case runs twice over: in a host process (``python -m
tests.integration.mesh.test_parity CASE DIR``), where ``world.child`` and ``world.tools``
start the servers and the turns do nothing, and here, where they return RemoteAgents and
RemoteToolsets to the host's ports, in the same order. The two processes talk over the host's
standard input and output in JSON lines: the ports, the signals of cases whose sides wait on
each other (``world.signal``), and at the end what the host's models were sent and what its
tools observed. The child's service has stores of its own that share the root's as a separate
process would: a FileArtifactService over the same directory, and a memory backend (the
root's in this process, the host's own in the other one: a delegated run's memory is the
caller's either way).

The outcome — every event the Runner yielded and stored, the session state, every version of
every artifact, what each model was sent, what the tools observed, the error a turn raised —
is normalised (ids numbered in order of appearance) and must be identical; each case also
checks that its policy did what it says (a refusal is checked to be a refusal, in both).

A child's tools reach the *root's* artifacts and memory over the delegated call itself
(``RunDelegated``), even when the child's service has no stores of its own; the tool cases
(``TOOL_CASES``) play the same way with the *tools* in process or served by a ToolServer with
no stores (``CallToolInteractive``), here or in the host: artifacts with versions, memory and
user content are the caller's. A case that cannot pass remote yet is marked with
``remote_xfail`` (strict).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.agents.workflow import SequentialAgent
from adk_mesh.artifacts.file import FileArtifactService
from adk_mesh.contexts import CallbackContext, ReadonlyContext, RunConfig, ToolContext
from adk_mesh.errors import AdkError, ArtifactError
from adk_mesh.memory.in_memory import InMemoryMemoryService
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset, ToolServer
from adk_mesh.models.base import LlmRequest
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.tools.agent_tool import AgentTool, StateMergePolicy
from adk_mesh.tools.builtin import LoadArtifactsTool
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import (
    Citation,
    CodeExecution,
    CodeExecutionOutcome,
    Content,
    Event,
    GroundingMetadata,
    GroundingSource,
    LlmResponse,
    Part,
)

APP = "app"
USER = "u"
IN_PROCESS = "in_process"
REMOTE = "remote"  # a server in this process
OTHER_PROCESS = "other_process"  # a server in a host process
HOST = "host"  # inside the host process: serve, play no turns

REPO_ROOT = Path(__file__).resolve().parents[3]

Outcome = dict[str, Any]


class Signal:
    """An event two sides of a case wait on; across processes, set on both."""

    def __init__(self, name: str, send: Callable[[dict[str, Any]], None] | None) -> None:
        self.name = name
        self._event = asyncio.Event()
        self._send = send

    def set(self, *, from_peer: bool = False) -> None:
        if not self._event.is_set() and self._send is not None and not from_peer:
            self._send({"signal": self.name})
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()


class World:
    """One playing of a case: the root's stores, and where the child runs."""

    def __init__(self, where: str, directory: Path, stack: AsyncExitStack) -> None:
        self.where = where
        self.artifacts_dir = directory / "artifacts"
        self.artifacts = FileArtifactService(self.artifacts_dir)
        self.memory = InMemoryMemoryService()
        self.sessions = InMemorySessionService()
        self.models: dict[str, ScriptedModel | FunctionModel] = {}
        self.observed: list[Any] = []
        self.events: list[Event] = []
        self.errors: list[str] = []
        self.session_id = ""
        self.signals: dict[str, Signal] = {}
        self.served: list[dict[str, Any]] = []  # HOST: what it serves, in order
        self._stack = stack
        self._host: HostProcess | None = None  # OTHER_PROCESS: the process serving the child

    def scripted(self, name: str, responses: list[LlmResponse | str]) -> ScriptedModel:
        """A scripted model whose requests the outcome compares."""
        model = ScriptedModel(responses, name=name)
        self.models[name] = model
        return model

    def function(self, name: str, fn: Callable[[LlmRequest], Any]) -> FunctionModel:
        model = FunctionModel(fn, name=name)
        self.models[name] = model
        return model

    def signal(self, name: str) -> Signal:
        """An event the root's side and the child's side of a case may both set and wait on."""
        send = None
        if self.where == HOST:
            send = _send_to_parent
        elif self._host is not None:
            send = self._host.send
        signal = self.signals[name] = Signal(name, send)
        return signal

    async def child(self, agent: BaseAgent, *, stores: bool = True, **window: int) -> BaseAgent:
        """``agent`` here, or served by an AgentServer and reached through a RemoteAgent.
        ``stores``: the child's service shares the root's stores (else it has none);
        ``window``: the RemoteAgent's history window (``history_max_events``, ``..._bytes``)."""
        if self.where == IN_PROCESS:
            return agent
        if self._host is not None:
            port = self._host.next_port("agent", agent.name)
            return self._remote_agent(agent, port, **window)
        server = AgentServer(
            agent,
            app_name=APP,
            artifact_service=FileArtifactService(self.artifacts_dir) if stores else None,
            memory_service=self.memory if stores else None,
        )
        port = await server.start("127.0.0.1:0")
        self._stack.push_async_callback(server.stop, None)
        self.served.append({"kind": "agent", "name": agent.name, "port": port})
        return self._remote_agent(agent, port, **window)

    def _remote_agent(self, agent: BaseAgent, port: int, **window: int) -> RemoteAgent:
        remote = RemoteAgent(
            agent.name, f"127.0.0.1:{port}", description=agent.description, **window
        )
        self._stack.push_async_callback(remote.close)
        return remote

    async def tools(self, tools: list[Callable[..., Any]]) -> list[Any]:
        """``tools`` here, or served by a ToolServer with no stores of its own and reached
        through a RemoteToolset."""
        if self.where == IN_PROCESS:
            return list(tools)
        if self._host is not None:
            port = self._host.next_port("tools", ",".join(tool.__name__ for tool in tools))
        else:
            server = ToolServer([FunctionTool(tool) for tool in tools])
            port = await server.start("127.0.0.1:0")
            self._stack.push_async_callback(server.stop, None)
            names = ",".join(tool.__name__ for tool in tools)
            self.served.append({"kind": "tools", "name": names, "port": port})
        toolset = RemoteToolset(f"127.0.0.1:{port}")
        self._stack.push_async_callback(toolset.close)
        return [toolset]

    async def start_host(self, case_name: str) -> None:
        """OTHER_PROCESS: start the process that serves this case's child and tools."""
        self._host = await HostProcess.start(case_name, self.artifacts_dir.parent, self)
        self._stack.push_async_callback(self._host.close)

    async def new_session(self, state: dict[str, Any] | None = None) -> str:
        if self.where == HOST:
            return ""
        session = await self.sessions.create_session(app_name=APP, user_id=USER, state=state)
        self.session_id = session.id
        return session.id

    async def turn(
        self,
        root: BaseAgent,
        message: str | Content = "hi",
        *,
        run_config: RunConfig | None = None,
    ) -> None:
        """One user turn; an error it raises is part of the outcome."""
        if self.where == HOST:
            return
        if not self.session_id:
            await self.new_session()
        runner = Runner(
            agent=root,
            app_name=APP,
            session_service=self.sessions,
            artifact_service=self.artifacts,
            memory_service=self.memory,
        )
        try:
            async for event in runner.run(
                user_id=USER,
                session_id=self.session_id,
                new_message=(
                    Content.from_text("user", message) if isinstance(message, str) else message
                ),
                run_config=run_config,
            ):
                self.events.append(event)
        except AdkError as error:
            self.errors.append(f"{type(error).__name__}: {error.message}")

    async def confirm(self, root: BaseAgent, response: dict[str, Any]) -> None:
        """A turn that answers the newest ``adk_request_confirmation`` call with ``response``
        (tool confirmation, human in the loop)."""
        if self.where == HOST:
            return
        request_id = next(
            call.id
            for event in reversed(self.events)
            for call in event.function_calls()
            if call.name == "adk_request_confirmation"
        )
        await self.turn(
            root,
            Content(
                role="user",
                parts=[
                    Part.from_function_response("adk_request_confirmation", response, id=request_id)
                ],
            ),
        )

    async def save(self, filename: str, text: str) -> None:
        if self.where == HOST:
            return
        await self.artifacts.save_artifact(
            app_name=APP,
            user_id=USER,
            session_id=self.session_id,
            filename=filename,
            artifact=Part.from_text(text),
        )

    def seen_and_observed(self) -> tuple[dict[str, list[Any]], list[Any]]:
        """What this process's models were sent and its tools observed."""
        seen = {
            name: [_request(request) for request in model.requests]
            for name, model in self.models.items()
        }
        return seen, self.observed

    async def outcome(self) -> Outcome:
        seen, observed = self.seen_and_observed()
        if self._host is not None:
            # The child's models and tools ran in the host: their side of the record is there.
            host_seen, host_observed = await self._host.finish()
            for name, requests in host_seen.items():
                if requests:
                    assert not seen[name], f"model {name!r} was called in both processes"
                    seen[name] = requests
            assert not (observed and host_observed), "both processes observed: order unknown"
            observed = observed or host_observed
        session = await self.sessions.get_session(
            app_name=APP, user_id=USER, session_id=self.session_id
        )
        assert session is not None
        artifacts: dict[str, list[str | None]] = {}
        for name in await self.artifacts.list_artifact_keys(
            app_name=APP, user_id=USER, session_id=self.session_id
        ):
            versions = await self.artifacts.list_versions(
                app_name=APP, user_id=USER, session_id=self.session_id, filename=name
            )
            artifacts[name] = []
            for version in versions:
                part = await self.artifacts.load_artifact(
                    app_name=APP,
                    user_id=USER,
                    session_id=self.session_id,
                    filename=name,
                    version=version,
                )
                artifacts[name].append(None if part is None else part.text)
        return _numbered(
            {
                "events": [_event(event) for event in self.events],
                "stored": [_event(event) for event in session.events],
                "state": session.state,
                "artifacts": artifacts,
                "seen": seen,
                "observed": observed,
                "errors": self.errors,
            }
        )


# --- the other process -------------------------------------------------------------------------
# Parent → host: {"signal": NAME}, {"finish": true} (or end of input). Host → parent:
# {"served": [{"kind", "name", "port"}, ...]} once ready, {"signal": NAME}, then
# {"seen": ..., "observed": ...} when asked to finish; it exits when its input closes.


class HostProcess:
    """The parent's end of a host process: its ports in order of use, and its pipe."""

    def __init__(self, process: asyncio.subprocess.Process, world: World) -> None:
        self.process = process
        self._world = world
        self._served: list[dict[str, Any]] = []
        self._used = 0
        self._record: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._reader: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, case_name: str, directory: Path, world: World) -> HostProcess:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.integration.mesh.test_parity",
            case_name,
            str(directory),
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            limit=1 << 26,
        )
        host = cls(process, world)
        first = await host._receive()
        if first is None or "served" not in first:
            raise AssertionError(f"the host process did not start: {await host._stderr()}")
        host._served = first["served"]
        host._reader = asyncio.create_task(host._read())
        return host

    def next_port(self, kind: str, name: str) -> int:
        """The port of the next thing the host serves; both sides build the case in one order."""
        served = self._served[self._used]
        self._used += 1
        assert (served["kind"], served["name"]) == (kind, name), served
        return int(served["port"])

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(message).encode() + b"\n")

    async def finish(self) -> tuple[dict[str, list[Any]], list[Any]]:
        assert self._used == len(self._served), "the case used fewer servers than the host ran"
        self.send({"finish": True})
        record = await self._record
        return record["seen"], record["observed"]

    async def close(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.is_closing():
            self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 10)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()
        if self._reader is not None:
            await self._reader
        assert self.process.returncode == 0, await self._stderr()

    async def _receive(self) -> dict[str, Any] | None:
        assert self.process.stdout is not None
        line = await self.process.stdout.readline()
        return json.loads(line) if line else None

    async def _read(self) -> None:
        while (message := await self._receive()) is not None:
            if "signal" in message:
                self._world.signals[message["signal"]].set(from_peer=True)
            elif not self._record.done():
                self._record.set_result(message)
        if not self._record.done():
            self._record.set_exception(AssertionError(f"the host died: {await self._stderr()}"))

    async def _stderr(self) -> str:
        assert self.process.stderr is not None
        return (await self.process.stderr.read()).decode(errors="replace")


def _send_to_parent(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def _host(case_name: str, directory: Path) -> None:
    """The host process: build the case, serve its child and tools, answer the parent."""
    (entry,) = [case for case in CASES + TRANSFER_CASES + TOOL_CASES if case.name == case_name]
    loop = asyncio.get_running_loop()
    commands = asyncio.StreamReader(limit=1 << 26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(commands), sys.stdin)
    async with AsyncExitStack() as stack:
        world = World(HOST, directory, stack)
        await entry.play(world)
        _send_to_parent({"served": world.served})
        while line := await commands.readline():
            message = json.loads(line)
            if "signal" in message:
                world.signals[message["signal"]].set(from_peer=True)
            elif message.get("finish"):
                seen, observed = world.seen_and_observed()
                _send_to_parent({"seen": seen, "observed": observed})


def _event(event: Event) -> dict[str, Any]:
    return event.model_dump(mode="json", exclude={"timestamp"}, exclude_none=True)


def _request(request: LlmRequest) -> dict[str, Any]:
    return {
        "system_instruction": request.system_instruction,
        "contents": [
            content.model_dump(mode="json", exclude_none=True) for content in request.contents
        ],
        "tools": [(tool.name, tool.parameters_schema) for tool in request.tools],
    }


_ID = re.compile(r"(?:e-|adk-)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _numbered(outcome: Outcome) -> Outcome:
    """The outcome with every id (event, invocation, call, session) numbered in order of first
    appearance: two playings of one case then compare equal."""
    text = json.dumps(outcome, sort_keys=True, default=str)
    numbers: dict[str, str] = {}

    def number(match: re.Match[str]) -> str:
        return numbers.setdefault(match.group(0), f"id-{len(numbers) + 1}")

    result: Outcome = json.loads(_ID.sub(number, text))
    return result


# --- reading an outcome ---------------------------------------------------------------------


def responses(outcome: Outcome, name: str) -> list[dict[str, Any]]:
    """The responses to calls of ``name`` in the events the Runner yielded."""
    return [
        part["function_response"]["response"]
        for event in outcome["events"]
        for part in (event.get("llm_response", {}).get("content") or {}).get("parts", [])
        if "function_response" in part and part["function_response"]["name"] == name
    ]


def texts(outcome: Outcome, author: str | None = None) -> list[str]:
    return [
        part["text"]
        for event in outcome["events"]
        if author is None or event["author"] == author
        for part in (event.get("llm_response", {}).get("content") or {}).get("parts", [])
        if "text" in part
    ]


def authors(outcome: Outcome) -> list[str]:
    return [event["author"] for event in outcome["events"]]


def seen_texts(outcome: Outcome, model: str, index: int = 0) -> list[str]:
    return [
        part["text"]
        for content in outcome["seen"][model][index]["contents"]
        for part in content["parts"]
        if "text" in part
    ]


def delta(outcome: Outcome, index: int) -> dict[str, Any]:
    actions: dict[str, Any] = outcome["events"][index].get("actions", {})
    return actions


def observed_is(expected: Any) -> Callable[[Outcome], None]:
    def expect(outcome: Outcome) -> None:
        assert outcome["observed"] == expected

    return expect


def first_state_seen_is(expected: dict[str, Any]) -> Callable[[Outcome], None]:
    def expect(outcome: Outcome) -> None:
        assert outcome["observed"][0]["state"] == expected

    return expect


def state_is(expected: dict[str, Any]) -> Callable[[Outcome], None]:
    def expect(outcome: Outcome) -> None:
        assert outcome["state"] == expected

    return expect


# --- the cases ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    play: Callable[[World], Awaitable[None]]
    expect: Callable[[Outcome], None]
    remote_xfail: str | None = None
    #: A model whose requests are built from a history window smaller than the history when
    #: its agent runs remote (by design: a delegated run is sent a bounded window; the rest
    #: it fetches with ``load_events``): compared apart, as fewer contents than in process.
    windowed: str | None = None


CASES: list[Case] = []
TRANSFER_CASES: list[Case] = []
TOOL_CASES: list[Case] = []


def case(
    expect: Callable[[Outcome], None],
    *,
    remote_xfail: str | None = None,
    windowed: str | None = None,
    into: list[Case] = CASES,
) -> Callable[[Callable[[World], Awaitable[None]]], Callable[[World], Awaitable[None]]]:
    def register(play: Callable[[World], Awaitable[None]]) -> Callable[[World], Awaitable[None]]:
        into.append(Case(play.__name__, play, expect, remote_xfail, windowed))
        return play

    return register


def delegate(name: str, request: str = "do it") -> LlmResponse:
    return call(name, {"request": request})


def parallel(*calls: tuple[str, dict[str, Any]]) -> LlmResponse:
    return LlmResponse(
        content=Content(
            role="model", parts=[Part.from_function_call(name, args) for name, args in calls]
        ),
        turn_complete=True,
    )


def observing_instruction(world: World) -> Callable[[ReadonlyContext], str]:
    def instruction(ctx: ReadonlyContext) -> str:
        world.observed.append({"state": dict(ctx.state), "user_content": _text_of(ctx)})
        return "Work."

    return instruction


def _text_of(ctx: ReadonlyContext) -> str | None:
    content = ctx.user_content
    return None if content is None else content.text


PARENT_STATE = {"a": 1, "ab": 2, "b": 3, "user:name": "Ann", "app:flag": True}


async def _projection(world: World, **policy: Any) -> None:
    child = LlmAgent(
        name="child",
        description="Does the work.",
        model=world.scripted("child", ["child answer"]),
        instruction=observing_instruction(world),
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child", "summarize"), "done"]),
        tools=[AgentTool(await world.child(child), **policy)],
    )
    await world.new_session(PARENT_STATE)
    await world.turn(parent)


def _expect_isolated(outcome: Outcome) -> None:
    assert outcome["observed"] == [{"state": {}, "user_content": "summarize"}]
    assert seen_texts(outcome, "child") == ["summarize"]
    assert authors(outcome) == ["parent"] * 3
    assert responses(outcome, "child") == [{"result": "child answer"}]
    assert outcome["state"] == PARENT_STATE


@case(_expect_isolated)
async def isolated_by_default(world: World) -> None:
    await _projection(world)


@case(first_state_seen_is({"b": 3, "user:name": "Ann"}))
async def state_keys(world: World) -> None:
    await _projection(world, state_keys=["b", "missing", "user:name"])


@case(first_state_seen_is(PARENT_STATE))
async def include_parent_state(world: World) -> None:
    await _projection(world, include_parent_state=True)


@case(first_state_seen_is({"a": 1}))
async def state_keys_win_over_include_parent_state(world: World) -> None:
    await _projection(world, state_keys=["a"], include_parent_state=True)


def _expect_history(outcome: Outcome) -> None:
    seen = seen_texts(outcome, "historian")
    assert seen[0] == "How is the weather?"
    assert "[parent] said: Sunny all week." in seen
    assert seen[-1] == "What did we talk about?"
    assert responses(outcome, "historian") == [{"result": "The weather."}]


@case(_expect_history)
async def include_parent_history(world: World) -> None:
    historian = LlmAgent(name="historian", model=world.scripted("historian", ["The weather."]))
    parent = LlmAgent(
        name="parent",
        model=world.scripted(
            "parent", ["Sunny all week.", delegate("historian", "What did we talk about?"), "ok"]
        ),
        tools=[AgentTool(await world.child(historian), include_parent_history=True)],
    )
    await world.turn(parent, "How is the weather?")
    await world.turn(parent, "Ask the historian.")


async def _note_taker(world: World, **policy: Any) -> None:
    def take_note(note: str, tool_context: ToolContext) -> dict[str, Any]:
        """Keep a note in state."""
        tool_context.state["notes"] = note
        tool_context.state["user:last_note"] = note
        tool_context.state["temp:scratch"] = "scratch"
        return {"kept": True}

    child = LlmAgent(
        name="child",
        model=world.scripted("child", [call("take_note", {"note": "n1"}), "final summary"]),
        output_key="summary",
        tools=[take_note],
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child"), "done"]),
        tools=[AgentTool(await world.child(child), **policy)],
    )
    await world.new_session({"existing": 0})
    await world.turn(parent)


def _expect_written_back(expected: dict[str, Any]) -> Callable[[Outcome], None]:
    def expect(outcome: Outcome) -> None:
        assert responses(outcome, "child") == [{"result": "final summary"}]
        assert delta(outcome, 1).get("state_delta", {}) == expected
        assert outcome["state"] == {"existing": 0, **expected}

    return expect


@case(
    _expect_written_back(
        {
            "notes": "n1",
            "user:last_note": "n1",
            "summary": "final summary",
        }
    )
)
async def every_state_change_written_back(world: World) -> None:
    await _note_taker(world)


@case(_expect_written_back({"summary": "final summary"}))
async def output_state_keys(world: World) -> None:
    await _note_taker(world, output_state_keys=["summary", "nope"])


@case(_expect_written_back({}))
async def output_state_keys_empty(world: World) -> None:
    await _note_taker(world, output_state_keys=[])


async def _concurrent_write(
    world: World, policy: StateMergePolicy, parent_key: str, output_state_keys: list[str] | None
) -> None:
    # The parent's other tool writes `parent_key` while the child runs (ordered by events).
    child_started = world.signal("child_started")
    parent_wrote = world.signal("parent_wrote")

    async def write_parent(tool_context: ToolContext) -> dict[str, Any]:
        """Write a key in the parent's state."""
        await child_started.wait()
        tool_context.state[parent_key] = "parent"
        parent_wrote.set()
        return {"written": parent_key}

    async def child_write(tool_context: ToolContext) -> dict[str, Any]:
        """Write two keys."""
        child_started.set()
        await parent_wrote.wait()
        tool_context.state["k"] = "child"
        tool_context.state["k2"] = "also child"
        return {}

    worker = LlmAgent(
        name="worker",
        model=world.scripted("worker", [call("child_write"), "child finished"]),
        tools=[child_write],
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted(
            "parent", [parallel(("write_parent", {}), ("worker", {"request": "go"})), "done"]
        ),
        tools=[
            write_parent,
            AgentTool(
                await world.child(worker),
                state_merge_policy=policy,
                output_state_keys=output_state_keys,
            ),
        ],
    )
    await world.turn(parent)


def _expect_conflict(outcome: Outcome) -> None:
    error = responses(outcome, "worker")[0]["error"]
    assert "StateConflictError" in error and "wrote k," in error
    assert outcome["state"] == {"k": "parent"}


@case(_expect_conflict)
async def reject_conflicts(world: World) -> None:
    await _concurrent_write(world, StateMergePolicy.REJECT_CONFLICTS, "k", None)


@case(state_is({"k": "parent", "k2": "also child"}))
async def reject_conflicts_of_keys_written_back_only(world: World) -> None:
    await _concurrent_write(world, StateMergePolicy.REJECT_CONFLICTS, "k", ["k2"])


@case(state_is({"k": "child", "k2": "also child"}))
async def last_writer_wins(world: World) -> None:
    await _concurrent_write(world, StateMergePolicy.LAST_WRITER_WINS, "k", None)


def _artifact_saver(world: World) -> Callable[..., Awaitable[dict[str, Any]]]:
    async def save_files(tool_context: ToolContext) -> dict[str, Any]:
        """Save the report, try to save a secret, list what is visible."""
        version = await tool_context.save_artifact("reports/q1.txt", Part.from_text("q1 report"))
        refused = None
        try:
            await tool_context.save_artifact("secret.txt", Part.from_text("nope"))
        except ArtifactError as error:
            refused = error.message
        listed = await tool_context.list_artifacts()
        world.observed.append({"version": version, "refused": refused, "listed": listed})
        return {"version": version, "refused": refused, "listed": listed}

    return save_files


def _expect_prefixes(outcome: Outcome) -> None:
    observed = outcome["observed"][0]
    assert observed["version"] == 1
    assert "secret.txt" in observed["refused"] and "'reports/'" in observed["refused"]
    assert observed["listed"] == ["reports/q1.txt"]
    loaded = outcome["seen"]["child"][2]["contents"][-1]["parts"][0]["function_response"]
    assert loaded["response"]["artifacts"][0] == {"name": "reports/q1.txt", "content": "q1 report"}
    assert (
        "outside this delegation's allowed prefixes" in loaded["response"]["artifacts"][1]["error"]
    )
    assert delta(outcome, 1)["artifact_delta"] == {"reports/q1.txt": 1}
    assert outcome["artifacts"] == {
        "private/plan.txt": ["the plan"],
        "reports/q1.txt": ["q1 report"],
    }


@case(_expect_prefixes)
async def artifact_prefixes(world: World) -> None:
    child = LlmAgent(
        name="child",
        model=world.scripted(
            "child",
            [
                call("save_files"),
                call("load_artifacts", {"artifact_names": ["reports/q1.txt", "private/plan.txt"]}),
                "saved",
            ],
        ),
        tools=[_artifact_saver(world), LoadArtifactsTool()],
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child"), "done"]),
        tools=[AgentTool(await world.child(child), artifact_prefixes=["reports/"])],
    )
    await world.new_session()
    await world.save("private/plan.txt", "the plan")
    await world.turn(parent)


def _expect_shared_artifacts(outcome: Outcome) -> None:
    observed = outcome["observed"][0]
    assert observed["refused"] is None
    assert observed["listed"] == ["private/plan.txt", "reports/q1.txt", "secret.txt"]
    assert delta(outcome, 1)["artifact_delta"] == {"reports/q1.txt": 1, "secret.txt": 1}


@case(_expect_shared_artifacts)
async def artifacts_shared_without_prefixes(world: World) -> None:
    child = LlmAgent(
        name="child",
        model=world.scripted("child", [call("save_files"), "saved"]),
        tools=[_artifact_saver(world)],
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child"), "done"]),
        tools=[AgentTool(await world.child(child))],
    )
    await world.new_session()
    await world.save("private/plan.txt", "the plan")
    await world.turn(parent)


def _expect_nested_prefixes(outcome: Outcome) -> None:
    observed = outcome["observed"]
    assert [entry["name"] for entry in observed] == [
        "reports/q1/a.txt",
        "other/x.txt",
        "reports/q2.txt",
    ]
    assert observed[0]["error"] is None
    assert "'reports/'" in observed[1]["error"]  # the outer delegation refuses it
    assert "'reports/q1/', 'other/'" in observed[2]["error"]  # the inner one
    assert outcome["artifacts"] == {"reports/q1/a.txt": ["a"]}
    assert delta(outcome, 1)["artifact_delta"] == {"reports/q1/a.txt": 1}


@case(_expect_nested_prefixes)
async def nested_artifact_prefixes(world: World) -> None:
    async def save_three(tool_context: ToolContext) -> dict[str, Any]:
        """Save three files."""
        for name in ("reports/q1/a.txt", "other/x.txt", "reports/q2.txt"):
            try:
                await tool_context.save_artifact(name, Part.from_text(name[-5]))
                world.observed.append({"name": name, "error": None})
            except ArtifactError as error:
                world.observed.append({"name": name, "error": error.message})
        return {}

    grandchild = LlmAgent(
        name="grandchild",
        model=world.scripted("grandchild", [call("save_three"), "saved"]),
        tools=[save_three],
    )
    child = LlmAgent(
        name="child",
        model=world.scripted("child", [delegate("grandchild"), "relayed"]),
        tools=[AgentTool(grandchild, artifact_prefixes=["reports/q1/", "other/"])],
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child"), "done"]),
        tools=[AgentTool(await world.child(child), artifact_prefixes=["reports/"])],
    )
    await world.turn(parent)


def _expect_a_remote_step_in_scope(outcome: Outcome) -> None:
    observed = outcome["observed"][0]
    assert "secret.txt" in observed["refused"]
    assert delta(outcome, 1)["artifact_delta"] == {"reports/q1.txt": 1}


@case(_expect_a_remote_step_in_scope)
async def artifact_prefixes_reach_a_sub_agent_in_another_service(world: World) -> None:
    # The AgentTool's child runs here; the agent it transfers to may run elsewhere: the
    # delegation's scope travels with the transfer.
    saver = LlmAgent(
        name="saver",
        description="Saves files.",
        model=world.scripted("saver", [call("save_files"), "saved"]),
        tools=[_artifact_saver(world)],
    )
    child = LlmAgent(
        name="child",
        model=world.scripted("child", [call("transfer_to_agent", {"agent_name": "saver"})]),
        sub_agents=[await world.child(saver)],
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child"), "done"]),
        tools=[AgentTool(child, artifact_prefixes=["reports/"])],
    )
    await world.turn(parent)


def _expect_forwarded(outcome: Outcome) -> None:
    assert [(e["author"], e["branch"]) for e in outcome["events"]] == [
        ("parent", ""),
        ("child", "parent.child"),
        ("child", "parent.child"),
        ("child", "parent.child"),
        ("parent", ""),
        ("parent", ""),
    ]
    # Forwarded events carry no state or artifact action: the write-back carries them.
    for event in outcome["events"][1:4]:
        assert not event["actions"].get("state_delta") and not event["actions"].get(
            "artifact_delta"
        )
    assert delta(outcome, 4)["state_delta"] == {"seen": True}
    assert delta(outcome, 4)["artifact_delta"] == {"out.txt": 1}
    assert outcome["stored"][1:] == outcome["events"]


@case(_expect_forwarded)
async def forward_events(world: World) -> None:
    async def record(tool_context: ToolContext) -> dict[str, Any]:
        """Record something in state and in an artifact."""
        tool_context.state["seen"] = True
        await tool_context.save_artifact("out.txt", Part.from_text("out"))
        return {"recorded": True}

    child = LlmAgent(
        name="child",
        model=world.scripted("child", [call("record"), "child answer"]),
        tools=[record],
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child"), "done"]),
        tools=[AgentTool(await world.child(child), forward_events=True)],
    )
    await world.turn(parent)


async def _recall(world: World, *, forward_memory: bool, stores: bool = True) -> None:
    async def recall(topic: str, tool_context: ToolContext) -> dict[str, Any]:
        """Search memory for a topic."""
        entries = await tool_context.search_memory(topic)
        found = [entry.content.text for entry in entries]
        world.observed.append(found)
        return {"found": found}

    child = LlmAgent(
        name="child",
        model=world.scripted("child", [call("recall", {"topic": "otters"}), "recalled"]),
        tools=[recall],
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child"), "done"]),
        tools=[AgentTool(await world.child(child, stores=stores), forward_memory=forward_memory)],
    )
    past = await world.sessions.create_session(app_name=APP, user_id=USER)
    await world.sessions.append_event(
        past, Event.new(author="user", content=Content.from_text("user", "I love otters"))
    )
    await world.memory.add_session_to_memory(past)
    await world.new_session()
    await world.turn(parent)


@case(observed_is([["I love otters"]]))
async def forward_memory(world: World) -> None:
    await _recall(world, forward_memory=True)


@case(observed_is([[]]))
async def memory_not_forwarded(world: World) -> None:
    await _recall(world, forward_memory=False)


async def _depth(world: World, limit_on: str) -> None:
    agent_c = LlmAgent(name="agent_c", model=world.scripted("agent_c", []))
    agent_b = LlmAgent(
        name="agent_b",
        model=world.scripted("agent_b", [delegate("agent_c"), "C was out of reach"]),
        tools=[AgentTool(agent_c, max_delegation_depth=1 if limit_on == "inner" else 8)],
    )
    agent_a = LlmAgent(
        name="agent_a",
        model=world.scripted("agent_a", [delegate("agent_b"), "done"]),
        tools=[
            AgentTool(
                await world.child(agent_b), max_delegation_depth=1 if limit_on == "outer" else 8
            )
        ],
    )
    await world.turn(agent_a)


def _expect_depth(outcome: Outcome) -> None:
    assert outcome["seen"]["agent_c"] == []
    reply = outcome["seen"]["agent_b"][1]["contents"][-1]["parts"][0]["function_response"]
    assert "DelegationError" in reply["response"]["error"]
    assert "the limit is 1" in reply["response"]["error"]
    assert responses(outcome, "agent_b") == [{"result": "C was out of reach"}]


@case(_expect_depth)
async def max_delegation_depth_of_the_outer_delegation(world: World) -> None:
    await _depth(world, "outer")


@case(_expect_depth)
async def max_delegation_depth_of_the_inner_delegation(world: World) -> None:
    await _depth(world, "inner")


async def _failing_child(world: World, **policy: Any) -> None:
    child = LlmAgent(name="child", model=world.scripted("child", []))  # fails at once
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child"), "The child failed."]),
        tools=[AgentTool(await world.child(child), **policy)],
    )
    await world.turn(parent)


def _expect_error_response(outcome: Outcome) -> None:
    error = responses(outcome, "child")[0]["error"]
    assert error.startswith("agent 'child' failed: ModelError: ScriptedModel 'child' was called")
    assert texts(outcome)[-1] == "The child failed."
    assert outcome["errors"] == []


@case(_expect_error_response)
async def child_failure_is_an_error_response(world: World) -> None:
    await _failing_child(world)


def _expect_propagated(outcome: Outcome) -> None:
    assert len(outcome["errors"]) == 1
    assert outcome["errors"][0].startswith("ModelError: ScriptedModel 'child' was called")
    assert len(outcome["seen"]["parent"]) == 1
    interrupted = outcome["stored"][-1]["llm_response"]
    assert interrupted["interrupted"] and interrupted["error_code"] == "MODEL_ERROR"


@case(_expect_propagated)
async def propagate_errors(world: World) -> None:
    await _failing_child(world, propagate_errors=True)


def _expect_skipped(outcome: Outcome) -> None:
    assert len(outcome["events"]) == 2
    assert responses(outcome, "child") == [{"result": "the final word"}]
    assert delta(outcome, 1)["skip_summarization"]


@case(_expect_skipped)
async def skip_summarization(world: World) -> None:
    child = LlmAgent(name="child", model=world.scripted("child", ["the final word"]))
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child")]),
        tools=[AgentTool(await world.child(child), skip_summarization=True)],
    )
    await world.turn(parent)


def _expect_transfer_inside(outcome: Outcome) -> None:
    assert responses(outcome, "child") == [{"result": "grandchild answer"}]
    delegated = [(e["author"], e["branch"]) for e in outcome["events"] if e["author"] != "parent"]
    assert delegated == [
        ("child", "parent.child"),
        ("child", "parent.child"),
        ("grandchild", "parent.child"),
    ]
    assert not any(e["actions"].get("transfer_to_agent") for e in outcome["stored"])


@case(_expect_transfer_inside)
async def transfer_inside_the_child(world: World) -> None:
    grandchild = LlmAgent(
        name="grandchild",
        description="Knows the answer.",
        model=world.scripted("grandchild", ["grandchild answer"]),
    )
    child = LlmAgent(
        name="child",
        model=world.scripted("child", [call("transfer_to_agent", {"agent_name": "grandchild"})]),
        sub_agents=[grandchild],
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child"), "done"]),
        tools=[AgentTool(await world.child(child), forward_events=True)],
    )
    await world.turn(parent)


def _expect_too_many_transfers(outcome: Outcome) -> None:
    error = responses(outcome, "child")[0]["error"]
    assert "DelegationError: more than 1 transfers in invocation" in error
    assert outcome["seen"]["second"] == []


@case(_expect_too_many_transfers)
async def max_transfers(world: World) -> None:
    second = LlmAgent(name="second", model=world.scripted("second", []))
    first = LlmAgent(
        name="first",
        model=world.scripted("first", [call("transfer_to_agent", {"agent_name": "second"})]),
        sub_agents=[second],
    )
    child = LlmAgent(
        name="child",
        model=world.scripted("child", [call("transfer_to_agent", {"agent_name": "first"})]),
        sub_agents=[first],
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child"), "done"]),
        tools=[AgentTool(await world.child(child), max_transfers=1)],
    )
    await world.turn(parent)


def _expect_delegation_ended(outcome: Outcome) -> None:
    assert len(outcome["seen"]["child"]) == 1  # the child stopped after its tool
    assert responses(outcome, "child") == [{"result": ""}]
    assert texts(outcome)[-1] == "done"  # the parent's invocation went on


@case(_expect_delegation_ended)
async def end_invocation_in_the_child_ends_the_delegation(world: World) -> None:
    def stop(tool_context: ToolContext) -> dict[str, Any]:
        """Stop here."""
        tool_context.invocation_context.end_invocation()
        return {"stopped": True}

    child = LlmAgent(
        name="child",
        model=world.scripted("child", [call("stop"), "never"]),
        tools=[stop],
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child"), "done"]),
        tools=[AgentTool(await world.child(child), forward_events=True)],
    )
    await world.turn(parent)


async def _counted(world: World, max_llm_calls: int) -> None:
    def note(tool_context: ToolContext) -> dict[str, Any]:
        """Note something."""
        return {"noted": True}

    child = LlmAgent(
        name="child",
        model=world.scripted("child", [call("note"), "child answer"]),
        tools=[note],
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child"), "done", "never"]),
        tools=[AgentTool(await world.child(child))],
    )
    await world.turn(parent, run_config=RunConfig(max_llm_calls=max_llm_calls))


def _expect_limit(limit: int, child_calls: int, child_error: bool) -> Callable[[Outcome], None]:
    def expect(outcome: Outcome) -> None:
        message = f"the invocation reached max_llm_calls={limit}; no more model calls"
        assert outcome["errors"] == [f"LlmCallLimitError: {message}"]
        assert len(outcome["seen"]["child"]) == child_calls
        assert len(outcome["seen"]["parent"]) == limit - child_calls
        if child_error:
            error = responses(outcome, "child")[0]["error"]
            assert error == f"agent 'child' failed: LlmCallLimitError: {message}"

    return expect


@case(_expect_limit(3, 2, child_error=False))
async def max_llm_calls_count_the_childs_calls(world: World) -> None:
    await _counted(world, 3)


@case(_expect_limit(2, 1, child_error=True))
async def max_llm_calls_reached_inside_the_child(world: World) -> None:
    await _counted(world, 2)


@case(_expect_limit(1, 0, child_error=True))
async def max_llm_calls_none_left_for_the_child(world: World) -> None:
    await _counted(world, 1)


def _expect_timeout(outcome: Outcome) -> None:
    error = responses(outcome, "child")[0]["error"]
    assert error == "Tool 'child' did not finish within 0.2 s and was stopped"
    assert texts(outcome)[-1] == "too slow"


@case(_expect_timeout)
async def timeout(world: World) -> None:
    never = asyncio.Event()

    async def wait(request: LlmRequest) -> str:
        await never.wait()
        return "unreachable"

    child = LlmAgent(name="child", model=world.function("child", wait))
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child"), "too slow"]),
        tools=[AgentTool(await world.child(child), timeout=0.2)],
    )
    await world.turn(parent)


async def _past_conversation(world: World) -> None:
    """Six events of earlier turns, one of them large, before the case's own turn."""
    if world.where == HOST:
        return
    await world.new_session()
    session = await world.sessions.get_session(
        app_name=APP, user_id=USER, session_id=world.session_id
    )
    assert session is not None
    for index in range(6):
        text = f"message {index}" + (" and more" * 600 if index == 2 else "")
        author, role = ("user", "user") if index % 2 == 0 else ("parent", "model")
        event = Event.new(author=author, content=Content.from_text(role, text))
        session = await world.sessions.append_event(session, event) and session


def _history_reader(world: World) -> Callable[..., Awaitable[dict[str, Any]]]:
    async def read_history(tool_context: ToolContext) -> dict[str, Any]:
        """Page back through the whole history, three events at a time."""
        pages: list[list[str]] = []
        before: str | None = None
        while events := await tool_context.load_events(before_event_id=before, max_events=3):
            pages.append([f"{e.author}: {e.text[:12]} ({len(e.text)})" for e in events])
            before = events[0].id
        try:
            await tool_context.load_events(before_event_id="e-nowhere")
        except AdkError as error:
            pages.append([type(error).__name__])
        world.observed.append(pages)
        return {"pages": len(pages)}

    return read_history


def _expect_history_pages(outcome: Outcome) -> None:
    (pages,) = outcome["observed"]
    assert pages[-1] == ["InvalidArgumentError"]
    read = [line for page in reversed(pages[:-1]) for line in page]
    assert read[:6] == [
        "user: message 0 (9)",
        "parent: message 1 (9)",
        "user: message 2 an (5409)",  # whole, though the window sent it abridged
        "parent: message 3 (9)",
        "user: message 4 (9)",
        "parent: message 5 (9)",
    ]
    assert read[6] == "user: what came be (20)"  # the turn's own message


@case(_expect_history_pages, windowed="child")
async def history_beyond_the_window_of_a_delegation(world: World) -> None:
    # The remote child's window holds the two newest events in 2 KiB: the rest, and the large
    # event whole, come from the caller, as far as the policy shows the child the history.
    child = LlmAgent(
        name="child",
        model=world.scripted("child", [call("read_history"), "read"]),
        tools=[_history_reader(world)],
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child", "recount"), "done"]),
        tools=[
            AgentTool(
                await world.child(child, history_max_events=2, history_max_bytes=2048),
                include_parent_history=True,
            )
        ],
    )
    await _past_conversation(world)
    await world.turn(parent, "what came before us?")


# --- the contexts a child's tools and callbacks run in ---------------------------------------


def _expect_contexts(outcome: Outcome) -> None:
    assert outcome["observed"] == [
        {"callback": "before", "state": {"a": 1}, "user_content": "look"},
        {
            "tool": "inspect",
            "state": {"a": 1, "from_callback": True},
            "user_content": "look",
            "has_call_id": True,
            "agent": "child",
            "branch": "parent.child",
        },
    ]
    assert delta(outcome, 1)["state_delta"] == {"from_callback": True, "from_tool": "t"}


@case(_expect_contexts)
async def tool_and_callback_contexts(world: World) -> None:
    def before(callback_context: CallbackContext) -> None:
        world.observed.append(
            {
                "callback": "before",
                "state": dict(callback_context.state),
                "user_content": _text_of(callback_context),
            }
        )
        callback_context.state["from_callback"] = True

    def inspect(tool_context: ToolContext) -> dict[str, Any]:
        """Look at the context."""
        world.observed.append(
            {
                "tool": "inspect",
                "state": dict(tool_context.state),
                "user_content": _text_of(tool_context),
                "has_call_id": bool(tool_context.function_call_id),
                "agent": tool_context.agent_name,
                "branch": tool_context.branch,
            }
        )
        tool_context.state["from_tool"] = "t"
        return {}

    child = LlmAgent(
        name="child",
        model=world.scripted("child", [call("inspect"), "looked"]),
        tools=[inspect],
        before_agent_callback=before,
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child", "look"), "done"]),
        tools=[AgentTool(await world.child(child), state_keys=["a"])],
    )
    await world.new_session({"a": 1, "b": 2})
    await world.turn(parent)


def _expect_root_artifacts(outcome: Outcome) -> None:
    assert outcome["observed"] == [
        {"versions": [1, 2], "loaded": "v2", "first": "v1", "listed": ["notes.txt", "plan.txt"]}
    ]
    assert outcome["artifacts"] == {"notes.txt": ["v1", "v2"], "plan.txt": ["the plan"]}


@case(_expect_root_artifacts)
async def artifacts_of_the_root_without_a_shared_store(world: World) -> None:
    async def use_artifacts(tool_context: ToolContext) -> dict[str, Any]:
        """Save, load and list artifacts."""
        await tool_context.save_artifact("notes.txt", Part.from_text("v1"))
        await tool_context.save_artifact("notes.txt", Part.from_text("v2"))
        invocation = tool_context.invocation_context
        service = invocation.artifact_service
        assert service is not None, "no artifact service is configured"
        versions = await service.list_versions(
            app_name=invocation.app_name,
            user_id=invocation.user_id,
            session_id=invocation.session_id,
            filename="notes.txt",
        )
        latest = await tool_context.load_artifact("notes.txt")
        first = await tool_context.load_artifact("notes.txt", version=1)
        world.observed.append(
            {
                "versions": versions,
                "loaded": latest and latest.text,
                "first": first and first.text,
                "listed": await tool_context.list_artifacts(),
            }
        )
        return {}

    child = LlmAgent(
        name="child",
        model=world.scripted("child", [call("use_artifacts"), "done"]),
        tools=[use_artifacts],
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child"), "done"]),
        tools=[AgentTool(await world.child(child, stores=False))],
    )
    await world.new_session()
    await world.save("plan.txt", "the plan")
    await world.turn(parent)


@case(observed_is([["I love otters"]]))
async def memory_of_the_root_without_a_shared_store(world: World) -> None:
    await _recall(world, forward_memory=True, stores=False)


# --- transfers: the same conversation with the transfer target here or elsewhere ------------


def _expect_continuity(outcome: Outcome) -> None:
    # Turn 2 went straight to the specialist, whose model was offered its parent and peer.
    assert outcome["seen"]["coordinator"] != []
    first = outcome["seen"]["specialist"][0]
    transfer_tool = dict(first["tools"])["transfer_to_agent"]
    assert transfer_tool["properties"]["agent_name"]["enum"] == ["coordinator", "logistics"]
    assert "- logistics: Clocks and conversions." in first["system_instruction"]
    assert "transfer back to 'coordinator'" in first["system_instruction"]
    turns = [
        [e["author"] for e in outcome["events"] if e["invocation_id"] == invocation]
        for invocation in dict.fromkeys(e["invocation_id"] for e in outcome["events"])
    ]
    assert turns == [
        ["coordinator", "coordinator", "specialist"],  # the transfer, then its answer
        ["specialist"],  # the next turn: the specialist answers it
        ["specialist", "specialist", "logistics"],  # it hands over to its peer
        ["logistics"],  # which answers the turn after
    ]
    assert len(outcome["seen"]["coordinator"]) == 1


@case(_expect_continuity, into=TRANSFER_CASES)
async def the_agent_transferred_to_answers_the_next_turn_and_hands_over(world: World) -> None:
    specialist = LlmAgent(
        name="specialist",
        description="Plans trips.",
        model=world.scripted(
            "specialist",
            [
                "Lisbon, three days.",
                "Day 1: Alfama.",
                call("transfer_to_agent", {"agent_name": "logistics"}),
            ],
        ),
    )
    logistics = LlmAgent(
        name="logistics",
        description="Clocks and conversions.",
        model=world.scripted("logistics", ["It is 9 in Tokyo.", "Noted."]),
    )
    coordinator = LlmAgent(
        name="coordinator",
        description="The front desk.",
        model=world.scripted(
            "coordinator", [call("transfer_to_agent", {"agent_name": "specialist"})]
        ),
        sub_agents=[await world.child(specialist), logistics],
    )
    await world.turn(coordinator, "Plan a trip to Lisbon.")
    await world.turn(coordinator, "What on day 1?")
    await world.turn(coordinator, "What time is it in Tokyo?")
    await world.turn(coordinator, "Thanks.")


def _expect_handed_back(outcome: Outcome) -> None:
    assert [e["author"] for e in outcome["events"]][-3:] == [
        "specialist",
        "specialist",
        "coordinator",
    ]
    assert texts(outcome)[-1] == "Back at the desk."


GROUNDING = GroundingMetadata(
    sources=[
        GroundingSource(uri="https://ssb.example/oslo", title="SSB"),
        GroundingSource(uri="https://kommune.example/orsta"),
    ],
    queries=["population of Oslo"],
    citations=[
        Citation(start_index=0, end_index=11, text="Ørsta grew.", source_indices=[1, 0]),
        Citation(start_index=12, end_index=16, source_indices=[0], cited_text="717 710"),
    ],
    code_executions=[
        CodeExecution(code="print(1)", language="python", outcome=CodeExecutionOutcome.OK)
    ],
    search_suggestions_html="<div>suggestions</div>",
)


def _expect_grounded(outcome: Outcome) -> None:
    (answer,) = [e for e in outcome["events"] if e["author"] == "researcher"]
    assert answer["llm_response"]["grounding_metadata"] == GROUNDING.model_dump(
        mode="json", exclude_none=True
    )


@case(_expect_grounded, into=TRANSFER_CASES)
async def the_grounding_of_an_answer_reaches_the_caller_as_it_was(world: World) -> None:
    grounded = LlmResponse(
        content=Content.from_text("model", "Ørsta grew. Oslo is bigger."),
        grounding_metadata=GROUNDING,
        turn_complete=True,
    )
    researcher = LlmAgent(
        name="researcher",
        description="Looks things up.",
        model=world.scripted("researcher", [grounded]),
    )
    desk = LlmAgent(
        name="desk",
        description="The front desk.",
        model=world.scripted("desk", [call("transfer_to_agent", {"agent_name": "researcher"})]),
        sub_agents=[await world.child(researcher)],
    )
    await world.turn(desk, "How many people live in Oslo?")


@case(_expect_handed_back, into=TRANSFER_CASES)
async def the_agent_transferred_to_hands_back_to_its_parent(world: World) -> None:
    specialist = LlmAgent(
        name="specialist",
        description="Plans trips.",
        model=world.scripted(
            "specialist",
            ["Lisbon.", call("transfer_to_agent", {"agent_name": "coordinator"})],
        ),
    )
    coordinator = LlmAgent(
        name="coordinator",
        description="The front desk.",
        model=world.scripted(
            "coordinator",
            [call("transfer_to_agent", {"agent_name": "specialist"}), "Back at the desk."],
        ),
        sub_agents=[await world.child(specialist)],
    )
    await world.turn(coordinator, "Plan a trip.")
    await world.turn(coordinator, "Something else entirely.")


def _expect_ended(outcome: Outcome) -> None:
    assert outcome["seen"]["second_step"] == []
    assert [e["author"] for e in outcome["events"]] == ["first_step", "first_step"]


@case(_expect_ended, into=TRANSFER_CASES)
async def end_invocation_in_the_agent_ends_the_callers_invocation(world: World) -> None:
    def stop(tool_context: ToolContext) -> dict[str, Any]:
        """Stop the invocation."""
        tool_context.invocation_context.end_invocation()
        return {"stopped": True}

    first_step = LlmAgent(
        name="first_step", model=world.scripted("first_step", [call("stop"), "never"]), tools=[stop]
    )
    second_step = LlmAgent(name="second_step", model=world.scripted("second_step", ["never"]))
    flow = SequentialAgent(name="flow", sub_agents=[await world.child(first_step), second_step])
    await world.turn(flow)


def _expect_counted_across(outcome: Outcome) -> None:
    assert outcome["errors"] == [
        "LlmCallLimitError: the invocation reached max_llm_calls=2; no more model calls"
    ]
    assert len(outcome["seen"]["specialist"]) == 1


@case(_expect_counted_across, into=TRANSFER_CASES)
async def max_llm_calls_count_across_a_transfer(world: World) -> None:
    def note() -> dict[str, Any]:
        """Note something."""
        return {}

    specialist = LlmAgent(
        name="specialist",
        model=world.scripted("specialist", [call("note"), "never"]),
        tools=[note],
    )
    coordinator = LlmAgent(
        name="coordinator",
        model=world.scripted(
            "coordinator", [call("transfer_to_agent", {"agent_name": "specialist"})]
        ),
        sub_agents=[await world.child(specialist)],
    )
    await world.turn(coordinator, run_config=RunConfig(max_llm_calls=2))


@case(_expect_history_pages, windowed="specialist", into=TRANSFER_CASES)
async def history_beyond_the_window_of_a_transfer(world: World) -> None:
    specialist = LlmAgent(
        name="specialist",
        model=world.scripted("specialist", [call("read_history"), "read"]),
        tools=[_history_reader(world)],
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [call("transfer_to_agent", {"agent_name": "specialist"})]),
        sub_agents=[await world.child(specialist, history_max_events=2, history_max_bytes=2048)],
    )
    await _past_conversation(world)
    await world.turn(parent, "what came before us?")


# --- tools: the same ToolContext with the tool here or served by a ToolServer ---------------


async def use_artifacts_tool(world: World, tool_context: ToolContext) -> dict[str, Any]:
    """Save a note twice, then look at its versions and list every artifact."""
    first_version = await tool_context.save_artifact("notes.txt", Part.from_text("v1"))
    second_version = await tool_context.save_artifact("notes.txt", Part.from_text("v2"))
    invocation = tool_context.invocation_context
    service = invocation.artifact_service
    assert service is not None, "no artifact service is configured"
    versions = await service.list_versions(
        app_name=invocation.app_name,
        user_id=invocation.user_id,
        session_id=invocation.session_id,
        filename="notes.txt",
    )
    latest = await tool_context.load_artifact("notes.txt")
    first = await tool_context.load_artifact("notes.txt", version=1)
    missing = await tool_context.load_artifact("nothing.txt")
    plan = await tool_context.load_artifact("plan.txt")
    world.observed.append(
        {
            "saved": [first_version, second_version],
            "versions": versions,
            "loaded": latest and latest.text,
            "first": first and first.text,
            "missing": missing,
            "plan": plan and plan.text,
            "listed": await tool_context.list_artifacts(),
        }
    )
    return {"saved": second_version}


def _expect_tool_artifacts(outcome: Outcome) -> None:
    assert outcome["observed"] == [
        {
            "saved": [1, 2],
            "versions": [1, 2],
            "loaded": "v2",
            "first": "v1",
            "missing": None,
            "plan": "the plan",
            "listed": ["notes.txt", "plan.txt"],
        }
    ]
    assert outcome["artifacts"] == {"notes.txt": ["v1", "v2"], "plan.txt": ["the plan"]}
    assert outcome["errors"] == []


@case(_expect_tool_artifacts, into=TOOL_CASES)
async def tool_artifacts(world: World) -> None:
    async def use_artifacts(tool_context: ToolContext) -> dict[str, Any]:
        """Save, load and list artifacts."""
        return await use_artifacts_tool(world, tool_context)

    agent = LlmAgent(
        name="agent",
        model=world.scripted("agent", [call("use_artifacts"), "done"]),
        tools=await world.tools([use_artifacts]),
    )
    await world.new_session()
    await world.save("plan.txt", "the plan")
    await world.turn(agent)


def _expect_tool_memory(outcome: Outcome) -> None:
    assert outcome["observed"] == [{"otters": ["I love otters"], "whales": []}]


@case(_expect_tool_memory, into=TOOL_CASES)
async def tool_memory(world: World) -> None:
    async def recall(tool_context: ToolContext) -> dict[str, Any]:
        """Search memory."""
        found = {}
        for topic in ("otters", "whales"):
            entries = await tool_context.search_memory(topic)
            found[topic] = [entry.content.text for entry in entries]
        world.observed.append(found)
        return found

    agent = LlmAgent(
        name="agent",
        model=world.scripted("agent", [call("recall"), "recalled"]),
        tools=await world.tools([recall]),
    )
    past = await world.sessions.create_session(app_name=APP, user_id=USER)
    await world.sessions.append_event(
        past, Event.new(author="user", content=Content.from_text("user", "I love otters"))
    )
    await world.memory.add_session_to_memory(past)
    await world.new_session()
    await world.turn(agent)


def _expect_tool_user_content(outcome: Outcome) -> None:
    assert outcome["observed"] == [
        {"user_content": "what do I need?", "state": {"a": 1}},
        {"user_content": "and now?", "state": {"a": 1, "seen": "what do I need?"}},
    ]


@case(_expect_tool_user_content, into=TOOL_CASES)
async def tool_user_content(world: World) -> None:
    def inspect(tool_context: ToolContext) -> dict[str, Any]:
        """Look at the user's message."""
        text = _text_of(tool_context)
        world.observed.append({"user_content": text, "state": dict(tool_context.state)})
        tool_context.state["seen"] = text
        return {}

    agent = LlmAgent(
        name="agent",
        model=world.scripted("agent", [call("inspect"), "one", call("inspect"), "two"]),
        tools=await world.tools([inspect]),
    )
    await world.new_session({"a": 1})
    await world.turn(agent, "what do I need?")
    await world.turn(agent, "and now?")


def _expect_scoped_tool_artifacts(outcome: Outcome) -> None:
    assert outcome["observed"] == [
        {"reports/ok.txt": 1, "secret.txt": "ArtifactError", "listed": ["reports/ok.txt"]}
    ]
    assert outcome["artifacts"] == {"plan.txt": ["the plan"], "reports/ok.txt": ["fine"]}


@case(_expect_scoped_tool_artifacts, into=TOOL_CASES)
async def tool_of_a_child_under_artifact_prefixes(world: World) -> None:
    # The tool (here or behind a ToolServer) runs in an AgentTool's child (here or behind an
    # AgentServer): its artifacts are the root's, as far as the policy's prefixes allow.
    async def write(tool_context: ToolContext) -> dict[str, Any]:
        """Write two artifacts."""
        seen: dict[str, Any] = {}
        for name, text in (("reports/ok.txt", "fine"), ("secret.txt", "no")):
            try:
                seen[name] = await tool_context.save_artifact(name, Part.from_text(text))
            except ArtifactError as error:
                seen[name] = type(error).__name__
        seen["listed"] = await tool_context.list_artifacts()
        world.observed.append(seen)
        return {}

    child = LlmAgent(
        name="child",
        model=world.scripted("child", [call("write"), "written"]),
        tools=await world.tools([write]),
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [delegate("child"), "done"]),
        tools=[AgentTool(await world.child(child, stores=False), artifact_prefixes=["reports/"])],
    )
    await world.new_session()
    await world.save("plan.txt", "the plan")
    await world.turn(parent)


@case(_expect_history_pages, into=TOOL_CASES)
async def tool_history(world: World) -> None:
    async def read_history(tool_context: ToolContext) -> dict[str, Any]:
        """Page back through the whole history, three events at a time."""
        return await _history_reader(world)(tool_context)

    agent = LlmAgent(
        name="parent",
        model=world.scripted("parent", [call("read_history"), "read"]),
        tools=await world.tools([read_history]),
    )
    await _past_conversation(world)
    await world.turn(agent, "what came before us?")


# --- tool confirmation (human in the loop) ---------------------------------------------------


def _pay_tool(world: World) -> Callable[..., dict[str, Any]]:
    def pay(amount: int, tool_context: ToolContext) -> dict[str, Any]:
        """Pay an amount, once a person confirms."""
        answer = tool_context.tool_confirmation
        if answer is None:
            tool_context.request_confirmation(hint=f"Pay {amount}?", payload={"memo": ""})
            world.observed.append({"asked": amount})
            return {"status": "asked"}
        world.observed.append({"answered": answer.confirmed, "payload": answer.payload})
        if not answer.confirmed:
            return {"error": "rejected"}
        return {"paid": amount, "memo": answer.payload["memo"]}

    return pay


def _expect_confirmed(outcome: Outcome) -> None:
    asked = [
        part["function_call"]
        for event in outcome["events"]
        for part in (event.get("llm_response", {}).get("content") or {}).get("parts", [])
        if part.get("function_call", {}).get("name") == "adk_request_confirmation"
    ]
    assert len(asked) == 1
    assert asked[0]["args"]["toolConfirmation"] == {
        "hint": "Pay 500?",
        "confirmed": False,
        "payload": {"memo": ""},
    }
    assert asked[0]["args"]["originalFunctionCall"]["name"] == "pay"
    assert responses(outcome, "pay") == [{"paid": 500, "memo": "rent"}]
    assert texts(outcome)[-1] == "paid"
    assert outcome["observed"] == [
        {"asked": 500},
        {"answered": True, "payload": {"memo": "rent"}},
    ]
    assert outcome["errors"] == []


@case(_expect_confirmed, into=TRANSFER_CASES)
async def a_tool_confirmation_in_the_agent_transferred_to(world: World) -> None:
    # The request comes from the agent the transfer handed the turn to (here or in another
    # service); the answer in the next turn goes back to it, and it runs the call.
    bank = LlmAgent(
        name="bank",
        description="Pays.",
        model=world.scripted("bank", [call("pay", {"amount": 500}), "paid"]),
        tools=[_pay_tool(world)],
    )
    desk = LlmAgent(
        name="desk",
        model=world.scripted("desk", [call("transfer_to_agent", {"agent_name": "bank"})]),
        sub_agents=[await world.child(bank)],
    )
    await world.turn(desk, "pay the rent")
    await world.confirm(desk, {"confirmed": True, "payload": {"memo": "rent"}})


@case(_expect_confirmed, into=TOOL_CASES)
async def a_tool_confirmation_of_a_served_tool(world: World) -> None:
    agent = LlmAgent(
        name="agent",
        model=world.scripted("agent", [call("pay", {"amount": 500}), "paid"]),
        tools=await world.tools([_pay_tool(world)]),
    )
    await world.new_session()
    await world.turn(agent, "pay the rent")
    await world.confirm(agent, {"confirmed": True, "payload": {"memo": "rent"}})


def _expect_rejected(outcome: Outcome) -> None:
    assert responses(outcome, "pay") == [{"error": "rejected"}]
    assert outcome["observed"][-1] == {"answered": False, "payload": None}
    # The model read the rejection, and nothing of the request nor the answer.
    last_request = outcome["seen"]["agent"][-1]["contents"]
    names = [
        part.get("function_call", part.get("function_response", {})).get("name")
        for content in last_request
        for part in content["parts"]
    ]
    assert "adk_request_confirmation" not in names
    assert texts(outcome)[-1] == "not paid"


@case(_expect_rejected, into=TOOL_CASES)
async def a_rejected_tool_confirmation_of_a_served_tool(world: World) -> None:
    agent = LlmAgent(
        name="agent",
        model=world.scripted("agent", [call("pay", {"amount": 500}), "not paid"]),
        tools=await world.tools([_pay_tool(world)]),
    )
    await world.new_session()
    await world.turn(agent, "pay the rent")
    await world.confirm(agent, {"confirmed": False})


# --- structured agents and instruction templates (issue 18) ----------------------------------


class TripRequest(BaseModel):
    """A trip to plan."""

    destination: str = Field(description="Where to go.")
    travellers: list[str]


TRIP_PLAN: dict[str, Any] = {
    "title": "TripPlan",
    "type": "object",
    "properties": {"destination": {"type": "string"}, "stops": {"type": "array"}},
    "required": ["destination", "stops"],
    "additionalProperties": False,
}


def _expect_structured_child(outcome: Outcome) -> None:
    declared = dict(outcome["seen"]["parent"][0]["tools"])["planner"]
    assert declared == {
        "type": "object",
        "description": "A trip to plan.",
        "properties": {
            "destination": {"type": "string", "description": "Where to go."},
            "travellers": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["destination", "travellers"],
    }
    # The checked arguments reached the child as JSON text; a bad call never did.
    assert [json.loads(text) for text in seen_texts(outcome, "planner")] == [
        {"destination": "Kyoto", "travellers": ["Ann"]}
    ]
    first, second = responses(outcome, "planner")
    assert "the arguments do not fit the input_schema of agent 'planner'" in first["error"]
    assert second == {"destination": "Kyoto", "stops": ["Gion"]}  # the answer, as an object
    assert outcome["state"] == {"plan": {"destination": "Kyoto", "stops": ["Gion"]}}


@case(_expect_structured_child)
async def input_and_output_schema_of_an_agent_tool_child(world: World) -> None:
    planner = LlmAgent(
        name="planner",
        description="Plans trips.",
        model=world.scripted("planner", ['{"destination": "Kyoto", "stops": ["Gion"]}']),
        input_schema=TripRequest,
        output_schema=TRIP_PLAN,
        output_key="plan",
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted(
            "parent",
            [
                call("planner", {"destination": "Kyoto"}),
                call("planner", {"destination": "Kyoto", "travellers": ["Ann"]}),
                "done",
            ],
        ),
        tools=[AgentTool(await world.child(planner))],
    )
    await world.turn(parent)


def _expect_structured_transfer(outcome: Outcome) -> None:
    answers = [e for e in outcome["events"] if e["author"] == "planner"]
    good, bad = answers
    assert json.loads(good["llm_response"]["content"]["parts"][0]["text"]) == {
        "destination": "Nara",
        "stops": [],
    }
    assert "error_code" not in good["llm_response"]
    assert bad["llm_response"]["error_code"] == "OUTPUT_SCHEMA_MISMATCH"
    assert "stops: is required" in bad["llm_response"]["error_message"]
    # The first answer's object was saved; the second, not fitting, saved nothing.
    assert outcome["state"] == {"plan": {"destination": "Nara", "stops": []}}


@case(_expect_structured_transfer, into=TRANSFER_CASES)
async def output_schema_and_output_key_of_a_transfer_target(world: World) -> None:
    planner = LlmAgent(
        name="planner",
        description="Plans trips.",
        model=world.scripted(
            "planner", ['{"destination": "Nara", "stops": []}', '{"destination": "Uji"}']
        ),
        output_schema=TRIP_PLAN,
        output_key="plan",
    )
    coordinator = LlmAgent(
        name="coordinator",
        model=world.scripted("coordinator", [call("transfer_to_agent", {"agent_name": "planner"})]),
        sub_agents=[await world.child(planner)],
    )
    await world.turn(coordinator, "Plan Nara")
    await world.turn(coordinator, "Now Uji")


def _expect_artifact_template(outcome: Outcome) -> None:
    (request,) = outcome["seen"]["reader"]
    assert request["system_instruction"] == "The plan: the plan v2. Notes: []."
    assert responses(outcome, "reader") == [{"result": "read it"}]
    first, second = responses(outcome, "strict_reader")
    assert "uses artifact {artifact.missing.txt}, which does not exist" in first["error"]
    assert second == first


@case(_expect_artifact_template)
async def artifact_templates_of_a_child_whose_artifacts_are_the_callers(world: World) -> None:
    reader = LlmAgent(
        name="reader",
        model=world.scripted("reader", ["read it"]),
        instruction="The plan: {artifact.plan.txt}. Notes: [{artifact.notes.txt?}].",
    )
    strict_reader = LlmAgent(
        name="strict_reader",
        model=world.scripted("strict_reader", []),
        instruction="{artifact.missing.txt}",
    )
    parent = LlmAgent(
        name="parent",
        model=world.scripted(
            "parent",
            [
                delegate("reader"),
                delegate("strict_reader"),
                delegate("strict_reader"),
                "done",
            ],
        ),
        tools=[
            AgentTool(await world.child(reader, stores=False)),
            AgentTool(await world.child(strict_reader, stores=False)),
        ],
    )
    await world.new_session()
    await world.save("plan.txt", "the plan v1")
    await world.save("plan.txt", "the plan v2")
    await world.turn(parent)


def _expect_global_instruction(outcome: Outcome) -> None:
    (specialist,) = outcome["seen"]["specialist"][:1]
    # The root's global instruction (templated in the caller) comes first, in place of the
    # served tree's own root's: in process the specialist is not a root.
    instruction = specialist["system_instruction"]
    assert instruction.startswith("Answer in Norwegian, Ann.\n\nBe precise.")  # then transfers
    assert "Its own" not in instruction
    # An AgentTool's child is a tree of its own: its root (itself) has none.
    (helper,) = outcome["seen"]["helper"]
    assert helper["system_instruction"] == "Help."


@case(_expect_global_instruction, into=TRANSFER_CASES)
async def the_roots_global_instruction_reaches_a_served_agent_of_its_tree(world: World) -> None:
    helper = LlmAgent(
        name="helper", model=world.scripted("helper", ["helped"]), instruction="Help."
    )
    specialist = LlmAgent(
        name="specialist",
        description="Knows things.",
        model=world.scripted("specialist", [delegate("helper"), "done"]),
        global_instruction="Its own, which a tree it is part of replaces.",
        instruction="Be precise.",
        tools=[AgentTool(helper)],
    )
    desk = LlmAgent(
        name="desk",
        description="The front desk.",
        model=world.scripted("desk", [call("transfer_to_agent", {"agent_name": "specialist"})]),
        global_instruction="Answer in Norwegian, {name}.",
        sub_agents=[await world.child(specialist)],
    )
    await world.new_session(state={"name": "Ann"})
    await world.turn(desk, "Hvor ligger Ørsta?")


# --- the suite --------------------------------------------------------------------------------


async def play(case: Case, where: str, directory: Path) -> Outcome:
    async with AsyncExitStack() as stack:
        world = World(where, directory, stack)
        if where == OTHER_PROCESS:
            await world.start_host(case.name)
        await case.play(world)
        return await world.outcome()


def _params(cases: list[Case]) -> Iterator[Any]:
    for entry in cases:
        yield pytest.param(entry, IN_PROCESS, id=f"{entry.name}-{IN_PROCESS}")
        marks = (
            [pytest.mark.xfail(strict=True, reason=entry.remote_xfail)]
            if entry.remote_xfail
            else []
        )
        for where in (REMOTE, OTHER_PROCESS):
            yield pytest.param(entry, where, id=f"{entry.name}-{where}", marks=marks)


async def _check(entry: Case, where: str, tmp_path: Path) -> None:
    outcome = await play(entry, where, tmp_path / where)
    entry.expect(outcome)
    if where != IN_PROCESS:
        reference = await play(entry, IN_PROCESS, tmp_path / "reference")
        if entry.windowed is not None:
            windowed = outcome["seen"].pop(entry.windowed)
            whole = reference["seen"].pop(entry.windowed)
            assert len(windowed) == len(whole)
            for remote_request, local_request in zip(windowed, whole, strict=True):
                assert len(remote_request["contents"]) < len(local_request["contents"])
                assert remote_request["contents"][-2:] == local_request["contents"][-2:]
        assert outcome == reference


@pytest.mark.parametrize(("entry", "where"), list(_params(CASES)))
async def test_agent_tool_policy_parity(entry: Case, where: str, tmp_path: Path) -> None:
    await _check(entry, where, tmp_path)


@pytest.mark.parametrize(("entry", "where"), list(_params(TRANSFER_CASES)))
async def test_transfer_parity(entry: Case, where: str, tmp_path: Path) -> None:
    await _check(entry, where, tmp_path)


@pytest.mark.parametrize(("entry", "where"), list(_params(TOOL_CASES)))
async def test_tool_context_parity(entry: Case, where: str, tmp_path: Path) -> None:
    await _check(entry, where, tmp_path)


if __name__ == "__main__":  # the host process of an OTHER_PROCESS playing
    asyncio.run(_host(sys.argv[1], Path(sys.argv[2])))
