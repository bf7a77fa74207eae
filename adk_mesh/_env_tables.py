"""Named settings tables handed to a service in one environment variable, as JSON.

``adk-mesh up`` gives a service what its ``mesh.toml`` tables name — MCP servers
(``ADK_MESH_MCP_TOOLSETS``), remote A2A agents (``ADK_MESH_A2A_AGENTS``) — as a JSON object of
name to settings; the service reads them back here, with the same clear errors for a variable
set by hand.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Set
from typing import Any

from adk_mesh.errors import ConfigError

__all__ = ["tables_from_env"]


def tables_from_env(
    variable: str,
    *,
    known_keys: Set[str],
    entry: str,
    expected: str,
    environ: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """The tables of ``variable`` (a JSON object of ``entry`` name to an object of settings
    among ``known_keys``), in the order given; empty when it is unset or blank.

    Raises:
        ConfigError: not JSON, not such an object, or an entry that is not an object
            (``expected`` says what it should be) or has an unknown key — naming the entry.
    """
    env = os.environ if environ is None else environ
    text = env.get(variable, "").strip()
    if not text:
        return {}
    try:
        tables = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{variable} is not JSON: {error}") from None
    if not isinstance(tables, dict):
        raise ConfigError(f"{variable} must be a JSON object of {entry} name to settings")
    for name, settings in tables.items():
        where = f"{variable} {name!r}"
        if not isinstance(settings, dict):
            raise ConfigError(f"{where}: expected {expected}")
        unknown = sorted(set(settings) - known_keys)
        if unknown:
            raise ConfigError(
                f"{where}: unknown key {', '.join(unknown)}; "
                f"known keys: {', '.join(sorted(known_keys))}"
            )
    return tables
