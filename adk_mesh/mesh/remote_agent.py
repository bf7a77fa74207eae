"""RemoteAgent: an agent served by an AgentServer in another process, used as a local one."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import grpc
import grpc.aio

from adk_mesh import codec
from adk_mesh.agents.base import BaseAgent, RemoteLocation
from adk_mesh.contexts import InvocationContext
from adk_mesh.errors import LlmCallLimitError
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._deadline import call_timeout
from adk_mesh.mesh._limits import llm_calls_in
from adk_mesh.mesh._status import error_from_downstream
from adk_mesh.mesh.security import ClientTLS
from adk_mesh.types import Event, EventActions
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc

__all__ = ["RemoteAgent"]


class RemoteAgent(BaseAgent):
    """Runs an agent of another service through a delegated ``Run``; yields its events.

    The remote side sees what the caller's context holds — the session's state and
    non-partial events, the user's message, the invocation id, branch, delegation depth and
    the call path of agent services — persists nothing and streams every event back. So:

    * as a transfer target (``sub_agents=[RemoteAgent(...)]``) the caller's Runner appends the
      remote events to the caller's session like those of a local sub-agent;
    * inside ``AgentTool(RemoteAgent(...))`` the events are folded into the tool's response
      and actions by AgentTool's delegation policy.

    A transfer the remote service followed inside its own tree reaches the caller without
    ``transfer_to_agent`` (it was already carried out); a transfer to an agent outside that
    tree ends the remote run and is followed by the caller.

    The call carries the time that remains of the invocation's deadline (or ``timeout`` when
    that is shorter); once the deadline has passed, no call is made and
    :class:`~adk_mesh.errors.DeadlineExceededError` is raised at once. It also carries the
    model calls the invocation has left (``RunConfig.max_llm_calls``), not its whole limit;
    with none left, no call is made (:class:`~adk_mesh.errors.LlmCallLimitError`). The calls
    the remote run reports having made count against the invocation here.

    Failures of the call are raised as the :class:`~adk_mesh.errors.AdkError` the remote side
    raised; a failure of the transport (the service unreachable, ...) names this agent, and
    the address goes to this service's log. Closing the generator early (or cancelling the
    task) cancels the call, which cancels the remote agent.

    Args:
        name: this agent's name in the caller's tree (and the author of its events).
        target: ``host:port`` or ``dns:///host:port`` of the AgentServer.
        description: what the agent does; the caller's model reads it to route to it.
        agent_name: which agent of the remote tree runs (default: the served root).
        timeout: deadline in seconds of one remote run (default: none).
        tls: TLS to the service's mesh door (default: ``ADK_MESH_TLS_CA`` / ``_CERT`` /
            ``_KEY`` from the environment; plaintext when they are unset).
    """

    def __init__(
        self,
        name: str,
        target: str,
        *,
        description: str = "",
        agent_name: str = "",
        timeout: float | None = None,
        tls: ClientTLS | None = None,
    ) -> None:
        super().__init__(name=name, description=description)
        self.target = target
        self.tls = tls
        self.agent_name = agent_name
        self.timeout = timeout
        self._channel: grpc.aio.Channel | None = None
        self._cached_stub: Any = None

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

    def _request(self, ctx: InvocationContext) -> agent_pb2.RunRequest:
        call_path = ctx.call_path
        if not call_path:
            # A root run: its own service begins the path. Within an AgentTool the tree above
            # is out of sight, and the app name stands for that service.
            root = self.root_agent
            call_path = (root.name if root is not self else ctx.app_name,)
        delegated = agent_pb2.DelegatedRun(
            invocation_id=ctx.invocation_id,
            branch=ctx.branch,
            delegation_depth=ctx.delegation_depth,
            max_delegation_depth=ctx.max_delegation_depth,
            session=codec.session_view_to_proto(ctx.session),
            call_path=call_path,
        )
        if ctx.user_content is not None:
            delegated.user_content.CopyFrom(codec.content_to_proto(ctx.user_content))
        run_config = codec.run_config_to_proto(ctx.run_config)
        left = ctx.llm_calls_left
        if left == 0:
            raise LlmCallLimitError(
                f"the invocation reached max_llm_calls={ctx.run_config.max_llm_calls}; "
                f"not delegating to {self.name!r}",
                metadata={"max_llm_calls": str(ctx.run_config.max_llm_calls)},
            )
        # What is left, not the limit: the hop downstream cannot make the invocation exceed
        # it. 0 (no bound here) leaves the limit to the remote server.
        run_config.max_llm_calls = left or 0
        return agent_pb2.RunRequest(
            delegated=delegated,
            run_config=run_config,
            agent_name=self.agent_name,
            accept_event_batches=True,
        )

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        timeout = call_timeout(ctx.deadline, self.timeout, f"remote agent {self.name!r}")
        call = self._stub().Run(self._request(ctx), timeout=timeout)
        try:
            held: Event | None = None
            async for response in call:
                for event in codec.run_response_events(response):
                    if held is not None:
                        # More events followed the transfer: the remote tree carried it out.
                        yield _without_transfer(held)
                        held = None
                    if event.actions.transfer_to_agent and not event.partial:
                        held = event
                        continue
                    yield event
            if held is not None:
                yield held
            ctx.add_llm_calls(llm_calls_in(await call.trailing_metadata()))
        except grpc.RpcError as error:
            ctx.add_llm_calls(llm_calls_in(error.trailing_metadata()))
            raise error_from_downstream(
                error, f"remote agent {self.name!r}", self.target
            ) from error
        finally:
            call.cancel()


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
