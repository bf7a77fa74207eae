"""Telemetry as an operator reads it in an OTLP backend, checked against the OpenTelemetry
GenAI semantic conventions and the SDK's environment configuration."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, Metric
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from adk_mesh import Content, LlmAgent, Runner
from adk_mesh.models.base import Llm
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.telemetry import CAPTURE_CONTENT_ENV
from adk_mesh.telemetry._spans import refresh_capture_content
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.testing.fake_providers import (
    FakeAnthropic,
    FakeGemini,
    FakeOllama,
    FakeOpenAI,
    FakeProviderServer,
    ScriptedTurn,
)
from adk_mesh.testing.fake_responses import FakeOpenAIResponses
from adk_mesh.types import FinishReason, LlmResponse, UsageMetadata

# The semantic conventions' advised boundaries (gen-ai-metrics.md).
ADVISED_DURATION_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
ADVISED_TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip


async def run_turn(model: Llm, *, tools: list[Any] | None = None) -> None:
    agent = LlmAgent(name="helper", model=model, tools=tools or [])
    service = InMemorySessionService()
    runner = Runner(agent=agent, app_name="app", session_service=service)
    session = await service.create_session(app_name="app", user_id="u1")
    async for _ in runner.run(
        user_id="u1", session_id=session.id, new_message=Content.from_text("user", "hi")
    ):
        pass


def chat_spans(spans: InMemorySpanExporter) -> list[ReadableSpan]:
    return [span for span in spans.get_finished_spans() if span.name.startswith("chat ")]


def metric(reader: InMemoryMetricReader, name: str) -> Metric:
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for found in scope.metrics:
                if found.name == name:
                    return found
    raise AssertionError(f"no metric {name}")


def attributes(point: Any) -> dict[str, Any]:
    return dict(point.attributes or {})


# --- gen_ai.provider.name: the well-known values ------------------------------------------


@pytest.mark.parametrize(
    ("server_type", "expected"),
    [
        (FakeGemini, "gcp.gemini"),  # generativelanguage.googleapis.com
        (FakeOpenAI, "openai"),
        (FakeOpenAIResponses, "openai"),  # OpenAI's Responses API is still OpenAI
        (FakeAnthropic, "anthropic"),
    ],
)
async def test_provider_name_is_the_conventions_well_known_value(
    spans: InMemorySpanExporter,
    metric_reader: InMemoryMetricReader,
    server_type: Callable[[ScriptedTurn], FakeProviderServer],
    expected: str,
) -> None:
    async with server_type(ScriptedTurn(text="hello")) as server:
        async with server.make_model() as model:
            await run_turn(model)
    (chat,) = chat_spans(spans)
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.provider.name"] == expected
    duration = metric(metric_reader, "gen_ai.client.operation.duration")
    assert {attributes(point)["gen_ai.provider.name"] for point in duration.data.data_points} == {
        expected
    }


async def test_a_provider_with_no_well_known_value_keeps_its_own(
    spans: InMemorySpanExporter,
) -> None:
    async with FakeOllama(ScriptedTurn(text="hello")) as server:
        async with server.make_model() as model:
            await run_turn(model)
    (chat,) = chat_spans(spans)
    assert chat.attributes is not None
    assert chat.attributes["gen_ai.provider.name"] == "ollama"


# --- the metrics' advised bucket boundaries -----------------------------------------------


async def test_gen_ai_histograms_use_the_advised_bucket_boundaries(
    spans: InMemorySpanExporter, metric_reader: InMemoryMetricReader
) -> None:
    answer = LlmResponse(
        content=Content.from_text("model", "hello"),
        usage_metadata=UsageMetadata(prompt_token_count=3, candidates_token_count=5),
        turn_complete=True,
    )
    await run_turn(ScriptedModel([answer]))
    duration = metric(metric_reader, "gen_ai.client.operation.duration")
    assert duration.unit == "s"
    (point,) = duration.data.data_points
    assert isinstance(point, HistogramDataPoint)
    assert tuple(point.explicit_bounds) == ADVISED_DURATION_BUCKETS
    tokens = metric(metric_reader, "gen_ai.client.token.usage")
    assert tokens.unit == "{token}"
    for point in tokens.data.data_points:
        assert isinstance(point, HistogramDataPoint)
        assert tuple(point.explicit_bounds) == ADVISED_TOKEN_BUCKETS


# --- bad OTEL_* values: a ConfigError naming the setting, never a traceback ----------------

_CONFIGURE = """
from adk_mesh.errors import ConfigError
from adk_mesh.telemetry import configure_telemetry
try:
    configure_telemetry("svc").shutdown()
except ConfigError as error:
    print("ConfigError:", error.message)
else:
    print("configured")
"""


def configure_in_a_fresh_process(**variables: str) -> subprocess.CompletedProcess[str]:
    """``configure_telemetry`` in a process that has not loaded the SDK yet (as ``adk-mesh
    serve`` starts): some settings are read when the SDK's modules load."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
    env.update(variables)
    return subprocess.run(
        [sys.executable, "-c", _CONFIGURE],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "variable", ["OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"]
)
def test_a_bad_span_limit_is_a_config_error_naming_it(variable: str) -> None:
    result = configure_in_a_fresh_process(
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", **{variable: "lots"}
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0
    assert result.stdout.startswith("ConfigError:"), result.stdout
    assert variable in result.stdout


def test_an_unknown_propagator_is_a_config_error_naming_the_variable() -> None:
    # The API raises ValueError on an unknown name as its propagate module loads: that must
    # not be at ``import adk_mesh`` (every command, ``--help`` too, would die with a
    # traceback), but a clear error when the service configures its telemetry.
    result = configure_in_a_fresh_process(OTEL_PROPAGATORS="tracecontext,baggage,xray-typo")
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stdout.startswith("ConfigError:"), result.stdout
    assert "OTEL_PROPAGATORS" in result.stdout
    assert "xray-typo" in result.stdout


# --- a model's made-up tool names: no metric series each, and an error on the span ---------


async def test_tools_the_model_made_up_share_one_metric_series_and_fail_their_span(
    spans: InMemorySpanExporter, metric_reader: InMemoryMetricReader
) -> None:
    # Each name a model invents (or a prompt injection dictates) would otherwise be a new
    # time series of adk_mesh.tool.duration, kept for the process's life by cumulative
    # temporality: a few thousand crowd the real tools' series into the SDK's overflow set.
    invented = [call(f"lookup_{n}", {}) for n in range(5)]
    await run_turn(ScriptedModel([*invented, "done"]), tools=[get_time])
    durations = metric(metric_reader, "adk_mesh.tool.duration")
    names = {attributes(point)["gen_ai.tool.name"] for point in durations.data.data_points}
    assert len(names) == 1, names
    assert "lookup_0" not in names
    # The span keeps the name the model used (one event, not a series), and says it failed.
    executed = [s for s in spans.get_finished_spans() if s.name.startswith("execute_tool ")]
    assert len(executed) == 5
    for span in executed:
        assert span.attributes is not None
        assert str(span.attributes["gen_ai.tool.name"]).startswith("lookup_")
        assert span.attributes["error.type"] == "ToolError"
        assert span.status.status_code is StatusCode.ERROR
    errors = {attributes(point).get("error.type") for point in durations.data.data_points}
    assert errors == {"ToolError"}


def get_time() -> dict[str, str]:
    """The time."""
    return {"time": "noon"}


# --- invoke_workflow names its workflow ---------------------------------------------------


async def test_the_workflow_span_names_its_workflow(spans: InMemorySpanExporter) -> None:
    await run_turn(ScriptedModel(["hello"]))
    (workflow,) = [s for s in spans.get_finished_spans() if s.name == "invoke_workflow app"]
    assert workflow.attributes is not None
    assert workflow.attributes["gen_ai.operation.name"] == "invoke_workflow"
    # ``invoke_workflow {gen_ai.workflow.name}``: the attribute the name is made of.
    assert workflow.attributes["gen_ai.workflow.name"] == "app"


# --- captured output messages follow the conventions' schema ------------------------------


async def test_captured_output_messages_carry_the_finish_reason(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The output messages JSON schema requires finish_reason on each message.
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    assert refresh_capture_content()
    answer = LlmResponse(
        content=Content.from_text("model", "hello"),
        finish_reason=FinishReason.MAX_TOKENS,
        turn_complete=True,
    )
    await run_turn(ScriptedModel([answer]))
    (chat,) = chat_spans(spans)
    assert chat.attributes is not None
    (message,) = json.loads(str(chat.attributes["gen_ai.output.messages"]))
    assert message["parts"] == [{"type": "text", "content": "hello"}]
    assert message["finish_reason"] == "max_tokens"
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("max_tokens",)
