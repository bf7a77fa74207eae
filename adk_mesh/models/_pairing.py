"""Every function call answered right after it: the repair a request's history gets.

OpenAI, Anthropic and Gemini refuse a history in which a model's tool call is not answered by
the message right after it, or in which a tool result answers no call just before it. A
history can hold such a call when the turn that made it ended before its result was stored —
the process was killed mid-call, or the Runner could not record the interruption — and a
long-running call waits for its result until the client sends it. So, before a request is
sent, :func:`pair_function_calls` gives every call its answer where the providers look for it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Sequence
from typing import Any

from adk_mesh.models._convert import MODEL_ROLES as _MODEL_ROLES
from adk_mesh.models._convert import is_model_role
from adk_mesh.types import Content, Part

__all__ = [
    "INTERRUPTED_CALL_RESPONSE",
    "PENDING_CALL_RESPONSE",
    "pair_function_calls",
]

#: What the model reads for a call whose result was never recorded.
INTERRUPTED_CALL_RESPONSE: dict[str, Any] = {
    "error": "this call did not finish: the turn that made it was interrupted before its "
    "result was recorded"
}
#: What the model reads for a long-running call whose result has not arrived yet.
PENDING_CALL_RESPONSE: dict[str, Any] = {
    "status": "pending",
    "note": "no result yet: this long-running call is still waiting for its result",
}


def pair_function_calls(
    contents: Sequence[Content], *, pending_ids: Collection[str] = ()
) -> list[Content]:
    """``contents`` with every function call answered by the content right after it.

    Calls and responses are matched by id (those without an id are left as they are: each
    provider pairs them by name):

    1. A model content's call that the content after it does not answer gets its response
       there: the one found later in the history, moved up, or else a synthetic one —
       :data:`PENDING_CALL_RESPONSE` for the ids in ``pending_ids`` (long-running calls
       still waiting for their result), :data:`INTERRUPTED_CALL_RESPONSE` otherwise. The
       responses join the next content when it already holds responses; else they come in a
       content of their own (role ``"tool"``) before it.
    2. A response that answers no call of the model content just before it (its call is not
       in the history, or was answered already) becomes a text part in its content, so the
       model still reads it and no provider refuses it.

    Contents that need no repair are returned as they are (the same objects).
    """
    contents = list(contents)
    return contents if _paired(contents) else _repaired(contents, pending_ids)


def _repaired(contents: list[Content], pending_ids: Collection[str]) -> list[Content]:
    """:func:`pair_function_calls` by its rules, whatever the contents."""
    later_responses: defaultdict[str, list[tuple[int, int]]] = defaultdict(list)
    for index, content in enumerate(contents):
        if is_model_role(content):
            continue
        for position, part in enumerate(content.parts):
            response = part.function_response
            if response is not None and response.id:
                later_responses[response.id].append((index, position))

    moved: set[tuple[int, int]] = set()
    answers: dict[int, list[Part]] = {}  # index of a model content -> responses it lacks
    for index, content in enumerate(contents):
        if not is_model_role(content):
            continue
        calls = [call for call in content.function_calls if call.id]
        if not calls:
            continue
        following = _responding(contents, index + 1)
        answered = (
            {r.id for r in following.function_responses if r.id} if following is not None else set()
        )
        for call in calls:
            assert call.id is not None
            if call.id in answered:
                continue
            answered.add(call.id)
            found = next(
                (
                    place
                    for place in later_responses.get(call.id, ())
                    if place[0] > index + 1 and place not in moved
                ),
                None,
            )
            if found is not None:
                moved.add(found)
                part = contents[found[0]].parts[found[1]]
            else:
                synthetic = (
                    PENDING_CALL_RESPONSE if call.id in pending_ids else INTERRUPTED_CALL_RESPONSE
                )
                part = Part.from_function_response(call.name, dict(synthetic), id=call.id)
            answers.setdefault(index, []).append(part)
    if not answers and not _has_orphans(contents):
        return contents

    repaired: list[Content] = []
    for index, content in enumerate(contents):
        if is_model_role(content):
            repaired.append(content)
            lacking = answers.get(index)
            if lacking and _responding(contents, index + 1) is None:
                repaired.append(Content(role="tool", parts=lacking))
            continue
        parts: list[Part] = []
        if index > 0 and _responding(contents, index) is content:
            parts.extend(answers.get(index - 1, ()))
        parts.extend(
            part for position, part in enumerate(content.parts) if (index, position) not in moved
        )
        previous = repaired[-1] if repaired else None
        parts = _without_orphans(parts, previous)
        if parts:
            repaired.append(
                content if parts == content.parts else Content(role=content.role, parts=parts)
            )
    return repaired


def _paired(contents: list[Content]) -> bool:
    """Whether every call with an id is answered by the content right after its own, and
    every response with an id answers a call of the model content just before it, once: the
    history a request usually has, which needs no repair. One pass, no allocation but a set
    per model content with calls; ``False`` is only "look closer"."""
    open_ids: set[str] = set()  # calls of the model content just before, not answered yet
    for content in contents:
        if content.role in _MODEL_ROLES:
            if open_ids:
                return False
            for part in content.parts:
                call = part.function_call
                if call is not None and call.id:
                    if call.id in open_ids:
                        return False  # the same id twice: let the full rules decide
                    open_ids.add(call.id)
            continue
        for part in content.parts:
            response = part.function_response
            if response is not None and response.id:
                if response.id not in open_ids:
                    return False
                open_ids.discard(response.id)
        if open_ids:
            return False
    return not open_ids


def _responding(contents: Sequence[Content], index: int) -> Content | None:
    """The content at ``index`` if it follows a model content and holds function responses
    (where a model's calls are answered), else ``None``."""
    if not 0 < index < len(contents):
        return None
    content = contents[index]
    if is_model_role(content) or not is_model_role(contents[index - 1]):
        return None
    return content if content.function_responses else None


def _has_orphans(contents: Sequence[Content]) -> bool:
    previous: Content | None = None
    for content in contents:
        if not is_model_role(content) and content.function_responses:
            if _without_orphans(content.parts, previous) != content.parts:
                return True
        previous = content
    return False


def _without_orphans(parts: list[Part], previous: Content | None) -> list[Part]:
    """``parts`` with every response that answers no call of ``previous`` (or answers one a
    second time) turned into text."""
    calls = (
        {call.id for call in previous.function_calls if call.id}
        if previous is not None and is_model_role(previous)
        else set()
    )
    kept: list[Part] = []
    for part in parts:
        response = part.function_response
        if response is None or not response.id:
            kept.append(part)
        elif response.id in calls:
            calls.discard(response.id)
            kept.append(part)
        else:
            result = json.dumps(response.response, ensure_ascii=False, default=str)
            kept.append(Part(text=f"`{response.name}` tool returned result: {result}"))
    return kept
