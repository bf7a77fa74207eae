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

from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

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


class State(MutableMapping[str, Any]):
    """State as agents and tools see it: the stored value overlaid by pending changes.

    Writing a key records it in :attr:`delta` (and shows it at once to later reads); the
    framework moves the delta onto the next event's ``state_delta``.
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
