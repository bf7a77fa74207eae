"""The lean span recorder: the OpenTelemetry tracing API's semantics, recorded cheaply."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from adk_mesh import Content, LlmAgent, Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.telemetry import _providers
from adk_mesh.telemetry._data import FLAG_HAS_IS_REMOTE, FLAG_IS_REMOTE
from adk_mesh.telemetry._export import ExporterSink
from adk_mesh.telemetry._tracer import (
    LeanSpan,
    LeanTracerProvider,
    Sampler,
    SpanLimits,
    sampler_from_env,
)
from adk_mesh.testing import ScriptedModel, call, text


class Collect:
    """A sink keeping the spans it receives."""

    def __init__(self) -> None:
        self.spans: list[LeanSpan] = []
        self.shutdowns = 0

    def on_end(self, span: LeanSpan) -> None:
        self.spans.append(span)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True

    def shutdown(self) -> None:
        self.shutdowns += 1


@pytest.fixture
def sink() -> Collect:
    return Collect()


def provider_with(
    sink: Collect, *, sampler: Sampler | None = None, limits: SpanLimits | None = None
) -> LeanTracerProvider:
    return LeanTracerProvider(
        Resource({"service.name": "svc"}),
        sampler=sampler or Sampler(),
        limits=limits or SpanLimits(),
        sinks=[sink],
    )


@pytest.fixture
def tracer(sink: Collect) -> trace.Tracer:
    return provider_with(sink).get_tracer("scope", "1.2")


# --- ids and parents --------------------------------------------------------------------------


def test_a_root_span_starts_a_trace_and_children_join_it(
    tracer: trace.Tracer, sink: Collect
) -> None:
    with tracer.start_as_current_span("root") as root:
        child = tracer.start_span("child")
        child.end()
    roots = [s for s in sink.spans if s.name == "root"]
    assert len(roots) == 1
    recorded_root, recorded_child = roots[0], sink.spans[0]
    assert recorded_root.parent_span_id == 0 and recorded_root.parent is None
    assert recorded_child.trace_id == recorded_root.trace_id
    assert recorded_child.parent_span_id == recorded_root.span_id
    assert recorded_child.flags == TraceFlags.SAMPLED | FLAG_HAS_IS_REMOTE
    assert root.get_span_context().trace_flags.sampled
    assert recorded_root.scope.name == "scope" and recorded_root.scope.version == "1.2"


def test_a_remote_parent_from_traceparent_is_continued_and_marked_remote(
    tracer: trace.Tracer, sink: Collect
) -> None:
    carrier = {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "tracestate": "vendor=abc",
    }
    parent_context = TraceContextTextMapPropagator().extract(carrier)
    tracer.start_span("server", context=parent_context, kind=SpanKind.SERVER).end()
    (span,) = sink.spans
    assert span.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert span.parent_span_id == 0xB7AD6B7169203331
    assert span.flags == TraceFlags.SAMPLED | FLAG_HAS_IS_REMOTE | FLAG_IS_REMOTE
    assert span.trace_state == "vendor=abc"
    assert span.kind == 2  # OTLP SERVER
    assert span.span_kind is SpanKind.SERVER


def test_ids_are_random_and_never_zero(tracer: trace.Tracer) -> None:
    contexts = [tracer.start_span("s").get_span_context() for _ in range(200)]
    assert len({c.trace_id for c in contexts}) == 200
    assert len({c.span_id for c in contexts}) == 200
    assert all(c.trace_id and c.span_id and c.is_valid for c in contexts)


# --- sampling ---------------------------------------------------------------------------------


def test_always_off_still_propagates_a_valid_unsampled_context(sink: Collect) -> None:
    tracer = provider_with(sink, sampler=Sampler(parent_based=False, ratio=0.0)).get_tracer("t")
    span = tracer.start_span("dropped")
    assert isinstance(span, NonRecordingSpan)
    assert span.get_span_context().is_valid
    assert not span.get_span_context().trace_flags.sampled
    span.end()
    assert sink.spans == []


def test_parent_based_follows_the_callers_decision(sink: Collect) -> None:
    tracer = provider_with(sink, sampler=Sampler(parent_based=True, ratio=1.0)).get_tracer("t")
    for sampled in (True, False):
        parent = SpanContext(
            1, 2, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED if sampled else 0)
        )
        context = trace.set_span_in_context(NonRecordingSpan(parent))
        assert tracer.start_span("s", context=context).is_recording() is sampled


def test_trace_id_ratio_compares_the_low_64_bits() -> None:
    half = Sampler(parent_based=False, ratio=0.5)
    assert half.sampled(None, (0xFFFF << 64) | (1 << 62))
    assert not half.sampled(None, (1 << 63) + 1)
    assert Sampler(parent_based=False, ratio=1.0).sampled(None, (1 << 128) - 1)
    assert not Sampler(parent_based=False, ratio=0.0).sampled(None, 1)
    with pytest.raises(ValueError, match="between 0 and 1"):
        Sampler(ratio=1.5)


@pytest.mark.parametrize(
    ("name", "argument", "description"),
    [
        ("", "", "parentbased_always_on"),
        ("always_on", "", "always_on"),
        ("always_off", "", "always_off"),
        ("parentbased_always_off", "", "parentbased_always_off"),
        ("TraceIdRatio", "0.25", "traceidratio(0.25)"),
        ("parentbased_traceidratio", "0.1", "parentbased_traceidratio(0.1)"),
        ("parentbased_traceidratio", "", "parentbased_always_on"),
    ],
)
def test_sampler_from_env(
    monkeypatch: pytest.MonkeyPatch, name: str, argument: str, description: str
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", name)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", argument)
    assert sampler_from_env().description == description


@pytest.mark.parametrize(("name", "argument"), [("xray", ""), ("traceidratio", "2")])
def test_a_bad_sampler_setting_warns_and_falls_back(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, name: str, argument: str
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", name)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", argument)
    with caplog.at_level(logging.WARNING):
        sampler = sampler_from_env()
    assert sampler.ratio == 1.0
    assert "OTEL_TRACES_SAMPLER" in caplog.text


# --- attributes, events, links and their limits --------------------------------------------


def test_attribute_values_are_cleaned_and_limited(sink: Collect) -> None:
    limits = SpanLimits(attribute_count=3, attribute_value_length=4)
    tracer = provider_with(sink, limits=limits).get_tracer("t")
    values: list[Any] = ["a", "b"]
    span = tracer.start_span("s", attributes={"list": values, "text": "abcdefgh"})
    values.append("c")  # the caller's list changing later does not change the span
    span.set_attribute("none", None)  # invalid: dropped
    span.set_attribute("object", object())  # invalid: dropped
    span.set_attribute("flag", True)
    span.set_attribute("over", 1)  # a fourth attribute: over the limit
    span.set_attribute("text", "replaced-value")  # an existing key may still change
    span.end()
    span.set_attribute("late", 1)  # after end: ignored
    (recorded,) = sink.spans
    assert recorded.attributes == {"list": ("a", "b"), "text": "repl", "flag": True}
    assert recorded.dropped_attributes_count == 1


def test_mappings_bytes_and_str_subclasses_are_kept(tracer: trace.Tracer, sink: Collect) -> None:
    class Kind(str):
        pass

    span = tracer.start_span("s")
    span.set_attribute("map", {"k": [1, 2], "bad": object()})  # type: ignore[dict-item]
    span.set_attribute("bytes", b"\x00\x01")
    span.set_attribute("kind", Kind("chat"))
    span.end()
    (recorded,) = sink.spans
    assert recorded.attributes["map"] == {"k": (1, 2)}
    assert recorded.attributes["bytes"] == b"\x00\x01"
    assert type(recorded.attributes["kind"]) is str


def test_events_and_links_are_limited(sink: Collect) -> None:
    limits = SpanLimits(event_count=1, link_count=1, attributes_per_event=1, attributes_per_link=1)
    tracer = provider_with(sink, limits=limits).get_tracer("t")
    linked = SpanContext(5, 6, is_remote=True, trace_flags=TraceFlags(1))
    span = tracer.start_span(
        "s",
        links=[
            Link(linked, {"a": 1, "b": 2}),
            Link(SpanContext(7, 8, is_remote=False), None),
            Link(SpanContext(0, 0, is_remote=False)),  # invalid: ignored
        ],
    )
    span.add_event("first", {"x": 1, "y": 2}, timestamp=123)
    span.add_event("second")
    span.add_link(SpanContext(9, 10, is_remote=False))
    span.end()
    (recorded,) = sink.spans
    assert [(e.name, e.time_unix_nano, dict(e.attributes)) for e in recorded.events] == [
        ("first", 123, {"x": 1})
    ]
    assert (recorded.events[0].dropped_attributes_count, recorded.dropped_events_count) == (1, 1)
    (link,) = recorded.links
    assert (link.trace_id, link.span_id, dict(link.attributes)) == (5, 6, {"a": 1})
    assert link.flags == 1 | FLAG_HAS_IS_REMOTE | FLAG_IS_REMOTE
    assert recorded.dropped_links_count == 2


def test_limits_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_ATTRIBUTE_COUNT_LIMIT", "7")
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "20")
    monkeypatch.setenv("OTEL_SPAN_EVENT_COUNT_LIMIT", "nope")
    limits = SpanLimits.from_env()
    assert (limits.attribute_count, limits.attribute_value_length) == (7, 20)
    assert limits.event_count == 128  # the bad value is ignored


# --- status, exceptions, end ------------------------------------------------------------------


def test_status_rules(tracer: trace.Tracer, sink: Collect) -> None:
    failed = tracer.start_span("failed")
    failed.set_status(StatusCode.ERROR, "boom")
    failed.set_status(Status(StatusCode.UNSET))  # never overrides
    failed.end()
    fixed = tracer.start_span("fixed")
    fixed.set_status(Status(StatusCode.ERROR, "first"))
    fixed.set_status(StatusCode.OK, "ignored for OK")
    fixed.set_status(StatusCode.ERROR, "OK is final")
    fixed.end()
    by_name = {s.name: s for s in sink.spans}
    assert (by_name["failed"].status_code, by_name["failed"].status_message) == (2, "boom")
    assert (by_name["fixed"].status_code, by_name["fixed"].status_message) == (1, "")
    assert by_name["failed"].status.status_code is StatusCode.ERROR


def test_start_as_current_span_records_the_exception(tracer: trace.Tracer, sink: Collect) -> None:
    with pytest.raises(KeyError), tracer.start_as_current_span("work") as span:
        assert trace.get_current_span() is span
        raise KeyError("missing")
    assert trace.get_current_span() is not span
    (recorded,) = sink.spans
    assert recorded.status_code == 2
    (event,) = recorded.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "KeyError"
    assert "missing" in str(event.attributes["exception.message"])
    assert "Traceback" in str(event.attributes["exception.stacktrace"])


def test_a_span_ends_once_and_a_failing_sink_is_contained(
    sink: Collect, caplog: pytest.LogCaptureFixture
) -> None:
    class Broken(Collect):
        def on_end(self, span: LeanSpan) -> None:
            raise RuntimeError("sink down")

    provider = provider_with(sink)
    provider.add_sink(Broken())
    span = provider.get_tracer("t").start_span("s")
    with caplog.at_level(logging.ERROR):
        span.end(end_time=42)
        span.end(end_time=99)
    assert [s.end_time for s in sink.spans] == [42]
    assert not span.is_recording()
    assert "sink down" in caplog.text


def test_update_name_and_explicit_times(tracer: trace.Tracer, sink: Collect) -> None:
    span = tracer.start_span("first", start_time=10)
    span.update_name("second")
    span.end(end_time=20)
    (recorded,) = sink.spans
    assert (recorded.name, recorded.start_time, recorded.end_time) == ("second", 10, 20)


def test_shutdown_stops_recording_and_sinks_once(sink: Collect) -> None:
    provider = provider_with(sink)
    tracer = provider.get_tracer("t")
    provider.shutdown()
    provider.shutdown()
    assert sink.shutdowns == 1
    assert not tracer.start_span("late").is_recording()
    assert provider.get_tracer("t") is tracer  # one tracer per scope


# --- the SDK view (exporters) ---------------------------------------------------------------


def test_sdk_exporters_see_every_field() -> None:
    exporter = InMemorySpanExporter()
    provider = LeanTracerProvider(
        Resource({"service.name": "svc"}),
        sampler=Sampler(),
        limits=SpanLimits(),
        sinks=[ExporterSink(exporter)],
    )
    tracer = provider.get_tracer("scope", "9", schema_url="https://schema")
    linked = SpanContext(5, 6, is_remote=True, trace_flags=TraceFlags(1))
    with tracer.start_as_current_span(
        "parent", kind=SpanKind.CLIENT, links=[Link(linked, {"why": "cause"})]
    ) as parent:
        child = tracer.start_span("child", attributes={"n": 1})
        child.add_event("tick", {"i": 2}, timestamp=5)
        child.set_status(StatusCode.ERROR, "bad")
        child.end()
    readable = {s.name: s for s in exporter.get_finished_spans()}
    assert readable["child"].parent == parent.get_span_context()
    assert readable["child"].attributes == {"n": 1}
    assert [(e.name, e.timestamp, dict(e.attributes or {})) for e in readable["child"].events] == [
        ("tick", 5, {"i": 2})
    ]
    assert readable["child"].status.status_code is StatusCode.ERROR
    assert readable["child"].status.description == "bad"
    assert readable["parent"].kind is SpanKind.CLIENT
    assert readable["parent"].links[0].context.span_id == 6
    assert readable["parent"].links[0].context.is_remote
    assert readable["parent"].resource.attributes["service.name"] == "svc"
    scope = readable["parent"].instrumentation_scope
    assert scope is not None and (scope.name, scope.version, scope.schema_url) == (
        "scope",
        "9",
        "https://schema",
    )
    provider.shutdown()
    tracer.start_span("late").end()
    assert len(exporter.get_finished_spans()) == 2


def test_trace_state_survives_into_the_sdk_view() -> None:
    exporter = InMemorySpanExporter()
    provider = LeanTracerProvider(
        Resource({}), sampler=Sampler(), limits=SpanLimits(), sinks=[ExporterSink(exporter)]
    )
    state = TraceState([("vendor", "v1")])
    parent = SpanContext(3, 4, is_remote=True, trace_flags=TraceFlags(1), trace_state=state)
    context = trace.set_span_in_context(NonRecordingSpan(parent))
    provider.get_tracer("t").start_span("s", context=context).end()
    (span,) = exporter.get_finished_spans()
    assert span.context.trace_state.to_header() == "vendor=v1"


# --- the instrumentation under either provider -----------------------------------------------


def _run_one_agent_turn(provider: trace.TracerProvider) -> None:
    """One Runner turn (a tool call, then an answer) traced by ``provider``."""
    import asyncio

    def weather(city: str) -> dict[str, Any]:
        """Weather."""
        return {"city": city}

    async def run() -> None:
        agent = LlmAgent(
            name="helper",
            model=ScriptedModel([call("weather", {"city": "Oslo"}), text("Cold.")]),
            tools=[weather],
        )
        service = InMemorySessionService()
        runner = Runner(agent=agent, app_name="app", session_service=service)
        session = await service.create_session(app_name="app", user_id="u")
        async for _ in runner.run(
            user_id="u", session_id=session.id, new_message=Content.from_text("user", "hi")
        ):
            pass

    with _providers.use_tracer_provider(provider):
        asyncio.run(run())


@pytest.fixture
def sdk_spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _run_one_agent_turn(provider)
    yield exporter
    provider.shutdown()


def test_the_stock_sdk_provider_records_the_same_tree(sdk_spans: InMemorySpanExporter) -> None:
    exporter = InMemorySpanExporter()
    lean = LeanTracerProvider(
        Resource({}), sampler=Sampler(), limits=SpanLimits(), sinks=[ExporterSink(exporter)]
    )
    _run_one_agent_turn(lean)

    def tree(spans: Any) -> list[tuple[str, str | None, tuple[str, ...]]]:
        names = {s.context.span_id: s.name for s in spans}
        return sorted(
            (
                s.name,
                names.get(s.parent.span_id) if s.parent else None,
                tuple(sorted(k for k in (s.attributes or {}) if k != "gen_ai.tool.call.id")),
            )
            for s in spans
        )

    assert tree(exporter.get_finished_spans()) == tree(sdk_spans.get_finished_spans())
    assert len(exporter.get_finished_spans()) == 5
    assert otel_context.get_current() == otel_context.Context()


def test_an_invalid_value_is_named_in_the_warning(
    tracer: trace.Tracer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        tracer.start_span("s", attributes={"bad": object()}).end()  # type: ignore[dict-item]
        tracer.start_span("t").set_attribute("worse", None)  # type: ignore[arg-type]
    assert "'bad': invalid value type object" in caplog.text
    assert "'worse': invalid value type NoneType" in caplog.text
