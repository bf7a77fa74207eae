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

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from opentelemetry import baggage, propagate
from opentelemetry.context import Context, create_key, get_value, set_value
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
    "invocation_attributes",
    "with_invocation",
]

INVOCATION_ID = "adk_mesh.invocation_id"
APP_NAME = "adk_mesh.app_name"
USER_ID = "adk_mesh.user_id"
SESSION_ID = "adk_mesh.session_id"
BRANCH = "adk_mesh.branch"
CONVERSATION_ID = "gen_ai.conversation.id"

#: The invocation's ids, as baggage entries and as span attributes (same keys).
BAGGAGE_KEYS = (INVOCATION_ID, APP_NAME, USER_ID, SESSION_ID, BRANCH)


def invocation_attributes(ctx: InvocationContext) -> dict[str, AttributeValue]:
    """The attributes that put a span into its invocation."""
    session_id = ctx.session_id
    attributes: dict[str, AttributeValue] = {
        INVOCATION_ID: ctx.invocation_id,
        APP_NAME: ctx.app_name,
        USER_ID: ctx.user_id,
        SESSION_ID: session_id,
        CONVERSATION_ID: session_id,
    }
    if ctx.branch:
        attributes[BRANCH] = ctx.branch
    return attributes


_INVOCATION = create_key("adk_mesh.invocation")


def with_invocation(ids: Mapping[str, AttributeValue], context: Context) -> Context:
    """``context`` carrying the invocation attributes ``ids`` (an :func:`invocation_attributes`
    result, never changed afterwards) for the spans and the mesh calls started inside it."""
    return set_value(_INVOCATION, ids, context)


def current_invocation_attributes(context: Context | None = None) -> dict[str, AttributeValue]:
    """The invocation attributes ``context`` (default: the current one) carries: set by an
    enclosing span of this process, else received as baggage from the caller."""
    ids = get_value(_INVOCATION, context)
    if isinstance(ids, Mapping):
        return dict(ids)
    return attributes_from_baggage(context)


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


def inject_context(context: Context | None = None) -> dict[str, str]:
    """The headers (``traceparent``, ``tracestate``, ``baggage``) that carry ``context``."""
    ids = get_value(_INVOCATION, context)
    if isinstance(ids, Mapping):
        present = baggage.get_all(context)
        for key in BAGGAGE_KEYS:
            value = ids.get(key)
            if value is not None and present.get(key) != value:
                context = baggage.set_baggage(key, value, context=context)
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    return carrier


def extract_context(headers: Iterable[tuple[str, str | bytes]] | Mapping[str, str]) -> Context:
    """The context an incoming call's headers carry (an empty one when they carry none)."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    carrier = {key.lower(): value for key, value in items if isinstance(value, str)}
    return propagate.extract(carrier)
