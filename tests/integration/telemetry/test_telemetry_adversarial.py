"""Adversarial checks of configure_telemetry and the spans: an application's partial pipeline,
error and cancellation paths, one tree per invocation."""

from __future__ import annotations

import os
from typing import Any

import pytest
from opentelemetry import _logs, context, metrics
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.agents.workflow import ParallelAgent
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.telemetry import TRACE_DIR_ENV, _metrics, configure_telemetry
from adk_mesh.telemetry._propagation import with_invocation
from adk_mesh.testing import ScriptedModel
from adk_mesh.types import Content, Event, LlmResponse, Part, UsageMetadata

INVOCATION_IDS = {"adk_mesh.invocation_id": "e-7", "adk_mesh.session_id": "s-7"}


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("OTEL_") or key == TRACE_DIR_ENV:
            monkeypatch.delenv(key)


def test_an_applications_own_meter_and_logger_providers_outlive_adk_mesh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The application installed metrics and logs pipelines (no tracer provider); adk-mesh
    installs tracing from the variables. Its shutdown must leave the application's providers
    running: their lifetime is the application's."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    reader = InMemoryMetricReader()
    app_meters = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    metrics.set_meter_provider(app_meters)
    log_exporter = InMemoryLogRecordExporter()  # type: ignore[no-untyped-call]
    app_logs = LoggerProvider(shutdown_on_exit=False)
    app_logs.add_log_record_processor(SimpleLogRecordProcessor(log_exporter))
    _logs.set_logger_provider(app_logs)

    handle = configure_telemetry("desk")
    assert handle.pipeline == "adk-mesh"
    # Joined, as an application's tracer provider is: adk-mesh's metrics go to its meter
    # provider, and its log records inside an invocation carry the invocation's id.
    _metrics.record_error("rpc", "UNAVAILABLE")
    token = context.attach(with_invocation(INVOCATION_IDS, context.get_current()))
    try:
        _logs.get_logger("app").emit(body="inside")
    finally:
        context.detach(token)
    (inside,) = log_exporter.get_finished_logs()
    assert inside.log_record.attributes is not None
    assert inside.log_record.attributes["adk_mesh.invocation_id"] == "e-7"
    log_exporter.clear()

    handle.shutdown()

    # Still the application's, and still working.
    assert metrics.get_meter_provider() is app_meters
    metrics.get_meter("app").create_counter("app.requests").add(1)
    data = reader.get_metrics_data()
    assert data is not None
    names = [
        metric.name
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    ]
    assert {"adk_mesh.errors", "app.requests"} <= set(names)
    _logs.get_logger("app").emit(body="still logging")
    assert [record.log_record.body for record in log_exporter.get_finished_logs()] == [
        "still logging"
    ]


# --- a model that answers with an error --------------------------------------------------------


async def _run_turn(agent: LlmAgent) -> list[Event]:
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u1", session_id="s1")
    runner = Runner(agent=agent, app_name="app", session_service=service)
    message = Content(role="user", parts=[Part(text="hi")])
    return [
        event
        async for event in runner.run(user_id="u1", session_id=session.id, new_message=message)
    ]


def _points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    assert data is not None
    return [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


async def test_a_model_error_response_is_an_error_on_the_span_and_the_duration_metric(
    spans: InMemorySpanExporter, metric_reader: InMemoryMetricReader
) -> None:
    """A provider's error answer (``error_code``, no exception): the chat span is ERROR with
    ``error.type``, and the operation-duration metric says so too (GenAI conventions:
    ``error.type`` is required on ``gen_ai.client.operation.duration`` when it failed)."""
    refused = LlmResponse(
        error_code="SAFETY",
        error_message="blocked",
        usage_metadata=UsageMetadata(prompt_token_count=7, candidates_token_count=0),
    )
    agent = LlmAgent(name="solo", model=ScriptedModel([refused]))
    await _run_turn(agent)
    (chat,) = [span for span in spans.get_finished_spans() if span.name == "chat scripted"]
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.attributes is not None
    assert chat.attributes["error.type"] == "SAFETY"
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 7
    (duration,) = _points(metric_reader, "gen_ai.client.operation.duration")
    assert duration.attributes["error.type"] == "SAFETY"
    assert duration.attributes["gen_ai.operation.name"] == "chat"
    (counted,) = _points(metric_reader, "adk_mesh.errors")
    assert dict(counted.attributes) == {"adk_mesh.operation": "chat", "error.type": "SAFETY"}


async def test_a_parallel_agents_branches_are_children_of_its_span_in_one_trace(
    spans: InMemorySpanExporter,
) -> None:
    """Branches run in tasks of their own: each branch's spans still hang under the
    ParallelAgent's invoke_agent span, in the invocation's one trace."""
    branches = [
        LlmAgent(name=f"branch_{index}", model=ScriptedModel([f"answer {index}"]))
        for index in range(2)
    ]
    await _run_turn(ParallelAgent(name="fan_out", sub_agents=branches))  # type: ignore[arg-type]
    finished = spans.get_finished_spans()
    by_id = {span.context.span_id: span for span in finished}
    assert len({span.context.trace_id for span in finished}) == 1
    (root,) = [span for span in finished if span.parent is None]
    assert root.name == "invoke_workflow app"
    assert root.attributes is not None
    invocation_id = root.attributes["adk_mesh.invocation_id"]
    (fan_out,) = [span for span in finished if span.name == "invoke_agent fan_out"]
    for index in range(2):
        (branch,) = [span for span in finished if span.name == f"invoke_agent branch_{index}"]
        assert branch.parent is not None and branch.parent.span_id == fan_out.context.span_id
        chats = [
            span
            for span in finished
            if span.name == "chat scripted"
            and span.parent is not None
            and span.parent.span_id == branch.context.span_id
        ]
        assert len(chats) == 1
    for span in finished:
        assert span.end_time is not None
        assert span.attributes is not None
        assert span.attributes["adk_mesh.invocation_id"] == invocation_id
        while span.parent is not None:
            span = by_id[span.parent.span_id]
        assert span is root
