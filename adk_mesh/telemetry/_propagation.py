"""Carrying an invocation across hops: W3C trace context plus baggage.

Every hop carries ``traceparent``/``tracestate`` and a ``baggage`` header holding the
invocation's ids, so the spans a callee starts before it knows the invocation (its gRPC
server span) still carry ``adk_mesh.invocation_id``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from opentelemetry import baggage, propagate
from opentelemetry.context import Context
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
    "extract_context",
    "inject_context",
    "invocation_attributes",
    "with_invocation_baggage",
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


def with_invocation_baggage(
    ctx: InvocationContext,
    context: Context,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> Context:
    """``context`` with the invocation's ids in its baggage (``attributes``: the
    :func:`invocation_attributes` of ``ctx`` when the caller has them already)."""
    # Inner spans of an invocation inherit its baggage from the outer ones: only what differs
    # (a new branch, or a context without the ids) is set, each entry costing a new context.
    if attributes is None:
        attributes = invocation_attributes(ctx)
    present = baggage.get_all(context)
    for key in BAGGAGE_KEYS:
        value = attributes.get(key)
        if value is not None and present.get(key) != value:
            context = baggage.set_baggage(key, value, context=context)
    return context


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
    carrier: dict[str, str] = {}
    propagate.inject(carrier, context=context)
    return carrier


def extract_context(headers: Iterable[tuple[str, str | bytes]] | Mapping[str, str]) -> Context:
    """The context an incoming call's headers carry (an empty one when they carry none)."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    carrier = {key.lower(): value for key, value in items if isinstance(value, str)}
    return propagate.extract(carrier)
