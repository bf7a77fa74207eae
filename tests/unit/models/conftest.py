"""Fixtures for the provider tests: fast retries that record their delays instead of sleeping."""

from __future__ import annotations

import pytest

from adk_mesh.models import RetryPolicy


@pytest.fixture
def sleeps() -> list[float]:
    """The delays the retry policy asked for, in order."""
    return []


@pytest.fixture
def retry(sleeps: list[float]) -> RetryPolicy:
    async def record(seconds: float) -> None:
        sleeps.append(seconds)

    return RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.02, sleep=record)
