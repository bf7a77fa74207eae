"""AgentTool: call another agent as a tool, get its answer, and carry on.

The child runs to completion in a session of its own (non-streaming); its answer's text comes
back as the tool's response, and its state and artifact changes come back through the tool
event's actions, under the delegation policy:

==========================  ====================================================  ==========
policy                      effect                                                default
==========================  ====================================================  ==========
``state_keys``              project only these parent keys into the child         none
``include_parent_state``    snapshot the whole parent state into the child        off
``include_parent_history``  snapshot the parent's visible history into the child  off
``output_state_keys``       write back only these keys of the child's changes     all
``state_merge_policy``      LAST_WRITER_WINS, or REJECT_CONFLICTS: refuse the     LWW
                            whole write-back when a key it writes changed in the
                            parent since the delegation began
``artifact_prefixes``       artifact names the child may read and write           all
``forward_events``          show the child's events in the parent's stream        off
``forward_memory``          let the child search the parent's memory service      off
``max_delegation_depth``    nested delegations allowed below the root             8
``propagate_errors``        a child failure ends the parent's invocation instead  off
                            of becoming an error response the model reads
``skip_summarization``      the child's answer is final; the parent's model is    off
                            not called again to summarise it
``timeout``                 seconds the whole delegation may take; by default     inherited
                            the invocation's ``tool_timeout``
==========================  ====================================================  ==========

The child's model calls count against the parent invocation's ``max_llm_calls``: one
invocation, one budget, however deep it delegates.

Transfers inside the child's tree run inside the delegation. A forwarded event keeps its
content but loses its state, artifact, transfer and escalate actions — they reach the parent
only through the write-back — so the parent's Runner never applies or executes them twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from adk_mesh.agents.transfers import DEFAULT_MAX_TRANSFERS, follow_transfers
from adk_mesh.artifacts.base import ArtifactService
from adk_mesh.contexts import DEFAULT_MAX_DELEGATION_DEPTH, InvocationContext, RunConfig
from adk_mesh.errors import (
    AdkError,
    AgentError,
    ArtifactError,
    DelegationError,
    StateConflictError,
    ToolError,
)
from adk_mesh.telemetry._spans import record_control_transfer
from adk_mesh.tools.base import BaseTool
from adk_mesh.types import Content, Event, EventActions, Part

if TYPE_CHECKING:
    from adk_mesh.agents.base import BaseAgent
    from adk_mesh.contexts import ToolContext

__all__ = ["AgentTool", "StateMergePolicy"]

_MISSING = object()


class StateMergePolicy(StrEnum):
    LAST_WRITER_WINS = "last_writer_wins"
    REJECT_CONFLICTS = "reject_conflicts"


class AgentTool(BaseTool):
    """Wraps an agent (local or remote) as a tool. See the module docstring for the policies."""

    def __init__(
        self,
        agent: BaseAgent,
        *,
        skip_summarization: bool = False,
        state_keys: Sequence[str] | None = None,
        include_parent_state: bool = False,
        include_parent_history: bool = False,
        output_state_keys: Sequence[str] | None = None,
        state_merge_policy: StateMergePolicy = StateMergePolicy.LAST_WRITER_WINS,
        artifact_prefixes: Sequence[str] | None = None,
        forward_events: bool = False,
        forward_memory: bool = False,
        max_delegation_depth: int = DEFAULT_MAX_DELEGATION_DEPTH,
        propagate_errors: bool = False,
        max_transfers: int = DEFAULT_MAX_TRANSFERS,
        timeout: float | None = None,
    ) -> None:
        super().__init__(agent.name, agent.description or f"Delegate a request to {agent.name}.")
        self.timeout = timeout
        self.agent = agent
        self.skip_summarization = skip_summarization
        self.state_keys = list(state_keys) if state_keys is not None else None
        self.include_parent_state = include_parent_state
        self.include_parent_history = include_parent_history
        self.output_state_keys = set(output_state_keys) if output_state_keys is not None else None
        self.state_merge_policy = StateMergePolicy(state_merge_policy)
        self.artifact_prefixes = tuple(artifact_prefixes) if artifact_prefixes is not None else None
        self.forward_events = forward_events
        self.forward_memory = forward_memory
        self.max_delegation_depth = max_delegation_depth
        self.propagate_errors = propagate_errors
        self.max_transfers = max_transfers

    @property
    def parameters_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                "request": {
                    "type": "string",
                    "description": f"What to ask {self.agent.name}, with all the details it needs.",
                }
            },
            "required": ["request"],
        }

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self._delegate(ctx, args)
        except AdkError as error:
            if self.propagate_errors:
                error.propagate = True
                raise
            # A ToolError marked to propagate comes from a nested propagating delegation: this
            # delegation's own policy decides, so it must not go through as it is.
            if isinstance(error, ToolError) and not error.propagate:
                raise
            raise ToolError(
                f"agent {self.agent.name!r} failed: {type(error).__name__}: {error.message}"
            ) from error
        except Exception as error:
            if not self.propagate_errors:
                raise  # the calling agent reports it to its model
            # Only an AdkError can carry ``propagate``; any other failure would be reported.
            failure = AgentError(
                f"agent {self.agent.name!r} failed: {type(error).__name__}: {error}"
            )
            failure.propagate = True
            raise failure from error

    async def _delegate(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        from adk_mesh.sessions.memory import InMemorySessionService

        request = args.get("request")
        if not isinstance(request, str) or not request.strip():
            raise ToolError("call this agent with a non-empty 'request' string")
        parent = ctx.invocation_context
        depth = parent.delegation_depth + 1
        limit = min(parent.max_delegation_depth, self.max_delegation_depth)
        if depth > limit:
            raise DelegationError(
                f"delegating to {self.agent.name!r} would nest {depth} delegations; the limit "
                f"is {limit}"
            )
        record_control_transfer("return_to_caller", self.agent.name, delegation_depth=depth)
        parent_state = parent.session.state
        snapshot = dict(parent_state)
        child_service = InMemorySessionService()
        child_session = await child_service.create_session(
            app_name=parent.app_name,
            user_id=parent.user_id,
            session_id=parent.session_id,
            state=self._initial_state(parent_state),
        )
        if self.include_parent_history:
            child_session.events = [
                event.model_copy(deep=True) for event in parent.session.events if not event.partial
            ]
        user_content = Content(role="user", parts=[Part(text=request)])
        child_ctx = InvocationContext(
            invocation_id=parent.invocation_id,
            agent=self.agent,
            session=child_session,
            session_service=child_service,
            artifact_service=(
                _AllowListArtifacts(parent.artifact_service, self.artifact_prefixes)
                if parent.artifact_service is not None and self.artifact_prefixes is not None
                else parent.artifact_service
            ),
            memory_service=parent.memory_service if self.forward_memory else None,
            run_config=RunConfig(max_llm_calls=parent.run_config.max_llm_calls),
            llm_calls_of=parent,
            user_content=user_content,
            branch=f"{parent.branch or parent.agent.name}.{self.agent.name}",
            delegation_depth=depth,
            max_delegation_depth=limit,
            call_path=parent.call_path,
            deadline=parent.deadline,
            tool_timeout=parent.tool_timeout,
        )
        await child_service.append_event(
            child_session,
            Event.new(
                author="user",
                invocation_id=parent.invocation_id,
                content=user_content,
                branch=child_ctx.branch,
            ),
        )
        answer = ""
        state_changes: dict[str, Any] = {}
        artifact_changes: dict[str, int] = {}
        async for event in follow_transfers(
            child_ctx, self.agent, root=self.agent, max_transfers=self.max_transfers
        ):
            if event.llm_response.partial:
                continue
            stored = await child_service.append_event(child_session, event)
            state_changes.update(stored.actions.state_delta)
            artifact_changes.update(stored.actions.artifact_delta)
            if stored.llm_response.content is not None and stored.text:
                answer = stored.text
            if self.forward_events:
                ctx.forward_event(_stripped(stored))
        self._write_back(ctx, snapshot, state_changes, artifact_changes)
        if self.skip_summarization:
            ctx.actions.skip_summarization = True
        return {"result": answer}

    def _initial_state(self, parent_state: dict[str, Any]) -> dict[str, Any]:
        if self.state_keys is not None:
            return {key: parent_state[key] for key in self.state_keys if key in parent_state}
        if self.include_parent_state:
            return dict(parent_state)
        return {}

    def _write_back(
        self,
        ctx: ToolContext,
        snapshot: dict[str, Any],
        state_changes: dict[str, Any],
        artifact_changes: dict[str, int],
    ) -> None:
        if self.output_state_keys is not None:
            state_changes = {k: v for k, v in state_changes.items() if k in self.output_state_keys}
        if self.state_merge_policy is StateMergePolicy.REJECT_CONFLICTS:
            current = ctx.invocation_context.session.state
            conflicts = sorted(
                key
                for key in state_changes
                if current.get(key, _MISSING) != snapshot.get(key, _MISSING)
            )
            if conflicts:
                raise StateConflictError(
                    f"{self.agent.name!r} wrote {', '.join(conflicts)}, which changed in the "
                    "caller's state while it ran; none of its state changes were applied",
                    metadata={"keys": ",".join(conflicts)},
                )
        for key, value in state_changes.items():
            ctx.state[key] = value
        ctx.actions.artifact_delta.update(artifact_changes)


def _stripped(event: Event) -> Event:
    actions = event.actions
    if actions.is_empty():
        return event
    return event.model_copy(
        update={"actions": EventActions(skip_summarization=actions.skip_summarization)}
    )


class _AllowListArtifacts(ArtifactService):
    """The parent's artifact service, limited to names with one of the allowed prefixes."""

    def __init__(self, inner: ArtifactService, prefixes: tuple[str, ...]) -> None:
        self._inner = inner
        self._prefixes = prefixes

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
