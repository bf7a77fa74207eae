"""What an event held in memory costs: the estimate the caches that keep events are bounded by.

A cache of events bounded by a count of events or by encoded bytes holds far more than its
bound says: a short event encodes to ~100 bytes and takes ~4 KiB as an
:class:`~adk_mesh.types.Event` (its pydantic models, their dicts, id and timestamp), and a
JSON value (a function call's arguments, a tool's response, a state delta) takes ~6 bytes of
memory for each byte of its JSON text. So each cache of events weighs an entry by
:func:`event_bytes`, checked against ``tracemalloc`` in
``tests/unit/test_codec_cache_memory.py`` (never below what it measures).
"""

from __future__ import annotations

import sys
from typing import Any

from adk_mesh.types import Event

__all__ = ["EVENT_OBJECT_BYTES", "MESSAGE_OBJECT_BYTES", "event_bytes", "value_bytes"]

#: An event's objects, its text, data and JSON values left out (measured: 3.9-4.3 KiB; the
#: rest covers a cache's own entry for it).
EVENT_OBJECT_BYTES = 4800
#: A protobuf message of an event (upb), its encoded bytes left out.
MESSAGE_OBJECT_BYTES = 1536

_sizeof = sys.getsizeof


def value_bytes(value: Any) -> int:
    """The memory a JSON value (dicts, lists, strings, numbers) takes, each object counted
    (an object met twice counts twice: an estimate that errs on the large side)."""
    total = 0
    stack = [value]
    pop, push = stack.pop, stack.append
    while stack:
        item = pop()
        total += _sizeof(item)
        if isinstance(item, dict):
            for key, nested in item.items():
                total += _sizeof(key)
                push(nested)
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


def event_bytes(event: Event) -> int:
    """Estimated memory of ``event``: its objects, its text and data, its JSON values."""
    total = EVENT_OBJECT_BYTES
    content = event.llm_response.content
    if content is not None:
        for part in content.parts:
            if part.thought_signature is not None:
                # Gemini's, on text and call parts alike: kilobytes each.
                total += len(part.thought_signature)
            if part.text is not None:
                # Its memory, not its length: Python keeps 1, 2 or 4 bytes per character
                # (CJK text takes 2, emoji 4).
                total += _sizeof(part.text)
            elif part.inline_data is not None:
                total += len(part.inline_data.data)
            elif part.function_call is not None:
                total += value_bytes(part.function_call.args)
            elif part.function_response is not None:
                total += value_bytes(part.function_response.response)
            elif part.server_tool_call is not None:
                total += value_bytes(part.server_tool_call.args)
            elif part.server_tool_response is not None:
                total += value_bytes(part.server_tool_response.response)
    delta = event.actions.state_delta
    if delta:
        total += value_bytes(delta)
    return total
