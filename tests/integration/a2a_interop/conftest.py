"""In-memory tracing fixtures (shared with the telemetry tests)."""

from tests.telemetry_fixtures import _fresh_telemetry_configuration, spans

__all__ = ["_fresh_telemetry_configuration", "spans"]
