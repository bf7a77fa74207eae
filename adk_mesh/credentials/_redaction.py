"""What an invocation handed out, and its removal from what leaves a tool.

The runtime remembers (in memory, per invocation, never persisted) the value of every
credential a tool of the invocation received and every credential a caller forwarded to it;
:meth:`KnownSecrets.redact` replaces each occurrence of one of them in a tool's response, its
error message, its state writes, its progress reports and the artifacts it saves — and any
:class:`Credential` object found there — with ``[redacted]``, before any of it becomes an
event, reaches the model or a span. A value shorter than :data:`MIN_REDACTED_CHARS` is not
searched for in text (it would match ordinary words); a Credential object is always replaced.
"""

from __future__ import annotations

import traceback
from typing import Any

from adk_mesh.credentials._credential import REDACTED, Credential

__all__ = ["MIN_REDACTED_CHARS", "KnownSecrets", "RedactedChain"]

#: Credential values shorter than this are not searched for inside text.
MIN_REDACTED_CHARS = 8


class RedactedChain(Exception):
    """What an error a tool raised was raised from (its cause or context, traceback and
    all), as text with the values handed out replaced: a logged traceback prints it in place
    of the original exceptions, whose messages may hold a value."""


class KnownSecrets:
    """The credential values one invocation handed out in this process."""

    __slots__ = ("_handed_out", "_values")

    def __init__(self) -> None:
        self._values: set[str] = set()
        self._handed_out = False

    def add(self, credential: Credential) -> None:
        self._handed_out = True
        value = credential.reveal()
        if len(value) >= MIN_REDACTED_CHARS:
            self._values.add(value)

    def __bool__(self) -> bool:
        """Whether the invocation handed out any credential: only then is there anything to
        look for in what its tools return."""
        return self._handed_out

    def redact_text(self, text: str) -> str:
        # Longest first, so a secret that contains another is removed whole.
        for value in sorted(self._values, key=len, reverse=True):
            if value in text:
                text = text.replace(value, REDACTED)
        return text

    def redact_chain(self, error: BaseException) -> None:
        """Replace, in ``error``, its notes and the exceptions it was raised from (which a
        logged traceback prints) by their text with the known values replaced."""
        if not self._values:
            return
        notes = getattr(error, "__notes__", None)
        if isinstance(notes, list):
            error.__notes__ = [self.redact_text(str(note)) for note in notes]
        chained = error.__cause__
        if chained is None and not error.__suppress_context__:
            chained = error.__context__
        if chained is not None:
            text = "".join(traceback.format_exception(chained)).rstrip()
            error.__cause__ = RedactedChain(self.redact_text(text))
        error.__context__ = None

    def redact_bytes(self, data: bytes) -> bytes:
        """``data`` with each known value (as UTF-8) replaced; the same object when none is
        in it (a value the tool encoded otherwise — base64, a hash — is not recognised)."""
        for value in sorted(self._values, key=len, reverse=True):
            encoded = value.encode()
            if encoded in data:
                data = data.replace(encoded, REDACTED.encode())
        return data

    def redact(self, value: Any) -> Any:
        """``value`` (JSON-like: dicts — keys too —, lists, tuples, text, bytes) with every
        Credential and every known value inside text or bytes replaced; the same object when
        nothing had to change."""
        if isinstance(value, Credential):
            return REDACTED
        if isinstance(value, str):
            return self.redact_text(value) if self._values else value
        if isinstance(value, bytes | bytearray):
            # Bytes reach the model and the store as base64, past any text search: the
            # value's UTF-8 bytes are replaced here, as in an artifact's data.
            return self.redact_bytes(bytes(value)) if self._values else value
        if isinstance(value, dict):
            changed = False
            redacted: dict[Any, Any] = {}
            for key, item in value.items():
                new_key = self.redact(key) if isinstance(key, str) else key
                new_item = self.redact(item)
                changed = changed or new_key is not key or new_item is not item
                redacted[new_key] = new_item
            return redacted if changed else value
        if isinstance(value, list | tuple):
            items = [self.redact(item) for item in value]
            if all(new is old for new, old in zip(items, value, strict=True)):
                return value
            return items if isinstance(value, list) else tuple(items)
        return value
