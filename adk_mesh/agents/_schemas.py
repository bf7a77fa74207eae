"""The schemas of what an agent takes and answers: ``input_schema`` and ``output_schema``.

Either is a pydantic model class or a JSON Schema (a dict) of a JSON object. The object is what
a provider is asked for (structured output), what an AgentTool declares as its parameters, and
what a value is checked against: a model class validates with pydantic, a dict with the
``jsonschema`` library (:class:`_JsonSchemaCheck`).
A schema that is not of an object, or not a valid JSON Schema, is a
:class:`~adk_mesh.errors.ConfigError` at construction; a value that does not fit is a
:class:`SchemaMismatch` naming where.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import pydantic
from pydantic import BaseModel

from adk_mesh.errors import ConfigError

__all__ = ["AgentSchema", "SchemaMismatch", "SchemaSource"]

#: What ``input_schema`` / ``output_schema`` accept.
SchemaSource = type[BaseModel] | Mapping[str, Any]

#: A JSON answer a model fenced as Markdown code despite being asked for JSON.
_FENCED = re.compile(r"\A\s*```(?:json|JSON)?\s*\n(.*?)\n?\s*```\s*\Z", re.DOTALL)
_MAX_ERRORS_SHOWN = 3


class SchemaMismatch(ValueError):
    """A value that does not fit a schema; the message says where and why."""


class AgentSchema:
    """One agent's schema: the JSON Schema providers and tool declarations get, and the check.

    Args:
        source: a pydantic model class, or a JSON Schema of an object (a dict).
        what: which schema of which agent, for error messages (``"output_schema of 'x'"``).

    Raises:
        ConfigError: ``source`` is neither, is not of an object, or is not valid JSON Schema.
    """

    def __init__(self, source: SchemaSource, *, what: str) -> None:
        self.what = what
        self.model: type[BaseModel] | None = None
        if isinstance(source, type) and issubclass(source, BaseModel):
            self.model = source
            try:
                raw = source.model_json_schema()
            except pydantic.PydanticUserError as error:
                raise ConfigError(
                    f"{what}: {source.__name__} has no JSON Schema: {error}"
                ) from None
            # Providers differ on $ref (Gemini's OpenAPI dialect refuses it): inlined once here.
            from adk_mesh.tools.function_tool import _model_friendly

            self.json_schema: dict[str, Any] = _model_friendly(raw)
            self.name = source.__name__
        elif isinstance(source, Mapping):
            schema = json.loads(json.dumps(dict(source)))  # a plain JSON copy of ours
            _check_schema(schema, what)
            self.json_schema = schema
            title = schema.get("title")
            self.name = title if isinstance(title, str) and title else "output"
        else:
            raise ConfigError(
                f"{what} must be a pydantic model class or a JSON Schema dict, not "
                f"{type(source).__name__}"
            )
        if self.json_schema.get("type") != "object":
            raise ConfigError(
                f"{what} must describe a JSON object (its JSON Schema has type 'object'): "
                "structured output and tool parameters are objects"
            )
        self._check = _JsonSchemaCheck(self.json_schema)

    def check(self, value: Any) -> dict[str, Any]:
        """``value`` as a JSON object of this schema: a model's ``model_dump(mode="json")``
        (pydantic validates, coerces, fills defaults), else :meth:`check_json`'s.

        Raises:
            SchemaMismatch: it does not fit.
        """
        if self.model is None:
            return self.check_json(value)
        try:
            parsed = self.model.model_validate(value)
        except pydantic.ValidationError as error:
            raise SchemaMismatch(_pydantic_errors(error)) from None
        return parsed.model_dump(mode="json")

    def check_json(self, value: Any) -> dict[str, Any]:
        """``value`` checked against :attr:`json_schema` alone, with the properties it leaves
        out that declare a ``default`` filled with it. What crosses between agents (an
        AgentTool's arguments, a child's answer) is checked this way on either side, so a
        child in another service, known only by its card's JSON Schema, gets the same values
        and the same messages as in process.

        Raises:
            SchemaMismatch: it does not fit.
        """
        value = _with_defaults(self.json_schema, value)
        errors = self._check.errors(value)
        if errors:
            shown = "; ".join(
                f"{_location(path)}: {message}" for path, message in errors[:_MAX_ERRORS_SHOWN]
            )
            more = len(errors) - _MAX_ERRORS_SHOWN
            raise SchemaMismatch(shown + (f" (and {more} more)" if more > 0 else ""))
        assert isinstance(value, dict)  # the schema's root is an object
        return value

    def parse(self, text: str, *, as_json: bool = False) -> dict[str, Any]:
        """The JSON object a model answered with in ``text`` (a Markdown code fence around it
        is tolerated), checked by :meth:`check` (``as_json``: :meth:`check_json`).

        Raises:
            SchemaMismatch: not JSON, or JSON that does not fit.
        """
        fenced = _FENCED.match(text)
        raw = fenced.group(1) if fenced else text
        try:
            value = json.loads(raw)
        except ValueError as error:
            excerpt = raw.strip()[:80]
            raise SchemaMismatch(f"the answer is not JSON ({error}): {excerpt!r}") from None
        return self.check_json(value) if as_json else self.check(value)


def _with_defaults(schema: Any, value: Any) -> Any:
    """``value`` with the object properties it lacks that declare a ``default`` given it (a
    copy; nested objects too)."""
    if not isinstance(schema, dict) or not isinstance(value, dict):
        return value
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return value
    filled = dict(value)
    for name, prop in properties.items():
        if name in filled:
            filled[name] = _with_defaults(prop, filled[name])
        elif isinstance(prop, dict) and "default" in prop:
            filled[name] = json.loads(json.dumps(prop["default"]))
    return filled


_JSON_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf")


def _check_schema(schema: Any, what: str, path: tuple[str | int, ...] = ()) -> None:
    """Refuse what is not a JSON Schema this module can check: a node that is not an object
    (or a boolean), an unknown ``type``, a ``$ref`` that does not point into ``$defs``."""
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise ConfigError(f"{what} is not a valid JSON Schema: {_location(path)} is not a schema")
    kinds = schema.get("type")
    for kind in kinds if isinstance(kinds, list) else [] if kinds is None else [kinds]:
        if kind not in _JSON_TYPES:
            raise ConfigError(
                f"{what} is not a valid JSON Schema: {_location(path)} has type {kind!r}"
            )
    reference = schema.get("$ref")
    if reference is not None and not (
        isinstance(reference, str) and reference.startswith("#/$defs/")
    ):
        raise ConfigError(
            f"{what}: {_location(path)} has $ref {reference!r}; only references into the "
            "schema's own $defs (#/$defs/NAME) are supported"
        )
    for key in ("properties", "$defs"):
        children = schema.get(key, {})
        if not isinstance(children, dict):
            raise ConfigError(f"{what} is not a valid JSON Schema: {key} is not an object")
        for name, child in children.items():
            _check_schema(child, what, (*path, name))
    for key in ("items", "additionalProperties"):
        if key in schema:
            _check_schema(schema[key], what, path)
    for key in _SCHEMA_LISTS:
        for index, child in enumerate(schema.get(key) or ()):
            _check_schema(child, what, (*path, index))


class _JsonSchemaCheck:
    """Checks a JSON value against a JSON Schema with the ``jsonschema`` library (Draft
    2020-12; ``format`` is not asserted: the providers that honour it already did), and
    says what does not fit in this module's words: ``path: what is wrong``."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self._schema = schema
        self._validator: Any = None

    def errors(self, value: Any) -> list[tuple[tuple[str | int, ...], str]]:
        if self._validator is None:  # imported when a dict schema first checks a value
            import jsonschema

            self._validator = jsonschema.Draft202012Validator(self._schema)
        from referencing.exceptions import Unresolvable

        found: list[tuple[tuple[str | int, ...], str]] = []
        try:
            for error in self._validator.iter_errors(value):
                found.extend(_described(error))
        except Unresolvable as error:
            found.append(((), f"$ref {str(error.ref)!r} points at nothing"))
        return found


#: The bounds of numbers, and how a value that breaks one is described.
_NUMBER_BOUNDS = {
    "minimum": "less than",
    "maximum": "more than",
    "exclusiveMinimum": "not more than",
    "exclusiveMaximum": "not less than",
}


def _described(error: Any) -> list[tuple[tuple[str | int, ...], str]]:
    """One ``jsonschema`` error as ``(path, what is wrong)`` pairs (a missing or an extra
    property is named in the path, one pair each)."""
    path = tuple(error.absolute_path)
    keyword, bound, value = error.validator, error.validator_value, error.instance
    if keyword == "required":
        return [((*path, name), "is required") for name in bound if name not in value]
    if keyword == "additionalProperties":
        known = error.schema.get("properties") or {}
        return [
            ((*path, name), "is not an allowed property") for name in value if name not in known
        ]
    if keyword == "type":
        kinds = bound if isinstance(bound, list) else [bound]
        return [(path, f"{_short(value)} is not of type {' or '.join(kinds)}")]
    if keyword == "const":
        return [(path, f"{_short(value)} is not {_short(bound)}")]
    if keyword == "enum":
        return [(path, f"{_short(value)} is not one of {_short(bound)}")]
    if keyword in ("anyOf", "oneOf"):
        return [(path, f"{_short(value)} does not match {keyword}")]
    if keyword in _NUMBER_BOUNDS:
        return [(path, f"{value} is {_NUMBER_BOUNDS[keyword]} {bound}")]
    if keyword in ("minItems", "maxItems"):
        words = "fewer" if keyword == "minItems" else "more"
        return [(path, f"has {words} than {bound} items")]
    if keyword in ("minLength", "maxLength"):
        words = "shorter" if keyword == "minLength" else "longer"
        return [(path, f"is {words} than {bound} characters")]
    if keyword == "pattern":
        return [(path, f"{_short(value)} does not match {bound!r}")]
    if error.schema is False:
        return [(path, "no value is allowed here")]
    return [(path, error.message)]


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _pydantic_errors(error: pydantic.ValidationError) -> str:
    details = error.errors(include_url=False)
    shown = "; ".join(
        f"{_location(detail['loc'])}: {detail['msg']}" for detail in details[:_MAX_ERRORS_SHOWN]
    )
    more = len(details) - _MAX_ERRORS_SHOWN
    return shown + (f" (and {more} more)" if more > 0 else "")


def _location(path: Any) -> str:
    """``a.b[0]`` for a path of keys and indexes; ``(root)`` for the empty one."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(root)"
