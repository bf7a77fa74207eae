"""What an invocation handed out, and its removal from what leaves a tool.

The runtime remembers (in memory, per invocation, never persisted) the value of every
credential a tool of the invocation received and every credential a caller forwarded to it;
:meth:`KnownSecrets.redact` replaces each occurrence of one of them in a tool's response, its
error message, its state writes, its progress reports and the artifacts it saves — and any
:class:`Credential` object found there — with ``[redacted]``, before any of it becomes an
event, reaches the model or a span. A value shorter than :data:`MIN_REDACTED_CHARS` is not
searched for in text (it would match ordinary words); a Credential object is always replaced.

A value is searched for as text usually shows it, not only as it was handed out: without the
whitespace around it, escaped as ``repr`` and JSON write it (an HTTP library's error message,
a request body) and percent-encoded (an error naming a URL whose query string holds it).
"""

from __future__ import annotations

import dataclasses
import json
import traceback
import urllib.parse
from typing import Any

from pydantic import BaseModel
from pydantic_core import SchemaSerializer, core_schema

from adk_mesh.credentials._credential import REDACTED, Credential

__all__ = ["MIN_REDACTED_CHARS", "KnownSecrets", "RedactedChain"]

#: Credential values shorter than this are not searched for inside text.
MIN_REDACTED_CHARS = 8


# Dumps a model or a dataclass as Python values (bytes stay bytes, to be searched as bytes).
_AS_PYTHON = SchemaSerializer(core_schema.any_schema())


def _forms(value: str) -> set[str]:
    """``value`` as text may show it: as it is; without the whitespace around it (a variable
    set from a file that ends with a newline, which a tool strips); escaped by ``repr`` (an
    error message naming a header: h11's for a value with a newline) and by JSON (a request
    body, a PEM key's newlines); percent-encoded as a URL's query string or path has it
    (httpx's ``raise_for_status`` names the URL, where ``+``, ``/`` and ``=`` are encoded)."""
    forms = {
        value,
        value.strip(),
        repr(value)[1:-1],
        repr(value.encode(errors="backslashreplace"))[2:-1],
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        urllib.parse.quote(value, safe=""),
        urllib.parse.quote(value),  # as a path has it ('/' kept)
        urllib.parse.quote_plus(value, safe=""),
    }
    return {form for form in forms if len(form) >= MIN_REDACTED_CHARS}


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
            self._values.update(_forms(value))

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
        """``value`` (JSON-like: dicts — keys too —, lists, tuples, sets, text, bytes, and
        pydantic models and dataclasses, which pydantic dumps) with every Credential and every
        known value inside text or bytes replaced; the same object when nothing had to change
        (a model or a dataclass that had to is returned as its dump)."""
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
        if isinstance(value, set | frozenset):
            members = [self.redact(item) for item in value]
            if all(new is old for new, old in zip(members, value, strict=True)):
                return value
            return type(value)(members)
        if isinstance(value, BaseModel) or (
            dataclasses.is_dataclass(value) and not isinstance(value, type)
        ):
            # Dumped to JSON later (an event's response, progress data, a FunctionTool's
            # result), where its text would go unsearched and its bytes become base64.
            try:
                dumped = _AS_PYTHON.to_python(value)
            except Exception:
                # What pydantic cannot dump, no event can carry: it fails where it is dumped
                # (a FunctionTool's result, the event), as it would have without credentials.
                return value
            redacted = self.redact(dumped)
            return value if redacted is dumped else redacted
        return value
