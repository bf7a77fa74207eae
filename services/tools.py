"""The travel desk's tool service: useful tools that work offline.

* ``calculate`` — arithmetic on an expression (``(120 + 80) * 3``), safely parsed;
* ``convert_units`` — distances, weights, temperatures, volumes; with no target unit, the
  user's preferred system (``user:units``, remembered across sessions) decides;
* ``save_note`` — a note saved as a Markdown artifact in the artifact store (read back with
  ``load_artifacts``); with no text it saves the current trip itinerary;
* ``check_fares`` — a long-running tool that scans (simulated, deterministic) fares and
  reports its progress as it goes;
* and beside them, the MCP toolsets ``ADK_MESH_MCP_TOOLSETS`` names: ``mesh.toml`` gives the
  service the reference MCP time server (PyPI ``mcp-server-time``, over stdio), so its
  ``convert_time`` and ``get_current_time`` are served to the whole mesh through an
  ``McpToolset``.

Run it: ``python -m services.tools --port 50055`` or ``adk-mesh serve tools
services.tools:tools``. Notes go to ``ADK_MESH_ARTIFACTS`` (default
``file:.adk-mesh/artifacts``), the store the agents read them back from.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import operator
import os
import re
from collections.abc import Callable
from typing import Any, Literal

from adk_mesh import ArtifactService, FunctionTool, Part, ToolContext, ToolError
from adk_mesh.artifacts import artifact_service_from_url
from adk_mesh.mesh import ToolServer
from adk_mesh.tools.mcp import mcp_toolsets_from_env
from services._common import run_service
from services.catalog import CityName, distance_km

__all__ = ["build_server", "main", "tools"]

Unit = Literal[
    "km",
    "kilometers",
    "mi",
    "miles",
    "meters",
    "feet",
    "kg",
    "kilograms",
    "lb",
    "lbs",
    "pounds",
    "celsius",
    "fahrenheit",
    "liters",
    "gallons",
]

# unit -> (dimension, factor to the dimension's base unit, canonical name, system)
_UNITS: dict[str, tuple[str, float, str, str]] = {
    "km": ("length", 1000.0, "km", "metric"),
    "kilometers": ("length", 1000.0, "km", "metric"),
    "meters": ("length", 1.0, "meters", "metric"),
    "mi": ("length", 1609.344, "miles", "imperial"),
    "miles": ("length", 1609.344, "miles", "imperial"),
    "feet": ("length", 0.3048, "feet", "imperial"),
    "kg": ("mass", 1.0, "kg", "metric"),
    "kilograms": ("mass", 1.0, "kg", "metric"),
    "lb": ("mass", 0.45359237, "lb", "imperial"),
    "lbs": ("mass", 0.45359237, "lb", "imperial"),
    "pounds": ("mass", 0.45359237, "lb", "imperial"),
    "liters": ("volume", 1.0, "liters", "metric"),
    "gallons": ("volume", 3.785411784, "gallons", "imperial"),
    "celsius": ("temperature", 1.0, "°C", "metric"),
    "fahrenheit": ("temperature", 1.0, "°F", "imperial"),
}
# The unit each system uses for each dimension, for conversions without a target unit.
_PREFERRED = {
    ("length", "metric"): "km",
    ("length", "imperial"): "miles",
    ("mass", "metric"): "kg",
    ("mass", "imperial"): "lb",
    ("volume", "metric"): "liters",
    ("volume", "imperial"): "gallons",
    ("temperature", "metric"): "celsius",
    ("temperature", "imperial"): "fahrenheit",
}

_OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
_MAX_EXPONENT = 100


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise ToolError(f"the exponent {right:g} is too large (at most {_MAX_EXPONENT})")
        return float(_OPERATORS[type(node.op)](left, right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return float(_OPERATORS[type(node.op)](_evaluate(node.operand)))
    raise ToolError("only numbers, + - * / // % ** and parentheses are allowed")


def _number(value: float) -> str:
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def calculate(expression: str) -> dict[str, Any]:
    """Evaluate an arithmetic expression, e.g. "(120 + 80) * 3". Keywords: calculate,
    compute, total, sum, budget, split.

    Args:
        expression: numbers with + - * / // % ** (or ^) and parentheses.
    """
    source = expression.replace("^", "**").replace("\u00d7", "*").replace("÷", "/")
    try:
        tree = ast.parse(source, mode="eval")
        value = _evaluate(tree)
    except SyntaxError as error:
        raise ToolError(f"{expression!r} is not an arithmetic expression") from error
    except ZeroDivisionError as error:
        raise ToolError("division by zero") from error
    return {"expression": expression, "value": value, "summary": f"{expression} = {_number(value)}"}


def convert_units(
    value: float,
    from_unit: Unit,
    to_unit: Unit | None = None,
    tool_context: ToolContext | None = None,
) -> dict[str, Any]:
    """Convert a distance, weight, temperature or volume. Without to_unit, the user's
    preferred system (metric or imperial) decides. Keywords: convert, km, miles, kg, lb,
    pounds, celsius, fahrenheit, liters, gallons.

    Args:
        value: the amount to convert.
        from_unit: the unit of value.
        to_unit: the unit wanted; leave it out to use the user's preferred system.
    """
    dimension, factor, source_name, source_system = _UNITS[from_unit]
    preference = ""
    if to_unit is None:
        state = tool_context.state if tool_context is not None else {}
        system = str(state.get("user:units") or "")
        if system not in ("metric", "imperial"):
            system = "imperial" if source_system == "metric" else "metric"
        else:
            preference = f" (your preferred {system} units)"
        to_unit = _PREFERRED[(dimension, system)]  # type: ignore[assignment]
    assert to_unit is not None
    target_dimension, target_factor, target_name, _ = _UNITS[to_unit]
    if target_dimension != dimension:
        raise ToolError(f"cannot convert {dimension} ({from_unit}) to {target_dimension}")
    if dimension == "temperature":
        celsius = value if from_unit == "celsius" else (value - 32) * 5 / 9
        result = celsius if to_unit == "celsius" else celsius * 9 / 5 + 32
    else:
        result = value * factor / target_factor
    summary = f"{_number(value)} {source_name} = {_number(result)} {target_name}{preference}"
    return {
        "value": value,
        "from": source_name,
        "to": target_name,
        "result": result,
        "summary": summary,
    }


def _slug(title: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return slug[:60] or "note"


_artifacts: ArtifactService | None = None


def _artifact_store() -> ArtifactService:
    global _artifacts
    if _artifacts is None:
        _artifacts = artifact_service_from_url(
            os.environ.get("ADK_MESH_ARTIFACTS", "file:.adk-mesh/artifacts")
        )
    return _artifacts


async def save_note(title: str, tool_context: ToolContext, text: str = "") -> dict[str, Any]:
    """Save a note (Markdown) for this trip; each save of a title is a new version. With no
    text, saves the current trip itinerary. Keywords: save, note, write down, keep.

    Args:
        title: the note's title, e.g. "Lisbon in three days".
        text: what to write; leave it out to save the current itinerary.
    """
    body = text.strip() or str(tool_context.state.get("itinerary") or "").strip()
    if not body:
        raise ToolError("there is nothing to save: give the note's text or plan a trip first")
    body = body.removeprefix("[offline model]").strip()
    name = f"{_slug(title)}.md"
    data = f"# {title}\n\n{body}\n".encode()
    version = await _artifact_store().save_artifact(
        app_name=tool_context.app_name,
        user_id=tool_context.user_id,
        session_id=tool_context.session_id,
        filename=name,
        artifact=Part.from_inline_data("text/markdown", data),
    )
    # Recorded like CallbackContext.save_artifact does, so the event carries the version.
    tool_context.actions.artifact_delta[name] = version
    return {
        "artifact": name,
        "version": version,
        "summary": f"Saved note {name!r} (version {version}); read it back with its name.",
    }


_AIRLINES = ("SkyLark", "Atlantic Air", "BudgetJet", "Meridian")
_SCAN_STEP_SECONDS = 0.15


async def check_fares(
    origin: CityName, destination: CityName, tool_context: ToolContext
) -> dict[str, Any]:
    """Scan airline fares between two cities (a simulation: fixed, made-up prices) and
    report progress while scanning. Keywords: fare, flight, fly, price, ticket.

    Args:
        origin: where the trip starts.
        destination: where it goes.
    """
    if origin == destination:
        raise ToolError("origin and destination are the same city")
    km = distance_km(origin, destination)
    quotes: list[dict[str, Any]] = []
    for index, airline in enumerate(_AIRLINES):
        await tool_context.report_progress(
            f"checking {airline}", {"airline": airline}, index / len(_AIRLINES)
        )
        await asyncio.sleep(_SCAN_STEP_SECONDS)  # the simulated scan takes a moment
        price = round(45 + km * (0.07 + 0.012 * ((index * 7 + len(origin)) % 5)))
        quotes.append({"airline": airline, "price_eur": price})
    await tool_context.report_progress("done", None, 1.0)
    quotes.sort(key=lambda quote: int(quote["price_eur"]))
    best = quotes[0]
    return {
        "origin": origin,
        "destination": destination,
        "distance_km": round(km),
        "quotes": quotes,
        "summary": (
            f"Cheapest {origin} → {destination} fare: {best['airline']} at "
            f"€{best['price_eur']} ({len(quotes)} airlines checked, {round(km):,} km; "
            "simulated prices)."
        ),
    }


tools = [
    FunctionTool(calculate),
    FunctionTool(convert_units),
    FunctionTool(save_note),
    FunctionTool(check_fares, is_long_running=True),
]


def build_server(args: argparse.Namespace | None = None) -> ToolServer:
    # As `adk-mesh serve tools services.tools:tools` does: the MCP toolsets of the
    # environment (mesh.toml's [services.tools.mcp.*]) are served beside these tools.
    return ToolServer([*tools, *mcp_toolsets_from_env()], name="travel_tools")


def main(argv: list[str] | None = None) -> int:
    return run_service("tools", build_server, argv=argv, description=__doc__ or "")


if __name__ == "__main__":
    raise SystemExit(main())
