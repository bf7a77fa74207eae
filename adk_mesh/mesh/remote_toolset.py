"""RemoteToolset: the tools a ToolServer serves, used as if they were local."""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio

from adk_mesh import codec
from adk_mesh.contexts import (
    DEFAULT_TOOL_TIMEOUT,
    InvocationContext,
    ReadonlyContext,
    ToolContext,
)
from adk_mesh.errors import (
    AdkError,
    AdkIOError,
    AdkJSONError,
    ConfigError,
    ToolError,
    ToolNotFoundError,
)
from adk_mesh.mesh._caller_contexts import (
    DEFAULT_LOAD_EVENTS,
    MAX_LOAD_EVENTS,
    ContextAnswers,
    answer_context_request,
    error_answer,
)
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES, open_channel
from adk_mesh.mesh._deadline import call_timeout
from adk_mesh.mesh._status import error_from_downstream, wait_to_resend
from adk_mesh.mesh.security import ClientTLS
from adk_mesh.tools.base import BaseTool, Toolset
from adk_mesh.types import Event, EventActions, ToolDeclaration
from adk_mesh.v1 import tool_pb2, tool_pb2_grpc

__all__ = ["RemoteTool", "RemoteToolset"]

logger = logging.getLogger("adk_mesh.mesh")

DEFAULT_LIST_TIMEOUT = 10.0
#: The same bound as a local tool's (``DEFAULT_TOOL_TIMEOUT``).
DEFAULT_CALL_TIMEOUT = DEFAULT_TOOL_TIMEOUT
#: Seconds a kept listing is used without news from the server (see ``listing_max_age``).
DEFAULT_LISTING_MAX_AGE = 60.0
#: Listings kept, one per (app, user, agent), least recently used dropped first.
MAX_KEPT_LISTINGS = 1024


@dataclass
class _Listing:
    """The tools a ToolServer listed for one (app, user, agent), and the listing's version."""

    tools: list[BaseTool]
    version: str
    listed_at: float
    #: A result named another version: list again at the next model request.
    stale: bool = False
    #: When (the toolset's tick) this listing was asked for.
    asked: int = 0
    #: When a result last named a version of this caller's listing, and the version it named:
    #: a listing asked before that and answering with another version is not fresh.
    heard: int = 0
    heard_version: str = ""
    #: The server's toolset read the caller's state to answer: the listing holds for the
    #: state it was asked with only, so it is asked again before each model request.
    depends_on_state: bool = False


class RemoteToolset(Toolset):
    """A :class:`Toolset` whose tools live in a ToolServer at ``target``.

    :meth:`tools` keeps the server's listing per (app, user, agent) and asks again
    (``ListTools``, with the caller's ids, so the answer may depend on the user or the agent)
    only when it has no fresh one:
    every tool result carries the version of the listing the server would give now, so a
    listing that changed (a tool added, removed or redeclared) is asked again at the next model
    request after any call to this server's tools — within the turn that made the call — and a
    listing not confirmed for ``listing_max_age`` seconds is asked again too (a conversation
    that calls none of these tools sees changes after that long). In steady state a remote tool
    call is one RPC. A server that sends no versions is asked before each model request. The
    listing is asked with the caller's state (what the wire can carry of it, as a call's), so
    the server's toolset may filter on ``ctx.state`` as in process; a listing the server says
    it read the state for (``depends_on_state``) holds for that state only and is asked again
    before each model request (a state too large for one message goes to no listing: such a
    listing is then a ToolError). Each
    :class:`RemoteTool` runs over
    ``CallToolInteractive``, which carries the user's message (``ctx.user_content``) and on
    which the remote tool reaches this invocation's artifacts and memory (each request is
    answered here from ``ctx``'s stores, for this session, within its delegation scope):
    progress goes to ``ctx.report_progress``, the actions the remote tool set land
    on ``ctx.actions`` (state writes through ``ctx.state``, so they are recorded), and an error
    result is raised again as the same :class:`~adk_mesh.errors.AdkError` class, so a
    ``ToolError`` still reaches the model as an error response. The whole state goes with
    each call, less the values the wire cannot carry (an object in a ``temp:`` key, an
    integer beyond +-2**53: logged by key); a call larger than one message of the mesh is a
    ToolError that says which part is large. An artifact larger than one message loads and
    saves in chunks (up to 256 MiB); one a tool's server of an older adk-mesh could not take
    is an ArtifactError that tool reads.

    A server that is down fails fast (``UNAVAILABLE`` becomes
    :class:`~adk_mesh.errors.AdkIOError`); while it is unreachable, the model still sees the
    last listing, and a call fails as a ToolError the model can read. Every call also carries a
    deadline, so nothing
    waits forever on a server that hangs: the configured timeout, or the time that remains of
    the invocation's deadline when that is shorter (a deadline already passed fails at once
    with :class:`~adk_mesh.errors.DeadlineExceededError`). Such failures name the tool, never
    the server's address: that goes to this service's log, where it helps and where clients
    and models do not read it.

    A call the server refused at its limit of calls at once before running any of it
    (``SERVER_BUSY``) is sent again once, after the delay the refusal hints, when that delay
    ends before the invocation's deadline; a second refusal, or any failure of a call that may
    have run, is the call's failure (a tool has effects: it is never run twice by this side).

    Args:
        target: ``host:port`` or ``dns:///host:port`` of the ToolServer.
        name: this toolset's name (default: ``remote:<target>``).
        list_timeout: deadline in seconds of each ``ListTools``.
        call_timeout: deadline in seconds of each ``CallTool``.
        tls: TLS to the service's mesh door (default: ``ADK_MESH_TLS_CA`` / ``_CERT`` /
            ``_KEY`` from the environment; plaintext when they are unset).
        listing_max_age: seconds a kept listing is used without a result confirming its
            version (default: 60; 0: ask before each model request).
    """

    def __init__(
        self,
        target: str,
        *,
        name: str | None = None,
        list_timeout: float = DEFAULT_LIST_TIMEOUT,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        tls: ClientTLS | None = None,
        listing_max_age: float = DEFAULT_LISTING_MAX_AGE,
    ) -> None:
        super().__init__(name or f"remote:{target}")
        if listing_max_age < 0:
            raise ConfigError(f"listing_max_age cannot be negative, not {listing_max_age}")
        for setting, seconds in (("list_timeout", list_timeout), ("call_timeout", call_timeout)):
            # Checked here: gRPC takes 0 as no deadline and infinity as one already passed,
            # so a mistake would show only as calls failing (or hanging) at run time.
            if not (seconds > 0 and math.isfinite(seconds)):
                raise ConfigError(f"{setting} must be positive seconds, not {seconds}")
        self.target = target
        self.tls = tls
        self.list_timeout = list_timeout
        self.call_timeout = call_timeout
        self.listing_max_age = listing_max_age
        self._channel: grpc.aio.Channel | None = None
        self._cached_stub: Any = None
        # The last listing per (app, user, agent). Also while the server is unreachable, the model
        # still sees these tools, and a call to one fails as a ToolError the model can read.
        self._listings: OrderedDict[tuple[str, str, str], _Listing] = OrderedDict()
        # Orders listings asked for and results heard, so that an answer that was overtaken
        # (asked before a newer listing or result arrived) does not replace what is newer.
        self._tick = 0

    def _stub(self) -> Any:
        # The channel is opened on first use so that it belongs to the running event loop.
        # The stub is kept with its channel: a stub builds a multi-callable per method.
        if self._channel is None:
            self._channel = (
                open_channel(self.target, tls=self.tls)
                if self.tls is not None
                else open_channel(self.target)
            )
            self._cached_stub = tool_pb2_grpc.ToolServiceStub(self._channel)
        return self._cached_stub

    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        key = _key(ctx)
        kept = self._listings.get(key)
        if kept is not None and self._fresh(kept):
            self._listings.move_to_end(key)
            # A copy: the list is the caller's to change (a toolset wrapping this one adds
            # its own tools to it), the kept listing is not.
            return list(kept.tools)
        request, state_left_out = self._list_request(ctx)
        timeout = call_timeout(ctx.invocation_context.deadline, self.list_timeout, "tool service")
        self._tick += 1
        asked = self._tick
        try:
            response = await self._stub().ListTools(request, timeout=timeout)
        except grpc.RpcError as error:
            failure = error_from_downstream(error, "tool service", self.target)
            if isinstance(failure, AdkIOError) and kept is not None:
                return list(kept.tools)
            raise failure from error
        if response.depends_on_state:
            if state_left_out:
                raise ToolError(
                    f"the tools of {self.name!r} depend on the session's state, which is "
                    f"{state_left_out} bytes, over the mesh's message limit "
                    f"({MAX_CALL_MESSAGE_BYTES} bytes): they cannot be listed"
                )
            # Read as a toolset that depends on the state reads it: a ToolServer serving this
            # toolset again then says so to its own callers (see _list_request).
            _ = ctx.state
        tools: list[BaseTool] = [
            RemoteTool(self, codec.declaration_from_proto(declaration))
            for declaration in response.tools
        ]
        listing = _Listing(
            tools,
            response.listing_version,
            time.monotonic(),
            asked=asked,
            depends_on_state=response.depends_on_state,
        )
        current = self._listings.get(key)
        if current is not None:
            if current.asked > asked:
                # A listing asked after this one has come back first: it is the one kept.
                return tools
            if current.heard > asked and current.heard_version != listing.version:
                # A result since this was asked named another version: this may be older.
                listing.stale = True
        self._listings[key] = listing
        self._listings.move_to_end(key)
        if len(self._listings) > MAX_KEPT_LISTINGS:
            self._listings.popitem(last=False)
        return list(tools)

    def _list_request(self, ctx: ReadonlyContext) -> tuple[tool_pb2.ListToolsRequest, int]:
        """The ``ListToolsRequest`` of ``ctx``, with the state the server's toolset may read
        (less the values the wire cannot carry, as a call's), and the bytes of the state left
        out because with it the request would be larger than one message (0: none left out).
        """
        # Read through the invocation, not ctx.state: a ToolServer serving this toolset again
        # takes a read of ctx.state for its listing depending on the state, which is so only
        # when this toolset's server says so.
        state = ctx.invocation_context.session.state
        try:
            request = codec.list_tools_request_to_proto(ctx, state)
        except AdkJSONError:
            request = codec.list_tools_request_to_proto(
                ctx, _carriable(state, f"toolset {self.name!r} is listed")
            )
        if request.ByteSize() <= MAX_CALL_MESSAGE_BYTES:
            return request, 0
        # gRPC would refuse the request as an INTERNAL error that names nothing; a toolset
        # that does not read the state lists without it, one that does is refused after.
        return tool_pb2.ListToolsRequest(context=request.context), _state_bytes(request)

    def _fresh(self, listing: _Listing) -> bool:
        return (
            bool(listing.version)
            and not listing.depends_on_state
            and not listing.stale
            and time.monotonic() - listing.listed_at < self.listing_max_age
        )

    def _confirm(self, key: tuple[str, str, str], version: str) -> None:
        """A result said the listing of ``key`` is at ``version`` now (empty: it may have
        changed, e.g. the server no longer has the tool called)."""
        kept = self._listings.get(key)
        if kept is None:
            return
        self._tick += 1
        kept.heard = self._tick
        kept.heard_version = version
        if version and version == kept.version:
            kept.listed_at = time.monotonic()
        else:
            kept.stale = True

    async def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()


class RemoteTool(BaseTool):
    """One tool of a :class:`RemoteToolset`; its declaration is the server's, unchanged."""

    is_remote = True

    def __init__(self, toolset: RemoteToolset, declaration: ToolDeclaration) -> None:
        super().__init__(
            declaration.name, declaration.description, is_long_running=declaration.long_running
        )
        self._toolset = toolset
        self._declaration = declaration

    @property
    def parameters_schema(self) -> dict[str, Any] | None:
        return self._declaration.parameters_schema

    @property
    def response_schema(self) -> dict[str, Any] | None:
        return self._declaration.response_schema

    def declaration(self) -> ToolDeclaration:
        # The server already added what the model must be told (e.g. the long-running note).
        return self._declaration

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any] | None:
        state = ctx.state.to_dict()
        try:
            request = codec.call_tool_request_to_proto(
                ctx, self.name, args, state, ctx.function_call_id
            )
        except AdkJSONError:
            # The whole state goes with a call, but a value the wire cannot carry (an object
            # in a temp: key, an integer beyond +-2**53, both valid state) must not fail
            # every call of every remote tool: the tool gets the state without it. (A value
            # of the args the wire cannot carry fails again here: the model reads that.)
            request = codec.call_tool_request_to_proto(
                ctx,
                self.name,
                args,
                _carriable(state, f"remote tool {self.name!r} is called"),
                ctx.function_call_id,
            )
        toolset = self._toolset
        what = f"tool service for {self.name!r}"
        timeout = call_timeout(ctx.invocation_context.deadline, toolset.call_timeout, what)
        if ctx.user_content is not None:
            request.user_content.CopyFrom(codec.content_to_proto(ctx.user_content))
        if ctx.tool_confirmation is not None:
            # A call that asked a person to confirm it runs again: the answer goes with it.
            request.tool_confirmation.CopyFrom(
                codec.tool_confirmation_to_proto(ctx.tool_confirmation)
            )
        _check_size(request, self.name)
        invocation = ctx.invocation_context
        outcome: tuple[dict[str, Any] | None, AdkError | None] | None = None

        async def answer(request: tool_pb2.ContextRequest) -> tool_pb2.ContextResponse:
            return await _answer(request, invocation)

        async def write(response: tool_pb2.ContextResponse) -> None:
            await call.write(tool_pb2.CallToolInteractiveRequest(context_response=response))

        # The tool asks for this invocation's artifacts, memory or history: answered from what
        # a local tool would use, for this session only.
        answers = ContextAnswers(
            answer,
            write,
            artifacts=invocation.artifact_service,
            app_name=invocation.app_name,
            user_id=invocation.user_id,
            session_id=invocation.session_id,
        )
        resent = False
        while True:
            call = toolset._stub().CallToolInteractive(timeout=timeout)
            answered = False  # the server sent something: the call ran
            try:
                # This side reassembles a save the tool sends in chunks (an artifact larger
                # than one message): the tool's server sends it so only when told.
                await call.write(
                    tool_pb2.CallToolInteractiveRequest(call=request, accepts_artifact_chunks=True)
                )
                # Read to the end of the stream (the result is its last message), so the call
                # finishes with its real status instead of being cancelled after the result.
                async for server_message in call:
                    answered = True
                    if server_message.WhichOneof("message") == "context_request":
                        await answers.take(server_message.context_request)
                        continue
                    message = server_message.response
                    if message.WhichOneof("message") == "progress":
                        await ctx.report_progress(*codec.tool_progress_from_proto(message.progress))
                        continue
                    response, error, actions = codec.tool_result_from_proto(message.result)
                    _apply_actions(ctx, actions)
                    outcome = (response, error)
                    toolset._confirm(_key(ctx), message.result.listing_version)
            except grpc.RpcError as error:
                # Refused at the server's limit of calls before any of it ran: sent again,
                # once (the hinted delay permitting). A call that may have run never is.
                if not (resent or answered) and await wait_to_resend(error, invocation.deadline):
                    resent = True
                    timeout = call_timeout(invocation.deadline, toolset.call_timeout, what)
                    continue
                downstream = error_from_downstream(error, what, toolset.target)
                if isinstance(downstream, ToolNotFoundError):
                    # The kept listing offered a tool the server no longer has: ask again.
                    toolset._confirm(_key(ctx), "")
                raise downstream from error
            finally:
                if not call.done():
                    call.cancel()
            break
        if outcome is None:
            logger.warning(
                "tool service at %s ended the call to %r without a result",
                toolset.target,
                self.name,
            )
            raise ToolError(f"the tool service ended the call to {self.name!r} without a result")
        response, failure = outcome
        if failure is not None:
            raise failure
        return response


async def _answer(
    request: tool_pb2.ContextRequest, invocation: InvocationContext
) -> tool_pb2.ContextResponse:
    """The answer to a remote tool's context request, from what a local tool would use: this
    invocation's artifacts and memory, and the history its ``load_events`` reads."""
    history: Sequence[Event] = invocation.session.events
    load = request.load_events
    if (
        request.WhichOneof("request") == "load_events"
        and invocation.history is not None
        and not load.event_ids
        and load.max_events >= 0
    ):
        # A delegated run holds a window of its caller's history: the page comes as a local
        # tool's load_events reads it, the events before the window from that caller.
        try:
            history = await ReadonlyContext(invocation).load_events(
                before_event_id=load.before_event_id or None,
                max_events=min(load.max_events or DEFAULT_LOAD_EVENTS, MAX_LOAD_EVENTS),
            )
        except AdkError as error:
            return error_answer(request.request_id, error)
        request = tool_pb2.ContextRequest(
            request_id=request.request_id,
            load_events=tool_pb2.LoadEventsRequest(max_events=len(history) or 1),
        )
    return await answer_context_request(
        request,
        artifacts=invocation.artifact_service,
        memory=invocation.memory_service,
        history=history,
        app_name=invocation.app_name,
        user_id=invocation.user_id,
        session_id=invocation.session_id,
    )


def _key(ctx: ReadonlyContext) -> tuple[str, str, str]:
    """Whose listing: the server is asked with the caller's ids and may answer per user and
    per agent (one toolset may serve several agents); not per session, so a user's new
    sessions reuse the listing."""
    return (ctx.app_name, ctx.user_id, ctx.agent_name)


#: The most bytes of one message of a call: the mesh's message limit, less room for the
#: framing around it (the interactive call's envelope).
MAX_CALL_MESSAGE_BYTES = MAX_MESSAGE_BYTES - 64 * 1024


def _carriable(state: Mapping[str, Any], doing: str) -> dict[str, Any]:
    """``state`` without the keys whose value the wire cannot carry (each logged by key: the
    value may be anything, a secret too); ``doing`` names what goes without them."""
    kept: dict[str, Any] = {}
    for key, value in state.items():
        scratch = tool_pb2.CallToolRequest()
        try:
            codec.state_to_map(scratch.state, {key: value}, scratch.state_json)
        except AdkJSONError:
            logger.warning(
                "%s without state key %r: its value is not JSON the mesh can carry", doing, key
            )
            continue
        kept[key] = value
    return kept


def _check_size(request: tool_pb2.CallToolRequest, tool_name: str) -> None:
    """Refuse a call larger than one message with a ToolError that says what made it so:
    gRPC would refuse to send it as an INTERNAL error that names nothing.

    Raises:
        ToolError: the call's arguments, state and user's message together are too large.
    """
    size = request.ByteSize()
    if size <= MAX_CALL_MESSAGE_BYTES:
        return
    state = _state_bytes(request)
    arguments = request.args.ByteSize() + len(request.args_json)
    raise ToolError(
        f"the call to remote tool {tool_name!r} is {size} bytes, over the mesh's message "
        f"limit ({MAX_CALL_MESSAGE_BYTES} bytes): its arguments are {arguments} bytes, the "
        f"session's state {state} bytes and the user's message "
        f"{request.user_content.ByteSize()} bytes (all go with every call of a remote tool)"
    )


def _state_bytes(request: tool_pb2.CallToolRequest | tool_pb2.ListToolsRequest) -> int:
    """About the bytes the state takes in ``request`` (keys and values, both forms)."""
    size = sum(len(key) + value.ByteSize() for key, value in request.state.items())
    return size + sum(len(key) + len(value) for key, value in request.state_json.items())


def _apply_actions(ctx: ToolContext, actions: EventActions) -> None:
    """Put the remote tool's actions on the caller's context, as if the tool had run here."""
    for key, value in actions.state_delta.items():
        ctx.state[key] = value
    ctx.actions.artifact_delta.update(actions.artifact_delta)
    if actions.escalate:
        ctx.actions.escalate = True
    if actions.transfer_to_agent is not None:
        ctx.actions.transfer_to_agent = actions.transfer_to_agent
    if actions.skip_summarization:
        ctx.actions.skip_summarization = True
    # The tool asked a person to confirm the call: the calling agent asks its client.
    ctx.actions.requested_tool_confirmations.update(actions.requested_tool_confirmations)
