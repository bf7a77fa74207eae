"""TLS, mutual TLS and the two doors on real servers: who gets in, by which door."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import InvocationContext
from adk_mesh.errors import ConfigError, PermissionDeniedError
from adk_mesh.mesh import AgentServer, RemoteAgent, RemoteToolset, ToolServer
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._status import error_from_rpc_error
from adk_mesh.mesh.auth import ApiKeyAuthenticator, new_api_key
from adk_mesh.mesh.pki import DevCertificateAuthority, IssuedCertificate
from adk_mesh.mesh.security import ClientTLS, ServerSecurity, ServerTLS
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.sessions.sqlite import SqliteSessionService
from adk_mesh.testing import FunctionModel, ScriptedModel, call
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2, tool_pb2, tool_pb2_grpc


def shout(text: str) -> dict[str, str]:
    """Shouts."""
    return {"loud": text.upper()}


@dataclass
class Pki:
    ca: DevCertificateAuthority
    server: IssuedCertificate
    peer: IssuedCertificate  # a service of the mesh, in the allow-list
    stranger: IssuedCertificate  # signed by the same CA, not in the allow-list
    outsider: IssuedCertificate  # signed by another CA

    def server_security(self, **fields: object) -> ServerSecurity:
        tls = ServerTLS(self.server.cert_file, self.server.key_file, self.ca.ca_file)
        return ServerSecurity(tls=tls, allow_peers=frozenset({self.peer.identity}), **fields)  # type: ignore[arg-type]

    def client(self, who: IssuedCertificate | None = None) -> ClientTLS:
        if who is None:
            return ClientTLS(ca_file=self.ca.ca_file)
        return ClientTLS(ca_file=self.ca.ca_file, cert_file=who.cert_file, key_file=who.key_file)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = DevCertificateAuthority(directory / "mesh")
    other = DevCertificateAuthority(directory / "other")
    return Pki(
        ca=ca,
        server=ca.issue("researcher"),
        peer=ca.issue("coordinator"),
        stranger=ca.issue("stranger"),
        outsider=other.issue("coordinator"),
    )


@dataclass
class Served:
    front: str
    mesh: str
    server: AgentServer


@pytest.fixture
async def served(pki: Pki, tmp_path: Path) -> AsyncIterator[Served]:
    agent = LlmAgent(name="researcher", model=ScriptedModel(["found it"] * 10))
    server = AgentServer(agent, session_service=SqliteSessionService(tmp_path / "s.db"))
    port = await server.start(
        "127.0.0.1:0", security=pki.server_security(), mesh_address="127.0.0.1:0"
    )
    try:
        yield Served(f"127.0.0.1:{port}", f"127.0.0.1:{server.mesh_port}", server)
    finally:
        await server.stop(None)


def root_run(user: str = "ada") -> agent_pb2.RunRequest:
    message = content_pb2.Content(role="user", parts=[content_pb2.Part(text="hi")])
    return agent_pb2.RunRequest(root=agent_pb2.RootRun(user_id=user, new_message=message))


def delegated_run() -> agent_pb2.RunRequest:
    message = content_pb2.Content(role="user", parts=[content_pb2.Part(text="hi")])
    return agent_pb2.RunRequest(
        delegated=agent_pb2.DelegatedRun(
            invocation_id="e-1",
            session=agent_pb2.SessionView(app_name="researcher", user_id="ada", session_id="s"),
            user_content=message,
        )
    )


async def run(target: str, request: agent_pb2.RunRequest, tls: ClientTLS | None) -> list[str]:
    async with open_channel(target, tls=tls) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        return [r.event.author async for r in stub.Run(request, timeout=10)]


async def refused(
    target: str, request: agent_pb2.RunRequest, tls: ClientTLS | None
) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await run(target, request, tls)
    return raised.value


async def test_a_plaintext_client_cannot_talk_to_a_tls_server(served: Served) -> None:
    error = await refused(served.front, root_run(), None)
    assert error.code() is grpc.StatusCode.UNAVAILABLE


async def test_the_front_door_serves_end_users_without_certificates(
    served: Served, pki: Pki
) -> None:
    assert await run(served.front, root_run(), pki.client()) == ["researcher"]


async def test_the_mesh_door_refuses_a_caller_without_a_peer_certificate(
    served: Served, pki: Pki
) -> None:
    # At the front port: no certificate was asked for, so no peer.
    error = await refused(served.front, delegated_run(), pki.client())
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED
    assert isinstance(error_from_rpc_error(error), PermissionDeniedError)
    # At the mesh port: no handshake without one.
    error = await refused(served.mesh, delegated_run(), pki.client())
    assert error.code() is grpc.StatusCode.UNAVAILABLE


async def test_the_mesh_door_refuses_a_peer_outside_the_allow_list(
    served: Served, pki: Pki
) -> None:
    error = await refused(served.mesh, delegated_run(), pki.client(pki.stranger))
    assert error.code() is grpc.StatusCode.PERMISSION_DENIED
    assert "spiffe://adk-mesh.local/stranger" in (error.details() or "")
    assert "not in this service's allow-list" in (error.details() or "")


async def test_a_certificate_of_another_ca_gets_no_handshake(served: Served, pki: Pki) -> None:
    error = await refused(served.mesh, delegated_run(), pki.client(pki.outsider))
    assert error.code() is grpc.StatusCode.UNAVAILABLE


async def test_an_allowed_peer_runs_a_delegated_run(served: Served, pki: Pki) -> None:
    assert await run(served.mesh, delegated_run(), pki.client(pki.peer)) == ["researcher"]


async def test_a_remote_agent_delegates_over_mutual_tls_from_the_environment(
    served: Served, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, path in (
        ("ADK_MESH_TLS_CA", pki.ca.ca_file),
        ("ADK_MESH_TLS_CERT", pki.peer.cert_file),
        ("ADK_MESH_TLS_KEY", pki.peer.key_file),
    ):
        monkeypatch.setenv(name, str(path))
    remote = RemoteAgent("researcher", served.mesh)
    caller = LlmAgent(name="caller", model=ScriptedModel([]), sub_agents=[remote])
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name="caller", user_id="ada")
    ctx = InvocationContext(
        invocation_id="e-2",
        agent=caller,
        session=session,
        session_service=sessions,
        user_content=Content.from_text("user", "hi"),
    )
    try:
        authors = [event.author async for event in remote.run(ctx)]
    finally:
        await remote.close()
    assert authors == ["researcher"]


async def test_remote_tools_and_agents_take_their_tls_as_an_argument(
    served: Served, pki: Pki
) -> None:
    tool_server = ToolServer([FunctionTool(shout)])
    await tool_server.start(
        "127.0.0.1:0", security=pki.server_security(), mesh_address="127.0.0.1:0"
    )
    toolset = RemoteToolset(f"127.0.0.1:{tool_server.mesh_port}", tls=pki.client(pki.peer))
    remote = RemoteAgent("researcher", served.mesh, tls=pki.client(pki.peer))
    caller = LlmAgent(
        name="caller",
        model=ScriptedModel([call("shout", {"text": "hi"}), "done"]),
        tools=[toolset],
        sub_agents=[remote],
    )
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name="caller", user_id="ada")
    ctx = InvocationContext(
        invocation_id="e-3",
        agent=caller,
        session=session,
        session_service=sessions,
        user_content=Content.from_text("user", "hi"),
    )
    try:
        tool_events = [event async for event in caller.run(ctx)]
        remote_events = [event async for event in remote.run(ctx)]
    finally:
        await toolset.close()
        await remote.close()
        await tool_server.stop(None)
    responses = [r.response for e in tool_events for r in e.function_responses()]
    assert responses == [{"loud": "HI"}]
    assert [event.author for event in remote_events] == ["researcher"]


async def test_tool_calls_go_through_the_mesh_door_only(pki: Pki) -> None:
    server = ToolServer([FunctionTool(shout)])
    port = await server.start(
        "127.0.0.1:0", security=pki.server_security(), mesh_address="127.0.0.1:0"
    )
    caller = tool_pb2.CallerContext(app_name="a", user_id="ada", invocation_id="e-1")
    try:
        for target, tls, expected in (
            (f"127.0.0.1:{port}", pki.client(), grpc.StatusCode.PERMISSION_DENIED),
            (
                f"127.0.0.1:{server.mesh_port}",
                pki.client(pki.stranger),
                grpc.StatusCode.PERMISSION_DENIED,
            ),
            (f"127.0.0.1:{server.mesh_port}", pki.client(pki.peer), grpc.StatusCode.OK),
        ):
            async with open_channel(target, tls=tls) as channel:
                stub = tool_pb2_grpc.ToolServiceStub(channel)
                try:
                    listed = await stub.ListTools(tool_pb2.ListToolsRequest(context=caller))
                    code = grpc.StatusCode.OK
                except grpc.aio.AioRpcError as error:
                    code = error.code()
                assert code is expected, target
        assert [tool.name for tool in listed.tools] == ["shout"]
    finally:
        await server.stop(None)


async def test_without_tls_the_mesh_door_is_open_on_loopback() -> None:
    server = ToolServer([FunctionTool(shout)])
    port = await server.start("127.0.0.1:0")
    try:
        async with open_channel(f"127.0.0.1:{port}", tls=None) as channel:
            listed = await tool_pb2_grpc.ToolServiceStub(channel).ListTools(
                tool_pb2.ListToolsRequest()
            )
        assert [tool.name for tool in listed.tools] == ["shout"]
    finally:
        await server.stop(None)


async def test_plaintext_beyond_loopback_is_refused_before_binding() -> None:
    server = ToolServer([FunctionTool(shout)])
    with pytest.raises(ConfigError, match=r"refusing to serve plaintext on 0\.0\.0\.0:0"):
        await server.start("0.0.0.0:0")


async def test_a_renewed_certificate_serves_new_connections_without_a_restart(
    pki: Pki, tmp_path: Path
) -> None:
    # The server starts with a certificate of the mesh CA; a client trusting only a new CA
    # cannot connect until the files are replaced by a certificate of that new CA.
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    shutil.copy(pki.server.cert_file, cert)
    shutil.copy(pki.server.key_file, key)
    renewed_ca = DevCertificateAuthority(tmp_path / "renewed")
    renewed = renewed_ca.issue("researcher")
    server = AgentServer(LlmAgent(name="researcher", model=ScriptedModel(["ok"] * 4)))
    port = await server.start(
        "127.0.0.1:0", security=ServerSecurity(tls=ServerTLS(cert, key, pki.ca.ca_file))
    )
    target = f"127.0.0.1:{port}"
    trusts_new = ClientTLS(ca_file=renewed_ca.ca_file)
    try:
        assert await run(target, root_run(), pki.client()) == ["researcher"]
        assert (await refused(target, root_run(), trusts_new)).code() is grpc.StatusCode.UNAVAILABLE
        shutil.copy(renewed.key_file, key)
        shutil.copy(renewed.cert_file, cert)
        assert await run(target, root_run(), trusts_new) == ["researcher"]
    finally:
        await server.stop(None)


def test_a_mesh_door_needs_mutual_tls(pki: Pki) -> None:
    tls = ServerTLS(pki.server.cert_file, pki.server.key_file)  # no client CA
    with pytest.raises(ConfigError, match="client CA"):
        tls.credentials(require_client_certificate=True)


# --- end users at the front door ------------------------------------------------------------


@dataclass
class Guarded:
    front: str
    store: SqliteSessionService
    key: str  # grace's API key
    mesh: str = ""


@pytest.fixture
async def guarded(pki: Pki, tmp_path: Path) -> AsyncIterator[Guarded]:
    key, line = new_api_key("grace")
    (tmp_path / "keys").write_text(line + "\n")
    store = SqliteSessionService(tmp_path / "guarded.db")
    agent = LlmAgent(name="researcher", model=ScriptedModel(["found it"] * 10))
    server = AgentServer(agent, session_service=store)
    security = pki.server_security(authenticators=(ApiKeyAuthenticator(tmp_path / "keys"),))
    port = await server.start("127.0.0.1:0", security=security, mesh_address="127.0.0.1:0")
    try:
        yield Guarded(f"127.0.0.1:{port}", store, key, f"127.0.0.1:{server.mesh_port}")
    finally:
        await server.stop(None)


async def sessions_of(store: SqliteSessionService, *users: str) -> int:
    counts = [len(await store.list_sessions(app_name="researcher", user_id=user)) for user in users]
    return sum(counts)


async def run_as(
    target: str, request: agent_pb2.RunRequest, tls: ClientTLS, key: str | None
) -> list[agent_pb2.RunResponse]:
    metadata = (("x-api-key", key),) if key else ()
    async with open_channel(target, tls=tls) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        return [r async for r in stub.Run(request, timeout=10, metadata=metadata)]


async def test_the_principal_is_the_user_and_is_what_is_persisted(
    guarded: Guarded, pki: Pki
) -> None:
    responses = await run_as(guarded.front, root_run(user=""), pki.client(), guarded.key)
    session = await guarded.store.get_session(
        app_name="researcher", user_id="grace", session_id=responses[0].session_id
    )
    assert session is not None and [e.author for e in session.events] == ["user", "researcher"]
    # Naming oneself is fine too.
    await run_as(guarded.front, root_run(user="grace"), pki.client(), guarded.key)
    assert await sessions_of(guarded.store, "grace") == 2


@pytest.mark.parametrize(
    ("user", "key", "code"),
    [
        ("ada", None, grpc.StatusCode.UNAUTHENTICATED),  # no credentials
        ("ada", "akm_not-a-key", grpc.StatusCode.UNAUTHENTICATED),
        ("ada", "grace's", grpc.StatusCode.PERMISSION_DENIED),  # acting as someone else
    ],
)
async def test_a_refused_end_user_writes_nothing(
    guarded: Guarded, pki: Pki, user: str, key: str | None, code: grpc.StatusCode
) -> None:
    credential = guarded.key if key == "grace's" else key
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await run_as(guarded.front, root_run(user=user), pki.client(), credential)
    assert raised.value.code() is code
    assert await sessions_of(guarded.store, "ada", "grace") == 0


async def test_describe_needs_credentials_too(guarded: Guarded, pki: Pki) -> None:
    async with open_channel(guarded.front, tls=pki.client()) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.Describe(agent_pb2.DescribeRequest())
        card = await stub.Describe(
            agent_pb2.DescribeRequest(), metadata=(("x-api-key", guarded.key),)
        )
    assert raised.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert card.card.name == "researcher"


async def test_a_mesh_peer_reads_the_card_without_end_user_credentials(
    guarded: Guarded, pki: Pki
) -> None:
    # A RemoteAgent reads the card to declare an AgentTool's parameters (its schemas): the
    # card is no user's data, and a peer of the allow-list is trusted with more than it.
    async with open_channel(guarded.mesh, tls=pki.client(pki.peer)) as channel:
        card = await agent_pb2_grpc.AgentServiceStub(channel).Describe(agent_pb2.DescribeRequest())
    assert card.card.name == "researcher"
    # A certificate of the same CA outside the allow-list is an end user like any other.
    async with open_channel(guarded.mesh, tls=pki.client(pki.stranger)) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await agent_pb2_grpc.AgentServiceStub(channel).Describe(agent_pb2.DescribeRequest())
    assert raised.value.code() is grpc.StatusCode.UNAUTHENTICATED


async def test_calls_past_the_concurrency_limit_are_resource_exhausted() -> None:
    started, release = asyncio.Event(), asyncio.Event()
    running = 0

    async def wait(request: LlmRequest) -> str:
        nonlocal running
        running += 1
        if running == 2:
            started.set()
        await release.wait()
        return "done"

    server = AgentServer(LlmAgent(name="waiter", model=FunctionModel(wait)))
    port = await server.start("127.0.0.1:0", max_concurrent_calls=2)
    try:
        async with open_channel(f"127.0.0.1:{port}", tls=None) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            held = [
                asyncio.ensure_future(_drain(stub.Run(root_run(user=f"u{number}"))))
                for number in range(2)
            ]
            await asyncio.wait_for(started.wait(), 10)
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await _drain(stub.Run(root_run(user="third")))
            release.set()
            assert [len(events) for events in await asyncio.gather(*held)] == [1, 1]
    finally:
        await server.stop(None)
    assert raised.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


async def _drain(call: Any) -> list[Any]:
    return [response async for response in call]


async def interactive_run(target: str, tls: ClientTLS | None) -> tuple[grpc.StatusCode, list[str]]:
    """A delegated run over RunDelegated; its status and the authors of its events."""
    async with open_channel(target, tls=tls) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        call = stub.RunDelegated(timeout=10)
        authors: list[str] = []
        try:
            await call.write(agent_pb2.RunDelegatedRequest(run=delegated_run()))
            async for message in call:
                response = message.response
                authors.extend(e.author for e in [response.event, *response.events] if e.author)
        except grpc.aio.AioRpcError as error:
            return error.code(), authors
        return grpc.StatusCode.OK, authors


async def test_a_refused_bidirectional_call_is_refused_once_its_first_message_came(
    served: Served, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A grpc.aio client whose first write is under way when the refusal's status arrives
    # reports INTERNAL in its place (grpc/grpc#36066): the door waits for that message.
    monkeypatch.setattr("adk_mesh.mesh._status.FIRST_MESSAGE_WAIT", 10.0)
    async with open_channel(served.front, tls=pki.client()) as channel:
        call = agent_pb2_grpc.AgentServiceStub(channel).RunDelegated(timeout=20)
        await asyncio.sleep(0.3)
        assert not call.done()
        await call.write(agent_pb2.RunDelegatedRequest(run=delegated_run()))
        assert await call.code() is grpc.StatusCode.PERMISSION_DENIED
    # A caller that never sends one is refused all the same, after the wait.
    monkeypatch.setattr("adk_mesh.mesh._status.FIRST_MESSAGE_WAIT", 0.2)
    async with open_channel(served.front, tls=pki.client()) as channel:
        call = agent_pb2_grpc.AgentServiceStub(channel).RunDelegated(timeout=20)
        assert await asyncio.wait_for(call.code(), 10) is grpc.StatusCode.PERMISSION_DENIED


async def test_the_bidirectional_calls_go_through_the_mesh_door_only(
    served: Served, pki: Pki
) -> None:
    for target, tls, expected in (
        (served.front, pki.client(), grpc.StatusCode.PERMISSION_DENIED),
        (served.mesh, pki.client(pki.stranger), grpc.StatusCode.PERMISSION_DENIED),
        (served.mesh, pki.client(pki.peer), grpc.StatusCode.OK),
    ):
        code, authors = await interactive_run(target, tls)
        assert code is expected, target
        assert authors == (["researcher"] if expected is grpc.StatusCode.OK else [])

    server = ToolServer([FunctionTool(shout)])
    port = await server.start(
        "127.0.0.1:0", security=pki.server_security(), mesh_address="127.0.0.1:0"
    )
    request = tool_pb2.CallToolRequest(
        context=tool_pb2.CallerContext(app_name="a", user_id="ada", invocation_id="e-1"),
        tool_name="shout",
    )
    request.args.update({"text": "hi"})
    try:
        for target, tls, expected in (
            (f"127.0.0.1:{port}", pki.client(), grpc.StatusCode.PERMISSION_DENIED),
            (
                f"127.0.0.1:{server.mesh_port}",
                pki.client(pki.stranger),
                grpc.StatusCode.PERMISSION_DENIED,
            ),
            (f"127.0.0.1:{server.mesh_port}", pki.client(pki.peer), grpc.StatusCode.OK),
        ):
            async with open_channel(target, tls=tls) as channel:
                call = tool_pb2_grpc.ToolServiceStub(channel).CallToolInteractive(timeout=10)
                try:
                    await call.write(tool_pb2.CallToolInteractiveRequest(call=request))
                    messages = [message async for message in call]
                    code = grpc.StatusCode.OK
                except grpc.aio.AioRpcError as error:
                    code = error.code()
                assert code is expected, target
        assert messages[-1].response.result.response["loud"] == "HI"
    finally:
        await server.stop(None)
