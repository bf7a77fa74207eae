"""Helpers shared by the session backends: argument checks, time, JSON state, event encoding.

Events are stored as their pydantic JSON (``Event.model_dump_json``). Measured on a typical
event (text + function call + state delta), a JSON write + read back takes ~16 us against
~57 us for ``to_proto().SerializeToString()`` + ``from_proto``, and JSON keeps integers of any
size exactly.
"""

from __future__ import annotations

import base64
import json
import math
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic_core import PydanticSerializationError

from adk_mesh.errors import (
    AdkJSONError,
    AlreadyExistsError,
    InvalidArgumentError,
    SessionConflictError,
)
from adk_mesh.ids import check_id, random_uuid, shown
from adk_mesh.state import TEMP_PREFIX, ScopedDelta, split_by_scope
from adk_mesh.types import Event, new_event_id

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MICROSECOND = timedelta(microseconds=1)
_IMMUTABLE_TYPES: frozenset[type] = frozenset({str, int, float, bool, type(None)})


def check_ids(app_name: str, user_id: str, session_id: str | None = None) -> None:
    """Refuse what is not an id (:func:`adk_mesh.ids.check_id`) with
    :class:`InvalidArgumentError`; ``session_id=None`` is not checked (a new UUID)."""
    check_id("app_name", app_name)
    check_id("user_id", user_id)
    if session_id is not None:
        check_id("session_id", session_id)


#: The longest event id a store keeps. Each backend must keep what another does, and
#: PostgreSQL's index on (app, user, session, event id) holds at most 2,704 bytes a row: 512
#: characters of 4 bytes beside three ids of 128 ASCII characters fit.
MAX_EVENT_ID_CHARS = 512


def check_event_id(event_id: str) -> None:
    """Refuse an event id that not every backend can keep (too long, or holding NUL, which
    PostgreSQL text cannot hold) with :class:`InvalidArgumentError`, before anything is
    written: one store must not fail, obscurely, where the others store the event."""
    if len(event_id) > MAX_EVENT_ID_CHARS:
        raise InvalidArgumentError(
            f"event id {shown(event_id)} is longer than {MAX_EVENT_ID_CHARS} characters; "
            "nothing was written"
        )
    if "\x00" in event_id:
        raise InvalidArgumentError(
            f"event id {shown(event_id)} holds a NUL character; nothing was written"
        )


def new_session_id(session_id: str | None) -> str:
    return session_id if session_id is not None else random_uuid()


def check_num_recent_events(num_recent_events: int | None) -> None:
    if num_recent_events is not None and num_recent_events < 0:
        raise InvalidArgumentError(f"num_recent_events must be 0 or more, not {num_recent_events}")


# --- pages of list_sessions_page ----------------------------------------------------------------

#: What a page token's position may hold: a number (a store's creation rank or time) or a
#: session id.
PagePart = int | float | str


#: The largest LIMIT SQLite and PostgreSQL take (a signed 64-bit integer): a larger page (or
#: count of recent events) holds every row anyway, so the SQL stores ask for this many rather
#: than fail.
MAX_SQL_LIMIT = 2**63 - 1


def check_page_size(page_size: int) -> None:
    if page_size < 1:
        raise InvalidArgumentError(f"page_size must be 1 or more, not {page_size}")


def encode_page_token(*position: PagePart) -> str:
    """An opaque page token naming ``position`` (the last session a page listed, as the
    store orders them): URL-safe base64 of its compact JSON, without padding."""
    data = json.dumps(list(position), separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def decode_page_token(token: str, kinds: tuple[type[PagePart], ...]) -> tuple[Any, ...]:
    """The position a token of :func:`encode_page_token` names, each part of the kind
    ``kinds`` says (a ``float`` part takes an integer too; a ``str`` part must be an id).

    Raises:
        InvalidArgumentError: the token is not one the store issues.
    """
    try:
        parts = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (ValueError, RecursionError):
        # RecursionError: a forged token of arrays nested past the decoder's depth.
        raise bad_page_token() from None
    if not isinstance(parts, list) or len(parts) != len(kinds):
        raise bad_page_token()
    position: list[Any] = []
    for part, kind in zip(parts, kinds, strict=True):
        if kind is str:
            if not isinstance(part, str):
                raise bad_page_token()
            try:
                # A session id: so nothing a database cannot compare (a NUL) reaches the query.
                check_id("session_id", part)
            except InvalidArgumentError:
                raise bad_page_token() from None
        elif kind is float:
            if isinstance(part, bool) or not isinstance(part, int | float):
                raise bad_page_token()
            try:
                part = float(part)
            except OverflowError:  # an integer no float holds: no store wrote it
                raise bad_page_token() from None
            if not math.isfinite(part):
                raise bad_page_token()
        elif isinstance(part, bool) or not isinstance(part, int):
            raise bad_page_token()
        position.append(part)
    return tuple(position)


def bad_page_token() -> InvalidArgumentError:
    return InvalidArgumentError(
        "page_token is not one this session store issued; send the next_page_token of an "
        "earlier page, or none to start from the first"
    )


def now() -> float:
    """Seconds since the epoch, as ``Session.last_update_time`` holds them."""
    return time.time()


def next_update_time(previous: float) -> float:
    """The ``last_update_time`` of a session's next write: now, but strictly later than the
    previous one even when the clock has not moved (or went back), so that it is a version:
    two states of one session never share it."""
    return max(now(), math.nextafter(previous, math.inf))


def check_fresh(app_name: str, user_id: str, session_id: str, held: float, stored: float) -> None:
    """Refuse an append through a session object loaded before the store's last write.

    Raises:
        SessionConflictError: ``held`` (the object's ``last_update_time``) is not ``stored``
            (the store's): another writer appended since the object was loaded.
    """
    if held != stored:
        raise SessionConflictError(
            f"session {session_id!r} of user {user_id!r} in app {app_name!r} changed since "
            "it was loaded (another turn wrote to it); nothing was written: load it again and "
            "retry",
            metadata={"session_id": session_id},
        )


def busy_session(app_name: str, user_id: str, session_id: str) -> SessionConflictError:
    """The error for a claim on a session that another claim holds (see
    :meth:`~adk_mesh.sessions.SessionService.claim_session`)."""
    return SessionConflictError(
        f"session {session_id!r} of user {user_id!r} in app {app_name!r} is busy with a "
        "turn in another process; nothing was written: retry when it is over",
        metadata={"session_id": session_id},
    )


def duplicate_event(session_id: str, event_id: str) -> AlreadyExistsError:
    """The error for an event whose id the session already holds."""
    return AlreadyExistsError(
        f"session {session_id!r} already holds event {event_id!r}; an event is stored once "
        "(nothing was written)",
        metadata={"session_id": session_id, "event_id": event_id},
    )


def to_micros(moment: datetime) -> int:
    """Exact microseconds since the epoch; a naive datetime is taken as UTC (as the codec does)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // _ONE_MICROSECOND


def json_copy(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of a state mapping through JSON, refusing what is not JSON.

    Going through JSON makes both backends keep exactly the same values (a tuple comes back as
    a list in either) and detaches the copy from the caller's objects.
    """
    return json.loads(dump_state(mapping))  # type: ignore[no-any-return]


def dump_state(mapping: Mapping[str, Any]) -> str:
    """A state mapping as compact JSON; :class:`AdkJSONError` for values that are not JSON."""
    try:
        return json.dumps(mapping, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise AdkJSONError(f"state values must be JSON: {error}") from error
    except RecursionError:
        # Nesting deeper than the encoder's recursion goes: a bad value, not a crash.
        raise AdkJSONError("state values must be JSON: a value nests too deep") from None


def copy_value(value: Any) -> Any:
    """A copy of a JSON state value, skipping the copy for immutable scalars (the common case)."""
    if type(value) in _IMMUTABLE_TYPES:
        return value
    return json.loads(json.dumps(value))


def copy_state(mapping: Mapping[str, Any]) -> dict[str, Any]:
    return {key: copy_value(value) for key, value in mapping.items()}


def scoped_delta(event: Event) -> ScopedDelta:
    """The event's state delta split by scope, persisted scopes detached from the caller
    through JSON (``temp`` keeps the caller's values: it only goes to the caller's session)."""
    delta = event.actions.state_delta
    if not delta:
        return ScopedDelta()
    scoped = split_by_scope(delta)
    return ScopedDelta(
        app=json_copy(scoped.app) if scoped.app else {},
        user=json_copy(scoped.user) if scoped.user else {},
        session=json_copy(scoped.session) if scoped.session else {},
        temp=scoped.temp,
    )


def event_to_store(event: Event, scoped: ScopedDelta) -> Event:
    """The event as it is stored: with an id (a fresh UUID when it has none) and without its
    ``temp:`` keys. The event itself when it needs neither change; the store keeps only its
    serialized form, so sharing the object is safe."""
    update: dict[str, Any] = {}
    if not event.id:
        update["id"] = new_event_id()
    if scoped.temp:
        kept = {
            key: value
            for key, value in event.actions.state_delta.items()
            if not key.startswith(TEMP_PREFIX)
        }
        update["actions"] = event.actions.model_copy(update={"state_delta": kept})
    return event.model_copy(update=update) if update else event


def encode_event(event: Event) -> str:
    """The event as the stores keep it: JSON without the fields that are ``None`` (each one's
    default, so :func:`decode_event` gives the same event back; ``None`` values inside a
    state delta, arguments or a response stay), ~40 % smaller than every field written out.
    Rows written with every field decode the same way."""
    try:
        return event.model_dump_json(exclude_none=True)
    except PydanticSerializationError as error:
        raise AdkJSONError(f"event {event.id} cannot be stored as JSON: {error}") from error


def decode_event(data: str | bytes) -> Event:
    return Event.model_validate_json(data)


def decodes_to_itself(event: Event) -> bool:
    """Whether :func:`decode_event` of the event's JSON gives the event back as it is, so that
    the object may stand for what is stored: its fields typed ``Any`` (state delta, call
    arguments, responses, payloads) hold only plain JSON, and its floats are finite. A tuple
    there comes back as a list, an integer key as a string, infinity as null, a set or a
    datetime (written as a list, a string) as something else again."""
    actions = event.actions
    # Most events hold none of these, or a few keys: looked at without building anything.
    values: list[Any] = []
    if actions.state_delta:
        values.append(actions.state_delta)
    if actions.requested_tool_confirmations:
        values.extend(
            confirmation.payload for confirmation in actions.requested_tool_confirmations.values()
        )
    content = event.llm_response.content
    if content is not None:
        for part in content.parts:
            function_call = part.function_call
            if function_call is not None and function_call.args:
                values.append(function_call.args)
            function_response = part.function_response
            if function_response is not None and function_response.response:
                values.append(function_response.response)
            if part.server_tool_call is not None:
                values.append(part.server_tool_call.args)
            elif part.server_tool_response is not None:
                values.append(part.server_tool_response.response)
    progress = event.tool_progress
    if progress is not None:
        values.append(progress.data)
        values.append(progress.fraction)
    return not values or _is_plain_json(values)


def _is_plain_json(value: Any) -> bool:
    """Whether JSON keeps ``value`` as it is: dicts with string keys, lists, strings, bools,
    integers, finite floats and None, nothing else (not even their subclasses). Iterative:
    depth costs no Python stack."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return False
            pending.extend(item.values())
        elif kind is list:
            pending.extend(item)
        elif kind is float:
            if not math.isfinite(item):
                return False
        elif kind not in _IMMUTABLE_TYPES:
            return False
    return True


def select_events(
    stamped: list[tuple[datetime, str]], num_recent_events: int | None, after: datetime | None
) -> list[tuple[datetime, str]]:
    """Apply ``after`` (strictly later timestamps), then keep the last ``num_recent_events``."""
    if after is not None:
        threshold = to_micros(after)
        stamped = [item for item in stamped if to_micros(item[0]) > threshold]
    if num_recent_events is not None:
        stamped = stamped[-num_recent_events:] if num_recent_events else []
    return stamped
