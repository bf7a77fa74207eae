"""Tool confirmation (human in the loop), in google-adk's shape.

A tool call that asks a person to confirm it (``ToolContext.request_confirmation``, or a
FunctionTool's ``require_confirmation``) is left unanswered, and its agent emits one event
whose content holds, for each such call, a function call named
:data:`REQUEST_CONFIRMATION_FUNCTION_CALL_NAME`::

    {"name": "adk_request_confirmation", "id": "adk-...",
     "args": {"originalFunctionCall": {"id": ..., "name": ..., "args": {...}},
              "toolConfirmation": {"hint": ..., "confirmed": false, "payload": ...}}}

listed in ``long_running_tool_ids``, with ``actions.requested_tool_confirmations`` naming the
original calls; the invocation then ends. The client answers in a later turn with a message
holding a function response to that call (same name and id) whose response is a
ToolConfirmation — ``{"confirmed": true, "payload": ...}`` — or google-adk's wrapper
``{"response": "<that object as JSON text>"}``. The Runner checks the answer before it stores
anything (:func:`check_confirmation_answers`); the agent that asked then runs the original
call again with the answer in ``tool_context.tool_confirmation``
(:func:`answered_confirmations`). These calls and answers are the runtime's and the client's,
not the model's: a model request never holds them (:func:`without_confirmations`), and the
original call reads as pending while it waits.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from pydantic import ValidationError

from adk_mesh.errors import InvalidArgumentError
from adk_mesh.ids import shown
from adk_mesh.types import (
    Content,
    Event,
    EventActions,
    FunctionCall,
    FunctionResponse,
    LlmResponse,
    Part,
    ToolConfirmation,
    new_function_call_id,
)

__all__ = [
    "REQUEST_CONFIRMATION_FUNCTION_CALL_NAME",
    "answered_confirmations",
    "awaiting_confirmation_ids",
    "check_confirmation_answers",
    "confirmation_request_event",
    "parse_confirmation",
    "runtime_claim",
    "without_confirmations",
]

#: The name of the function call that asks the client to confirm a tool call (google-adk's).
REQUEST_CONFIRMATION_FUNCTION_CALL_NAME: Final = "adk_request_confirmation"

_ANSWER_KEYS: Final = frozenset({"hint", "confirmed", "payload"})
#: The calls a runtime writes to ask a person for an answer: a tool call's confirmation (this
#: one's and google-adk's), a credential and an input (google-adk's).
_RUNTIME_CALL_NAMES: Final = frozenset(
    {REQUEST_CONFIRMATION_FUNCTION_CALL_NAME, "adk_request_credential", "adk_request_input"}
)


def runtime_claim(event: Event) -> str | None:
    """What of ``event`` only a runtime writes — long-running call ids, requested tool
    confirmations, a call (or its answer) asking a person for one — named for an error; None
    when it claims none of it.

    A client that seeds a session's history must not claim them (google-adk's api_server
    refuses them too, google/adk-python#5290): a seeded confirmation request, answered by the
    same client, would run a tool call no model made, with the client's arguments."""
    if event.long_running_tool_ids:
        return "long-running call ids"
    if event.actions.requested_tool_confirmations:
        return "requested tool confirmations"
    for call in event.function_calls():
        if call.name in _RUNTIME_CALL_NAMES:
            return f"the runtime's call {call.name!r}"
    for response in event.function_responses():
        if response.name in _RUNTIME_CALL_NAMES:
            return f"an answer to the runtime's call {response.name!r}"
    return None


def confirmation_request_event(
    *,
    author: str,
    invocation_id: str,
    branch: str,
    calls: Sequence[FunctionCall],
    requested: Mapping[str, ToolConfirmation],
) -> Event:
    """The event asking the client to confirm the ``requested`` calls (by id) of ``calls``."""
    parts: list[Part] = []
    ids: list[str] = []
    asked: dict[str, ToolConfirmation] = {}
    for call in calls:
        confirmation = requested.get(call.id) if call.id else None
        if confirmation is None or call.id is None:
            continue
        request_id = new_function_call_id()
        tool_confirmation: dict[str, Any] = {
            "hint": confirmation.hint,
            "confirmed": False,
        }
        if confirmation.payload is not None:
            tool_confirmation["payload"] = confirmation.payload
        parts.append(
            Part.from_function_call(
                REQUEST_CONFIRMATION_FUNCTION_CALL_NAME,
                {
                    "originalFunctionCall": {"id": call.id, "name": call.name, "args": call.args},
                    "toolConfirmation": tool_confirmation,
                },
                id=request_id,
            )
        )
        ids.append(request_id)
        asked[call.id] = confirmation
    return Event(
        author=author,
        invocation_id=invocation_id,
        branch=branch,
        llm_response=LlmResponse(content=Content(role="model", parts=parts)),
        actions=EventActions(requested_tool_confirmations=asked),
        long_running_tool_ids=ids,
    )


def parse_confirmation(response: Mapping[str, Any]) -> ToolConfirmation:
    """The ToolConfirmation a client's function response holds: ``{"confirmed": bool,
    "payload": any, "hint": str}`` (each optional), or google-adk's ``{"response": "<that
    object as JSON text>"}``.

    Raises:
        InvalidArgumentError: anything else (``confirmed`` that is not a boolean, an unknown
            member, a wrapper that is not a JSON object).
    """
    body: Any = response
    if len(response) == 1 and isinstance(response.get("response"), str):
        try:
            body = json.loads(response["response"])
        except ValueError:
            raise InvalidArgumentError(
                "the confirmation's 'response' is not JSON; send {\"confirmed\": true|false, "
                '"payload": ...}'
            ) from None
    if not isinstance(body, Mapping):
        raise InvalidArgumentError('a confirmation is a JSON object: {"confirmed": true|false}')
    unknown = sorted(set(body) - _ANSWER_KEYS)
    if unknown:
        raise InvalidArgumentError(
            f"a confirmation holds 'confirmed', 'payload' and 'hint', not {', '.join(unknown)}"
        )
    if "confirmed" in body and not isinstance(body["confirmed"], bool):
        raise InvalidArgumentError(
            f"a confirmation's 'confirmed' is true or false, not {shown(repr(body['confirmed']))}"
        )
    if "hint" in body and not isinstance(body["hint"], str):
        raise InvalidArgumentError("a confirmation's 'hint' is a string")
    try:
        return ToolConfirmation.model_validate(dict(body))
    except ValidationError as error:  # pragma: no cover - the checks above cover the fields
        raise InvalidArgumentError(f"the confirmation is not valid: {error}") from None


def _confirmation_answers(message: Content) -> list[FunctionResponse]:
    return [
        response
        for response in message.function_responses
        if response.name == REQUEST_CONFIRMATION_FUNCTION_CALL_NAME
    ]


def check_confirmation_answers(events: Sequence[Event], message: Content) -> None:
    """Check, before anything is stored, that each confirmation answer in ``message`` answers
    a confirmation request of the session (``events``) not answered yet, with a valid
    ToolConfirmation.

    Raises:
        InvalidArgumentError: an answer without an id, one to no open request, a second answer
            to one request, or one that is not a ToolConfirmation.
    """
    answers = _confirmation_answers(message)
    if not answers:
        return
    wanted: dict[str, FunctionResponse] = {}
    for answer in answers:
        if not answer.id:
            raise InvalidArgumentError(
                "a confirmation answer needs the id of the adk_request_confirmation call it answers"
            )
        if answer.id in wanted:
            raise InvalidArgumentError(f"confirmation {shown(answer.id)} is answered twice")
        parse_confirmation(answer.response)
        wanted[answer.id] = answer
    found: set[str] = set()
    for event in events:
        for call in event.function_calls():
            if call.id in wanted and call.name == REQUEST_CONFIRMATION_FUNCTION_CALL_NAME:
                found.add(call.id)
        for response in event.function_responses():
            if response.id in wanted and response.name == REQUEST_CONFIRMATION_FUNCTION_CALL_NAME:
                raise InvalidArgumentError(
                    f"confirmation {shown(response.id)} was answered already"
                )
    missing = [call_id for call_id in wanted if call_id not in found]
    if missing:
        raise InvalidArgumentError(
            f"no confirmation request {shown(missing[0])} in this session; answer the id of an "
            "adk_request_confirmation call"
        )


def answered_confirmations(
    events: Sequence[Event], message: Content | None, agent_name: str
) -> list[tuple[FunctionCall, ToolConfirmation]]:
    """The calls of ``agent_name`` that the user's ``message`` confirms or rejects, with the
    answers, in the order of the message (answers to other agents' requests are left out)."""
    if message is None:
        return []
    answers = _confirmation_answers(message)
    if not answers:
        return []
    by_id = {answer.id: answer for answer in answers if answer.id}
    originals: dict[str, FunctionCall] = {}
    # Original calls already answered since (the agent ran them in this turn already, before
    # a transfer brought the turn back to it) are not run twice.
    answered: set[str | None] = set()
    for event in reversed(events):
        if event.author != agent_name:
            continue
        answered.update(response.id for response in event.function_responses())
        for call in event.function_calls():
            if call.id in by_id and call.name == REQUEST_CONFIRMATION_FUNCTION_CALL_NAME:
                original = _original_call(call)
                if original is not None and original.id not in answered:
                    originals[call.id] = original
        if len(originals) == len(by_id):
            break
    return [
        (originals[answer_id], parse_confirmation(answer.response))
        for answer_id, answer in by_id.items()
        if answer_id in originals
    ]


def _original_call(request: FunctionCall) -> FunctionCall | None:
    original = request.args.get("originalFunctionCall")
    if not isinstance(original, Mapping):
        return None
    name, args, call_id = original.get("name"), original.get("args", {}), original.get("id")
    if not isinstance(name, str) or not isinstance(args, dict) or not isinstance(call_id, str):
        return None
    return FunctionCall(name=name, args=args, id=call_id)


def awaiting_confirmation_ids(event: Event) -> Sequence[str]:
    """The calls ``event`` asks the client to confirm: they wait, as long-running calls do."""
    return tuple(event.actions.requested_tool_confirmations)


def _is_confirmation_part(part: Part) -> bool:
    call = part.function_call
    if call is not None:
        return call.name == REQUEST_CONFIRMATION_FUNCTION_CALL_NAME
    response = part.function_response
    return response is not None and response.name == REQUEST_CONFIRMATION_FUNCTION_CALL_NAME


def without_confirmations(content: Content) -> Content | None:
    """``content`` without the confirmation requests and answers (the model made none of
    them); the same object when it holds none, ``None`` when nothing else is left."""
    parts = content.parts
    for part in parts:  # (a loop, not any() over a generator: this runs for every event)
        if _is_confirmation_part(part):
            break
    else:
        return content
    kept = [part for part in parts if not _is_confirmation_part(part)]
    return Content(role=content.role, parts=kept) if kept else None
