"""RemoteAgent: an agent served by an AgentServer in another process, used as a local one."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from adk_mesh import codec
from adk_mesh.agents._schemas import AgentSchema
from adk_mesh.agents.base import AgentSchemas, BaseAgent, RemoteLocation
from adk_mesh.agents.delegation import (
    DelegationOutcome,
    child_context,
    forwarded,
    scoped_artifacts,
    scoped_memory,
)
from adk_mesh.artifacts.base import ArtifactService
from adk_mesh.contexts import InvocationContext, ReadonlyContext, TransferTarget
from adk_mesh.errors import AdkError, AgentError, ConfigError
from adk_mesh.memory.base import MemoryService
from adk_mesh.mesh._caller_contexts import ContextAnswers, answer_context_request
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES, open_channel
from adk_mesh.mesh._deadline import call_timeout
from adk_mesh.mesh._forwarding import forward
from adk_mesh.mesh._limits import llm_calls_in
from adk_mesh.mesh._relay import relay_for
from adk_mesh.mesh._status import error_from_downstream, wait_to_resend
from adk_mesh.mesh.security import ClientTLS
from adk_mesh.runner import run_on_user_message, with_run_hooks
from adk_mesh.sessions.base import Session
from adk_mesh.telemetry._spans import trace_agent_run
from adk_mesh.types import Event, EventActions
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, tool_pb2

if TYPE_CHECKING:
    from adk_mesh.agents.delegation import Delegation

__all__ = ["RemoteAgent"]

logger = logging.getLogger(__name__)

#: Seconds a RemoteAgent waits for its service's AgentCard (its schemas).
DESCRIBE_TIMEOUT = 10.0
#: At most this many names of agents behind a RemoteAgent are kept (a served tree is smaller).
MAX_AGENTS_BEHIND = 1024
#: Seconds after a failed walk of its service's cards before a RemoteAgent asks again: a
#: service down would otherwise hold every turn that needs the names up to DESCRIBE_TIMEOUT.
AGENTS_BEHIND_RETRY_AFTER = 30.0


class RemoteAgent(BaseAgent):
    """Runs an agent of another service through ``RunDelegated``; yields its events.

    The remote side sees what the caller's context holds — the session's state and a window
    of its non-partial events, the user's message, the invocation id, branch, delegation
    depth, the call path of agent services, the model calls made and left, and this
    invocation's artifacts and memory, which it reaches over the call: each load, save or
    listing of an artifact and each memory search is answered here, from this context's
    stores, as far as the AgentTool delegations it runs inside allow (their scope, which the
    remote side applies too) — persists nothing and streams every event back. So:

    * as a transfer target (``sub_agents=[RemoteAgent(...)]``) the caller's Runner appends the
      remote events to the caller's session like those of a local sub-agent. The run also
      carries this agent's parent and peers here (as an LlmAgent in its place could transfer
      to them), so the remote agent's model can hand the conversation back; and it answers
      the user's next turn as the agent it stands for would in process
      (:attr:`keeps_conversation`, from its service's card: an LLM agent does, a workflow
      starts over);
    * inside ``AgentTool(RemoteAgent(...))`` the whole delegation runs there: the call carries
      the AgentTool's policy and what it lets the child see of the caller's session; the
      remote service applies the policy to the child with the same code as in process
      (:func:`~adk_mesh.agents.delegation.run_delegation`) and answers with the forwarded
      events and the outcome (answer, write-back, artifacts saved), which the AgentTool
      merges into the parent as for a local child.

    A transfer the remote service followed inside its own tree reaches the caller without
    ``transfer_to_agent`` (it was already carried out); a transfer to an agent outside that
    tree ends the remote run and is followed by the caller. When the remote agents end the
    invocation (``end_invocation``), the caller's invocation ends too; an AgentTool's remote
    child that ends it ends its delegation only, as in process: the caller's ``after_agent``
    hooks for it do not run, and the AgentTool carries on.

    A run the service refused before running any of it, at its limit of calls at once
    (``SERVER_BUSY``), is sent again once, after the delay the refusal hints, when that delay
    ends before the invocation's deadline: nothing of it ran, and the channel's round-robin
    may pick another replica. A second refusal, and any other failure, is the run's failure.

    The call carries the time that remains of the invocation's deadline (or ``timeout`` when
    that is shorter); once the deadline has passed, no call is made and
    :class:`~adk_mesh.errors.DeadlineExceededError` is raised at once. It also carries the
    model calls the invocation has left (``RunConfig.max_llm_calls``), not its whole limit;
    with none left, no call is made (:class:`~adk_mesh.errors.LlmCallLimitError`). The calls
    the remote run reports having made count against the invocation here, as each response
    comes (``RunResponse.llm_calls``): a run cancelled midway (a parallel sibling escalated or
    failed) has counted those made up to the last response read. Concurrent remote runs (a
    ParallelAgent's branches, the AgentTool calls of one model answer) are each sent what is
    left when they start, so together they could make more: the response whose report takes
    the invocation past its limit ends that run here — the call cancelled, its events not
    passed on, :class:`~adk_mesh.errors.LlmCallLimitError` raised as by the call past the
    limit in process. What remains over the limit are the calls made before the caller read
    that report: those the report itself counts past the limit, and those the runs still
    going make before the cancellation reaches them (a call a service is in, at least), each
    run never more than it was sent.

    Failures of the call are raised as the :class:`~adk_mesh.errors.AdkError` the remote side
    raised; a failure of the transport (the service unreachable, ...) names this agent, and
    the address goes to this service's log. Closing the generator early (or cancelling the
    task) cancels the call, which cancels the remote agent.

    What it costs: a run that has nothing to ask this side — no artifact store, no memory, and
    the whole history in its view — goes as a plain unary-stream ``Run``
    (``DelegatedRun.no_caller_stores``); the others as a ``RunDelegated`` call, on which the
    remote run reaches them. Inside an :class:`AgentServer`'s run, once that server streams in
    batches, the partial events the remote agent streams go on to the server's stream as the
    messages they came in, undecoded (:mod:`adk_mesh.mesh._relay`); everywhere else, and for
    every other event, they are decoded into :class:`~adk_mesh.types.Event` objects.

    Args:
        name: this agent's name in the caller's tree (and the author of its events).
        target: ``host:port`` or ``dns:///host:port`` of the AgentServer.
        description: what the agent does; the caller's model reads it to route to it.
        agent_name: which agent of the remote tree runs (default: the served root).
        timeout: deadline in seconds of one remote run (default: none).
        history_max_events: the history window: at most this many of the newest events of
            the session go with the call (default: 1000; 0: none). Past it, the window's start
            moves a quarter of it at a time, so the other side's request history (and a
            provider's prompt cache) holds for many turns.
        history_max_bytes: and at most this many bytes of them, encoded (default: 8 MiB). An
            event larger than what is left is sent abridged; the window ends at the first
            that does not fit even so. The view tells the remote side how many older events
            it left out (``SessionView.omitted_events``), so no history length or event size
            makes a call fail (:func:`~adk_mesh.codec.session_view_to_proto`); and fewer
            bytes when the rest of the request (the user's message, the state: they go
            whole) leaves less of the mesh's message limit (32 MiB). Events sent
            to the service before are not encoded again, nor sent again: the view names them
            by digest, and the service takes them from what it kept, or asks for them
            (``SessionView.history_digests``, :class:`~adk_mesh.codec.EncodedEvents`,
            :class:`~adk_mesh.codec.DecodedEvents`).
        tls: TLS to the service's mesh door (default: ``ADK_MESH_TLS_CA`` / ``_CERT`` /
            ``_KEY`` from the environment; plaintext when they are unset).
        keeps_conversation: whether, when it answered last, it answers the user's next turn
            (default: what the agent it stands for says, ``AgentCard.keeps_conversation``,
            asked when the Runner picks who answers a turn it answered last:
            :meth:`load_keeps_conversation`; yes, as an LLM agent, while that is unknown — an
            older service, or one that cannot be reached). Say it to override the card; e.g.
            no for a served root LlmAgent that may not transfer to its parent (its card says
            yes: as a root it has none).
    """

    def __init__(
        self,
        name: str,
        target: str,
        *,
        description: str = "",
        agent_name: str = "",
        timeout: float | None = None,
        history_max_events: int = codec.DEFAULT_HISTORY_MAX_EVENTS,
        history_max_bytes: int = codec.DEFAULT_HISTORY_MAX_BYTES,
        tls: ClientTLS | None = None,
        keeps_conversation: bool | None = None,
    ) -> None:
        super().__init__(name=name, description=description)
        if history_max_events < 0 or history_max_bytes < 0:
            raise ConfigError(
                f"the history window of RemoteAgent {name!r} cannot be negative "
                f"(history_max_events={history_max_events}, "
                f"history_max_bytes={history_max_bytes})"
            )
        self.history_max_events = history_max_events
        self.history_max_bytes = history_max_bytes
        self.target = target
        self.tls = tls
        self.agent_name = agent_name
        self.timeout = timeout
        self._keeps_conversation = keeps_conversation  # None: what the card says
        # What the served agent's card said (None: nothing, an older service), once one was
        # read; and when asking for it last failed (time.monotonic()).
        self._card_keeps_conversation: bool | None = None
        self._card_read = False
        self._card_failed_at = -AGENTS_BEHIND_RETRY_AFTER
        self._channel: grpc.aio.Channel | None = None
        self._cached_stub: Any = None
        self._schemas: AgentSchemas | None = None
        # The agents of the served tree that run behind this one (agents_behind), and whether
        # its service's cards listed them all.
        self._behind: frozenset[str] = frozenset()
        self._behind_described = False
        self._behind_failed_at = -AGENTS_BEHIND_RETRY_AFTER  # time.monotonic() of a failure
        # By invocation: the events of the remote agents' after-agent hooks that followed a
        # transfer the service left to this side, for after_agent_events (bounded: a chain
        # that failed never asks for them).
        self._handbacks: codec.LruDict[str, list[Event]] = codec.LruDict(256, 4096, len)

    @property
    def keeps_conversation(self) -> bool:
        """The ``keeps_conversation`` argument when given; else what its service's card said
        once one was read (:meth:`load_keeps_conversation`); else yes, as an LLM agent: its
        model is offered its parent and peers here, so it can hand the conversation back."""
        declared = self.declared_keeps_conversation()
        return True if declared is None else declared

    def declared_keeps_conversation(self) -> bool | None:
        """The ``keeps_conversation`` argument, else what its service's card said; ``None``
        while neither is known (an AgentServer serving this agent then passes on the card of
        the service behind it as it is)."""
        if self._keeps_conversation is not None:
            return self._keeps_conversation
        return self._card_keeps_conversation

    def _note_card(self, card: agent_pb2.AgentCard) -> None:
        """Learn from the served agent's card (any Describe of ``agent_name`` that answered)."""
        self._card_read = True
        if card.HasField("keeps_conversation"):
            self._card_keeps_conversation = card.keeps_conversation

    async def load_keeps_conversation(self) -> bool:
        """:attr:`keeps_conversation`, once its service's card (``Describe``) said it: asked
        once, unless the argument was given or a card was read already (an AgentTool's
        schemas, :meth:`load_agents_behind`). A failure is a warning, the default (yes)
        stands, and the service is not asked again for :data:`AGENTS_BEHIND_RETRY_AFTER`
        seconds: a service down would otherwise hold every turn up to DESCRIBE_TIMEOUT."""
        if (
            self._keeps_conversation is not None
            or self._card_read
            or time.monotonic() - self._card_failed_at < AGENTS_BEHIND_RETRY_AFTER
        ):
            return self.keeps_conversation
        what = f"remote agent {self.name!r}"
        try:
            response = await self._stub().Describe(
                agent_pb2.DescribeRequest(agent_name=self.agent_name), timeout=DESCRIBE_TIMEOUT
            )
        except grpc.RpcError as error:
            self._card_failed_at = time.monotonic()
            failure = error_from_downstream(error, what, self.target)
            logger.warning(
                "whether %s keeps the conversation is unknown for now (taken as yes): %s",
                what,
                failure.message,
            )
            return self.keeps_conversation
        self._note_card(response.card)
        return self.keeps_conversation

    def _session_view(
        self,
        session: Session,
        into: agent_pb2.SessionView,
        *,
        whole_history: bool,
        delivery: codec.ViewDelivery,
        max_bytes: int | None = None,
    ) -> None:
        """Fill ``into`` with what the remote side sees of ``session``: its state and this
        agent's window of its history (of at most ``max_bytes``, by default its own bound).
        ``whole_history``: ``session`` is the session itself, not a delegation's filtered view
        of it, so its window is kept for the next turn (:data:`~adk_mesh.codec.VIEW_MEMOS`)."""
        codec.session_view_to_proto(
            session,
            max_events=self.history_max_events,
            max_bytes=self.history_max_bytes if max_bytes is None else max_bytes,
            into=into,
            digests_for=self.target,
            memo=(session.app_name, session.user_id, session.id) if whole_history else None,
            delivery=delivery,
        )

    @property
    def remote_location(self) -> RemoteLocation:
        return RemoteLocation(self.target, self.agent_name or self.name)

    def _stub(self) -> Any:
        # Opened on first use, so that the channel belongs to the running event loop.
        # The stub is kept with its channel: a stub builds a multi-callable per method.
        if self._channel is None:
            self._channel = (
                open_channel(self.target, tls=self.tls)
                if self.tls is not None
                else open_channel(self.target)
            )
            self._cached_stub = agent_pb2_grpc.AgentServiceStub(self._channel)
        return self._cached_stub

    async def close(self) -> None:
        """Close the channel. Idempotent."""
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()

    def declared_schemas(self) -> AgentSchemas:
        """The schemas its service's AgentCard gave, once :meth:`load_schemas` asked."""
        return self._schemas or AgentSchemas()

    async def load_schemas(self) -> AgentSchemas:
        """The remote agent's ``input_schema`` / ``output_schema``, from its service's
        AgentCard (``Describe``), asked once and kept: an ``AgentTool(RemoteAgent(...))``
        declares the same parameters as for the agent in process. When the card cannot be
        had (the service is down, refuses the call) the agent is taken as free text for now,
        with a warning, and asked again next time."""
        if self._schemas is not None:
            return self._schemas
        what = f"remote agent {self.name!r}"
        try:
            response = await self._stub().Describe(
                agent_pb2.DescribeRequest(agent_name=self.agent_name), timeout=DESCRIBE_TIMEOUT
            )
            self._note_card(response.card)
            input_schema, output_schema = codec.card_schemas(response.card)
            schemas = AgentSchemas(
                input=AgentSchema(input_schema, what=f"the input_schema of {what}")
                if input_schema is not None
                else None,
                output=AgentSchema(output_schema, what=f"the output_schema of {what}")
                if output_schema is not None
                else None,
            )
        except grpc.RpcError as error:
            failure = error_from_downstream(error, what, self.target)
            logger.warning("the schemas of %s are unknown for now: %s", what, failure.message)
            return AgentSchemas()
        except AdkError as error:
            logger.warning("the schemas of %s are unusable: %s", what, error.message)
            return AgentSchemas()
        self._schemas = schemas
        return schemas

    def agents_behind(self) -> frozenset[str]:
        """The agents of its service's tree known to run in its place: the authors of the
        events its runs relayed, and once :meth:`load_agents_behind` asked, the agents of
        the served subtree its service's cards list."""
        return self._behind

    def _note_behind(self, author: str) -> None:
        # Rebuilt only for a new name: this runs for every event the agent relays.
        if author in self._behind or author == self.name:
            return
        if len(self._behind) < MAX_AGENTS_BEHIND:
            self._behind = self._behind | {author}

    async def load_agents_behind(self) -> frozenset[str]:
        """:meth:`agents_behind`, once its service's AgentCards (``Describe``) listed the
        served subtree: the served agent's card, then each sub-agent's, level by level; an
        agent that service serves from a third one is listed with its own sub-agents, which
        that service does not describe (NOT_FOUND, left there: this agent leads to them
        anyway). Asked until one walk succeeds; a failure (the service down, refusing the
        call) is a warning, the names known so far stay, and the service is not asked again
        for :data:`AGENTS_BEHIND_RETRY_AFTER` seconds."""
        if self._behind_described or (
            time.monotonic() - self._behind_failed_at < AGENTS_BEHIND_RETRY_AFTER
        ):
            return self.agents_behind()
        stub = self._stub()
        what = f"remote agent {self.name!r}"
        level = [self.agent_name]
        described: set[str] = set()
        try:
            while level and len(self._behind) < MAX_AGENTS_BEHIND:
                described.update(level)
                answers = await asyncio.gather(
                    *(
                        stub.Describe(
                            agent_pb2.DescribeRequest(agent_name=name), timeout=DESCRIBE_TIMEOUT
                        )
                        for name in level
                    ),
                    return_exceptions=True,
                )
                next_level: list[str] = []
                for name, answer in zip(level, answers, strict=True):
                    if isinstance(answer, grpc.RpcError) and answer.code() == (
                        grpc.StatusCode.NOT_FOUND
                    ):
                        continue
                    if isinstance(answer, BaseException):
                        raise answer
                    card = answer.card
                    if name == self.agent_name:
                        self._note_card(card)  # the served agent's own card
                    self._note_behind(card.name)
                    for sub_agent in card.sub_agents:
                        self._note_behind(sub_agent.name)
                        if sub_agent.name not in described:
                            next_level.append(sub_agent.name)
                level = next_level
        except grpc.RpcError as error:
            self._behind_failed_at = time.monotonic()
            failure = error_from_downstream(error, what, self.target)
            logger.warning("the agents behind %s are unknown for now: %s", what, failure.message)
            return self.agents_behind()
        except AdkError as error:
            self._behind_failed_at = time.monotonic()
            logger.warning("the agents behind %s are unknown for now: %s", what, error.message)
            return self.agents_behind()
        self._behind_described = True
        return self.agents_behind()

    async def after_agent_events(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        """After a transfer the remote run left to this side (its agent handed back to an
        agent here): the events of the remote agents' after-agent hooks that ran at the end of
        the remote run, now that this side's agents are done, as they come in process; then
        this agent's own hooks."""
        handback = self._handbacks.get(ctx.invocation_id)
        if handback is not None:
            self._handbacks.drop(ctx.invocation_id)
            if not ctx.ended:
                for event in handback:
                    yield event
        async with aclosing(super().after_agent_events(ctx)) as events:
            async for event in events:
                yield event

    def _call_path(self, ctx: InvocationContext) -> tuple[str, ...]:
        if ctx.call_path:
            return ctx.call_path
        # A root run: its own service begins the path. Within an AgentTool the tree above
        # is out of sight, and the app name stands for that service.
        root = self.root_agent
        return (root.name if root is not self else ctx.app_name,)

    def _run_config(self, ctx: InvocationContext) -> agent_pb2.RunConfig:
        run_config = codec.run_config_to_proto(ctx.run_config)
        # With none left, as the first model call would fail in process (the same error).
        ctx.check_llm_calls(making=1)
        # What is left, not the limit: the hop downstream cannot make the invocation exceed
        # it alone. Concurrent hops (a ParallelAgent's branches) are each sent what is left
        # now; the calls they report count as they come (_count_llm_calls), and the report
        # that takes the invocation past its limit ends that run. 0 (no bound here) leaves
        # the limit to the remote server.
        run_config.max_llm_calls = ctx.llm_calls_left or 0
        return run_config

    def _caller_tree(self) -> agent_pb2.CallerTree | None:
        """This agent's parent and peers, as an LlmAgent in its place may transfer to them."""
        parent = self.parent_agent
        if parent is None or parent.owns_child_transfers:
            return None
        return codec.caller_tree_to_proto(
            TransferTarget(parent.name, parent.description),
            [TransferTarget(p.name, p.description) for p in parent.sub_agents if p is not self],
        )

    def _new_request(
        self,
        ctx: InvocationContext,
        session: Session,
        artifacts: ArtifactService | None,
        memory: MemoryService | None,
        *,
        whole_history: bool,
        delivery: codec.ViewDelivery,
    ) -> agent_pb2.RunDelegatedRequest:
        """The request of a remote run of ``ctx``'s invocation seeing ``session`` (the
        session itself when ``whole_history``), in the message ``RunDelegated`` sends
        (``.run`` alone goes as a plain ``Run``). Built in place: a view of a long history is
        never copied from message to message."""
        message = agent_pb2.RunDelegatedRequest()
        request = message.run
        request.agent_name = self.agent_name
        request.accept_event_batches = True
        request.run_config.CopyFrom(self._run_config(ctx))
        delegated = request.delegated
        delegated.invocation_id = ctx.invocation_id
        delegated.call_path.extend(self._call_path(ctx))
        delegated.llm_calls_made = ctx.llm_calls
        delegated.scope.CopyFrom(codec.delegation_scope_to_proto(ctx.delegation_scope))
        self._session_view(
            session, into=delegated.session, whole_history=whole_history, delivery=delivery
        )
        delegated.no_caller_stores = _nothing_to_ask(artifacts, memory, delegated.session)
        return message

    def _fit(
        self,
        message: agent_pb2.RunDelegatedRequest,
        session: Session,
        artifacts: ArtifactService | None,
        memory: MemoryService | None,
        *,
        whole_history: bool,
        delivery: codec.ViewDelivery,
    ) -> None:
        """Shrink the history window of the finished request ``message`` to what the rest of
        it leaves of one message. The user's message and the state go whole: a large one (an
        image the user sent) and a full window would make a request the mesh cannot carry,
        and the call would fail where the agent in process runs.

        Raises:
            AgentError: even with less history, the request is larger than a message.
        """
        delegated = message.run.delegated
        view = delegated.session
        rest = delegated.user_content.ByteSize() + _state_bytes(view)
        if rest + self.history_max_bytes <= MAX_REQUEST_BYTES // 2:
            return  # far from the limit (the common case): nothing to measure
        excess = message.ByteSize() - MAX_REQUEST_BYTES
        if excess <= 0:
            return
        history = sum(event.ByteSize() for event in view.events)
        # Each event's framing (a tag and a length) is not counted in a window's bound.
        framing = 8 * len(view.events)
        if history:
            view.Clear()
            self._session_view(
                session,
                into=view,
                whole_history=whole_history,
                delivery=delivery,
                max_bytes=max(0, history - excess - framing),
            )
            delegated.no_caller_stores = _nothing_to_ask(artifacts, memory, view)
            excess = message.ByteSize() - MAX_REQUEST_BYTES
        if excess > 0:
            raise AgentError(
                f"remote agent {self.name!r}: the run's request is {excess} bytes over the "
                f"mesh's message limit ({MAX_MESSAGE_BYTES} bytes) even with less history: "
                "the user's message and the session's state go whole"
            )

    async def _global_instruction(self, ctx: InvocationContext) -> str | None:
        """The global instruction of the tree this agent stands in, which the remote agents
        follow as they would in process; ``None`` when this agent is the tree's root (the
        remote tree's own root is then the root)."""
        if ctx.global_instruction is not None:
            return ctx.global_instruction  # this tree is itself part of a caller's
        if self.parent_agent is None:
            return None
        from adk_mesh.agents.llm_agent import LlmAgent

        root = self.root_agent
        if isinstance(root, LlmAgent) and root.global_instruction:
            return await root.canonical_global_instruction(ReadonlyContext(ctx))
        return ""

    def _request(
        self,
        ctx: InvocationContext,
        global_instruction: str | None,
        delivery: codec.ViewDelivery,
    ) -> agent_pb2.RunDelegatedRequest:
        message = self._new_request(
            ctx,
            ctx.session,
            ctx.artifact_service,
            ctx.memory_service,
            whole_history=True,
            delivery=delivery,
        )
        delegated = message.run.delegated
        if global_instruction is not None:
            delegated.global_instruction = global_instruction
        delegated.branch = ctx.branch
        delegated.delegation_depth = ctx.delegation_depth
        delegated.max_delegation_depth = ctx.max_delegation_depth
        if ctx.user_content is not None:
            delegated.user_content.CopyFrom(codec.content_to_proto(ctx.user_content))
        caller_tree = self._caller_tree()
        if caller_tree is not None:
            delegated.caller_tree.CopyFrom(caller_tree)
        parent = self.parent_agent
        if parent is not None and parent.owns_child_transfers:
            # A workflow runs its step from the step itself, never from the agent of the
            # step's tree that answered last: the service must not resume that one.
            delegated.workflow_step = True
        self._fit(
            message,
            ctx.session,
            ctx.artifact_service,
            ctx.memory_service,
            whole_history=True,
            delivery=delivery,
        )
        return message

    def _call(
        self,
        message: agent_pb2.RunDelegatedRequest,
        timeout: float | None,
        ctx: InvocationContext,
        *,
        artifacts: ArtifactService | None,
        memory: MemoryService | None,
        history: Sequence[Event],
    ) -> tuple[Any, AsyncIterator[agent_pb2.RunResponse]]:
        """Start the remote run: the call and its responses. A run with nothing to ask this
        side goes as a plain ``Run``; otherwise over ``RunDelegated``, on which the remote run
        reaches ``artifacts``, ``memory`` and the part of ``history`` its view left out."""
        stub = self._stub()
        if message.run.delegated.no_caller_stores:
            call = stub.Run(message.run, timeout=timeout)
            return call, call
        call = stub.RunDelegated(timeout=timeout)
        answering = _answering(
            call,
            message,
            ctx,
            artifacts=artifacts,
            memory=memory,
            history=history,
            history_max_bytes=self.history_max_bytes,
        )
        return call, answering

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        what = f"remote agent {self.name!r}"
        timeout = call_timeout(ctx.deadline, self.timeout, what)
        # The service took the view once it answers: only then do the events it was sent
        # count as its own (codec.ViewDelivery).
        delivery = codec.ViewDelivery()
        request = self._request(ctx, await self._global_instruction(ctx), delivery)

        def start(again: bool) -> tuple[Any, AsyncIterator[agent_pb2.RunResponse]]:
            return self._call(
                request,
                call_timeout(ctx.deadline, self.timeout, what) if again else timeout,
                ctx,
                artifacts=ctx.artifact_service,
                memory=ctx.memory_service,
                history=ctx.session.events,
            )

        run = _SentAgainWhenBusy(start, ctx.deadline)
        responses = run.responses()
        held: Event | None = None
        # The held transfer is one the service says it left to this side
        # (RunResponse.left_transfer_event_id): the events after it are the after-agent hooks
        # of the remote agents it stopped, which run once this side's agents are done.
        left = False
        handback: list[Event] = []
        counted = 0  # the remote run's model calls counted here so far
        try:
            async for response in responses:
                delivery.delivered()
                left_id = response.left_transfer_event_id
                # Counted as they come, before the response's events go up: a caller that
                # stops here (a parallel sibling escalated) never reads the trailer; and the
                # events of calls past the invocation's limit never go up, as in process
                # those calls are never made.
                counted = _count_llm_calls(ctx, counted, response.llm_calls)
                # Inside an AgentServer's run, partial events go on to its stream as they
                # came, not decoded (see mesh._relay); the relay is looked up per response, as
                # the server may start relaying while this run goes on.
                relay = relay_for(ctx)
                for message in codec.run_response_messages(response):
                    if held is not None and left:
                        if not message.llm_response.partial:
                            event = codec.event_from_proto(message)
                            self._note_behind(event.author)
                            handback.append(event)
                        continue
                    if held is not None:
                        # More events followed the transfer: the remote tree carried it out.
                        yield _without_transfer(held)
                        held = None
                    if relay is not None and message.llm_response.partial:
                        await relay.forward(message)
                        continue
                    event = codec.event_from_proto(message)
                    if not event.partial:
                        self._note_behind(event.author)
                    target = event.actions.transfer_to_agent
                    if target and not event.partial:
                        if self.root_agent.find_agent(target) is None:
                            # Not this tree's to follow: the remote tree carries it out (or
                            # ends its run, the target being nobody's). It goes up now, as in
                            # process, not when the remote agent's next event comes.
                            yield _without_transfer(event)
                            continue
                        # This tree's agent, unless the remote tree has one of that name:
                        # the service says so (an older one does not: then whether more
                        # events follow tells).
                        held = event
                        left = bool(left_id) and event.id == left_id
                        continue
                    yield event
                if response.invocation_ended:
                    ctx.end_invocation()
            delivery.delivered()
            # Counted before the last event goes up: a caller that follows a transfer in it
            # closes this generator there, and the next agent's calls count against the limit.
            _count_llm_calls(ctx, counted, llm_calls_in(await run.call.trailing_metadata()))
            if held is not None:
                if handback:
                    self._handbacks.put(ctx.invocation_id, handback)
                # The last event: a transfer the remote tree left to this one.
                yield held
        except grpc.RpcError as error:
            # The remote run's own failure is what ended it, even past the limit.
            _count_llm_calls(ctx, counted, llm_calls_in(error.trailing_metadata()), check=False)
            failure = error_from_downstream(error, f"remote agent {self.name!r}", self.target)
            if held is not None:
                # The remote run went on past the transfer, then failed: the event happened
                # (with its state and artifact changes) and is the turn's, as in process,
                # where it is stored before the failure; not followed here, as the run failed.
                yield _without_transfer(held)
                for event in handback:
                    yield event
            raise failure from error
        finally:
            run.call.cancel()
            await responses.aclose()

    async def run_delegation(
        self,
        parent: InvocationContext,
        delegation: Delegation,
        forward: Callable[[Event], None] | None = None,
    ) -> DelegationOutcome:
        """Hand the whole AgentTool delegation to the remote service, which applies its policy
        (see the class docstring); forwarded events go to ``forward`` as they arrive.

        With ``delegation.run_hooks`` the run hooks of the caller's plugins are applied here,
        around the call, as to a child in process: ``on_user_message`` (its Content is the
        request sent), ``before_run`` (its Content answers, and nothing is sent),
        ``on_event`` on each event of the child (the service is asked to send them all, and
        the answer is the last text as ``on_event`` left it), ``after_run``. They see the
        child's events as forwarded (without state, artifact or transfer actions: those
        come back in the outcome), and the child's context, as in process (its session
        is what the policy projects of the caller's; its ``end_invocation`` ends the
        delegation, not the caller's invocation).

        Inside them, as for this agent run as a transfer target and for a child in process,
        the plugins' ``before_agent`` / ``after_agent`` hooks see this agent as one agent
        (:meth:`BaseAgent._run_with_callbacks`): a ``before_agent`` Content answers for the
        child, and nothing is sent; an ``after_agent`` Content is a reply of the child's,
        its answer when it has text. They run in a context of the child's, as in process:
        a session of its own holding what the policy projects of the caller's (the state
        sent, the history window), to which the remote run's written-back changes are
        applied before ``after_agent``. What they write there is the child's state change
        made on this side: not sent to the remote run (which starts from the projection
        sent), but given back with the child's own through the policy's write-back
        (``output_state_keys``; the AgentTool then checks ``REJECT_CONFLICTS``), in the
        order of the run (``before_agent``'s, the remote child's, ``after_agent``'s); the
        artifacts they save are the child's too."""
        outcome: list[DelegationOutcome] = []
        policy = delegation.policy
        # The span a local child's run would have: invoke_agent, on the child's branch.
        span_ctx = parent.for_agent(self, branch=delegation.branch)
        span_ctx.delegation_depth = delegation.depth
        plugins = parent.plugins if delegation.run_hooks else None
        hooked = plugins is not None and plugins.has("on_event")
        # Only what the policy lets the child see leaves this service (the remote side
        # projects again, which changes nothing).
        view = Session(
            id=parent.session_id,
            app_name=parent.app_name,
            user_id=parent.user_id,
            state=policy.child_state(parent.session.state),
            events=policy.child_history(parent.session.events),
        )
        # The child's context, as in process: its hooks' (run and agent hooks alike), with an
        # invocation end of its own (a hook's end_invocation ends the delegation, never the
        # caller's invocation) and the request as the caller asked it.
        child_ctx = self._child_context(parent, delegation, view)
        sent = delegation
        if plugins is not None:
            if plugins.has("on_user_message"):
                request = await run_on_user_message(plugins, child_ctx, delegation.request)
                sent = dataclasses.replace(sent, request=request)
            if hooked and not sent.policy.forward_events:
                # on_event sees every event of the child, as in process: the service sends
                # them all; only the policy's forwarding shows them in the caller's stream.
                sent = dataclasses.replace(
                    sent, policy=dataclasses.replace(sent.policy, forward_events=True)
                )

        async def delegated(ctx: InvocationContext) -> AsyncGenerator[Event, None]:
            async with aclosing(self._delegate(parent, sent, view, outcome)) as events:
                async for event in events:
                    yield event
            # after_agent sees the child's state as it ended, as far as this side knows it:
            # with the changes the remote run wrote back.
            ctx.session.state.update(outcome[0].state_changes)
            if outcome[0].ended:
                # The remote child ended its delegation: so does this side of it (its
                # after_agent hooks do not run), as for the child in process. ``ctx`` is the
                # child's own context: the caller's invocation goes on.
                ctx.end_invocation()

        events = trace_agent_run(self, span_ctx, self._run_with_callbacks(child_ctx, delegated))
        if plugins is not None:
            events = with_run_hooks(plugins, child_ctx, events)
        answer = ""
        answered_after = False  # whether an after_agent reply gave the last text
        # What the agent hooks changed, by the actions of their events (the remote child's
        # changes come in its outcome): before the remote run ([0]), and after it ([1]).
        hook_state: list[dict[str, Any]] = [{}, {}]
        hook_artifacts: list[dict[str, int]] = [{}, {}]
        async with aclosing(events):
            async for event in events:
                after = 1 if outcome else 0
                hook_state[after].update(event.actions.state_delta)
                hook_artifacts[after].update(event.actions.artifact_delta)
                if event.llm_response.content is not None and event.text:
                    answer = event.text
                    answered_after = bool(after)
                if forward is not None and delegation.policy.forward_events:
                    shown = forwarded(event)
                    if hooked:
                        parent.note_forwarded_hooked(shown)
                    forward(shown)
        if plugins is not None and plugins.has("after_run"):
            await plugins.run("after_run", invocation_context=child_ctx)
        if not outcome:
            # before_run or before_agent answered for the child (or ended it): nothing was sent.
            result = DelegationOutcome(answer=answer)
        else:
            result = outcome[0]
            if hooked or answered_after:
                # The answer as on_event left it (a redaction, say), or after_agent's reply,
                # as a child in process gives.
                result.answer = answer
        # In the order of the run, as a child in process folds its events' changes.
        result.state_changes = policy.written_back(
            {**hook_state[0], **result.state_changes, **hook_state[1]}
        )
        result.artifact_changes = {
            **hook_artifacts[0],
            **result.artifact_changes,
            **hook_artifacts[1],
        }
        # Whoever ended the child (the remote run, or a before_agent hook here), a service
        # serving this delegation in turn reports it to its own caller.
        result.ended = child_ctx.ended
        return result

    def _child_context(
        self, parent: InvocationContext, delegation: Delegation, view: Session
    ) -> InvocationContext:
        """The context of this agent's ``before_agent`` / ``after_agent`` hooks as an
        AgentTool's child of ``parent``: the one the child would have in process
        (:func:`~adk_mesh.agents.delegation.run_delegation`), over a session of its own
        seeded from ``view`` (its state copied: what the hooks write is not sent)."""
        scope = delegation.policy.narrowed(parent.delegation_scope)
        session = Session(
            id=view.id,
            app_name=view.app_name,
            user_id=view.user_id,
            state=dict(view.state),
            events=view.events,
        )
        return child_context(
            parent,
            delegation,
            self,
            session,
            artifact_service=scoped_artifacts(parent.artifact_service, scope),
            memory_service=scoped_memory(parent.memory_service, scope),
        )

    async def _delegate(
        self,
        parent: InvocationContext,
        delegation: Delegation,
        view: Session,
        outcome: list[DelegationOutcome],
    ) -> AsyncGenerator[Event, None]:
        policy = delegation.policy
        # The child reaches the parent's artifacts and memory over the call, as far as the
        # policy lets a child in this process reach them.
        scope = policy.narrowed(parent.delegation_scope)
        artifacts = scoped_artifacts(parent.artifact_service, scope)
        memory = scoped_memory(parent.memory_service, scope)
        delivery = codec.ViewDelivery()
        message = self._new_request(
            parent, view, artifacts, memory, whole_history=False, delivery=delivery
        )
        delegated = message.run.delegated
        delegated.branch = delegation.branch
        delegated.delegation_depth = delegation.depth
        delegated.max_delegation_depth = delegation.max_depth
        delegated.user_content.CopyFrom(codec.content_to_proto(delegation.request))
        delegated.agent_tool.CopyFrom(
            codec.delegation_policy_to_proto(policy, max_transfers=delegation.max_transfers)
        )
        # Over mutual TLS only (a ConfigError otherwise, before anything is sent).
        await forward(
            delegated,
            parent,
            policy,
            agent_name=self.name,
            target=self.target,
            tls=self.tls if self.tls is not None else ClientTLS.from_env(),
        )
        self._fit(message, view, artifacts, memory, whole_history=False, delivery=delivery)
        what = f"remote agent {self.name!r}"
        timeout = call_timeout(parent.deadline, self.timeout, what)

        def start(again: bool) -> tuple[Any, AsyncIterator[agent_pb2.RunResponse]]:
            return self._call(
                message,
                call_timeout(parent.deadline, self.timeout, what) if again else timeout,
                parent,
                artifacts=artifacts,
                memory=memory,
                history=view.events,
            )

        run = _SentAgainWhenBusy(start, parent.deadline)
        responses = run.responses()
        counted = 0  # the remote run's model calls counted here so far
        try:
            async for response in responses:
                delivery.delivered()
                # As they come: a cancelled delegation never reads the trailer, and one past
                # the invocation's limit ends here (cancelled), before its events go up.
                counted = _count_llm_calls(parent, counted, response.llm_calls)
                for event in codec.run_response_events(response):
                    if not event.partial:
                        yield event
                if response.HasField("outcome"):
                    received = codec.delegation_outcome_from_proto(response.outcome)
                    # On the outcome, invocation_ended says the child ended its delegation
                    # (not the caller's invocation: see run_delegation).
                    received.ended = response.invocation_ended
                    outcome.append(received)
            delivery.delivered()
            _count_llm_calls(parent, counted, llm_calls_in(await run.call.trailing_metadata()))
        except grpc.RpcError as error:
            # The remote run's own failure is what ended it, even past the limit.
            _count_llm_calls(parent, counted, llm_calls_in(error.trailing_metadata()), check=False)
            raise error_from_downstream(error, what, self.target) from error
        finally:
            run.call.cancel()
            await responses.aclose()
        if not outcome:
            raise AgentError(
                f"remote agent {self.name!r} ended its delegation without an outcome (its "
                "service does not run AgentTool delegations: an older adk-mesh?)"
            )


class _SentAgainWhenBusy:
    """A remote run's call (:attr:`call`, the one being read) and its responses; the call is
    sent again, once, when the service refused it at its limit of calls at once before running
    any of it (:func:`~adk_mesh.mesh._status.wait_to_resend`). Any other failure, or one after
    a response came, is raised as it is: that run may have had effects, and is never re-sent.

    ``start(again)`` starts the call (``again``: the second time, whose timeout is what is left
    then); the first starts here."""

    def __init__(
        self,
        start: Callable[[bool], tuple[Any, AsyncIterator[agent_pb2.RunResponse]]],
        deadline: float | None,
    ) -> None:
        self._start = start
        self._deadline = deadline
        self.call, self._responses = start(False)

    async def responses(self) -> AsyncGenerator[agent_pb2.RunResponse, None]:
        answered = False
        try:
            async for response in self._responses:
                answered = True
                yield response
            return
        except grpc.RpcError as error:
            if answered or not await wait_to_resend(error, self._deadline):
                raise
        self.call.cancel()
        self.call, self._responses = self._start(True)
        async for response in self._responses:
            yield response


def _count_llm_calls(
    ctx: InvocationContext, counted: int, reported: int, *, check: bool = True
) -> int:
    """Count against ``ctx``'s invocation the model calls a remote run reports having made so
    far (``RunResponse.llm_calls`` of each response, then the trailer), past the ``counted``
    already; return the calls counted now. A report never takes calls back (a service that
    does not send the field reports 0 until its trailer).

    Raises:
        LlmCallLimitError: with ``check``, the invocation is now past its ``max_llm_calls``
            (the calls are counted all the same: they were made). A run alone cannot get
            there (it was sent what was left); concurrent ones can, each sent what was left
            when it started, and the one whose report crosses the limit ends there, as the
            call past it raises in process wherever it happens.
    """
    if reported > counted:
        ctx.add_llm_calls(reported - counted)
        counted = reported
        if check:
            ctx.check_llm_calls()
    return counted


#: The most bytes of a request: the mesh's message limit, less room for the call's framing.
MAX_REQUEST_BYTES = MAX_MESSAGE_BYTES - 64 * 1024


def _state_bytes(view: agent_pb2.SessionView) -> int:
    """About the bytes of the state in ``view`` (its keys counted in characters)."""
    values = sum(len(key) + value.ByteSize() for key, value in view.state.items())
    return values + sum(len(key) + len(text) for key, text in view.state_json.items())


def _nothing_to_ask(
    artifacts: ArtifactService | None, memory: MemoryService | None, view: agent_pb2.SessionView
) -> bool:
    """Whether a remote run could ask this side nothing: no artifact store, no memory, and the
    whole visible history in its view."""
    return (
        artifacts is None
        and memory is None
        and not view.omitted_events
        and not view.abridged_event_ids
    )


async def _answering(
    call: Any,
    opening: agent_pb2.RunDelegatedRequest,
    ctx: InvocationContext,
    *,
    artifacts: ArtifactService | None,
    memory: MemoryService | None,
    history: Sequence[Event],
    history_max_bytes: int,
) -> AsyncGenerator[agent_pb2.RunResponse, None]:
    """Send ``opening`` on a ``RunDelegated`` call and yield its RunResponses; answer each
    context request from ``artifacts``, ``memory`` and ``history`` (the events the remote run
    may see, loaded in pages of at most ``history_max_bytes``, the views' own bound), for
    ``ctx``'s session only. An artifact larger than one message goes in chunks either way
    (:class:`ContextAnswers`)."""

    async def answer(request: tool_pb2.ContextRequest) -> tool_pb2.ContextResponse:
        return await answer_context_request(
            request,
            artifacts=artifacts,
            memory=memory,
            history=history,
            history_max_bytes=history_max_bytes,
            app_name=ctx.app_name,
            user_id=ctx.user_id,
            session_id=ctx.session_id,
        )

    async def write(response: tool_pb2.ContextResponse) -> None:
        await call.write(agent_pb2.RunDelegatedRequest(context_response=response))

    answers = ContextAnswers(
        answer,
        write,
        artifacts=artifacts,
        app_name=ctx.app_name,
        user_id=ctx.user_id,
        session_id=ctx.session_id,
    )
    # This side reassembles a save the run sends in chunks; the service sends one only when
    # told so.
    opening.accepts_artifact_chunks = True
    await call.write(opening)
    async for message in call:
        if message.WhichOneof("message") == "context_request":
            await answers.take(message.context_request)
            continue
        yield message.response


def _without_transfer(event: Event) -> Event:
    actions = event.actions
    return event.model_copy(
        update={
            "actions": EventActions(
                state_delta=actions.state_delta,
                artifact_delta=actions.artifact_delta,
                skip_summarization=actions.skip_summarization,
                escalate=actions.escalate,
            )
        }
    )
