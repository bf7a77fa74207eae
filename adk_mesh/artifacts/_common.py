"""Checks and conversions shared by the artifact backends."""

from __future__ import annotations

from adk_mesh.errors import InvalidArgumentError
from adk_mesh.ids import check_id
from adk_mesh.types import Part


def validate_scope(app_name: str, user_id: str, session_id: str) -> None:
    """Refuse app, user and session ids that are not ids (:func:`adk_mesh.ids.check_id`): the
    rule every session store applies too, so a session that exists can hold artifacts, and
    one that makes each id a safe path component for the file backend."""
    check_id("app_name", app_name)
    check_id("user_id", user_id)
    check_id("session_id", session_id)


def normalize_part(part: Part) -> Part:
    """The artifact as stored: a new Part with just its text, or its inline data and MIME type.

    Raises:
        InvalidArgumentError: for a part that holds neither, or text UTF-8 cannot hold.
    """
    if part.text is not None:
        _check_utf8(part.text)
        return Part.from_text(part.text)
    if part.inline_data is not None:
        return Part.from_inline_data(part.inline_data.mime_type, part.inline_data.data)
    raise InvalidArgumentError(
        f"an artifact holds text or inline data, not a {part.kind.replace('_', ' ')} part"
    )


def _check_utf8(text: str) -> None:
    """Every store keeps text as UTF-8: a lone surrogate (text decoded with
    ``surrogateescape``, half of a broken ``\\ud83d`` escape) must be refused as a bad
    argument, before anything is written, not fail the save with a UnicodeEncodeError."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidArgumentError(
            f"artifact text holds a lone surrogate (U+{ord(text[error.start]):04X} at "
            f"character {error.start}), which UTF-8 cannot hold"
        ) from None


def check_version(version: int | None) -> None:
    if version is not None and version < 1:
        raise InvalidArgumentError(f"artifact versions start at 1, not {version}")
