"""The contexts agents, callbacks and tools run in.

Each adds capabilities to the one before::

    ReadonlyContext       ids, the user's message, read-only state
    └── CallbackContext   + writable state (recorded as a delta), artifacts
        └── ToolContext   + the function call id, the event actions, memory search,
                            credentials by name

:class:`InvocationContext` is the full context of one agent run: the agent, the session, the
services and the run configuration. It is shared, through copies, by every agent of one
invocation; the copies share the invocation-wide counters and the "ended" flag.

Every change goes through a delta so that it is recorded in an event: state writes land in
``EventActions.state_delta``, saved artifacts in ``artifact_delta``.
"""

from __future__ import annotations

import abc
import dataclasses
import re
import reprlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    ModelWrapValidatorHandler,
    ValidationError,
    model_validator,
)

from adk_mesh.credentials import Credential, CredentialService, KnownSecrets
from adk_mesh.errors import ArtifactError, ConfigError, InvalidArgumentError, LlmCallLimitError
from adk_mesh.ids import check_name
from adk_mesh.state import State
from adk_mesh.telemetry._providers import get_tracer
from adk_mesh.types import Content, Event, EventActions, Part, ToolConfirmation

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

    from adk_mesh.agents.base import BaseAgent
    from adk_mesh.artifacts.base import ArtifactService
    from adk_mesh.memory.base import MemoryEntry, MemoryService
    from adk_mesh.plugins._manager import PluginManager
    from adk_mesh.sessions.base import Session, SessionService

__all__ = [
    "CallbackContext",
    "CallerTree",
    "DelegationScope",
    "InvocationContext",
    "ProgressReporter",
    "ReadonlyContext",
    "RunConfig",
    "SessionHistory",
    "StreamingMode",
    "ToolContext",
    "TransferTarget",
]

DEFAULT_MAX_LLM_CALLS = 500
DEFAULT_MAX_DELEGATION_DEPTH = 8
#: Seconds a tool may run before it fails with a ToolError the model reads (local tools and
#: remote ones alike); a tool may set its own :attr:`~adk_mesh.tools.base.BaseTool.timeout`.
DEFAULT_TOOL_TIMEOUT = 600.0

#: ``(message, data, fraction) -> None``: where a running tool's progress goes.
ProgressReporter = Callable[[str, "dict[str, Any] | None", "float | None"], Awaitable[None]]

#: How many of a tool call's events (its progress, and in process the events it forwards) may
#: wait unread before :meth:`ToolContext.report_progress` waits for the reader: a tool that
#: reports in a tight loop to a slow reader (a slow client, a slow consumer of the Runner's
#: events) then runs at the reader's pace instead of buffering without end. Held per reader
#: of a model step's calls (an agent's) and per call a ToolServer serves.
MAX_UNREAD_TOOL_EVENTS = 64

#: The deadline (``time.monotonic()``) of the call a mesh service is serving, for the contexts
#: created while serving it: a root run's context is built by the Runner, which knows nothing
#: of gRPC. Set by the mesh servicers; each served call runs in its own task, so it ends there.
serving_deadline: ContextVar[float | None] = ContextVar("adk_mesh_serving_deadline", default=None)


_MAX_INT32 = 2**31 - 1
_MIN_INT32 = -(2**31)


class StreamingMode(StrEnum):
    """``NONE``: one event per model response. ``SSE``: partial events while the model streams."""

    NONE = "none"
    SSE = "sse"


class RunConfig(BaseModel):
    """How one invocation runs.

    Attributes:
        max_llm_calls: upper bound of model calls in the whole invocation (all agents, and the
            agents it delegates to); past it the run fails with
            :class:`~adk_mesh.errors.LlmCallLimitError`. 0 or less: no bound in process; a
            mesh server always applies its own limit, which this may only lower.
        streaming_mode: whether models stream partial events.

    Raises:
        ConfigError: a setting it does not have, or a value of the wrong kind (naming the
            setting); a ``max_llm_calls`` beyond what the mesh carries (+-2**31).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_llm_calls: int = DEFAULT_MAX_LLM_CALLS
    streaming_mode: StreamingMode = StreamingMode.NONE

    @model_validator(mode="wrap")
    @classmethod
    def _checked(cls, data: Any, handler: ModelWrapValidatorHandler[RunConfig]) -> RunConfig:
        # A developer's mistake, as every other setting's: a ConfigError naming the setting.
        try:
            config = handler(data)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in problem['loc']) or 'the settings'}: "
                f"{problem['msg']} (got {reprlib.repr(problem['input'])})"
                for problem in error.errors()
            )
            raise ConfigError(f"bad RunConfig: {problems}") from None
        # The mesh carries it as an int32 (a RemoteAgent's hop): beyond it, a delegation
        # would fail with a bare ValueError in the middle of the turn.
        if not _MIN_INT32 <= config.max_llm_calls <= _MAX_INT32:
            raise ConfigError(
                f"bad RunConfig: max_llm_calls is {config.max_llm_calls}; it must be between "
                f"{_MIN_INT32} and {_MAX_INT32} (0 or less: no bound)"
            )
        return config


#: Shared by every invocation given none (a RunConfig is frozen).
_DEFAULT_RUN_CONFIG = RunConfig()


@dataclasses.dataclass(frozen=True)
class DelegationScope:
    """What a run may reach of the root's artifacts and memory, once the AgentTool delegations
    it runs inside narrowed it. The default (a root run, a transfer) reaches everything.

    Attributes:
        artifact_prefixes: the ``artifact_prefixes`` of each delegation on the way that set
            them, outermost first: an artifact name must start with a prefix of every entry.
        memory: False once a delegation on the way did not forward memory.
    """

    artifact_prefixes: tuple[tuple[str, ...], ...] = ()
    memory: bool = True


@dataclasses.dataclass(frozen=True)
class TransferTarget:
    """An agent another agent may hand the conversation to, as its model is shown it."""

    name: str
    description: str = ""


@dataclasses.dataclass(frozen=True)
class CallerTree:
    """Where the agent a transfer handed to another service stands in the caller's tree: the
    caller's agents it may hand the conversation back to, as a local agent in its place could
    (its parent and its peers, as the caller's rules allow; the agent's own
    ``disallow_transfer_to_*`` still apply).

    Attributes:
        agent_name: the agent of this service's tree the run was handed to (only it is
            offered these targets; agents it transfers to in its own tree are not).
        parent: the caller-side parent (None: none it may return to).
        peers: the caller-side peers.
    """

    agent_name: str
    parent: TransferTarget | None = None
    peers: tuple[TransferTarget, ...] = ()


@dataclasses.dataclass
class SessionHistory(abc.ABC):
    """Where the history of a context's session comes from when the session holds only part
    of it: a delegated run served by another service sees a window of its caller's history
    (the mesh's implementation fetches the rest from the caller over the call)."""

    @abc.abstractmethod
    async def page(
        self, events: Sequence[Event], *, before_event_id: str | None, max_events: int
    ) -> list[Event]:
        """The ``max_events`` newest events before ``before_event_id`` (``None``: the newest),
        oldest first and whole, given ``events``: what the session holds."""


#: Request metadata bounds: entries, key and value lengths.
MAX_METADATA_ENTRIES = 64
MAX_METADATA_KEY_CHARS = 128
MAX_METADATA_VALUE_CHARS = 4096
_METADATA_KEY = re.compile(r"[a-z0-9][a-z0-9._-]*")


def check_metadata_key(key: str) -> str:
    """``key`` when it is a request metadata key: 1 to 128 lower-case letters, digits, ``.``,
    ``_`` and ``-`` (what a gRPC or HTTP header name can carry).

    Raises:
        InvalidArgumentError: it is not.
    """
    return check_name(
        key,
        _METADATA_KEY,
        MAX_METADATA_KEY_CHARS,
        f"is not a request metadata key: use 1 to {MAX_METADATA_KEY_CHARS} lower-case letters, "
        "digits, '.', '_' and '-'",
    )


def check_request_metadata(metadata: Mapping[str, str]) -> dict[str, str]:
    """``metadata`` as a dict, when its keys pass :func:`check_metadata_key` and it holds at
    most 64 entries of text up to 4096 characters each.

    Raises:
        InvalidArgumentError: it does not.
    """
    if len(metadata) > MAX_METADATA_ENTRIES:
        raise InvalidArgumentError(
            f"request metadata holds more than {MAX_METADATA_ENTRIES} entries"
        )
    checked: dict[str, str] = {}
    for key, value in metadata.items():
        check_metadata_key(key)
        if not isinstance(value, str) or len(value) > MAX_METADATA_VALUE_CHARS:
            raise InvalidArgumentError(
                f"request metadata {key!r} must be text of at most {MAX_METADATA_VALUE_CHARS} "
                "characters"
            )
        checked[key] = value
    return checked


#: The most events one :meth:`ReadonlyContext.load_events` call returns.
MAX_LOAD_EVENTS = 1000


def page_of(events: Sequence[Event], before_event_id: str | None, max_events: int) -> list[Event]:
    """The ``max_events`` newest non-partial ``events`` before ``before_event_id`` (``None``:
    the newest), oldest first.

    Raises:
        InvalidArgumentError: ``before_event_id`` is not among ``events``.
    """
    visible = [event for event in events if not event.partial]
    end = len(visible)
    if before_event_id is not None:
        end = next((i for i, e in enumerate(visible) if e.id == before_event_id), -1)
        if end < 0:
            raise InvalidArgumentError(f"no event {before_event_id!r} in this session's history")
    return visible[max(0, end - max_events) : end]


class _LlmCallCount:
    """Model calls made so far in one invocation: shared by its contexts and by the contexts
    of the agents it delegates to in this process (an AgentTool's child)."""

    calls: int = 0


@dataclasses.dataclass
class _InvocationShared:
    """What every copy of one invocation's context shares."""

    llm_calls: _LlmCallCount = dataclasses.field(default_factory=_LlmCallCount)
    ended: bool = False
    #: The turn is over (see InvocationContext.finish): its contexts take no more changes.
    finished: bool = False
    #: The credential values handed out in this invocation in this process (never stored).
    secrets: KnownSecrets = dataclasses.field(default_factory=KnownSecrets)
    #: The invocation's tracer once asked for (a 1-tuple: ``(None,)`` is "tracing off").
    tracer: tuple[Tracer | None] | None = None
    #: Ids of events forwarded into this run's stream that went through the plugins'
    #: ``on_event`` already, in an AgentTool child's run (see InvocationContext.forwarded_hooked).
    hooked_forwards: set[str] = dataclasses.field(default_factory=set)


class InvocationContext:
    """The full context of one agent run in one invocation.

    Agents receive it in :meth:`BaseAgent.run`; they derive a copy for each child with
    :meth:`for_agent`. The runtime (Runner, AgentTool, the mesh) creates the first one.

    ``deadline`` is the ``time.monotonic()`` instant by which the invocation must be done, or
    ``None`` for no deadline; remote calls made for it get the time that remains. Left out, it
    is the deadline of the mesh call being served (:data:`serving_deadline`), if any.

    ``tool_timeout`` is how long each tool may run (``None``: no bound); ``llm_calls_of``: a
    context whose model-call count this one shares (an AgentTool's child counts against its
    parent's ``max_llm_calls``), and its tracer.

    ``delegation_scope``: what the run may reach of the root's artifacts and memory (narrowed
    by each AgentTool delegation it runs inside; a remote hop carries it and applies it).
    ``caller_tree``: set in a delegated run that a transfer handed to this service: the
    caller's agents the agent delegated to may transfer back to. ``global_instruction``: set in
    a delegated run that is part of its caller's tree: that tree's global instruction (made in
    the caller), in place of this tree's root's (``None``: this tree's applies). ``history``:
    where the rest
    of the session's history is, when ``session`` holds only a window of it (``None``: it is
    whole).

    ``plugins``: the plugins of the Runner (or the mesh server) running this invocation in this
    process (:mod:`adk_mesh.plugins`), reached by every agent, model and tool call of it here;
    ``None``: none.

    ``credential_service``: where this process's tools get credentials
    (:meth:`ToolContext.get_credential`). ``forwarded_credentials``: the credentials a caller
    forwarded with the run (an AgentTool policy's ``forward_credentials``), consulted for the
    names ``credential_service`` does not have. ``request_metadata``: the request's metadata
    (key to text) as the client sent it, or as far as a caller forwarded it. Neither is
    stored, traced or logged.
    """

    __slots__ = (
        "_shared",
        "agent",
        "app_name",
        "artifact_service",
        "branch",
        "call_path",
        "caller_tree",
        "credential_service",
        "deadline",
        "delegation_depth",
        "delegation_scope",
        "forwarded_credentials",
        "global_instruction",
        "history",
        "invocation_id",
        "max_delegation_depth",
        "memory_service",
        "plugins",
        "request_metadata",
        "run_config",
        "session",
        "session_service",
        "tool_timeout",
        "user_content",
    )

    def __init__(
        self,
        *,
        invocation_id: str,
        agent: BaseAgent,
        session: Session,
        session_service: SessionService | None = None,
        artifact_service: ArtifactService | None = None,
        memory_service: MemoryService | None = None,
        run_config: RunConfig | None = None,
        user_content: Content | None = None,
        branch: str = "",
        delegation_depth: int = 0,
        max_delegation_depth: int = DEFAULT_MAX_DELEGATION_DEPTH,
        call_path: tuple[str, ...] = (),
        deadline: float | None = None,
        tool_timeout: float | None = DEFAULT_TOOL_TIMEOUT,
        llm_calls_of: InvocationContext | None = None,
        delegation_scope: DelegationScope | None = None,
        caller_tree: CallerTree | None = None,
        global_instruction: str | None = None,
        history: SessionHistory | None = None,
        plugins: PluginManager | None = None,
        credential_service: CredentialService | None = None,
        forwarded_credentials: Mapping[str, Credential] | None = None,
        request_metadata: Mapping[str, str] | None = None,
        _shared: _InvocationShared | None = None,
    ) -> None:
        self.invocation_id = invocation_id
        self.agent = agent
        self.session = session
        self.app_name = session.app_name
        self.session_service = session_service
        self.artifact_service = artifact_service
        self.memory_service = memory_service
        self.run_config = run_config or _DEFAULT_RUN_CONFIG
        self.user_content = user_content
        self.branch = branch
        self.delegation_depth = delegation_depth
        self.max_delegation_depth = max_delegation_depth
        self.call_path = call_path
        self.deadline = deadline if deadline is not None else serving_deadline.get()
        self.tool_timeout = tool_timeout
        self.delegation_scope = delegation_scope or DelegationScope()
        self.caller_tree = caller_tree
        self.global_instruction = global_instruction
        self.history = history
        self.plugins = plugins
        self.credential_service = credential_service
        self.forwarded_credentials: Mapping[str, Credential] = MappingProxyType(
            dict(forwarded_credentials or {})
        )
        self.request_metadata: Mapping[str, str] = MappingProxyType(
            check_request_metadata(request_metadata or {})
        )
        self._shared = _shared or _InvocationShared()
        if llm_calls_of is not None:
            self._shared.llm_calls = llm_calls_of._shared.llm_calls
            # One invocation: what its delegations hand out is redacted wherever it shows,
            # and its spans go where the rest of its tree went.
            self._shared.secrets = llm_calls_of._shared.secrets
            self._shared.tracer = (llm_calls_of.tracer,)
        for credential in self.forwarded_credentials.values():
            self._shared.secrets.add(credential)

    def for_agent(self, agent: BaseAgent, *, branch: str | None = None) -> InvocationContext:
        """A copy for running ``agent`` (optionally on another branch); counters are shared."""
        copy = InvocationContext.__new__(InvocationContext)
        for name in InvocationContext.__slots__:
            setattr(copy, name, getattr(self, name))
        copy.agent = agent
        if branch is not None:
            copy.branch = branch
        return copy

    def time_remaining(self) -> float | None:
        """Seconds left until :attr:`deadline` (negative once passed); ``None`` without one."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    @property
    def user_id(self) -> str:
        return self.session.user_id

    @property
    def session_id(self) -> str:
        return self.session.id

    @property
    def tracer(self) -> Tracer | None:
        """Where this invocation's spans go (``None``: tracing is off), looked up at its first
        span and kept for the rest of it: with no provider installed, OpenTelemetry's lookup
        reads the environment each time, ~1 % of an untraced turn per span."""
        shared = self._shared
        if shared.tracer is None:
            shared.tracer = (get_tracer(),)
        return shared.tracer[0]

    @property
    def ended(self) -> bool:
        """True once :meth:`end_invocation` was called by anyone in this invocation."""
        return self._shared.ended

    def end_invocation(self) -> None:
        """Stop the invocation: agents check this between steps and return early."""
        self._shared.ended = True

    def note_forwarded_hooked(self, event: Event) -> None:
        """``event``, forwarded into this run's stream by an AgentTool, went through the
        plugins' ``on_event`` in the child's run: this run's does not call it again."""
        self._shared.hooked_forwards.add(event.id)

    def forwarded_hooked(self, event: Event) -> bool:
        """Whether ``event`` is one :meth:`note_forwarded_hooked` noted (forgotten once asked:
        each is asked about once, as it goes through this run's stream)."""
        noted = self._shared.hooked_forwards
        if event.id not in noted:
            return False
        noted.discard(event.id)
        return True

    @property
    def finished(self) -> bool:
        """True once the invocation is over (:meth:`finish`)."""
        return self._shared.finished

    def finish(self) -> None:
        """Mark the invocation over (the Runner does, once its turn ends in any way): from then
        on the callback and tool contexts made for it refuse state writes and artifact saves,
        which no event would record (a task a tool left running, a context a callback kept)."""
        self._shared.finished = True

    def count_llm_call(self) -> None:
        """Count one model call; past ``run_config.max_llm_calls`` raise
        :class:`~adk_mesh.errors.LlmCallLimitError` instead."""
        self.check_llm_calls(making=1)
        self._shared.llm_calls.calls += 1

    def check_llm_calls(self, *, making: int = 0) -> None:
        """Raise :class:`~adk_mesh.errors.LlmCallLimitError` when ``making`` more model calls
        would take the invocation past ``run_config.max_llm_calls``; with none, when the
        calls counted already did (:meth:`add_llm_calls`: concurrent delegated runs in other
        services were each sent what was left when they started)."""
        limit = self.run_config.max_llm_calls
        if limit > 0 and self._shared.llm_calls.calls + making > limit:
            raise LlmCallLimitError(
                f"the invocation reached max_llm_calls={limit}; no more model calls",
                metadata={"max_llm_calls": str(limit)},
            )

    def add_llm_calls(self, calls: int) -> None:
        """Count ``calls`` model calls made for this invocation elsewhere (by a delegated run
        in another service), so the invocation's limit covers them too. They are counted
        even past the limit (they were made); :meth:`check_llm_calls` tells."""
        self._shared.llm_calls.calls += max(0, calls)

    @property
    def llm_calls(self) -> int:
        """Model calls made so far in this invocation."""
        return self._shared.llm_calls.calls

    @property
    def known_secrets(self) -> KnownSecrets:
        """The credentials handed out in this invocation (in this process), to redact."""
        return self._shared.secrets

    async def get_credential(self, name: str) -> Credential | None:
        """The credential called ``name``: from :attr:`credential_service`, else from
        :attr:`forwarded_credentials` (the service's own wins: a caller cannot replace a
        credential the service was configured with); ``None`` when neither has it. What it
        hands out is remembered for redaction (:attr:`known_secrets`).

        Raises:
            InvalidArgumentError: ``name`` is not a credential name.
        """
        from adk_mesh.credentials import check_credential_name

        check_credential_name(name)
        found: Credential | None = None
        if self.credential_service is not None:
            found = await self.credential_service.get(
                name, app_name=self.app_name, user_id=self.user_id
            )
        if found is None:
            found = self.forwarded_credentials.get(name)
        if found is not None:
            self._shared.secrets.add(found)
        return found

    @property
    def llm_calls_left(self) -> int | None:
        """Model calls the invocation may still make (``None``: no bound): what a delegated
        run in another service may use."""
        limit = self.run_config.max_llm_calls
        if limit <= 0:
            return None
        return max(0, limit - self._shared.llm_calls.calls)

    def new_event(
        self,
        *,
        content: Content | None = None,
        actions: EventActions | None = None,
        author: str | None = None,
    ) -> Event:
        """An event authored by the current agent in this invocation and branch."""
        return Event.new(
            author=author or self.agent.name,
            invocation_id=self.invocation_id,
            branch=self.branch,
            content=content,
            actions=actions,
        )


class ReadonlyContext:
    """What every callback and tool may read: ids, the user's message and the state."""

    __slots__ = ("_invocation",)

    def __init__(self, invocation: InvocationContext) -> None:
        self._invocation = invocation

    @property
    def invocation_context(self) -> InvocationContext:
        return self._invocation

    @property
    def invocation_id(self) -> str:
        return self._invocation.invocation_id

    @property
    def agent_name(self) -> str:
        return self._invocation.agent.name

    @property
    def user_id(self) -> str:
        return self._invocation.session.user_id

    @property
    def app_name(self) -> str:
        return self._invocation.session.app_name

    @property
    def session_id(self) -> str:
        return self._invocation.session.id

    @property
    def branch(self) -> str:
        return self._invocation.branch

    @property
    def user_content(self) -> Content | None:
        return self._invocation.user_content

    @property
    def request_metadata(self) -> Mapping[str, str]:
        """The metadata (key to text) the client sent with this turn's request, or what a
        caller forwarded of it (an AgentTool policy's ``forward_request_metadata``);
        read-only, never stored, traced or logged."""
        return self._invocation.request_metadata

    @property
    def state(self) -> Mapping[str, Any]:
        """The session state (app:, user:, session and temp: keys), read-only."""
        return MappingProxyType(self._invocation.session.state)

    async def load_events(
        self, *, before_event_id: str | None = None, max_events: int = 100
    ) -> list[Event]:
        """Events of the session's history this run may see, oldest first and whole: the
        ``max_events`` newest of those before ``before_event_id`` (``None``: the newest).
        Page back with ``before_event_id=events[0].id`` until the list comes back empty.

        In process this reads the session. A delegated run served by another service holds
        only a window of its caller's history (the newest events, large ones abridged): the
        events the window left out, and abridged ones whole, are fetched from the caller, as
        far as the delegation lets the run see them. A page may then hold fewer events than
        asked when they are large, and an event too large for one message stays abridged.

        Raises:
            InvalidArgumentError: ``max_events`` outside 1..1000, or ``before_event_id`` not
                in the history this run may see.
        """
        if not 1 <= max_events <= MAX_LOAD_EVENTS:
            raise InvalidArgumentError(
                f"max_events must be between 1 and {MAX_LOAD_EVENTS}, not {max_events}"
            )
        invocation = self._invocation
        if invocation.history is not None:
            return await invocation.history.page(
                invocation.session.events, before_event_id=before_event_id, max_events=max_events
            )
        return page_of(invocation.session.events, before_event_id, max_events)


class CallbackContext(ReadonlyContext):
    """A ReadonlyContext whose state is writable and which can use artifacts.

    Every write is recorded in :attr:`actions` and reaches the session through the next event.
    Once the invocation is over (and a ToolContext once its call is answered) no event will
    carry them: state writes and artifact saves then raise
    :class:`~adk_mesh.errors.ConfigError` instead of being lost; reads still work.
    """

    __slots__ = ("_actions", "_gate", "_state")

    def __init__(
        self, invocation: InvocationContext, *, actions: EventActions | None = None
    ) -> None:
        super().__init__(invocation)
        self._actions = actions if actions is not None else EventActions()
        self._gate = _ChangeGate(invocation, type(self).__name__)
        self._state: State = _ContextState(
            invocation.session.state, self._actions.state_delta, self._gate
        )

    def close(self) -> None:
        """Take no more changes: what the context was made for is over (the runtime calls
        this once a tool call is answered)."""
        self._gate.closed = True

    def _check_open(self, change: str) -> None:
        """Refuse ``change`` once no event would record it.

        Raises:
            ConfigError: the invocation is over, or the context was closed.
        """
        self._gate.check(change)

    @property
    def state(self) -> State:
        return self._state

    @property
    def actions(self) -> EventActions:
        return self._actions

    def _artifacts(self) -> ArtifactService:
        service = self._invocation.artifact_service
        if service is None:
            raise ArtifactError("no artifact service is configured for this runner")
        return service

    async def save_artifact(self, filename: str, artifact: Part) -> int:
        """Save a new version of an artifact and record it in ``artifact_delta``. The values
        of the credentials this invocation handed out are replaced by ``[redacted]`` in its
        text or data first (:mod:`adk_mesh.credentials`).

        Raises:
            ConfigError: the context takes no more changes (see the class docstring).
        """
        self._check_open(f"save artifact {filename!r}")
        invocation = self._invocation
        secrets = invocation.known_secrets
        if secrets:
            artifact = _redacted_part(artifact, secrets)
        version = await self._artifacts().save_artifact(
            app_name=invocation.app_name,
            user_id=invocation.user_id,
            session_id=invocation.session_id,
            filename=filename,
            artifact=artifact,
        )
        self._actions.artifact_delta[filename] = version
        return version

    async def load_artifact(self, filename: str, version: int | None = None) -> Part | None:
        invocation = self._invocation
        return await self._artifacts().load_artifact(
            app_name=invocation.app_name,
            user_id=invocation.user_id,
            session_id=invocation.session_id,
            filename=filename,
            version=version,
        )

    async def list_artifacts(self) -> list[str]:
        invocation = self._invocation
        return await self._artifacts().list_artifact_keys(
            app_name=invocation.app_name,
            user_id=invocation.user_id,
            session_id=invocation.session_id,
        )


class _ChangeGate:
    """Whether a CallbackContext still takes changes. Apart from the context, which its State
    shares it with: a State referring to its context would make a reference cycle of each
    context, freed only by the garbage collector (measured: ~15 µs more of it a turn)."""

    __slots__ = ("closed", "invocation", "kind")

    def __init__(self, invocation: InvocationContext, kind: str) -> None:
        self.closed = False
        self.invocation = invocation
        self.kind = kind

    def check(self, change: str) -> None:
        if self.invocation.finished:
            why = f"invocation {self.invocation.invocation_id!r} is over"
        elif self.closed:
            why = f"the call this {self.kind} was made for was answered"
        else:
            return
        raise ConfigError(
            f"cannot {change}: {why}, so no event would record it; make changes while the "
            "tool or callback runs"
        )


class _ContextState(State):
    """The State of a CallbackContext: a write is refused once no event would record it."""

    __slots__ = ("_gate",)

    def __init__(self, value: dict[str, Any], delta: dict[str, Any], gate: _ChangeGate) -> None:
        super().__init__(value, delta)
        self._gate = gate

    def __setitem__(self, key: str, value: Any) -> None:
        self._gate.check(f"write state key {key!r}")
        super().__setitem__(key, value)


def _redacted_part(part: Part, secrets: KnownSecrets) -> Part:
    """``part`` with the known credential values replaced in its text and inline data."""
    update: dict[str, Any] = {}
    if part.text is not None:
        text = secrets.redact_text(part.text)
        if text is not part.text:
            update["text"] = text
    if part.inline_data is not None:
        data = secrets.redact_bytes(part.inline_data.data)
        if data is not part.inline_data.data:
            update["inline_data"] = part.inline_data.model_copy(update={"data": data})
    return part.model_copy(update=update) if update else part


class ToolContext(CallbackContext):
    """The context a tool runs in: the call being answered and the actions it may set.

    ``actions`` is read and replaced as a whole (``ctx.actions = ...``) or changed in place
    (``ctx.actions.escalate = True``); whatever it holds when the tool returns travels on the
    function-response event.

    ``tool_confirmation``: the person's answer when this call asked for confirmation (see
    :meth:`request_confirmation`) and runs again now that it was answered; ``None`` otherwise.
    """

    __slots__ = ("_event_sink", "_progress", "function_call_id", "tool_confirmation")

    def __init__(
        self,
        invocation: InvocationContext,
        *,
        function_call_id: str | None = None,
        actions: EventActions | None = None,
        event_sink: Callable[[Event], None] | None = None,
        progress: ProgressReporter | None = None,
        tool_confirmation: ToolConfirmation | None = None,
    ) -> None:
        super().__init__(invocation, actions=actions)
        self.function_call_id = function_call_id
        self._event_sink = event_sink
        self._progress = progress
        self.tool_confirmation = tool_confirmation

    def request_confirmation(self, *, hint: str = "", payload: Any = None) -> None:
        """Ask a person to confirm this call before it takes effect (human in the loop).

        The call is then left unanswered: whatever the tool returns this time is not shown to
        the model. The run emits an ``adk_request_confirmation`` call carrying this call,
        ``hint`` and ``payload`` (any JSON value), and the invocation ends. When the client
        answers it in a later turn, the tool runs again with the same arguments and the answer
        in :attr:`tool_confirmation` (``confirmed``, and the payload the client sent); it
        decides what a rejection means (a :class:`~adk_mesh.tools.FunctionTool` with
        ``require_confirmation`` answers the model with an error it can read).

        Raises:
            InvalidArgumentError: the context answers no function call.
            ConfigError: the call was answered already, or the invocation is over.
        """
        self._check_open("request confirmation")
        if not self.function_call_id:
            raise InvalidArgumentError(
                "request_confirmation needs the function call being answered; this tool "
                "context has no function_call_id"
            )
        self._actions.requested_tool_confirmations[self.function_call_id] = ToolConfirmation(
            hint=hint, payload=payload
        )

    def forward_event(self, event: Event) -> None:
        """Show an event in the calling agent's stream while the tool runs (AgentTool with
        ``forward_events``). Forwarded events are persisted by the Runner like any other; a
        tool must strip actions it does not want applied. Dropped when nobody listens.

        Never waits (it is synchronous), so never held back by a slow reader: a forwarded
        event is kept even past :data:`MAX_UNREAD_TOOL_EVENTS`, and :meth:`report_progress`
        waits until it is read."""
        if self._event_sink is not None:
            self._event_sink(event)

    @property
    def actions(self) -> EventActions:
        return self._actions

    @actions.setter
    def actions(self, value: EventActions) -> None:
        self._check_open("replace the actions")
        # Keep the State view writing into the delta that will travel.
        self._actions = value
        self._state = _ContextState(self._invocation.session.state, value.state_delta, self._gate)

    async def search_memory(self, query: str, *, limit: int | None = None) -> list[MemoryEntry]:
        """Search the user's long-term memory, best match first; empty when no memory service
        is configured. ``limit``: at most that many (``None``: every match), bounded by the
        store itself (the root's, across the mesh), not cut from all of them here."""
        # Imported here: memory.base loads the session stores, which contexts never needs.
        from adk_mesh.memory.base import check_limit, search_with_limit

        if not query.strip():
            raise InvalidArgumentError("a memory search needs a non-empty query")
        check_limit(limit)
        service = self._invocation.memory_service
        if service is None:
            return []
        return await search_with_limit(
            service, app_name=self.app_name, user_id=self.user_id, query=query, limit=limit
        )

    async def get_credential(self, name: str) -> Credential | None:
        """The credential called ``name`` (an API key, a token), or ``None``: from the
        service's :class:`~adk_mesh.credentials.CredentialService` (the Runner's or server's
        ``credential_service``), else from those a caller forwarded with this run.

        Use :meth:`~adk_mesh.credentials.Credential.reveal` where the value is needed (a
        header, a client). Whatever this tool returns, raises, writes to state or reports as
        progress has the value replaced by ``[redacted]`` before it becomes an event, reaches
        the model or a span.

        Raises:
            InvalidArgumentError: ``name`` is not a credential name.
            ConfigError: the credential exists but its store refuses it (a file other users
                may read).
        """
        return await self._invocation.get_credential(name)

    async def report_progress(
        self, message: str, data: dict[str, Any] | None = None, fraction: float | None = None
    ) -> None:
        """Report progress of a running tool: an event with ``tool_progress`` (tool name,
        call id, message, fraction, data) in the calling agent's stream, never model text; a
        ToolProgress message when the tool is served over the mesh. Dropped when nobody
        listens (a context built without a progress reporter).

        Back-pressured: waits while :data:`MAX_UNREAD_TOOL_EVENTS` of the call's updates are
        unread, so a tool reporting faster than its reader reads runs at the reader's pace;
        nothing is dropped, and updates arrive in the order they were reported."""
        if self._progress is not None:
            secrets = self._invocation.known_secrets
            if secrets:
                message = secrets.redact_text(message)
                data = secrets.redact(data)
            await self._progress(message, data, fraction)
