"""How errors cross services (real AgentServer / ToolServer on 127.0.0.1, port 0): an error the
served work raised comes back to the caller as the class, message and metadata it has in
process; a refusal of the *calling service* (its certificate, its allow-list) reads as the
mesh's fault and names no peer."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from adk_mesh import Content, LlmAgent, Runner
from adk_mesh.agents.base import BaseAgent
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import ReadonlyContext
from adk_mesh.errors import (
    GRPC_STATUS,
    AdkError,
    AlreadyExistsError,
    ModelRateLimitError,
    PermissionDeniedError,
    ToolError,
    UnauthenticatedError,
    status_name_for,
)
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset, ToolServer
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES, open_channel
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.mesh.pki import DevCertificateAuthority
from adk_mesh.mesh.security import ClientTLS, ServerSecurity, ServerTLS
from adk_mesh.plugins import Plugin
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.tools.base import BaseTool, Toolset
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

POLICY_MESSAGE = "user 'u' may not consult the specialist (policy: no-specialists)"


# --- helpers ------------------------------------------------------------------------------


class RefuseSpecialist(Plugin):
    """A policy plugin: refuses the specialist's work with ``error`` at one hook."""

    def __init__(self, hook: str, error: AdkError) -> None:
        super().__init__("policy")
        self.hook = hook
        self.error = error

    async def before_agent(self, *, agent: Any, callback_context: Any) -> None:
        if self.hook == "before_agent" and agent.name == "specialist":
            raise self.error

    async def before_tool(self, *, tool: Any, tool_context: Any, **kw: Any) -> None:
        if self.hook == "before_tool" and tool_context.agent_name == "specialist":
            raise self.error


def look(q: str) -> dict[str, str]:
    """Look something up."""
    return {"found": q}


def specialist(before_agent_callback: Callable[..., Any] | None = None) -> LlmAgent:
    return LlmAgent(
        name="specialist",
        model=ScriptedModel([call("look", {"q": "x"}), "found x"]),
        tools=[look],
        before_agent_callback=before_agent_callback,
    )


def desk(child: BaseAgent) -> LlmAgent:
    return LlmAgent(
        name="desk",
        model=ScriptedModel([call("transfer_to_agent", {"agent_name": "specialist"})]),
        sub_agents=[child],
    )


async def turn(runner: Runner, text: str = "find x") -> list[Any]:
    session = await runner.session_service.create_session(app_name="app", user_id="u")
    return [
        event
        async for event in runner.run(
            user_id="u", session_id=session.id, new_message=Content.from_text("user", text)
        )
    ]


@asynccontextmanager
async def serving(agent: BaseAgent, **fields: Any) -> AsyncIterator[str]:
    server = AgentServer(agent, app_name="app", **fields)
    port = await server.start("127.0.0.1:0")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


def root_run(text: str = "find x") -> agent_pb2.RunRequest:
    message = content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)])
    return agent_pb2.RunRequest(root=agent_pb2.RootRun(user_id="u", new_message=message))


async def refused(target: str, request: agent_pb2.RunRequest) -> grpc.aio.AioRpcError:
    async with open_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in stub.Run(request, timeout=30):
                pass
    return caught.value


# --- the served run refuses: the caller gets the refusal as it is in process ----------------

REFUSALS = [
    pytest.param("plugin before_agent", PermissionDeniedError, id="plugin-before-agent"),
    pytest.param("plugin before_tool", PermissionDeniedError, id="plugin-before-tool"),
    pytest.param("callback", PermissionDeniedError, id="before-agent-callback"),
    pytest.param("plugin before_agent", UnauthenticatedError, id="unauthenticated"),
]


def refusing(where: str, cls: type[AdkError]) -> tuple[LlmAgent, list[Plugin]]:
    """The specialist and the plugins that make it refuse its work ``where``."""
    error = cls(POLICY_MESSAGE)
    if where == "callback":

        def refuse(callback_context: Any) -> None:
            raise error

        return specialist(refuse), []
    hook = where.removeprefix("plugin ")
    return specialist(), [RefuseSpecialist(hook, error)]


@pytest.mark.parametrize("call_kind", ["Run", "RunDelegated"])
@pytest.mark.parametrize(("where", "cls"), REFUSALS)
async def test_a_served_agents_refusal_reaches_the_caller_as_in_process(
    where: str, cls: type[AdkError], call_kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    # In process: the refusal ends the run as the error raised, with its message.
    child, plugins = refusing(where, cls)
    runner = Runner(
        agent=desk(child), app_name="app", session_service=InMemorySessionService(), plugins=plugins
    )
    with pytest.raises(AdkError) as local:
        await turn(runner)

    # Remote: the same plugins on the server that runs the specialist.
    child, plugins = refusing(where, cls)
    async with serving(child, plugins=plugins) as target:
        remote = RemoteAgent("specialist", target)
        runner = Runner(
            agent=desk(remote),
            app_name="app",
            session_service=InMemorySessionService(),
            # With a store of the caller's to reach, the run goes as a RunDelegated call.
            artifact_service=InMemoryArtifactService() if call_kind == "RunDelegated" else None,
        )
        try:
            with pytest.raises(AdkError) as across:
                await turn(runner)
        finally:
            await remote.close()

    assert f"{call_kind} refused (" in caplog.text  # the served side's log: this call kind
    assert type(local.value) is cls
    assert local.value.message == POLICY_MESSAGE
    assert type(across.value) is type(local.value)
    assert across.value.message == local.value.message
    # Not logged as this service being refused by its peer (a mesh misconfiguration).
    assert not [r for r in caplog.records if "refused this service" in r.getMessage()]


@pytest.mark.parametrize(("where", "cls"), REFUSALS)
async def test_a_refusal_two_services_down_reaches_the_end_user_as_it_is(
    where: str, cls: type[AdkError]
) -> None:
    """end user -> desk's service -> specialist's service, whose policy refuses: the end user's
    status is the refusal's, with its message and ErrorInfo."""
    child, plugins = refusing(where, cls)
    async with serving(child, plugins=plugins) as specialist_target:
        remote = RemoteAgent("specialist", specialist_target)
        try:
            async with serving(desk(remote)) as desk_target:
                error = await refused(desk_target, root_run())
        finally:
            await remote.close()
    expected = grpc.StatusCode.PERMISSION_DENIED
    if cls is UnauthenticatedError:
        expected = grpc.StatusCode.UNAUTHENTICATED
    assert error.code() == expected
    assert error.details() == POLICY_MESSAGE
    mapped = error_from_rpc_error(error)
    assert type(mapped) is cls
    assert mapped.message == POLICY_MESSAGE


async def test_a_remote_agent_tools_refusal_reads_to_the_model_as_in_process() -> None:
    """AgentTool(specialist): the child's refusal is a tool error the parent's model reads,
    the same text in process and across services."""

    def parent(child: BaseAgent) -> LlmAgent:
        return LlmAgent(
            name="desk",
            model=ScriptedModel([call("specialist", {"request": "find x"}), "sorry"]),
            tools=[AgentTool(child)],
        )

    def tool_error(events: list[Any]) -> Any:
        return next(
            r.response for e in events for r in e.function_responses() if r.name == "specialist"
        )

    child, plugins = refusing("plugin before_agent", PermissionDeniedError)
    runner = Runner(
        agent=parent(child),
        app_name="app",
        session_service=InMemorySessionService(),
        plugins=plugins,
    )
    local = tool_error(await turn(runner))

    child, plugins = refusing("plugin before_agent", PermissionDeniedError)
    async with serving(child, plugins=plugins) as target:
        remote = RemoteAgent("specialist", target)
        runner = Runner(
            agent=parent(remote), app_name="app", session_service=InMemorySessionService()
        )
        try:
            across = tool_error(await turn(runner))
        finally:
            await remote.close()

    assert POLICY_MESSAGE in str(local)
    assert across == local


# --- the other service refuses *this* one: the mesh's fault, no peer named -----------------


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> DevCertificateAuthority:
    return DevCertificateAuthority(tmp_path_factory.mktemp("pki") / "mesh")


async def test_a_peer_outside_the_allow_list_is_still_refused_as_this_service(
    ca: DevCertificateAuthority, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The door keeper's refusal carries adk-mesh's ErrorInfo too: it still reads, one hop up,
    as this service being refused (INTERNAL for the end user), not as the user denied, and
    the identities it names stay in the log."""
    server_cert = ca.issue("specialist")
    allowed = ca.issue("someone-else")
    stranger = ca.issue("desk.mesh.internal")
    security = ServerSecurity(
        tls=ServerTLS(server_cert.cert_file, server_cert.key_file, ca.ca_file),
        allow_peers=frozenset({allowed.identity}),
    )
    server = AgentServer(specialist(), app_name="app")
    await server.start("127.0.0.1:0", security=security, mesh_address="127.0.0.1:0")
    remote = RemoteAgent(
        "specialist",
        f"127.0.0.1:{server.mesh_port}",
        tls=ClientTLS(ca_file=ca.ca_file, cert_file=stranger.cert_file, key_file=stranger.key_file),
    )
    try:
        async with serving(desk(remote)) as desk_target:
            error = await refused(desk_target, root_run())
    finally:
        await remote.close()
        await server.stop(None)
    assert error.code() == grpc.StatusCode.INTERNAL
    assert error.details() == "remote agent 'specialist': refused this service"
    assert "mesh.internal" not in (error.details() or "")
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "desk.mesh.internal" in logged


# --- what gRPC itself refuses: said as what it is ---------------------------------------------


def huge() -> dict[str, str]:
    """Returns more than one gRPC message of the mesh may carry."""
    return {"blob": "x" * (MAX_MESSAGE_BYTES + 1024)}


async def test_a_remote_tool_result_over_the_message_limit_is_not_called_overload(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """gRPC refuses a message over the size limit with RESOURCE_EXHAUSTED, as it refuses a
    call over a server's concurrency limit: the model must not read "overloaded", nor the
    caller be told to retry what fails the same way every time."""
    server = ToolServer([FunctionTool(huge)])
    port = await server.start("127.0.0.1:0")
    toolset = RemoteToolset(f"127.0.0.1:{port}")
    agent = LlmAgent(name="agent", model=ScriptedModel([call("huge", {}), "ok"]), tools=[toolset])
    runner = Runner(agent=agent, app_name="app", session_service=InMemorySessionService())
    try:
        events = await turn(runner)
    finally:
        await toolset.close()
        await server.stop(None)
    error = next(r.response for e in events for r in e.function_responses())["error"]
    assert "overloaded" not in error
    assert not error.startswith("AdkIOError")  # not retryable: the same result fails again
    assert "too large" in error
    assert "127.0.0.1" not in error


# --- every error class, one and two services away ---------------------------------------------

CLASSES = sorted(GRPC_STATUS, key=lambda cls: cls.__name__)


def raising(cls: type[AdkError]) -> LlmAgent:
    """The specialist, whose before-agent callback fails with ``cls``."""

    def fail(callback_context: Any) -> None:
        raise cls(f"{cls.__name__} from the specialist", metadata={"detail": "kept"})

    return specialist(fail)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
async def test_every_error_class_crosses_one_and_two_services_as_in_process(
    cls: type[AdkError],
) -> None:
    runner = Runner(
        agent=desk(raising(cls)), app_name="app", session_service=InMemorySessionService()
    )
    with pytest.raises(AdkError) as local:
        await turn(runner)

    async with serving(raising(cls)) as target:
        remote = RemoteAgent("specialist", target)
        runner = Runner(
            agent=desk(remote), app_name="app", session_service=InMemorySessionService()
        )
        served_remote = RemoteAgent("specialist", target)
        try:
            with pytest.raises(AdkError) as one_hop:
                await turn(runner)
            async with serving(desk(served_remote)) as desk_target:
                status = await refused(desk_target, root_run())
        finally:
            await remote.close()
            await served_remote.close()
    two_hops = error_from_rpc_error(status)

    expected = (type(local.value), local.value.message, local.value.metadata)
    assert expected[0] is cls
    assert (type(one_hop.value), one_hop.value.message, one_hop.value.metadata) == expected
    assert (type(two_hops), two_hops.message, two_hops.metadata) == expected
    assert status.code().name == status_name_for(local.value)


# --- statuses a peer that is not adk-mesh sends ----------------------------------------------


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        ("UNAUTHENTICATED", UnauthenticatedError),
        ("PERMISSION_DENIED", PermissionDeniedError),
        ("ALREADY_EXISTS", AlreadyExistsError),
    ],
)
async def test_a_status_without_our_error_info_maps_to_the_class_of_its_code(
    code: str, cls: type[AdkError]
) -> None:
    """A proxy in front of a service (an auth filter, an RBAC policy) answers without adk-mesh's
    ErrorInfo: a client still gets the class adk-mesh has for that code (a client that
    refreshes its token on UnauthenticatedError must see one), not a generic run failure."""

    async def answer(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        await context.abort(grpc.StatusCode[code], "Jwt is expired")
        raise AssertionError("unreachable")  # pragma: no cover

    handler = grpc.method_handlers_generic_handler(
        "proxy.Service", {"Call": grpc.unary_unary_rpc_method_handler(answer)}
    )
    proxy = grpc.aio.server()
    proxy.add_generic_rpc_handlers((handler,))
    port = proxy.add_insecure_port("127.0.0.1:0")
    await proxy.start()
    try:
        async with open_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await channel.unary_unary("/proxy.Service/Call")(b"", timeout=10)
    finally:
        await proxy.stop(None)
    mapped = error_from_rpc_error(caught.value)
    assert type(mapped) is cls
    assert mapped.message == "Jwt is expired"


# --- a tool service's refusal ------------------------------------------------------------------


class Entitled(Toolset):
    """A permission-based toolset: this user is not entitled to its tools."""

    def __init__(self) -> None:
        super().__init__("entitled")

    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        raise PermissionDeniedError(f"user {ctx.user_id!r} is not entitled to these tools")


async def test_a_toolsets_refusal_reaches_the_caller_as_in_process() -> None:
    def agent(tools: Toolset) -> LlmAgent:
        return LlmAgent(name="agent", model=ScriptedModel(["unused"]), tools=[tools])

    runner = Runner(
        agent=agent(Entitled()), app_name="app", session_service=InMemorySessionService()
    )
    with pytest.raises(AdkError) as local:
        await turn(runner)

    server = ToolServer(Entitled())
    port = await server.start("127.0.0.1:0")
    toolset = RemoteToolset(f"127.0.0.1:{port}")
    runner = Runner(agent=agent(toolset), app_name="app", session_service=InMemorySessionService())
    try:
        with pytest.raises(AdkError) as across:
            await turn(runner)
    finally:
        await toolset.close()
        await server.stop(None)
    assert type(local.value) is PermissionDeniedError
    assert (type(across.value), across.value.message) == (type(local.value), local.value.message)


async def test_a_model_error_whose_status_code_is_not_a_number_still_maps() -> None:
    """A peer (another implementation, a proxy rewriting details) may send MODEL_* with a
    ``status_code`` that is no number: the client gets the ModelError, not a ValueError."""

    async def answer(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        info = error_details_pb2.ErrorInfo(
            reason="MODEL_RATE_LIMITED", domain="adk-mesh", metadata={"status_code": "n/a"}
        )
        detail = any_pb2.Any()
        detail.Pack(info)
        status = status_pb2.Status(code=8, message="openai returned HTTP 429", details=[detail])
        await context.abort(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "openai returned HTTP 429",
            trailing_metadata=(("grpc-status-details-bin", status.SerializeToString()),),
        )
        raise AssertionError("unreachable")  # pragma: no cover

    handler = grpc.method_handlers_generic_handler(
        "peer.Service", {"Call": grpc.unary_unary_rpc_method_handler(answer)}
    )
    peer = grpc.aio.server()
    peer.add_generic_rpc_handlers((handler,))
    port = peer.add_insecure_port("127.0.0.1:0")
    await peer.start()
    try:
        async with open_channel(f"127.0.0.1:{port}") as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await channel.unary_unary("/peer.Service/Call")(b"", timeout=10)
    finally:
        await peer.stop(None)
    mapped = error_from_rpc_error(caught.value)
    assert type(mapped) is ModelRateLimitError
    assert mapped.message == "openai returned HTTP 429"
    assert mapped.status_code is None
    assert mapped.metadata == {"status_code": "n/a"}


def fatal() -> dict[str, str]:
    """Fails in a way that must end the whole turn."""
    error = ToolError("the ledger is corrupt; stop everything")
    error.propagate = True
    raise error


@pytest.mark.parametrize("where", ["in process", "remote"])
async def test_a_tool_error_that_ends_the_invocation_ends_it_remote_as_in_process(
    where: str,
) -> None:
    # An error a tool raises with propagate (an AgentTool with propagate_errors does) ends
    # the caller's turn; served by a ToolServer it was read by the model, and the turn went on.
    server: ToolServer | None = None
    toolset: RemoteToolset | None = None
    if where == "remote":
        server = ToolServer([FunctionTool(fatal)])
        toolset = RemoteToolset(f"127.0.0.1:{await server.start('127.0.0.1:0')}")
    model = ScriptedModel([call("fatal", {}), "carried on"])
    agent = LlmAgent(name="agent", model=model, tools=[toolset or fatal])
    runner = Runner(agent=agent, app_name="app", session_service=InMemorySessionService())
    try:
        with pytest.raises(ToolError, match="the ledger is corrupt"):
            await turn(runner)
    finally:
        if toolset is not None and server is not None:
            await toolset.close()
            await server.stop(None)
    assert len(model.requests) == 1  # the model never read the error
