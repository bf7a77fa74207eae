"""The W3C headers of a mesh hop: our direct encoding agrees with OpenTelemetry's propagators."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import baggage, propagate, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from adk_mesh.telemetry import _propagation
from adk_mesh.telemetry._propagation import (
    INVOCATION_ID,
    current_invocation_attributes,
    extract_context,
    inject_context,
    trace_headers,
    with_invocation,
)

W3C = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])


def api_inject(context: Context) -> dict[str, str]:
    carrier: dict[str, str] = {}
    W3C.inject(carrier, context=context)
    return carrier


def view(context: Context) -> tuple[object, dict[str, object]]:
    """What a context carries across a hop: the remote span context and the baggage."""
    span_context = trace.get_current_span(context).get_span_context()
    state = span_context.trace_state.to_header() if span_context.trace_state else ""
    ids = (
        (span_context.trace_id, span_context.span_id, int(span_context.trace_flags), state)
        if span_context.is_valid
        else None
    )
    return ids, dict(baggage.get_all(context))


ids_st = st.integers(min_value=0, max_value=(1 << 128) - 1)
text_st = (
    st.text(
        alphabet=st.characters(codec="utf-8", exclude_characters=",;=\x00"), min_size=1, max_size=20
    )
    .map(str.strip)
    .filter(bool)
)
baggage_st = st.dictionaries(
    st.from_regex(r"[A-Za-z][A-Za-z0-9_.\-]{0,15}", fullmatch=True), text_st, max_size=5
)


@settings(max_examples=300, deadline=None)
@given(
    trace_id=ids_st,
    span_id=st.integers(min_value=0, max_value=(1 << 64) - 1),
    flags=st.sampled_from([0, 1]),
    state=st.sampled_from(["", "vendor=v1", "a=1,b=2"]),
    entries=baggage_st,
)
def test_inject_writes_what_the_api_writes_and_extract_reads_it_back(
    trace_id: int, span_id: int, flags: int, state: str, entries: dict[str, str]
) -> None:
    context = Context()
    parent = SpanContext(
        trace_id,
        span_id,
        is_remote=False,
        trace_flags=TraceFlags(flags),
        trace_state=TraceState.from_header([state]) if state else None,
    )
    context = trace.set_span_in_context(NonRecordingSpan(parent), context)
    for key, value in entries.items():
        context = baggage.set_baggage(key, value, context=context)
    ours = inject_context(context)
    theirs = api_inject(context)
    if parent.is_valid:  # (the API writes a traceparent of zeros for an invalid context)
        assert ours.get("traceparent") == theirs.get("traceparent")
        assert ours.get("tracestate") == theirs.get("tracestate")
    assert view(extract_context(ours)) == view(W3C.extract(theirs))
    assert view(extract_context(theirs)) == view(W3C.extract(theirs))


@pytest.mark.parametrize(
    "traceparent",
    [
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-future",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",  # 00 has no more
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # forbidden version
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # zero trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # zero span id
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",  # upper case
        "00-0af7651916cd43dd8448eb211c8031-b7ad6b7169203331-01",  # short
        "garbage",
        "",
    ],
)
def test_extract_accepts_and_refuses_traceparents_as_the_api_does(traceparent: str) -> None:
    carrier = {"traceparent": traceparent, "tracestate": "vendor=v1"}
    assert view(extract_context(carrier)) == view(W3C.extract(carrier))


@pytest.mark.parametrize(
    "header",
    [
        "k=v",
        "k=v;property=1,other=2",
        " spaced = out ,x=y",
        "quoted=a%20b%2Cc,plus=a+b",
        "noequals,k=v",
        "=empty-name,k=v",
    ],
)
def test_extract_reads_baggage_as_the_api_does(header: str) -> None:
    carrier = {"baggage": header}
    assert view(extract_context(carrier)) == view(W3C.extract(carrier))


def test_baggage_limits_drop_what_is_too_long() -> None:
    too_long = "k=" + "v" * 5000
    assert view(extract_context({"baggage": too_long + ",ok=1"})) == (None, {"ok": "1"})
    assert view(extract_context({"baggage": "x" * 9000})) == (None, {})
    context = baggage.set_baggage("big", "v" * 5000, context=Context())
    context = baggage.set_baggage("small", "s", context=context)
    assert inject_context(context) == {"baggage": "small=s"}


def test_the_invocation_ids_become_baggage_only_on_the_wire() -> None:
    ids = {INVOCATION_ID: "e-1", "adk_mesh.user_id": "u 1", "gen_ai.conversation.id": "s"}
    context = with_invocation(ids, Context())
    assert dict(baggage.get_all(context)) == {}  # nothing ambient for other libraries
    assert current_invocation_attributes(context) == ids
    headers = inject_context(context)
    assert headers == {"baggage": "adk_mesh.invocation_id=e-1,adk_mesh.user_id=u+1"}
    received = extract_context(headers)
    assert current_invocation_attributes(received) == {
        INVOCATION_ID: "e-1",
        "adk_mesh.user_id": "u 1",
    }


@pytest.fixture
def b3_like_propagator() -> Iterator[None]:
    """A propagator that is not the W3C pair: the API's path must be taken."""

    class Custom(TraceContextTextMapPropagator):
        @property
        def fields(self) -> set[str]:
            return {"x-custom"}

        def inject(self, carrier, context=None, setter=None) -> None:  # type: ignore[no-untyped-def]
            carrier["x-custom"] = "yes"

    previous = propagate.get_global_textmap()
    propagate.set_global_textmap(Custom())
    try:
        yield
    finally:
        propagate.set_global_textmap(previous)


@pytest.mark.usefixtures("b3_like_propagator")
def test_other_propagators_go_through_the_api() -> None:
    assert inject_context(Context()) == {"x-custom": "yes"}
    assert not _propagation._w3c_propagation()


def test_trace_headers_for_other_hops_carry_no_baggage() -> None:
    parent = SpanContext(0xABC, 0xDEF, is_remote=False, trace_flags=TraceFlags(1))
    context = trace.set_span_in_context(NonRecordingSpan(parent), Context())
    context = baggage.set_baggage("adk_mesh.user_id", "u1", context=context)
    context = with_invocation({INVOCATION_ID: "e-1"}, context)
    assert trace_headers(context) == {"traceparent": f"00-{0xABC:032x}-{0xDEF:016x}-01"}
    assert trace_headers(Context()) == {}  # no span, nothing to continue
