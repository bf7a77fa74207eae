"""Session state and its key scopes.

A state key's prefix decides who shares it and how long it lives:

=========  ===============================================  ==========================
prefix     shared by                                        persisted
=========  ===============================================  ==========================
``app:``   every user and session of the app                yes
``user:``  every session of one user in the app             yes
(none)     one session                                      yes
``temp:``  the current invocation only                      never
=========  ===============================================  ==========================

:class:`State` is the view agents and tools read and write: reads see pending changes first,
writes are recorded in a delta that travels on the next event's ``state_delta``, so every
change is in the event log.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from adk_mesh.credentials import REDACTED, Credential
from adk_mesh.errors import AdkJSONError

__all__ = [
    "APP_PREFIX",
    "TEMP_PREFIX",
    "USER_PREFIX",
    "ScopedDelta",
    "State",
    "StateScope",
    "scope_of",
    "split_by_scope",
]

APP_PREFIX = "app:"
USER_PREFIX = "user:"
TEMP_PREFIX = "temp:"


class StateScope(Enum):
    APP = "app"
    USER = "user"
    SESSION = "session"
    TEMP = "temp"


def scope_of(key: str) -> StateScope:
    """The scope a state key belongs to, by its prefix."""
    if key.startswith(APP_PREFIX):
        return StateScope.APP
    if key.startswith(USER_PREFIX):
        return StateScope.USER
    if key.startswith(TEMP_PREFIX):
        return StateScope.TEMP
    return StateScope.SESSION


@dataclass
class ScopedDelta:
    """A state delta split by scope. ``app`` and ``user`` keys have their prefix removed (that is
    how stores keep them); ``session`` and ``temp`` keep the full key."""

    app: dict[str, Any] = field(default_factory=dict)
    user: dict[str, Any] = field(default_factory=dict)
    session: dict[str, Any] = field(default_factory=dict)
    temp: dict[str, Any] = field(default_factory=dict)


def split_by_scope(delta: Mapping[str, Any]) -> ScopedDelta:
    scoped = ScopedDelta()
    for key, value in delta.items():
        scope = scope_of(key)
        if scope is StateScope.APP:
            scoped.app[key[len(APP_PREFIX) :]] = value
        elif scope is StateScope.USER:
            scoped.user[key[len(USER_PREFIX) :]] = value
        elif scope is StateScope.TEMP:
            scoped.temp[key] = value
        else:
            scoped.session[key] = value
    return scoped


def merge_scoped_state(
    app: Mapping[str, Any], user: Mapping[str, Any], session: Mapping[str, Any]
) -> dict[str, Any]:
    """The state a session shows: its own keys plus the prefixed app and user keys."""
    merged = dict(session)
    merged.update({APP_PREFIX + key: value for key, value in app.items()})
    merged.update({USER_PREFIX + key: value for key, value in user.items()})
    return merged


def _redacted_later(value: object) -> str:
    """``json.dumps``'s ``default``: a Credential a tool writes is stored as the marker (the
    tool's writes are redacted once it returns, see :mod:`adk_mesh.credentials`); nothing
    else that is not JSON is."""
    if isinstance(value, Credential):
        return REDACTED
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _check_value(key: object, value: Any) -> None:
    """Refuse a state write the session stores could not keep: a key that is not a string,
    or, for a persisted key (not ``temp:``), a key or value that is not JSON text (a set, an
    object, NaN, a lone surrogate, nesting deeper than JSON encoding goes). The stores keep
    what ``json.dumps`` writes (a tuple is kept as a list).

    Raises:
        AdkJSONError: naming the key and what is wrong with it.
    """
    if type(key) is not str:
        raise AdkJSONError(f"state keys are strings, not {type(key).__name__}")
    if key.startswith(TEMP_PREFIX):
        return
    if type(value) is float and not math.isfinite(value):
        problem = "Out of range float values are not JSON compliant"
    else:
        try:
            # As UTF-8, as events are stored and carried: a lone surrogate is no text there.
            json.dumps(
                {key: value}, allow_nan=False, ensure_ascii=False, default=_redacted_later
            ).encode()
            return
        except UnicodeEncodeError:
            problem = "a string in it holds a lone surrogate, which UTF-8 cannot hold"
        except (TypeError, ValueError) as error:
            problem = str(error)
        except RecursionError:
            problem = "the value nests too deep for JSON"
    raise AdkJSONError(f"state key {key!r} cannot be stored: it is not JSON ({problem})")


class State(MutableMapping[str, Any]):
    """State as agents and tools see it: the stored value overlaid by pending changes.

    Writing a key records it in :attr:`delta` (and shows it at once to later reads); the
    framework moves the delta onto the next event's ``state_delta``. A write the stores
    could not keep (see :func:`_check_value`) is refused where it is made, so that a
    tool reads the error (as its model does) rather than the turn failing when its event
    is stored.
    """

    __slots__ = ("_delta", "_value")

    def __init__(self, value: dict[str, Any], delta: dict[str, Any]) -> None:
        self._value = value
        self._delta = delta

    @property
    def delta(self) -> dict[str, Any]:
        return self._delta

    def __getitem__(self, key: str) -> Any:
        if key in self._delta:
            return self._delta[key]
        return self._value[key]

    def __setitem__(self, key: str, value: Any) -> None:
        _check_value(key, value)
        self._value[key] = value
        self._delta[key] = value

    def __delitem__(self, key: str) -> None:
        raise TypeError("state keys cannot be deleted; set the key to None instead")

    def __contains__(self, key: object) -> bool:
        return key in self._delta or key in self._value

    def __iter__(self) -> Iterator[str]:
        yield from self._value
        for key in self._delta:
            if key not in self._value:
                yield key

    def __len__(self) -> int:
        return len(self._value.keys() | self._delta.keys())

    def has_delta(self) -> bool:
        return bool(self._delta)

    def to_dict(self) -> dict[str, Any]:
        return {**self._value, **self._delta}
