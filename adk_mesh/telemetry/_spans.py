"""Spans of the runtime: ``invoke_workflow``, ``invoke_agent``, ``chat`` and ``execute_tool``.

Agents, model calls and streams are async generators, and a generator can be closed from
another task than the one that iterated it. So no span is ever *held current* across a
``yield``: each helper starts its span explicitly, keeps the OpenTelemetry context it belongs
to, and attaches that context only around one ``__anext__`` of the wrapped generator (and its
``aclose``) — a synchronous stretch of one task, so attach and detach always pair up. Every span
ends in ``finally``: normally, on error (status ERROR, ``error.type``), when cancelled (status
UNSET, ``adk_mesh.cancelled``) or when its consumer closed the stream early (status UNSET,
``adk_mesh.closed_early``, e.g. an agent stopped after it transferred control). With content
capture on, a model call that answered ends once the agent recorded the answer it used, or
closed the stream (see :func:`trace_model_call`).

When tracing is off (the invocation's :attr:`~adk_mesh.contexts.InvocationContext.tracer` is
``None``) each helper hands back the generator it was given, untouched.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from adk_mesh.telemetry import _metrics
from adk_mesh.telemetry._propagation import (
    INVOCATION_ID,
    current_invocation_attributes,
    invocation_attributes,
    session_invocation_attributes,
    with_invocation,
)
from adk_mesh.telemetry._providers import tracing_enabled

if TYPE_CHECKING:
    from adk_mesh.agents.base import BaseAgent
    from adk_mesh.contexts import InvocationContext
    from adk_mesh.models.base import Llm, LlmRequest
    from adk_mesh.sessions.base import Session
    from adk_mesh.tools.base import BaseTool
    from adk_mesh.types import Content, Event, LlmResponse

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "InvocationSpan",
    "annotate_current_span",
    "capture_content",
    "invocation_scope",
    "record_control_transfer",
    "record_model_answer",
    "record_tool_error",
    "record_tool_result",
    "refresh_capture_content",
    "served_call",
    "trace_agent_run",
    "trace_invocation",
    "trace_memory_ingestion",
    "trace_model_call",
    "trace_tool_call",
]

#: Set to ``true`` to record prompts, answers, tool arguments and results on spans.
CAPTURE_CONTENT_ENV = "ADK_MESH_CAPTURE_CONTENT"

OPERATION_NAME = "gen_ai.operation.name"
CANCELLED = "adk_mesh.cancelled"
CLOSED_EARLY = "adk_mesh.closed_early"
ERROR_TYPE = "error.type"
CONTROL_FLOW = "adk_mesh.control_flow"
TARGET_AGENT = "adk_mesh.target_agent"

# Argument and result keys whose values are never recorded, even with content capture on.
# A key names a secret when one of its words is one of these (``client_secret``,
# ``refreshToken``, ``X-Auth``, ``sessionCookie``)...
_SECRET_WORDS = frozenset(
    {
        "secret",
        "secrets",
        "token",
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "authorization",
        "auth",
        "credential",
        "credentials",
        "cookie",
        "bearer",
        "apikey",
        "accesstoken",
        "authtoken",
        "privatekey",
        "secretkey",
        "accesskey",
    }
)
# ... or when its last word is "key" (``api_key``, ``x-api-key``, ``privateKey``, ``key``): a
# key's first word ("keywords", "key_points") or a count of tokens ("max_tokens") names none.
_KEY_WORDS = frozenset({"key", "keys"})
_WORD_BOUNDARY = re.compile(r"[^0-9A-Za-z]+|(?<=[a-z0-9])(?=[A-Z])")
_REDACTED = "[redacted]"
_MAX_ATTRIBUTE_CHARS = 16_384

T = TypeVar("T")


_capture: bool | None = None


def capture_content() -> bool:
    """Whether prompts, answers, tool arguments and results go on spans (off by default).

    ``ADK_MESH_CAPTURE_CONTENT`` is read once, at the first span (and again by
    :func:`~adk_mesh.telemetry.configure_telemetry` and :func:`refresh_capture_content`):
    looking up an unset variable costs an exception inside ``os.environ``, ~9 µs a span.
    """
    capture = _capture
    if capture is None:
        capture = refresh_capture_content()
    return capture


def refresh_capture_content() -> bool:
    """Read ``ADK_MESH_CAPTURE_CONTENT`` again; returns the new setting."""
    global _capture
    _capture = os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in ("true", "1", "yes")
    return _capture


# --- the outcome of a span --------------------------------------------------------------------


def _error_type(error: BaseException) -> str:
    return type(error).__name__


def _end_with_error(span: Span, error: BaseException) -> str:
    """Mark ``span`` failed by ``error``; returns the error type."""
    error_type = _error_type(error)
    message = getattr(error, "message", None) or str(error)
    span.set_status(Status(StatusCode.ERROR, f"{error_type}: {message}"[:1024]))
    span.set_attribute(ERROR_TYPE, error_type)
    return error_type


class _Outcome:
    """How a traced stream ended; filled in by :func:`_traced`'s exception handlers."""

    __slots__ = ("completed", "error_type")

    def __init__(self) -> None:
        self.error_type: str | None = None
        #: The stream ran to its end (not failed, cancelled or closed early).
        self.completed = False


async def _traced(
    span: Span,
    context: Context,
    items: AsyncIterator[T],
    *,
    operation: str,
    on_item: Callable[[T], None] | None = None,
    on_end: Callable[[_Outcome], None] | None = None,
    end_span: bool = True,
) -> AsyncGenerator[T, None]:
    """Yield ``items``, each produced with ``context`` attached; end ``span`` when done (unless
    ``end_span`` is false: ``on_end`` then ends it, or leaves it to its owner)."""
    outcome = _Outcome()
    try:
        while True:
            token = otel_context.attach(context)
            try:
                item = await anext(items)
            except StopAsyncIteration:
                outcome.completed = True
                break
            finally:
                otel_context.detach(token)
            if on_item is not None:
                on_item(item)
            yield item
    except GeneratorExit:
        # Closed at a ``yield``: by a consumer that stopped reading, or by a cancellation
        # that found the stream there (see _cut_by_cancel).
        span.set_attribute(CANCELLED if _cut_by_cancel(context) else CLOSED_EARLY, True)
        raise
    except asyncio.CancelledError:
        span.set_attribute(CANCELLED, True)
        raise
    except BaseException as error:
        outcome.error_type = _end_with_error(span, error)
        _metrics.record_error(operation, outcome.error_type)
        raise
    finally:
        try:
            close = getattr(items, "aclose", None)
            if close is not None:
                token = otel_context.attach(context)
                try:
                    await close()
                finally:
                    otel_context.detach(token)
        finally:
            if on_end is not None:
                on_end(outcome)
            if end_span:
                span.end()


class _ServedCall:
    """The call a service serves a stream to (:func:`served_call`), as its stream's spans see
    it: ``cut`` once the call ended before the stream did (cancelled, past its deadline)."""

    __slots__ = ("cut",)

    def __init__(self) -> None:
        self.cut = False


_SERVED_CALL = otel_context.create_key("adk_mesh.served_call")


def _cut_by_cancel(context: Context) -> bool:
    """Whether a stream traced in ``context``, closed at a ``yield``, was cut by a
    cancellation rather than closed by a consumer that stopped reading: it is closed by a task
    being cancelled, or after the call a service serves it to ended (gRPC cancels the
    handler's task, and when that finds the handler waiting to send, leaves its generators to
    be closed later, from another task)."""
    try:
        task = asyncio.current_task()
    except RuntimeError:  # closed outside an event loop (garbage collected at exit)
        task = None
    if task is not None and task.cancelling():
        return True
    served = otel_context.get_value(_SERVED_CALL, context)
    return isinstance(served, _ServedCall) and served.cut


def served_call(responses: AsyncGenerator[T, None]) -> AsyncGenerator[T, None]:
    """``responses``, the stream a service serves to one call, each step taken with the call
    in the context of the spans it starts: closed before its end (nobody but gRPC stops
    reading it: the call was cancelled or ran out of time), the spans it still holds say
    ``adk_mesh.cancelled``, however the cancellation reaches them (see
    :func:`_cut_by_cancel`). ``responses`` itself when tracing is off."""
    if not tracing_enabled():
        return responses
    return _serving(responses)


async def _serving(responses: AsyncGenerator[T, None]) -> AsyncGenerator[T, None]:
    call = _ServedCall()
    context: Context | None = None
    try:
        while True:
            if context is None:  # the handler's, as the server's interceptor attached it
                context = otel_context.set_value(_SERVED_CALL, call)
            token = otel_context.attach(context)
            try:
                response = await anext(responses)
            except StopAsyncIteration:
                return
            finally:
                otel_context.detach(token)
            yield response
    except (GeneratorExit, asyncio.CancelledError):
        call.cut = True
        raise
    finally:
        token = otel_context.attach(context or otel_context.get_current())
        try:
            await responses.aclose()
        finally:
            otel_context.detach(token)


def server_attributes(target: str) -> dict[str, AttributeValue]:
    """``server.address`` and ``server.port`` of a mesh target (``host:port``,
    ``dns:///host:port``)."""
    address = target.removeprefix("dns:///").removeprefix("ipv4:")
    host, _, port = address.rpartition(":")
    if host and port.isdigit():
        return {"server.address": host, "server.port": int(port)}
    return {"server.address": address}


# --- invoke_workflow: one Runner turn ------------------------------------------------------


def annotate_current_span(ctx: InvocationContext) -> None:
    """Put the invocation's ids on the current span when it lacks them (a gRPC server span
    that started before the invocation had an id)."""
    span = trace.get_current_span()
    if not ctx.invocation_id or not span.is_recording():
        return
    attributes = getattr(span, "attributes", None)
    if attributes is not None and INVOCATION_ID in attributes:
        return
    span.set_attributes(invocation_attributes(ctx))


class InvocationSpan:
    """``invoke_workflow {app}``: one user turn run by a Runner, the root of the invocation's
    span tree in its service (a child of the current span, a served call's, when there is one).

    It opens when made, as the turn begins, so the work before the agents run is in the turn's trace
    (:meth:`scope`: a plugin's ``on_user_message``, a RemoteAgent asking its service which
    agents run behind it, the user's message stored), also for a Runner with no span above it
    (a plain Python app): their spans would otherwise start traces of their own. It ends with
    the turn's events (:meth:`trace`); the work after them (the turn added to memory, the
    ``after_run`` hooks, an interruption recorded) comes after it, as its children
    (:meth:`after`). Inert when tracing is off."""

    __slots__ = ("_ctx", "_parent", "_span", "context")

    def __init__(self, ctx: InvocationContext) -> None:
        self._ctx = ctx
        self._span: Span | None = None
        tracer = ctx.tracer
        if tracer is None:
            return
        annotate_current_span(ctx)
        self._parent = otel_context.get_current()
        ids = invocation_attributes(ctx)
        attributes = {
            **ids,
            OPERATION_NAME: "invoke_workflow",
            "gen_ai.workflow.name": ctx.app_name,  # the span is named after it
            "gen_ai.agent.name": ctx.agent.name,
        }
        self._span = tracer.start_span(
            f"invoke_workflow {ctx.app_name}",
            context=self._parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        #: The span's context, with the invocation's ids, for the work of the turn.
        self.context = with_invocation(ids, trace.set_span_in_context(self._span, self._parent))

    def scope(self) -> AbstractContextManager[None]:
        """The span current for the work before the turn's events (held across awaits only,
        never across a ``yield``); a failure there ends it (ERROR, or cancelled)."""
        span = self._span
        return _NOTHING if span is None else self._scope(span)

    @contextmanager
    def _scope(self, span: Span) -> Iterator[None]:
        token = otel_context.attach(self.context)
        try:
            yield
        except asyncio.CancelledError:
            span.set_attribute(CANCELLED, True)
            span.end()
            raise
        except BaseException as error:
            _metrics.record_error("invoke_workflow", _end_with_error(span, error))
            span.end()
            raise
        finally:
            otel_context.detach(token)

    def trace(self, events: AsyncGenerator[Event, None]) -> AsyncGenerator[Event, None]:
        """The turn's ``events``, each produced with the span current; the span ends with
        them. The agent chosen to answer and its branch (known now) go on it."""
        span = self._span
        if span is None:
            return events
        ctx = self._ctx
        ids = invocation_attributes(ctx)
        span.set_attributes({**ids, "gen_ai.agent.name": ctx.agent.name})
        self.context = with_invocation(ids, trace.set_span_in_context(span, self._parent))
        return _traced(span, self.context, events, operation="invoke_workflow")

    def after(self) -> AbstractContextManager[None]:
        """The span's context current (the span ended with the events) for the work after
        the turn's events: their spans are its children. Held across awaits only."""
        return _NOTHING if self._span is None else self._after()

    @contextmanager
    def _after(self) -> Iterator[None]:
        token = otel_context.attach(self.context)
        try:
            yield
        finally:
            otel_context.detach(token)


#: What :class:`InvocationSpan`'s scopes are while tracing is off (no generator made per turn).
_NOTHING: AbstractContextManager[None] = nullcontext()


def trace_invocation(
    ctx: InvocationContext, events: AsyncGenerator[Event, None]
) -> AsyncGenerator[Event, None]:
    """One user turn's events, in an ``invoke_workflow`` span opened now (see
    :class:`InvocationSpan`, which a Runner opens before the turn's work)."""
    return InvocationSpan(ctx).trace(events)


@contextmanager
def invocation_scope(invocation_id: str, session: Session, branch: str = "") -> Iterator[None]:
    """The ids of the invocation ``invocation_id`` on ``session`` and ``branch`` current (no
    span of its own) for work done for it before its context exists: a service handed a
    delegated run may ask a RemoteAgent's service who runs behind it (``Describe``) before it
    picks the agent, and those calls are the invocation's as much as any, also when the caller
    sent no ids (a client outside the mesh), so their spans, on both sides, carry them. Hold
    it across awaits only, never across a ``yield``."""
    if not tracing_enabled():
        yield
        return
    ids = session_invocation_attributes(
        invocation_id, session.app_name, session.user_id, session.id, branch
    )
    token = otel_context.attach(with_invocation(ids, otel_context.get_current()))
    try:
        yield
    finally:
        otel_context.detach(token)


@contextmanager
def trace_memory_ingestion(ctx: InvocationContext, service: object) -> Iterator[None]:
    """``add_session_to_memory {app}``: a finished turn's session going into memory (after the
    turn's ``invoke_workflow`` span, its child: :meth:`InvocationSpan.after`), ERROR when the
    store fails."""
    tracer = ctx.tracer
    if tracer is None:
        yield
        return
    ids = invocation_attributes(ctx)
    attributes: dict[str, AttributeValue] = {
        **ids,
        "adk_mesh.memory.service": type(service).__name__,
    }
    span = tracer.start_span(
        f"add_session_to_memory {ctx.app_name}", kind=SpanKind.INTERNAL, attributes=attributes
    )
    token = otel_context.attach(with_invocation(ids, trace.set_span_in_context(span)))
    try:
        yield
    except asyncio.CancelledError:
        span.set_attribute(CANCELLED, True)
        raise
    except BaseException as error:
        _metrics.record_error("add_session_to_memory", _end_with_error(span, error))
        raise
    finally:
        otel_context.detach(token)
        span.end()


# --- invoke_agent ---------------------------------------------------------------------------


def _llm_class() -> type[Llm]:
    from adk_mesh.models.base import Llm  # loaded already wherever an agent has a model

    return Llm


def trace_agent_run(
    agent: BaseAgent, ctx: InvocationContext, events: AsyncGenerator[Event, None]
) -> AsyncGenerator[Event, None]:
    """``invoke_agent {name}``: INTERNAL for an agent of this process, CLIENT for a remote one."""
    tracer = ctx.tracer
    if tracer is None:
        return events
    remote = agent.remote_location
    ids = invocation_attributes(ctx)
    attributes = dict(ids)
    attributes[OPERATION_NAME] = "invoke_agent"
    attributes["gen_ai.agent.name"] = agent.name
    if agent.description:
        attributes["gen_ai.agent.description"] = agent.description
    attributes["adk_mesh.agent.type"] = type(agent).__name__
    model = getattr(agent, "model", None)
    if model is not None and isinstance(model, _llm_class()):
        # Required on invoke_agent by the GenAI conventions, when the agent has one model.
        attributes["gen_ai.provider.name"] = provider_name(model)
        attributes["gen_ai.request.model"] = model.name
    if remote is not None:
        attributes.update(server_attributes(remote.target))
        attributes["gen_ai.agent.id"] = f"{remote.target}/{remote.agent_name}"
    if ctx.delegation_depth:
        attributes["adk_mesh.delegation_depth"] = ctx.delegation_depth
    span = tracer.start_span(
        f"invoke_agent {agent.name}",
        kind=SpanKind.CLIENT if remote is not None else SpanKind.INTERNAL,
        attributes=attributes,
    )
    context = with_invocation(ids, trace.set_span_in_context(span))
    started = time.perf_counter()

    def on_end(outcome: _Outcome) -> None:
        _metrics.record_agent_duration(
            time.perf_counter() - started, agent.name, outcome.error_type
        )

    return _traced(span, context, events, operation="invoke_agent", on_end=on_end)


# --- chat -----------------------------------------------------------------------------------


def _part_json(part: Any) -> dict[str, Any]:
    if part.text is not None:
        return {"type": "reasoning" if part.thought else "text", "content": part.text}
    if part.function_call is not None:
        call = part.function_call
        return {
            "type": "tool_call",
            "id": call.id,
            "name": call.name,
            "arguments": _redacted(call.args),
        }
    if part.function_response is not None:
        response = part.function_response
        return {
            "type": "tool_call_response",
            "id": response.id,
            "response": _redacted(response.response),
        }
    if part.inline_data is not None:
        return {"type": "blob", "mime_type": part.inline_data.mime_type}
    if part.file_data is not None:
        return {"type": "uri", "mime_type": part.file_data.mime_type}
    if part.server_tool_call is not None:
        # A tool the provider ran itself: told apart from the calls the runtime executes.
        server_call = part.server_tool_call
        return {
            "type": "server_tool_call",
            "id": server_call.id,
            "name": server_call.tool_type,
            "arguments": _redacted(server_call.args),
        }
    if part.server_tool_response is not None:
        server_reply = part.server_tool_response
        return {
            "type": "server_tool_call_response",
            "id": server_reply.id,
            "response": _redacted(server_reply.response),
        }
    return {"type": "unknown"}


def _messages_json(contents: list[Content], finish_reason: str | None = None) -> str:
    messages: list[dict[str, Any]] = [
        {"role": content.role or "user", "parts": [_part_json(part) for part in content.parts]}
        for content in contents
    ]
    if finish_reason is not None:
        # An output message's finish_reason is required by the conventions' schema.
        for message in messages:
            message["finish_reason"] = finish_reason
    return _bounded(json.dumps(messages, default=str, ensure_ascii=False))


def _bounded(text: str) -> str:
    return text if len(text) <= _MAX_ATTRIBUTE_CHARS else text[:_MAX_ATTRIBUTE_CHARS] + "..."


def _is_secret(key: str) -> bool:
    words = [word.lower() for word in _WORD_BOUNDARY.split(key) if word]
    return bool(words) and (words[-1] in _KEY_WORDS or not _SECRET_WORDS.isdisjoint(words))


def _redacted(value: Any) -> Any:
    """``value`` with every secret-looking key's value replaced."""
    if isinstance(value, dict):
        return {
            key: _REDACTED if isinstance(key, str) and _is_secret(key) else _redacted(item)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redacted(item) for item in value]
    return value


# The conventions' well-known ``gen_ai.provider.name`` values ("if one of them applies, the
# respective value MUST be used") for the models whose own name differs: a backend's GenAI views
# filter on them. Other providers (ollama, a custom Llm) keep their own name.
_WELL_KNOWN_PROVIDERS = {
    "gemini": "gcp.gemini",  # the Gemini API (generativelanguage.googleapis.com)
    "openai-responses": "openai",  # OpenAI's Responses API
}


def provider_name(model: Llm) -> str:
    provider = getattr(model, "provider", None)
    if not isinstance(provider, str) or not provider:
        return type(model).__name__
    return _WELL_KNOWN_PROVIDERS.get(provider, provider)


class _ModelCall(AsyncIterator["LlmResponse"]):
    """A model call's stream traced by :func:`trace_model_call`, and its ``chat`` span.

    With content capture on, a model call that answered keeps its span open past the end of
    its stream, for :func:`record_model_answer`: the output it records is the answer the agent
    used, once the after-model hooks ran (a hook that redacts the answer covers the trace too).
    The span then ends with the time the model's stream ended, so its duration stays the
    model's; :meth:`aclose` ends it all the same (a hook failed: no output is recorded)."""

    __slots__ = ("_chunks", "_span", "ended_at", "finish_reason", "pending")

    def __init__(self, span: Span, chunks: AsyncGenerator[LlmResponse, None]) -> None:
        self._span = span
        self._chunks = chunks
        #: The span waits for the agent's answer (see :meth:`answered`).
        self.pending = False
        self.finish_reason: str | None = None  # the model's, for the output message
        self.ended_at = 0

    def __aiter__(self) -> _ModelCall:
        return self

    def __anext__(self) -> Awaitable[LlmResponse]:
        return self._chunks.__anext__()  # no frame of its own: a streamed token costs no more

    async def aclose(self) -> None:
        try:
            await self._chunks.aclose()
        finally:
            self._end()

    def answered(self, answer: LlmResponse) -> None:
        if not self.pending:
            return
        if answer.content is not None:
            finish_reason = self.finish_reason
            if answer.finish_reason is not None:
                finish_reason = str(answer.finish_reason).lower()
            self._span.set_attribute(
                "gen_ai.output.messages", _messages_json([answer.content], finish_reason)
            )
        self._end()

    def _end(self) -> None:
        if self.pending:
            self.pending = False
            self._span.end(end_time=self.ended_at)


def trace_model_call(
    model: Llm,
    request: LlmRequest,
    responses: AsyncIterator[LlmResponse],
    ctx: InvocationContext,
) -> AsyncIterator[LlmResponse]:
    """``chat {model}`` around one model call (all its streamed chunks) of ``ctx``.

    The request is recorded as it is now, once the before-model hooks ran: the one sent. The
    answer is recorded by :func:`record_model_answer`, once the after-model hooks ran; the
    caller closes the returned stream (``aclose``) when done with it."""
    tracer = ctx.tracer
    if tracer is None:
        return responses
    provider = provider_name(model)
    request_model = request.model or model.name
    config = request.config
    # The invocation's ids come from the context the enclosing agent span attached.
    attributes = current_invocation_attributes()
    attributes |= {
        OPERATION_NAME: "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": request_model,
    }
    for key, value in (
        ("gen_ai.request.temperature", config.temperature),
        ("gen_ai.request.max_tokens", config.max_output_tokens),
        ("gen_ai.request.top_p", config.top_p),
        ("gen_ai.request.top_k", config.top_k),
        ("gen_ai.request.seed", config.seed),
    ):
        if value is not None:
            attributes[key] = value
    if config.stop_sequences:
        attributes["gen_ai.request.stop_sequences"] = list(config.stop_sequences)
    if request.tools:
        attributes["adk_mesh.request.tool_count"] = len(request.tools)
    capture = capture_content()
    if capture:
        if request.system_instruction:
            attributes["gen_ai.system_instructions"] = _bounded(
                json.dumps([{"type": "text", "content": request.system_instruction}])
            )
        attributes["gen_ai.input.messages"] = _messages_json(request.contents)
    current = otel_context.get_current()
    span = tracer.start_span(
        f"chat {request_model}", context=current, kind=SpanKind.CLIENT, attributes=attributes
    )
    context = trace.set_span_in_context(span, current)
    started = time.perf_counter()
    final: list[LlmResponse] = []

    def on_item(response: LlmResponse) -> None:
        if not response.partial:
            final[:] = [response]

    def on_end(outcome: _Outcome) -> None:
        response = final[0] if final else None
        input_tokens = output_tokens = None
        response_model = None
        error_type = outcome.error_type
        if response is not None:
            response_model = response.model_version or request_model
            span.set_attribute("gen_ai.response.model", response_model)
            usage = response.usage_metadata
            if usage is not None:
                input_tokens = usage.prompt_token_count
                output_tokens = usage.candidates_token_count
                span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
                span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
            finish_reason = None
            if response.finish_reason is not None:
                finish_reason = str(response.finish_reason).lower()
                span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])
            if response.error_code and error_type is None:
                # An error answer (no exception): the metrics say so as the span does.
                span.set_status(Status(StatusCode.ERROR, response.error_code))
                span.set_attribute(ERROR_TYPE, response.error_code)
                error_type = response.error_code
                _metrics.record_error("chat", error_type)
            if capture and outcome.completed:
                # The output is the answer the agent uses, once its after-model hooks ran
                # (record_model_answer), not the model's: a redacting hook covers the trace.
                call.pending = True
                call.finish_reason = finish_reason
                call.ended_at = time.time_ns()
        _metrics.record_model_call(
            time.perf_counter() - started,
            provider=provider,
            request_model=request_model,
            response_model=response_model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            error_type=error_type,
        )
        if not call.pending:
            span.end()

    call = _ModelCall(
        span,
        _traced(
            span,
            context,
            responses,
            operation="chat",
            on_item=on_item,
            on_end=on_end,
            end_span=False,
        ),
    )
    return call


def record_model_answer(chunks: AsyncIterator[LlmResponse], answer: LlmResponse) -> None:
    """``answer`` is what the agent took from the model call ``chunks`` (a stream
    :func:`trace_model_call` returned), once the after-model hooks ran: recorded as the call's
    output with content capture on, and its span ends. Nothing when the call is not traced."""
    if isinstance(chunks, _ModelCall):
        chunks.answered(answer)


# --- execute_tool ---------------------------------------------------------------------------


_UNKNOWN_TOOL = "_OTHER"


def _tool_type(tool: BaseTool | None) -> str:
    if tool is None:
        return "function"
    if tool.is_builtin or tool.is_remote:
        # Run by the provider, or by a tool service: not a function of this process.
        return "extension"
    return "function"


@contextmanager
def trace_tool_call(
    tool_name: str,
    tool: BaseTool | None,
    call_id: str | None,
    args: dict[str, Any],
    ctx: InvocationContext,
) -> Iterator[None]:
    """``execute_tool {name}`` around one tool call, current while it runs (a coroutine in one
    task, so holding it current is safe).

    With content capture on, ``args`` is recorded when the call ends: the arguments the tool
    was called with, once the before-tool hooks (which change them in place) ran — a hook that
    masks an argument covers the trace too."""
    tracer = ctx.tracer
    if tracer is None:
        yield
        return
    ids = invocation_attributes(ctx)
    attributes = dict(ids)
    attributes[OPERATION_NAME] = "execute_tool"
    attributes["gen_ai.tool.name"] = tool_name
    attributes["gen_ai.tool.type"] = _tool_type(tool)
    if tool is not None and tool.description:
        attributes["gen_ai.tool.description"] = _bounded(tool.description)
    if call_id:
        attributes["gen_ai.tool.call.id"] = call_id
    capture = capture_content()
    span = tracer.start_span(
        f"execute_tool {tool_name}", kind=SpanKind.INTERNAL, attributes=attributes
    )
    token = otel_context.attach(with_invocation(ids, trace.set_span_in_context(span)))
    # A tool the agent does not have is named by the model: each name it invents would be a
    # metric series of its own for the process's life, so they share one (the span keeps it).
    metric_name = tool_name if tool is not None else _UNKNOWN_TOOL
    started = time.perf_counter()
    error_type: str | None = None
    try:
        yield
    except asyncio.CancelledError:
        span.set_attribute(CANCELLED, True)
        raise
    except BaseException as error:
        error_type = _end_with_error(span, error)
        _metrics.record_error("execute_tool", error_type)
        raise
    finally:
        otel_context.detach(token)
        if capture:
            recorded_args: Any = args
            secrets = ctx.known_secrets
            if secrets:
                # A hook may have bound a credential the invocation handed out in them.
                recorded_args = secrets.redact(recorded_args)
            span.set_attribute(
                "gen_ai.tool.call.arguments",
                _bounded(json.dumps(_redacted(recorded_args), default=str, ensure_ascii=False)),
            )
        if error_type is None:
            recorded = getattr(span, "attributes", None) or {}
            value = recorded.get(ERROR_TYPE)
            error_type = value if isinstance(value, str) else None
        _metrics.record_tool_duration(time.perf_counter() - started, metric_name, error_type)
        span.end()


def record_tool_error(error: BaseException) -> None:
    """The current tool failed, and its failure became a response the model reads."""
    span = trace.get_current_span()
    if span.is_recording():
        error_type = _end_with_error(span, error)
        _metrics.record_error("execute_tool", error_type)


def record_tool_result(response: dict[str, Any] | None) -> None:
    """The current tool's response (recorded only with content capture on)."""
    if response is None or not capture_content():
        return
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attribute(
            "gen_ai.tool.call.result",
            _bounded(json.dumps(_redacted(response), default=str, ensure_ascii=False)),
        )


def record_control_transfer(mode: str, target: str, **attributes: AttributeValue) -> None:
    """How control moves at the current tool: ``return_to_caller`` (AgentTool: the target runs
    and answers back) or ``pass_control`` (a transfer: the target takes over the turn)."""
    span = trace.get_current_span()
    if span.is_recording():
        span.set_attribute(CONTROL_FLOW, mode)
        span.set_attribute(TARGET_AGENT, target)
        for key, value in attributes.items():
            span.set_attribute(f"adk_mesh.{key}", value)
