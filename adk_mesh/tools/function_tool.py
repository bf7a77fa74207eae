"""FunctionTool: a plain Python function as a tool.

The function's signature is the tool's contract. Its type hints become the JSON Schema the
model is shown, its docstring the description, and the same hints validate the model's
arguments before the function runs::

    def get_weather(city: str, days: int = 1) -> dict[str, Any]:
        \"\"\"Get the weather forecast for a city.

        Args:
            city: the city name, e.g. "Paris".
            days: how many days ahead.
        \"\"\"

    tool = FunctionTool(get_weather)

Validation uses pydantic's lax mode, on purpose: arguments arrive as decoded JSON, so values
JSON cannot carry natively (enums, dates, tuples, sets, nested models) must be converted from
their JSON forms, which strict mode refuses. Lax mode also accepts lossless conversions a
model commonly makes (``3.0`` or ``"3"`` for an ``int``, ``"true"`` for a ``bool``) and
refuses lossy or ambiguous ones (``3.5`` or ``"three"`` for an ``int``, a number for a
``str``, which could drop a leading zero of a zip code). A refused call raises
:class:`~adk_mesh.errors.ToolError` whose message names every bad field, the problem and the
value received, so the model can correct its call.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, Final, get_args, get_origin

import pydantic
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaWarningKind
from pydantic_core import to_jsonable_python
from typing_extensions import is_typeddict

from adk_mesh.contexts import ReadonlyContext, ToolContext
from adk_mesh.errors import ConfigError, ToolError
from adk_mesh.tools.base import BaseTool

__all__ = ["REJECTED_CALL_ERROR", "FunctionTool"]

#: What the model reads for a call that requires confirmation and a person rejected.
REJECTED_CALL_ERROR: Final = "This tool call was rejected by the person asked to confirm it."

#: A parameter with this name receives the ToolContext, whatever its annotation.
_CONTEXT_PARAMETER: Final = "tool_context"

# Names every major provider accepts for a function (Gemini also allows "." and ":").
_NAME_PATTERN: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,63}")

_MAX_REPORTED_ERRORS: Final = 10
_MAX_INPUT_REPR: Final = 80

_ARGS_SECTIONS: Final = frozenset(
    {"Args", "Arguments", "Parameters", "Params", "Keyword Args", "Keyword Arguments"}
)
_SECTION_HEADER: Final = re.compile(
    r"^\s*(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters"
    r"|Returns|Return|Yields|Yield|Raises|Examples?|Notes?|Attributes|Methods|Todo|See Also"
    r"|Warnings?|Warns|References):\s*$"
)
_SPHINX_FIELD: Final = re.compile(
    r"^\s*:(param|parameter|arg|argument|key|keyword|type|returns?|rtype|raises?)\b"
)
# ``:param name: desc`` or ``:param type name: desc`` (reST / Sphinx); the name is the word
# before the colon, whatever type words precede it.
_SPHINX_PARAM: Final = re.compile(
    r"^:(?:param|parameter|arg|argument|key|keyword)\s+(?:[^:]*\s)?\*{0,2}([A-Za-z_]\w*)\s*:"
    r"\s*(.*)$"
)
# ``name: desc`` or ``name (type): desc``; the lazy group lets types hold parentheses.
_ARG_ENTRY: Final = re.compile(r"^(\*{0,2}[A-Za-z_]\w*)\s*(?:\((.*?)\))?\s*:\s*(.*)$")

# JSON Schema keywords whose value is a schema, a list of schemas or a map of schemas. Every
# other keyword holds data (default, enum, const, examples) and is copied untouched, so a
# default that happens to contain a "title" or "$ref" key survives the clean-up.
_SUBSCHEMA_KEYS: Final = frozenset(
    {
        "items",
        "additionalProperties",
        "not",
        "contains",
        "propertyNames",
        "if",
        "then",
        "else",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
_SUBSCHEMA_LIST_KEYS: Final = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_SUBSCHEMA_MAP_KEYS: Final = frozenset({"properties", "patternProperties", "dependentSchemas"})
# "discriminator" is an OpenAPI keyword whose mapping points into $defs, which are inlined.
_DROPPED_KEYS: Final = frozenset({"$ref", "$defs", "title", "discriminator"})

_ARGUMENTS_CONFIG: Final = ConfigDict(extra="forbid")


class _NoDefault:
    def __repr__(self) -> str:
        return "<no default>"


_NO_DEFAULT: Final = _NoDefault()


class _SchemaGenerator(GenerateJsonSchema):
    """Pydantic's generator, minus the warning for defaults JSON cannot show.

    Such a default (a sentinel object, say) is simply left out of the schema: the parameter
    stays optional and the function applies its own default.
    """

    def emit_warning(self, kind: JsonSchemaWarningKind, detail: str) -> None:
        if kind != "non-serializable-default":
            super().emit_warning(kind, detail)


@dataclasses.dataclass(frozen=True, slots=True)
class _PositionalSlot:
    """A positional-only parameter: filled from an argument, the context, or its default."""

    #: ``None`` for the context parameter.
    field: str | None
    default: Any
    #: The function's default is a pydantic ``Field``: pass the model's resolved default.
    always_pass: bool = False


class FunctionTool(BaseTool):
    """A tool that calls a plain Python function, sync or async.

    Args:
        func: the function. Also a ``functools.partial``, a bound method or a callable object.
            Keyword arguments bound by a partial are hidden from the model and cannot be
            overridden by it (bind secrets this way). ``*args`` and ``**kwargs`` are refused:
            the model calls tools with named arguments described by a fixed schema.
        name: the name the model calls; defaults to the function's ``__name__``.
        description: what the model is told the tool does; defaults to the docstring's summary
            (the text before its ``Args:``/``Returns:``/... sections).
        is_long_running: the function starts an operation and returns at once; its final
            result arrives later (see :class:`BaseTool`).
        run_sync_in_thread: run a sync function in a worker thread (``asyncio.to_thread``)
            instead of on the event loop; use it for blocking I/O or long CPU work.
        timeout: seconds one call may run before the model is told it timed out (default:
            the invocation's ``tool_timeout``). An async function is cancelled; a sync one in
            a thread is abandoned (a thread cannot be stopped); a sync one on the event loop
            cannot be interrupted at all, so give blocking functions ``run_sync_in_thread``.
        require_confirmation: a person confirms each call before the function runs (human
            in the loop): ``True``, or a predicate (sync or async) over the call's arguments
            that says which calls need it, called with the function's arguments (converted,
            as the function receives them, defaults included) that its own parameters name,
            by name. A call that needs it runs the function only once a person approved it:
            the run pauses with an ``adk_request_confirmation`` request (see
            :meth:`~adk_mesh.contexts.ToolContext.request_confirmation`); approved, the
            function runs and reads the answer in ``tool_context.tool_confirmation``
            (its ``payload`` too); rejected, the model reads :data:`REJECTED_CALL_ERROR`.

    The parameter schema is generated from the type hints: ``str``, ``int``, ``float``,
    ``bool``, ``None``/``Optional``, ``list``, ``tuple``, ``set``, ``dict[str, T]``,
    ``Literal``, ``Enum``, ``datetime``/``date``, pydantic models, dataclasses, TypedDicts (from
    ``typing_extensions`` before Python 3.12) and ``Annotated[T, Field(...)]`` or
    ``Annotated[T, "description"]``. Unannotated parameters accept any JSON value; a ``None``
    default makes a parameter nullable (``limit: int = None`` is ``int | None``). Parameter
    descriptions come from ``Annotated`` or from the docstring's ``Args:`` section or reST
    ``:param name:`` fields. A parameter named ``tool_context``, or annotated as a context
    class, receives the :class:`~adk_mesh.contexts.ToolContext` and is not shown to the model.

    The function receives converted values (model instances, enum members, datetimes). Its
    result becomes the function response: a dict as is, a pydantic model or dataclass as its
    JSON object, anything else as ``{"result": value}``; ``None`` becomes ``{}``. A long-running
    tool's falsy result (``None``, ``{}``, ``""``, ``0``, ``[]``, ``False``) is "no answer yet", as
    in google-adk: the call stays open for the client to answer (return ``{"result": 0}`` to
    answer 0 at once). Values are made JSON-safe with
    pydantic (datetimes as ISO strings, bytes as base64, NaN and infinities as null).

    Raises:
        ConfigError: at construction, for a function that cannot be a tool: variadic
            parameters, a generator, type hints pydantic cannot turn into a schema, or an
            unusable name.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        is_long_running: bool = False,
        run_sync_in_thread: bool = False,
        timeout: float | None = None,
        require_confirmation: bool | Callable[..., Any] = False,
    ) -> None:
        if not callable(func):
            raise ConfigError(f"FunctionTool needs a callable, got {type(func).__name__}")
        target = _unwrap(func)
        tool_name = name if name is not None else _default_name(func)
        if not _NAME_PATTERN.fullmatch(tool_name):
            raise ConfigError(
                f"{tool_name!r} cannot be a tool name: use 1 to 64 letters, digits, '_', '-', "
                "'.' or ':', starting with a letter or '_' (pass name=... for a lambda)"
            )
        if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
            raise ConfigError(
                f"FunctionTool cannot wrap {tool_name}: it is a generator; a tool returns one "
                "result (report intermediate progress with tool_context.report_progress)"
            )
        is_async = inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(target)
        if run_sync_in_thread and is_async:
            raise ConfigError(
                f"run_sync_in_thread=True makes no sense for {tool_name}: it is async and runs "
                "on the event loop"
            )
        try:
            signature = inspect.signature(func)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"cannot read the signature of {tool_name}: {error}") from error

        doc = _docstring(func, target)
        summary, argument_docs = _parse_docstring(doc)
        super().__init__(
            tool_name,
            summary if description is None else description,
            is_long_running=is_long_running,
        )
        self.func = func
        self.run_sync_in_thread = run_sync_in_thread
        if timeout is not None and not timeout > 0:
            raise ConfigError(f"the timeout of {tool_name} must be positive seconds, not {timeout}")
        self.timeout = timeout
        self._is_async = is_async
        if not (isinstance(require_confirmation, bool) or callable(require_confirmation)):
            raise ConfigError(
                f"require_confirmation of {tool_name} is True, False or a predicate over its "
                f"arguments, not {type(require_confirmation).__name__}"
            )
        self.require_confirmation = require_confirmation

        hints, return_hint = _resolve_hints(tool_name, target, signature)
        hidden = _partial_keywords(func)
        fields: dict[str, Any] = {}
        # Parameter names travel as aliases of generated field names, so that any name
        # (``json``, ``_id``, ``model_config``) works without clashing with BaseModel.
        keyword_names: dict[str, str] = {}
        parameter_names: dict[str, str] = {}  # every field, positional-only ones too
        always_passed: list[str] = []
        context_names: list[str] = []
        positional: list[_PositionalSlot] = []
        for index, parameter in enumerate(signature.parameters.values()):
            _refuse_variadic(tool_name, parameter)
            hint = hints.get(parameter.name, Any)
            is_context = parameter.name == _CONTEXT_PARAMETER or _is_context_type(hint)
            is_positional = parameter.kind is inspect.Parameter.POSITIONAL_ONLY
            if is_context:
                if is_positional:
                    positional.append(_PositionalSlot(None, _NO_DEFAULT))
                else:
                    context_names.append(parameter.name)
                continue
            if parameter.name in hidden:
                continue
            field = f"arg_{index}"
            annotation, field_info, always_pass = _field_for(
                parameter, hint, argument_docs.get(parameter.name)
            )
            fields[field] = (annotation, field_info)
            parameter_names[field] = parameter.name
            if is_positional:
                default = parameter.default
                if default is inspect.Parameter.empty or always_pass:
                    default = _NO_DEFAULT
                positional.append(_PositionalSlot(field, default, always_pass))
            else:
                keyword_names[field] = parameter.name
                if always_pass:
                    always_passed.append(field)

        try:
            model = pydantic.create_model(
                f"{_model_name(tool_name)}Arguments", __config__=_ARGUMENTS_CONFIG, **fields
            )
            schema = model.model_json_schema(schema_generator=_SchemaGenerator)
        except (pydantic.PydanticUserError, pydantic.PydanticUndefinedAnnotation) as error:
            # PydanticSchemaGenerationError (an unsupported type) is a PydanticUserError.
            raise ConfigError(
                f"FunctionTool cannot build a schema for {tool_name}'s parameters: {error}"
            ) from error
        # The core validator itself: model_validate adds about 1 µs of Python per call.
        self._validate: Callable[[Any], BaseModel] = model.__pydantic_validator__.validate_python
        self._keyword_names = keyword_names
        self._parameter_names = parameter_names
        self._keywords_only = len(keyword_names) == len(fields)
        self._always_passed = tuple(always_passed)
        self._context_names = tuple(context_names)
        self._positional = tuple(positional)
        # Without a ToolContext a function has no way to report progress.
        self.sends_events = bool(context_names) or any(slot.field is None for slot in positional)
        self._argument_names = ", ".join(
            str(info.alias) for info in model.model_fields.values() if info.alias
        )
        self._parameters_schema = _parameters_schema(schema) if fields else None
        self._response_schema = _response_schema(return_hint)

    async def _needs_confirmation(self, values: dict[str, Any]) -> bool:
        """Whether this call waits for a person (``require_confirmation``).

        A predicate judges every argument the function gets: the ones the model left out hold
        their defaults (a model may well omit ``amount`` and pay its default), positional-only
        ones are passed by name.
        """
        predicate = self.require_confirmation
        if isinstance(predicate, bool):
            return predicate
        arguments = {self._parameter_names[field]: value for field, value in values.items()}
        result = predicate(**_accepted(predicate, arguments))
        if inspect.isawaitable(result):
            result = await result
        return bool(result)

    @property
    def parameters_schema(self) -> dict[str, Any] | None:
        """JSON Schema of the arguments (a fresh copy); ``None`` when the function takes none."""
        if self._parameters_schema is None:
            return None
        return _copy_schema(self._parameters_schema)

    @property
    def response_schema(self) -> dict[str, Any] | None:
        """JSON Schema of the result when the return annotation is a model or a TypedDict."""
        if self._response_schema is None:
            return None
        return _copy_schema(self._response_schema)

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any] | None:
        """Validate ``args``, call the function and make its result a JSON object.

        Raises:
            ToolError: the arguments do not fit the schema (the message says what to fix),
                or the result cannot be converted to JSON.
        """
        try:
            validated = self._validate(args)
        except ValidationError as error:
            raise ToolError(self._describe(error)) from None
        values = validated.__dict__
        given = validated.__pydantic_fields_set__
        names = self._keyword_names
        if self._keywords_only:
            kwargs = {names[field]: values[field] for field in given}
        else:
            kwargs = {names[field]: values[field] for field in given if field in names}
        for field in self._always_passed:
            kwargs[names[field]] = values[field]
        for name in self._context_names:
            kwargs[name] = ctx
        positional = self._positional_values(ctx, values, given) if self._positional else ()
        if self.require_confirmation is not False and await self._needs_confirmation(values):
            confirmation = ctx.tool_confirmation
            if confirmation is None:
                ctx.request_confirmation(hint=f"Approve or reject the call to {self.name}.")
                return {"status": "waiting for confirmation"}
            if not confirmation.confirmed:
                return {"error": REJECTED_CALL_ERROR}

        func = self.func
        if self._is_async:
            result = await func(*positional, **kwargs)
        else:
            if self.run_sync_in_thread:
                result = await asyncio.to_thread(func, *positional, **kwargs)
            else:
                result = func(*positional, **kwargs)
            if inspect.isawaitable(result):  # a sync wrapper that returns a coroutine
                result = await result
        secrets = ctx.invocation_context.known_secrets
        if secrets:
            # Before bytes become base64 text, where no search would find a value handed out
            # (the rest of the response is redacted with it again after, by execute_tool).
            result = secrets.redact(result)
        return self._response(result)

    def _positional_values(
        self, ctx: ToolContext, values: dict[str, Any], given: set[str]
    ) -> list[Any]:
        filled: list[Any] = []
        pending: list[Any] = []  # defaults kept only if a later positional value is given
        for slot in self._positional:
            if slot.field is None:
                value: Any = ctx
            elif slot.always_pass or slot.field in given:
                value = values[slot.field]
            elif slot.default is _NO_DEFAULT:  # pragma: no cover - validation requires it
                break
            else:
                pending.append(slot.default)
                continue
            filled.extend(pending)
            pending.clear()
            filled.append(value)
        return filled

    def _response(self, result: Any) -> dict[str, Any] | None:
        if self.is_long_running and _no_answer_yet(result):
            return None
        if result is None:
            return {}
        try:
            converted = to_jsonable_python(result, bytes_mode="base64", inf_nan_mode="null")
        except ValueError as error:
            # A PydanticSerializationError (a type without a JSON form) or the plain ValueError
            # pydantic raises for a result that contains itself.
            raise ToolError(
                f"{self.name} returned a value that cannot be converted to JSON: {error}"
            ) from None
        if isinstance(converted, dict):
            return converted
        return {"result": converted}

    def _describe(self, error: ValidationError) -> str:
        problems: list[str] = []
        errors = error.errors(include_url=False, include_context=False)
        for item in errors[:_MAX_REPORTED_ERRORS]:
            location = item["loc"]
            kind = item["type"]
            if not location:
                problems.append(
                    f"arguments must be a JSON object (got {_short_repr(item['input'])})"
                )
            elif kind == "extra_forbidden" and len(location) == 1:
                expected = (
                    f"valid arguments are: {self._argument_names}"
                    if self._argument_names
                    else "this tool takes no arguments"
                )
                problems.append(f"{_format_location(location)}: unknown argument; {expected}")
            elif kind == "missing":
                problems.append(f"{_format_location(location)}: {item['msg']}")
            else:
                problems.append(
                    f"{_format_location(location)}: {item['msg']} "
                    f"(got {_short_repr(item['input'])})"
                )
        if len(errors) > _MAX_REPORTED_ERRORS:
            problems.append(f"and {len(errors) - _MAX_REPORTED_ERRORS} more")
        return f"Invalid arguments for {self.name}: " + "; ".join(problems)


# --- introspection ---------------------------------------------------------------------------


def _no_answer_yet(result: Any) -> bool:
    """Whether a long-running function's result leaves its call open: a falsy one, as
    google-adk decides (its ``not function_response``). A value whose truth cannot be told
    (a numpy array's raises) is an answer: it is data, not the absence of it."""
    try:
        return not result
    except Exception:
        return False


def _unwrap(func: Callable[..., Any]) -> Callable[..., Any]:
    """The function whose hints, docstring and name describe ``func``."""
    while isinstance(func, functools.partial):
        func = func.func
    if inspect.isfunction(func) or inspect.ismethod(func) or inspect.isbuiltin(func):
        return func
    if inspect.isclass(func):
        return func.__init__
    call = getattr(type(func), "__call__", None)  # noqa: B004 - a callable object
    return call if call is not None else func


def _partial_keywords(func: Callable[..., Any]) -> frozenset[str]:
    names: set[str] = set()
    while isinstance(func, functools.partial):
        names.update(func.keywords)
        func = func.func
    return frozenset(names)


def _default_name(func: Callable[..., Any]) -> str:
    inner = func
    while isinstance(inner, functools.partial):
        inner = inner.func
    name = getattr(inner, "__name__", None)
    if isinstance(name, str):
        return name
    return type(inner).__name__


def _model_name(tool_name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", tool_name))


def _docstring(func: Callable[..., Any], target: Callable[..., Any]) -> str:
    for candidate in (target, func if not isinstance(func, functools.partial) else None):
        if candidate is None:
            continue
        doc = candidate.__doc__ if inspect.isroutine(candidate) else None
        if doc:
            return inspect.cleandoc(doc)
    if not inspect.isroutine(func) and not isinstance(func, functools.partial):
        doc = type(func).__doc__  # a callable object documented on its class
        if doc:
            return inspect.cleandoc(doc)
    return ""


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The summary and the parameter descriptions of a docstring: a Google-style ``Args:``
    section's, or reST ``:param name:`` fields'."""
    lines = doc.splitlines()
    summary_end = len(lines)
    for number, line in enumerate(lines):
        if _SECTION_HEADER.match(line) or _SPHINX_FIELD.match(line):
            summary_end = number
            break
    summary = inspect.cleandoc("\n".join(lines[:summary_end])).strip()

    descriptions: dict[str, str] = {}
    number = 0
    while number < len(lines):
        header = _SECTION_HEADER.match(lines[number])
        number += 1
        if header is None or header.group(1) not in _ARGS_SECTIONS:
            continue
        header_indent = _indent(lines[number - 1])
        entry_indent: int | None = None
        current: str | None = None
        while number < len(lines):
            line = lines[number]
            if not line.strip():
                number += 1
                continue
            indent = _indent(line)
            if indent <= header_indent:
                break
            if entry_indent is None:
                entry_indent = indent
            entry = _ARG_ENTRY.match(line.strip()) if indent <= entry_indent else None
            if entry is not None:
                current = entry.group(1).lstrip("*")
                descriptions[current] = entry.group(3).strip()
            elif current is not None:
                descriptions[current] = f"{descriptions[current]} {line.strip()}".strip()
            number += 1
    # The summary stops at the first Sphinx field too, so ``:param`` text must land here or
    # the model would never read it.
    _parse_sphinx_params(lines, descriptions)
    return summary, descriptions


def _parse_sphinx_params(lines: Sequence[str], descriptions: dict[str, str]) -> None:
    """Add the ``:param name: description`` fields of a reST docstring to ``descriptions``;
    a field continues on the lines indented deeper than it."""
    current: str | None = None
    field_indent = 0
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if current is not None and _indent(line) > field_indent:  # even ":class:`X` ..."
            descriptions[current] = f"{descriptions[current]} {stripped}".strip()
            continue
        field = _SPHINX_PARAM.match(stripped)
        current = field.group(1) if field is not None else None  # any other line ends it
        if field is not None:
            descriptions[field.group(1)] = field.group(2).strip()
            field_indent = _indent(line)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _resolve_hints(
    tool_name: str, target: Callable[..., Any], signature: inspect.Signature
) -> tuple[dict[str, Any], Any]:
    """Evaluated type hints of the parameters, and of the return value (``None`` if absent).

    ``typing.get_type_hints`` fails as a whole on the first name it cannot resolve; that
    happens legitimately when ``ToolContext`` is imported only under ``TYPE_CHECKING`` in a
    module using ``from __future__ import annotations``. Hints are then evaluated one by one
    so that only the injected context may stay unresolved.
    """
    try:
        hints = typing.get_type_hints(target, include_extras=True)
    except Exception:  # any failure: retry hint by hint to name the culprit
        hints = None
    if hints is not None:
        return hints, hints.get("return")

    globalns = getattr(inspect.unwrap(target), "__globals__", {})
    resolved: dict[str, Any] = {}
    for parameter in signature.parameters.values():
        if parameter.annotation is inspect.Parameter.empty:
            continue
        try:
            resolved[parameter.name] = _evaluate(parameter.annotation, globalns)
        except Exception as error:
            if parameter.name == _CONTEXT_PARAMETER:
                continue
            raise ConfigError(
                f"cannot resolve the type hint {parameter.annotation!r} of parameter "
                f"{parameter.name!r} of {tool_name}: {error}. Types in a tool's signature must "
                "be importable at runtime from its module (not only under TYPE_CHECKING, nor "
                "defined inside a function)"
            ) from error
    try:
        return_hint = _evaluate(signature.return_annotation, globalns)
    except Exception:  # the response schema is optional
        return_hint = None
    return resolved, return_hint


def _evaluate(annotation: Any, globalns: dict[str, Any]) -> Any:
    if annotation is inspect.Signature.empty:
        return None
    if isinstance(annotation, str):
        return eval(annotation, globalns)  # the same evaluation get_type_hints performs
    return annotation


def _strip_annotated(hint: Any) -> Any:
    while get_origin(hint) is Annotated:
        hint = get_args(hint)[0]
    return hint


def _is_context_type(hint: Any) -> bool:
    hint = _strip_annotated(hint)
    options = [arg for arg in get_args(hint) if arg is not type(None)]
    if options and len(options) == 1 and type(None) in get_args(hint):
        hint = _strip_annotated(options[0])  # Optional[ToolContext]
    return isinstance(hint, type) and issubclass(hint, ReadonlyContext)


def _admits_none(hint: Any) -> bool:
    """Whether ``hint`` already accepts ``None``: ``Any``, ``object``, an Optional or a union
    with ``None``, a ``Literal`` listing ``None``."""
    hint = _strip_annotated(hint)
    if hint is Any or hint is object or hint is None or hint is type(None):
        return True
    origin = get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return any(_admits_none(option) for option in get_args(hint))
    if origin is typing.Literal:
        return None in get_args(hint)
    return False


def _refuse_variadic(tool_name: str, parameter: inspect.Parameter) -> None:
    if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
        raise ConfigError(
            f"FunctionTool cannot wrap {tool_name}: *{parameter.name} has no name the model "
            f"could use. A model calls tools with named JSON arguments described by a fixed "
            f"schema; take a list instead (e.g. {parameter.name}: list[str])"
        )
    if parameter.kind is inspect.Parameter.VAR_KEYWORD:
        raise ConfigError(
            f"FunctionTool cannot wrap {tool_name}: **{parameter.name} accepts arguments no "
            "schema can describe. A model calls tools with named JSON arguments described by a "
            f"fixed schema; declare each parameter, or take a dict (e.g. {parameter.name}: "
            "dict[str, Any])"
        )


def _field_for(
    parameter: inspect.Parameter, hint: Any, doc_description: str | None
) -> tuple[Any, FieldInfo, bool]:
    """The (annotation, FieldInfo, always_pass) of one parameter in the validation model.

    The description comes from, by priority: a ``Field(description=...)`` in ``Annotated`` or
    as the default, a plain string in ``Annotated``, the docstring's ``Args:`` entry.
    """
    metadata: list[Any] = []
    description = doc_description
    if get_origin(hint) is Annotated:
        base, *extras = get_args(hint)
        strings = [extra for extra in extras if isinstance(extra, str)]
        if strings:
            description = strings[0]
        metadata = [extra for extra in extras if not isinstance(extra, str)]
        hint = base

    default = parameter.default
    always_pass = False
    if isinstance(default, FieldInfo):
        metadata.append(default)
        default = inspect.Parameter.empty
        always_pass = True
    field_infos = [item for item in metadata if isinstance(item, FieldInfo)]
    if default is inspect.Parameter.empty and any(not info.is_required() for info in field_infos):
        # ``times: Annotated[int, Field(default=2)]``: the function has no default of its
        # own, so the one the schema shows must be passed when the model leaves it out.
        always_pass = True
    if (default is None or any(info.default is None for info in field_infos)) and not (
        _admits_none(hint)
    ):
        # ``limit: int = None``, an implicit Optional: the schema must allow the null it shows
        # as the default, and a model that sends it must reach the function, whose own
        # default it is.
        hint = typing.Optional[hint]  # noqa: UP045 - takes any hint; `|` not every one
    if description:
        # Pydantic merges FieldInfos in order, later ones winning: the user's Fields override.
        metadata.insert(0, Field(description=description))
    annotation = Annotated[(hint, *metadata)] if metadata else hint
    if default is inspect.Parameter.empty:
        return annotation, Field(alias=parameter.name), always_pass
    return annotation, Field(default, alias=parameter.name), always_pass


# --- schemas ---------------------------------------------------------------------------------


def _parameters_schema(schema: dict[str, Any]) -> dict[str, Any]:
    cleaned = _model_friendly(schema)
    return {
        "type": "object",
        "properties": cleaned.get("properties", {}),
        "required": list(cleaned.get("required", [])),
    }


def _response_schema(hint: Any) -> dict[str, Any] | None:
    hint = _strip_annotated(hint)
    is_model = isinstance(hint, type) and issubclass(hint, BaseModel)
    if not (is_model or is_typeddict(hint)):
        return None
    try:
        schema = TypeAdapter(hint).json_schema(
            mode="serialization", schema_generator=_SchemaGenerator
        )
    except (pydantic.PydanticUserError, pydantic.PydanticUndefinedAnnotation):
        return None  # describing the result is optional; the tool still works
    return _model_friendly(schema)


def _model_friendly(schema: dict[str, Any]) -> dict[str, Any]:
    """Inline every ``$ref`` and drop pydantic's ``title`` keys.

    Providers such as Gemini reject ``$ref``. A recursive type cannot be inlined: where it
    refers to itself the schema says only "an object" (validation still checks it fully).
    """
    definitions = schema.get("$defs", {})
    result = _clean(schema, definitions, ())
    assert isinstance(result, dict)
    return result


def _clean(node: Any, definitions: Mapping[str, Any], resolving: tuple[str, ...]) -> Any:
    if not isinstance(node, dict):
        return node  # a boolean schema (additionalProperties: false)
    result: dict[str, Any] = {}
    reference = node.get("$ref")
    if isinstance(reference, str):
        name = reference.rsplit("/", 1)[-1]
        target = definitions.get(name, {})
        if name in resolving:
            result["type"] = target.get("type", "object")
            if "description" in target:
                result["description"] = target["description"]
        else:
            result.update(_clean(target, definitions, (*resolving, name)))
    for key, value in node.items():
        if key in _DROPPED_KEYS:
            continue
        if key in _SUBSCHEMA_KEYS:
            result[key] = _clean(value, definitions, resolving)
        elif key in _SUBSCHEMA_LIST_KEYS and isinstance(value, list):
            result[key] = [_clean(item, definitions, resolving) for item in value]
        elif key in _SUBSCHEMA_MAP_KEYS and isinstance(value, dict):
            result[key] = {
                name: _clean(item, definitions, resolving) for name, item in value.items()
            }
        else:
            result[key] = value
    all_of = result.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict):
        # Older pydantic wraps a $ref with siblings as allOf: [{$ref}]; siblings win.
        del result["allOf"]
        result = {**all_of[0], **result}
    return result


def _copy_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A deep copy, so a caller adapting a schema for its provider cannot corrupt ours."""
    return {key: _copy_json(value) for key, value in schema.items()}


def _copy_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _copy_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy_json(item) for item in value]
    return value


# --- error messages --------------------------------------------------------------------------


def _format_location(location: Sequence[int | str]) -> str:
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def _short_repr(value: Any) -> str:
    text = repr(value)
    if len(text) > _MAX_INPUT_REPR:
        text = text[: _MAX_INPUT_REPR - 3] + "..."
    return text


def _accepted(predicate: Callable[..., Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """The ``arguments`` that ``predicate`` takes by name: all of them when it has
    ``**kwargs``."""
    try:
        parameters = inspect.signature(predicate).parameters.values()
    except (TypeError, ValueError):
        return arguments
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return arguments
    names = {
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    return {name: value for name, value in arguments.items() if name in names}
