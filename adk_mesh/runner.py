"""The Runner: runs an agent for one user turn and is the single writer of the session."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from contextlib import aclosing

from adk_mesh._confirmation import awaiting_confirmation_ids, check_confirmation_answers
from adk_mesh._tasks import wait_shielded
from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.transfers import DEFAULT_MAX_TRANSFERS, follow_transfers
from adk_mesh.artifacts.base import ArtifactService
from adk_mesh.contexts import (
    DEFAULT_MAX_DELEGATION_DEPTH,
    DEFAULT_TOOL_TIMEOUT,
    InvocationContext,
    RunConfig,
)
from adk_mesh.credentials import CredentialService
from adk_mesh.errors import AdkError, ConfigError, InvalidArgumentError, SessionNotFoundError
from adk_mesh.ids import random_uuid, shown
from adk_mesh.memory.base import MemoryService
from adk_mesh.plugins._manager import PluginManager, plugin_manager
from adk_mesh.plugins.base import Plugin
from adk_mesh.sessions.base import Session, SessionService
from adk_mesh.telemetry._spans import InvocationSpan, trace_memory_ingestion
from adk_mesh.tools.base import close_toolsets, held_toolsets
from adk_mesh.types import Content, Event, FunctionCall, LlmResponse, Part

__all__ = [
    "INTERRUPTED_CALL_ERROR",
    "Runner",
    "answered_call_event",
    "check_new_message",
    "find_agent_to_run",
    "find_branch_to_run",
    "load_agents_behind",
    "new_invocation_id",
    "run_on_user_message",
    "with_run_hooks",
]

logger = logging.getLogger(__name__)

#: What the model reads, on the next turn, for a call its turn left unanswered.
INTERRUPTED_CALL_ERROR = "the turn was interrupted before this call finished"
#: How long recording an interrupted turn may take (seconds); past it, the request-time repair
#: (:func:`~adk_mesh.models._pairing.pair_function_calls`) answers the calls instead.
INTERRUPTION_RECORD_TIMEOUT = 5.0


def new_invocation_id() -> str:
    return f"e-{random_uuid()}"


def check_new_message(message: Content) -> Content:
    """The message that starts a turn, as it is stored: from the user (an empty role means
    the user), with at least one part that is not empty text.

    Raises:
        InvalidArgumentError: no parts, only empty (or blank) text, another role, a function
            call or a built-in tool's part (a client cannot put words in the model's mouth),
            data without a MIME type, a file without its URI or type, a function response
            without its name.
    """
    if not message.parts:
        raise InvalidArgumentError("the new message has no parts; send text or data")
    if message.role not in ("", "user"):
        raise InvalidArgumentError(
            f"the new message has role {shown(message.role)}; a turn starts with the user's "
            "message (role 'user', or leave it empty)"
        )
    if message.function_calls:
        # Stored in the user's turn, it would go to the model in every later request of the
        # session, where providers refuse a call: every later turn would fail.
        raise InvalidArgumentError(
            f"the new message holds a function call ({shown(message.function_calls[0].name)});"
            " calls are the model's: a client answers one with a function response"
        )
    for index, part in enumerate(message.parts):
        # Each would go to the model in every later request of the session, and its refusal
        # fail every later turn.
        if part.is_server_tool:
            raise InvalidArgumentError(
                f"the new message's part {index} is a built-in tool's call or result; those "
                "are the model provider's, never a client's"
            )
        if part.inline_data is not None and not part.inline_data.mime_type:
            raise InvalidArgumentError(
                f"the new message's part {index} holds data without a MIME type; name its type"
            )
        if part.file_data is not None and not (
            part.file_data.file_uri and part.file_data.mime_type
        ):
            raise InvalidArgumentError(
                f"the new message's part {index} refers to a file without its URI or MIME "
                "type; give both"
            )
        if part.function_response is not None and not part.function_response.name:
            raise InvalidArgumentError(
                f"the new message's part {index} is a function response without the name "
                "of its function"
            )
    if all(part.text is not None and not part.text.strip() for part in message.parts):
        raise InvalidArgumentError("the new message's text is empty; send text or data")
    if not message.role:
        message = Content(role="user", parts=message.parts)
    return message


def _check_call_answers(events: Sequence[Event], message: Content) -> None:
    """Check that each function response of ``message`` naming a call of the session
    (``events``) answers a call left to the client: a long-running one (a confirmation
    request is one), or one waiting for a person's confirmation. A response to any other
    call would take its tool's result's place in the history (and drop what followed it,
    see :mod:`~adk_mesh.agents.history`): the client would be trusted for a tool result.
    A response naming no call of the session is the model's to read as it is.

    Raises:
        InvalidArgumentError: a response to a call that its tool answered (or that the
            turn's interruption did).
    """
    response_ids = {response.id for response in message.function_responses if response.id}
    if not response_ids:
        return
    made: set[str] = set()
    left_to_client: set[str] = set()
    for event in events:
        left_to_client.update(response_ids.intersection(event.long_running_tool_ids))
        left_to_client.update(response_ids.intersection(event.actions.requested_tool_confirmations))
        made.update(call.id for call in event.function_calls() if call.id in response_ids)
    refused = sorted(made - left_to_client)
    if refused:
        raise InvalidArgumentError(
            f"the new message answers call {shown(refused[0])}, which is not the client's to "
            "answer: only a long-running call or a confirmation request takes its response "
            "from the client"
        )


def _owned(message: Content) -> Content:
    """The turn's own copy of the caller's message, sharing nothing with it: the stored user
    event is what the next turns read (the shared read hands it over, not decoded again), and
    a caller may reuse or change its ``Content`` once the turn is over."""
    return Content.model_validate(message.model_dump())


def _transferable_across_tree(agent: BaseAgent, root: BaseAgent | None = None) -> bool:
    """An agent keeps the conversation across turns only if it and every agent above it (up
    to ``root``) keep it (:attr:`~adk_mesh.agents.base.BaseAgent.keeps_conversation`): a
    workflow agent on the path owns the order of its children, so the next turn starts again
    from the root."""
    current: BaseAgent | None = agent
    while current is not None:
        if not current.keeps_conversation:
            return False
        if current is root:
            break
        current = current.parent_agent
    return True


def answered_call_event(session: Session, new_message: Content) -> Event | None:
    """The newest stored event holding a call that ``new_message`` answers (a long-running
    tool's result, a confirmation), or ``None``."""
    response_ids = {r.id for r in new_message.function_responses if r.id}
    if not response_ids:
        return None
    for event in reversed(session.events):
        if any(call.id in response_ids for call in event.function_calls()):
            return event
    return None


def _agent_placing(root: BaseAgent, author: str) -> BaseAgent | None:
    """The agent of ``root``'s tree that ``author``'s events belong to: the agent of that
    name, or the one it runs behind in another service's tree
    (:meth:`~adk_mesh.agents.base.BaseAgent.agents_behind`: a RemoteAgent whose served tree
    holds it); ``None`` when neither is known."""
    agent = root.find_agent(author)
    if agent is not None:
        return agent
    for candidate in root.walk():
        if author in candidate.agents_behind():
            return candidate
    return None


async def load_agents_behind(root: BaseAgent, session: Session, new_message: Content) -> None:
    """Before :func:`find_agent_to_run`: when the author it must place first (the answered
    call's, or the newest that is not the user) is in ``root``'s tree under no name known,
    let the agents of the tree learn which agents run behind them in other services
    (:meth:`~adk_mesh.agents.base.BaseAgent.load_agents_behind`: a RemoteAgent asks its
    service once). The events a RemoteAgent relays teach it those it ran; asking covers a
    turn that this process's objects did not run (a restarted service, another replica).
    Asks nothing when the author is placed.

    Then the agents whose :attr:`~adk_mesh.agents.base.BaseAgent.keeps_conversation`
    :func:`find_agent_to_run` will read learn it
    (:meth:`~adk_mesh.agents.base.BaseAgent.load_keeps_conversation`: a RemoteAgent asks its
    service's card once, when the agent it stands for answered last)."""
    answered = answered_call_event(session, new_message)
    author = answered.author if answered is not None else None
    if author is None:
        author = next((e.author for e in reversed(session.events) if e.author != "user"), None)
    if author is None:
        return
    if _agent_placing(root, author) is None:
        await asyncio.gather(*(agent.load_agents_behind() for agent in root.walk()))
    await _load_keeps_conversation(root, session, answered)


async def _load_keeps_conversation(
    root: BaseAgent, session: Session, answered: Event | None
) -> None:
    """Let each agent :func:`find_agent_to_run` may ask whether it keeps the conversation
    learn it first (the same walk, newest event first): find_agent_to_run is synchronous, and
    a RemoteAgent knows only from its service's card whether the agent it stands for (a
    workflow) keeps it."""
    if answered is not None and _agent_placing(root, answered.author) is not None:
        return  # the agent that made the answered call takes the turn, keeping or not
    loaded: set[int] = set()
    for event in reversed(session.events):
        if event.author == "user":
            continue
        if event.author == root.name:
            return
        agent = _agent_placing(root, event.author)
        if agent is None:
            continue
        if id(agent) not in loaded:
            loaded.add(id(agent))
            path: list[BaseAgent] = []
            current: BaseAgent | None = agent
            while current is not None:
                path.append(current)
                if current is root:
                    break
                current = current.parent_agent
            for step in path:  # one at a time: no task per agent on every turn
                await step.load_keeps_conversation()
        if _transferable_across_tree(agent, root):
            return


def find_branch_to_run(agent: BaseAgent, session: Session, new_message: Content) -> str | None:
    """The branch ``agent`` resumes on when ``new_message`` answers a call it made (or an
    agent behind it in another service made: :meth:`~BaseAgent.agents_behind`): the branch
    the call was made on (a ParallelAgent's child keeps its own, so its history stays its
    branch's), as google-adk restores it; ``None`` when the message answers no call of
    ``agent``'s (the turn runs on the branch it would anyway)."""
    answered = answered_call_event(session, new_message)
    if answered is None:
        return None
    if answered.author != agent.name and answered.author not in agent.agents_behind():
        return None
    return answered.branch


def find_agent_to_run(
    root: BaseAgent,
    session: Session,
    new_message: Content,
    *,
    foreign_authors_end: bool = False,
) -> BaseAgent:
    """Which agent answers the next user turn.

    A message answering a function call (a long-running tool's result) goes to the agent that
    made the call (on the branch it made it on: :func:`find_branch_to_run`). Otherwise the
    turn resumes with the agent that answered last, if it can keep the conversation (see
    :func:`_transferable_across_tree`); else the root. An author that runs in another
    service's tree, behind an agent of ``root``'s (a RemoteAgent:
    :meth:`~adk_mesh.agents.base.BaseAgent.agents_behind`; :func:`load_agents_behind` lets
    the agents learn them), is placed on that agent, whose service resumes the author there.

    ``foreign_authors_end``: for a run another service handed to ``root`` (a subtree of this
    service's tree) by a transfer. The history holds the caller's agents too: the newest event
    of an agent outside ``root``'s subtree means control came from the caller in this turn, so
    ``root`` answers; otherwise the agent of the subtree that answered last resumes, as it
    would if the two trees were one.
    """
    answered = answered_call_event(session, new_message)
    if answered is not None:
        agent = _agent_placing(root, answered.author)
        if agent is not None:
            return agent
    for event in reversed(session.events):
        if event.author == "user":
            continue
        if event.author == root.name:
            return root
        agent = _agent_placing(root, event.author)
        if agent is None:
            if foreign_authors_end:
                return root
            continue
        if _transferable_across_tree(agent, root):
            return agent
    return root


class Runner:
    """Runs ``agent`` for one user turn at a time.

    ``run`` loads the session, appends the user's message, picks the agent to answer (see
    :func:`find_agent_to_run`), runs it — following transfers — and appends every non-partial
    event (applying its state and artifact deltas) *before* yielding it, so the caller and
    the agent's next step see the same history. Partial (streaming) events are yielded and
    never stored. One invocation id marks every event of the turn.

    **History.** The session is read with
    :meth:`~adk_mesh.sessions.SessionService.get_session_shared`: a store may hand every turn
    the same decoded objects for the events it already read, so that a turn on a long
    session decodes only what another process appended since the last one (the events a
    turn appends are what the next one reads, as objects). Stored events are immutable:
    agents, tools and callbacks read ``ctx.session.events`` (and the contents of a model
    request, which are those events' contents) and never change them in place; a tool and
    its hooks get a copy of the call's args, and the user event holds the turn's own copy of
    ``new_message`` (the caller may reuse its object). The events ``run`` yields are the
    stored ones too: read them, or copy one to change it (``event.model_copy(deep=True)``),
    as with google-adk's events.

    **Credentials.** Tools get API keys and tokens by name from ``credential_service``
    (``await tool_context.get_credential(name)``, :mod:`adk_mesh.credentials`); whatever a
    tool returns, raises or writes to state has their values redacted before it is stored.

    ``max_delegation_depth`` bounds nested delegations (AgentTool, across services too);
    ``tool_timeout`` is how long each tool call may run (``None``: no bound). The number of
    model calls is bounded per turn by ``RunConfig.max_llm_calls``.

    **Memory.** With a ``memory_service`` and ``add_turns_to_memory`` (the default), each turn
    that finishes adds its session to memory: once its last event is stored, the Runner reads
    the session again from the store (``get_session_shared``: the events appended since the
    turn began) and passes it to ``add_session_to_memory`` (which replaces what an earlier
    turn added; the SQL memory stores index only the events they have not indexed yet),
    before the event stream ends. A memory store that
    fails does not fail the turn: it is logged as a warning naming the invocation and recorded
    on the ``add_session_to_memory`` span. A turn that ends abnormally (see below) is not
    added; the next finished turn adds the session whole, its events included. Pass
    ``add_turns_to_memory=False`` to keep the memory service for searches only (tools'
    ``search_memory``) and feed it some other way.

    A turn that ends abnormally — the caller cancels it or closes the stream, its deadline
    passes, an exception — after a function call was stored but before its response leaves
    no call open: the Runner appends, per agent and branch that made such calls, one event
    answering each with ``{"error": INTERRUPTED_CALL_ERROR}``, marked
    ``llm_response.interrupted`` with an ``error_code`` (``CANCELLED``, ``DEADLINE_EXCEEDED``,
    the :class:`~adk_mesh.errors.AdkError`'s reason, or ``INTERNAL``) — yielded too when the
    turn failed with an exception, since its caller still reads — then lets the cancellation
    or exception go on. The recording runs shielded from a second cancellation, which waits
    for it (the turn is not over, nor its session's hold released, before the recording is)
    and is raised then; it is bounded by :data:`INTERRUPTION_RECORD_TIMEOUT`. Long-running
    calls, and calls waiting for a person's confirmation, are left open: their result comes
    from the client.
    What a crash leaves open, the request-time repair answers.

    **Plugins** (:class:`~adk_mesh.plugins.Plugin`): every agent, model call and tool call of
    the turns this Runner runs goes through ``plugins``' hooks (in order, before the agents'
    own callbacks; the first hook that returns a value wins), and the Runner calls the run
    hooks: ``on_user_message`` (before the message is stored: a Content replaces it),
    ``before_run`` (a Content answers instead of the agent: stored as the answering agent's
    event, and the turn ends), ``on_event`` (each event before it is stored and yielded: an
    Event replaces it) and ``after_run`` (once the turn finished, not when it failed).
    :meth:`close` closes them.

    **Tool confirmation.** A message that answers ``adk_request_confirmation`` calls
    (:mod:`adk_mesh._confirmation`) is checked before anything is stored: each answer must name
    an open confirmation request of the session and be a ToolConfirmation, else
    :class:`~adk_mesh.errors.InvalidArgumentError`. So must any function response to a call
    of the session: the client answers only the calls left to it (long-running ones), never
    one that its tool answered.
    """

    def __init__(
        self,
        *,
        agent: BaseAgent,
        app_name: str,
        session_service: SessionService,
        artifact_service: ArtifactService | None = None,
        memory_service: MemoryService | None = None,
        max_transfers: int = DEFAULT_MAX_TRANSFERS,
        max_delegation_depth: int = DEFAULT_MAX_DELEGATION_DEPTH,
        tool_timeout: float | None = DEFAULT_TOOL_TIMEOUT,
        add_turns_to_memory: bool = True,
        plugins: Sequence[Plugin] | PluginManager | None = None,
        credential_service: CredentialService | None = None,
    ) -> None:
        self.agent = agent
        self.app_name = app_name
        self.session_service = session_service
        self.artifact_service = artifact_service
        self.memory_service = memory_service
        self.max_transfers = max_transfers
        self.max_delegation_depth = max_delegation_depth
        self.tool_timeout = tool_timeout
        self.add_turns_to_memory = add_turns_to_memory
        self.plugins = plugin_manager(plugins)
        self.credential_service = credential_service

    async def close(self) -> None:
        """Close the toolsets the agents of the tree hold (an ``McpToolset``'s MCP server is
        stopped, a ``RemoteToolset``'s channel closed; a later listing connects again), as
        google-adk's ``Runner.close`` does, then the plugins
        (:meth:`~adk_mesh.plugins.Plugin.close`); the stores are the caller's."""
        try:
            await close_toolsets(held_toolsets(self.agent), f"runner of {self.app_name!r}")
        finally:
            if self.plugins is not None:
                await self.plugins.close()

    async def run(
        self,
        *,
        user_id: str,
        session_id: str,
        new_message: Content,
        run_config: RunConfig | None = None,
        invocation_id: str | None = None,
        session: Session | None = None,
        request_metadata: Mapping[str, str] | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Run one user turn and yield its events as they are stored.

        ``session``: the session ``session_id`` of ``user_id``, just loaded (whole) or created
        by the caller from ``session_service``; the run then uses it instead of reading it
        again (a server that has just created the session saves the second read).
        ``request_metadata``: what the client sent with the turn (key to text), for tools and
        callbacks to read (``ctx.request_metadata``); never stored, traced or logged.
        """
        new_message = _owned(check_new_message(new_message))
        if session is not None and (
            session.id != session_id
            or session.user_id != user_id
            or session.app_name != self.app_name
        ):
            raise InvalidArgumentError(
                f"the session passed is {session.id!r} of user {session.user_id!r} in app "
                f"{session.app_name!r}, not {session_id!r} of {user_id!r} in {self.app_name!r}"
            )
        if session is None:
            session = await self.session_service.get_session_shared(
                app_name=self.app_name, user_id=user_id, session_id=session_id
            )
        if session is None:
            raise SessionNotFoundError(
                f"session {session_id!r} of user {user_id!r} in app {self.app_name!r} "
                "does not exist"
            )
        plugins = self.plugins
        ctx = InvocationContext(
            invocation_id=invocation_id or new_invocation_id(),
            agent=self.agent,
            session=session,
            session_service=self.session_service,
            artifact_service=self.artifact_service,
            memory_service=self.memory_service,
            run_config=run_config,
            user_content=new_message,
            max_delegation_depth=self.max_delegation_depth,
            tool_timeout=self.tool_timeout,
            plugins=plugins,
            credential_service=self.credential_service,
            request_metadata=request_metadata,
        )
        # The turn's span opens now, and the work before its agents run (a plugin's calls, a
        # RemoteAgent asking its service which agents run behind it, the user's message
        # stored) is under it: in the invocation's trace, also with no span above the Runner.
        workflow = InvocationSpan(ctx)
        with workflow.scope():
            if plugins is not None and plugins.has("on_user_message"):
                new_message = await run_on_user_message(plugins, ctx, new_message)
            check_confirmation_answers(session.events, new_message)
            _check_call_answers(session.events, new_message)
            await load_agents_behind(self.agent, session, new_message)
            agent = ctx.agent = find_agent_to_run(self.agent, session, new_message)
            ctx.branch = find_branch_to_run(agent, session, new_message) or ""
            user_event = Event.new(
                author="user", invocation_id=ctx.invocation_id, content=new_message
            )
            await self.session_service.append_event(session, user_event)
        append = self.session_service.append_event
        turn = follow_transfers(ctx, agent, root=self.agent, max_transfers=self.max_transfers)
        if plugins is not None:
            turn = with_run_hooks(plugins, ctx, turn)
        events = workflow.trace(turn)
        # Calls stored in this turn and not answered yet, by id.
        open_calls: dict[str, tuple[Event, FunctionCall]] = {}
        # While an append is under way: how many events the session held before it.
        appending = -1
        try:
            async with aclosing(events):
                async for event in events:
                    if event.llm_response.partial:
                        yield event
                        continue
                    appending = len(session.events)
                    stored = await append(session, event)
                    appending = -1
                    _note_calls(open_calls, stored)
                    yield stored
        except (Exception, asyncio.CancelledError, GeneratorExit) as error:
            if 0 <= appending < len(session.events):
                # Cancelled while the store committed the event (a transaction it cannot
                # cut, as SQLite's): the event is stored, so its calls are open too (its
                # responses closed).
                _note_calls(open_calls, session.events[-1])
            if open_calls:
                with workflow.after():
                    recorded = await self._record_interruption(
                        session, ctx, open_calls.values(), error
                    )
                if isinstance(error, Exception):
                    # The caller still reads the stream: it sees the turn marked before the
                    # error itself. (A cancelled or closed stream has no reader left.)
                    for event in recorded:
                        yield event
            raise
        else:
            with workflow.after():
                if self.memory_service is not None and self.add_turns_to_memory:
                    await self._add_to_memory(self.memory_service, ctx)
                if plugins is not None and plugins.has("after_run"):
                    await plugins.run("after_run", invocation_context=ctx)
        finally:
            # A context kept past the turn (a tool's background task) now refuses changes
            # instead of making them where no event records them.
            ctx.finish()

    async def _add_to_memory(self, memory: MemoryService, ctx: InvocationContext) -> None:
        """Add the finished turn's session, as stored, to memory; never raises but for a
        cancellation (see the class docstring)."""
        try:
            with trace_memory_ingestion(ctx, memory):
                session = await self.session_service.get_session_shared(
                    app_name=ctx.app_name, user_id=ctx.user_id, session_id=ctx.session_id
                )
                if session is not None:
                    await memory.add_session_to_memory(session)
        except Exception as failure:
            logger.warning(
                "could not add session %s of invocation %s to memory; the turn is done and "
                "stored, and the next finished turn adds the session again: %s",
                ctx.session_id,
                ctx.invocation_id,
                failure if isinstance(failure, AdkError) else type(failure).__name__,
            )

    async def _record_interruption(
        self,
        session: Session,
        ctx: InvocationContext,
        calls: Iterable[tuple[Event, FunctionCall]],
        error: BaseException,
    ) -> list[Event]:
        """Answer the calls an abnormal end left open (see the class docstring) and return
        the events stored. A failure to record is logged, so the error that ended the turn is
        the one that goes on; a cancellation that arrives while recording is raised once the
        recording is over.

        The recording ends before this returns, however often the turn is cancelled: the
        turn's caller holds the session until the turn is over (an AgentServer's hold, its
        claim against other processes), and an append made after that would race the next
        turn's on the same session. The timeout bounds the wait."""
        code, message = _interruption_reason(error, ctx)
        events = _interruption_events(calls, ctx.invocation_id, code, message)
        stored: list[Event] = []

        async def record() -> None:
            async with asyncio.timeout(INTERRUPTION_RECORD_TIMEOUT):
                for event in events:
                    stored.append(await self.session_service.append_event(session, event))

        # In a task of its own, so that cancelling this turn again (it is being cancelled,
        # most likely) does not cut the recording short.
        task = asyncio.ensure_future(record())
        cancelled_again = await wait_shielded(task)
        failure = None if task.cancelled() else task.exception()
        if failure is not None:
            logger.warning(
                "could not record the interrupted calls of invocation %s (%s); the next "
                "request answers them: %s",
                ctx.invocation_id,
                code,
                failure if isinstance(failure, AdkError) else type(failure).__name__,
            )
        if cancelled_again:
            raise asyncio.CancelledError
        return stored


async def run_on_user_message(
    plugins: PluginManager, ctx: InvocationContext, message: Content
) -> Content:
    """``message`` after the plugins' ``on_user_message`` (a Content replaces it, and becomes
    ``ctx.user_content``): a Runner's turn's, or an AgentTool child's request.

    Raises:
        ConfigError: the replacement could not start a turn (the plugin's mistake, not the
            caller's INVALID_ARGUMENT).
    """
    replaced = await plugins.run("on_user_message", invocation_context=ctx, user_message=message)
    if replaced is None:
        return message
    try:
        checked = check_new_message(replaced)
    except InvalidArgumentError as error:
        raise ConfigError(
            f"a plugin's on_user_message replaced the user's message with one "
            f"that cannot start a turn: {error.message}"
        ) from error
    message = ctx.user_content = _owned(checked)
    return message


async def with_run_hooks(
    plugins: PluginManager, ctx: InvocationContext, events: AsyncGenerator[Event, None]
) -> AsyncGenerator[Event, None]:
    """``events`` after the plugins' ``before_run`` (whose Content answers instead) and through
    their ``on_event`` (whose Event replaces one): a Runner's turn, or an AgentTool child's run
    (:func:`~adk_mesh.agents.delegation.run_delegation`). An event a child's run forwarded
    into this one went through ``on_event`` there (:meth:`InvocationContext.forwarded_hooked`):
    it is not handed to it twice."""
    async with aclosing(events):
        source = events
        if plugins.has("before_run"):
            content = await plugins.run("before_run", invocation_context=ctx)
            if content is not None:
                source = _answer(ctx, content)
        on_event = plugins.has("on_event")
        async for event in source:
            if on_event and not ctx.forwarded_hooked(event):
                replaced = await plugins.run("on_event", invocation_context=ctx, event=event)
                if replaced is not None:
                    event = replaced
            yield event


async def _answer(ctx: InvocationContext, content: Content) -> AsyncGenerator[Event, None]:
    yield ctx.new_event(content=content)


def _note_calls(open_calls: dict[str, tuple[Event, FunctionCall]], event: Event) -> None:
    """Keep ``open_calls`` up to date with a stored event: its calls open (long-running ones
    excepted: the client answers them), its responses close, and so does its request for a
    person to confirm calls (they wait for the client's answer, as long-running calls do)."""
    for response in event.function_responses():
        if response.id:
            open_calls.pop(response.id, None)
    for call_id in awaiting_confirmation_ids(event):
        open_calls.pop(call_id, None)
    long_running = set(event.long_running_tool_ids)
    for call in event.function_calls():
        if call.id and call.id not in long_running:
            open_calls[call.id] = (event, call)


def _interruption_reason(error: BaseException, ctx: InvocationContext) -> tuple[str, str]:
    """``(error_code, error_message)`` of a turn that ``error`` ended."""
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        remaining = ctx.time_remaining()
        if remaining is not None and remaining <= 0:
            return "DEADLINE_EXCEEDED", "the turn ran out of time"
        return "CANCELLED", "the turn was cancelled"
    if isinstance(error, AdkError):
        return error.reason, f"the turn failed: {error.message}"
    # Not ours: its text may hold internals; the service's log has it.
    return "INTERNAL", "the turn failed with an internal error"


def _interruption_events(
    calls: Iterable[tuple[Event, FunctionCall]], invocation_id: str, code: str, message: str
) -> list[Event]:
    """One event per (author, branch) that made the calls, answering each with an error."""
    grouped: dict[tuple[str, str], list[Part]] = {}
    for event, call in calls:
        grouped.setdefault((event.author, event.branch), []).append(
            Part.from_function_response(call.name, {"error": INTERRUPTED_CALL_ERROR}, id=call.id)
        )
    return [
        Event(
            author=author,
            invocation_id=invocation_id,
            branch=branch,
            llm_response=LlmResponse(
                content=Content(role="tool", parts=parts),
                interrupted=True,
                error_code=code,
                error_message=message,
            ),
        )
        for (author, branch), parts in grouped.items()
    ]
