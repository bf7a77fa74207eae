"""The one rule for the names a client chooses: app, user and session ids, artifact names.

An **id** (app name, user id, session id, invocation id) is 1 to :data:`MAX_ID_CHARS` (128)
characters, each one of::

    A-Z a-z 0-9 . _ - @ : + = |

and it neither starts nor ends with ``.`` (so never ``.`` or ``..``). That covers UUIDs,
e-mail addresses, ``user:`` style prefixes, base64url-ish tokens and the subjects identity
providers put in tokens (``auth0|5f1c...``, ``google-oauth2|1234``), and every id is one safe
file name and one short SQL value.

An **artifact name** is one or more ``/``-separated segments, each following the id rule, at
most :data:`MAX_ID_CHARS` characters in all, optionally after the ``user:`` prefix that
scopes it to the user (``report.pdf``, ``reports/q1.txt``, ``user:cv.pdf``).

Every session store (memory, SQLite) and every artifact store (memory, files) checks ids with
:func:`check_id` on every call, and the mesh servers check them where requests come in, so an
id that one store accepts every other store accepts too: a session that exists can always
hold artifacts. A refused id raises :class:`~adk_mesh.errors.InvalidArgumentError` before
anything is read or written; the message quotes at most the first few characters of it.
"""

from __future__ import annotations

import os
import re

from adk_mesh.errors import InvalidArgumentError

__all__ = [
    "ID_CHARACTERS",
    "MAX_ID_CHARS",
    "USER_ARTIFACT_PREFIX",
    "check_artifact_name",
    "check_id",
    "check_name",
    "random_uuid",
    "shown",
]

#: The longest id or artifact name, in characters (all ASCII, so also in bytes).
MAX_ID_CHARS = 128
#: The characters an id may hold, besides ASCII letters and digits.
ID_CHARACTERS = "._-@:+=|"
#: Artifact names with this prefix belong to the user (every session of the user sees them).
USER_ARTIFACT_PREFIX = "user:"

_ID = re.compile(r"[A-Za-z0-9_\-@:+=|](?:[A-Za-z0-9._\-@:+=|]*[A-Za-z0-9_\-@:+=|])?")
_SHOWN_CHARS = 40


def random_uuid() -> str:
    """A random (version 4) UUID as text, as ``str(uuid.uuid4())`` makes it, at ~2.5 µs instead
    of ~5 (half of building an :class:`~adk_mesh.types.Event`): the ids of every event,
    invocation, session and function call the runtime makes."""
    data = bytearray(os.urandom(16))
    data[6] = (data[6] & 0x0F) | 0x40  # version 4
    data[8] = (data[8] & 0x3F) | 0x80  # the RFC 9562 variant
    text = data.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def shown(value: str) -> str:
    """``value`` quoted for an error message, cut after a few characters: a client's
    megabyte-long name must not come back in the error it gets."""
    if len(value) <= _SHOWN_CHARS:
        return repr(value)
    return f"{value[:_SHOWN_CHARS]!r}... ({len(value)} characters)"


def check_name(value: object, pattern: re.Pattern[str], max_chars: int, refusal: str) -> str:
    """``value`` when it is text of at most ``max_chars`` characters that ``pattern`` matches
    whole (a name of a kind: a credential, a request metadata key).

    Raises:
        InvalidArgumentError: ``"<value> <refusal>"`` (the value's first characters, or its
            type when it is not text).
    """
    if isinstance(value, str) and len(value) <= max_chars and pattern.fullmatch(value):
        return value
    named = repr(value)[:80] if isinstance(value, str) else type(value).__name__
    raise InvalidArgumentError(f"{named} {refusal}")


def _problem(value: str, max_chars: int) -> str | None:
    """What is wrong with ``value`` as an id, or ``None``."""
    if not value:
        return "is empty"
    if len(value) > max_chars:
        return f"is longer than {max_chars} characters"
    if _ID.fullmatch(value) is None:
        return (
            "may hold only ASCII letters, digits and "
            f"{' '.join(ID_CHARACTERS)}, and neither start nor end with '.'"
        )
    return None


def check_id(what: str, value: str, *, max_chars: int = MAX_ID_CHARS) -> None:
    """Refuse ``value`` unless it is an id (see the module doc).

    Args:
        what: the field, for the message (``"user_id"``).
        value: the id.
        max_chars: a lower bound than :data:`MAX_ID_CHARS`, for a server that wants one.

    Raises:
        InvalidArgumentError: it is not an id.
    """
    problem = _problem(value, min(max_chars, MAX_ID_CHARS))
    if problem is not None:
        raise InvalidArgumentError(f"{what} {shown(value)} {problem}")


def check_artifact_name(filename: str, *, max_chars: int = MAX_ID_CHARS) -> None:
    """Refuse ``filename`` unless it is an artifact name (see the module doc).

    Raises:
        InvalidArgumentError: it is not one.
    """
    limit = min(max_chars, MAX_ID_CHARS)
    problem: str | None = None
    if len(filename) > limit:
        problem = f"is longer than {limit} characters"
    else:
        name = filename.removeprefix(USER_ARTIFACT_PREFIX)
        for segment in name.split("/"):
            problem = _problem(segment, limit)
            if problem is not None:
                if segment != name:
                    problem = f"has a segment {shown(segment)} that {problem}"
                break
    if problem is not None:
        raise InvalidArgumentError(f"artifact name {shown(filename)} {problem}")
