"""How an LlmAgent's conversation history is formed from session events.

The rules, in order:

1. Events are taken in session order (chronological).
2. Partial events, events without content, and events with no parts are left out.
3. Branches: an agent on no branch (the main line) sees every event; an agent on branch ``b``
   sees events with no branch, the same branch, or an ancestor branch (``b`` starts with
   ``event.branch + "."``). So parallel siblings do not see each other's events, while an agent
   that runs after a ParallelAgent sees what every branch did, as in ADK.
4. ``include_contents="none"``: only the events of the current invocation are kept.
5. The user's events and the agent's own events are kept as they are. Another agent's events
   are presented as context in a user message (``For context: [other] said: ...``), so the
   model never mistakes them for its own turns; another agent's events that skip
   summarization are left out.
6. A long-running call answered later: when the newest event holds function responses to
   calls made before an intermediate answer, the events between that call and the response
   are dropped, so the call is directly followed by its final response.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from adk_mesh.types import Content, Event, Part

__all__ = ["build_contents", "is_visible_on_branch"]


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
    kept: list[Event] = []
    for event in events:
        content = event.llm_response.content
        if content is None or not content.parts or event.llm_response.partial:
            continue
        if invocation_id is not None and event.invocation_id != invocation_id:
            continue
        if event.branch and not is_visible_on_branch(event.branch, branch):
            continue
        if (
            event.author != "user"
            and event.author != agent_name
            and event.actions.skip_summarization
        ):
            continue
        kept.append(event)
    kept = _join_late_function_response(kept)
    contents: list[Content] = []
    for event in kept:
        content = event.llm_response.content
        assert content is not None
        if event.author == "user" or event.author == agent_name:
            contents.append(content)
        else:
            contents.append(_as_context(event.author, content))
    return contents


def _join_late_function_response(events: list[Event]) -> list[Event]:
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
            return [*events[: index + 1], last]
    return events


def _as_context(author: str, content: Content) -> Content:
    parts: list[Part] = [Part(text="For context:")]
    for part in content.parts:
        if part.thought:
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
