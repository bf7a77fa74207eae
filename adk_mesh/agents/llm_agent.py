"""LlmAgent: an agent driven by a language model and its tools."""

from __future__ import annotations

import inspect
import logging
import math
import re
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, Literal

from adk_mesh._tasks import TaskFeed, run_all
from adk_mesh.agents.base import AgentCallback, BaseAgent, _as_list, call_callbacks
from adk_mesh.agents.history import RequestHistory, request_contents
from adk_mesh.contexts import (
    CallbackContext,
    InvocationContext,
    ProgressReporter,
    ReadonlyContext,
    StreamingMode,
    ToolContext,
    TransferTarget,
)
from adk_mesh.errors import AdkError, AgentError, ConfigError, ToolError
from adk_mesh.models.base import GenerateContentConfig, Llm, LlmRequest
from adk_mesh.telemetry import _spans as telemetry
from adk_mesh.tools.base import BaseTool, Toolset, execute_tool
from adk_mesh.types import (
    Content,
    Event,
    EventActions,
    FunctionCall,
    LlmResponse,
    Part,
    ToolProgress,
)

logger = logging.getLogger(__name__)

__all__ = [
    "InstructionProvider",
    "LlmAgent",
    "ModelCallback",
    "ToolCallback",
]

InstructionProvider = Callable[[ReadonlyContext], "str | Awaitable[str]"]
#: before: ``(callback_context, llm_request) -> LlmResponse | None`` (a response skips the
#: model); after: ``(callback_context, llm_response) -> LlmResponse | None`` (replaces it).
ModelCallback = Callable[..., "LlmResponse | Awaitable[LlmResponse | None] | None"]
#: before: ``(tool, args, tool_context) -> dict | None`` (a dict skips the tool);
#: after: ``(tool, args, tool_context, response) -> dict | None`` (replaces the response).
ToolCallback = Callable[..., "dict[str, Any] | Awaitable[dict[str, Any] | None] | None"]

ToolUnion = BaseTool | Toolset | Callable[..., Any]

_PLACEHOLDER = re.compile(r"\{((?:app:|user:|temp:)?[A-Za-z_][A-Za-z0-9_.]*)(\?)?\}")

_TRANSFER_TOOL_NAME = "transfer_to_agent"


def render_instruction(template: str, state: ReadonlyContext) -> str:
    """Fill ``{key}`` placeholders from state; ``{key?}`` is optional (empty when unset).

    Braces that do not hold a state-key name (JSON examples, ``{{``) are left as they are.
    """

    values = state.state

    def replace(match: re.Match[str]) -> str:
        key, optional = match.group(1), match.group(2)
        if key in values:
            value = values[key]
            return "" if value is None else str(value)
        if optional:
            return ""
        raise AgentError(
            f"the instruction of agent {state.agent_name!r} uses state key {{{key}}}, which is "
            f"not set; set it first or write {{{key}?}} to make it optional"
        )

    return _PLACEHOLDER.sub(replace, template)


class LlmAgent(BaseAgent):
    """An agent whose steps a language model decides.

    Each step sends the model a request — the instruction (with ``{key}`` placeholders filled
    from state), the tools' declarations and the conversation history — and yields the
    model's answer as an event. When the answer calls tools, they run (concurrently when
    several are called at once), their responses are yielded as one event, and the model is
    asked again, until it answers without calling a tool.

    The history in a request is built from the events appended since the agent's last
    request in the session (:class:`~adk_mesh.agents.history.RequestHistory`), so its cost
    does not grow with the session. Its contents are the stored events' own: a
    ``before_model_callback`` that changes one replaces it in ``llm_request.contents`` (or
    changes a copy) rather than changing it in place.

    Args:
        name: unique identifier within the agent tree.
        model: an :class:`~adk_mesh.models.Llm` or a model string such as
            ``"gemini/gemini-2.5-flash"``; ``None`` inherits the nearest LlmAgent ancestor's.
        instruction: the system instruction, or a callable receiving a ReadonlyContext.
        description: what this agent does; other agents' models read it to route to it.
        tools: tools, toolsets, or plain functions (wrapped in FunctionTool).
        sub_agents: agents this one may transfer control to.
        output_key: saves the final answer's text into state under this key.
        generate_content_config: sampling settings sent with every request.
        include_contents: ``"default"`` sends the conversation history; ``"none"`` only the
            current turn.
        disallow_transfer_to_parent / disallow_transfer_to_peers: narrow the transfer targets.
    """

    def __init__(
        self,
        *,
        name: str,
        model: Llm | str | None = None,
        instruction: str | InstructionProvider = "",
        description: str = "",
        tools: Sequence[ToolUnion] | None = None,
        sub_agents: Sequence[BaseAgent] | None = None,
        output_key: str | None = None,
        generate_content_config: GenerateContentConfig | None = None,
        include_contents: Literal["default", "none"] = "default",
        disallow_transfer_to_parent: bool = False,
        disallow_transfer_to_peers: bool = False,
        before_agent_callback: AgentCallback | Sequence[AgentCallback] | None = None,
        after_agent_callback: AgentCallback | Sequence[AgentCallback] | None = None,
        before_model_callback: ModelCallback | Sequence[ModelCallback] | None = None,
        after_model_callback: ModelCallback | Sequence[ModelCallback] | None = None,
        before_tool_callback: ToolCallback | Sequence[ToolCallback] | None = None,
        after_tool_callback: ToolCallback | Sequence[ToolCallback] | None = None,
    ) -> None:
        super().__init__(
            name=name,
            description=description,
            sub_agents=sub_agents,
            before_agent_callback=before_agent_callback,
            after_agent_callback=after_agent_callback,
        )
        if include_contents not in ("default", "none"):
            raise ConfigError("include_contents is 'default' or 'none'")
        self._model = model
        self.instruction = instruction
        self.output_key = output_key
        self.generate_content_config = generate_content_config or GenerateContentConfig()
        self.include_contents = include_contents
        self.disallow_transfer_to_parent = disallow_transfer_to_parent
        self.disallow_transfer_to_peers = disallow_transfer_to_peers
        self.before_model_callbacks: list[ModelCallback] = _as_list(before_model_callback)
        self.after_model_callbacks: list[ModelCallback] = _as_list(after_model_callback)
        self.before_tool_callbacks: list[ToolCallback] = _as_list(before_tool_callback)
        self.after_tool_callbacks: list[ToolCallback] = _as_list(after_tool_callback)
        self.tools: list[BaseTool | Toolset] = [_as_tool(tool) for tool in tools or ()]
        self._request_history = RequestHistory()
        names = [tool.name for tool in self.tools if isinstance(tool, BaseTool)]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"agent {name!r} has two tools named {', '.join(duplicates)}")

    # --- model ------------------------------------------------------------------------------

    @property
    def model(self) -> Llm:
        """The model this agent calls (resolved from a string on first use, or inherited)."""
        model = self._model
        if isinstance(model, Llm):
            return model
        if isinstance(model, str) and model:
            from adk_mesh.models.registry import resolve_model

            resolved = resolve_model(model)
            self._model = resolved
            return resolved
        ancestor = self.parent_agent
        while ancestor is not None:
            if isinstance(ancestor, LlmAgent) and ancestor._model is not None:
                return ancestor.model
            ancestor = ancestor.parent_agent
        raise ConfigError(f"agent {self.name!r} has no model and no LlmAgent ancestor with one")

    # --- transfers --------------------------------------------------------------------------

    @property
    def keeps_conversation(self) -> bool:
        """An LLM agent answers the next turn too, unless it may not hand back to its parent."""
        return self.parent_agent is None or not self.disallow_transfer_to_parent

    def transfer_targets(self) -> list[BaseAgent]:
        """Agents this one may transfer to: its sub-agents, then its parent and peers unless
        the parent owns its children's transfers (a workflow parent decides the order)."""
        targets = list(self.sub_agents)
        parent = self.parent_agent
        if parent is not None and not parent.owns_child_transfers:
            if not self.disallow_transfer_to_parent:
                targets.append(parent)
            if not self.disallow_transfer_to_peers:
                targets.extend(peer for peer in parent.sub_agents if peer is not self)
        return targets

    def transfer_choices(self, ctx: InvocationContext) -> list[TransferTarget]:
        """What this agent's model may transfer to in ``ctx``: :meth:`transfer_targets`, and
        when a transfer from another service handed the run to this agent, the caller's
        agents in its place (``ctx.caller_tree``: its parent and peers there), under this
        agent's own ``disallow_transfer_to_*``."""
        choices = [
            TransferTarget(agent.name, agent.description) for agent in self.transfer_targets()
        ]
        outer = ctx.caller_tree
        if outer is None or outer.agent_name != self.name:
            return choices
        foreign: list[TransferTarget] = []
        if outer.parent is not None and not self.disallow_transfer_to_parent:
            foreign.append(outer.parent)
        if not self.disallow_transfer_to_peers:
            foreign.extend(outer.peers)
        taken = {choice.name for choice in choices} | {self.name}
        for target in foreign:
            if target.name not in taken:
                taken.add(target.name)
                choices.append(target)
        return choices

    def _parent_choice(self, ctx: InvocationContext) -> str | None:
        """The name of the agent this one hands back to, when it may."""
        if self.parent_agent is not None:
            if self.parent_agent.owns_child_transfers or self.disallow_transfer_to_parent:
                return None
            return self.parent_agent.name
        outer = ctx.caller_tree
        if outer is None or outer.agent_name != self.name or outer.parent is None:
            return None
        return None if self.disallow_transfer_to_parent else outer.parent.name

    # --- request ----------------------------------------------------------------------------

    async def canonical_instruction(self, ctx: ReadonlyContext) -> str:
        instruction = self.instruction
        if callable(instruction):
            result = instruction(ctx)
            if inspect.isawaitable(result):
                result = await result
            return str(result)
        return render_instruction(instruction, ctx) if instruction else ""

    async def canonical_tools(
        self, ctx: ReadonlyContext, *, skip_unavailable: bool = False
    ) -> list[BaseTool]:
        """This agent's tools with every toolset expanded for this context."""
        resolved: list[BaseTool] = []
        for tool in self.tools:
            if not isinstance(tool, Toolset):
                resolved.append(tool)
                continue
            try:
                resolved.extend(await tool.tools(ctx))
            except AdkError as error:
                if not skip_unavailable:
                    raise
                logger.warning("toolset %s left out: %s", type(tool).__name__, error.message)
        return resolved

    async def _build_request(
        self, ctx: InvocationContext
    ) -> tuple[LlmRequest, dict[str, BaseTool]]:
        readonly = ReadonlyContext(ctx)
        request = LlmRequest(
            model=self.model.name,
            config=self.generate_content_config.model_copy(),
            system_instruction=await self.canonical_instruction(readonly) or None,
        )
        tools = await self.canonical_tools(readonly)
        targets = self.transfer_choices(ctx)
        if targets:
            from adk_mesh.tools.builtin import TransferToAgentTool

            tools.append(TransferToAgentTool([target.name for target in targets]))
            request.append_instruction(
                _transfer_instruction(self, targets, self._parent_choice(ctx))
            )
        tools_by_name: dict[str, BaseTool] = {}
        preparing = ToolContext(ctx)
        for tool in tools:
            if tool.name in tools_by_name:
                raise ConfigError(f"agent {self.name!r} has two tools named {tool.name!r}")
            tools_by_name[tool.name] = tool
            await tool.prepare_llm_request(preparing, request)
        # A call whose turn died before its result was stored (a crash mid-call), or a
        # long-running one still waiting, is answered here: providers refuse a call left open.
        session = ctx.session
        if self.include_contents == "none":
            request.contents = request_contents(
                session.events,
                agent_name=self.name,
                branch=ctx.branch,
                invocation_id=ctx.invocation_id,
            )
        else:
            # Built from what was appended since this agent's last request in the session.
            request.contents = self._request_history.contents(
                (session.app_name, session.user_id, session.id),
                session.events,
                agent_name=self.name,
                branch=ctx.branch,
            )
        return request, tools_by_name

    # --- the loop ---------------------------------------------------------------------------

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        while True:
            last_event: Event | None = None
            async for event in self._step(ctx):
                last_event = event
                yield event
            if last_event is None or ctx.ended or _ends_turn(last_event):
                return

    async def _step(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        """One model call, and the tools it asks for."""
        request, tools_by_name = await self._build_request(ctx)
        callback_context = CallbackContext(ctx)
        response: LlmResponse | None = None
        if self.before_model_callbacks:
            response = await call_callbacks(self.before_model_callbacks, callback_context, request)
        if response is None:
            ctx.count_llm_call()
            streaming = ctx.run_config.streaming_mode is StreamingMode.SSE
            model = self.model
            chunks = telemetry.trace_model_call(
                model, request, model.generate_content(request, stream=streaming)
            )
            async for chunk in chunks:
                if chunk.partial:
                    yield Event(
                        author=self.name,
                        invocation_id=ctx.invocation_id,
                        branch=ctx.branch,
                        llm_response=chunk,
                    )
                    continue
                response = chunk
            if response is None:
                raise AgentError(f"model {self.model.name!r} returned no final response")
        if self.after_model_callbacks:
            replaced = await call_callbacks(self.after_model_callbacks, callback_context, response)
            if replaced is not None:
                response = replaced

        response = _with_call_ids(response)
        event = Event(
            author=self.name,
            invocation_id=ctx.invocation_id,
            branch=ctx.branch,
            llm_response=response,
            actions=callback_context.actions,
        )
        calls = event.function_calls()
        if calls:
            event.long_running_tool_ids = [
                call.id
                for call in calls
                if call.id is not None
                and (tool := tools_by_name.get(call.name)) is not None
                and tool.is_long_running
            ]
        elif self.output_key and response.content is not None and not response.partial:
            text = response.content.text
            if text:
                event.actions.state_delta[self.output_key] = text
        yield event
        if not calls:
            return
        async for tool_event in self._run_tools(ctx, calls, tools_by_name):
            yield tool_event

    async def _run_tools(
        self, ctx: InvocationContext, calls: list[FunctionCall], tools: dict[str, BaseTool]
    ) -> AsyncGenerator[Event, None]:
        """Run the called tools concurrently; yield forwarded events as they come, then one
        event with every function response and the merged actions."""
        async with TaskFeed[Event, list[tuple[Part | None, EventActions]]]() as feed:
            feed.start(
                run_all([self._call_tool(ctx, call, tools, feed.send_nowait) for call in calls])
            )
            async for event in feed:
                yield event
            results = feed.result()
        parts = [part for part, _ in results if part is not None]
        actions = EventActions()
        for _, tool_actions in results:
            actions = actions.merge(tool_actions) if not tool_actions.is_empty() else actions
        if not parts and actions.is_empty():
            return  # long-running tools with no result yet: the client answers later
        yield Event(
            author=self.name,
            invocation_id=ctx.invocation_id,
            branch=ctx.branch,
            llm_response=LlmResponse(content=Content(role="tool", parts=parts) if parts else None),
            actions=actions,
        )

    async def _call_tool(
        self,
        ctx: InvocationContext,
        call: FunctionCall,
        tools: dict[str, BaseTool],
        sink: Callable[[Event], None],
    ) -> tuple[Part | None, EventActions]:
        tool_context = ToolContext(
            ctx,
            function_call_id=call.id,
            event_sink=sink,
            progress=self._progress_reporter(ctx, call, sink),
        )
        tool = tools.get(call.name)
        args = call.args
        with telemetry.trace_tool_call(call.name, tool, call.id, args, ctx):
            response = await self._answer_call(tool_context, call, tool, tools)
            telemetry.record_tool_result(response)
            target = tool_context.actions.transfer_to_agent
            if target:
                telemetry.record_control_transfer("pass_control", target)
        if response is None:
            if tool is not None and tool.is_long_running:
                return None, tool_context.actions
            response = {}
        part = Part.from_function_response(call.name, response, id=call.id)
        return part, tool_context.actions

    def _progress_reporter(
        self, ctx: InvocationContext, call: FunctionCall, sink: Callable[[Event], None]
    ) -> ProgressReporter:
        """Where ``call``'s tool reports progress (a local tool, or a remote one's progress
        as it arrives): a progress event in this agent's stream, never model text."""

        async def report(message: str, data: dict[str, Any] | None, fraction: float | None) -> None:
            progress = ToolProgress(
                tool_name=call.name,
                function_call_id=call.id,
                message=message,
                fraction=_clamped(fraction),
                data=data,
            )
            sink(
                Event.for_tool_progress(
                    progress, author=self.name, invocation_id=ctx.invocation_id, branch=ctx.branch
                )
            )

        return report

    async def _answer_call(
        self,
        tool_context: ToolContext,
        call: FunctionCall,
        tool: BaseTool | None,
        tools: dict[str, BaseTool],
    ) -> dict[str, Any] | None:
        args = call.args
        response: dict[str, Any] | None
        if tool is None:
            available = ", ".join(sorted(tools)) or "none"
            response = {
                "error": f"Tool {call.name!r} is not available to this agent. "
                f"Available tools: {available}."
            }
        else:
            response = None
            if self.before_tool_callbacks:
                response = await call_callbacks(
                    self.before_tool_callbacks, tool, args, tool_context
                )
            if response is None:
                response = await _execute(tool, tool_context, args)
            if self.after_tool_callbacks:
                replaced = await call_callbacks(
                    self.after_tool_callbacks, tool, args, tool_context, response
                )
                if replaced is not None:
                    response = replaced
        return response


async def _execute(tool: BaseTool, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any] | None:
    """Run a tool; a failure becomes an ``{"error": ...}`` response the model can read, unless
    the error asks to end the invocation (``propagate``)."""
    response, error = await execute_tool(tool, ctx, args)
    if error is None:
        return response
    telemetry.record_tool_error(error)
    if error.propagate:
        raise error
    if isinstance(error, ToolError):
        return {"error": error.message}
    return {"error": f"{type(error).__name__}: {error.message}"}


def _clamped(fraction: float | None) -> float | None:
    """A reported fraction in [0, 1]; ``None`` when it is not a number."""
    if fraction is None or math.isnan(fraction):
        return None
    return min(1.0, max(0.0, float(fraction)))


def _ends_turn(event: Event) -> bool:
    """After this event the agent's turn is over: a final answer, a transfer, a loop exit, or
    long-running tools awaiting the client."""
    if event.partial:
        return False
    if event.actions.transfer_to_agent or event.actions.escalate:
        return True
    if event.actions.skip_summarization:
        return True
    if event.function_calls():
        # Calls whose responses did not arrive (long-running tools that returned nothing).
        return True
    return not event.function_responses()


def _with_call_ids(response: LlmResponse) -> LlmResponse:
    """Give every function call an id, so its response can be matched to it."""
    content = response.content
    if content is None or all(
        part.function_call is None or part.function_call.id for part in content.parts
    ):
        return response
    parts = [
        part.model_copy(
            update={
                "function_call": part.function_call.model_copy(update={"id": f"adk-{uuid.uuid4()}"})
            }
        )
        if part.function_call is not None and not part.function_call.id
        else part
        for part in content.parts
    ]
    return response.model_copy(update={"content": Content(role=content.role, parts=parts)})


def _transfer_instruction(
    agent: LlmAgent, targets: list[TransferTarget], parent: str | None
) -> str:
    lines = [
        f"You are agent {agent.name!r}. You may hand the conversation to another agent when it "
        "is better suited to answer, by calling the transfer_to_agent tool with its name.",
        "Agents you can transfer to:",
    ]
    for target in targets:
        description = target.description or "(no description)"
        lines.append(f"- {target.name}: {description}")
    if parent is not None and any(target.name == parent for target in targets):
        lines.append(f"If the request is outside your expertise, transfer back to {parent!r}.")
    return "\n".join(lines)


def _as_tool(tool: ToolUnion) -> BaseTool | Toolset:
    if isinstance(tool, BaseTool | Toolset):
        return tool
    if callable(tool):
        from adk_mesh.tools.function_tool import FunctionTool

        return FunctionTool(tool)
    raise ConfigError(f"{tool!r} is not a tool, a toolset or a function")
