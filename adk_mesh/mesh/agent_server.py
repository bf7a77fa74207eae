"""AgentServer: serve an agent tree over ``adk_mesh.v1.AgentService``."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, aclosing

import grpc
import grpc.aio

from adk_mesh import codec
from adk_mesh._memory import MESSAGE_OBJECT_BYTES, event_bytes
from adk_mesh._tasks import TaskFeed
from adk_mesh.agents.base import BaseAgent, validate_agent_name
from adk_mesh.agents.delegation import (
    Delegation,
    DelegationOutcome,
    scoped_artifacts,
    scoped_memory,
)
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.agents.transfers import DEFAULT_MAX_TRANSFERS, follow_transfers
from adk_mesh.artifacts import ArtifactService, artifact_service_from_url
from adk_mesh.contexts import (
    InvocationContext,
    ReadonlyContext,
    RunConfig,
    check_request_metadata,
    serving_deadline,
)
from adk_mesh.credentials import CredentialService
from adk_mesh.errors import (
    AdkJSONError,
    AgentError,
    AgentNotFoundError,
    ConfigError,
    DelegationError,
    InvalidArgumentError,
    NotFoundError,
)
from adk_mesh.ids import check_id, random_uuid, shown
from adk_mesh.memory import memory_service_from_url
from adk_mesh.memory.base import MemoryService
from adk_mesh.mesh._artifact_budget import DEFAULT_MAX_ARTIFACT_BYTES
from adk_mesh.mesh._caller_contexts import (
    CallerArtifacts,
    CallerChannel,
    CallerHistory,
    CallerMemory,
    InteractiveCall,
    NamedHistory,
)
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES, MeshServer, open_channel
from adk_mesh.mesh._deadline import deadline_of
from adk_mesh.mesh._forwarding import forwarded_secrets, is_mutual_tls
from adk_mesh.mesh._limits import LLM_CALLS_TRAILER, ServerLimits
from adk_mesh.mesh._relay import PartialRelay
from adk_mesh.mesh._session_service import SERVICE_NAME as _SESSION_SERVICE_NAME
from adk_mesh.mesh._session_service import SessionServicer
from adk_mesh.mesh._session_turns import turns_for
from adk_mesh.mesh._status import (
    SESSION_ID_TRAILER,
    add_servicer,
    error_boundary,
    error_from_downstream,
)
from adk_mesh.mesh._view_sessions import ViewSessions
from adk_mesh.mesh.remote_agent import RemoteAgent
from adk_mesh.mesh.security import ClientTLS
from adk_mesh.mesh.tool_server import warm_up_toolsets
from adk_mesh.plugins._manager import plugin_manager
from adk_mesh.plugins.base import Plugin
from adk_mesh.runner import (
    Runner,
    answered_call_event,
    check_new_message,
    find_agent_to_run,
    find_branch_to_run,
    load_agents_behind,
    new_invocation_id,
)
from adk_mesh.sessions import InMemorySessionService, SessionService, session_service_from_url
from adk_mesh.sessions.base import Session
from adk_mesh.telemetry._spans import annotate_current_span, invocation_scope, served_call
from adk_mesh.tools.base import close_toolsets, held_toolsets
from adk_mesh.types import Content, Event
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2, event_pb2, session_pb2_grpc

__all__ = ["AgentServer"]

logger = logging.getLogger("adk_mesh.mesh")

_SERVICE_NAME = agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name


#: Seconds :meth:`AgentServer.stop` waits for cancelled calls to finish recording their turns
#: before it closes the stores it opened.
CLOSE_STORES_AFTER = 5.0


class AgentServer(MeshServer):
    """Serves one agent and its tree of sub-agents (``adk_mesh.v1.AgentService``).

    ``Run`` has two modes:

    * **root** — a user turn. The service's own :class:`~adk_mesh.runner.Runner` loads the
      session (an empty ``session_id`` creates a new one, an unknown id creates that session:
      get-or-create, so concurrent first turns on one new id share it and none is refused),
      appends every non-partial event and streams every event back; the first response also
      carries the session id.
    * **delegated** — a run handed down by an agent in another service. Nothing is persisted:
      the session view the caller sent (state and events) becomes a throwaway in-memory
      session. The caller's invocation id, branch, delegation depth, call path and model
      calls made carry on; what the AgentTool delegations on the way let the run reach of
      artifacts and memory (``DelegatedRun.scope``) limits the stores as it would in
      process. Over ``RunDelegated`` (what a :class:`RemoteAgent` calls) those stores are the
      caller's, reached over the call (the caller answers each request from its own, so the
      root stays their only writer); over a delegated ``Run``, this server's — unless the
      caller said it has none (``DelegatedRun.no_caller_stores``, which a RemoteAgent sends
      as a ``Run``): then the run has none either, as over ``RunDelegated``.
      A call path that already holds this service's agent (A -> B -> A) or a
      depth past the caller's limit is refused with FAILED_PRECONDITION
      (:class:`~adk_mesh.errors.DelegationError`). Two kinds:

      - *a transfer*: the named agent runs in the view — or, when the conversation was left
        to one of its sub-agents in an earlier turn, that one (as if the two trees were
        one) — transfers within this tree are followed, each event's state delta is applied
        to the view as it flows, and every event, partial ones included, streams back for the
        caller to persist. The agent is offered the caller's agents in its place
        (``DelegatedRun.caller_tree``) as transfer targets; a transfer to an agent outside
        this tree ends the run with that event, and the caller's tree follows it. When the
        run ends the invocation (``end_invocation``), its last response says so.
      - *an AgentTool's child* (``DelegatedRun.agent_tool``): the policy is applied here by
        the code that applies it in process
        (:func:`~adk_mesh.agents.delegation.run_delegation`): the child's session is seeded
        from the view by the policy, its artifacts and memory are limited by it, its events
        are forwarded (stripped) only if the policy says so, and the last response holds the
        outcome: the answer, the state changes the policy writes back, the artifacts saved,
        and (``invocation_ended``) whether the child ended its delegation.

    **One turn at a time on a session.** In this process a root turn on a session that is
    busy *waits* (first come, first served) for the turn in flight, then loads the session as
    that turn left it; so every turn succeeds and each invocation's events are contiguous in
    the log. The wait ends with the call's deadline or cancellation. Every server of the
    process that shares one store object shares the queue. Across processes (replicas sharing
    one store) the store's claim guards: a turn on a session another process is running is
    refused at once with ABORTED, reason ``SESSION_CONFLICT``
    (:class:`~adk_mesh.errors.SessionConflictError`), before anything is written; the client
    retries. A store that cannot claim relies on its stale-append check alone: the turn that
    fell behind is refused at its next append (same status), keeping what it had appended.

    Cancelling the call (a client that goes away or cancels) cancels the running agent. The
    call's deadline becomes the invocation's ``deadline``, so the remote calls the agents make
    carry the time that remains.

    **Streaming.** A request that accepts batches (``accept_event_batches``) gets a run's
    first events one per response; then the run goes on ahead of the client and every event
    ready when the next response is due travels in it. From then on, the partial events a
    :class:`RemoteAgent` of the run receives are relayed as the messages its peer sent,
    without being decoded and encoded again here (:mod:`adk_mesh.mesh._relay`).

    The server owns its limits (:class:`~adk_mesh.mesh.ServerLimits`): model calls per
    invocation, delegation depth, id length, tool timeout. A request may lower them, never
    raise them. A delegated run counts on from the model calls the invocation made before it
    (``DelegatedRun.llm_calls_made``), may make what its caller has left, and reports the
    calls it made in the trailing metadata ``adk-mesh-llm-calls``, so its caller's invocation
    counts them too; and those made so far on each response (``RunResponse.llm_calls``), so a
    caller that stops reading (its run cancelled) counts them as well. A request that cannot
    be served (bytes that do not parse, an id outside the id rule, a negative limit, a new
    message that is not the user's or holds only empty text) is refused with
    INVALID_ARGUMENT before anything is stored.

    Args:
        agent: the root of the served tree; its name identifies this service on call paths.
        app_name: the app of root runs (default: the agent's name).
        session_service: store of root-run sessions, or its URL (default: in memory).
        artifact_service: artifact store, or its URL (default: none).
        memory_service: long-term memory for the agents, or its URL (default: none). Each
            root turn that finishes is added to it (see :class:`~adk_mesh.runner.Runner`).
        max_transfers: transfers one invocation may follow in this service's tree.
        limits: what this server allows its callers (default: ``ServerLimits()``).
        plugins: :class:`~adk_mesh.plugins.Plugin` s for the work this service does: its
            root runs' Runner calls every hook; a delegated run (a caller's AgentTool or
            transfer) goes through the agent, model and tool hooks of the agents that run
            here. A caller's plugins do not reach here, nor these a caller's: plugins are
            code, they do not travel. Closed when the server stops.
        credential_service: where the tools of every run served here get credentials
            (:mod:`adk_mesh.credentials`; default: none). A delegated run whose caller
            forwarded credentials (an AgentTool's ``forward_credentials``, over mutual TLS
            only: PERMISSION_DENIED otherwise) gets them after this service's own.
        max_artifact_bytes: the largest artifact the session API's ``SaveArtifactStream``
            stores, in bytes (default 256 MiB; 1 to 2**30 - 1). A save over it is
            INVALID_ARGUMENT, naming the limit, before its bytes are read. Also the largest
            artifact a delegated run loads from its caller in chunks (``RunDelegated``; one
            over it is an ArtifactError the run reads, refused on its announced size).
        max_artifact_bytes_in_flight: the artifact bytes the session API's streams hold at
            once, saves and loads together (default twice ``max_artifact_bytes``; at least
            ``max_artifact_bytes``). One that does not fit beside the others is refused at
            once, RESOURCE_EXHAUSTED (``ArtifactsBusyError``), before its bytes are read. The
            artifacts a delegated run loads from its caller in chunks count too, until their
            last chunk is in (one that does not fit: an ``ArtifactsBusyError`` the run reads).

    The server also serves ``adk_mesh.v1.SessionService`` (the session API: list, read,
    create, update the state of and delete its sessions; list, load, save and delete their
    artifacts) over the same stores, at the front door like a root run
    (:mod:`adk_mesh.mesh._session_service`).

    A store the server opened from a URL is its own: :meth:`stop` closes it once the calls
    are done. Stores passed as objects are the caller's to close.
    """

    _service_names = (_SERVICE_NAME, _SESSION_SERVICE_NAME)

    def __init__(
        self,
        agent: BaseAgent,
        *,
        app_name: str | None = None,
        session_service: SessionService | str | None = None,
        artifact_service: ArtifactService | str | None = None,
        memory_service: MemoryService | str | None = None,
        max_transfers: int = DEFAULT_MAX_TRANSFERS,
        limits: ServerLimits | None = None,
        plugins: Sequence[Plugin] | None = None,
        credential_service: CredentialService | None = None,
        max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
        max_artifact_bytes_in_flight: int | None = None,
    ) -> None:
        super().__init__()
        # Made now rather than at start(): a limit it refuses is a ConfigError of the
        # constructor, before any store is opened or port bound.
        self._session_servicer = SessionServicer(
            self,
            max_artifact_bytes=max_artifact_bytes,
            max_artifact_bytes_in_flight=max_artifact_bytes_in_flight,
        )
        self.plugins = plugin_manager(plugins)
        self.credential_service = credential_service
        self.max_artifact_bytes = max_artifact_bytes
        #: The artifact bytes in transfer, the session API's and the delegated runs' together.
        self.artifact_budget = self._session_servicer.artifact_budget
        #: The stores this server opened from URLs: its own to close.
        self._owned: list[SessionService | ArtifactService | MemoryService] = []
        if isinstance(session_service, str):
            session_service = session_service_from_url(session_service)
            self._owned.append(session_service)
        if isinstance(artifact_service, str):
            artifact_service = artifact_service_from_url(artifact_service)
            self._owned.append(artifact_service)
        if isinstance(memory_service, str):
            memory_service = memory_service_from_url(memory_service)
            self._owned.append(memory_service)
        self.agent = agent
        self.app_name = app_name or agent.name
        try:
            check_id("app_name", self.app_name)
        except InvalidArgumentError as error:
            raise ConfigError(f"{error.message}: pass app_name=... to AgentServer") from None
        self.session_service = session_service or InMemorySessionService()
        self.artifact_service = artifact_service
        self.memory_service = memory_service
        self.max_transfers = max_transfers
        self.limits = limits or ServerLimits()

    async def warm_up(self) -> None:
        """Warm up the toolsets the served agents hold before serving (see
        :meth:`MeshServer.warm_up`): those of every ``LlmAgent`` of the tree, its sub-agents
        and the agents its ``AgentTool`` tools run in this process included. An
        ``McpToolset`` starts its MCP server, opens its session and lists once; all warm up
        at once, each within its own timeouts. A toolset that fails is one warning in the
        log, never an error: its first listing tries again. Remote agents and remote
        toolsets (:class:`RemoteToolset`) are left to their own services. Idempotent.

        ``adk-mesh serve agent`` (:func:`~adk_mesh.mesh.serve.serve_until_signal`) calls it
        before the server starts; code that starts an AgentServer itself calls
        ``await server.warm_up()`` before :meth:`start` (``start`` does not warm up).
        """
        await warm_up_toolsets(held_toolsets(self.agent), f"agent service {self.agent.name!r}")

    def _register(self, server: grpc.aio.Server) -> None:
        add_servicer(
            agent_pb2_grpc.add_AgentServiceServicer_to_server, _AgentServicer(self), server
        )
        # The session API over the same stores, doors and limits (see _session_service).
        add_servicer(
            session_pb2_grpc.add_SessionServiceServicer_to_server, self._session_servicer, server
        )

    async def stop(self, grace: float | None = None) -> None:
        """Stop serving (see :meth:`MeshServer.stop`), then close the toolsets the served
        agents hold (an ``McpToolset``'s MCP server is stopped, a ``RemoteToolset``'s channel
        closed; as google-adk's ``Runner.close``; a later listing connects again) and the
        stores this server opened from URLs, once the cancelled calls have recorded how their
        turns ended (bounded by :data:`CLOSE_STORES_AFTER`; a failure to close is logged)."""
        await super().stop(grace)
        if self.plugins is not None:
            await self.plugins.close()
        owned, self._owned = self._owned, []
        toolsets = held_toolsets(self.agent)
        if not owned and not toolsets:
            return
        if not await self._gate.wait_idle(CLOSE_STORES_AFTER):
            logger.warning("closing the stores with %d calls still ending", self._gate.in_flight)
        await close_toolsets(toolsets, f"agent service {self.agent.name!r}")
        for store in owned:
            try:
                await store.close()
            except Exception as error:
                logger.warning("closing %s failed: %s", type(store).__name__, error)

    def find(self, agent_name: str) -> BaseAgent:
        """The agent of the served tree called ``agent_name`` (empty: the root)."""
        if not agent_name:
            return self.agent
        agent = self.agent.find_agent(agent_name)
        if agent is None:
            names = ", ".join(a.name for a in self.agent.walk())
            raise AgentNotFoundError(
                f"agent {shown(agent_name)} is not served here; this service serves {names}"
            )
        return agent

    async def run_root(
        self, request: agent_pb2.RunRequest
    ) -> AsyncGenerator[agent_pb2.RunResponse, None]:
        """A user turn through this service's Runner, persisted in its session store."""
        responses = await self._root_responses(request, invocation_id=new_invocation_id())
        async with aclosing(responses):
            async for response in responses:
                yield response

    async def _root_responses(
        self,
        request: agent_pb2.RunRequest,
        *,
        invocation_id: str,
        session_used: Callable[[str], None] | None = None,
    ) -> AsyncGenerator[agent_pb2.RunResponse, None]:
        """Check a root run and return its responses, not yet started (the turn takes and
        loads its session when the stream starts). Every check comes before the session is
        touched. ``session_used`` is told the session's id once it is loaded or created."""
        root = request.root
        run_config = self._run_config(request)
        agent = self.find(request.agent_name)
        if root.app_name:
            self._check_id("RootRun.app_name", root.app_name)
            if root.app_name != self.app_name:
                raise NotFoundError(
                    f"app {root.app_name!r} is not served here; this service serves "
                    f"{self.app_name!r} (or leave app_name empty)"
                )
        if not root.user_id:
            raise InvalidArgumentError("RootRun.user_id is empty; name the user")
        self._check_id("RootRun.user_id", root.user_id)
        if root.session_id:
            self._check_id("RootRun.session_id", root.session_id)
        message = _new_message(root.new_message if root.HasField("new_message") else None)
        metadata = check_request_metadata(root.request_metadata)
        return self._root_turn(
            agent,
            root.user_id,
            root.session_id,
            message,
            run_config,
            invocation_id=invocation_id,
            batches=request.accept_event_batches,
            request_metadata=metadata,
            session_used=session_used,
        )

    async def _root_turn(
        self,
        agent: BaseAgent,
        user_id: str,
        session_id: str,
        message: Content,
        run_config: RunConfig,
        *,
        invocation_id: str,
        batches: bool,
        request_metadata: dict[str, str] | None = None,
        session_used: Callable[[str], None] | None = None,
    ) -> AsyncGenerator[agent_pb2.RunResponse, None]:
        """One root turn, holding its session from before it is read until the last response:
        wait for the turn in flight on it in this process, claim it against other processes,
        get or create it, run it. Taken here, in the stream, so a stream never started holds
        nothing. A new session (no id) is named first and held too: the first response names
        it, and from then on a client may send it another turn, a state update or a delete,
        which must wait for this turn as on any other session."""
        new = not session_id
        if new:
            session_id = random_uuid()
        async with AsyncExitStack() as held:
            await held.enter_async_context(
                turns_for(self.session_service).hold(self.app_name, user_id, session_id)
            )
            await held.enter_async_context(
                self.session_service.claim_session(
                    app_name=self.app_name, user_id=user_id, session_id=session_id
                )
            )
            session = await self._load_session(user_id, session_id, new=new)
            if session_used is not None:
                session_used(session.id)
            responses = self._run_turn(
                agent,
                session,
                message,
                run_config,
                invocation_id=invocation_id,
                batches=batches,
                request_metadata=request_metadata,
            )
            async with aclosing(responses):
                async for response in responses:
                    yield response

    def _run_turn(
        self,
        agent: BaseAgent,
        session: Session,
        message: Content,
        run_config: RunConfig,
        *,
        invocation_id: str,
        batches: bool,
        request_metadata: dict[str, str] | None = None,
    ) -> AsyncGenerator[agent_pb2.RunResponse, None]:
        runner = Runner(
            agent=agent,
            app_name=self.app_name,
            session_service=self.session_service,
            artifact_service=self.artifact_service,
            memory_service=self.memory_service,
            max_transfers=self.max_transfers,
            max_delegation_depth=self.limits.max_delegation_depth,
            tool_timeout=self.limits.tool_timeout,
            plugins=self.plugins,
            credential_service=self.credential_service,
        )
        # The session just read (or created) goes to the Runner: one read per root run.
        events = runner.run(
            user_id=session.user_id,
            session_id=session.id,
            new_message=message,
            run_config=run_config,
            invocation_id=invocation_id,
            session=session,
            request_metadata=request_metadata,
        )
        # The plugins' on_event sees (and may replace) every event of the turn, partial ones
        # included: with such a plugin, the RemoteAgents' partial events are decoded, not
        # relayed past it (mesh._relay).
        relayed = None if self.plugins is not None and self.plugins.has("on_event") else session
        return _responses(events, session_id=session.id, batches=batches, session=relayed)

    def _check_id(self, what: str, value: str) -> None:
        check_id(what, value, max_chars=self.limits.max_id_chars)

    def _run_config(self, request: agent_pb2.RunRequest, *, llm_calls_made: int = 0) -> RunConfig:
        """The request's RunConfig under this server's limits: ``max_llm_calls`` may lower the
        server's, never raise it (0: the server's); a negative one is refused. A delegated run
        counts on from the ``llm_calls_made`` before it."""
        requested = request.run_config.max_llm_calls
        if requested < 0:
            raise InvalidArgumentError(
                f"RunConfig.max_llm_calls is {requested}; send 0 (this server's limit, "
                f"{self.limits.max_llm_calls}) or a lower positive number"
            )
        return codec.run_config_from_proto(
            request.run_config,
            max_llm_calls=llm_calls_made + self.limits.llm_calls_for(requested),
        )

    async def _load_session(self, user_id: str, session_id: str, *, new: bool) -> Session:
        """The session ``session_id`` (whole), created when it is ``new`` (an id this server
        just made) or unknown (get-or-create: a concurrent creator's session is read, not
        refused). Its events are the store's shared ones (``get_session_shared``): a store
        that keeps decoded histories reads only what was appended since, as the Runner does on
        its own."""
        service = self.session_service
        if new:
            return await service.create_session(
                app_name=self.app_name, user_id=user_id, session_id=session_id
            )
        return await service.get_or_create_session(
            app_name=self.app_name,
            user_id=user_id,
            session_id=session_id,
            shared_events=True,
        )

    async def run_delegated(
        self, request: agent_pb2.RunRequest, *, deadline: float | None = None
    ) -> AsyncGenerator[agent_pb2.RunResponse, None]:
        """A run handed down by another service: nothing persisted, its events streamed (see
        the class docstring for the two kinds)."""
        _, responses = await self._delegated_run(request, deadline=deadline)
        async with aclosing(responses):
            async for response in responses:
                yield response

    def _check_delegated(self, request: agent_pb2.RunRequest) -> None:
        """Refuse a delegated run this server cannot serve, before anything runs."""
        delegated = request.delegated
        if delegated.delegation_depth < 0 or delegated.max_delegation_depth < 0:
            raise InvalidArgumentError(
                f"a delegation depth cannot be negative (delegation_depth="
                f"{delegated.delegation_depth}, max_delegation_depth="
                f"{delegated.max_delegation_depth})"
            )
        if delegated.invocation_id:
            self._check_id("DelegatedRun.invocation_id", delegated.invocation_id)
        view = delegated.session
        for what, value in (
            ("SessionView.app_name", view.app_name),
            ("SessionView.user_id", view.user_id),
            ("SessionView.session_id", view.session_id),
        ):
            if value:
                self._check_id(what, value)
        if len(delegated.branch) > MAX_BRANCH_CHARS:
            raise InvalidArgumentError(
                f"DelegatedRun.branch is longer than {MAX_BRANCH_CHARS} characters"
            )
        if len(delegated.call_path) > MAX_CALL_PATH:
            raise InvalidArgumentError(
                f"DelegatedRun.call_path names more than {MAX_CALL_PATH} agent services"
            )
        for name in delegated.call_path:
            if not name or len(name) > self.limits.max_id_chars:
                raise InvalidArgumentError(
                    f"DelegatedRun.call_path holds {shown(name)}: agent service names are 1 to "
                    f"{self.limits.max_id_chars} characters"
                )
        if delegated.llm_calls_made < 0:
            raise InvalidArgumentError(
                f"DelegatedRun.llm_calls_made is {delegated.llm_calls_made}; it cannot be negative"
            )
        if len(delegated.scope.artifact_prefixes) > MAX_CALL_PATH:
            raise InvalidArgumentError(
                f"DelegatedRun.scope names the prefixes of more than {MAX_CALL_PATH} delegations"
            )
        for prefixes in delegated.scope.artifact_prefixes:
            _check_strings("DelegatedRun.scope.artifact_prefixes", prefixes.values)
        if delegated.HasField("agent_tool"):
            policy = delegated.agent_tool
            if policy.max_transfers < 0:
                raise InvalidArgumentError(
                    f"DelegationPolicy.max_transfers is {policy.max_transfers}; send 0 (this "
                    "server's limit) or a lower positive number"
                )
            for what, values in (
                ("state_keys", policy.state_keys.values),
                ("output_state_keys", policy.output_state_keys.values),
                ("artifact_prefixes", policy.artifact_prefixes.values),
                ("forward_credentials", policy.forward_credentials),
                ("forward_request_metadata", policy.forward_request_metadata),
            ):
                _check_strings(f"DelegationPolicy.{what}", values)
            if not delegated.HasField("user_content"):
                raise InvalidArgumentError(
                    "an AgentTool's delegated run needs its request in DelegatedRun.user_content"
                )
        if delegated.HasField("caller_tree"):
            tree = delegated.caller_tree
            summaries = [tree.parent] if tree.HasField("parent") else []
            summaries.extend(tree.peers)
            if len(summaries) > MAX_CALLER_AGENTS:
                raise InvalidArgumentError(
                    f"DelegatedRun.caller_tree names more than {MAX_CALLER_AGENTS} agents"
                )
            for summary in summaries:
                try:
                    validate_agent_name(summary.name)
                except ConfigError:
                    raise InvalidArgumentError(
                        f"DelegatedRun.caller_tree names {shown(summary.name)}, which is not an "
                        "agent name"
                    ) from None
                if len(summary.name) > self.limits.max_id_chars:
                    raise InvalidArgumentError(
                        f"DelegatedRun.caller_tree names an agent longer than "
                        f"{self.limits.max_id_chars} characters"
                    )
                if len(summary.description) > MAX_DESCRIPTION_CHARS:
                    raise InvalidArgumentError(
                        f"DelegatedRun.caller_tree describes {summary.name!r} in more than "
                        f"{MAX_DESCRIPTION_CHARS} characters"
                    )

    async def _delegated_run(
        self,
        request: agent_pb2.RunRequest,
        *,
        deadline: float | None,
        caller: CallerChannel | None = None,
        mutual_tls: bool = False,
        named: NamedHistory | None = None,
        checked: bool = False,
    ) -> tuple[_DelegatedCall, AsyncGenerator[agent_pb2.RunResponse, None]]:
        """Check a delegated run and build its context; return them and the run's responses,
        not started. With ``caller`` (``RunDelegated``), the run's artifacts and memory are the
        caller's, reached over the call; else this server's own stores. Forwarded credentials
        and request metadata are taken only when the call came over ``mutual_tls``. ``named``:
        the events the view names by digest (:class:`NamedHistory`); by default those this
        process kept. ``checked``: the caller already refused what :meth:`_check_delegated`
        refuses (before loading named events)."""
        delegated = request.delegated
        if not checked:
            self._check_delegated(request)
        if named is None:
            named = NamedHistory(delegated.session, can_ask=False)
        named_events, named_weights = named.window()
        forwarded_credentials, forwarded_metadata = forwarded_secrets(
            delegated, mutual_tls=mutual_tls
        )
        made = delegated.llm_calls_made
        # The invocation's limit as the caller counts it: the calls made, plus what is left
        # (which this server's limit may lower).
        run_config = self._run_config(request, llm_calls_made=made)
        agent = self.find(request.agent_name)
        call_path = tuple(delegated.call_path)
        if self.agent.name in call_path:
            path = " -> ".join((*call_path, self.agent.name))
            raise DelegationError(
                f"call-path cycle: {path}; agent service {self.agent.name!r} is already running "
                "this invocation"
            )
        limit = self.limits.delegation_depth_for(delegated.max_delegation_depth)
        if delegated.delegation_depth > limit:
            raise DelegationError(
                f"delegation depth {delegated.delegation_depth} exceeds the caller's limit of "
                f"{limit}"
            )
        user_content = (
            _new_message(delegated.user_content) if delegated.HasField("user_content") else None
        )
        scope = codec.delegation_scope_from_proto(delegated.scope)
        # The view as sent (temp: keys included: they belong to this invocation) is the run's
        # session, in a service of its own that persists nothing.
        view = delegated.session
        service = ViewSessions()
        session = service.hold(
            codec.session_view_from_proto(
                view,
                app_name=view.app_name or self.app_name,
                user_id=view.user_id or "anonymous",
                session_id=view.session_id or random_uuid(),
                named=named_events,
                named_digests=named.digests(),
                named_weights=named_weights,
            )
        )
        # The caller's (a mesh caller's is the root run's), or a new one for a caller that
        # sent none.
        invocation_id = delegated.invocation_id or new_invocation_id()
        agent_tool = delegated.HasField("agent_tool")
        handed_to = agent
        branch = delegated.branch
        if not agent_tool:
            # Resumed where the conversation was left, in this tree as across the two: an
            # answered call goes on where it was made, on its branch.
            message = user_content or Content(role="user", parts=[])
            # A workflow's step runs from itself, as in process; only a call the message
            # answers takes it back to where the call was made.
            if not delegated.workflow_step or answered_call_event(session, message) is not None:
                # An author behind a RemoteAgent of this tree (a third service's) resumes there.
                # Asking its service who runs there is the invocation's work: its spans carry
                # the invocation's ids, also when the caller sent none (not of the mesh).
                with invocation_scope(invocation_id, session, branch):
                    await load_agents_behind(agent, session, message)
                agent = find_agent_to_run(agent, session, message, foreign_authors_end=True)
                branch = find_branch_to_run(agent, session, message) or branch
        if delegated.no_caller_stores:
            # The caller has none to offer: as it would answer over the call.
            artifacts, memory = None, None
        elif caller is None:
            artifacts, memory = self.artifact_service, self.memory_service
        else:
            artifacts, memory = CallerArtifacts(caller), CallerMemory(caller)
        ctx = InvocationContext(
            invocation_id=invocation_id,
            agent=agent,
            session=session,
            session_service=service,
            artifact_service=scoped_artifacts(artifacts, scope),
            memory_service=scoped_memory(memory, scope),
            run_config=run_config,
            user_content=user_content,
            branch=branch,
            delegation_depth=delegated.delegation_depth,
            max_delegation_depth=limit,
            call_path=(*call_path, self.agent.name),
            deadline=deadline,
            tool_timeout=self.limits.tool_timeout,
            plugins=self.plugins,
            credential_service=self.credential_service,
            forwarded_credentials=forwarded_credentials,
            request_metadata=forwarded_metadata,
            delegation_scope=scope,
            caller_tree=(
                codec.caller_tree_from_proto(delegated.caller_tree, handed_to.name)
                if delegated.HasField("caller_tree")
                else None
            ),
            global_instruction=(
                delegated.global_instruction if delegated.HasField("global_instruction") else None
            ),
            # The view is a window: what it left out is the caller's, fetched over the call.
            history=(
                None
                if caller is None
                else CallerHistory(
                    caller,
                    omitted=delegated.session.omitted_events - len(named_events),
                    abridged=delegated.session.abridged_event_ids,
                    first_event_id=session.events[0].id if session.events else "",
                )
            ),
        )
        ctx.add_llm_calls(made)
        call = _DelegatedCall(ctx, llm_calls_before=made)
        annotate_current_span(ctx)
        batches = request.accept_event_batches
        if agent_tool:
            assert user_content is not None  # checked with the request
            max_transfers = delegated.agent_tool.max_transfers
            delegation = Delegation(
                policy=codec.delegation_policy_from_proto(delegated.agent_tool),
                request=user_content,
                branch=delegated.branch,
                depth=delegated.delegation_depth,
                max_depth=limit,
                max_transfers=(
                    min(max_transfers, self.max_transfers) if max_transfers else self.max_transfers
                ),
            )
            events = _delegation_events(ctx, agent, delegation, call)
            return call, _ending(
                _responses(
                    events, session_id="", batches=batches, stored_by_caller=True, sized=call
                ),
                call,
            )

        async def applied() -> AsyncGenerator[Event, None]:
            # The view is updated as events flow, so later steps see earlier changes.
            async with aclosing(
                follow_transfers(
                    ctx,
                    agent,
                    root=self.agent,
                    max_transfers=self.max_transfers,
                    leave_foreign_transfers=True,
                )
            ) as events:
                async for event in events:
                    if not event.partial:
                        target = event.actions.transfer_to_agent
                        if target and self.agent.find_agent(target) is None:
                            # Not this tree's agent: follow_transfers ends the run here and
                            # leaves it to the caller (see RunResponse.left_transfer_event_id).
                            call.left_transfer = event.id
                        await service.append_event(session, event)
                    yield event

        return call, _ending(
            _responses(
                applied(),
                session_id="",
                batches=batches,
                session=session,
                stored_by_caller=True,
                sized=call,
            ),
            call,
        )

    async def card(self, agent_name: str) -> agent_pb2.AgentCard:
        """What ``agent_name`` (empty: the root) is and what it exposes: its tools with every
        toolset listed (one that cannot be listed now is left out), and for an agent that runs
        in another service, the card that service gives, under this tree's name."""
        agent = self.find(agent_name)
        location = agent.remote_location
        if location is not None:
            # Asked with the TLS the agent's own runs use (a RemoteAgent's ``tls``), not
            # only ADK_MESH_TLS_*: a service reached with other credentials refuses others.
            tls = agent.tls if isinstance(agent, RemoteAgent) else None
            card = await _remote_card(agent.name, location.target, location.agent_name, tls)
            card.name = agent.name
            card.description = agent.description or card.description
            # A RemoteAgent told (or already taught) whether it keeps the conversation says
            # so; one that does not know yet passes on what the service behind it said.
            keeps = (
                agent.declared_keeps_conversation()
                if isinstance(agent, RemoteAgent)
                else agent.keeps_conversation
            )
            if keeps is not None:
                card.keeps_conversation = keeps
            return card
        # An agent standing for one elsewhere (an A2aAgent) learns from there whether it keeps
        # the conversation before its card says it; any other answers at once.
        await agent.load_keeps_conversation()
        ctx = InvocationContext(
            invocation_id=new_invocation_id(),
            agent=agent,
            session=Session(id="", app_name=self.app_name, user_id=""),
        )
        tools = await agent.canonical_tools(ReadonlyContext(ctx), skip_unavailable=True)
        card = agent_pb2.AgentCard(
            name=agent.name,
            description=agent.description,
            sub_agents=[
                agent_pb2.AgentSummary(name=sub.name, description=sub.description)
                for sub in agent.sub_agents
            ],
            tools=[codec.declaration_to_proto(tool.declaration()) for tool in tools],
            supports_streaming=True,
            agent_type=type(agent).__name__,
            app_name=self.app_name,
            # Whether it answers the user's next turn after answering last: a caller's
            # RemoteAgent standing for it does the same (the next turn goes where it would
            # in one process).
            keeps_conversation=keeps_as_child(agent),
        )
        # What a caller's AgentTool declares for it (the same parameters as in process).
        schemas = agent.declared_schemas()
        codec.fill_card_schemas(
            card,
            schemas.input.json_schema if schemas.input is not None else None,
            schemas.output.json_schema if schemas.output is not None else None,
        )
        return card


def keeps_as_child(agent: BaseAgent) -> bool:
    """Whether ``agent`` keeps the conversation as a child of another agent: what its card
    says.

    A card is read by a caller's RemoteAgent, which puts the agent under the caller's root,
    so the answer must be the one the agent gives with a parent even when it is served as
    its service's root. An LlmAgent keeps the conversation at the root of a tree, but under a
    parent only when it may hand back to it; any other agent answers the same with or
    without a parent (a workflow never keeps it; an agent standing for one in another service
    says what it was told or learned: see :meth:`AgentServer.card`, which has it learn first).
    """
    if isinstance(agent, LlmAgent):
        return not agent.disallow_transfer_to_parent
    return agent.keeps_conversation


DESCRIBE_TIMEOUT = 10.0


#: A delegated run's branch and call path are bounded like its ids: agent names joined.
MAX_BRANCH_CHARS = 1024
MAX_CALL_PATH = 64
#: A delegation policy's key and prefix lists, and the caller's agents a run may transfer to.
MAX_POLICY_STRINGS = 1024
MAX_POLICY_STRING_CHARS = 1024
MAX_CALLER_AGENTS = 256
MAX_DESCRIPTION_CHARS = 4096


def _check_strings(what: str, values: Sequence[str]) -> None:
    if len(values) > MAX_POLICY_STRINGS:
        raise InvalidArgumentError(f"{what} holds more than {MAX_POLICY_STRINGS} entries")
    for value in values:
        if len(value) > MAX_POLICY_STRING_CHARS:
            raise InvalidArgumentError(
                f"{what} holds an entry longer than {MAX_POLICY_STRING_CHARS} characters"
            )


@dataclasses.dataclass
class _DelegatedCall:
    """A delegated run being served: its context, and what its last response says."""

    ctx: InvocationContext
    llm_calls_before: int
    outcome: DelegationOutcome | None = None
    #: The encoded size of the response the run's stream yielded last, as it was built (the
    #: sizes its events' encodings measured anyway): what RunDelegated's InteractiveCall
    #: counts the response at while it waits for the caller, without encoding it again.
    response_bytes: int = 0
    #: The id of the event that transferred to an agent outside the served tree, left to the
    #: caller (``RunResponse.left_transfer_event_id``), until the response carrying it is sent.
    left_transfer: str = ""

    def response_size(self, response: agent_pb2.RunResponse) -> int:
        """``response``'s size, asked as soon as the stream yielded it (:attr:`response_bytes`)."""
        return self.response_bytes

    @property
    def invocation_id(self) -> str:
        return self.ctx.invocation_id

    @property
    def llm_calls(self) -> int:
        """The model calls made by this run (not those its caller made before)."""
        return self.ctx.llm_calls - self.llm_calls_before

    def last_response(self) -> agent_pb2.RunResponse | None:
        """The outcome of an AgentTool's child (with ``invocation_ended`` when the child
        ended its delegation: the caller's side of the child ends too, as in process); or the
        end of the invocation, when the run ended it; else nothing more."""
        if self.outcome is not None:
            return agent_pb2.RunResponse(
                outcome=codec.delegation_outcome_to_proto(self.outcome),
                invocation_ended=self.outcome.ended,
            )
        if self.ctx.ended:
            return agent_pb2.RunResponse(invocation_ended=True)
        return None


async def _delegation_events(
    ctx: InvocationContext, agent: BaseAgent, delegation: Delegation, call: _DelegatedCall
) -> AsyncGenerator[Event, None]:
    """Run an AgentTool's child under its policy; yield the events it forwards, keep the
    outcome in ``call``."""
    async with TaskFeed[Event, DelegationOutcome]() as feed:
        feed.start(agent.run_delegation(ctx, delegation, feed.send_nowait))
        async for event in feed:
            yield event
        call.outcome = feed.result()


async def _ending(
    responses: AsyncGenerator[agent_pb2.RunResponse, None], call: _DelegatedCall
) -> AsyncGenerator[agent_pb2.RunResponse, None]:
    """``responses``, then the call's last response (:meth:`_DelegatedCall.last_response`)
    once they are done, if any. Each says the model calls the run made so far
    (``RunResponse.llm_calls``): the trailer that has them comes only at the end of the call,
    and a caller whose run is cancelled (a parallel sibling escalated) never reads it, while in
    process each call counts as it is made."""
    async with aclosing(responses):
        async for response in responses:
            response.llm_calls = min(call.llm_calls, _MAX_INT32)
            if call.left_transfer:
                carried = (
                    [response.event.id]
                    if response.HasField("event")
                    else [event.id for event in response.events]
                )
                if call.left_transfer in carried:
                    response.left_transfer_event_id = call.left_transfer
                    call.left_transfer = ""
            yield response
    final = call.last_response()
    if final is not None:
        final.llm_calls = min(call.llm_calls, _MAX_INT32)
        # Measured: once a call, and an outcome's state changes may be large.
        call.response_bytes = final.ByteSize()
        yield final


_MAX_INT32 = 2**31 - 1


async def _remote_card(
    name: str, target: str, agent_name: str, tls: ClientTLS | None = None
) -> agent_pb2.AgentCard:
    """The AgentCard the agent service at ``target`` gives for ``agent_name``, asked over
    ``tls`` (``None``: ADK_MESH_TLS_*, as a RemoteAgent without ``tls`` reaches it)."""
    channel = open_channel(target, tls=tls) if tls is not None else open_channel(target)
    async with channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        try:
            response = await stub.Describe(
                agent_pb2.DescribeRequest(agent_name=agent_name), timeout=DESCRIBE_TIMEOUT
            )
        except grpc.RpcError as error:
            raise error_from_downstream(error, f"remote agent {name!r}", target) from None
    card: agent_pb2.AgentCard = response.card
    return card


def _new_message(message: content_pb2.Content | None) -> Content:
    """The message that starts a run: the user's, with more than empty text (see
    :func:`~adk_mesh.runner.check_new_message`); refused when absent."""
    if message is None or not message.parts:
        raise InvalidArgumentError("the new message has no parts; send text or data")
    return check_new_message(codec.content_from_proto(message))


#: At most this many events in one batched response, and this many waiting for the client.
MAX_BATCH_EVENTS = 256
MAX_PENDING_EVENTS = 1024
#: ... and at most this many bytes of events (their memory, estimated) waiting for the client,
#: whichever comes first: a count alone lets a run of large events (inline media, big tool
#: results, up to a message each) make the server hold gigabytes for one slow client. One
#: event larger than this still goes, alone.
MAX_PENDING_BYTES = 64 * 1024 * 1024
#: A batched response holds at most this many bytes of events (more only for one event alone).
MAX_BATCH_BYTES = 4 * 1024 * 1024
#: An event whose encoding is larger than this is streamed abridged: whole, it would not fit
#: the mesh's message limit.
MAX_EVENT_BYTES = MAX_MESSAGE_BYTES - 64 * 1024


#: With batches, a run's first events still go one per response, read in the handler's own
#: task: a short run (an answer, a call and its response) pays for no task and no queue.
INLINE_EVENTS = 8


async def _responses(
    events: AsyncGenerator[Event, None],
    *,
    session_id: str,
    batches: bool,
    session: Session | None = None,
    stored_by_caller: bool = False,
    sized: _DelegatedCall | None = None,
) -> AsyncGenerator[agent_pb2.RunResponse, None]:
    """Encode a run's events as RunResponses; the first one names the session.

    Without batches, one event per response. With batches, the first INLINE_EVENTS events
    too; from then on the run goes on in a task of its own while the client reads: every
    event that is ready when the next response is due goes into it (``events``), so a fast
    stream of partials is not bound to one message per event, and a slow client holds the run
    back once MAX_PENDING_EVENTS events or MAX_PENDING_BYTES of them wait (:class:`_Backlog`).
    From then on too, the RemoteAgents of the run on ``session`` (the one this stream serves)
    hand over the partial events their peers stream as they came, without decoding them
    (:mod:`adk_mesh.mesh._relay`).

    ``stored_by_caller``: a delegated run's events, which its caller stores as they come;
    one that cannot go whole fails the run (:func:`_encode_event`). ``sized``: a delegated
    run's call, told the size of each response before it is yielded
    (:attr:`_DelegatedCall.response_bytes`).
    """
    async with aclosing(events):
        inline = 0
        while not batches or inline < INLINE_EVENTS:
            try:
                event = await anext(events)
            except StopAsyncIteration:
                if session_id:
                    # A run that yielded nothing still names the session it used (one it
                    # created holds the user's message): the client's next turn goes there.
                    yield agent_pb2.RunResponse(session_id=session_id)
                return
            response = agent_pb2.RunResponse(session_id=session_id)
            session_id = ""
            size = _encode_event(event, response.event, stored_by_caller=stored_by_caller)
            if sized is not None:
                sized.response_bytes = size
            yield response
            inline += 1
        # Closed before ``events``: its task runs them until the batches stop (a stream closed
        # while it waits to send would otherwise close ``events`` mid-step, from here).
        async with aclosing(
            _batched(events, session_id, session, stored_by_caller, sized)
        ) as batched:
            async for response in batched:
                yield response


async def _batched(
    events: AsyncGenerator[Event, None],
    session_id: str,
    session: Session | None,
    stored_by_caller: bool,
    sized: _DelegatedCall | None = None,
) -> AsyncGenerator[agent_pb2.RunResponse, None]:
    """The rest of a run's events (closed by the caller), batched as :func:`_responses` says."""
    backlog = _Backlog()

    async def produce() -> None:
        if session is not None:
            PartialRelay(session, backlog).open()  # in this task: the run's
        async for event in events:
            if not backlog.offer(event):
                await backlog.send(event)

    async with backlog.feed as feed:
        feed.start(produce())
        async for first in feed:
            batch = [first, *feed.take_ready(MAX_BATCH_EVENTS - 1)]
            response = agent_pb2.RunResponse(session_id=session_id)
            session_id = ""
            if len(batch) == 1:
                event, held = batch[0]
                size = _encode_event(event, response.event, stored_by_caller=stored_by_caller)
                if sized is not None:
                    sized.response_bytes = size
                yield response
                backlog.sent(held)
                continue
            size = 0
            held = 0  # the backlog's bytes of the events in ``response``
            for event, weight in batch:
                try:
                    added = _encode_event(
                        event, response.events.add(), stored_by_caller=stored_by_caller
                    )
                except Exception:
                    # An event that cannot go (a delegated run's state change too large)
                    # fails the run after the events before it, as every other failure:
                    # the caller stores those, so they must not fall with their batch.
                    del response.events[-1]
                    if response.events:
                        if sized is not None:
                            sized.response_bytes = size
                        yield _batch_or_single(response)
                    raise
                if size and size + added > MAX_BATCH_BYTES:
                    # The batch is full: this event opens the next one.
                    del response.events[-1]
                    if sized is not None:
                        sized.response_bytes = size
                    yield _batch_or_single(response)
                    backlog.sent(held)
                    response = agent_pb2.RunResponse()
                    size = held = 0
                    _encode_event(event, response.events.add(), stored_by_caller=stored_by_caller)
                size += added
                held += weight
            if sized is not None:
                sized.response_bytes = size
            yield _batch_or_single(response)
            backlog.sent(held)


class _Backlog:
    """The events of one served run waiting for its client (:func:`_batched`): at most
    MAX_PENDING_EVENTS of them and MAX_PENDING_BYTES of their memory, whichever comes first.
    A sender (the run, or a RemoteAgent relaying its peer's partial events) waits for room:
    the run goes at its client's pace instead of buffering. An event counts from when it is
    sent until the response carrying it has gone to gRPC, so the events taken for a batch and
    being encoded count too."""

    __slots__ = ("_rooms", "bytes", "feed")

    def __init__(self) -> None:
        self.feed = TaskFeed[tuple[Event | event_pb2.Event, int], None](
            max_pending=MAX_PENDING_EVENTS
        )
        #: The estimated memory of the events sent and not yet gone (:meth:`sent`).
        self.bytes = 0
        # One future per send waiting for bytes: a cancelled send cancels only its own.
        self._rooms: list[asyncio.Future[None]] = []

    def offer(self, event: Event | event_pb2.Event) -> bool:
        """Hand ``event`` to the stream if there is room now, without waiting (a streamed
        token's usual case: no coroutine made); ``False``: nothing was done, :meth:`send`."""
        size = _held_bytes(event)
        if self.bytes and self.bytes + size > MAX_PENDING_BYTES:
            return False
        try:
            self.feed.send_nowait((event, size))
        except asyncio.QueueFull:
            return False
        self.bytes += size
        return True

    async def send(self, event: Event | event_pb2.Event) -> None:
        """Hand ``event`` to the stream; waits while the backlog is full. An event larger
        than MAX_PENDING_BYTES waits for an empty backlog, then goes alone."""
        size = _held_bytes(event)
        while self.bytes and self.bytes + size > MAX_PENDING_BYTES:
            room = asyncio.get_running_loop().create_future()
            self._rooms.append(room)
            try:
                await room
            finally:
                self._rooms.remove(room)
        self.bytes += size
        try:
            try:
                self.feed.send_nowait((event, size))
            except asyncio.QueueFull:  # the client is behind by a count of events
                await self.feed.send((event, size))
        except BaseException:
            self.sent(size)  # never sent (cancelled): it holds no room
            raise

    def sent(self, size: int) -> None:
        """Events of ``size`` bytes went to the client: let every waiting send look for room
        again (each takes it or waits anew; concurrent senders are a run's parallel
        branches)."""
        self.bytes -= size
        for room in self._rooms:
            if not room.done():
                room.set_result(None)


def _held_bytes(event: Event | event_pb2.Event) -> int:
    """What ``event`` costs in memory while it waits: :func:`~adk_mesh._memory.event_bytes`,
    or for a relayed message its encoded size and the message object."""
    if isinstance(event, event_pb2.Event):
        return MESSAGE_OBJECT_BYTES + event.ByteSize()
    return event_bytes(event)


def _encode_event(
    event: Event | event_pb2.Event, into: event_pb2.Event, *, stored_by_caller: bool = False
) -> int:
    """Encode ``event`` into ``into`` (empty) and return its size. A response is never left
    empty or too large to send: an event the wire cannot carry as it is (a JSON value it
    refuses) or larger than MAX_EVENT_BYTES goes abridged (:func:`codec.abridged_event`, each
    large or unfit part replaced by a placeholder); it stays whole in the session store. A
    partial event a RemoteAgent relayed (a message already) is copied as it came.

    ``stored_by_caller``: the session store is the caller's, which keeps the abridged copy.
    Its placeholders say what was left out, but a state change left out would be lost without
    a word (the caller's state would miss a write the run made and went on from): an event
    whose abridged copy drops one raises :class:`~adk_mesh.errors.AgentError` instead, and
    the run fails."""
    if isinstance(event, event_pb2.Event):
        into.CopyFrom(event)
        size = into.ByteSize()
        if size <= MAX_EVENT_BYTES:
            return size
        into.Clear()
        event = codec.event_from_proto(event)
    try:
        codec.event_to_proto(event, into=into)
    except AdkJSONError as error:
        why = error.message
    else:
        size = into.ByteSize()
        if size <= MAX_EVENT_BYTES:
            return size
        why = f"{size} bytes encoded, over the mesh's message limit of {MAX_EVENT_BYTES} bytes"
    abridged = codec.abridged_event(event)
    if stored_by_caller and not event.partial:
        lost = sorted(event.actions.state_delta.keys() - abridged.actions.state_delta.keys())
        if lost:
            raise AgentError(
                f"agent {event.author!r} changed state {', '.join(map(repr, lost))} by more "
                f"than one message can carry to the caller, which stores it ({why}); keep "
                "large values in artifacts"
            )
    logger.warning("event %s is sent abridged: %s", event.id, why)
    into.Clear()
    codec.event_to_proto(abridged, into=into)
    return into.ByteSize()


def _batch_or_single(response: agent_pb2.RunResponse) -> agent_pb2.RunResponse:
    """A batch of one goes in ``event``, as a response without batches would carry it."""
    if len(response.events) == 1:
        response.event.CopyFrom(response.events[0])
        del response.events[:]
    return response


class _AgentServicer(agent_pb2_grpc.AgentServiceServicer):  # type: ignore[misc]
    """Thin adapter: validates the request, calls the server's runtime, maps errors once."""

    def __init__(self, server: AgentServer) -> None:
        self._server = server

    async def Run(
        self, request: agent_pb2.RunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[agent_pb2.RunResponse]:
        async with error_boundary(context, "Run") as call:
            deadline = deadline_of(context)
            # The Runner builds a root run's context: it reads the deadline from here. This
            # call runs in a task of its own, so the value ends with it.
            serving_deadline.set(deadline)
            mode = request.WhichOneof("mode")
            delegated: _DelegatedCall | None = None
            if mode == "root":

                def name_session(session_id: str) -> None:
                    # On every root run that got as far as its session, success or failure:
                    # a new session holds the user's message from the start, and a run that
                    # fails before its first response would otherwise never name it. It is
                    # the caller's own session (its user's, checked before), nothing more.
                    context.set_trailing_metadata(((SESSION_ID_TRAILER, session_id),))

                call.invocation_id = new_invocation_id()
                responses = await self._server._root_responses(
                    request, invocation_id=call.invocation_id, session_used=name_session
                )
            elif mode == "delegated":
                delegated, responses = await self._server._delegated_run(
                    request, deadline=deadline, mutual_tls=is_mutual_tls(context)
                )
                call.invocation_id = delegated.invocation_id
            else:
                raise InvalidArgumentError(
                    "RunRequest sets no mode; set root (a user turn) or delegated"
                )
            # A run's span still open when the client cancels says cancelled, also when
            # gRPC closes the stream later, from another task (see served_call).
            responses = served_call(responses)
            try:
                async with aclosing(responses):
                    async for response in responses:
                        yield response
            finally:
                if delegated is not None:
                    # The caller's invocation counts these calls against its limit.
                    context.set_trailing_metadata(((LLM_CALLS_TRAILER, str(delegated.llm_calls)),))

    async def RunDelegated(
        self,
        requests: AsyncIterator[agent_pb2.RunDelegatedRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[agent_pb2.RunDelegatedResponse]:
        async with error_boundary(context, "RunDelegated") as call:
            deadline = deadline_of(context)
            serving_deadline.set(deadline)
            interactive = InteractiveCall(agent_pb2.RunDelegatedResponse)
            # What this service holds of one artifact, here as in the session API.
            interactive.channel.max_artifact_bytes = self._server.max_artifact_bytes
            interactive.channel.budget = self._server.artifact_budget
            request = await interactive.start(requests, "run")
            if request.WhichOneof("mode") != "delegated":
                raise InvalidArgumentError(
                    "RunDelegated carries delegated runs only; a user turn goes to Run"
                )
            # The events the view names by digest, and those not kept here loaded from the
            # caller, before the run starts.
            self._server._check_delegated(request)
            named = NamedHistory(request.delegated.session, can_ask=True)
            while (ask := named.next_request()) is not None:
                yield interactive.request_before_stream(ask)
                named.take(await interactive.answer_before_stream(ask.request_id))
            delegated, responses = await self._server._delegated_run(
                request,
                deadline=deadline,
                caller=interactive.channel,
                mutual_tls=is_mutual_tls(context),
                named=named,
                checked=True,
            )
            call.invocation_id = delegated.invocation_id
            responses = served_call(responses)
            try:
                async for message in interactive.stream(responses, size_of=delegated.response_size):
                    yield message
            finally:
                context.set_trailing_metadata(((LLM_CALLS_TRAILER, str(delegated.llm_calls)),))

    async def Describe(
        self, request: agent_pb2.DescribeRequest, context: grpc.aio.ServicerContext
    ) -> agent_pb2.DescribeResponse:
        async with error_boundary(context, "Describe"):
            return agent_pb2.DescribeResponse(card=await self._server.card(request.agent_name))
        raise AssertionError("unreachable: error_boundary aborts")  # pragma: no cover
