"""The Runner: runs an agent for one user turn and is the single writer of the session."""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator
from contextlib import aclosing

from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.transfers import DEFAULT_MAX_TRANSFERS, follow_transfers
from adk_mesh.artifacts.base import ArtifactService
from adk_mesh.contexts import (
    DEFAULT_MAX_DELEGATION_DEPTH,
    DEFAULT_TOOL_TIMEOUT,
    InvocationContext,
    RunConfig,
)
from adk_mesh.errors import InvalidArgumentError, SessionNotFoundError
from adk_mesh.ids import shown
from adk_mesh.memory.base import MemoryService
from adk_mesh.sessions.base import Session, SessionService
from adk_mesh.telemetry._spans import trace_invocation
from adk_mesh.types import Content, Event

__all__ = ["Runner", "check_new_message", "find_agent_to_run", "new_invocation_id"]


def new_invocation_id() -> str:
    return f"e-{uuid.uuid4()}"


def check_new_message(message: Content) -> Content:
    """The message that starts a turn, as it is stored: from the user (an empty role means
    the user), with at least one part that is not empty text.

    Raises:
        InvalidArgumentError: no parts, only empty (or blank) text, or another role: a client
            cannot put words in the model's mouth.
    """
    if not message.parts:
        raise InvalidArgumentError("the new message has no parts; send text or data")
    if message.role not in ("", "user"):
        raise InvalidArgumentError(
            f"the new message has role {shown(message.role)}; a turn starts with the user's "
            "message (role 'user', or leave it empty)"
        )
    if all(part.text is not None and not part.text.strip() for part in message.parts):
        raise InvalidArgumentError("the new message's text is empty; send text or data")
    if not message.role:
        message = Content(role="user", parts=message.parts)
    return message


def _transferable_across_tree(agent: BaseAgent) -> bool:
    """An agent keeps the conversation across turns only if it and every agent above it keep
    it (:attr:`~adk_mesh.agents.base.BaseAgent.keeps_conversation`): a workflow agent on the
    path owns the order of its children, so the next turn starts again from the root."""
    current: BaseAgent | None = agent
    while current is not None:
        if not current.keeps_conversation:
            return False
        current = current.parent_agent
    return True


def find_agent_to_run(root: BaseAgent, session: Session, new_message: Content) -> BaseAgent:
    """Which agent answers the next user turn.

    A message answering a function call (a long-running tool's result) goes to the agent that
    made the call. Otherwise the turn resumes with the agent that answered last, if it can
    keep the conversation (see :func:`_transferable_across_tree`); else the root.
    """
    response_ids = {r.id for r in new_message.function_responses if r.id}
    if response_ids:
        for event in reversed(session.events):
            if any(call.id in response_ids for call in event.function_calls()):
                agent = root.find_agent(event.author)
                if agent is not None:
                    return agent
                break
    for event in reversed(session.events):
        if event.author == "user":
            continue
        if event.author == root.name:
            return root
        agent = root.find_sub_agent(event.author)
        if agent is None:
            continue
        if _transferable_across_tree(agent):
            return agent
    return root


class Runner:
    """Runs ``agent`` for one user turn at a time.

    ``run`` loads the session, appends the user's message, picks the agent to answer (see
    :func:`find_agent_to_run`), runs it — following transfers — and appends every non-partial
    event (applying its state and artifact deltas) *before* yielding it, so the caller and
    the agent's next step see the same history. Partial (streaming) events are yielded and
    never stored. One invocation id marks every event of the turn.

    ``max_delegation_depth`` bounds nested delegations (AgentTool, across services too);
    ``tool_timeout`` is how long each tool call may run (``None``: no bound). The number of
    model calls is bounded per turn by ``RunConfig.max_llm_calls``.
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
    ) -> None:
        self.agent = agent
        self.app_name = app_name
        self.session_service = session_service
        self.artifact_service = artifact_service
        self.memory_service = memory_service
        self.max_transfers = max_transfers
        self.max_delegation_depth = max_delegation_depth
        self.tool_timeout = tool_timeout

    async def run(
        self,
        *,
        user_id: str,
        session_id: str,
        new_message: Content,
        run_config: RunConfig | None = None,
        invocation_id: str | None = None,
        session: Session | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Run one user turn and yield its events as they are stored.

        ``session``: the session ``session_id`` of ``user_id``, just loaded (whole) or created
        by the caller from ``session_service``; the run then uses it instead of reading it
        again (a server that has just created the session saves the second read).
        """
        new_message = check_new_message(new_message)
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
            session = await self.session_service.get_session(
                app_name=self.app_name, user_id=user_id, session_id=session_id
            )
        if session is None:
            raise SessionNotFoundError(
                f"session {session_id!r} of user {user_id!r} in app {self.app_name!r} "
                "does not exist"
            )
        agent = find_agent_to_run(self.agent, session, new_message)
        ctx = InvocationContext(
            invocation_id=invocation_id or new_invocation_id(),
            agent=agent,
            session=session,
            session_service=self.session_service,
            artifact_service=self.artifact_service,
            memory_service=self.memory_service,
            run_config=run_config,
            user_content=new_message,
            max_delegation_depth=self.max_delegation_depth,
            tool_timeout=self.tool_timeout,
        )
        user_event = Event.new(author="user", invocation_id=ctx.invocation_id, content=new_message)
        await self.session_service.append_event(session, user_event)
        append = self.session_service.append_event
        events = trace_invocation(
            ctx, follow_transfers(ctx, agent, root=self.agent, max_transfers=self.max_transfers)
        )
        async with aclosing(events):
            async for event in events:
                if event.llm_response.partial:
                    yield event
                else:
                    yield await append(session, event)
