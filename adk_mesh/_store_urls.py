"""Parsing of store URLs, shared by the store factories.

``scheme://rest``: ``memory://`` takes no path; ``sqlite:///relative.db`` and
``sqlite:////absolute.db`` name a file as SQLAlchemy spells it (the path follows the third
slash, so a fourth makes it absolute); ``postgresql://`` and ``postgres://`` are handed, whole,
to the PostgreSQL backend. Every mistake is a :class:`~adk_mesh.errors.ConfigError` whose
message names the store, the URL and, for an unknown scheme, the forms that are known.
"""

from __future__ import annotations

import importlib
import re
from typing import Any
from urllib.parse import unquote

from adk_mesh.errors import ConfigError

__all__ = [
    "POSTGRES_SCHEMES",
    "check_memory_url",
    "database_target",
    "postgres_store",
    "redact_url",
    "split_store_url",
    "sqlite_path",
    "unknown_scheme",
]

#: Both spellings libpq accepts.
POSTGRES_SCHEMES = frozenset({"postgresql", "postgres"})


def split_store_url(url: str, *, store: str, known: str) -> tuple[str, str]:
    """``(scheme, rest)`` of ``scheme://rest``, the scheme lower-cased.

    ``store`` names the store in messages (``"session store"``); ``known`` lists its forms.
    """
    scheme, separator, rest = url.partition("://")
    if not separator:
        raise ConfigError(f"{store} URL {redact_url(url)!r} has no scheme; known: {known}")
    return scheme.lower(), rest


def check_memory_url(url: str, rest: str, *, store: str) -> None:
    """Refuse a path after ``memory://``."""
    if rest.strip("/"):
        raise ConfigError(f"{store} URL {redact_url(url)!r}: memory:// takes no path")


def sqlite_path(url: str, rest: str, *, store: str) -> str:
    """The file a ``sqlite://`` URL names (``rest``: what follows ``sqlite://``), its
    percent-escapes decoded; ``:memory:`` for a private in-memory database."""
    # A host (sqlite://host/...) means nothing for an embedded file.
    if not rest.startswith("/"):
        raise ConfigError(
            f"{store} URL {redact_url(url)!r}: write sqlite:///relative.db or "
            "sqlite:////absolute/path.db"
        )
    if "?" in rest or "#" in rest:
        raise ConfigError(f"{store} URL {redact_url(url)!r}: query and fragment are not supported")
    path = unquote(rest[1:])
    if not path:
        raise ConfigError(f"{store} URL {redact_url(url)!r} names no database file")
    return path


def database_target(url: str, *, store: str, known: str) -> tuple[str, str]:
    """What a session or memory store URL names, checked and not opened: ``("memory", "")``,
    ``("sqlite", path)`` or ``("postgres", url)``."""
    scheme, rest = split_store_url(url, store=store, known=known)
    if scheme == "memory":
        check_memory_url(url, rest, store=store)
        return "memory", ""
    if scheme == "sqlite":
        return "sqlite", sqlite_path(url, rest, store=store)
    if scheme in POSTGRES_SCHEMES:
        return "postgres", url
    raise unknown_scheme(url, scheme, store=store, known=known)


def unknown_scheme(url: str, scheme: str, *, store: str, known: str) -> ConfigError:
    """The error for a scheme the factory does not know."""
    return ConfigError(
        f"unknown {store} URL scheme {scheme!r} in {redact_url(url)!r}; known: {known}"
    )


def redact_url(url: str) -> str:
    """``url`` with its password (in the authority or a ``password=`` query parameter)
    replaced by ``***``, for messages and logs.

    Also for the URLs a parser misreads, which are the ones error messages show: a password
    with a raw ``/``, ``?`` or ``#`` (the user info then runs past where a parser ends the
    authority, so it ends at the last ``@`` here) and a URL without ``//``. When unsure, more
    is hidden than the password, never less.
    """
    scheme, separator, rest = url.partition("://")
    prefix = f"{scheme}{separator}" if separator else ""
    if not separator:
        rest = url
    # The user info ends at the last "@" before the query. With none there, a "?" may be a
    # raw one in the password, which then ends at the last "@" of all ("h:5432/d?x=a@b",
    # which cannot be told from "u:p/d?x=a@b", loses its port and path: never a password).
    query = rest.find("?")
    end = rest.rfind("@", 0, query if query >= 0 else len(rest))
    if end < 0:
        end = rest.rfind("@")
    if end >= 0 and ":" in rest[:end]:
        user = rest[:end].split(":", 1)[0]
        url = f"{prefix}{user}:***@{rest[end + 1 :]}"
    return _PASSWORD_PARAMETER.sub(r"\1***", url)


_PASSWORD_PARAMETER = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def postgres_store(url: str, *, store: str, module: str, name: str, **options: Any) -> Any:
    """The PostgreSQL backend ``module.name`` opened on ``url``, imported only now: it needs
    the ``postgres`` extra, and a missing one is a ConfigError that says how to install it."""
    try:
        backend = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if missing != module and missing.partition(".")[0] != "asyncpg":
            raise  # something else is broken: not a missing extra
        raise ConfigError(
            f"{store} URL {redact_url(url)!r} needs the PostgreSQL backend, which is not "
            f"installed ({missing} is missing): pip install 'adk-mesh[postgres]'"
        ) from None
    except ConfigError as error:  # adk_mesh._postgres: asyncpg is missing
        raise ConfigError(f"{store} URL {redact_url(url)!r}: {error.message}") from None
    return backend(url, **options)
