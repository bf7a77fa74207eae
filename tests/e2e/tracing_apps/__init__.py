"""Agents the tracing end-to-end tests serve in separate processes (next to ``tests.e2e.apps``,
whose tool service and researcher they reuse)."""
