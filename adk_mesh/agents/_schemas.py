"""The schemas of what an agent takes and answers: ``input_schema`` and ``output_schema``.

Either is a pydantic model class or a JSON Schema (a dict) of a JSON object. The object is what
a provider is asked for (structured output), what an AgentTool declares as its parameters, and
what a value is checked against: a model class validates with pydantic, a dict with the
small checker here (the keywords structured output uses; see :class:`_JsonSchemaCheck`).
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


def _is_type(value: Any, kind: str) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return kind == "number" or float(value).is_integer()


class _JsonSchemaCheck:
    """Checks a JSON value against a JSON Schema: the keywords structured output uses (types,
    properties, required, additionalProperties, items, enum, const, anyOf/oneOf/allOf, local
    $ref, the numeric, length and item-count bounds, pattern). Other keywords (format, ...)
    are not checked: the providers that honour them already did."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self._root = schema

    def errors(self, value: Any) -> list[tuple[tuple[str | int, ...], str]]:
        found: list[tuple[tuple[str | int, ...], str]] = []
        self._visit(self._root, value, (), found)
        return found

    def _visit(
        self,
        schema: Any,
        value: Any,
        path: tuple[str | int, ...],
        found: list[tuple[tuple[str | int, ...], str]],
    ) -> None:
        if schema is True:
            return
        if schema is False:
            found.append((path, "no value is allowed here"))
            return
        reference = schema.get("$ref")
        if isinstance(reference, str):
            target = (self._root.get("$defs") or {}).get(reference.removeprefix("#/$defs/"))
            if target is None:
                found.append((path, f"$ref {reference!r} points at nothing"))
                return
            self._visit(target, value, path, found)
        kinds = schema.get("type")
        if kinds is not None:
            allowed = kinds if isinstance(kinds, list) else [kinds]
            if not any(_is_type(value, kind) for kind in allowed):
                found.append((path, f"{_short(value)} is not of type {' or '.join(allowed)}"))
                return
        if "const" in schema and value != schema["const"]:
            found.append((path, f"{_short(value)} is not {_short(schema['const'])}"))
        if "enum" in schema and value not in schema["enum"]:
            found.append((path, f"{_short(value)} is not one of {_short(schema['enum'])}"))
        for key in _SCHEMA_LISTS:
            alternatives = schema.get(key)
            if not alternatives:
                continue
            matching = sum(not self._fails(child, value, path) for child in alternatives)
            if key == "allOf":
                for child in alternatives:
                    self._visit(child, value, path, found)
            elif (key == "anyOf" and matching == 0) or (key == "oneOf" and matching != 1):
                found.append((path, f"{_short(value)} does not match {key}"))
        if isinstance(value, dict):
            self._object(schema, value, path, found)
        elif isinstance(value, list):
            self._array(schema, value, path, found)
        elif isinstance(value, str):
            self._string(schema, value, path, found)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            self._number(schema, value, path, found)

    def _fails(self, schema: Any, value: Any, path: tuple[str | int, ...]) -> bool:
        found: list[tuple[tuple[str | int, ...], str]] = []
        self._visit(schema, value, path, found)
        return bool(found)

    def _object(
        self,
        schema: dict[str, Any],
        value: dict[str, Any],
        path: tuple[str | int, ...],
        found: list[tuple[tuple[str | int, ...], str]],
    ) -> None:
        properties: dict[str, Any] = schema.get("properties") or {}
        for name in schema.get("required") or ():
            if name not in value:
                found.append(((*path, name), "is required"))
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                self._visit(properties[name], item, (*path, name), found)
            elif extra is False:
                found.append(((*path, name), "is not an allowed property"))
            elif isinstance(extra, dict):
                self._visit(extra, item, (*path, name), found)

    def _array(
        self,
        schema: dict[str, Any],
        value: list[Any],
        path: tuple[str | int, ...],
        found: list[tuple[tuple[str | int, ...], str]],
    ) -> None:
        if len(value) < schema.get("minItems", 0):
            found.append((path, f"has fewer than {schema['minItems']} items"))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            found.append((path, f"has more than {schema['maxItems']} items"))
        items = schema.get("items")
        if isinstance(items, dict | bool):
            for index, item in enumerate(value):
                self._visit(items, item, (*path, index), found)

    @staticmethod
    def _string(
        schema: dict[str, Any],
        value: str,
        path: tuple[str | int, ...],
        found: list[tuple[tuple[str | int, ...], str]],
    ) -> None:
        if len(value) < schema.get("minLength", 0):
            found.append((path, f"is shorter than {schema['minLength']} characters"))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            found.append((path, f"is longer than {schema['maxLength']} characters"))
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and re.search(pattern, value) is None:
            found.append((path, f"{_short(value)} does not match {pattern!r}"))

    @staticmethod
    def _number(
        schema: dict[str, Any],
        value: float,
        path: tuple[str | int, ...],
        found: list[tuple[tuple[str | int, ...], str]],
    ) -> None:
        for key, words in (
            ("minimum", "less than"),
            ("maximum", "more than"),
            ("exclusiveMinimum", "not more than"),
            ("exclusiveMaximum", "not less than"),
        ):
            bound = schema.get(key)
            if not isinstance(bound, int | float) or isinstance(bound, bool):
                continue
            broken = {
                "minimum": value < bound,
                "maximum": value > bound,
                "exclusiveMinimum": value <= bound,
                "exclusiveMaximum": value >= bound,
            }[key]
            if broken:
                found.append((path, f"{value} is {words} {bound}"))


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
