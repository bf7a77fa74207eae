"""In-memory tracing fixtures (shared with the other telemetry tests)."""

from tests.telemetry_fixtures import _fresh_telemetry_configuration, metric_reader, spans

__all__ = ["_fresh_telemetry_configuration", "metric_reader", "spans"]
