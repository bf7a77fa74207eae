"""Delegations: an AgentTool's policy, and the one piece of code that applies it to the child.

An AgentTool hands a request to a child agent under a :class:`DelegationPolicy`. What the
policy decides *about the child* — what it sees of the parent (state, history), what it may
reach (artifacts by prefix, memory), which of its state changes go back, which of its events
are shown — is applied by :func:`run_delegation`, wherever the child runs: in the parent's
process (AgentTool), or in the agent service where a remote child runs, which receives the
policy with the run (``DelegatedRun.agent_tool``) and calls the same function. What it decides
*about the parent* — refusing a write-back that conflicts with the parent's state
(``REJECT_CONFLICTS``), ``propagate_errors``, ``skip_summarization``, ``timeout`` — is applied
by the AgentTool, in the parent's process: only there is the parent's state.

A caller that sends a delegation away sends only what the policy lets the child see (the
projected state and history); the callee projects again, which changes nothing: every step of
the policy gives the same result applied twice, so each side can enforce it on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from adk_mesh.artifacts.base import ArtifactService
from adk_mesh.contexts import DelegationScope, InvocationContext, RunConfig
from adk_mesh.credentials import Credential
from adk_mesh.errors import ArtifactError, StateConflictError
from adk_mesh.types import Content, Event, EventActions, Part

if TYPE_CHECKING:
    from adk_mesh.agents.base import BaseAgent
    from adk_mesh.memory.base import MemoryService
    from adk_mesh.sessions.base import Session, SessionService

__all__ = [
    "Delegation",
    "DelegationOutcome",
    "DelegationPolicy",
    "StateMergePolicy",
    "forwarded",
    "run_delegation",
    "scoped_artifacts",
    "scoped_memory",
]

_MISSING = object()


class StateMergePolicy(StrEnum):
    LAST_WRITER_WINS = "last_writer_wins"
    REJECT_CONFLICTS = "reject_conflicts"


@dataclass(frozen=True)
class DelegationPolicy:
    """What an AgentTool decides about its child (see :mod:`adk_mesh.tools.agent_tool` for
    each field's meaning and default)."""

    state_keys: tuple[str, ...] | None = None
    include_parent_state: bool = False
    include_parent_history: bool = False
    output_state_keys: frozenset[str] | None = None
    state_merge_policy: StateMergePolicy = StateMergePolicy.LAST_WRITER_WINS
    artifact_prefixes: tuple[str, ...] | None = None
    forward_events: bool = False
    forward_memory: bool = False
    forward_credentials: tuple[str, ...] = ()
    forward_request_metadata: tuple[str, ...] = ()

    @property
    def forwards_secrets(self) -> bool:
        """Whether the child gets credentials or request metadata of the caller: then a child
        in another service is reached over mutual TLS only."""
        return bool(self.forward_credentials or self.forward_request_metadata)

    def child_credentials(self, forwarded: Mapping[str, Credential]) -> dict[str, Credential]:
        """The credentials forwarded to the caller that the child gets too: those named in
        ``forward_credentials``. (A child in the caller's process reaches the process's own
        CredentialService as the caller does; one in another service reaches that service's,
        plus what the caller sends of its own: see :mod:`adk_mesh.tools.agent_tool`.)"""
        return {name: forwarded[name] for name in self.forward_credentials if name in forwarded}

    def child_request_metadata(self, metadata: Mapping[str, str]) -> dict[str, str]:
        """The request metadata the child sees: the keys ``forward_request_metadata`` names."""
        return {key: metadata[key] for key in self.forward_request_metadata if key in metadata}

    def child_state(self, parent_state: Mapping[str, Any]) -> dict[str, Any]:
        """The state the child starts with: ``state_keys`` of the parent's, else all of it
        with ``include_parent_state``, else none."""
        if self.state_keys is not None:
            return {key: parent_state[key] for key in self.state_keys if key in parent_state}
        if self.include_parent_state:
            return dict(parent_state)
        return {}

    def child_history(self, events: Iterable[Event]) -> list[Event]:
        """The history the child starts with: the parent's (non-partial) events with
        ``include_parent_history``, else none."""
        if not self.include_parent_history:
            return []
        return [event.model_copy(deep=True) for event in events if not event.partial]

    def written_back(self, changes: Mapping[str, Any]) -> dict[str, Any]:
        """The child's state changes that go back to the parent (``output_state_keys``)."""
        if self.output_state_keys is None:
            return dict(changes)
        return {key: value for key, value in changes.items() if key in self.output_state_keys}

    def check_write_back(
        self,
        agent_name: str,
        snapshot: Mapping[str, Any],
        current: Mapping[str, Any],
        changes: Mapping[str, Any],
    ) -> None:
        """With ``REJECT_CONFLICTS``, refuse the whole write-back when a key it writes changed
        in the parent (``current``) since the delegation began (``snapshot``).

        Raises:
            StateConflictError: naming the keys; nothing is written back.
        """
        if self.state_merge_policy is not StateMergePolicy.REJECT_CONFLICTS:
            return
        conflicts = sorted(
            key for key in changes if current.get(key, _MISSING) != snapshot.get(key, _MISSING)
        )
        if conflicts:
            raise StateConflictError(
                f"{agent_name!r} wrote {', '.join(conflicts)}, which changed in the caller's "
                "state while it ran; none of its state changes were applied",
                metadata={"keys": ",".join(conflicts)},
            )

    def narrowed(self, scope: DelegationScope) -> DelegationScope:
        """The scope of the child of a run in ``scope``."""
        prefixes = scope.artifact_prefixes
        if self.artifact_prefixes is not None:
            prefixes = (*prefixes, self.artifact_prefixes)
        return DelegationScope(
            artifact_prefixes=prefixes, memory=scope.memory and self.forward_memory
        )


def forwarded(event: Event) -> Event:
    """A child's event as the parent's stream shows it: content kept, but no state, artifact,
    transfer or escalate action — those reach the parent only through the write-back, so the
    parent's Runner never applies or carries them out twice."""
    actions = event.actions
    if actions.is_empty():
        return event
    return event.model_copy(
        update={"actions": EventActions(skip_summarization=actions.skip_summarization)}
    )


@dataclass(frozen=True)
class Delegation:
    """One AgentTool call: its policy, the request, and where the child runs in the
    invocation (its branch, its delegation depth and the largest one allowed, and how many
    transfers it may follow in its own tree).

    ``run_hooks``: whether the child's run goes through the run hooks (``on_user_message``,
    ``before_run``, ``on_event``, ``after_run``) of the caller's plugins
    (``InvocationContext.plugins``), as google-adk's AgentTool runs its child in a Runner of
    the parent's plugins: so for the AgentTool, in the caller's process, wherever the child
    runs. A service serving a delegated child leaves it off: the run hooks are its caller's.
    """

    policy: DelegationPolicy
    request: Content
    branch: str
    depth: int
    max_depth: int
    max_transfers: int
    run_hooks: bool = False


@dataclass
class DelegationOutcome:
    """What a delegation gives back: the text of the child's last answer, the state changes
    the policy writes back, and the artifacts the child saved (name to version).

    ``ended``: the child ended its run (``end_invocation``). That ends the delegation only —
    the AgentTool carries on in the parent's invocation — but a caller whose child runs in
    another service learns it from here, so that its side of the child (the caller's
    ``after_agent`` hooks for it) ends as in process."""

    answer: str = ""
    state_changes: dict[str, Any] = field(default_factory=dict)
    artifact_changes: dict[str, int] = field(default_factory=dict)
    ended: bool = False


def scoped_artifacts(
    service: ArtifactService | None, scope: DelegationScope
) -> ArtifactService | None:
    """``service`` as a run in ``scope`` may use it: limited by each delegation's prefixes."""
    if service is None:
        return None
    for prefixes in scope.artifact_prefixes:
        service = _AllowListArtifacts(service, prefixes)
    return service


def scoped_memory(service: MemoryService | None, scope: DelegationScope) -> MemoryService | None:
    """``service`` when a run in ``scope`` may search memory, else None (nothing found)."""
    return service if scope.memory else None


def child_context(
    parent: InvocationContext,
    delegation: Delegation,
    agent: BaseAgent,
    session: Session,
    *,
    artifact_service: ArtifactService | None,
    memory_service: MemoryService | None,
    session_service: SessionService | None = None,
) -> InvocationContext:
    """The context of an AgentTool's child ``agent`` of ``parent`` over ``session`` (what the
    policy projects of the parent's): its own invocation view of the parent's, narrowed by the
    policy — for the child run here (:func:`run_delegation`) and for the hooks a caller runs
    around a child in another service (``RemoteAgent.run_delegation``), which reach the
    parent's artifacts and memory each its own way."""
    policy = delegation.policy
    return InvocationContext(
        invocation_id=parent.invocation_id,
        agent=agent,
        session=session,
        session_service=session_service,
        artifact_service=artifact_service,
        memory_service=memory_service,
        run_config=RunConfig(max_llm_calls=parent.run_config.max_llm_calls),
        llm_calls_of=parent,
        user_content=delegation.request,
        branch=delegation.branch,
        delegation_depth=delegation.depth,
        max_delegation_depth=delegation.max_depth,
        call_path=parent.call_path,
        deadline=parent.deadline,
        tool_timeout=parent.tool_timeout,
        delegation_scope=policy.narrowed(parent.delegation_scope),
        # The parent's history the child starts with may be a window of it (in a delegated
        # run served here): the rest is where the parent's is.
        history=parent.history if policy.include_parent_history else None,
        # Under the same plugins (their agent, model and tool hooks; the run hooks come
        # only with ``delegation.run_hooks``), with the same credential store; what a caller
        # forwarded reaches the child only as far as the policy says.
        plugins=parent.plugins,
        credential_service=parent.credential_service,
        forwarded_credentials=policy.child_credentials(parent.forwarded_credentials),
        request_metadata=policy.child_request_metadata(parent.request_metadata),
    )


async def run_delegation(
    parent: InvocationContext,
    agent: BaseAgent,
    delegation: Delegation,
    *,
    forward: Callable[[Event], None] | None = None,
) -> DelegationOutcome:
    """Run ``agent`` as an AgentTool's child of ``parent`` and fold its events.

    The child runs to completion in a session of its own (in memory), seeded with what the
    policy projects of the parent's session, with the parent's artifacts and memory as far as
    the policy allows, counting its model calls against the parent invocation's. Transfers
    inside the child's tree are followed there. Each event the child yields is appended to
    its session (so its next step sees its state changes); with ``forward_events`` a stripped
    copy goes to ``forward``. The child's end of the invocation (``end_invocation``) ends the
    delegation only. With ``delegation.run_hooks`` the child's run goes through the run hooks
    of the parent's plugins, as a Runner's turn does (:class:`~adk_mesh.runner.Runner`); an
    event it forwards is not handed to ``on_event`` again in the parent's run.
    """
    from adk_mesh.agents.transfers import follow_transfers
    from adk_mesh.runner import run_on_user_message, with_run_hooks
    from adk_mesh.sessions.memory import InMemorySessionService

    policy = delegation.policy
    # The agent, model and tool hooks come with the context (the child runs in this process);
    # the run hooks only when the caller's side asks.
    plugins = parent.plugins if delegation.run_hooks else None
    request = delegation.request
    child_service = InMemorySessionService()
    child_session = await child_service.create_session(
        app_name=parent.app_name,
        user_id=parent.user_id,
        session_id=parent.session_id,
        state=policy.child_state(parent.session.state),
    )
    child_session.events = policy.child_history(parent.session.events)
    child_ctx = child_context(
        parent,
        delegation,
        agent,
        child_session,
        session_service=child_service,
        artifact_service=(
            _AllowListArtifacts(parent.artifact_service, policy.artifact_prefixes)
            if parent.artifact_service is not None and policy.artifact_prefixes is not None
            else parent.artifact_service
        ),
        memory_service=parent.memory_service if policy.forward_memory else None,
    )
    if plugins is not None and plugins.has("on_user_message"):
        request = await run_on_user_message(plugins, child_ctx, request)
    await child_service.append_event(
        child_session,
        Event.new(
            author="user",
            invocation_id=parent.invocation_id,
            content=request,
            branch=delegation.branch,
        ),
    )
    outcome = DelegationOutcome()
    state_changes: dict[str, Any] = {}
    events = follow_transfers(child_ctx, agent, root=agent, max_transfers=delegation.max_transfers)
    hooked = plugins is not None and plugins.has("on_event")
    if plugins is not None:
        events = with_run_hooks(plugins, child_ctx, events)
    async with aclosing(events):
        async for event in events:
            if event.llm_response.partial:
                continue
            stored = await child_service.append_event(child_session, event)
            state_changes.update(stored.actions.state_delta)
            outcome.artifact_changes.update(stored.actions.artifact_delta)
            if stored.llm_response.content is not None and stored.text:
                outcome.answer = stored.text
            if policy.forward_events and forward is not None:
                shown = forwarded(stored)
                if hooked:
                    parent.note_forwarded_hooked(shown)
                forward(shown)
    if plugins is not None and plugins.has("after_run"):
        await plugins.run("after_run", invocation_context=child_ctx)
    outcome.state_changes = policy.written_back(state_changes)
    outcome.ended = child_ctx.ended
    return outcome


class _AllowListArtifacts(ArtifactService):
    """An artifact service limited to names with one of the allowed prefixes."""

    def __init__(self, inner: ArtifactService, prefixes: Sequence[str]) -> None:
        self._inner = inner
        self._prefixes = tuple(prefixes)

    def _check(self, filename: str) -> None:
        if not filename.startswith(self._prefixes):
            allowed = ", ".join(repr(p) for p in self._prefixes) or "none"
            raise ArtifactError(
                f"artifact {filename!r} is outside this delegation's allowed prefixes ({allowed})"
            )

    async def save_artifact(
        self, *, app_name: str, user_id: str, session_id: str, filename: str, artifact: Part
    ) -> int:
        self._check(filename)
        return await self._inner.save_artifact(
            app_name=app_name,
            user_id=user_id,
            session_id=session_id,
            filename=filename,
            artifact=artifact,
        )

    async def load_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        filename: str,
        version: int | None = None,
    ) -> Part | None:
        self._check(filename)
        return await self._inner.load_artifact(
            app_name=app_name,
            user_id=user_id,
            session_id=session_id,
            filename=filename,
            version=version,
        )

    async def list_artifact_keys(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> list[str]:
        keys = await self._inner.list_artifact_keys(
            app_name=app_name, user_id=user_id, session_id=session_id
        )
        return [key for key in keys if key.startswith(self._prefixes)]

    async def list_versions(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> list[int]:
        self._check(filename)
        return await self._inner.list_versions(
            app_name=app_name, user_id=user_id, session_id=session_id, filename=filename
        )

    async def delete_artifact(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> None:
        self._check(filename)
        await self._inner.delete_artifact(
            app_name=app_name, user_id=user_id, session_id=session_id, filename=filename
        )
