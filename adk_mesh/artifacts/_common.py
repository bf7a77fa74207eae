"""Checks and conversions shared by the artifact backends."""

from __future__ import annotations

from adk_mesh.errors import InvalidArgumentError
from adk_mesh.types import Part

_MAX_COMPONENT_BYTES = 255


def validate_scope(app_name: str, user_id: str, session_id: str) -> None:
    """Refuse app, user and session ids that could not be one safe path component.

    The file backend uses them as directory names; the memory backend checks them the same
    way so that both accept exactly the same calls.
    """
    for what, value in (("app_name", app_name), ("user_id", user_id), ("session_id", session_id)):
        problem = None
        if not value:
            problem = "is empty"
        elif value in (".", ".."):
            problem = "is '.' or '..'"
        elif "/" in value or "\\" in value:
            problem = "contains a path separator"
        elif any(ord(character) < 32 or character == "\x7f" for character in value):
            problem = "contains a NUL or control character"
        elif len(value.encode()) > _MAX_COMPONENT_BYTES:
            problem = f"is longer than {_MAX_COMPONENT_BYTES} bytes"
        if problem is not None:
            raise InvalidArgumentError(f"{what} {value!r} {problem}")


def normalize_part(part: Part) -> Part:
    """The artifact as stored: a new Part with just its text, or its inline data and MIME type.

    Raises:
        InvalidArgumentError: for a part that holds neither.
    """
    if part.text is not None:
        return Part.from_text(part.text)
    if part.inline_data is not None:
        return Part.from_inline_data(part.inline_data.mime_type, part.inline_data.data)
    raise InvalidArgumentError(
        f"an artifact holds text or inline data, not a {part.kind.replace('_', ' ')} part"
    )


def check_version(version: int | None) -> None:
    if version is not None and version < 1:
        raise InvalidArgumentError(f"artifact versions start at 1, not {version}")
