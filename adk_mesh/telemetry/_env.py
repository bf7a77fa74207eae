"""Reading the integer ``OTEL_*`` settings: limits, sizes and times."""

from __future__ import annotations

import logging
import os
from typing import TypeVar

__all__ = ["env_int"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def env_int(*names: str, default: T, minimum: int = 0) -> int | T:
    """The first of ``names`` that is set to an integer of at least ``minimum``, else
    ``default``. A value that is set but is not such an integer is warned about and skipped,
    as the spec asks of SDKs (bad configuration never stops a process)."""
    for name in names:
        raw = os.environ.get(name, "").strip()
        if not raw:
            continue
        try:
            value = int(raw)
        except ValueError:
            value = minimum - 1
        if value >= minimum:
            return value
        logger.warning("%s=%r is not an integer >= %d: ignored", name, raw, minimum)
    return default
