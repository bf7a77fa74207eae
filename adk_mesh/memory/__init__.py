"""Memory: long-term recall across a user's past sessions."""

from __future__ import annotations

from adk_mesh.memory.base import MemoryEntry, MemoryService
from adk_mesh.memory.in_memory import InMemoryMemoryService

__all__ = ["InMemoryMemoryService", "MemoryEntry", "MemoryService"]
