"""Test doubles that are product code: scripted and function-driven models."""

from __future__ import annotations

from adk_mesh.testing.models import FunctionModel, ScriptedModel, call, text

__all__ = ["FunctionModel", "ScriptedModel", "call", "text"]
