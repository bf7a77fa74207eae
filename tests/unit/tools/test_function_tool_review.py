"""FunctionTool review: defects found in an adversarial review, one test each.

This module uses ``from __future__ import annotations`` like most tool modules do.
"""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import Field

from adk_mesh.contexts import InvocationContext, ToolContext
from adk_mesh.errors import ToolError
from adk_mesh.sessions.base import Session
from adk_mesh.tools.function_tool import FunctionTool


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


# --- reST (Sphinx) docstrings -----------------------------------------------------------------


def sphinx_documented(city: str, days: int = 1, unit: str = "C") -> dict[str, Any]:
    """Get the weather forecast for a city.

    :param city: the city name,
        e.g. "Paris".
    :type city: str
    :param int days: how many days ahead.
    :param unit: "C" or "F",
        :class:`str` only.
    :returns: the forecast.
    :rtype: dict
    """
    return {}


def test_sphinx_param_fields_become_parameter_descriptions() -> None:
    """The summary stops at the first ``:param`` field; the fields' text must then reach the
    model as the parameters' descriptions, not vanish."""
    tool = FunctionTool(sphinx_documented)
    schema = tool.parameters_schema
    assert schema is not None

    descriptions = {name: prop.get("description") for name, prop in schema["properties"].items()}

    assert tool.description == "Get the weather forecast for a city."
    assert descriptions == {
        "city": 'the city name, e.g. "Paris".',
        "days": "how many days ahead.",
        "unit": '"C" or "F", :class:`str` only.',
    }


# --- a None default on a type that does not say Optional --------------------------------------


def search(
    query: str,
    limit: int = None,  # type: ignore[assignment]  # noqa: RUF013 - the implicit Optional under test
    tag: Annotated[str, Field(min_length=2)] = None,  # type: ignore[assignment]  # noqa: RUF013
) -> Any:
    """Search.

    Args:
        query: what to look for.
        limit: at most this many results.
        tag: only results with this tag.
    """
    return {"query": query, "limit": limit, "tag": tag}


def test_none_default_makes_the_parameter_nullable_in_the_schema() -> None:
    """``limit: int = None`` (implicit Optional, very common) showed the model ``{"type":
    "integer", "default": null}``: a schema whose own default it refuses."""
    schema = FunctionTool(search).parameters_schema
    assert schema is not None

    limit = schema["properties"]["limit"]
    assert limit["default"] is None
    assert limit["anyOf"] == [{"type": "integer"}, {"type": "null"}]
    assert limit["description"] == "at most this many results."
    assert schema["required"] == ["query"]


async def test_null_for_a_none_default_reaches_the_function(ctx: ToolContext) -> None:
    tool = FunctionTool(search)

    assert await tool.execute(ctx, {"query": "q", "limit": None, "tag": None}) == {
        "query": "q",
        "limit": None,
        "tag": None,
    }
    assert await tool.execute(ctx, {"query": "q", "limit": "3", "tag": "ab"}) == {
        "query": "q",
        "limit": 3,
        "tag": "ab",
    }
    # The type's own constraints still apply to a value that is not null.
    with pytest.raises(ToolError, match="tag: String should have at least 2 characters"):
        await tool.execute(ctx, {"query": "q", "tag": "a"})


# --- results that cannot be JSON --------------------------------------------------------------


async def test_circular_result_is_a_tool_error(ctx: ToolContext) -> None:
    """A result referring to itself cannot be JSON: the documented ToolError, not a ValueError
    reported (and logged with its traceback) as a crash of the tool."""

    def loops() -> dict[str, Any]:
        result: dict[str, Any] = {}
        result["self"] = result
        return result

    with pytest.raises(ToolError, match="loops returned a value that cannot be converted"):
        await FunctionTool(loops).execute(ctx, {})


# --- require_confirmation predicates ------------------------------------------------------------


def pay(to: str, /, amount: int = 500, note: str = "") -> dict[str, Any]:
    """Pay someone."""
    return {"to": to, "amount": amount}


async def test_a_predicate_sees_the_defaults_the_function_gets(ctx: ToolContext) -> None:
    """A model that leaves ``amount`` out pays the default 500: the predicate over ``amount``
    must judge that 500, not crash the call on a missing argument."""
    tool = FunctionTool(pay, require_confirmation=lambda amount: amount > 100)

    assert await tool.execute(ctx, {"to": "bob"}) == {"status": "waiting for confirmation"}
    assert ctx.actions.requested_tool_confirmations
    assert await tool.execute(ctx, {"to": "bob", "amount": 5}) == {"to": "bob", "amount": 5}


async def test_a_predicate_sees_positional_only_arguments(ctx: ToolContext) -> None:
    tool = FunctionTool(pay, require_confirmation=lambda to: to != "me")

    assert await tool.execute(ctx, {"to": "me"}) == {"to": "me", "amount": 500}
    assert await tool.execute(ctx, {"to": "bob"}) == {"status": "waiting for confirmation"}


# --- a default given by Field inside Annotated ------------------------------------------------


def repeat(text: str, times: Annotated[int, Field(default=2, ge=1)], /, sep: str = " ") -> str:
    return sep.join([text] * times)


def count_down(start: Annotated[int, Field(default_factory=lambda: 3)]) -> list[int]:
    return list(range(start, 0, -1))


async def test_a_default_in_annotated_field_reaches_the_function(ctx: ToolContext) -> None:
    """The schema shows ``times`` as optional with default 2; a call that leaves it out must
    run with 2, not crash on a missing argument the function has no default for."""
    tool = FunctionTool(repeat)
    schema = tool.parameters_schema
    assert schema is not None
    assert schema["required"] == ["text"]
    assert schema["properties"]["times"]["default"] == 2

    assert await tool.execute(ctx, {"text": "a"}) == {"result": "a a"}
    assert await tool.execute(ctx, {"text": "a", "times": 3, "sep": "-"}) == {"result": "a-a-a"}
    assert await FunctionTool(count_down).execute(ctx, {}) == {"result": [3, 2, 1]}
