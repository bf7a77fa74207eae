"""A tool or agent service is ready once its MCP servers are: ``warm_up()`` starts them and
opens their sessions before the first caller lists (real stdio MCP servers, a real ToolServer
and AgentServer on 127.0.0.1 port 0, reached over gRPC)."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import pytest

from adk_mesh import LlmAgent, McpToolset, codec
from adk_mesh.contexts import ReadonlyContext
from adk_mesh.errors import AdkIOError
from adk_mesh.mesh import AgentServer, RemoteToolset, ToolServer, open_channel
from adk_mesh.mesh._channel import MeshServer
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.tools.base import BaseTool, Toolset
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2
from tests.integration.mcp_interop.conftest import (
    HERE,
    TIME_SERVER,
    readonly,
    tool_context,
    tools_by_name,
)

#: A stdio MCP server that appends its process id to a file as it starts (its one tool: ping).
MARKER_SERVER = str(HERE / "marker_server20.py")


def marker_toolset(marker: Path, name: str = "marker") -> McpToolset:
    return McpToolset(command=sys.executable, args=[MARKER_SERVER, str(marker)], name=name)


def starts(marker: Path) -> list[int]:
    """The process ids of the marker server's starts, in order."""
    if not marker.exists():
        return []
    return [int(line) for line in marker.read_text().split()]


def running(pid: int) -> bool:
    """Whether the process runs (a zombie waiting to be reaped does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno >= logging.WARNING and record.name.startswith("adk_mesh")
    ]


# --- McpToolset.warm_up --------------------------------------------------------------------


async def test_mcp_toolset_warm_up_opens_its_session_and_lists_once(tmp_path: Path) -> None:
    marker = tmp_path / "starts"
    toolset = marker_toolset(marker)
    try:
        await toolset.warm_up()
        (pid,) = starts(marker)
        assert running(pid)
        # The listing warm_up made is the one the first caller gets: no new start, and the
        # same tool objects.
        first = await toolset.tools(readonly())
        assert [tool.name for tool in first] == ["ping"]
        assert await toolset.tools(readonly()) == first
        await toolset.warm_up()  # warm already: nothing more to do
        assert starts(marker) == [pid]
    finally:
        await toolset.close()


async def test_mcp_toolset_warm_up_raises_when_its_server_cannot_start() -> None:
    toolset = McpToolset(command=sys.executable, args=["-c", "raise SystemExit(3)"], name="gone")
    with pytest.raises(AdkIOError, match="gone: cannot open the MCP session"):
        await toolset.warm_up()


async def test_a_toolset_s_default_warm_up_does_nothing() -> None:
    class Fixed(Toolset):
        async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
            return []

    await Fixed("fixed").warm_up()


# --- ToolServer ----------------------------------------------------------------------------


async def test_a_warmed_up_tool_server_lists_without_starting_its_mcp_servers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    marker = tmp_path / "starts"
    fronted = marker_toolset(marker)
    time_tools = McpToolset(command=TIME_SERVER[0], args=TIME_SERVER[1:], name="time")
    server = ToolServer([fronted, time_tools], name="fronted")
    try:
        with caplog.at_level(logging.INFO, logger="adk_mesh"):
            await server.warm_up()
        # Both MCP servers run and their sessions are open before anything was served.
        (pid,) = starts(marker)
        assert running(pid)
        assert time_tools._session is not None and time_tools._session.usable()
        assert warnings_of(caplog) == []

        port = await server.start("127.0.0.1:0")
        remote = RemoteToolset(f"127.0.0.1:{port}", tls=None)
        try:
            tools = await tools_by_name(remote)
            assert set(tools) == {"ping", "convert_time", "get_current_time"}
            assert await tools["ping"].execute(tool_context(), {}) == {"result": "pong"}
        finally:
            await remote.close()
        # The first ListTools (and the call) used the session warm_up opened.
        assert starts(marker) == [pid]
    finally:
        await server.stop(None)
    assert not running(pid)


async def test_a_tool_server_over_one_mcp_toolset_warms_it_up(tmp_path: Path) -> None:
    marker = tmp_path / "starts"
    server = ToolServer(marker_toolset(marker))
    try:
        await server.warm_up()
        (pid,) = starts(marker)
        port = await server.start("127.0.0.1:0")
        remote = RemoteToolset(f"127.0.0.1:{port}", tls=None)
        try:
            assert set(await tools_by_name(remote)) == {"ping"}
        finally:
            await remote.close()
        assert starts(marker) == [pid]
    finally:
        await server.stop(None)


async def test_an_mcp_server_that_cannot_start_is_one_warning_and_the_service_still_serves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = McpToolset(command=sys.executable, args=["-c", "raise SystemExit(3)"], name="broken")
    server = ToolServer([broken], name="fronted")
    try:
        with caplog.at_level(logging.INFO, logger="adk_mesh"):
            await server.warm_up()  # does not raise
        (warning,) = warnings_of(caplog)
        assert "toolset 'broken' did not warm up: broken: cannot open the MCP session" in warning
        assert warning.endswith("its first listing tries again")

        port = await server.start("127.0.0.1:0")
        remote = RemoteToolset(f"127.0.0.1:{port}", tls=None)
        try:
            # As without a warm-up: the listing connects again, and fails as it did.
            with pytest.raises(AdkIOError, match="cannot open the MCP session"):
                await remote.tools(readonly())
        finally:
            await remote.close()
    finally:
        await server.stop(None)


async def test_an_mcp_server_that_never_answers_ends_the_warm_up_at_its_connect_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    marker = tmp_path / "starts"
    hung = McpToolset(
        command=sys.executable,
        args=[MARKER_SERVER, str(marker), "--hang"],
        name="hung",
        connect_timeout=0.5,
    )
    server = ToolServer([hung])
    try:
        with caplog.at_level(logging.INFO, logger="adk_mesh"):
            await server.warm_up()
        (warning,) = warnings_of(caplog)
        assert "toolset 'hung' did not warm up" in warning
        assert "did not open a session within 0.5 s" in warning
        # The server that never answered was stopped, not left behind.
        (pid,) = starts(marker)
        assert not running(pid)
    finally:
        await server.stop(None)


class Waiting(Toolset):
    """A toolset whose warm-up waits until another one's has begun."""

    def __init__(self, name: str, begun: asyncio.Event, other: asyncio.Event) -> None:
        super().__init__(name)
        self._begun, self._other = begun, other

    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        return []

    async def warm_up(self) -> None:
        self._begun.set()
        await self._other.wait()


async def test_the_toolsets_warm_up_at_once() -> None:
    # Each waits for the other to begin: one after the other, neither would end.
    first, second = asyncio.Event(), asyncio.Event()
    server = ToolServer([Waiting("a", first, second), Waiting("b", second, first)])
    try:
        async with asyncio.timeout(10):
            await server.warm_up()
    finally:
        await server.stop(None)


class WatchedRemote(RemoteToolset):
    """A remote toolset that notes whether it was asked to warm up."""

    warmed = False

    async def warm_up(self) -> None:
        self.warmed = True


async def test_a_tool_server_does_not_warm_up_remote_toolsets() -> None:
    # A remote listing is per caller, and the tool service behind it warms itself up.
    remote = WatchedRemote("127.0.0.1:1", tls=None)
    server = ToolServer([remote])
    try:
        await server.warm_up()
    finally:
        await server.stop(None)
    assert not remote.warmed


async def test_a_mesh_server_without_toolsets_warms_up_as_a_no_op() -> None:
    await MeshServer().warm_up()
    server = ToolServer([])
    await server.warm_up()
    await server.stop(None)


# --- AgentServer ---------------------------------------------------------------------------


def root_run(text: str) -> agent_pb2.RunRequest:
    message = content_pb2.Content(role="user", parts=[content_pb2.Part(text=text)])
    return agent_pb2.RunRequest(root=agent_pb2.RootRun(user_id="u", new_message=message))


async def test_an_agent_server_warms_up_the_mcp_toolsets_its_agents_hold(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root_marker, helper_marker, tool_marker = (tmp_path / n for n in ("root", "helper", "tool"))
    shared = marker_toolset(root_marker, "root-mcp")
    # Skipped: its listing is per caller, and its service warms itself up.
    remote = WatchedRemote("127.0.0.1:1", tls=None, name="elsewhere")
    helper = LlmAgent(
        name="helper",
        model=ScriptedModel([]),
        # The same toolset object twice in the tree: warmed up once.
        tools=[marker_toolset(helper_marker, "helper-mcp"), shared, remote],
    )
    # An agent an AgentTool runs in process lists its toolsets at its first run too.
    researcher = LlmAgent(
        name="researcher", model=ScriptedModel([]), tools=[marker_toolset(tool_marker, "tool")]
    )
    root = LlmAgent(
        name="root",
        model=ScriptedModel([call("ping"), "pinged"]),
        tools=[shared, AgentTool(researcher)],
        sub_agents=[helper],
    )
    server = AgentServer(root)
    try:
        with caplog.at_level(logging.INFO, logger="adk_mesh"):
            await server.warm_up()
        assert warnings_of(caplog) == []
        assert not remote.warmed
        pids = [starts(marker) for marker in (root_marker, helper_marker, tool_marker)]
        assert [len(found) for found in pids] == [1, 1, 1]
        assert all(running(found[0]) for found in pids)

        port = await server.start("127.0.0.1:0")
        async with open_channel(f"127.0.0.1:{port}", tls=None) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            texts = [
                part.text
                async for response in stub.Run(root_run("ping it"), timeout=30)
                for event in codec.run_response_events(response)
                if event.content is not None
                for part in event.content.parts
                if part.text
            ]
        assert texts[-1] == "pinged"
        # The turn's first listing and its call used the session warm_up opened.
        assert starts(root_marker) == pids[0]
    finally:
        await server.stop(None)
        for toolset in (shared, helper.tools[0], researcher.tools[0], remote):
            assert isinstance(toolset, Toolset)
            await toolset.close()


async def test_an_agent_server_whose_mcp_server_cannot_start_still_serves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = McpToolset(command=sys.executable, args=["-c", "raise SystemExit(3)"], name="broken")
    server = AgentServer(LlmAgent(name="root", model=ScriptedModel(["hi"]), tools=[broken]))
    try:
        with caplog.at_level(logging.INFO, logger="adk_mesh"):
            await server.warm_up()
        (warning,) = warnings_of(caplog)
        assert "'broken'" in warning and warning.endswith("its first listing tries again")
        await server.start("127.0.0.1:0")
    finally:
        await server.stop(None)


async def test_a_start_up_waits_for_its_warm_up_only_so_long(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # An MCP server slower than the bound must not keep the service from becoming ready
    # within what `adk-mesh up` and the Kubernetes probes allow: past it the service serves,
    # and what did not connect connects on its first listing.
    from adk_mesh.mesh import serve

    class Slow(ToolServer):
        async def warm_up(self) -> None:
            await asyncio.Event().wait()

    monkeypatch.setattr(serve, "WARM_UP_SECONDS", 0.2)
    await serve._warm_up(Slow([]))
    assert "the warm-up did not end within 0.2s; serving now" in capsys.readouterr().err
