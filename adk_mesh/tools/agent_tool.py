"""AgentTool: call another agent as a tool, get its answer, and carry on.

The child runs to completion in a session of its own (non-streaming); its answer's text comes
back as the tool's response, and its state and artifact changes come back through the tool
event's actions, under the delegation policy:

============================  ====================================================  ==========
policy                        effect                                                default
============================  ====================================================  ==========
``state_keys``                project only these parent keys into the child         none
``include_parent_state``      snapshot the whole parent state into the child        off
``include_parent_history``    snapshot the parent's visible history into the child  off
``output_state_keys``         write back only these keys of the child's changes     all
``state_merge_policy``        LAST_WRITER_WINS, or REJECT_CONFLICTS: refuse the     LWW
                              whole write-back when a key it writes changed in the
                              parent since the delegation began
``artifact_prefixes``         artifact names the child may read and write           all
``forward_events``            show the child's events in the parent's stream        off
``forward_memory``            let the child search the parent's memory service      off
``forward_credentials``       names of credentials the child gets from the caller   none
``forward_request_metadata``  keys of the request's metadata the child sees         none
``max_delegation_depth``      nested delegations allowed below the root             8
``propagate_errors``          a child failure ends the parent's invocation instead  off
                              of becoming an error response the model reads
``skip_summarization``        the child's answer is final; the parent's model is    off
                              not called again to summarise it
``timeout``                   seconds the whole delegation may take; by default     inherited
                              the invocation's ``tool_timeout``
============================  ====================================================  ==========

A child with an ``input_schema`` (an LlmAgent's, or for ``AgentTool(RemoteAgent(...))`` the
one its service's AgentCard gives) is declared with that schema as the tool's parameters; a
call's arguments are checked against it (a mismatch is a ToolError the model reads) and the
child receives them as JSON text. A child with an ``output_schema`` answers with JSON of it:
the tool's response is that object (not ``{"result": text}``), checked again here.

The child's model calls count against the parent invocation's ``max_llm_calls``: one
invocation, one budget, however deep it delegates.

Transfers inside the child's tree run inside the delegation. A forwarded event keeps its
content but loses its state, artifact, transfer and escalate actions — they reach the parent
only through the write-back — so the parent's Runner never applies or executes them twice.
The child's ``end_invocation()`` ends the delegation, not the parent's invocation.

Plugins: as google-adk's child Runner, made with the parent's plugins, the child's run goes
through the caller's plugins' run hooks — ``on_user_message`` (its Content is the child's
request), ``before_run`` (its Content answers for the child), ``on_event`` on each of the
child's events (an Event replaces it, the answer included), ``after_run`` — once each: an event
the child forwards is not handed to ``on_event`` again in the parent's run. They are applied
in the caller's process, for a child in another service too (which sees its events as
forwarded, without actions); a hook that raises fails the call as the child's other errors do.
A child in this process also runs under the caller's agent, model and tool hooks; one in
another service under that service's plugins, the caller's ``before_agent`` / ``after_agent``
seeing it as one agent (as a transfer target; see ``RemoteAgent.run_delegation``).

Where the policy is enforced: what it decides about the child (projection in, artifact
prefixes, memory, write-back out, forwarded events) is applied where the child runs, by one
function (:func:`adk_mesh.agents.delegation.run_delegation`). For a child in another service
(``AgentTool(RemoteAgent(...))``) the policy travels with the call and that service applies
it, so, for instance, an artifact save outside the prefixes fails inside the child exactly as
in process; the caller sends only what the policy lets the child see and filters the
write-back again. What it decides about the parent stays here: ``REJECT_CONFLICTS`` (only
here is the parent's state), ``propagate_errors``, ``skip_summarization`` and ``timeout``
(which cancels the call, and so the remote child). The scope the policy leaves the child
(artifact prefixes, memory) also travels with every call the child makes to other services.

Credentials and request metadata (:mod:`adk_mesh.credentials`): a child in the caller's
process reaches the process's own CredentialService, as any of its code could; what leaves
the caller — to a child in another service, or credentials a caller had forwarded to this
run — is only what ``forward_credentials`` (credential names, looked up in the caller's
context) and ``forward_request_metadata`` (metadata keys) name. Names the caller does not have
are left out. A child in another service gets them only over mutual TLS: a
``RemoteAgent`` whose channel is plaintext, or TLS without a client certificate, refuses to
forward (a :class:`~adk_mesh.errors.ConfigError` saying why) and the service refuses
forwarded credentials on a call that is not mutual TLS. There the forwarded credentials
complement the service's own: ``get_credential(name)`` asks the service's store first, and
a forwarded credential answers only for names it does not have (a caller cannot swap a key
the service was configured with). They travel in a field of their own
(``DelegatedRun.forwarded_credentials``) that no span and no log line records, and their
values are redacted from what the child's tools return, as the caller's own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from adk_mesh.agents._schemas import SchemaMismatch
from adk_mesh.agents.delegation import (
    Delegation,
    DelegationOutcome,
    DelegationPolicy,
    StateMergePolicy,
)
from adk_mesh.agents.transfers import DEFAULT_MAX_TRANSFERS
from adk_mesh.contexts import DEFAULT_MAX_DELEGATION_DEPTH, check_metadata_key
from adk_mesh.credentials import check_credential_name
from adk_mesh.errors import (
    AdkError,
    AgentError,
    ConfigError,
    DelegationError,
    InvalidArgumentError,
    ToolError,
)
from adk_mesh.telemetry._spans import record_control_transfer
from adk_mesh.tools.base import BaseTool
from adk_mesh.types import Content, Part

if TYPE_CHECKING:
    from adk_mesh.agents.base import BaseAgent
    from adk_mesh.contexts import ToolContext
    from adk_mesh.models.base import LlmRequest

__all__ = ["AgentTool", "StateMergePolicy"]


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
        forward_credentials: Sequence[str] = (),
        forward_request_metadata: Sequence[str] = (),
        max_delegation_depth: int = DEFAULT_MAX_DELEGATION_DEPTH,
        propagate_errors: bool = False,
        max_transfers: int = DEFAULT_MAX_TRANSFERS,
        timeout: float | None = None,
    ) -> None:
        from adk_mesh.agents.base import BaseAgent

        if not isinstance(agent, BaseAgent):
            raise ConfigError(
                f"AgentTool wraps an agent, not {agent!r} (a function is a tool of its own)"
            )
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
        if isinstance(forward_credentials, str) or isinstance(forward_request_metadata, str):
            raise ConfigError(
                f"AgentTool {agent.name!r}: forward_credentials and forward_request_metadata "
                "take lists of names, not one string"
            )
        try:
            self.forward_credentials = tuple(
                check_credential_name(name) for name in forward_credentials
            )
        except InvalidArgumentError as error:
            raise ConfigError(f"AgentTool {agent.name!r}: {error.message}") from None
        try:
            self.forward_request_metadata = tuple(
                check_metadata_key(key) for key in forward_request_metadata
            )
        except InvalidArgumentError as error:
            raise ConfigError(f"AgentTool {agent.name!r}: {error.message}") from None
        self.max_delegation_depth = max_delegation_depth
        self.propagate_errors = propagate_errors
        self.max_transfers = max_transfers

    @property
    def policy(self) -> DelegationPolicy:
        """What this AgentTool decides about its child, as the child's side applies it."""
        return DelegationPolicy(
            state_keys=tuple(self.state_keys) if self.state_keys is not None else None,
            include_parent_state=self.include_parent_state,
            include_parent_history=self.include_parent_history,
            output_state_keys=(
                frozenset(self.output_state_keys) if self.output_state_keys is not None else None
            ),
            state_merge_policy=self.state_merge_policy,
            artifact_prefixes=self.artifact_prefixes,
            forward_events=self.forward_events,
            forward_memory=self.forward_memory,
            forward_credentials=self.forward_credentials,
            forward_request_metadata=self.forward_request_metadata,
        )

    @property
    def parameters_schema(self) -> dict[str, Any]:
        """The child's ``input_schema`` when it has one (for an agent of another service,
        once :meth:`prepare_llm_request` learnt it), else one free-text ``request``."""
        schema = self.agent.declared_schemas().input
        if schema is not None:
            copy: dict[str, Any] = json.loads(json.dumps(schema.json_schema))
            return copy  # a provider may adapt its copy
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

    async def prepare_llm_request(self, ctx: ToolContext, request: LlmRequest) -> None:
        """Declare the child, after learning its schemas (a remote child's service is asked
        once)."""
        await self.agent.load_schemas()
        self.process_llm_request(request)

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
        schemas = await self.agent.load_schemas()
        if schemas.input is not None:
            # As google-adk: the checked arguments, as JSON text, are the child's request.
            try:
                checked = schemas.input.check_json(args)
            except SchemaMismatch as mismatch:
                raise ToolError(
                    f"the arguments do not fit the input_schema of agent {self.agent.name!r}: "
                    f"{mismatch}"
                ) from None
            request = json.dumps(checked, ensure_ascii=False)
        else:
            free_text = args.get("request")
            if not isinstance(free_text, str) or not free_text.strip():
                raise ToolError("call this agent with a non-empty 'request' string")
            request = free_text
        parent = ctx.invocation_context
        depth = parent.delegation_depth + 1
        limit = min(parent.max_delegation_depth, self.max_delegation_depth)
        if depth > limit:
            raise DelegationError(
                f"delegating to {self.agent.name!r} would nest {depth} delegations; the limit "
                f"is {limit}"
            )
        record_control_transfer("return_to_caller", self.agent.name, delegation_depth=depth)
        snapshot = dict(parent.session.state)
        policy = self.policy
        delegation = Delegation(
            policy=policy,
            request=Content(role="user", parts=[Part(text=request)]),
            branch=f"{parent.branch or parent.agent.name}.{self.agent.name}",
            depth=depth,
            max_depth=limit,
            max_transfers=self.max_transfers,
            # As google-adk's child Runner, made with the parent's plugins: the child's run
            # goes through their run hooks too, applied on this side (a service serving a
            # remote child applies its own plugins' agent, model and tool hooks only).
            run_hooks=True,
        )
        # The child's side applies the policy (here, or in the service where a remote child
        # runs); what it decides about the parent is applied here.
        outcome = await self.agent.run_delegation(
            parent, delegation, ctx.forward_event if policy.forward_events else None
        )
        self._write_back(ctx, policy, snapshot, outcome)
        if self.skip_summarization:
            ctx.actions.skip_summarization = True
        if schemas.output is None:
            return {"result": outcome.answer}
        # A structured answer is the response itself, as the object it is (google-adk's too).
        try:
            return schemas.output.parse(outcome.answer, as_json=True)
        except SchemaMismatch as mismatch:
            raise ToolError(
                f"the answer of agent {self.agent.name!r} does not fit its output_schema "
                f"{schemas.output.name}: {mismatch}"
            ) from None

    def _write_back(
        self,
        ctx: ToolContext,
        policy: DelegationPolicy,
        snapshot: dict[str, Any],
        outcome: DelegationOutcome,
    ) -> None:
        # Filtered again: a remote child's service filtered already; the parent's state is
        # this side's to protect.
        state_changes = policy.written_back(outcome.state_changes)
        policy.check_write_back(
            self.agent.name, snapshot, ctx.invocation_context.session.state, state_changes
        )
        for key, value in state_changes.items():
            ctx.state[key] = value
        ctx.actions.artifact_delta.update(outcome.artifact_changes)
