"""The Credential value: a secret that never shows itself.

A credential travels through code that prints, logs, serialises and traces whatever it is
handed (a tool's response, a state value, an exception message, a span attribute). So the
value itself refuses every way out but one: ``repr``/``str``/``format`` show a redacted
marker, a pydantic dump (of a model field, or of a value inside a ``dict[str, Any]`` such as
an event's function response or state delta) and ``pydantic_core.to_json`` write the marker,
``json.dumps`` refuses it (and writes the marker with ``default=str``), pickling is refused.
Only :meth:`Credential.reveal` gives the value, at the place that uses it.
"""

from __future__ import annotations

import hmac
from typing import Any, NoReturn, final

from pydantic_core import SchemaSerializer, core_schema

__all__ = ["REDACTED", "Credential"]

#: What a credential (or a value that held one) reads as wherever it would have shown.
REDACTED = "[redacted]"


def _redacted(_: object) -> str:
    return REDACTED


_SERIALIZATION = core_schema.plain_serializer_function_ser_schema(_redacted)


@final
class Credential:
    """A named secret (an API key, a token, a password) that a tool asks for by name.

    Args:
        name: the name it was asked for (not secret; shown in ``repr``).
        value: the secret. Only :meth:`reveal` returns it.

    Two credentials are equal when their names and values are (compared in constant time).
    A credential is not hashable (a hash would be computed from the value) and cannot be
    pickled; ``copy``/``deepcopy`` return it unchanged (it is immutable).
    """

    __slots__ = ("_name", "_value")
    _name: str
    _value: str

    #: How pydantic writes one found inside ``Any`` (an event's response, a state delta).
    __pydantic_serializer__ = SchemaSerializer(core_schema.any_schema(serialization=_SERIALIZATION))

    def __init__(self, name: str, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"a credential's value is text, not {type(value).__name__}")
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_value", value)

    @property
    def name(self) -> str:
        return self._name

    def reveal(self) -> str:
        """The secret itself: pass it straight to what needs it (a header, a client), never
        to a response, a state value, a log line or an exception message."""
        return self._value

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError("a Credential is immutable")

    def __repr__(self) -> str:
        return f"Credential(name={self._name!r}, value={REDACTED!r})"

    def __str__(self) -> str:
        return REDACTED

    def __format__(self, spec: str) -> str:
        return format(REDACTED, spec)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Credential):
            return NotImplemented
        same_value = hmac.compare_digest(self._value.encode(), other._value.encode())
        return same_value and self._name == other._name

    __hash__ = None  # type: ignore[assignment]

    def __copy__(self) -> Credential:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Credential:
        return self

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        raise TypeError("a Credential cannot be pickled: it would write the secret")

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        """As a pydantic field: accepted as a Credential, dumped as the redacted marker."""
        return core_schema.is_instance_schema(cls, serialization=_SERIALIZATION)
