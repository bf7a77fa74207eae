"""A tool service whose tool needs an API key:
``adk-mesh serve tools tests.e2e.apps.credentialed:tools --credentials file:DIR``."""

from __future__ import annotations

import hashlib
from typing import Any

from adk_mesh.contexts import ToolContext


async def forecast(city: str, tool_context: ToolContext) -> dict[str, Any]:
    """The forecast of a city (calls an API with the service's weather key)."""
    key = await tool_context.get_credential("weather_api")
    if key is None:
        return {"error": "no weather_api credential"}
    return {
        "city": city,
        # What the test checks: the tool got the right key (its digest is not the key).
        "key_sha256": hashlib.sha256(key.reveal().encode()).hexdigest(),
        # Careless: the key itself, which must come back redacted.
        "debug": f"called with key={key.reveal()}",
    }


tools = [forecast]
