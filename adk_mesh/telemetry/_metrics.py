"""The metric instruments: durations, token usage and errors by type.

Instruments are created on the first measurement against the meter of the moment (see
:func:`~adk_mesh.telemetry._providers.get_meter`); with no metrics provider installed every
``record_*`` function returns at once.
"""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry import metrics
from opentelemetry.util.types import AttributeValue

from adk_mesh.telemetry._providers import get_meter

__all__ = [
    "record_agent_duration",
    "record_error",
    "record_model_call",
    "record_tool_duration",
]

# Seconds; GenAI calls take from milliseconds to minutes.
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576)


@dataclass(frozen=True, slots=True)
class _Instruments:
    agent_duration: metrics.Histogram
    tool_duration: metrics.Histogram
    model_duration: metrics.Histogram
    token_usage: metrics.Histogram
    errors: metrics.Counter


_cache: tuple[metrics.Meter, _Instruments] | None = None


def _instruments() -> _Instruments | None:
    global _cache
    meter = get_meter()
    if meter is None:
        return None
    cached = _cache
    if cached is not None and cached[0] is meter:
        return cached[1]
    instruments = _Instruments(
        agent_duration=meter.create_histogram(
            "adk_mesh.agent.invocation.duration",
            unit="s",
            description="Duration of one agent run (invoke_agent) within an invocation.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        ),
        tool_duration=meter.create_histogram(
            "adk_mesh.tool.duration",
            unit="s",
            description="Duration of one tool execution (execute_tool).",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        ),
        model_duration=meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="Duration of one model call.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        ),
        token_usage=meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens used by one model call, by token type (input, output).",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        ),
        errors=meter.create_counter(
            "adk_mesh.errors",
            unit="{error}",
            description="Failed agent runs, tool executions, model calls and RPCs, by error type.",
        ),
    )
    _cache = (meter, instruments)
    return instruments


def record_agent_duration(seconds: float, agent_name: str, error_type: str | None) -> None:
    instruments = _instruments()
    if instruments is None:
        return
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent_name,
    }
    if error_type is not None:
        attributes["error.type"] = error_type
    instruments.agent_duration.record(seconds, attributes)


def record_tool_duration(seconds: float, tool_name: str, error_type: str | None) -> None:
    instruments = _instruments()
    if instruments is None:
        return
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_name,
    }
    if error_type is not None:
        attributes["error.type"] = error_type
    instruments.tool_duration.record(seconds, attributes)


def record_model_call(
    seconds: float,
    *,
    provider: str,
    request_model: str,
    response_model: str | None,
    input_tokens: int | None,
    output_tokens: int | None,
    error_type: str | None,
) -> None:
    instruments = _instruments()
    if instruments is None:
        return
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": request_model,
    }
    if response_model:
        attributes["gen_ai.response.model"] = response_model
    if error_type is not None:
        attributes["error.type"] = error_type
    instruments.model_duration.record(seconds, attributes)
    if input_tokens is not None:
        instruments.token_usage.record(input_tokens, {**attributes, "gen_ai.token.type": "input"})
    if output_tokens is not None:
        instruments.token_usage.record(output_tokens, {**attributes, "gen_ai.token.type": "output"})


def record_error(operation: str, error_type: str) -> None:
    """Count one failure of ``operation`` (invoke_agent, execute_tool, chat, rpc)."""
    instruments = _instruments()
    if instruments is None:
        return
    instruments.errors.add(1, {"adk_mesh.operation": operation, "error.type": error_type})
