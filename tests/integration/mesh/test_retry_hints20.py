"""Overload refusals a client can act on (real AgentServer / ToolServer on 127.0.0.1, port 0).

A server at its limit of calls at once refuses one before running any of it: SERVER_BUSY in
the ErrorInfo, ``google.rpc.RetryInfo`` and gRPC's retry pushback say so and when to try
again. RemoteAgent and RemoteToolset send such a call again once, after the hinted delay; a
call that failed after it started is never sent again. A model provider's rate limit passes on
the provider's own delay.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import grpc.aio
import pytest
from google.rpc import error_details_pb2, status_pb2

from adk_mesh import Content, LlmAgent, Runner
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import ReadonlyContext
from adk_mesh.errors import (
    RETRY_DELAYS,
    AdkError,
    AdkIOError,
    ArtifactsBusyError,
    LlmCallLimitError,
    ModelRateLimitError,
    ServerBusyError,
)
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset, ToolServer, _status
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.models._http import RetryPolicy
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.testing.fake_providers import ErrorReply, FakeOpenAI
from adk_mesh.tools.base import BaseTool, Toolset
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import LlmResponse
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

# --- helpers ------------------------------------------------------------------------------


class Waiter:
    """A model whose turns wait until released; ``running`` counts the turns started."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.running = 0
        self._changed = asyncio.Event()

    async def __call__(self, request: LlmRequest) -> str:
        self.running += 1
        self._changed.set()
        await self.release.wait()
        return "done"

    async def wait_running(self, count: int) -> None:
        async with asyncio.timeout(10):
            while self.running < count:
                self._changed.clear()
                await self._changed.wait()


def root_run(user: str = "u") -> agent_pb2.RunRequest:
    message = content_pb2.Content(role="user", parts=[content_pb2.Part(text="hi")])
    return agent_pb2.RunRequest(root=agent_pb2.RootRun(user_id=user, new_message=message))


async def read_all(call: Any) -> grpc.StatusCode:
    async for _ in call:
        pass
    code: grpc.StatusCode = await call.code()
    return code


async def turn(runner: Runner, text: str = "hi") -> list[Any]:
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    return [
        event
        async for event in runner.run(
            user_id="u", session_id=session.id, new_message=Content.from_text("user", text)
        )
    ]


def details_of(error: grpc.aio.AioRpcError) -> tuple[error_details_pb2.ErrorInfo, float | None]:
    """The adk-mesh ErrorInfo and the RetryInfo delay (seconds) of a failed call."""
    info = error_details_pb2.ErrorInfo()
    delay: float | None = None
    for key, value in error.trailing_metadata() or ():
        if key != "grpc-status-details-bin":
            continue
        for detail in status_pb2.Status.FromString(value).details:
            retry = error_details_pb2.RetryInfo()
            if detail.Is(retry.DESCRIPTOR):
                detail.Unpack(retry)
                delay = retry.retry_delay.ToNanoseconds() / 1e9
            elif detail.Is(info.DESCRIPTOR):
                detail.Unpack(info)
    return info, delay


def trailer(error: grpc.aio.AioRpcError, key: str) -> str | None:
    return next((v for k, v in error.trailing_metadata() or () if k == key), None)


class HeldAgentServer:
    """An AgentServer that runs one call at once, with one root run held in its model."""

    def __init__(self) -> None:
        self.model = Waiter()
        self.server = AgentServer(
            LlmAgent(name="helper", model=FunctionModel(self.model)), app_name="app"
        )
        self.target = ""
        self.held: asyncio.Future[grpc.StatusCode] | None = None
        self._channel: grpc.aio.Channel | None = None

    async def __aenter__(self) -> HeldAgentServer:
        port = await self.server.start("127.0.0.1:0", max_concurrent_calls=1)
        self.target = f"127.0.0.1:{port}"
        self._channel = open_channel(self.target, tls=None)
        stub = agent_pb2_grpc.AgentServiceStub(self._channel)
        self.held = asyncio.ensure_future(read_all(stub.Run(root_run("holder"), timeout=30)))
        await self.model.wait_running(1)
        return self

    async def free(self) -> None:
        """Let the held run finish, and wait until the server runs no call."""
        assert self.held is not None
        self.model.release.set()
        assert await self.held is grpc.StatusCode.OK
        assert await self.server._gate.wait_idle(10)

    async def __aexit__(self, *exc: object) -> None:
        self.model.release.set()
        if self.held is not None:
            await asyncio.gather(self.held, return_exceptions=True)
        if self._channel is not None:
            await self._channel.close()
        await self.server.stop(None)


@pytest.fixture
def pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The delays a client waited before sending a call again (waited for real)."""
    waited: list[float] = []
    real = _status._pause

    async def pause(seconds: float) -> None:
        waited.append(seconds)
        await real(seconds)

    monkeypatch.setattr(_status, "_pause", pause)
    return waited


# --- item 1: the refusal says it came before the call ran, and when to try again -------------


async def test_a_busy_refusal_carries_server_busy_retry_info_and_pushback() -> None:
    async with HeldAgentServer() as busy, open_channel(busy.target, tls=None) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await read_all(stub.Run(root_run("second"), timeout=30))
    error = refused.value
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    info, delay = details_of(error)
    assert (info.reason, info.domain) == ("SERVER_BUSY", "adk-mesh")
    assert delay == RETRY_DELAYS[ServerBusyError] == 1.0
    assert trailer(error, "grpc-retry-pushback-ms") == "1000"
    assert trailer(error, "adk-mesh-error-origin") is None  # refused at the door, not served
    mapped = error_from_rpc_error(error)
    assert type(mapped) is ServerBusyError
    assert isinstance(mapped, AdkIOError)  # "unavailable for now", as before
    assert mapped.retry_delay == 1.0
    assert mapped.message.startswith("busy: this server runs 1 calls at once")


async def test_other_resource_exhausted_refusals_are_not_server_busy() -> None:
    """A limit the run reached is RESOURCE_EXHAUSTED too, but after effects: no SERVER_BUSY,
    no pushback; a ServerBusyError the served work raises itself is marked served."""

    def limit(callback_context: Any) -> None:
        raise LlmCallLimitError("the invocation used up its model calls")

    def busy(callback_context: Any) -> None:
        raise ServerBusyError("a dependency of mine is busy")

    for callback, reason in ((limit, "LLM_CALL_LIMIT"), (busy, "SERVER_BUSY")):
        agent = LlmAgent(name="helper", model=ScriptedModel(["x"]), before_agent_callback=callback)
        server = AgentServer(agent, app_name="app")
        port = await server.start("127.0.0.1:0")
        try:
            async with open_channel(f"127.0.0.1:{port}", tls=None) as channel:
                stub = agent_pb2_grpc.AgentServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await read_all(stub.Run(root_run(), timeout=30))
        finally:
            await server.stop(None)
        error = refused.value
        assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert details_of(error)[0].reason == reason
        assert trailer(error, "grpc-retry-pushback-ms") is None
        assert _status.busy_refusal_delay(error) is None


async def test_a_busy_tool_server_refuses_a_bidirectional_call_with_the_hint() -> None:
    release, started = asyncio.Event(), asyncio.Event()

    async def slow(q: str) -> dict[str, str]:
        """Waits."""
        started.set()
        await release.wait()
        return {"q": q}

    server = ToolServer([FunctionTool(slow)])
    port = await server.start("127.0.0.1:0", max_concurrent_calls=1)
    holder = RemoteToolset(f"127.0.0.1:{port}")
    runner = Runner(
        agent=LlmAgent(
            name="a", model=ScriptedModel([call("slow", {"q": "x"}), "ok"]), tools=[holder]
        ),
        app_name="app",
        session_service=InMemorySessionService(),
    )
    held = asyncio.ensure_future(turn(runner))
    try:
        await asyncio.wait_for(started.wait(), 10)
        async with open_channel(f"127.0.0.1:{port}", tls=None) as channel:
            bidirectional = channel.stream_stream(
                "/adk_mesh.v1.ToolService/CallToolInteractive",
                request_serializer=lambda b: b,
                response_deserializer=lambda b: b,
            )(timeout=30)
            await bidirectional.write(b"")
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                async for _ in bidirectional:
                    pass
    finally:
        release.set()
        await held
        await holder.close()
        await server.stop(None)
    info, delay = details_of(refused.value)
    assert (info.reason, delay) == ("SERVER_BUSY", 1.0)
    assert trailer(refused.value, "grpc-retry-pushback-ms") == "1000"


async def test_a_busy_peer_still_reads_overloaded_for_our_caller_with_its_hint(
    pauses: list[float],
) -> None:
    """A calling service whose peer stays busy: sent again once, refused again, and its own
    caller reads what it read before (UNAVAILABLE, "overloaded"), with the peer's hint."""
    async with HeldAgentServer() as busy:
        helper = RemoteAgent("helper", busy.target)
        coordinator = LlmAgent(
            name="coordinator",
            model=ScriptedModel([call("transfer_to_agent", {"agent_name": "helper"})]),
            sub_agents=[helper],
        )
        server = AgentServer(coordinator, app_name="app")
        port = await server.start("127.0.0.1:0")
        try:
            async with open_channel(f"127.0.0.1:{port}", tls=None) as channel:
                stub = agent_pb2_grpc.AgentServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await read_all(stub.Run(root_run(), timeout=30))
        finally:
            await helper.close()
            await server.stop(None)
        assert busy.model.running == 1  # only the held run ever ran there
    error = refused.value
    assert error.code() is grpc.StatusCode.UNAVAILABLE
    assert error.details() == "remote agent 'helper': overloaded (too many calls at once)"
    info, delay = details_of(error)
    assert (info.reason, delay) == ("IO_ERROR", 1.0)
    # Not busy itself: its caller must not send it again (the coordinator's run ran).
    assert trailer(error, "grpc-retry-pushback-ms") is None
    assert pauses == [1.0]


async def test_a_model_rate_limit_passes_on_the_providers_delay() -> None:
    async with FakeOpenAI(ErrorReply(429, "slow down", retry_after="7")) as provider:
        model = provider.make_model(retry=RetryPolicy(max_attempts=1))
        server = AgentServer(LlmAgent(name="helper", model=model), app_name="app")
        port = await server.start("127.0.0.1:0")
        try:
            async with open_channel(f"127.0.0.1:{port}", tls=None) as channel:
                stub = agent_pb2_grpc.AgentServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await read_all(stub.Run(root_run(), timeout=30))
        finally:
            await server.stop(None)
            await model.aclose()
    error = refused.value
    assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    info, delay = details_of(error)
    assert (info.reason, delay) == ("MODEL_RATE_LIMITED", 7.0)
    assert trailer(error, "grpc-retry-pushback-ms") is None  # the run had begun
    mapped = error_from_rpc_error(error)
    assert isinstance(mapped, ModelRateLimitError)
    assert mapped.retry_delay == 7.0


async def test_an_artifacts_busy_refusal_carries_its_delay_without_pushback() -> None:
    """The artifact budget's refusal says "a few seconds" in RetryInfo; it may come inside a
    delegated run that had effects, so no transport-level pushback."""

    async def refuse(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        await _status.abort_with_error(context, ArtifactsBusyError("no room now"))

    handler = grpc.method_handlers_generic_handler(
        "test.Artifacts", {"Save": grpc.unary_unary_rpc_method_handler(refuse)}
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await channel.unary_unary("/test.Artifacts/Save")(b"", timeout=10)
    finally:
        await server.stop(None)
    info, delay = details_of(refused.value)
    assert (info.reason, delay) == ("ARTIFACTS_BUSY", 3.0)
    assert trailer(refused.value, "grpc-retry-pushback-ms") is None
    mapped = error_from_rpc_error(refused.value)
    assert (type(mapped), mapped.retry_delay) == (ArtifactsBusyError, 3.0)
    assert _status.busy_refusal_delay(refused.value) is None


def test_the_mesh_chooses_its_delays_in_one_table() -> None:
    assert ServerBusyError("x").retry_delay == RETRY_DELAYS[ServerBusyError]
    assert ArtifactsBusyError("x").retry_delay == RETRY_DELAYS[ArtifactsBusyError]
    assert 0 < RETRY_DELAYS[ServerBusyError] < RETRY_DELAYS[ArtifactsBusyError] <= 10
    assert ModelRateLimitError("x").retry_delay is None  # only the provider knows
    assert AdkError("x").retry_delay is None


# --- item 3: a call refused before it ran is sent again once --------------------------------


@pytest.fixture
def freeing(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Stands in for the wait before a call is sent again: records the delay, then runs the
    callback the test put at ``[0]`` (which frees the server's slot) instead of the time."""
    state: list[Any] = [None]

    async def pause(seconds: float) -> None:
        state.append(seconds)
        await state[0]()

    monkeypatch.setattr(_status, "_pause", pause)
    return state


@pytest.mark.parametrize("stores", [False, True], ids=["Run", "RunDelegated"])
async def test_remote_agent_sends_a_busy_refused_run_again_once(
    freeing: list[Any], stores: bool
) -> None:
    async with HeldAgentServer() as busy:
        freeing[0] = busy.free
        helper = RemoteAgent("helper", busy.target)
        runner = Runner(
            agent=helper,
            app_name="app",
            session_service=InMemorySessionService(),
            artifact_service=InMemoryArtifactService() if stores else None,
        )
        try:
            events = await turn(runner)
        finally:
            await helper.close()
        # The held run and the second one, each once: the refusal ran nothing.
        assert busy.model.running == 2
    assert freeing[1:] == [1.0]
    assert [e.content.parts[0].text for e in events if e.content] == ["done"]


async def test_remote_agent_sends_again_only_once() -> None:
    """Refused twice: the second refusal is the failure, as before (nothing ran)."""
    async with HeldAgentServer() as busy:
        helper = RemoteAgent("helper", busy.target)
        runner = Runner(agent=helper, app_name="app", session_service=InMemorySessionService())
        try:
            with pytest.raises(AdkIOError) as failed:
                await turn(runner)
        finally:
            await helper.close()
        assert busy.model.running == 1
    assert failed.value.message == "remote agent 'helper': overloaded (too many calls at once)"
    assert failed.value.retry_delay == 1.0


async def test_a_delay_that_does_not_fit_the_deadline_is_not_waited(pauses: list[float]) -> None:
    async with HeldAgentServer() as busy:
        helper = RemoteAgent("helper", busy.target)
        coordinator = LlmAgent(
            name="coordinator",
            model=ScriptedModel([call("transfer_to_agent", {"agent_name": "helper"})]),
            sub_agents=[helper],
        )
        server = AgentServer(coordinator, app_name="app")
        port = await server.start("127.0.0.1:0")
        try:
            async with open_channel(f"127.0.0.1:{port}", tls=None) as channel:
                stub = agent_pb2_grpc.AgentServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    # Less time than the hinted second: the refusal is the answer, at once.
                    await read_all(stub.Run(root_run(), timeout=0.9))
        finally:
            await helper.close()
            await server.stop(None)
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    assert pauses == []


def fails_after_it_started(cls: type[AdkError]) -> Any:
    def fail(callback_context: Any) -> None:
        error = cls(f"{cls.__name__} after the run started")
        error.retry_delay = 0.01
        raise error

    return fail


@pytest.mark.parametrize("cls", [ServerBusyError, ModelRateLimitError, LlmCallLimitError])
async def test_a_run_that_failed_after_it_started_is_never_sent_again(
    pauses: list[float], cls: type[AdkError]
) -> None:
    ran: list[str] = []

    def record(callback_context: Any) -> None:
        ran.append(callback_context.invocation_id)

    agent = LlmAgent(
        name="helper",
        model=ScriptedModel(["x"]),
        before_agent_callback=[record, fails_after_it_started(cls)],
    )
    server = AgentServer(agent, app_name="app")
    port = await server.start("127.0.0.1:0", max_concurrent_calls=1)
    helper = RemoteAgent("helper", f"127.0.0.1:{port}")
    runner = Runner(agent=helper, app_name="app", session_service=InMemorySessionService())
    try:
        with pytest.raises(AdkError) as failed:
            await turn(runner)
    finally:
        await helper.close()
        await server.stop(None)
    assert type(failed.value) is cls
    assert len(ran) == 1
    assert pauses == []


class Counting(Toolset):
    """Serves one tool; every listing after the first (the CallTool's) fails with ``error``
    when one is set: a call that fails after it started."""

    def __init__(self, tool: BaseTool, error: AdkError | None = None) -> None:
        super().__init__("counting")
        self.tool = tool
        self.error = error
        self.listings = 0

    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        self.listings += 1
        if self.error is not None and self.listings > 1:
            raise self.error
        return [self.tool]


async def test_remote_toolset_sends_a_busy_refused_call_again_once(freeing: list[Any]) -> None:
    release, started = asyncio.Event(), asyncio.Event()
    runs: list[str] = []

    async def slow(q: str) -> dict[str, str]:
        """Waits for the test the first time."""
        runs.append(q)
        started.set()
        await release.wait()
        return {"q": q}

    server = ToolServer([FunctionTool(slow)])
    port = await server.start("127.0.0.1:0", max_concurrent_calls=1)
    target = f"127.0.0.1:{port}"
    holder_tools, caller_tools = RemoteToolset(target), RemoteToolset(target)
    holder = Runner(
        agent=LlmAgent(
            name="a",
            model=ScriptedModel([call("slow", {"q": "held"}), "ok"]),
            tools=[holder_tools],
        ),
        app_name="app",
        session_service=InMemorySessionService(),
    )
    held: list[asyncio.Future[list[Any]]] = []

    async def hold_then_call(request: LlmRequest) -> LlmResponse | str:
        # The caller listed its tools already; now another caller takes the one slot.
        if held:
            return "finished"
        held.append(asyncio.ensure_future(turn(holder)))
        await asyncio.wait_for(started.wait(), 10)
        return call("slow", {"q": "second"})

    async def free() -> None:
        release.set()
        await held[0]
        assert await server._gate.wait_idle(10)

    freeing[0] = free
    runner = Runner(
        agent=LlmAgent(name="b", model=FunctionModel(hold_then_call), tools=[caller_tools]),
        app_name="app",
        session_service=InMemorySessionService(),
    )
    try:
        events = await turn(runner)
    finally:
        release.set()
        await asyncio.gather(*held, return_exceptions=True)
        await holder_tools.close()
        await caller_tools.close()
        await server.stop(None)
    assert runs == ["held", "second"]  # each call ran once
    assert freeing[1:] == [1.0]
    results = [r.response for e in events for r in e.function_responses()]
    assert results == [{"q": "second"}]


@pytest.mark.parametrize("cls", [ServerBusyError, ArtifactsBusyError])
async def test_a_tool_call_that_failed_after_it_started_is_never_sent_again(
    pauses: list[float], cls: type[AdkError]
) -> None:
    def look(q: str) -> dict[str, str]:
        """Looks."""
        return {"q": q}

    toolset = Counting(FunctionTool(look), cls(f"{cls.__name__} after the call started"))
    server = ToolServer(toolset)
    port = await server.start("127.0.0.1:0", max_concurrent_calls=1)
    remote = RemoteToolset(f"127.0.0.1:{port}")
    runner = Runner(
        agent=LlmAgent(
            name="a", model=ScriptedModel([call("look", {"q": "x"}), "ok"]), tools=[remote]
        ),
        app_name="app",
        session_service=InMemorySessionService(),
    )
    try:
        events = await turn(runner)
    finally:
        await remote.close()
        await server.stop(None)
    assert toolset.listings == 2  # the listing, and the one call that failed
    assert pauses == []
    errors = [r.response for e in events for r in e.function_responses()]
    assert len(errors) == 1 and cls.__name__ in str(errors[0])
