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
# The boundaries the GenAI conventions advise for gen_ai.client.operation.duration and
# gen_ai.client.token.usage: a backend aggregates these metrics across services and other
# GenAI instrumentations, which it can do only over the same buckets.
_GEN_AI_DURATION_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
_TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip

OPERATION_NAME = "gen_ai.operation.name"
ERROR_TYPE = "error.type"
TOKEN_TYPE = "gen_ai.token.type"


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
            explicit_bucket_boundaries_advisory=_GEN_AI_DURATION_BUCKETS,
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


# The attribute sets measurements are recorded with, built once per distinct set: the SDK
# copies a measurement's attributes, so one dict serves every measurement with that set. A
# process has few distinct sets (agents x tools x models x error types); the cap only guards
# against a caller producing unbounded ones.
_MAX_ATTRIBUTE_SETS = 4096
_attribute_sets: dict[tuple[str | None, ...], dict[str, AttributeValue]] = {}


def _remember(
    key: tuple[str | None, ...], attributes: dict[str, AttributeValue]
) -> dict[str, AttributeValue]:
    if len(_attribute_sets) >= _MAX_ATTRIBUTE_SETS:
        _attribute_sets.clear()
    _attribute_sets[key] = attributes
    return attributes


def _run_attributes(
    operation: str, name_key: str, name: str, error_type: str | None
) -> dict[str, AttributeValue]:
    key = (operation, name, error_type)
    attributes = _attribute_sets.get(key)
    if attributes is None:
        attributes = {OPERATION_NAME: operation, name_key: name}
        if error_type is not None:
            attributes[ERROR_TYPE] = error_type
        attributes = _remember(key, attributes)
    return attributes


def record_agent_duration(seconds: float, agent_name: str, error_type: str | None) -> None:
    instruments = _instruments()
    if instruments is None:
        return
    instruments.agent_duration.record(
        seconds, _run_attributes("invoke_agent", "gen_ai.agent.name", agent_name, error_type)
    )


def record_tool_duration(seconds: float, tool_name: str, error_type: str | None) -> None:
    instruments = _instruments()
    if instruments is None:
        return
    instruments.tool_duration.record(
        seconds, _run_attributes("execute_tool", "gen_ai.tool.name", tool_name, error_type)
    )


_ChatAttributes = tuple[
    dict[str, AttributeValue], dict[str, AttributeValue], dict[str, AttributeValue]
]
_chat_sets: dict[tuple[str, str, str | None, str | None], _ChatAttributes] = {}


def _chat_attributes(
    provider: str, request_model: str, response_model: str | None, error_type: str | None
) -> _ChatAttributes:
    """The attributes of a model call's duration, input and output token measurements."""
    key = (provider, request_model, response_model or None, error_type)
    cached = _chat_sets.get(key)
    if cached is not None:
        return cached
    duration: dict[str, AttributeValue] = {
        OPERATION_NAME: "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": request_model,
    }
    if response_model:
        duration["gen_ai.response.model"] = response_model
    if error_type is not None:
        duration[ERROR_TYPE] = error_type
    sets = (duration, {**duration, TOKEN_TYPE: "input"}, {**duration, TOKEN_TYPE: "output"})
    if len(_chat_sets) >= _MAX_ATTRIBUTE_SETS:
        _chat_sets.clear()
    _chat_sets[key] = sets
    return sets


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
    duration, input_attributes, output_attributes = _chat_attributes(
        provider, request_model, response_model, error_type
    )
    instruments.model_duration.record(seconds, duration)
    if input_tokens is not None:
        instruments.token_usage.record(input_tokens, input_attributes)
    if output_tokens is not None:
        instruments.token_usage.record(output_tokens, output_attributes)


def record_error(operation: str, error_type: str) -> None:
    """Count one failure of ``operation`` (invoke_agent, execute_tool, chat, rpc)."""
    instruments = _instruments()
    if instruments is None:
        return
    instruments.errors.add(1, {"adk_mesh.operation": operation, "error.type": error_type})
