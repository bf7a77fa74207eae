"""Shared test setup: no test may reach a real LLM provider or the internet."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from adk_mesh.sessions.base import SessionService
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.sessions.sqlite import SqliteSessionService
from tests.postgres_fixtures import postgres_cluster, postgres_url

__all__ = ["postgres_cluster", "postgres_url"]  # fixtures every test directory can use

_ALLOWED_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


def _host_of(address: Any) -> str | None:
    if isinstance(address, tuple) and address:
        return str(address[0])
    return None


@pytest.fixture(autouse=True)
def _no_real_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail any test that would open a connection to anything but loopback (a real provider)."""
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def check(address: Any) -> None:
        host = _host_of(address)
        if host is not None and host not in _ALLOWED_HOSTS and not host.startswith("127."):
            raise RuntimeError(f"test tried to reach {host}: tests never leave 127.0.0.1")

    def guarded_connect(self: socket.socket, address: Any) -> None:
        check(address)
        return real_connect(self, address)

    def guarded_connect_ex(self: socket.socket, address: Any) -> int:
        check(address)
        return real_connect_ex(self, address)

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, bytes):
            host = host.decode()
        if host is not None and host not in _ALLOWED_HOSTS and not str(host).startswith("127."):
            raise RuntimeError(f"test tried to resolve {host}: tests never leave 127.0.0.1")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", guarded_connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
    for var in (
        "GOOGLE_API_KEY",
        "GEMINI_API_KEY",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "OLLAMA_HOST",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ):
        monkeypatch.delenv(var, raising=False)
    yield


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def session_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[SessionService]:
    """Each session backend in turn: in memory, on a real SQLite file, and on a real
    PostgreSQL database of the test's own."""
    service: SessionService
    if request.param == "memory":
        service = InMemorySessionService()
    elif request.param == "sqlite":
        service = SqliteSessionService(tmp_path / "sessions.db")
    else:
        from adk_mesh.sessions.postgres import PostgresSessionService

        service = PostgresSessionService(request.getfixturevalue("postgres_url"))
    try:
        yield service
    finally:
        await service.close()
