"""ToolServer: serve tools (or a Toolset) to agents in other processes over ``ToolService``."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import logging
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import aclosing
from typing import Any

import grpc
import grpc.aio

from adk_mesh import codec
from adk_mesh._tasks import TaskFeed
from adk_mesh.agents.base import BaseAgent
from adk_mesh.contexts import (
    MAX_UNREAD_TOOL_EVENTS,
    InvocationContext,
    ReadonlyContext,
    ToolContext,
    serving_deadline,
)
from adk_mesh.credentials import CredentialService
from adk_mesh.errors import (
    AdkError,
    AdkJSONError,
    AgentError,
    ConfigError,
    InvalidArgumentError,
    ToolError,
    ToolNotFoundError,
)
from adk_mesh.ids import check_id, shown
from adk_mesh.mesh._artifact_budget import (
    DEFAULT_MAX_ARTIFACT_BYTES,
    ArtifactBudget,
    service_budget,
)
from adk_mesh.mesh._caller_contexts import (
    CallerArtifacts,
    CallerChannel,
    CallerHistory,
    CallerMemory,
    InteractiveCall,
)
from adk_mesh.mesh._channel import MeshServer
from adk_mesh.mesh._deadline import deadline_of
from adk_mesh.mesh._limits import ServerLimits
from adk_mesh.mesh._status import ServedCall, add_servicer, error_boundary
from adk_mesh.mesh.remote_toolset import RemoteToolset
from adk_mesh.plugins._manager import PluginManager, execute_with_plugins, plugin_manager
from adk_mesh.plugins.base import Plugin
from adk_mesh.sessions.base import Session
from adk_mesh.telemetry import _spans as telemetry
from adk_mesh.tools.base import BaseTool, Toolset
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, Event, EventActions
from adk_mesh.v1 import tool_pb2, tool_pb2_grpc

__all__ = ["ToolServer"]

logger = logging.getLogger("adk_mesh.mesh")

_SERVICE_NAME = tool_pb2.DESCRIPTOR.services_by_name["ToolService"].full_name


class _StaticToolset(Toolset):
    """A fixed list of tools and toolsets; the toolsets are asked per caller."""

    def __init__(self, name: str, tools: Sequence[BaseTool | Toolset | Callable[..., Any]]) -> None:
        super().__init__(name)
        self._tools = [_servable_item(name, index, item) for index, item in enumerate(tools)]
        for item in self._tools:
            if isinstance(item, BaseTool) and item.is_builtin:
                raise ConfigError(_NATIVE_REFUSED.format(name=item.name))
        # As an agent refuses them when it is made: served, every caller's agent would refuse
        # the listing instead, at each turn, far from the mistake.
        names = [item.name for item in self._tools if isinstance(item, BaseTool)]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ConfigError(
                f"tool service {name!r} has two tools named {', '.join(map(repr, duplicates))}"
            )

    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        found: list[BaseTool] = []
        for item in self._tools:
            if isinstance(item, Toolset):
                found.extend(_servable(await item.tools(ctx)))
            else:
                found.append(item)
        return found

    async def close(self) -> None:
        for item in self._tools:
            if isinstance(item, Toolset):
                await item.close()

    @property
    def toolsets(self) -> list[Toolset]:
        """The toolsets among the served items."""
        return [item for item in self._tools if isinstance(item, Toolset)]


#: Why a ToolServer does not serve a provider-native tool (web search, code execution, ...).
_NATIVE_REFUSED = (
    "{name!r} is a provider-native tool: the model provider runs it as part of the model "
    "request, so a tool service cannot serve it; give it to the agent whose model runs it"
)


async def warm_up_toolsets(toolsets: Iterable[Toolset], service: str) -> None:
    """Warm up ``toolsets`` (:meth:`Toolset.warm_up`) concurrently, each once however often
    it is given, each within its own timeouts; never raises but a cancellation.

    A :class:`RemoteToolset` is skipped: its listing is per caller, and the tool service
    behind it warms itself up. A toolset that fails is one warning naming it and why; its
    first listing connects again, as without a warm-up, so a service whose MCP server is
    down still starts, and its listings fail (or recover) as they would have.
    """
    unique = {
        id(toolset): toolset for toolset in toolsets if not isinstance(toolset, RemoteToolset)
    }
    await asyncio.gather(*(_warm_up(toolset, service) for toolset in unique.values()))


async def _warm_up(toolset: Toolset, service: str) -> None:
    try:
        await toolset.warm_up()
    except Exception as error:
        reason = (
            error.message if isinstance(error, AdkError) else f"{type(error).__name__}: {error}"
        )
        logger.warning(
            "%s: toolset %r did not warm up: %s; its first listing tries again",
            service,
            toolset.name,
            reason,
        )


def _servable_item(
    service: str, index: int, item: BaseTool | Toolset | Callable[..., Any]
) -> BaseTool | Toolset:
    """A tool or toolset as given; a plain function as its :class:`FunctionTool`, as an
    ``LlmAgent``'s ``tools`` and ``adk-mesh serve tools`` take one. Anything else is refused
    now: served, every ``ListTools`` failed with INTERNAL, far from the mistake."""
    if isinstance(item, BaseTool | Toolset):
        return item
    if inspect.isfunction(item) or inspect.ismethod(item) or inspect.isbuiltin(item):
        return FunctionTool(item)
    raise ConfigError(
        f"item {index} of tool service {service!r} is {type(item).__name__}, not a tool; give "
        "tools (BaseTool), toolsets or functions"
    )


def _servable(tools: list[BaseTool]) -> list[BaseTool]:
    """``tools`` without the provider-native ones a toolset offered (each logged): they are
    known only per caller, so they are left out of the listing rather than refused."""
    kept = []
    for tool in tools:
        if tool.is_builtin:
            logger.warning("tool service: %s", _NATIVE_REFUSED.format(name=tool.name))
        else:
            kept.append(tool)
    return kept


class _CallerAgent(BaseAgent):
    """Stands in for the remote agent that calls: tools read its name from their context.

    The caller's name is whatever the caller sent, so it is not validated as an identifier.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.description = ""
        self.parent_agent = None
        self.sub_agents = []
        self.before_agent_callbacks = []
        self.after_agent_callbacks = []

    async def _run_impl(self, ctx: InvocationContext) -> AsyncIterator[Event]:  # type: ignore[override]
        raise AgentError("a remote caller stand-in cannot run")
        yield  # pragma: no cover - makes this an async generator


#: A caller's branch and agent name are bounded like its ids (agent names joined by dots).
MAX_BRANCH_CHARS = 1024

#: Tools whose declaration digest is kept (see _ListingVersions); more start the count again.
MAX_KEPT_DIGESTS = 4096


class _ListingVersions:
    """The version of a tools listing: a digest of its declarations, in order, so the same
    tools give the same version whoever asks.

    Each tool's declaration is encoded and digested once per tool object (the tool is kept
    with its digest, so its id is not reused meanwhile): a toolset that answers with the same
    objects costs a lookup per tool and call. A toolset that builds new tool objects is
    digested anew each time; a tool object whose declaration changes in place is not noticed
    (give the listing a new object instead).
    """

    def __init__(self) -> None:
        self._digests: dict[int, tuple[BaseTool, bytes]] = {}

    def version(self, tools: Sequence[BaseTool]) -> str:
        """The listing's version; empty when a declaration cannot be encoded (then the caller
        keeps no listing: it asks again before each model request)."""
        digest = hashlib.blake2b(digest_size=12)
        for tool in tools:
            kept = self._digests.get(id(tool))
            if kept is None or kept[0] is not tool:
                try:
                    encoded = codec.declaration_to_proto(tool.declaration()).SerializeToString(
                        deterministic=True
                    )
                except AdkJSONError:
                    return ""
                if len(self._digests) >= MAX_KEPT_DIGESTS:
                    self._digests.clear()
                kept = (tool, hashlib.blake2b(encoded, digest_size=12).digest())
                self._digests[id(tool)] = kept
            digest.update(kept[1])
        return digest.hexdigest()


class _ListingContext(ReadonlyContext):
    """The context a toolset lists in: it notes whether the toolset read the caller's state,
    so that the listing says it holds for that state only (``depends_on_state``) and a client
    keeps a listing that does not (one RPC per remote tool call in steady state)."""

    __slots__ = ("read_state",)

    def __init__(self, invocation: InvocationContext) -> None:
        super().__init__(invocation)
        self.read_state = False

    @property
    def state(self) -> Mapping[str, Any]:
        self.read_state = True
        return super().state


def _check_caller(caller: tool_pb2.CallerContext, limits: ServerLimits) -> None:
    """Refuse a CallerContext whose ids (when set) break the id rule, or whose agent name or
    branch is too long to be one."""
    for what, value in (
        ("CallerContext.app_name", caller.app_name),
        ("CallerContext.user_id", caller.user_id),
        ("CallerContext.session_id", caller.session_id),
        ("CallerContext.invocation_id", caller.invocation_id),
    ):
        if value:
            check_id(what, value, max_chars=limits.max_id_chars)
    if len(caller.agent_name) > limits.max_id_chars:
        raise InvalidArgumentError(
            f"CallerContext.agent_name is longer than {limits.max_id_chars} characters"
        )
    if len(caller.branch) > MAX_BRANCH_CHARS:
        raise InvalidArgumentError(
            f"CallerContext.branch is longer than {MAX_BRANCH_CHARS} characters"
        )


def _invocation(
    who: tool_pb2.CallerContext,
    state: dict[str, Any] | None = None,
    deadline: float | None = None,
    *,
    limits: ServerLimits,
    user_content: Content | None = None,
    caller: CallerChannel | None = None,
) -> InvocationContext:
    """A light invocation context over the caller's ids, the state it sent and the deadline of
    its call (so a tool that calls further services passes the remaining time on); with
    ``caller`` (an interactive call), the caller's artifacts, memory and session history."""
    session = Session(
        id=who.session_id,
        app_name=who.app_name,
        user_id=who.user_id,
        state=state or {},
    )
    return InvocationContext(
        invocation_id=who.invocation_id,
        agent=_CallerAgent(who.agent_name),
        session=session,
        branch=who.branch,
        deadline=deadline,
        tool_timeout=limits.tool_timeout,
        user_content=user_content,
        artifact_service=None if caller is None else CallerArtifacts(caller),
        memory_service=None if caller is None else CallerMemory(caller),
        # The call carries no events: each page of history is the caller's.
        history=None if caller is None else CallerHistory(caller, omitted=None),
    )


class _ToolServicer(tool_pb2_grpc.ToolServiceServicer):  # type: ignore[misc]
    """Thin adapter: builds the tool's context, runs it, maps errors through one handler."""

    def __init__(
        self,
        toolset: Toolset,
        name: str,
        limits: ServerLimits,
        plugins: PluginManager | None = None,
        credential_service: CredentialService | None = None,
        *,
        artifacts: tuple[int, ArtifactBudget] | None = None,
    ) -> None:
        #: The largest artifact a call loads from its caller, and the budget of those loads.
        self._artifacts = artifacts
        self._toolset = toolset
        self._name = name
        self._limits = limits
        self._plugins = plugins
        self._credential_service = credential_service
        self._versions = _ListingVersions()

    async def ListTools(
        self,
        request: tool_pb2.ListToolsRequest,
        context: grpc.aio.ServicerContext,
    ) -> tool_pb2.ListToolsResponse:
        async with error_boundary(context, "ListTools") as call:
            _check_caller(request.context, self._limits)
            call.invocation_id = request.context.invocation_id
            # The toolset lists with the caller's state, as in process (a filter on
            # ReadonlyContext.state, google-adk's tool_filter predicates).
            invocation = _invocation(
                request.context,
                codec.list_tools_state_from_proto(request),
                deadline_of(context),
                limits=self._limits,
            )
            telemetry.annotate_current_span(invocation)
            listing = _ListingContext(invocation)
            tools = _servable(await self._toolset.tools(listing))
            return tool_pb2.ListToolsResponse(
                tools=[codec.declaration_to_proto(tool.declaration()) for tool in tools],
                toolset_name=self._name,
                listing_version=self._versions.version(tools),
                depends_on_state=listing.read_state,
            )
        raise AssertionError("unreachable: error_boundary aborts")  # pragma: no cover

    async def CallTool(
        self,
        request: tool_pb2.CallToolRequest,
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[tool_pb2.CallToolResponse]:
        async with error_boundary(context, "CallTool") as call:
            async with aclosing(self._call(request, context, call, None)) as responses:
                async for response in responses:
                    yield response

    async def CallToolInteractive(
        self,
        requests: AsyncIterator[tool_pb2.CallToolInteractiveRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[tool_pb2.CallToolInteractiveResponse]:
        async with error_boundary(context, "CallToolInteractive") as call:
            interactive = InteractiveCall(tool_pb2.CallToolInteractiveResponse)
            if self._artifacts is not None:
                interactive.channel.max_artifact_bytes, interactive.channel.budget = self._artifacts
            request = await interactive.start(requests, "call")
            responses = self._call(request, context, call, interactive.channel)
            # Bounded by bytes too, as RunDelegated's: a progress update's data or the result
            # may be large. A tool call sends few responses, so measuring each costs little.
            async for message in interactive.stream(responses, size_of=_response_bytes):
                yield message

    async def _call(
        self,
        request: tool_pb2.CallToolRequest,
        context: grpc.aio.ServicerContext,
        call: ServedCall,
        caller: CallerChannel | None,
    ) -> AsyncGenerator[tool_pb2.CallToolResponse, None]:
        """One tool call; with ``caller``, the tool reaches the caller's artifacts and memory."""
        if not request.tool_name:
            raise InvalidArgumentError("CallToolRequest.tool_name is empty; name the tool")
        _check_caller(request.context, self._limits)
        call.invocation_id = request.context.invocation_id
        deadline = deadline_of(context)
        # Contexts the tool builds itself (a Runner it calls) read the deadline here.
        serving_deadline.set(deadline)
        args, state = codec.call_tool_request_from_proto(request)
        invocation = _invocation(
            request.context,
            state,
            deadline,
            limits=self._limits,
            user_content=(
                codec.content_from_proto(request.user_content)
                if request.HasField("user_content")
                else None
            ),
            caller=caller,
        )
        # This service's own credentials (a caller's never cross a CallTool).
        invocation.credential_service = self._credential_service
        # The RPC span started before the request was read: a caller that sent no baggage
        # (a client in another language) still finds it by the invocation id.
        telemetry.annotate_current_span(invocation)
        tools = _servable(await self._toolset.tools(ReadonlyContext(invocation)))
        tool = next((t for t in tools if t.name == request.tool_name), None)
        if tool is None:
            available = ", ".join(sorted(t.name for t in tools)) or "none"
            raise ToolNotFoundError(
                f"tool {shown(request.tool_name)} is not served to this caller by "
                f"{self._name!r}; available: {available}"
            )
        # The result says which listing this caller has now: a client that keeps listings
        # notices a change at the next model request, without asking before each one.
        version = self._versions.version(tools)
        async with aclosing(_run_tool(tool, invocation, request, args, self._plugins)) as run:
            async for response in run:
                if response.HasField("result"):
                    response.result.listing_version = await self._version_after(invocation, version)
                yield response

    async def _version_after(self, invocation: InvocationContext, before: str) -> str:
        """The caller's listing version once the tool has run: the call itself may have
        changed the listing (a tool that unlocks others, an MCP server's list change)."""
        try:
            tools = _servable(await self._toolset.tools(ReadonlyContext(invocation)))
        except AdkError as error:
            # The result still goes back; the version the call started with goes with it.
            logger.warning("tool service: listing after a call failed: %s", error.message)
            return before
        return self._versions.version(tools)


def _response_bytes(response: tool_pb2.CallToolResponse) -> int:
    return int(response.ByteSize())


def _within_0_and_1(fraction: float | None) -> float | None:
    """A reported fraction as ``ToolProgress.fraction`` promises it, in [0, 1] (``None``: not a
    number), as the calling agent reports a local tool's: clients of the wire (another
    language's progress bar) need not clamp it themselves."""
    if fraction is None or math.isnan(fraction):
        return None
    return min(1.0, max(0.0, float(fraction)))


async def _run_tool(
    tool: BaseTool,
    invocation: InvocationContext,
    request: tool_pb2.CallToolRequest,
    args: dict[str, Any],
    plugins: PluginManager | None = None,
) -> AsyncGenerator[tool_pb2.CallToolResponse, None]:
    """Run the tool in a task (through this server's plugins' tool hooks); stream its progress
    as it comes, then exactly one result.

    Back-pressured end to end: each response is written before the next is read (grpc.aio
    waits for the client's flow-control window), and the tool's ``report_progress`` waits
    while MAX_UNREAD_TOOL_EVENTS updates are unread, so a slow client slows the tool down
    instead of the server buffering its progress without end."""
    feed = TaskFeed[tool_pb2.ToolProgress, tuple[dict[str, Any] | None, AdkError | None]](
        max_pending=MAX_UNREAD_TOOL_EVENTS
    )

    async def report(message: str, data: dict[str, Any] | None, fraction: float | None) -> None:
        fraction = _within_0_and_1(fraction)
        try:
            progress = codec.tool_progress_to_proto(message, data, fraction)
        except AdkJSONError as error:
            # Progress is for people: what cannot be carried of it is left out, the call goes on.
            logger.warning(
                "tool %r reported progress data the wire cannot carry: %s", tool.name, error
            )
            progress = codec.tool_progress_to_proto(message, None, fraction)
        await feed.send(progress)

    call_id = request.function_call_id if request.HasField("function_call_id") else None
    tool_context = ToolContext(
        invocation,
        function_call_id=call_id,
        progress=report,
        tool_confirmation=(
            codec.tool_confirmation_from_proto(request.tool_confirmation)
            if request.HasField("tool_confirmation")
            else None
        ),
    )

    async def traced() -> tuple[dict[str, Any] | None, AdkError | None]:
        # Inside the task, so the span is attached and detached by the same task; the task's
        # context is copied from the handler's step, which has the gRPC server span current.
        with telemetry.trace_tool_call(tool.name, tool, call_id, args, invocation):
            response, error = await execute_with_plugins(plugins, tool, tool_context, args)
            if error is not None:
                telemetry.record_tool_error(error)
            else:
                telemetry.record_tool_result(response)
            return response, error

    async with feed:
        feed.start(traced())
        async for progress in feed:
            yield tool_pb2.CallToolResponse(progress=progress)
        response, error = feed.result()
    # Answered: a change made through the context from now on (a task the tool left running)
    # would reach no caller, so it is refused rather than lost.
    tool_context.close()
    try:
        result = codec.tool_result_to_proto(response, error, tool_context.actions)
    except AdkJSONError as unfit:
        # What the tool returned (or a state value it set) is not JSON the wire carries: the
        # caller's model reads that as the tool's error, and the turn goes on.
        result = codec.tool_result_to_proto(
            None,
            ToolError(f"tool {tool.name!r} returned what cannot be sent back: {unfit.message}"),
            EventActions(),
        )
    yield tool_pb2.CallToolResponse(result=result)


class ToolServer(MeshServer):
    """Serves tools to agents in other processes (``adk_mesh.v1.ToolService``).

    ``ListTools`` answers with the tools this caller may use: a :class:`Toolset` is asked with
    a context built from the request's CallerContext and the state it sent, so a
    permission-based toolset answers per user and a filter on ``ctx.state`` as in process; a
    listing for which the toolset read ``ctx.state`` says so (``depends_on_state``), and the
    caller asks again before each model request instead of keeping it. ``CallTool`` runs one
    tool with a :class:`ToolContext` over the state the caller sent (and the user's message,
    when sent); ``CallToolInteractive`` (what a RemoteToolset calls)
    does the same, and the tool's artifacts and memory are then the caller's, reached over the
    call (the server keeps no store of its own);
    progress the tool reports streams back as ``ToolProgress``, then one ``ToolResult`` carries
    the response (or the error the tool raised) and the actions it set. The caller applies
    those actions; the server keeps nothing. Listings and results carry the version of the
    caller's listing (a digest of the declarations), so a client may keep a listing and ask
    again only when a result names another version (see :class:`RemoteToolset`). JSON of
    any depth the mesh carries goes both ways (too deep for a Struct: as JSON text, see
    ``content.proto``); a response or a state
    value the wire cannot carry at all (deeper than ``codec.MAX_JSON_DEPTH``, an integer
    beyond +-2**53, ...) comes back as a ToolError the caller's model reads, never as a
    message the caller cannot parse.

    Each call of a tool is bounded by ``limits.tool_timeout`` (or the tool's own timeout):
    past it the caller's model reads a ToolError. A CallerContext whose ids break the id rule
    and bytes that do not parse are refused with INVALID_ARGUMENT.

    Args:
        tools: the tools (and toolsets, asked per caller: an ``McpToolset`` fronts an MCP
            server this way; plain functions, as :class:`FunctionTool`\\ s), or one toolset
            that chooses them per caller. The toolsets are closed when the server stops.
        name: the toolset name reported to callers (default: the toolset's, or ``"tools"``).
        limits: what this server allows its callers (default: ``ServerLimits()``).
        plugins: :class:`~adk_mesh.plugins.Plugin` s whose tool hooks (``before_tool``,
            ``after_tool``, ``on_tool_error``) run around every call this server serves; the
            callers' plugins do not reach here (plugins are code, they do not travel).
            Closed when the server stops.
        credential_service: where the served tools get credentials
            (``tool_context.get_credential(name)``, :mod:`adk_mesh.credentials`); values they
            were handed are redacted from their results (default: none). A caller's
            credentials are never sent with a tool call.
        max_artifact_bytes: the largest artifact a tool loads from its caller (one larger
            than a message comes in chunks; default 256 MiB): past it the tool reads an
            ArtifactError, refused on the announced size.
        max_artifact_bytes_in_flight: the bytes of such loads held at once, the calls'
            together (default twice ``max_artifact_bytes``; at least that); one that does not
            fit beside the others is an ``ArtifactsBusyError`` the tool reads.

    Before it serves, :meth:`warm_up` connects the toolsets (an ``McpToolset`` starts its
    MCP server), so the first caller does not wait for that.

    Example::

        server = ToolServer([FunctionTool(get_weather)])
        await server.warm_up()
        port = await server.start("127.0.0.1:0")
        ...
        await server.stop(grace=5)
    """

    _service_names = (_SERVICE_NAME,)

    def __init__(
        self,
        tools: Sequence[BaseTool | Toolset | Callable[..., Any]] | Toolset,
        *,
        name: str | None = None,
        limits: ServerLimits | None = None,
        plugins: Sequence[Plugin] | None = None,
        credential_service: CredentialService | None = None,
        max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
        max_artifact_bytes_in_flight: int | None = None,
    ) -> None:
        super().__init__()
        #: The artifact bytes the tools' calls take from their callers in chunks at once.
        self.artifact_budget = service_budget(max_artifact_bytes, max_artifact_bytes_in_flight)
        self.max_artifact_bytes = max_artifact_bytes
        self.plugins = plugin_manager(plugins)
        self.credential_service = credential_service
        self.toolset: Toolset = (
            tools if isinstance(tools, Toolset) else _StaticToolset(name or "tools", tools)
        )
        self.name = name or self.toolset.name
        self.limits = limits or ServerLimits()

    async def warm_up(self) -> None:
        """Warm up the served toolsets before serving (see :meth:`MeshServer.warm_up`): each
        ``McpToolset`` starts or reaches its MCP server, opens its session and lists once,
        all at once, each within its ``connect_timeout`` and ``list_timeout``. A toolset
        that fails is one warning in the log, never an error: its first listing tries
        again (and fails per call as it would have). A :class:`RemoteToolset` is left to
        its own service. Idempotent.

        ``adk-mesh serve tools`` (:func:`~adk_mesh.mesh.serve.serve_until_signal`) calls it
        before the server starts; code that starts a ToolServer itself calls
        ``await server.warm_up()`` before :meth:`start` (``start`` does not warm up).
        """
        toolset = self.toolset
        toolsets = toolset.toolsets if isinstance(toolset, _StaticToolset) else [toolset]
        await warm_up_toolsets(toolsets, f"tool service {self.name!r}")

    async def stop(self, grace: float | None = None) -> None:
        """Stop serving (see :meth:`MeshServer.stop`), then close the toolset: its
        connections, and the MCP servers an ``McpToolset`` started."""
        await super().stop(grace)
        await self.toolset.close()
        if self.plugins is not None:
            await self.plugins.close()

    def _register(self, server: grpc.aio.Server) -> None:
        add_servicer(
            tool_pb2_grpc.add_ToolServiceServicer_to_server,
            _ToolServicer(
                self.toolset,
                self.name,
                self.limits,
                self.plugins,
                self.credential_service,
                artifacts=(self.max_artifact_bytes, self.artifact_budget),
            ),
            server,
        )
