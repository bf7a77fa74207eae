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

The HTTP client libraries log what they send, whatever adk-mesh does: httpx (and httpx2) each
request's URL at INFO, httpcore (and httpcore2) each response's headers at DEBUG, the MCP and
A2A SDKs the URL they connect to. :func:`redact_http_logs` (called where adk-mesh makes an
HTTP client) makes those records show URLs as :func:`shown_url` does and secret-looking
headers' values as ``[redacted]``, before any handler of the application's sees them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
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
    "redact_http_logs",
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


#: A Telegram bot's token as its Bot API takes it, in the path (``/bot<id>:<secret>/getMe``,
#: ``/file/bot<id>:<secret>/...``): recognised on any host (the Bot API server can be run
#: locally), the form being one no ordinary path segment has.
_TELEGRAM_BOT_SEGMENT = re.compile(r"bot(\d+:[A-Za-z0-9_-]{30,})")
#: The webhook URLs whose last segment is their secret, by host: Slack's
#: (``/services/T…/B…/<secret>``, ``/triggers/…/<secret>``, ``/workflows/…/<secret>``).
_SLACK_HOOKS_HOST = "hooks.slack.com"
_SLACK_HOOK_KINDS = frozenset({"services", "triggers", "workflows"})
#: Discord's webhooks (``/api[/v10]/webhooks/<id>/<secret>[/slack]``), on its hosts.
_DISCORD_DOMAINS = ("discord.com", "discordapp.com")


def _hide(value: str, secrets: KnownSecrets, *, plus_is_space: bool = False) -> str:
    """Note ``value`` (as written and decoded; the token of ``Bearer <token>`` alone too: a
    server's error may echo it alone) in ``secrets``; ``[redacted]`` to show in its place."""
    decoded = urllib.parse.unquote_plus(value) if plus_is_space else urllib.parse.unquote(value)
    scheme, space, token = value.strip().partition(" ")
    for form in {value, decoded, token.strip() if space and scheme.isalpha() else ""}:
        if form:
            secrets.add(Credential("endpoint secret", form))
    return REDACTED


def _shown_path(host: str, path: str, secrets: KnownSecrets) -> str:
    """``path`` with the tokens it holds replaced by ``[redacted]`` (and added to ``secrets``).

    Only tokens in forms no ordinary path has are recognised (a path names resources, and a
    model's name, a UUID or a session id there are no secrets): a Telegram bot's token
    (``bot<id>:<secret>``), and the secret segment of Slack's and Discord's webhook URLs on
    their own hosts. Any other token in a path is shown; such a key belongs in a header."""
    segments = path.split("/")
    for index, segment in enumerate(segments):
        bot = _TELEGRAM_BOT_SEGMENT.fullmatch(urllib.parse.unquote(segment))
        if bot is not None:
            # The whole token as written (``:`` may be encoded), and its secret alone, which
            # an error may show without the bot's id.
            _hide(bot.group(1).partition(":")[2], secrets)
            segments[index] = f"bot{_hide(segment[3:], secrets)}"
    secret_at: int | None = None
    if host == _SLACK_HOOKS_HOST:
        # ``/services/T…/B…/<secret>`` (a trailing ``/`` or not): the last of 3+ segments.
        named = [index for index, segment in enumerate(segments) if segment]
        if len(named) >= 4 and named[0] == 1 and segments[1] in _SLACK_HOOK_KINDS:
            secret_at = named[-1]
    elif any(host == domain or host.endswith(f".{domain}") for domain in _DISCORD_DOMAINS):
        if "webhooks" in segments[:4]:
            webhooks = segments.index("webhooks")
            if webhooks + 2 < len(segments) and segments[webhooks + 1].isdigit():
                secret_at = webhooks + 2
    if secret_at is not None and segments[secret_at]:
        segments[secret_at] = _hide(segments[secret_at], secrets)
    return "/".join(segments)


def shown_url(url: str, secrets: KnownSecrets) -> str:
    """``url`` as it may be shown: the password of its user info, the values of its query
    (and fragment) parameters that hold credentials, and a token in its path (by the rule of
    :func:`_shown_path`) replaced by ``[redacted]``; those values (as written and decoded) are
    added to ``secrets``, to take out of the text of errors."""

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
    path = _shown_path((parts.hostname or "").rstrip("."), parts.path, secrets)
    query, fragment = parameters(parts.query), parameters(parts.fragment)
    return urllib.parse.urlunsplit((parts.scheme, netloc, path, query, fragment))


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


# --- what the HTTP client libraries log -------------------------------------------------------

#: The loggers that show what adk-mesh's HTTP clients send: httpx's and httpx2's (each request's
#: URL, at INFO), httpcore's and httpcore2's (each response's headers, at DEBUG: a logger's
#: filters do not see its children's records, so each child is named), and the MCP and A2A
#: SDKs' that name the URL they connect to.
_HTTP_LOGGERS = (
    "httpx",
    "httpx2",
    *(
        f"{core}{child}"
        for core in ("httpcore", "httpcore2")
        for child in ("", ".connection", ".http11", ".http2", ".proxy", ".socks")
    ),
    "mcp.client.streamable_http",
    "a2a.client.card_resolver",
)
_HTTP_CORE_CHILDREN = ("httpcore.", "httpcore2.")

#: A URL inside a log line (up to a quote, a space or a bracket; not its trailing punctuation).
_URL_IN_TEXT = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>\\]*[^\s'\"<>\\.,;)]")
#: A header as httpcore logs a response's: ``(b'Set-Cookie', b'session=...')``.
_HEADER_IN_TEXT = re.compile(
    r"""\((b'[^'\\]*'|b"[^"\\]*"), (b'(?:[^'\\]|\\.)*'|b"(?:[^"\\]|\\.)*")\)"""
)


def _shown_in_log(text: str) -> str:
    """``text`` with its URLs shown as :func:`shown_url` shows them, and the values of its
    secret-looking headers (``Set-Cookie``, ``Authorization``) replaced by ``[redacted]``."""
    if "://" in text:

        def url(match: re.Match[str]) -> str:
            shown = shown_url(match.group(), KnownSecrets())
            # A URL that holds no secret stays as written (parsing may normalise it).
            return shown if REDACTED in shown else match.group()

        text = _URL_IN_TEXT.sub(url, text)
    if "(b" in text:

        def header(match: re.Match[str]) -> str:
            name = match.group(1)
            if not _is_secret(name[2:-1]):
                return match.group()
            return f"({name}, b'{REDACTED}')"

        text = _HEADER_IN_TEXT.sub(header, text)
    return text


class _HttpLogRedaction(logging.Filter):
    """Rewrites a record of an HTTP client library to show no secret: the arguments of a
    formatted message (the URL of ``HTTP Request: %s %s ...``; the format stays, for handlers
    that group by it), or the text of one logged already formatted (httpcore's)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            shown = tuple(_shown_argument_in_log(argument) for argument in record.args)
            if any(new is not old for new, old in zip(shown, record.args, strict=True)):
                record.args = shown
        elif not record.args and isinstance(record.msg, str):
            # Only without arguments: hiding a value could take a ``%s`` with it.
            record.msg = _shown_in_log(record.msg)
        return True


def _shown_argument_in_log(argument: object) -> object:
    """``argument`` (text, an httpx ``URL``, the agent card the A2A SDK logs as a dict) as
    its text with the secrets hidden, as ``%s`` would show it; the same object when it shows
    none (a number, for ``%d``, is left alone)."""
    if argument is None or isinstance(argument, int | float | bytes):
        return argument
    text = str(argument)
    shown = _shown_in_log(text)
    return argument if shown == text else shown


_HTTP_LOG_REDACTION = _HttpLogRedaction()


def redact_http_logs() -> None:
    """Make the HTTP client libraries' log records show no secret of the URLs and headers
    they name (see :class:`_HttpLogRedaction`), whatever the application's logging setup: a
    filter on their own loggers, which rewrites a record before any handler sees it.

    Idempotent and cheap; called where adk-mesh makes an HTTP client. A record that is not
    logged (a level below the logger's) costs nothing."""
    names = set(_HTTP_LOGGERS)
    # Children of httpcore named by a version this list does not know, already imported.
    names.update(
        name
        for name in list(logging.root.manager.loggerDict)
        if name.startswith(_HTTP_CORE_CHILDREN)
    )
    for name in names:
        logger = logging.getLogger(name)
        if _HTTP_LOG_REDACTION not in logger.filters:
            logger.addFilter(_HTTP_LOG_REDACTION)
