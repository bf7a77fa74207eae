"""Content and Part to A2A messages and parts, and back: the one place the two meet.

Used by both directions (:class:`~adk_mesh.agents.a2a.A2aAgent` and the A2A server of
:mod:`adk_mesh.mesh.a2a_server`), so an adk-mesh agent behind A2A and an ``A2aAgent`` in front of
one see the same parts. Only ``a2a.types`` (protobuf messages, no transport) is imported.

==========================  ==============================================================
ours                        A2A ``Part``
==========================  ==============================================================
text (a thought too)        ``text`` (a thought: metadata ``adk_mesh.thought: true``)
inline_data (Blob)          ``raw`` bytes with ``media_type``
file_data (FileData)        ``url`` with ``media_type``
function_call               ``data`` ``{"name", "args", "id"}``, metadata
                            ``adk_mesh.part_kind: "function_call"``
function_response           ``data`` ``{"name", "response", "id"}``, metadata
                            ``adk_mesh.part_kind: "function_response"``
server_tool_call            ``data`` ``{"tool_type", "args", "id"}``, metadata
                            ``adk_mesh.part_kind: "server_tool_call"`` (a built-in tool the
                            provider ran itself: a client can show that a search happened)
server_tool_response        ``data`` ``{"tool_type", "response", "id"}``, metadata
                            ``adk_mesh.part_kind: "server_tool_response"``
text holding JSON           ``data`` without that metadata: our Content has no data part,
                            and every model reads text, so it arrives as its JSON text
==========================  ==============================================================

An empty ``id`` is no id. Read back, each marked data part is a part of its kind again, whoever
sent it: a client's message may carry function calls and responses and server-tool parts, as a
gRPC ``Run``'s may (a calling LlmAgent's history keeps another agent's server-tool parts out of
its model's request, and providers send back only their own).

A part that cannot be read (a data part marked as a function call without a name, a marked data
part that is not an object, a server-tool part whose ``tool_type`` is not a string, arguments or
a response that are not an object, a part with no content) raises
:class:`~adk_mesh.errors.InvalidArgumentError` naming it.
"""

from __future__ import annotations

import json
from typing import Any

from a2a.types import a2a_pb2
from google.protobuf import json_format, struct_pb2

from adk_mesh.errors import InvalidArgumentError
from adk_mesh.types import Content, Part

__all__ = [
    "METADATA_KEY",
    "PART_KIND_KEY",
    "THOUGHT_KEY",
    "a2a_parts_to_content",
    "content_to_a2a_parts",
    "metadata_of",
    "struct_of",
]

#: Message, task and event metadata: ``{"adk_mesh": {"invocation_id": ..., ...}}``.
METADATA_KEY = "adk_mesh"
#: A part's metadata naming what a data part carries (a function call or response, or a
#: call or response of a tool the provider ran itself).
PART_KIND_KEY = "adk_mesh.part_kind"
THOUGHT_KEY = "adk_mesh.thought"
_DEFAULT_MEDIA_TYPE = "application/octet-stream"


def struct_of(values: dict[str, Any]) -> struct_pb2.Struct:
    """A protobuf Struct holding ``values`` (JSON values)."""
    struct = struct_pb2.Struct()
    struct.update(values)
    return struct


def metadata_of(struct: struct_pb2.Struct) -> dict[str, Any]:
    """What a message's or event's metadata holds under :data:`METADATA_KEY` (``{}``: none)."""
    if METADATA_KEY not in struct.fields:
        return {}
    value = json_format.MessageToDict(struct).get(METADATA_KEY)
    return value if isinstance(value, dict) else {}


def _data_part(kind: str, value: dict[str, Any]) -> a2a_pb2.Part:
    part = a2a_pb2.Part(metadata=struct_of({PART_KIND_KEY: kind}))
    part.data.struct_value.update(value)
    return part


def content_to_a2a_parts(content: Content | None) -> list[a2a_pb2.Part]:
    """The A2A parts of ``content`` (see the module docstring)."""
    if content is None:
        return []
    parts: list[a2a_pb2.Part] = []
    for part in content.parts:
        if part.text is not None:
            converted = a2a_pb2.Part(text=part.text)
            if part.thought:
                converted.metadata.update({THOUGHT_KEY: True})
            parts.append(converted)
        elif part.inline_data is not None:
            blob = part.inline_data
            parts.append(a2a_pb2.Part(raw=blob.data, media_type=blob.mime_type))
        elif part.file_data is not None:
            file = part.file_data
            parts.append(a2a_pb2.Part(url=file.file_uri, media_type=file.mime_type))
        elif part.function_call is not None:
            call = part.function_call
            parts.append(
                _data_part(
                    "function_call",
                    {"name": call.name, "args": call.args, "id": call.id or ""},
                )
            )
        elif part.function_response is not None:
            answer = part.function_response
            parts.append(
                _data_part(
                    "function_response",
                    {"name": answer.name, "response": answer.response, "id": answer.id or ""},
                )
            )
        elif part.server_tool_call is not None:
            server_call = part.server_tool_call
            parts.append(
                _data_part(
                    "server_tool_call",
                    {
                        "tool_type": server_call.tool_type,
                        "args": server_call.args,
                        "id": server_call.id or "",
                    },
                )
            )
        elif part.server_tool_response is not None:
            server_reply = part.server_tool_response
            parts.append(
                _data_part(
                    "server_tool_response",
                    {
                        "tool_type": server_reply.tool_type,
                        "response": server_reply.response,
                        "id": server_reply.id or "",
                    },
                )
            )
    return parts


def _function_part(kind: str, value: Any, index: int) -> Part:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        raise InvalidArgumentError(
            f"part {index} is marked {PART_KIND_KEY}={kind!r} but its data is not an object "
            "with a 'name'"
        )
    call_id = value.get("id")
    call_id = call_id if isinstance(call_id, str) and call_id else None
    payload = value.get("args" if kind == "function_call" else "response", {})
    if not isinstance(payload, dict):
        raise InvalidArgumentError(f"part {index}: the {kind}'s arguments must be an object")
    if kind == "function_call":
        return Part.from_function_call(value["name"], payload, id=call_id)
    return Part.from_function_response(value["name"], payload, id=call_id)


def _server_tool_part(kind: str, value: Any, index: int) -> Part:
    if not isinstance(value, dict):
        raise InvalidArgumentError(
            f"part {index} is marked {PART_KIND_KEY}={kind!r} but its data is not an object"
        )
    tool_type = value.get("tool_type", "")
    if not isinstance(tool_type, str):
        raise InvalidArgumentError(f"part {index}: the {kind}'s tool_type must be a string")
    call_id = value.get("id")
    call_id = call_id if isinstance(call_id, str) and call_id else None
    payload = value.get("args" if kind == "server_tool_call" else "response", {})
    if not isinstance(payload, dict):
        what = "arguments" if kind == "server_tool_call" else "response"
        raise InvalidArgumentError(f"part {index}: the {kind}'s {what} must be an object")
    if kind == "server_tool_call":
        return Part.from_server_tool_call(tool_type, payload, id=call_id)
    return Part.from_server_tool_response(tool_type, payload, id=call_id)


def _part_of(part: a2a_pb2.Part, index: int) -> Part:
    kind = part.WhichOneof("content")
    marks = json_format.MessageToDict(part.metadata) if part.HasField("metadata") else {}
    media_type = part.media_type or _DEFAULT_MEDIA_TYPE
    if kind == "text":
        return Part(text=part.text, thought=marks.get(THOUGHT_KEY) is True)
    if kind == "raw":
        return Part.from_inline_data(media_type, part.raw)
    if kind == "url":
        return Part.from_file_data(media_type, part.url)
    if kind == "data":
        value = json_format.MessageToDict(part.data)
        part_kind = marks.get(PART_KIND_KEY)
        if part_kind in ("function_call", "function_response"):
            return _function_part(part_kind, value, index)
        if part_kind in ("server_tool_call", "server_tool_response"):
            return _server_tool_part(part_kind, value, index)
        return Part.from_text(json.dumps(value, ensure_ascii=False))
    raise InvalidArgumentError(f"part {index} carries nothing (no text, raw, url or data)")


def a2a_parts_to_content(parts: Any, role: str) -> Content:
    """Our Content (with ``role``) of A2A ``parts`` (see the module docstring).

    Raises:
        InvalidArgumentError: a part that cannot be read.
    """
    return Content(role=role, parts=[_part_of(part, index) for index, part in enumerate(parts)])
