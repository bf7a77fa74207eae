"""LlmAgent: an agent driven by a language model and its tools."""

from __future__ import annotations

import copy
import inspect
import logging
import math
import reprlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

from pydantic import ValidationError

from adk_mesh._confirmation import answered_confirmations, confirmation_request_event
from adk_mesh._tasks import TaskFeed, run_all
from adk_mesh.agents._instructions import insert_turn_instruction, render_instruction
from adk_mesh.agents._schemas import AgentSchema, SchemaMismatch, SchemaSource
from adk_mesh.agents.base import (
    AgentCallback,
    AgentSchemas,
    BaseAgent,
    _as_list,
    call_callbacks,
    checked_callback_result,
)
from adk_mesh.agents.history import RequestHistory, current_turn, request_contents
from adk_mesh.contexts import (
    MAX_UNREAD_TOOL_EVENTS,
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
from adk_mesh.tools.base import BaseTool, Toolset, as_tool_response, execute_tool
from adk_mesh.types import (
    Content,
    Event,
    EventActions,
    FunctionCall,
    LlmResponse,
    Part,
    ToolConfirmation,
    ToolProgress,
    new_function_call_id,
)

logger = logging.getLogger(__name__)

__all__ = [
    "OUTPUT_SCHEMA_MISMATCH",
    "InstructionProvider",
    "LlmAgent",
    "ModelCallback",
    "ModelErrorCallback",
    "ToolCallback",
    "ToolErrorCallback",
    "render_instruction",
]

InstructionProvider = Callable[[ReadonlyContext], "str | Awaitable[str]"]
#: before: ``(callback_context, llm_request) -> LlmResponse | None`` (a response skips the
#: model); after: ``(callback_context, llm_response) -> LlmResponse | None`` (replaces it;
#: called on every chunk the model streams too (``llm_response.partial``), as google-adk;
#: not called with a before-model answer, which no model gave).
ModelCallback = Callable[..., "LlmResponse | Awaitable[LlmResponse | None] | None"]
#: before: ``(tool, args, tool_context) -> dict | None`` (a dict skips the tool);
#: after: ``(tool, args, tool_context, response) -> dict | None`` (replaces the response).
#: Another value (a string, a list, a number) answers as ``{"result": value}``, as google-adk.
ToolCallback = Callable[..., "dict[str, Any] | Awaitable[dict[str, Any] | None] | None"]
#: ``(callback_context, llm_request, error) -> LlmResponse | None``: a response answers in the
#: failed model call's place; ``None`` lets the error go on.
ModelErrorCallback = Callable[
    [CallbackContext, LlmRequest, Exception],
    "LlmResponse | Awaitable[LlmResponse | None] | None",
]
#: ``(tool, args, tool_context, error) -> dict | None``: a dict is the call's response in the
#: error's place; ``None`` lets the error go on (to the model as ``{"error": ...}``, or up).
ToolErrorCallback = Callable[
    [BaseTool, dict[str, Any], ToolContext, Exception],
    "dict[str, Any] | Awaitable[dict[str, Any] | None] | None",
]

#: ``error_code`` of the event whose final answer does not fit the agent's ``output_schema``.
OUTPUT_SCHEMA_MISMATCH = "OUTPUT_SCHEMA_MISMATCH"

ToolUnion = BaseTool | Toolset | Callable[..., Any]

_TRANSFER_TOOL_NAME = "transfer_to_agent"


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

    The system instruction is built as google-adk builds it: the root agent's
    ``global_instruction`` first (it applies to every agent of the tree, a served agent that a
    transfer or a workflow reaches in another service included: the caller sends it; the child
    of an AgentTool is a tree of its own), then ``static_instruction``
    unchanged, then ``instruction``. Templates (``{key}`` from state, ``{artifact.NAME}``, see
    :func:`~adk_mesh.agents._instructions.render_instruction`) are filled in ``instruction``
    and ``global_instruction`` strings, never in ``static_instruction`` nor in what a callable
    returns. With a ``static_instruction`` the system instruction stays the same request
    after request (a provider's prompt cache can keep it), so ``instruction`` goes among the
    contents instead, as a labelled user content before the user's newest message.

    With ``output_schema`` every request asks the provider for JSON of that schema in its own
    way (:attr:`GenerateContentConfig.response_schema`), tools still declared: Gemini, OpenAI
    and Ollama take both, the model calls tools and then answers in the schema; Anthropic is
    made to call a tool named for the schema to answer (``tool_choice``: that tool, or ``any``
    tool when there are others). A final answer is checked against the schema: one that fits
    goes to ``output_key`` as the parsed object (a model's ``model_dump(mode="json")``); one
    that does not becomes an error event (``error_code`` :data:`OUTPUT_SCHEMA_MISMATCH`,
    ``error_message`` saying where it does not fit; the answer's text kept; nothing saved).

    Args:
        name: unique identifier within the agent tree.
        model: an :class:`~adk_mesh.models.Llm` or a model string such as
            ``"gemini/gemini-2.5-flash"``; ``None`` inherits the nearest LlmAgent ancestor's.
        instruction: the system instruction, or a callable receiving a ReadonlyContext.
        global_instruction: on the root agent, an instruction (or a callable) for every
            agent of its tree, before their own.
        static_instruction: text sent as it is, first in this agent's system instruction
            (a ``Content`` of text parts too, as google-adk takes it: its texts joined).
        description: what this agent does; other agents' models read it to route to it.
        tools: tools, toolsets, or plain functions (wrapped in FunctionTool).
        sub_agents: agents this one may transfer control to.
        output_key: saves the final answer into state under this key: its text, or with
            ``output_schema`` the parsed object.
        output_schema: a pydantic model class or a JSON Schema (dict) of an object: the final
            answer is JSON of it.
        input_schema: the same, for the arguments of an AgentTool that calls this agent: its
            declaration takes them as parameters, and the child receives them (checked) as
            JSON text.
        generate_content_config: sampling settings sent with every request (or a dict of
            them); tools and the system instruction have their own arguments.
        include_contents: ``"default"`` sends the conversation history; ``"none"`` only the
            current turn: from the latest user message or other agent's reply on (as
            google-adk; in a LoopAgent, the round's input, not every round before it).
        disallow_transfer_to_parent / disallow_transfer_to_peers: narrow the transfer targets.
        on_model_error_callback: ``(callback_context, llm_request, error)`` when the model
            call fails (a :class:`~adk_mesh.errors.ModelError`, or any exception of the
            model): an LlmResponse returned answers in its place; ``None`` lets it go on.
        on_tool_error_callback: ``(tool, args, tool_context, error)`` when a tool fails (its
            error, a ToolError for a bug or a timeout): a dict returned is the call's response;
            ``None`` lets the error go on as without the callback.

    Like the other callbacks, each may be a list (the first that returns something wins) of
    plain or async functions.

    Raises:
        ConfigError: a bad schema (not an object, not JSON Schema), or ``output_schema`` with
            a ``response_schema`` in ``generate_content_config`` too; a
            ``generate_content_config`` that is neither a GenerateContentConfig nor a dict of
            its fields.
    """

    def __init__(
        self,
        *,
        name: str,
        model: Llm | str | None = None,
        instruction: str | InstructionProvider = "",
        global_instruction: str | InstructionProvider = "",
        static_instruction: str | Content = "",
        description: str = "",
        tools: Sequence[ToolUnion] | None = None,
        sub_agents: Sequence[BaseAgent] | None = None,
        output_key: str | None = None,
        output_schema: SchemaSource | None = None,
        input_schema: SchemaSource | None = None,
        generate_content_config: GenerateContentConfig | Mapping[str, Any] | None = None,
        include_contents: Literal["default", "none"] = "default",
        disallow_transfer_to_parent: bool = False,
        disallow_transfer_to_peers: bool = False,
        before_agent_callback: AgentCallback | Sequence[AgentCallback] | None = None,
        after_agent_callback: AgentCallback | Sequence[AgentCallback] | None = None,
        before_model_callback: ModelCallback | Sequence[ModelCallback] | None = None,
        after_model_callback: ModelCallback | Sequence[ModelCallback] | None = None,
        before_tool_callback: ToolCallback | Sequence[ToolCallback] | None = None,
        after_tool_callback: ToolCallback | Sequence[ToolCallback] | None = None,
        on_model_error_callback: ModelErrorCallback | Sequence[ModelErrorCallback] | None = None,
        on_tool_error_callback: ToolErrorCallback | Sequence[ToolErrorCallback] | None = None,
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
        self.global_instruction = global_instruction
        self.static_instruction = _static_text(static_instruction, name)
        self.output_key = output_key
        self.output_schema = (
            AgentSchema(output_schema, what=f"the output_schema of agent {name!r}")
            if output_schema is not None
            else None
        )
        self.input_schema = (
            AgentSchema(input_schema, what=f"the input_schema of agent {name!r}")
            if input_schema is not None
            else None
        )
        self.generate_content_config = _content_config(generate_content_config, name)
        if self.output_schema is not None and (
            self.generate_content_config.response_schema is not None
        ):
            raise ConfigError(
                f"agent {name!r} has an output_schema and a response_schema in its "
                "generate_content_config; give the schema as output_schema only"
            )
        self.include_contents = include_contents
        self.disallow_transfer_to_parent = disallow_transfer_to_parent
        self.disallow_transfer_to_peers = disallow_transfer_to_peers
        self.before_model_callbacks: list[ModelCallback] = _as_list(before_model_callback)
        self.after_model_callbacks: list[ModelCallback] = _as_list(after_model_callback)
        self.before_tool_callbacks: list[ToolCallback] = _as_list(before_tool_callback)
        self.after_tool_callbacks: list[ToolCallback] = _as_list(after_tool_callback)
        self.on_model_error_callbacks: list[ModelErrorCallback] = _as_list(on_model_error_callback)
        self.on_tool_error_callbacks: list[ToolErrorCallback] = _as_list(on_tool_error_callback)
        self.tools: list[BaseTool | Toolset] = [_as_tool(tool) for tool in tools or ()]
        self._request_history = RequestHistory()
        names = [tool.name for tool in self.tools if isinstance(tool, BaseTool)]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(f"agent {name!r} has two tools named {', '.join(duplicates)}")
        self._check_native_tools()

    def _check_native_tools(self) -> None:
        """Fail now, not at the first model call, when this agent's model (resolved here if
        it is a string) cannot run a provider-native tool of this agent or of a sub-agent
        that inherits the model. A sub-agent's own model is checked by its own constructor."""
        from adk_mesh.tools.native import NativeTool, check_native_tools

        if self._model is None:
            return  # inherited: checked when an ancestor with a model takes this agent
        inheriting = [self]
        pending = list(self.sub_agents)
        while pending:
            agent = pending.pop()
            if isinstance(agent, LlmAgent):
                if agent._model is not None:
                    continue
                inheriting.append(agent)
            pending.extend(agent.sub_agents)
        if not any(isinstance(t, NativeTool) for agent in inheriting for t in agent.tools):
            return
        model = self.model
        for agent in inheriting:
            check_native_tools(agent.tools, model, agent=agent.name)

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

    def declared_schemas(self) -> AgentSchemas:
        return AgentSchemas(input=self.input_schema, output=self.output_schema)

    async def canonical_instruction(self, ctx: ReadonlyContext) -> str:
        """``instruction``: a callable's result as it is, a string with its placeholders
        filled."""
        return await _instruction_text(self.instruction, ctx)

    async def canonical_global_instruction(self, ctx: ReadonlyContext) -> str:
        """``global_instruction``, as :meth:`canonical_instruction` makes ``instruction``."""
        return await _instruction_text(self.global_instruction, ctx)

    async def _system_instruction(self, ctx: ReadonlyContext) -> tuple[str | None, str | None]:
        """``(system instruction, instruction for the contents)``, in google-adk's order: the
        root's global instruction, the static instruction, then this agent's instruction —
        among the contents instead when there is a static one, so the system instruction
        stays the same from request to request."""
        pieces: list[str] = []
        inherited = ctx.invocation_context.global_instruction
        if inherited is not None:
            # A delegated run inside its caller's tree: that tree's root is the root.
            pieces.append(inherited)
        else:
            root = self.root_agent
            if isinstance(root, LlmAgent) and root.global_instruction:
                pieces.append(await root.canonical_global_instruction(ctx))
        if self.static_instruction:
            pieces.append(self.static_instruction)
        dynamic = await self.canonical_instruction(ctx) if self.instruction else ""
        in_contents = None
        if dynamic and self.static_instruction:
            in_contents = dynamic
        elif dynamic:
            pieces.append(dynamic)
        system = "\n\n".join(piece for piece in pieces if piece)
        return system or None, in_contents

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
        system_instruction, turn_instruction = await self._system_instruction(readonly)
        request = LlmRequest(
            model=self.model.name,
            config=_request_config(self.generate_content_config),
            system_instruction=system_instruction,
        )
        if self.output_schema is not None:
            request.config.response_schema = copy.deepcopy(self.output_schema.json_schema)
            request.config.response_schema_name = self.output_schema.name
            request.config.response_mime_type = "application/json"
        tools = await self.canonical_tools(readonly)
        targets = self.transfer_choices(ctx)
        if targets:
            from adk_mesh.tools.builtin import TransferToAgentTool

            tools.append(TransferToAgentTool([target.name for target in targets]))
            request.append_instruction(
                _transfer_instruction(self, targets, self._parent_choice(ctx))
            )
        tools_by_name: dict[str, BaseTool] = {}
        preparing: ToolContext | None = None
        for tool in tools:
            if tool.name in tools_by_name:
                raise ConfigError(f"agent {self.name!r} has two tools named {tool.name!r}")
            tools_by_name[tool.name] = tool
            if type(tool).prepare_llm_request is _DEFAULT_PREPARE:
                tool.process_llm_request(request)  # what the default does, without a context
                continue
            if preparing is None:
                preparing = ToolContext(ctx)
            await tool.prepare_llm_request(preparing, request)
        # A call whose turn died before its result was stored (a crash mid-call), or a
        # long-running one still waiting, is answered here: providers refuse a call left open.
        session = ctx.session
        if self.include_contents == "none":
            request.contents = request_contents(
                current_turn(session.events, agent_name=self.name, branch=ctx.branch),
                agent_name=self.name,
                branch=ctx.branch,
            )
        else:
            # Built from what was appended since this agent's last request in the session.
            request.contents = self._request_history.contents(
                (session.app_name, session.user_id, session.id),
                session.events,
                agent_name=self.name,
                branch=ctx.branch,
            )
        if turn_instruction:
            insert_turn_instruction(request.contents, turn_instruction)
        return request, tools_by_name

    # --- the loop ---------------------------------------------------------------------------

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        # Calls a person confirmed or rejected in this turn's message run first (human in the
        # loop, see adk_mesh._confirmation); then the model goes on.
        answered = answered_confirmations(ctx.session.events, ctx.user_content, self.name)
        if answered:
            tools = {tool.name: tool for tool in await self.canonical_tools(ReadonlyContext(ctx))}
            calls = [call for call, _ in answered]
            answers = {call.id: answer for call, answer in answered if call.id}
            last: Event | None = None
            async for last in self._run_tools(ctx, calls, tools, answers):
                yield last
            if last is not None and (ctx.ended or _ends_turn(last)):
                return
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
        plugins = ctx.plugins  # their hooks come before the agent's callbacks
        response: LlmResponse | None = None
        if plugins is not None:
            response = await plugins.before_model(callback_context, request)
        if response is None and self.before_model_callbacks:
            response = await call_callbacks(self.before_model_callbacks, callback_context, request)
        response = checked_callback_result(response, LlmResponse, "before_model", self.name)
        # A before-model answer stands as it is (google-adk yields it): no model answered,
        # so the after-model hooks, which rewrite or record the model's answers, see none.
        if response is None:
            ctx.count_llm_call()
            streaming = ctx.run_config.streaming_mode is StreamingMode.SSE
            model = self.model
            chunks = aiter(
                telemetry.trace_model_call(
                    model, request, model.generate_content(request, stream=streaming), ctx
                )
            )
            # Looked up once: with no after-model hook, a streamed token costs no await.
            hooked = bool(self.after_model_callbacks) or (
                plugins is not None and plugins.has("after_model")
            )
            try:
                while True:
                    try:
                        chunk = await anext(chunks)
                    except StopAsyncIteration:
                        break
                    except Exception as error:
                        # Only the model's stream is inside this try: a hook (or the reader)
                        # failing is not the model failing, for the on-model-error hooks to
                        # answer — as google-adk runs them around the model's stream alone.
                        answer = None
                        if plugins is not None:
                            answer = await plugins.on_model_error(callback_context, request, error)
                        if answer is None and self.on_model_error_callbacks:
                            answer = await call_callbacks(
                                self.on_model_error_callbacks, callback_context, request, error
                            )
                        answer = checked_callback_result(
                            answer, LlmResponse, "on_model_error", self.name
                        )
                        if answer is None:
                            raise
                        response = answer
                        break
                    if not chunk.partial:
                        response = chunk
                        continue
                    # Every streamed chunk passes the after-model hooks, as google-adk's
                    # _call_llm_async runs them on each response the model yields: a hook that
                    # redacts the answer covers the text streamed to the client too.
                    if hooked:
                        chunk = await self._after_model(callback_context, chunk)
                    yield Event(
                        author=self.name,
                        invocation_id=ctx.invocation_id,
                        branch=ctx.branch,
                        llm_response=chunk,
                    )
                if response is not None:
                    # Before the span ends (unlike google-adk's trace_call_llm): the answer it
                    # records is the one the hooks left, so a redacting hook covers the trace,
                    # with the call ids the session will hold.
                    response = _with_call_ids(await self._after_model(callback_context, response))
                    telemetry.record_model_answer(chunks, response)
            finally:
                # A hook that failed on a chunk (or a reader that stopped) leaves the model's
                # stream unfinished: closed now, its span ends and its connection is freed.
                close = getattr(chunks, "aclose", None)
                if close is not None:
                    await close()
            if response is None:
                raise AgentError(f"model {self.model.name!r} returned no final response")
        else:
            response = _with_call_ids(response)  # the model's got theirs above

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
        elif self.output_schema is not None:
            self._check_output(event)
        elif self.output_key and response.content is not None and not response.partial:
            text = response.content.text
            if text:
                event.actions.state_delta[self.output_key] = text
        yield event
        if not calls:
            return
        async for tool_event in self._run_tools(ctx, calls, tools_by_name):
            yield tool_event

    async def _after_model(
        self, callback_context: CallbackContext, response: LlmResponse
    ) -> LlmResponse:
        """The plugins' ``after_model``, then the agent's callbacks, on one response of the
        model (a streamed chunk or the final answer): what they return replaces it.

        A replacement takes the replaced response's place in the stream: a hook that builds
        a fresh ``LlmResponse`` for a chunk (``partial`` left unset) still answers a chunk,
        which the Runner forwards and never stores, and one built partial for the final
        answer is still the final answer, stored and ending the step (taken as a chunk, it
        would leave the step with no answer and the model asked again)."""
        plugins = callback_context.invocation_context.plugins
        replaced = None
        if plugins is not None:
            replaced = await plugins.after_model(callback_context, response)
        if replaced is None and self.after_model_callbacks:
            replaced = await call_callbacks(self.after_model_callbacks, callback_context, response)
        checked: LlmResponse | None = checked_callback_result(
            replaced, LlmResponse, "after_model", self.name
        )
        if checked is None:
            return response
        if checked.partial != response.partial:
            return checked.model_copy(update={"partial": response.partial})
        return checked

    def _check_output(self, event: Event) -> None:
        """Check the final answer against ``output_schema``: the parsed object goes to
        ``output_key``; an answer that does not fit makes ``event`` an error event."""
        assert self.output_schema is not None
        response = event.llm_response
        if response.error_code is not None:
            return  # already an error (a blocked prompt, ...): nothing to check
        text = response.content.text if response.content is not None else ""
        try:
            if not text.strip():
                raise SchemaMismatch("the answer holds no text")
            value = self.output_schema.parse(text)
        except SchemaMismatch as mismatch:
            response.error_code = OUTPUT_SCHEMA_MISMATCH
            response.error_message = (
                f"the answer of agent {self.name!r} does not fit its output_schema "
                f"{self.output_schema.name}: {mismatch}"
            )
            logger.warning("%s", response.error_message)
            return
        if self.output_key:
            event.actions.state_delta[self.output_key] = value

    async def _run_tools(
        self,
        ctx: InvocationContext,
        calls: list[FunctionCall],
        tools: dict[str, BaseTool],
        confirmations: dict[str, ToolConfirmation] | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Run the called tools concurrently; yield forwarded events as they come, then one
        event with every function response and the merged actions."""
        results: list[tuple[Part | None, EventActions]]
        if self._runs_inline(ctx, calls, tools):
            # Nothing can send an event while it runs: no task to read it from.
            sent: list[Event] = []

            async def keep(event: Event) -> None:
                sent.append(event)

            results = [
                await self._call_tool(ctx, calls[0], tools, keep, sent.append, confirmations)
            ]
            for event in sent:  # a tool that said it sends none sent some: late, not lost
                yield event
        else:
            # Bounded: progress waits for a slow reader; forwarded events (sent by a
            # synchronous callback) go in anyway, never dropped (see MAX_UNREAD_TOOL_EVENTS).
            async with TaskFeed[Event, list[tuple[Part | None, EventActions]]](
                max_pending=MAX_UNREAD_TOOL_EVENTS
            ) as feed:
                feed.start(
                    run_all(
                        [
                            self._call_tool(
                                ctx, call, tools, feed.send, feed.send_anyway, confirmations
                            )
                            for call in calls
                        ]
                    )
                )
                async for event in feed:
                    yield event
                results = feed.result()
        parts = [part for part, _ in results if part is not None]
        actions = EventActions()
        for _, tool_actions in results:
            actions = actions.merge(tool_actions) if not tool_actions.is_empty() else actions
        # Calls that asked a person to confirm them stay unanswered; one event asks.
        asked, actions.requested_tool_confirmations = actions.requested_tool_confirmations, {}
        if parts or not actions.is_empty():
            # (Neither: long-running tools with no result yet; the client answers later.)
            yield Event(
                author=self.name,
                invocation_id=ctx.invocation_id,
                branch=ctx.branch,
                llm_response=LlmResponse(
                    content=Content(role="tool", parts=parts) if parts else None
                ),
                actions=actions,
            )
        if asked:
            yield confirmation_request_event(
                author=self.name,
                invocation_id=ctx.invocation_id,
                branch=ctx.branch,
                calls=calls,
                requested=asked,
            )

    def _runs_inline(
        self, ctx: InvocationContext, calls: list[FunctionCall], tools: dict[str, BaseTool]
    ) -> bool:
        """Whether ``calls`` is one call that nothing can send an event from while it runs:
        a tool that sends none, and no tool hook (which is handed the call's context)."""
        if len(calls) != 1:
            return False
        tool = tools.get(calls[0].name)
        if tool is None or tool.sends_events:
            return False
        if self.before_tool_callbacks or self.after_tool_callbacks or self.on_tool_error_callbacks:
            return False
        plugins = ctx.plugins
        return plugins is None or not (
            plugins.has("before_tool") or plugins.has("after_tool") or plugins.has("on_tool_error")
        )

    async def _call_tool(
        self,
        ctx: InvocationContext,
        call: FunctionCall,
        tools: dict[str, BaseTool],
        send: Callable[[Event], Awaitable[None]],
        forward: Callable[[Event], None],
        confirmations: dict[str, ToolConfirmation] | None = None,
    ) -> tuple[Part | None, EventActions]:
        """Answer one call; its progress goes to ``send`` (awaited: the reader's pace), the
        events it forwards to ``forward`` (a synchronous callback cannot wait).

        A long-running tool that answers nothing (a falsy response once the after-tool hooks
        ran: ``None`` or ``{}``, as google-adk's ``not function_response``) leaves the call
        open for the client to answer in a later turn: no function response, no part. Unlike
        google-adk, its actions (state writes, an ``artifact_delta``) are kept, in an event of their
        own with no content (see :meth:`_run_tools`): google-adk drops them with the event
        it does not build, so a tool that recorded its job's id in state loses it."""
        tool_context = ToolContext(
            ctx,
            function_call_id=call.id,
            event_sink=forward,
            progress=self._progress_reporter(ctx, call, send),
            tool_confirmation=confirmations.get(call.id) if confirmations and call.id else None,
        )
        tool = tools.get(call.name)
        # The tool and the hooks get their own copy (as google-adk does): the call's args are
        # the history's, which the next request (and the next turn) reads.
        args = copy.deepcopy(call.args) if call.args else {}
        with telemetry.trace_tool_call(call.name, tool, call.id, args, ctx):
            response = await self._answer_call(tool_context, call, tool, tools, args)
            telemetry.record_tool_result(response)
            target = tool_context.actions.transfer_to_agent
            if target:
                telemetry.record_control_transfer("pass_control", target)
        # Answered: a change made through the context from now on (a task the tool left
        # running) would reach no event, so it is refused rather than lost.
        tool_context.close()
        if call.id in tool_context.actions.requested_tool_confirmations:
            return None, tool_context.actions  # answered once a person confirms or rejects
        if not response:
            if tool is not None and tool.is_long_running:
                return None, tool_context.actions  # no answer yet: the client's to give
            response = {}
        part = Part.from_function_response(call.name, response, id=call.id)
        return part, tool_context.actions

    def _progress_reporter(
        self, ctx: InvocationContext, call: FunctionCall, send: Callable[[Event], Awaitable[None]]
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
            await send(
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
        args: dict[str, Any],
    ) -> dict[str, Any] | None:
        if tool is None:
            return await self._answer_missing(tool_context, call, tools, args)
        response = await self._before_tool(tool, args, tool_context)
        failed = False
        if response is None:
            response, failed = await self._execute(tool, tool_context, args)
        replaced = None
        plugins = tool_context.invocation_context.plugins  # before the agent's callbacks
        # A failure no hook answered for is not the tool's result: the plugins' after_tool
        # does not see it, as on a ToolServer (execute_with_plugins) and in google-adk.
        if plugins is not None and response is not None and not failed:
            replaced = await plugins.after_tool(tool, args, tool_context, response)
        if replaced is None and self.after_tool_callbacks:
            replaced = await call_callbacks(
                self.after_tool_callbacks, tool, args, tool_context, response
            )
        return as_tool_response(replaced) if replaced is not None else response

    async def _before_tool(
        self, tool: BaseTool, args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        """The plugins' ``before_tool``, then the agent's callbacks: a value answers the call
        (see :func:`~adk_mesh.tools.base.as_tool_response`)."""
        plugins = tool_context.invocation_context.plugins
        response = None
        if plugins is not None:
            response = await plugins.before_tool(tool, args, tool_context)
        if response is None and self.before_tool_callbacks:
            response = await call_callbacks(self.before_tool_callbacks, tool, args, tool_context)
        return as_tool_response(response)

    async def _on_tool_error(
        self, tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, error: AdkError
    ) -> dict[str, Any] | None:
        """The plugins' ``on_tool_error``, then the agent's callbacks: a value answers for the
        error (see :func:`~adk_mesh.tools.base.as_tool_response`)."""
        plugins = tool_context.invocation_context.plugins
        replaced = None
        if plugins is not None:
            replaced = await plugins.on_tool_error(tool, args, tool_context, error)
        if replaced is None and self.on_tool_error_callbacks:
            replaced = await call_callbacks(
                self.on_tool_error_callbacks, tool, args, tool_context, error
            )
        return as_tool_response(replaced)

    async def _answer_missing(
        self,
        tool_context: ToolContext,
        call: FunctionCall,
        tools: dict[str, BaseTool],
        args: dict[str, Any],
    ) -> dict[str, Any]:
        """A call of a tool this agent does not have, answered as google-adk answers it: the
        before-tool hooks may answer it (they see a stand-in tool of that name), then the
        tool-error hooks (with a ToolError naming the tools there are); unanswered, the model
        reads that error. The after-tool hooks do not run: no tool ran."""
        missing = _MissingTool(call.name)
        response = await self._before_tool(missing, args, tool_context)
        if response is not None:
            return response
        available = ", ".join(sorted(tools)) or "none"
        error = ToolError(
            f"Tool {call.name!r} is not available to this agent. Available tools: {available}."
        )
        telemetry.record_tool_error(error)  # the call failed, as a failing tool's does
        replaced = await self._on_tool_error(missing, args, tool_context, error)
        return replaced if replaced is not None else {"error": error.message}

    async def _execute(
        self, tool: BaseTool, ctx: ToolContext, args: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, bool]:
        """Run a tool; a failure goes to the ``on_tool_error`` callbacks, whose dict answers
        in its place; unanswered, it becomes an ``{"error": ...}`` response the model can
        read, unless the error asks to end the invocation (``propagate``). Returns the
        response and whether it is such an unanswered failure."""
        response, error = await execute_tool(tool, ctx, args)
        if error is None:
            return response, False
        telemetry.record_tool_error(error)
        replaced = await self._on_tool_error(tool, args, ctx, error)
        if replaced is not None:
            return replaced, False
        if error.propagate:
            raise error
        if isinstance(error, ToolError):
            return {"error": error.message}, True
        return {"error": f"{type(error).__name__}: {error.message}"}, True


async def _instruction_text(instruction: str | InstructionProvider, ctx: ReadonlyContext) -> str:
    """A callable's result as it is (no templating, as google-adk), a string with its
    placeholders filled."""
    if callable(instruction):
        result = instruction(ctx)
        if inspect.isawaitable(result):
            result = await result
        return str(result)
    return await render_instruction(instruction, ctx) if instruction else ""


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


_DEFAULT_PREPARE = BaseTool.prepare_llm_request


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
                "function_call": part.function_call.model_copy(
                    update={"id": new_function_call_id()}
                )
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


class _MissingTool(BaseTool):
    """What the tool hooks see of a call to a tool the agent does not have."""

    def __init__(self, name: str) -> None:
        super().__init__(name, "Tool not found")

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
        raise ToolError(f"tool {self.name!r} does not exist")  # never run: see _answer_missing


def _request_config(config: GenerateContentConfig) -> GenerateContentConfig:
    """A request's own copy of the agent's config (google-adk deep-copies it): a callback
    that changes a list in place (a stop sequence added) changes this request, not every
    later one. Its scalars are shared as they are; its two containers are copied, when set
    (a third of a deep copy's cost, on every model call)."""
    copied = config.model_copy()
    if copied.stop_sequences is not None:
        copied.stop_sequences = list(copied.stop_sequences)
    if copied.response_schema is not None:
        copied.response_schema = copy.deepcopy(copied.response_schema)
    return copied


#: What google-adk keeps out of ``generate_content_config``, and where it belongs instead.
_CONFIG_FIELDS_ELSEWHERE = {
    "tools": "tools go in LlmAgent(tools=...)",
    "system_instruction": "the system instruction is LlmAgent(instruction=...)",
}


def _content_config(
    config: GenerateContentConfig | Mapping[str, Any] | None, agent: str
) -> GenerateContentConfig:
    """``generate_content_config`` as a :class:`GenerateContentConfig`: given one, or a dict
    of its fields (google-adk's pydantic agent takes either); anything else, or a field it
    does not have, is a ConfigError naming the setting."""
    if config is None:
        return GenerateContentConfig()
    if isinstance(config, GenerateContentConfig):
        return config
    what = f"the generate_content_config of agent {agent!r}"
    if not isinstance(config, Mapping):
        raise ConfigError(
            f"{what} is a GenerateContentConfig or a dict of its fields, "
            f"not {type(config).__name__}"
        )
    for field, where in _CONFIG_FIELDS_ELSEWHERE.items():
        if field in config:
            raise ConfigError(f"{what} holds {field!r}: {where}")
    try:
        return GenerateContentConfig.model_validate(dict(config))
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or 'the config'}: "
            f"{problem['msg']} (got {reprlib.repr(problem['input'])})"
            for problem in error.errors()
        )
        raise ConfigError(f"bad {what}: {problems}") from None


def _static_text(instruction: str | Content, agent: str) -> str:
    """A static instruction as the text it sends: a Content's text parts joined (a system
    instruction is text for every provider here)."""
    if isinstance(instruction, str):
        return instruction
    if isinstance(instruction, Content):
        if any(part.text is None for part in instruction.parts):
            raise ConfigError(
                f"the static_instruction of agent {agent!r} holds a part that is not text; "
                "a system instruction is text"
            )
        return "\n".join(part.text or "" for part in instruction.parts)
    raise ConfigError(
        f"the static_instruction of agent {agent!r} is text or a Content of text parts, "
        f"not {type(instruction).__name__}"
    )
