"""Carrying an invocation across hops: W3C trace context plus baggage.

Every hop carries ``traceparent``/``tracestate`` and a ``baggage`` header holding the
invocation's ids, so the spans a callee starts before it knows the invocation (its gRPC
server span) still carry ``adk_mesh.invocation_id``.

Inside a process the ids travel as one value of the OpenTelemetry context
(:func:`with_invocation`), set once per span; they become W3C baggage entries only on the way
out of a mesh call (:func:`inject_context`). So an invocation costs one context entry per span
rather than five baggage copies, and its user and session ids never ride along on calls that
are not mesh hops (a model provider's HTTP API, say, under a propagating HTTP instrumentation).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING
from urllib.parse import quote_plus, unquote_plus

from opentelemetry import baggage, trace
from opentelemetry.context import Context, create_key, get_value, set_value
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from opentelemetry.util.types import AttributeValue

if TYPE_CHECKING:
    from adk_mesh.contexts import InvocationContext

__all__ = [
    "APP_NAME",
    "BAGGAGE_KEYS",
    "BRANCH",
    "CONVERSATION_ID",
    "INVOCATION_ID",
    "SESSION_ID",
    "USER_ID",
    "attributes_from_baggage",
    "current_invocation_attributes",
    "extract_context",
    "inject_context",
    "invocation_as_baggage",
    "invocation_attributes",
    "invocation_from_baggage",
    "session_invocation_attributes",
    "trace_headers",
    "with_invocation",
    "without_invocation_baggage",
]

INVOCATION_ID = "adk_mesh.invocation_id"
APP_NAME = "adk_mesh.app_name"
USER_ID = "adk_mesh.user_id"
SESSION_ID = "adk_mesh.session_id"
BRANCH = "adk_mesh.branch"
CONVERSATION_ID = "gen_ai.conversation.id"

#: The invocation's ids, as baggage entries and as span attributes (same keys).
BAGGAGE_KEYS = (INVOCATION_ID, APP_NAME, USER_ID, SESSION_ID, BRANCH)
_BAGGAGE_KEY_SET = frozenset(BAGGAGE_KEYS)


def invocation_attributes(ctx: InvocationContext) -> dict[str, AttributeValue]:
    """The attributes that put a span into its invocation."""
    return session_invocation_attributes(
        ctx.invocation_id, ctx.app_name, ctx.user_id, ctx.session_id, ctx.branch
    )


def session_invocation_attributes(
    invocation_id: str, app_name: str, user_id: str, session_id: str, branch: str = ""
) -> dict[str, AttributeValue]:
    """:func:`invocation_attributes` of the invocation ``invocation_id`` on a session and
    branch, before its context exists."""
    attributes: dict[str, AttributeValue] = {
        INVOCATION_ID: invocation_id,
        APP_NAME: app_name,
        USER_ID: user_id,
        SESSION_ID: session_id,
        CONVERSATION_ID: session_id,
    }
    if branch:
        attributes[BRANCH] = branch
    return attributes


_INVOCATION = create_key("adk_mesh.invocation")


def with_invocation(ids: Mapping[str, AttributeValue], context: Context) -> Context:
    """``context`` carrying the invocation attributes ``ids`` (an :func:`invocation_attributes`
    result, never changed afterwards) for the spans and the mesh calls started inside it."""
    return set_value(_INVOCATION, ids if isinstance(ids, dict) else dict(ids), context)


def current_invocation_attributes(context: Context | None = None) -> dict[str, AttributeValue]:
    """The invocation attributes ``context`` (default: the current one) carries: set by an
    enclosing span of this process, else received as baggage from the caller."""
    ids = get_value(_INVOCATION, context)
    if isinstance(ids, dict):  # (a dict check: an ABC check costs more than the copy)
        return dict(ids)
    return attributes_from_baggage(context)


def invocation_as_baggage(context: Context | None = None) -> Context | None:
    """``context`` (default: the current one) with the invocation's ids as W3C baggage entries,
    for a hop whose headers another instrumentation writes; ``None`` when the ids are not held
    as a context value (none at all, or already baggage)."""
    ids = get_value(_INVOCATION, context)
    if not isinstance(ids, dict):
        return None
    carried = context
    for key in BAGGAGE_KEYS:
        value = ids.get(key)
        if value is not None:
            carried = baggage.set_baggage(key, value, context=carried)
    return carried


def invocation_from_baggage(context: Context) -> Context:
    """``context`` with the invocation's ids it received as W3C baggage (a mesh call's caller
    sent them) moved to the context value :func:`with_invocation` sets: the spans started in it
    and the next mesh hop still carry them, but they are no longer baggage that another
    instrumentation (httpx, say) would copy onto a call outside the mesh, such as a model
    provider's or a tool's HTTP API. Other baggage entries stay. ``context`` itself when it
    carries none of the ids as baggage."""
    entries = baggage.get_all(context)
    if not entries or _BAGGAGE_KEY_SET.isdisjoint(entries):
        return context
    ids: dict[str, AttributeValue] = {}
    moved = baggage.clear(context)
    for key, value in entries.items():
        if key not in _BAGGAGE_KEY_SET:
            moved = baggage.set_baggage(key, value, context=moved)
        elif isinstance(value, str) and value:
            ids[key] = value
    if not ids or isinstance(get_value(_INVOCATION, moved), dict):
        return moved
    session_id = ids.get(SESSION_ID)
    if session_id is not None:
        ids[CONVERSATION_ID] = session_id
    return set_value(_INVOCATION, ids, moved)


def without_invocation_baggage(context: Context) -> Context:
    """``context`` without the invocation's ids in its baggage (other entries stay): for a
    caller whose word on them is not taken (see the server interceptor)."""
    entries = baggage.get_all(context)
    if not entries or _BAGGAGE_KEY_SET.isdisjoint(entries):
        return context
    kept = baggage.clear(context)
    for key, value in entries.items():
        if key not in _BAGGAGE_KEY_SET:
            kept = baggage.set_baggage(key, value, context=kept)
    return kept


def attributes_from_baggage(context: Context | None = None) -> dict[str, AttributeValue]:
    """The invocation attributes found in ``context``'s baggage (default: the current one)."""
    entries = baggage.get_all(context)
    attributes: dict[str, AttributeValue] = {}
    for key in BAGGAGE_KEYS:
        value = entries.get(key)
        if isinstance(value, str) and value:
            attributes[key] = value
    session_id = attributes.get(SESSION_ID)
    if session_id is not None:
        attributes[CONVERSATION_ID] = session_id
    return attributes


# --- W3C headers ------------------------------------------------------------------------------
#
# With the default propagators (W3C trace context and baggage), a mesh hop is encoded and
# parsed here directly: the same headers the OpenTelemetry propagators write and read, at a
# fraction of their cost (~12 µs to inject and ~18 µs to extract through the API here, paid
# on every call). Any other propagator configuration (OTEL_PROPAGATORS=b3, say) goes through
# the API unchanged.

_W3C_FIELDS = frozenset({"traceparent", "tracestate", "baggage"})
_w3c_textmap: tuple[object, bool] | None = None
_propagate_module: ModuleType | None = None


def propagate_module() -> ModuleType:
    """``opentelemetry.propagate``, loaded at the first hop rather than at import: the API
    reads ``OTEL_PROPAGATORS`` as it loads and raises ``ValueError`` on a name it does not
    know, which at import would make ``import adk_mesh`` (every command) fail with a
    traceback. :func:`~adk_mesh.telemetry.configure_telemetry` loads it first and turns that
    into a ``ConfigError`` naming the variable."""
    global _propagate_module
    module = _propagate_module
    if module is None:
        from opentelemetry import propagate

        module = _propagate_module = propagate
    return module


_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_PLAIN = re.compile(r"[A-Za-z0-9_.\-]*").fullmatch
# The W3C baggage limits, as the API's propagator applies them.
_MAX_BAGGAGE_HEADER = 8192
_MAX_BAGGAGE_PAIR = 4096
_MAX_BAGGAGE_PAIRS = 180
_MAX_TRACESTATE = 512
_TRACE_FLAGS = {flags: TraceFlags(flags) for flags in range(256)}


def _w3c_propagation() -> bool:
    """Whether the global propagator writes exactly the W3C headers (the default)."""
    global _w3c_textmap
    textmap = propagate_module().get_global_textmap()
    cached = _w3c_textmap
    if cached is not None and cached[0] is textmap:
        return cached[1]
    w3c = set(textmap.fields) == _W3C_FIELDS
    _w3c_textmap = (textmap, w3c)
    return w3c


def _quoted(text: str) -> str:
    return text if _PLAIN(text) else quote_plus(text)


# Baggage headers already written, by their entries: the calls of one invocation (and the
# invocations of one session) send the same few.
_MAX_HEADERS_KEPT = 1024
_headers_kept: dict[tuple[tuple[str, object], ...], str] = {}


def _baggage_header(entries: Mapping[str, object]) -> str:
    key = tuple(entries.items())
    try:
        header = _headers_kept.get(key)
    except TypeError:  # an unhashable value (the API lets baggage hold any object)
        return _write_baggage_header(entries)
    if header is None:
        header = _write_baggage_header(entries)
        if len(_headers_kept) >= _MAX_HEADERS_KEPT:
            _headers_kept.clear()
        _headers_kept[key] = header
    return header


def _write_baggage_header(entries: Mapping[str, object]) -> str:
    pairs: list[str] = []
    total = 0
    for key, value in entries.items():
        pair = f"{_quoted(key)}={_quoted(str(value))}"
        if len(pair) > _MAX_BAGGAGE_PAIR:
            continue
        total += len(pair) + (1 if pairs else 0)
        if total > _MAX_BAGGAGE_HEADER or len(pairs) >= _MAX_BAGGAGE_PAIRS:
            break
        pairs.append(pair)
    return ",".join(pairs)


def _inject_w3c(context: Context | None, ids: Mapping[str, object] | None) -> dict[str, str]:
    carrier: dict[str, str] = {}
    span_context = trace.get_current_span(context).get_span_context()
    if span_context.is_valid:
        carrier["traceparent"] = (
            f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-"
            f"{span_context.trace_flags:02x}"
        )
        if span_context.trace_state:
            carrier["tracestate"] = span_context.trace_state.to_header()
    entries: Mapping[str, object] = baggage.get_all(context)
    if ids:
        merged = dict(entries)
        for key in BAGGAGE_KEYS:
            value = ids.get(key)
            if value is not None:
                merged[key] = value
        entries = merged
    if entries:
        header = _baggage_header(entries)
        if header:
            carrier["baggage"] = header
    return carrier


def _extract_w3c(carrier: Mapping[str, str]) -> Context:
    header = carrier.get("baggage")
    context = _baggage_context(header) if header else _EMPTY_CONTEXT
    traceparent = carrier.get("traceparent")
    match = _TRACEPARENT.fullmatch(traceparent.strip()) if traceparent else None
    if match is not None:
        version, trace_hex, span_hex, flags, rest = match.groups()
        trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
        if trace_id and span_id and version != "ff" and not (version == "00" and rest):
            state_header = carrier.get("tracestate")
            state = (
                TraceState.from_header([state_header])
                if state_header and len(state_header) <= _MAX_TRACESTATE
                else None
            )
            parent = SpanContext(trace_id, span_id, True, _TRACE_FLAGS[int(flags, 16)], state)
            context = trace.set_span_in_context(NonRecordingSpan(parent), context)
    return context


_EMPTY_CONTEXT = Context()
# A context holding just the baggage of a header, by the header: the calls of one invocation
# (and the invocations of one session) carry the same one. Contexts never change.
_baggage_contexts: dict[str, Context] = {}


def _baggage_context(header: str) -> Context:
    context = _baggage_contexts.get(header)
    if context is None:
        context = _EMPTY_CONTEXT
        for name, value in _baggage_entries(header).items():
            context = baggage.set_baggage(name, value, context=context)
        if len(_baggage_contexts) >= _MAX_HEADERS_KEPT:
            _baggage_contexts.clear()
        _baggage_contexts[header] = context
    return context


def _baggage_entries(header: str) -> dict[str, str]:
    entries: dict[str, str] = {}
    if len(header) > _MAX_BAGGAGE_HEADER:
        return entries
    for item in header.split(",", _MAX_BAGGAGE_PAIRS)[:_MAX_BAGGAGE_PAIRS]:
        if len(item) > _MAX_BAGGAGE_PAIR:
            continue
        name, separator, value = item.partition("=")
        if not separator:
            continue
        name, value = name.strip(" \t"), value.strip(" \t")
        if not name:
            continue
        if "%" in name or "+" in name:
            name = unquote_plus(name)
        if "%" in value or "+" in value:
            value = unquote_plus(value)
        entries[name] = value
    return entries


def inject_context(context: Context | None = None) -> dict[str, str]:
    """The headers (``traceparent``, ``tracestate``, ``baggage``) that carry ``context``: its
    span, its baggage and the invocation's ids."""
    ids = get_value(_INVOCATION, context)
    if not isinstance(ids, dict):
        ids = None
    if _w3c_propagation():
        return _inject_w3c(context, ids)
    if ids is not None:
        present = baggage.get_all(context)
        for key in BAGGAGE_KEYS:
            value = ids.get(key)
            if value is not None and present.get(key) != value:
                context = baggage.set_baggage(key, value, context=context)
    carrier: dict[str, str] = {}
    propagate_module().inject(carrier, context=context)
    return carrier


def trace_headers(context: Context | None = None) -> dict[str, str]:
    """The trace context of ``context`` (default: the current one) for a hop that is not a
    mesh call, such as a model provider's HTTP API: ``traceparent`` and ``tracestate`` only.

    No baggage goes along, so the invocation's user and session ids stay inside the mesh; a
    self-hosted model server behind an instrumented proxy still continues the trace. Empty
    when there is no span (tracing off).
    """
    span_context = trace.get_current_span(context).get_span_context()
    if not span_context.is_valid:
        return {}
    without_baggage = baggage.clear(context)
    if _w3c_propagation():
        return _inject_w3c(without_baggage, None)
    carrier: dict[str, str] = {}
    propagate_module().inject(carrier, context=without_baggage)
    return carrier


def extract_context(headers: Iterable[tuple[str, str | bytes]] | Mapping[str, str]) -> Context:
    """The context an incoming call's headers carry (an empty one when they carry none)."""
    items = headers.items() if isinstance(headers, dict | Mapping) else headers
    carrier = {key.lower(): value for key, value in items if isinstance(value, str)}
    if _w3c_propagation():
        return _extract_w3c(carrier)
    context: Context = propagate_module().extract(carrier)
    return context
