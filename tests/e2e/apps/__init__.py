"""Agents and tools the end-to-end tests serve in separate processes.

Every model is a deterministic :class:`~adk_mesh.testing.FunctionModel` that reads the
scenario from the user's message, so one process serves any number of test runs. Files the
services write for the tests to observe (markers) go to ``$ADK_E2E_DIR``.
"""
