"""Agents: the BaseAgent contract, LlmAgent and the workflow agents."""

from __future__ import annotations

from adk_mesh.agents.base import BaseAgent, RemoteLocation
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.agents.transfers import follow_transfers
from adk_mesh.agents.workflow import LoopAgent, ParallelAgent, SequentialAgent

__all__ = [
    "BaseAgent",
    "LlmAgent",
    "LoopAgent",
    "ParallelAgent",
    "RemoteLocation",
    "SequentialAgent",
    "follow_transfers",
]
