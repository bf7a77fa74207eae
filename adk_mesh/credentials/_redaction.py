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

The secrets of a remote endpoint (an MCP server, an A2A agent) are shown the same way
everywhere — names, logs, errors, spans: :func:`shown_url` hides a URL's password and the
values of its secret-looking query parameters, :func:`shown_arguments` those of a command
line, :func:`add_header_secrets` notes the values of secret-looking headers; each adds what
it hid to a :class:`KnownSecrets`, to take out of what the endpoint and the HTTP client say.
"""

from __future__ import annotations

import dataclasses
import json
import re
import traceback
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel
from pydantic_core import SchemaSerializer, core_schema

from adk_mesh.credentials._credential import REDACTED, Credential
from adk_mesh.telemetry._spans import _WORD_BOUNDARY, _is_secret

__all__ = [
    "MIN_REDACTED_CHARS",
    "KnownSecrets",
    "RedactedChain",
    "add_header_secrets",
    "shown_arguments",
    "shown_url",
]

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


# --- the secrets of an endpoint ---------------------------------------------------------------

#: Query parameters that hold a credential though their names do not read as secrets by the
#: rule of span attributes (:func:`_is_secret`): the signature of a pre-signed URL (AWS's
#: ``X-Amz-Signature``, Google Cloud's ``X-Goog-Signature``, Azure's ``sig``, OAuth 1's
#: ``oauth_signature``: its last word), OAuth's authorization ``code``, and ``AWSAccessKeyId``,
#: which OpenTelemetry's ``url.full`` says to redact too. A tool argument named ``code`` or
#: ``signature`` is no secret, so the rule for URLs is wider than the one for spans.
_URL_SECRET_LAST_WORDS = frozenset({"sig", "signature"})
_URL_SECRET_NAMES = frozenset({"code", "awsaccesskeyid"})

#: An HTTP header's name (RFC 9110 token): ``Authorization: Bearer ...`` as an argument.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _is_secret_parameter(name: str) -> bool:
    """Whether a URL's query parameter ``name`` holds a credential."""
    if _is_secret(name) or name.lower() in _URL_SECRET_NAMES:
        return True
    words = [word.lower() for word in _WORD_BOUNDARY.split(name) if word]
    return bool(words) and words[-1] in _URL_SECRET_LAST_WORDS


def _hide(value: str, secrets: KnownSecrets, *, plus_is_space: bool = False) -> str:
    """Note ``value`` (as written and decoded; the token of ``Bearer <token>`` alone too: a
    server's error may echo it alone) in ``secrets``; ``[redacted]`` to show in its place."""
    decoded = urllib.parse.unquote_plus(value) if plus_is_space else urllib.parse.unquote(value)
    scheme, space, token = value.strip().partition(" ")
    for form in {value, decoded, token.strip() if space and scheme.isalpha() else ""}:
        if form:
            secrets.add(Credential("endpoint secret", form))
    return REDACTED


def shown_url(url: str, secrets: KnownSecrets) -> str:
    """``url`` as it may be shown: the password of its user info, and the values of its query
    (and fragment) parameters that hold credentials, replaced by ``[redacted]``; those values
    (as written and decoded) are added to ``secrets``, to take out of the text of errors."""

    def parameters(text: str) -> str:
        shown = []
        for parameter in text.split("&"):
            key, equals, value = parameter.partition("=")
            if equals and value and _is_secret_parameter(urllib.parse.unquote_plus(key)):
                parameter = f"{key}={_hide(value, secrets, plus_is_space=True)}"
            shown.append(parameter)
        return "&".join(shown)

    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        # A URL the parser refuses (a malformed IPv6 host) connects to nothing: shown as its
        # scheme only, and the whole of it taken out of errors.
        _hide(url, secrets)
        return f"{url.partition(':')[0]}://{REDACTED}"
    netloc = parts.netloc
    userinfo, at, host = netloc.rpartition("@")
    user, colon, password = userinfo.partition(":")
    if at and colon and password:
        netloc = f"{user}:{_hide(password, secrets)}@{host}"
    query, fragment = parameters(parts.query), parameters(parts.fragment)
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def shown_arguments(arguments: Sequence[str], secrets: KnownSecrets) -> list[str]:
    """A command line's ``arguments`` as they may be shown, the secrets' values replaced by
    ``[redacted]`` and added to ``secrets``: the value after a flag whose name looks like a
    secret (``--api-key X``, by the rule of span attributes; unless it is another ``--``
    flag), the value of ``--token=X`` or ``API_KEY=X``, of a header (``Authorization: Bearer
    X``, as ``--header`` takes it), and a URL's as :func:`shown_url` hides them."""
    shown: list[str] = []
    value_follows = False
    for argument in arguments:
        if value_follows and not argument.startswith("--"):
            shown.append(_hide(argument, secrets))
            value_follows = False
            continue
        shown_argument = _shown_argument(argument, secrets)
        value_follows = (
            shown_argument == argument
            and argument.startswith("-")
            and "=" not in argument
            and _is_secret(argument)
        )
        shown.append(shown_argument)
    return shown


def _shown_argument(argument: str, secrets: KnownSecrets) -> str:
    if argument.startswith(("http://", "https://")):
        return shown_url(argument, secrets)
    name, equals, value = argument.partition("=")
    if equals and value and _HEADER_NAME.fullmatch(name):
        if _is_secret(name):
            return f"{name}={_hide(value, secrets)}"
        if name.startswith("-"):  # --header=Authorization: ..., --url=https://...
            return f"{name}={_shown_argument(value, secrets)}"
    header, colon, value = argument.partition(":")
    if colon and value.strip() and _HEADER_NAME.fullmatch(header) and _is_secret(header):
        return f"{header}:{' ' if value.startswith(' ') else ''}{_hide(value.strip(), secrets)}"
    return argument


def add_header_secrets(headers: Mapping[str, str], secrets: KnownSecrets) -> None:
    """Add to ``secrets`` the values of the ``headers`` whose names look like secrets
    (``Authorization``, ``x-api-key``, ``Cookie``: the rule of span attributes), and the token
    of a ``Bearer <token>`` alone."""
    for name, value in headers.items():
        if _is_secret(name) and value:
            _hide(value, secrets)
