"""How an LlmAgent's conversation history is formed from session events.

The rules, in order:

1. Events are taken in session order (chronological).
2. Partial events, events without content, and events with no parts are left out.
3. Branches: an agent on no branch (the main line) sees every event; an agent on branch ``b``
   sees events with no branch, the same branch, or an ancestor branch (``b`` starts with
   ``event.branch + "."``). So parallel siblings do not see each other's events, while an agent
   that runs after a ParallelAgent sees what every branch did, as in ADK.
4. ``include_contents="none"``: only the agent's current turn is kept, from the latest event
   that starts it — a user's message or another agent's reply (:func:`current_turn`), as
   google-adk does.
5. The user's events and the agent's own events are kept as they are. Another agent's events
   are presented as context in a user message (``For context: [other] said: ...``), so the
   model never mistakes them for its own turns; another agent's events that hold nothing
   to tell (only reasoning, blank text or built-in tool parts) are left out. Events that
   skip summarization are kept, as google-adk keeps them: the flag ends its author's turn,
   it does not hide the result from the agents after it.
6. A long-running call answered later: when the newest event holds function responses to
   calls made before an intermediate answer, the events between that call and the response
   are dropped, so the call is directly followed by its final response, merged with the
   responses in between to the calls of the same event (a sibling answered in an earlier
   turn), a later response to a call in the place of an earlier one, as google-adk does —
   and with those to a call made before it that was still waiting (the pairing then moves
   them up to their call).
7. Tool confirmation (:mod:`adk_mesh._confirmation`): the ``adk_request_confirmation`` calls
   and the client's answers to them are left out (the model made none of them); a call that
   waits for a person's confirmation reads as pending, as a long-running call does.

A request's contents are these, with every function call paired with its response
(:func:`~adk_mesh.models._pairing.pair_function_calls`): :func:`request_contents`.
:class:`RequestHistory` builds the same contents from the events appended since its last
build of the session, so that a model call's cost does not grow with the history.
"""

from __future__ import annotations

import json
import operator
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from adk_mesh._confirmation import without_confirmations
from adk_mesh._memory import event_bytes
from adk_mesh.models._convert import is_model_role
from adk_mesh.models._pairing import pair_function_calls
from adk_mesh.types import Content, Event, Part

__all__ = [
    "RequestHistory",
    "build_contents",
    "current_turn",
    "is_visible_on_branch",
    "request_contents",
]

#: Sessions whose request history a :class:`RequestHistory` keeps, by default, and the memory
#: their events may hold (estimated: :func:`~adk_mesh._memory.event_bytes`).
DEFAULT_REQUEST_HISTORIES = 128
DEFAULT_REQUEST_HISTORY_BYTES = 32 * 1024 * 1024
#: Boundaries a build tries when it moves its prefix forward (see :class:`RequestHistory`).
_BOUNDARY_ATTEMPTS = 4
#: Kept events a build moves its prefix forward by, at least: a shorter rest is built again
#: next time (a few microseconds an event) rather than kept (~15 µs a move).
_MIN_STEP = 4


def is_visible_on_branch(event_branch: str, branch: str) -> bool:
    return (
        not branch
        or not event_branch
        or event_branch == branch
        or branch.startswith(event_branch + ".")
    )


def build_contents(
    events: Sequence[Event],
    *,
    agent_name: str,
    branch: str = "",
    invocation_id: str | None = None,
) -> list[Content]:
    """The contents sent to the model for ``agent_name`` (see the module docstring)."""
    kept = _kept_events(events, agent_name, branch, invocation_id)
    kept = _join_late_function_response(kept, agent_name)
    return [_content_for(event, agent_name) for event in kept]


def request_contents(
    events: Sequence[Event],
    *,
    agent_name: str,
    branch: str = "",
    invocation_id: str | None = None,
) -> list[Content]:
    """The contents of ``agent_name``'s model request: :func:`build_contents`, every call
    answered (long-running ones still waiting as pending)."""
    contents = build_contents(
        events, agent_name=agent_name, branch=branch, invocation_id=invocation_id
    )
    return pair_function_calls(contents, pending_ids=_long_running_ids(events))


@dataclass
class _Prefix:
    """A session's events up to a boundary, and the request contents they make."""

    events: list[Event]
    contents: list[Content]
    long_running_ids: set[str]
    #: ``(len(events), len(contents))`` at every boundary it moved through, oldest first.
    marks: list[tuple[int, int]]
    #: Running totals of the events' estimated memory: one more than the events, from the
    #: total before the first (not always 0: a prefix moved forward keeps its totals).
    weights: list[int]

    @property
    def weight(self) -> int:
        """Estimated memory of its events."""
        return self.weights[-1] - self.weights[0]


_NO_PREFIX = _Prefix(events=[], contents=[], long_running_ids=set(), marks=[], weights=[0])


class RequestHistory:
    """Builds :func:`request_contents` of a session from the events appended since the last
    build, keeping the contents of a prefix of the history for the sessions built last.

    Stored events are immutable and a history only grows, so the contents of its oldest
    part do not change, up to a *boundary* where they stand on their own: the prefix's
    contents need no repair (every call answered right after it, no stray response) and the
    first content after it holds no function response. Past such a boundary, the request's
    contents are the prefix's followed by those the rest makes alone. A build checks that the
    events it is given start with the prefix's, builds the rest, and moves the boundary to
    the last place in it that qualifies. When the rest cannot stand alone — a response
    answering a call made before the boundary (a long-running call answered in a later
    turn) — the whole history is built, as :func:`request_contents` does.

    The check compares identities first (values only where they differ): the store hands
    the same decoded objects to every turn
    (:meth:`~adk_mesh.sessions.SessionService.get_session_shared`), and a comparison of
    identities costs little. Only the events of the last turn differ: the turn
    held the objects its agents made, the next one the store's copies of them. Such events,
    at the end of the prefix, are matched by id (an id is one event of a session), and the
    contents made from them are made again from the store's copies, so that no request holds
    an object the Runner handed out.

    ``include_contents="none"`` requests (only the current invocation) are not kept: build
    them with :func:`request_contents`. Bounded: the ``max_sessions`` sessions built last,
    and ``max_bytes`` of memory their events hold, estimated
    (:func:`~adk_mesh._memory.event_bytes`: the events a prefix holds stay alive while it is
    kept, whatever the session store keeps); the least recently built go first. A session
    whose history alone weighs more is not kept (each request of it is built whole).
    """

    def __init__(
        self,
        max_sessions: int = DEFAULT_REQUEST_HISTORIES,
        max_bytes: int = DEFAULT_REQUEST_HISTORY_BYTES,
    ) -> None:
        self._max_sessions = max_sessions
        self._max_bytes = max_bytes
        self._prefixes: OrderedDict[tuple[str, ...], _Prefix] = OrderedDict()
        self._bytes = 0

    @property
    def held_bytes(self) -> int:
        """Estimated memory of the events the kept prefixes hold."""
        return self._bytes

    def _put(self, key: tuple[str, ...], prefix: _Prefix) -> None:
        """Keep ``prefix`` as the session's, the most recently used; drop the least recently
        used past the bounds."""
        self._drop(key)
        self._prefixes[key] = prefix
        self._bytes += prefix.weight
        while len(self._prefixes) > self._max_sessions or self._bytes > self._max_bytes:
            _, dropped = self._prefixes.popitem(last=False)
            self._bytes -= dropped.weight

    def _drop(self, key: tuple[str, ...]) -> None:
        dropped = self._prefixes.pop(key, None)
        if dropped is not None:
            self._bytes -= dropped.weight

    def contents(
        self,
        session_key: tuple[str, str, str],
        events: Sequence[Event],
        *,
        agent_name: str,
        branch: str = "",
    ) -> list[Content]:
        """:func:`request_contents` of ``events``, the history of the session
        ``session_key`` (app, user, session id), for ``agent_name`` on ``branch``."""
        key = (*session_key, agent_name, branch)
        held = self._prefixes.get(key)
        prefix = None
        if held is not None:
            prefix = _matching(held, events, agent_name, branch)
            if prefix is None:
                prefix = _moved_forward(held, events, agent_name, branch)
        if prefix is None:
            prefix = _NO_PREFIX
        elif prefix is held:
            self._prefixes.move_to_end(key)
        else:
            self._put(key, prefix)
        start = len(prefix.events)
        tail = events[start:]
        kept = _kept_events(tail, agent_name, branch, None)
        long_running_ids = prefix.long_running_ids | _long_running_ids(tail)
        joined = _join_late_function_response(kept, agent_name)
        tail_contents = [_content_for(event, agent_name) for event in joined]
        if prefix.events and (
            not kept or _answers_earlier_calls(kept) or _holds_function_responses(tail_contents[0])
        ):
            # The rest does not stand alone: build it all (and keep no prefix).
            self._drop(key)
            return request_contents(events, agent_name=agent_name, branch=branch)
        repaired = pair_function_calls(tail_contents, pending_ids=long_running_ids)
        # The contents of ``kept`` themselves, unless the join dropped some.
        mapped = tail_contents if joined is kept else None
        self._advance(key, prefix, events, start, kept, agent_name, mapped)
        return [*prefix.contents, *repaired]

    def _advance(
        self,
        key: tuple[str, ...],
        prefix: _Prefix,
        events: Sequence[Event],
        start: int,
        kept: list[Event],
        agent_name: str,
        tail_contents: list[Content] | None,
    ) -> None:
        """Move the session's boundary to the last kept event of the rest (``kept``, of
        ``events[start:]``) before which everything stands alone (see the class doc), if
        that moves it by :data:`_MIN_STEP` kept events at least."""
        if len(kept) <= _MIN_STEP:
            return
        mapped = (
            tail_contents
            if tail_contents is not None
            else [_content_for(event, agent_name) for event in kept]
        )
        attempts = 0
        for index in range(len(kept) - 1, _MIN_STEP - 1, -1):
            if _holds_function_responses(mapped[index]):
                continue
            attempts += 1
            before = mapped[:index]
            if _needs_no_repair(before):
                position = _index_of(events, kept[index], start)
                contents = [*prefix.contents, *before]
                weights = list(prefix.weights)
                total = weights[-1]
                for event in events[start:position]:
                    total += event_bytes(event)
                    weights.append(total)
                self._put(
                    key,
                    _Prefix(
                        events=list(events[:position]),
                        contents=contents,
                        long_running_ids=prefix.long_running_ids
                        | _long_running_ids(events[start:position]),
                        marks=[*prefix.marks, (position, len(contents))],
                        weights=weights,
                    ),
                )
                return
            if attempts >= _BOUNDARY_ATTEMPTS:
                break


def _matching(
    prefix: _Prefix, events: Sequence[Event], agent_name: str, branch: str
) -> _Prefix | None:
    """``prefix`` when ``events`` start with its events, rebased on ``events``' objects when
    only the newest differ in identity, not in id (see :class:`RequestHistory`); ``None``
    when they do not start with them."""
    held = prefix.events
    size = len(held)
    if len(events) < size:
        return None
    same = size
    while same > 0 and held[same - 1] is not events[same - 1]:
        if held[same - 1].id != events[same - 1].id:
            return None
        same -= 1
    # List equality tries identity first, element by element, in C: a few microseconds for
    # a thousand identical events (an event that is only equal is as good: same contents).
    start = events[:same]
    if (held if same == size else held[:same]) != (
        start if isinstance(start, list) else list(start)
    ):
        return None
    if same == size:
        return prefix
    # Make the contents from the newest mark before the first copy again, from the copies.
    marks = [mark for mark in prefix.marks if mark[0] <= same]
    position, count = marks[-1] if marks else (0, 0)
    kept = _kept_events(events[position:size], agent_name, branch, None)
    contents = [*prefix.contents[:count], *(_content_for(event, agent_name) for event in kept)]
    if len(contents) != len(prefix.contents):
        return None
    # Matched by id alone, they may be other events (a session made again under the same id,
    # its events reusing ids): the prefix stands only if they pair and wait as its own did.
    if not all(map(_pairs_alike, contents[count:], prefix.contents[count:])) or (
        _long_running_ids(held[same:size]) != _long_running_ids(events[same:size])
    ):
        return None
    weights = prefix.weights[: same + 1]
    total = weights[-1]
    for event in events[same:size]:
        total += event_bytes(event)
        weights.append(total)
    return _Prefix(
        events=list(events[:size]),
        contents=contents,
        long_running_ids=prefix.long_running_ids,
        marks=prefix.marks,
        weights=weights,
    )


def _moved_forward(
    prefix: _Prefix, events: Sequence[Event], agent_name: str, branch: str
) -> _Prefix | None:
    """``prefix`` rebased on ``events`` when they start inside it: a window of the session
    that moved forward (a delegated run's view steps; see
    :func:`~adk_mesh.codec.session_view_to_proto`). The prefix's contents are one per kept
    event and need no repair, so those of the events left out are dropped, when those stand
    alone (every call of theirs answered among them): the rest then needs no repair either.
    ``None`` otherwise. Costs what the events left out cost."""
    held = prefix.events
    if not events or not held:
        return None
    first = events[0]
    start = next((index for index, event in enumerate(held) if event is first), 0)
    if start == 0:
        return None
    count = len(_kept_events(held[:start], agent_name, branch, None))
    if count > len(prefix.contents):  # pragma: no cover - one content per kept event
        return None
    left_out = prefix.contents[:count]
    unanswered: dict[str, int] = {}
    for content in left_out:
        for part in content.parts:
            if part.function_call is not None:
                call_id = part.function_call.id or ""
                unanswered[call_id] = unanswered.get(call_id, 0) + 1
            elif part.function_response is not None:
                call_id = part.function_response.id or ""
                if unanswered.get(call_id):
                    unanswered[call_id] -= 1
    if any(unanswered.values()):
        return None
    long_running_ids = prefix.long_running_ids
    if _long_running_ids(held[:start]):
        long_running_ids = _long_running_ids(held[start:])
    moved = _Prefix(
        events=held[start:],
        contents=prefix.contents[count:],
        long_running_ids=long_running_ids,
        marks=[(p - start, c - count) for p, c in prefix.marks if p >= start],
        weights=prefix.weights[start:],
    )
    return _matching(moved, events, agent_name, branch)


def _index_of(events: Sequence[Event], event: Event, start: int) -> int:
    for index in range(start, len(events)):
        if events[index] is event:
            return index
    raise AssertionError("a kept event is one of the events")  # pragma: no cover


def _needs_no_repair(contents: list[Content]) -> bool:
    repaired = pair_function_calls(contents)
    return len(repaired) == len(contents) and all(map(operator.is_, repaired, contents))


def _pairs_alike(content: Content, other: Content) -> bool:
    """Whether :func:`pair_function_calls` reads the two contents alike: a model's or not,
    the same calls and responses by id."""
    return (
        is_model_role(content) == is_model_role(other)
        and [call.id for call in content.function_calls]
        == [call.id for call in other.function_calls]
        and [response.id for response in content.function_responses]
        == [response.id for response in other.function_responses]
    )


def _holds_function_responses(content: Content) -> bool:
    return any(part.function_response is not None for part in content.parts)


def _answers_earlier_calls(kept: list[Event]) -> bool:
    """Whether the last event answers a call that none of ``kept`` made (the rule-6 join
    would then reach before them)."""
    response_ids = {r.id for r in kept[-1].function_responses() if r.id}
    if not response_ids:
        return False
    return not any(
        response_ids & {c.id for c in event.function_calls() if c.id} for event in kept[:-1]
    )


def _long_running_ids(events: Sequence[Event]) -> set[str]:
    ids = {call_id for event in events for call_id in event.long_running_tool_ids}
    for event in events:
        if event.actions.requested_tool_confirmations:
            ids.update(event.actions.requested_tool_confirmations)
    return ids


def _kept_events(
    events: Sequence[Event], agent_name: str, branch: str, invocation_id: str | None
) -> list[Event]:
    """Rules 2-5's selection: the events whose content the agent's model reads."""
    return [event for event in events if _is_kept(event, agent_name, branch, invocation_id)]


def _is_kept(event: Event, agent_name: str, branch: str, invocation_id: str | None) -> bool:
    content = event.llm_response.content
    if content is None or not content.parts or event.llm_response.partial:
        return False
    content = without_confirmations(content)
    if content is None:
        return False
    if invocation_id is not None and event.invocation_id != invocation_id:
        return False
    if event.branch and not is_visible_on_branch(event.branch, branch):
        return False
    # ``actions.skip_summarization`` does not leave an event out: it ends the turn of the
    # agent whose tool set it (no model call to summarize the result); an agent after it
    # (a pipeline's next step, a transfer target) reads that result as context, as in
    # google-adk, whose contents building never looks at the flag.
    if event.author != "user" and event.author != agent_name and not _tells_something(content):
        # Only reasoning, blank text or built-in tool parts: told as context, it would be
        # a bare "For context:" message (google-adk leaves such out too).
        return False
    return True


def current_turn(events: Sequence[Event], *, agent_name: str, branch: str = "") -> Sequence[Event]:
    """Rule 4: the events from the latest one that starts ``agent_name``'s current turn — a
    message of the user's, or another agent's reply it is told — as google-adk's
    ``include_contents="none"`` takes them (in a loop, an agent sees the round's input, not
    every round before it). A user's event holding only answers to calls does not start a
    turn (the call it answers stays in view). No such event: no events."""
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if event.author == agent_name or not _is_kept(event, agent_name, branch, None):
            continue
        if event.author != "user" or any(
            part.function_response is None
            for part in event.llm_response.content.parts  # type: ignore[union-attr]
        ):
            return events[index:]
    return []


def _content_for(event: Event, agent_name: str) -> Content:
    content = event.llm_response.content
    assert content is not None
    content = without_confirmations(content)
    assert content is not None  # _kept_events left out the events with nothing else
    if event.author == "user" or event.author == agent_name:
        return content
    return _as_context(event.author, content)


def _join_late_function_response(events: list[Event], agent_name: str) -> list[Event]:
    if len(events) < 2:
        return events
    last = events[-1]
    response_ids = {r.id for r in last.function_responses() if r.id}
    if not response_ids:
        return events
    for index in range(len(events) - 2, -1, -1):
        call_ids = {c.id for c in events[index].function_calls() if c.id}
        if call_ids & response_ids:
            if index == len(events) - 2:
                return events
            # Responses in between to that event's calls (a sibling long-running or confirmed
            # call answered in an earlier turn) join the last one, as google-adk merges them:
            # dropped, the model would read that call as still pending and make it again.
            # So do those to a call made before it and not answered by then (a long-running
            # call of an earlier step whose result came in between): the pairing moves them
            # up to their call.
            call_ids |= _open_call_ids(events[:index], agent_name)
            answered = [
                event
                for event in events[index + 1 : -1]
                if any(response.id in call_ids for response in event.function_responses())
            ]
            if answered:
                last = _merged_responses([*answered, last])
            return [*events[: index + 1], last]
    return events


def _open_call_ids(events: list[Event], agent_name: str) -> set[str]:
    """Ids of the function calls in the contents of ``events`` (kept events) that no
    response after them among those contents answers."""
    open_ids: set[str] = set()
    for event in events:
        if event.author != "user" and event.author != agent_name:
            continue  # told as context: no call nor response is left in its content
        content = _content_for(event, agent_name)
        if is_model_role(content):
            open_ids.update(call.id for call in content.function_calls if call.id)
        else:
            open_ids.difference_update(r.id for r in content.function_responses if r.id)
    return open_ids


def _merged_responses(events: list[Event]) -> Event:
    """The last of ``events`` holding all their parts, in order, a later response to a call
    in the place of an earlier one (an interim result's)."""
    parts: list[Part] = []
    places: dict[str, int] = {}
    for event in events:
        content = event.llm_response.content
        assert content is not None  # kept events have content
        for part in content.parts:
            response = part.function_response
            if response is not None and response.id:
                place = places.get(response.id)
                if place is not None:
                    parts[place] = part
                    continue
                places[response.id] = len(parts)
            parts.append(part)
    last = events[-1]
    content = last.llm_response.content
    assert content is not None
    merged = Content(role=content.role, parts=parts)
    return last.model_copy(
        update={"llm_response": last.llm_response.model_copy(update={"content": merged})}
    )


def _tells_something(content: Content) -> bool:
    """Whether :func:`_as_context` tells anything of another agent's ``content``."""
    return any(
        not (part.thought or part.is_server_tool) and (part.text is None or part.text.strip())
        for part in content.parts
    )


def _as_context(author: str, content: Content) -> Content:
    parts: list[Part] = [Part(text="For context:")]
    for part in content.parts:
        if part.thought or part.is_server_tool:
            # Reasoning, and the built-in tool calls another agent's model ran, belong to that
            # model's turn: the answer they grounded is what this one is told.
            continue
        if part.text is not None:
            if part.text.strip():
                parts.append(Part(text=f"[{author}] said: {part.text}"))
        elif part.function_call is not None:
            call = part.function_call
            parts.append(
                Part(
                    text=f"[{author}] called tool `{call.name}` with parameters: "
                    f"{_compact(call.args)}"
                )
            )
        elif part.function_response is not None:
            reply = part.function_response
            parts.append(
                Part(
                    text=f"[{author}] `{reply.name}` tool returned result: "
                    f"{_compact(reply.response)}"
                )
            )
        else:
            parts.append(part)
    return Content(role="user", parts=parts)


def _compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
