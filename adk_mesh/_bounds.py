"""The bounds of the in-memory stores (sessions, artifacts, memory), checked in one place."""

from __future__ import annotations

from adk_mesh.errors import ConfigError

__all__ = ["check_bounds"]


def check_bounds(ttl: float | None, **bounds: int | None) -> None:
    """Each of ``bounds`` is ``None`` (no bound) or at least 1; ``ttl`` is ``None`` or positive
    seconds.

    Raises:
        ConfigError: naming the first bound that is neither.
    """
    for name, bound in bounds.items():
        if bound is not None and bound < 1:
            raise ConfigError(f"{name} must be at least 1 (or None), not {bound}")
    if ttl is not None and not ttl > 0:
        raise ConfigError(f"ttl must be a positive number of seconds (or None), not {ttl}")
