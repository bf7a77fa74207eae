"""FunctionTool: schemas from signatures, argument validation, injection and results.

This module uses ``from __future__ import annotations``, so every tool function defined here
has string annotations that FunctionTool must resolve.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import functools
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, Literal, Optional

import pytest
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from adk_mesh.contexts import InvocationContext, ToolContext
from adk_mesh.errors import ConfigError, ToolError
from adk_mesh.sessions.base import Session
from adk_mesh.tools.base import LONG_RUNNING_NOTE
from adk_mesh.tools.function_tool import FunctionTool

if TYPE_CHECKING:
    # Imported for type checkers only: at runtime the name does not exist, as in a tool
    # module that avoids an import cycle this way.
    from adk_mesh.contexts import ToolContext as LazyToolContext


class _StubAgent:
    name = "agent"


@pytest.fixture
def ctx() -> ToolContext:
    invocation = InvocationContext(
        invocation_id="i",
        agent=_StubAgent(),  # type: ignore[arg-type]
        session=Session(id="s", app_name="a", user_id="u"),
    )
    return ToolContext(invocation, function_call_id="c1")


def _walk(value: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) pair of a nested JSON value."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)


# --- tool functions ---------------------------------------------------------------------------


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Location(BaseModel):
    """A point on Earth."""

    lat: float = Field(description="latitude in degrees")
    lon: float
    title: str = ""  # a property named like the keyword pydantic adds: must survive


class Trip(BaseModel):
    start: Location
    stops: list[Location] = []


class Node(BaseModel):
    value: int
    children: list[Node] = []


class Forecast(BaseModel):
    city: str
    high: float
    when: datetime.date


class Reading(TypedDict):
    sensor: str
    value: float


@dataclasses.dataclass
class Point:
    x: int
    y: int


def get_weather(city: str, days: int = 1) -> dict[str, Any]:
    """Get the weather forecast for a city.

    Uses the national service; results
    are cached for an hour.

    Args:
        city: the city name, e.g. "Paris".
        days (int): how many days ahead,
            counting today.

    Returns:
        The forecast.
    """
    return {"city": city, "days": days}


def scalars(text: str, count: int, ratio: float, flag: bool) -> None:
    """All scalar kinds."""


def collections(
    numbers: list[int], pair: tuple[int, str], labels: set[str], weights: dict[str, float]
) -> None:
    """Container kinds."""


def optionals(a: int | None, b: Optional[str] = None, c: None = None) -> None:  # noqa: UP045
    """Nullable kinds."""


def choices(unit: Unit, mode: Literal["fast", "slow"] = "fast") -> dict[str, Any]:
    """Enum and Literal."""
    return {"unit": unit, "is_enum": isinstance(unit, Unit), "mode": mode}


def moments(when: datetime.datetime, day: datetime.date) -> dict[str, Any]:
    """Dates and times."""
    return {"types": [type(when).__name__, type(day).__name__], "when": when, "day": day}


def plan_trip(trip: Trip, note: str = "") -> dict[str, Any]:
    """Plan a trip.

    Args:
        trip: where to go.
        note: anything else.
    """
    return {"is_model": isinstance(trip, Trip), "stops": len(trip.stops), "lat": trip.start.lat}


def annotated(
    limit: Annotated[int, Field(description="at most this many", ge=1, le=50)],
    query: Annotated[str, "what to look for"],
    mode: Annotated[str, "from Annotated"] = "any",
) -> None:
    """Annotated descriptions.

    Args:
        limit: overridden by the Field description.
        mode: overridden by the Annotated string.
    """


def untyped(anything, count=3):  # type: ignore[no-untyped-def]
    """No annotations at all."""
    return {"anything": anything, "count": count}


def structured(reading: Reading, point: Point) -> dict[str, Any]:
    """TypedDict and dataclass parameters."""
    return {"reading": reading, "point_is_dataclass": isinstance(point, Point), "x": point.x}


def no_parameters() -> dict[str, str]:
    """Takes nothing."""
    return {"ok": "yes"}


def remember(key: str, value: str, tool_context: ToolContext) -> dict[str, str]:
    """Remember a value in the session state."""
    tool_context.state[key] = value
    return {"call": tool_context.function_call_id or ""}


def remember_typed(key: str, context: ToolContext) -> dict[str, Any]:
    """Context injected by its annotation, whatever its name."""
    context.state[key] = True
    return {}


def lazy_context(key: str, tool_context: LazyToolContext) -> dict[str, Any]:
    """The context type is imported under TYPE_CHECKING only."""
    tool_context.state[key] = 1
    return {}


def only_context(tool_context: ToolContext) -> dict[str, Any]:
    """Nothing but the context."""
    return {"agent": tool_context.agent_name}


async def async_add(a: int, b: int) -> dict[str, int]:
    """Add, asynchronously."""
    await asyncio.sleep(0)
    return {"sum": a + b}


def which_thread() -> dict[str, Any]:
    """Report the thread it ran in."""
    return {"thread": threading.get_ident()}


def returns(kind: str) -> Any:
    """Return a value of the requested kind."""
    values: dict[str, Any] = {
        "dict": {"a": 1, "nested": {"b": [1, 2]}},
        "unsafe_dict": {"when": datetime.date(2024, 5, 1), "unit": Unit.CELSIUS, "raw": b"\x00"},
        "model": Forecast(city="Paris", high=21.5, when=datetime.date(2024, 5, 1)),
        "dataclass": Point(x=1, y=2),
        "list": [1, "two"],
        "scalar": 42,
        "none": None,
        "nan": {"value": float("nan")},
        "object": {"thing": object()},
    }
    return values[kind]


def forecast(city: str) -> Forecast:
    """A typed result."""
    return Forecast(city=city, high=20.0, when=datetime.date(2024, 5, 1))


def reading(sensor: str) -> Reading:
    """A TypedDict result."""
    return {"sensor": sensor, "value": 1.5}


def clashing_names(
    json: str, model_config: int, _private: bool, schema: str = "s"
) -> dict[str, Any]:
    """Parameter names that are BaseModel attributes or private in pydantic."""
    return {"json": json, "model_config": model_config, "_private": _private, "schema": schema}


def positional_only(a: int, b: int = 10, /, c: int = 100) -> dict[str, int]:
    """Positional-only parameters."""
    return {"a": a, "b": b, "c": c}


def field_default(size: int = Field(5, ge=0, description="how many")) -> dict[str, int]:
    """A pydantic Field as the default."""
    return {"size": size}


_UNSET: Any = object()


def sentinel_default(value: int | None = _UNSET) -> dict[str, bool]:
    """A default JSON cannot show."""
    return {"unset": value is _UNSET}


def recursive(tree: Node) -> dict[str, int]:
    """A recursive model."""
    return {"children": len(tree.children)}


def search(query: str, api_key: str) -> dict[str, str]:
    """Search with an API key."""
    return {"query": query, "key": api_key}


def variadic_positional(*names: str) -> None:
    """Takes *names."""


def variadic_keywords(city: str, **options: Any) -> None:
    """Takes **options."""


def generator(n: int) -> Iterator[int]:
    """Yields."""
    yield n


class Calculator:
    def __init__(self, factor: int) -> None:
        self.factor = factor

    def scale(self, value: int) -> dict[str, int]:
        """Multiply by the calculator's factor.

        Args:
            value: what to multiply.
        """
        return {"result": value * self.factor}


class AsyncAdder:
    """Adds two numbers."""

    async def __call__(self, a: int, b: int = 2) -> dict[str, int]:
        return {"sum": a + b}


def logged(func: Any) -> Any:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)

    return wrapper


@logged
def decorated(x: int) -> dict[str, int]:
    """A decorated function: FunctionTool reads the wrapped signature."""
    return {"x": x}


# --- schemas ----------------------------------------------------------------------------------


def test_name_description_and_docstring_arguments() -> None:
    tool = FunctionTool(get_weather)

    assert tool.name == "get_weather"
    assert tool.description == (
        "Get the weather forecast for a city.\n\n"
        "Uses the national service; results\nare cached for an hour."
    )
    assert tool.parameters_schema == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": 'the city name, e.g. "Paris".'},
            "days": {
                "type": "integer",
                "default": 1,
                "description": "how many days ahead, counting today.",
            },
        },
        "required": ["city"],
    }


def test_explicit_name_and_description_win() -> None:
    tool = FunctionTool(get_weather, name="weather", description="Forecasts.")

    assert (tool.name, tool.description) == ("weather", "Forecasts.")


def test_scalar_schema() -> None:
    assert FunctionTool(scalars).parameters_schema == {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
        },
        "required": ["text", "count", "ratio", "flag"],
    }


def test_collection_schema() -> None:
    assert FunctionTool(collections).parameters_schema == {
        "type": "object",
        "properties": {
            "numbers": {"type": "array", "items": {"type": "integer"}},
            "pair": {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "string"}],
                "minItems": 2,
                "maxItems": 2,
            },
            "labels": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "weights": {"type": "object", "additionalProperties": {"type": "number"}},
        },
        "required": ["numbers", "pair", "labels", "weights"],
    }


def test_optional_schema() -> None:
    """Optional without a default stays required (the model must send null): Python's rule."""
    assert FunctionTool(optionals).parameters_schema == {
        "type": "object",
        "properties": {
            "a": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "b": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "c": {"type": "null", "default": None},
        },
        "required": ["a"],
    }


def test_enum_and_literal_schema() -> None:
    assert FunctionTool(choices).parameters_schema == {
        "type": "object",
        "properties": {
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
        },
        "required": ["unit"],
    }


def test_datetime_schema() -> None:
    assert FunctionTool(moments).parameters_schema == {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
        },
        "required": ["when", "day"],
    }


def test_nested_model_is_inlined_without_refs_or_titles() -> None:
    schema = FunctionTool(plan_trip).parameters_schema
    location = {
        "type": "object",
        "description": "A point on Earth.",
        "properties": {
            "lat": {"type": "number", "description": "latitude in degrees"},
            "lon": {"type": "number"},
            "title": {"type": "string", "default": ""},
        },
        "required": ["lat", "lon"],
    }

    assert schema == {
        "type": "object",
        "properties": {
            "trip": {
                "type": "object",
                "description": "where to go.",
                "properties": {
                    "start": location,
                    "stops": {"type": "array", "items": location, "default": []},
                },
                "required": ["start"],
            },
            "note": {"type": "string", "default": "", "description": "anything else."},
        },
        "required": ["trip"],
    }
    keys = {key for key, _ in _walk(schema)}
    assert not keys & {"$ref", "$defs", "allOf"}
    # The only "title" left is Location's property of that name, not pydantic's keyword.
    assert [value for key, value in _walk(schema) if key == "title"] == [
        {"type": "string", "default": ""}
    ] * 2


def test_recursive_model_has_no_refs() -> None:
    schema = FunctionTool(recursive).parameters_schema

    assert "$ref" not in {key for key, _ in _walk(schema)}
    assert schema == {
        "type": "object",
        "properties": {
            "tree": {
                "type": "object",
                "properties": {
                    "value": {"type": "integer"},
                    "children": {"type": "array", "items": {"type": "object"}, "default": []},
                },
                "required": ["value"],
            }
        },
        "required": ["tree"],
    }


def test_annotated_descriptions_and_constraints() -> None:
    assert FunctionTool(annotated).parameters_schema == {
        "type": "object",
        "properties": {
            "limit": {
                "type": "integer",
                "description": "at most this many",
                "minimum": 1,
                "maximum": 50,
            },
            "query": {"type": "string", "description": "what to look for"},
            "mode": {"type": "string", "description": "from Annotated", "default": "any"},
        },
        "required": ["limit", "query"],
    }


def test_unannotated_parameters_accept_any_json_value() -> None:
    assert FunctionTool(untyped).parameters_schema == {
        "type": "object",
        "properties": {"anything": {}, "count": {"default": 3}},
        "required": ["anything"],
    }


def test_typeddict_and_dataclass_schema() -> None:
    assert FunctionTool(structured).parameters_schema == {
        "type": "object",
        "properties": {
            # Closed like the arguments themselves: pydantic checks extra keys here too.
            "reading": {
                "type": "object",
                "properties": {"sensor": {"type": "string"}, "value": {"type": "number"}},
                "required": ["sensor", "value"],
                "additionalProperties": False,
            },
            "point": {
                "type": "object",
                "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                "required": ["x", "y"],
                "additionalProperties": False,
            },
        },
        "required": ["reading", "point"],
    }


def test_no_parameters_means_no_schema() -> None:
    assert FunctionTool(no_parameters).parameters_schema is None
    assert FunctionTool(only_context).parameters_schema is None


def test_parameter_names_clashing_with_pydantic() -> None:
    schema = FunctionTool(clashing_names).parameters_schema

    assert schema is not None
    assert list(schema["properties"]) == ["json", "model_config", "_private", "schema"]
    assert schema["required"] == ["json", "model_config", "_private"]


async def test_parameter_names_clashing_with_pydantic_are_passed(ctx: ToolContext) -> None:
    tool = FunctionTool(clashing_names)

    result = await tool.execute(ctx, {"json": "j", "model_config": 2, "_private": True})

    assert result == {"json": "j", "model_config": 2, "_private": True, "schema": "s"}


def test_sentinel_default_is_left_out_of_the_schema() -> None:
    schema = FunctionTool(sentinel_default).parameters_schema

    assert schema == {
        "type": "object",
        "properties": {"value": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
        "required": [],
    }


async def test_sentinel_default_reaches_the_function_untouched(ctx: ToolContext) -> None:
    tool = FunctionTool(sentinel_default)

    assert await tool.execute(ctx, {}) == {"unset": True}
    assert await tool.execute(ctx, {"value": None}) == {"unset": False}


def test_schema_is_a_copy() -> None:
    tool = FunctionTool(get_weather)
    schema = tool.parameters_schema
    assert schema is not None

    schema["properties"]["city"]["type"] = "integer"

    assert tool.parameters_schema is not None
    assert tool.parameters_schema["properties"]["city"]["type"] == "string"


def test_response_schema_from_model_and_typeddict() -> None:
    assert FunctionTool(forecast).response_schema == {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "high": {"type": "number"},
            "when": {"type": "string", "format": "date"},
        },
        "required": ["city", "high", "when"],
    }
    assert FunctionTool(reading).response_schema == {
        "type": "object",
        "properties": {"sensor": {"type": "string"}, "value": {"type": "number"}},
        "required": ["sensor", "value"],
    }
    assert FunctionTool(get_weather).response_schema is None
    assert FunctionTool(scalars).response_schema is None


def test_declaration_of_a_long_running_tool() -> None:
    declaration = FunctionTool(get_weather, is_long_running=True).declaration()

    assert declaration.long_running
    assert declaration.description.endswith(LONG_RUNNING_NOTE)
    assert declaration.parameters_schema == FunctionTool(get_weather).parameters_schema


def test_annotations_that_are_not_strings() -> None:
    """Functions from modules without ``from __future__ import annotations`` work too."""
    namespace: dict[str, Any] = {"Unit": Unit, "Annotated": Annotated}
    source = "def f(unit: Unit, n: Annotated[int, 'how many'] = 2) -> dict:\n    return {}\n"
    # dont_inherit: this module's own `from __future__ import annotations` must not apply.
    exec(compile(source, "<tool>", "exec", dont_inherit=True), namespace)
    function = namespace["f"]
    assert not isinstance(function.__annotations__["unit"], str)

    assert FunctionTool(function).parameters_schema == {
        "type": "object",
        "properties": {
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "n": {"type": "integer", "default": 2, "description": "how many"},
        },
        "required": ["unit"],
    }


# --- docstrings -------------------------------------------------------------------------------


def documented(alpha: int, beta: str, gamma: float, delta: bool) -> None:
    """Summary line.

    Args:
        alpha (int): first,
            continued here
            and here.
        beta (dict(str, int)): typed with parentheses: still parsed.
        gamma: plain form.

        delta: after a blank line.

    Raises:
        ValueError: never listed as an argument.
    """


def test_docstring_argument_forms() -> None:
    schema = FunctionTool(documented).parameters_schema
    assert schema is not None

    descriptions = {name: prop.get("description") for name, prop in schema["properties"].items()}

    assert descriptions == {
        "alpha": "first, continued here and here.",
        "beta": "typed with parentheses: still parsed.",
        "gamma": "plain form.",
        "delta": "after a blank line.",
    }
    assert FunctionTool(documented).description == "Summary line."


def test_function_without_docstring_has_empty_description() -> None:
    def bare(x: int) -> None:
        pass

    assert FunctionTool(bare).description == ""


# --- construction errors ----------------------------------------------------------------------


def test_var_positional_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"\*names") as caught:
        FunctionTool(variadic_positional)

    assert "named JSON arguments" in caught.value.message
    assert "list" in caught.value.message


def test_var_keyword_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"\*\*options") as caught:
        FunctionTool(variadic_keywords)

    assert "named JSON arguments" in caught.value.message


def test_generators_are_refused() -> None:
    with pytest.raises(ConfigError, match="generator"):
        FunctionTool(generator)


def test_lambda_needs_a_name() -> None:
    with pytest.raises(ConfigError, match="name="):
        FunctionTool(lambda x: x)

    assert FunctionTool(lambda: {}, name="constant").name == "constant"


def test_run_sync_in_thread_is_refused_for_async_functions() -> None:
    with pytest.raises(ConfigError, match="async"):
        FunctionTool(async_add, run_sync_in_thread=True)


def test_unsupported_type_is_a_config_error() -> None:
    def takes_lock(lock: threading.Semaphore) -> None:
        pass

    with pytest.raises(ConfigError, match="takes_lock"):
        FunctionTool(takes_lock)


def test_unresolvable_hint_is_a_config_error() -> None:
    def uses_local(thing: LocalOnly) -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    with pytest.raises(ConfigError, match="LocalOnly"):
        FunctionTool(uses_local)


def test_non_callable_is_refused() -> None:
    with pytest.raises(ConfigError, match="callable"):
        FunctionTool("get_weather")  # type: ignore[arg-type]


# --- execution --------------------------------------------------------------------------------


async def test_sync_function_runs_inline(ctx: ToolContext) -> None:
    assert await FunctionTool(get_weather).execute(ctx, {"city": "Paris"}) == {
        "city": "Paris",
        "days": 1,
    }
    assert await FunctionTool(which_thread).execute(ctx, {}) == {"thread": threading.get_ident()}


async def test_sync_function_in_thread(ctx: ToolContext) -> None:
    result = await FunctionTool(which_thread, run_sync_in_thread=True).execute(ctx, {})

    assert result is not None
    assert result["thread"] != threading.get_ident()


async def test_async_function_is_awaited(ctx: ToolContext) -> None:
    assert await FunctionTool(async_add).execute(ctx, {"a": 2, "b": 3}) == {"sum": 5}


async def test_sync_callable_returning_a_coroutine_is_awaited(ctx: ToolContext) -> None:
    def start(a: int, b: int) -> Any:
        return async_add(a, b)

    assert await FunctionTool(start).execute(ctx, {"a": 1, "b": 1}) == {"sum": 2}


async def test_tool_context_is_injected(ctx: ToolContext) -> None:
    tool = FunctionTool(remember)

    assert tool.parameters_schema is not None
    assert "tool_context" not in tool.parameters_schema["properties"]
    assert await tool.execute(ctx, {"key": "color", "value": "blue"}) == {"call": "c1"}
    assert ctx.actions.state_delta == {"color": "blue"}
    assert ctx.state["color"] == "blue"


async def test_context_injected_by_annotation(ctx: ToolContext) -> None:
    tool = FunctionTool(remember_typed)

    assert tool.parameters_schema is not None
    assert list(tool.parameters_schema["properties"]) == ["key"]
    await tool.execute(ctx, {"key": "seen"})
    assert ctx.actions.state_delta == {"seen": True}


async def test_context_type_imported_for_type_checking_only(ctx: ToolContext) -> None:
    tool = FunctionTool(lazy_context)

    await tool.execute(ctx, {"key": "lazy"})

    assert ctx.actions.state_delta == {"lazy": 1}


async def test_only_context(ctx: ToolContext) -> None:
    assert await FunctionTool(only_context).execute(ctx, {}) == {"agent": "agent"}


async def test_model_cannot_pass_the_context(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="tool_context: unknown argument"):
        await FunctionTool(remember).execute(
            ctx, {"key": "k", "value": "v", "tool_context": "forged"}
        )


async def test_converted_values_reach_the_function(ctx: ToolContext) -> None:
    assert await FunctionTool(choices).execute(ctx, {"unit": "fahrenheit"}) == {
        "unit": "fahrenheit",
        "is_enum": True,
        "mode": "fast",
    }
    assert await FunctionTool(moments).execute(
        ctx, {"when": "2024-05-01T12:30:00Z", "day": "2024-05-02"}
    ) == {"types": ["datetime", "date"], "when": "2024-05-01T12:30:00Z", "day": "2024-05-02"}
    assert await FunctionTool(plan_trip).execute(
        ctx, {"trip": {"start": {"lat": 1, "lon": 2}, "stops": [{"lat": 3, "lon": 4}]}}
    ) == {"is_model": True, "stops": 1, "lat": 1.0}
    assert await FunctionTool(structured).execute(
        ctx, {"reading": {"sensor": "t1", "value": 3}, "point": {"x": 1, "y": 2}}
    ) == {"reading": {"sensor": "t1", "value": 3.0}, "point_is_dataclass": True, "x": 1}


async def test_collections_are_converted(ctx: ToolContext) -> None:
    seen: dict[str, Any] = {}

    def record(pair: tuple[int, str], labels: set[str]) -> None:
        seen.update(pair=pair, labels=labels)

    await FunctionTool(record).execute(ctx, {"pair": [1, "a"], "labels": ["x", "x", "y"]})

    assert seen == {"pair": (1, "a"), "labels": {"x", "y"}}


async def test_unannotated_parameters_take_any_value(ctx: ToolContext) -> None:
    tool = FunctionTool(untyped)

    assert await tool.execute(ctx, {"anything": {"a": [1, None]}}) == {
        "anything": {"a": [1, None]},
        "count": 3,
    }


async def test_lax_number_conversions(ctx: ToolContext) -> None:
    """Lossless forms a model may send are accepted; lossy or ambiguous ones are refused."""
    tool = FunctionTool(get_weather)

    assert await tool.execute(ctx, {"city": "Paris", "days": 3.0}) == {"city": "Paris", "days": 3}
    assert await tool.execute(ctx, {"city": "Paris", "days": "3"}) == {"city": "Paris", "days": 3}
    with pytest.raises(ToolError, match=r"days: Input should be a valid integer.*\(got 3\.5\)"):
        await tool.execute(ctx, {"city": "Paris", "days": 3.5})
    with pytest.raises(ToolError, match=r"city: Input should be a valid string \(got 75001\)"):
        await tool.execute(ctx, {"city": 75001})


async def test_invalid_arguments_message(ctx: ToolContext) -> None:
    with pytest.raises(ToolError) as caught:
        await FunctionTool(get_weather).execute(ctx, {"days": "three", "town": "Paris"})

    assert caught.value.message == (
        "Invalid arguments for get_weather: city: Field required; "
        "days: Input should be a valid integer, unable to parse string as an integer "
        "(got 'three'); town: unknown argument; valid arguments are: city, days"
    )


async def test_invalid_nested_argument_names_its_path(ctx: ToolContext) -> None:
    with pytest.raises(ToolError) as caught:
        await FunctionTool(plan_trip).execute(
            ctx, {"trip": {"start": {"lat": 1, "lon": 2}, "stops": [{"lat": "north"}]}}
        )

    message = caught.value.message
    assert "trip.stops[0].lat: Input should be a valid number" in message
    assert "(got 'north')" in message
    assert "trip.stops[0].lon: Field required" in message


async def test_invalid_enum_lists_the_choices(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=r"unit: Input should be 'celsius' or 'fahrenheit'"):
        await FunctionTool(choices).execute(ctx, {"unit": "kelvin"})


async def test_arguments_to_a_tool_without_parameters(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="x: unknown argument; this tool takes no arguments"):
        await FunctionTool(no_parameters).execute(ctx, {"x": 1})


async def test_arguments_that_are_not_an_object(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match=r"arguments must be a JSON object \(got \[1, 2\]\)"):
        await FunctionTool(get_weather).execute(ctx, [1, 2])  # type: ignore[arg-type]


async def test_long_inputs_are_shortened_in_messages(ctx: ToolContext) -> None:
    with pytest.raises(ToolError) as caught:
        await FunctionTool(get_weather).execute(ctx, {"city": "x", "days": "9" * 500 + "z"})

    assert len(caught.value.message) < 250
    assert "...)" in caught.value.message


async def test_positional_only_parameters(ctx: ToolContext) -> None:
    tool = FunctionTool(positional_only)

    assert tool.parameters_schema is not None
    assert tool.parameters_schema["required"] == ["a"]
    assert await tool.execute(ctx, {"a": 1}) == {"a": 1, "b": 10, "c": 100}
    assert await tool.execute(ctx, {"a": 1, "c": 3}) == {"a": 1, "b": 10, "c": 3}
    assert await tool.execute(ctx, {"a": 1, "b": 2}) == {"a": 1, "b": 2, "c": 100}


async def test_pydantic_field_as_default(ctx: ToolContext) -> None:
    tool = FunctionTool(field_default)

    assert tool.parameters_schema == {
        "type": "object",
        "properties": {
            "size": {"type": "integer", "default": 5, "minimum": 0, "description": "how many"}
        },
        "required": [],
    }
    assert await tool.execute(ctx, {}) == {"size": 5}
    assert await tool.execute(ctx, {"size": 7}) == {"size": 7}
    with pytest.raises(ToolError, match="size: Input should be greater than or equal to 0"):
        await tool.execute(ctx, {"size": -1})


async def test_partial_keywords_are_hidden_from_the_model(ctx: ToolContext) -> None:
    tool = FunctionTool(functools.partial(search, api_key="secret"))

    assert tool.name == "search"
    assert tool.description == "Search with an API key."
    assert tool.parameters_schema == {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    }
    assert "secret" not in str(tool.declaration())
    assert await tool.execute(ctx, {"query": "q"}) == {"query": "q", "key": "secret"}
    with pytest.raises(ToolError, match="api_key: unknown argument"):
        await tool.execute(ctx, {"query": "q", "api_key": "forged"})


async def test_bound_method(ctx: ToolContext) -> None:
    tool = FunctionTool(Calculator(3).scale)

    assert tool.name == "scale"
    assert tool.description == "Multiply by the calculator's factor."
    assert tool.parameters_schema == {
        "type": "object",
        "properties": {"value": {"type": "integer", "description": "what to multiply."}},
        "required": ["value"],
    }
    assert await tool.execute(ctx, {"value": 2}) == {"result": 6}


async def test_callable_object_with_async_call(ctx: ToolContext) -> None:
    tool = FunctionTool(AsyncAdder())

    assert (tool.name, tool.description) == ("AsyncAdder", "Adds two numbers.")
    assert tool.parameters_schema == {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "default": 2}},
        "required": ["a"],
    }
    assert await tool.execute(ctx, {"a": 1}) == {"sum": 3}


async def test_functools_wraps_decorated_function(ctx: ToolContext) -> None:
    tool = FunctionTool(decorated)

    assert tool.name == "decorated"
    assert tool.parameters_schema == {
        "type": "object",
        "properties": {"x": {"type": "integer"}},
        "required": ["x"],
    }
    assert await tool.execute(ctx, {"x": 4}) == {"x": 4}


async def test_concurrent_calls_share_no_state(ctx: ToolContext) -> None:
    tool = FunctionTool(async_add)

    results = await asyncio.gather(*(tool.execute(ctx, {"a": n, "b": n}) for n in range(20)))

    assert results == [{"sum": 2 * n} for n in range(20)]


# --- results ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("dict", {"a": 1, "nested": {"b": [1, 2]}}),
        ("unsafe_dict", {"when": "2024-05-01", "unit": "celsius", "raw": "AA=="}),
        ("model", {"city": "Paris", "high": 21.5, "when": "2024-05-01"}),
        ("dataclass", {"x": 1, "y": 2}),
        ("list", {"result": [1, "two"]}),
        ("scalar", {"result": 42}),
        ("none", {}),
        ("nan", {"value": None}),
    ],
)
async def test_results_become_json_objects(
    ctx: ToolContext, kind: str, expected: dict[str, Any]
) -> None:
    assert await FunctionTool(returns).execute(ctx, {"kind": kind}) == expected


async def test_none_from_a_long_running_tool_means_pending(ctx: ToolContext) -> None:
    tool = FunctionTool(returns, is_long_running=True)

    assert await tool.execute(ctx, {"kind": "none"}) is None
    assert await tool.execute(ctx, {"kind": "dict"}) == {"a": 1, "nested": {"b": [1, 2]}}


async def test_result_that_is_not_json_is_a_tool_error(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="returns returned a value that cannot be converted"):
        await FunctionTool(returns).execute(ctx, {"kind": "object"})


async def test_exceptions_from_the_function_propagate(ctx: ToolContext) -> None:
    def fails(x: int) -> None:
        raise ValueError(f"bad {x}")

    with pytest.raises(ValueError, match="bad 1"):
        await FunctionTool(fails).execute(ctx, {"x": 1})
