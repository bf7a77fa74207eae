"""Memory in PostgreSQL, searched with its full-text search, shared by every replica.

* Each event of an ingested session that has text becomes one row of ``adk_memory_entries``:
  the session, the event (its id, time, author and content, as event JSON, so content of any
  depth reads back) and a ``tsvector`` of its text, under a GIN index.
* **Words** are those of the SQLite memory store, so a search finds the same entries on
  either: the text is lower-cased and stripped of diacritics in Python (``Café`` finds
  ``cafe`` whatever the database's locale), split by PostgreSQL's parser, and reduced to
  English stems (``hiking`` finds ``hike``) by the text search configuration
  ``adk_memory`` (snowball ``english`` without a stop-word list, so no word is ignored;
  other languages are stemmed the same way on both sides). ``text_search_config`` names
  another configuration (``portuguese``, ``simple``, ...); entries keep the one they were
  added with, so add sessions again after changing it.
* **Search**: the query's words (at most :data:`MAX_QUERY_WORDS` distinct ones), each a
  quoted term, joined with ``|`` (OR): an entry that shares any word is found, ranked by
  ``ts_rank``, best first (ties: the order entries were added); a ``limit`` is the query's
  own ``LIMIT``. Only word characters reach ``to_tsquery``, so nothing a user or a model
  writes is read as query syntax.
* An entry's first :data:`MAX_INDEXED_CHARS` characters are indexed (its content is kept
  whole): a ``tsvector`` holds at most 1 MiB of words and positions, and a longer text of
  many distinct words would fail the whole add.
* Adding a session again replaces its entries, in one transaction that first takes a
  transaction-scoped advisory lock on the session: concurrent adds of one session never
  leave both sets of entries. Entries are kept by event id (an id names one immutable
  event of a session): only the events not indexed yet are added, and the entries of
  events no longer in the session are dropped, so the Runner's add after every turn
  indexes that turn, not the whole history again.
* The schema is versioned (:mod:`adk_mesh._migrations`) and migrated at first use unless
  ``migrate=False``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from adk_mesh import _postgres  # first: a ConfigError when asyncpg is not installed
from adk_mesh._migrations import Migration
from adk_mesh.errors import AdkIOError
from adk_mesh.memory._incremental import changed_entries, text_events
from adk_mesh.memory.base import MemoryEntry, MemoryService, check_limit
from adk_mesh.sessions.base import Session
from adk_mesh.types import Event, LlmResponse

__all__ = [
    "DEFAULT_TEXT_SEARCH_CONFIG",
    "MAX_INDEXED_CHARS",
    "MAX_QUERY_WORDS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "PostgresMemoryService",
]

#: The schema, as ordered steps (see :mod:`adk_mesh._migrations`). Append; never edit.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "memory entries, their full-text index and the adk_memory text search configuration",
        (
            # English stems and no stop words: what SQLite's porter tokenizer does.
            """CREATE TEXT SEARCH DICTIONARY adk_memory_stem (
                TEMPLATE = pg_catalog.snowball, Language = english
            )""",
            "CREATE TEXT SEARCH CONFIGURATION adk_memory (COPY = pg_catalog.simple)",
            """ALTER TEXT SEARCH CONFIGURATION adk_memory
                ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword,
                    hword_part
                WITH adk_memory_stem""",
            """CREATE TABLE adk_memory_entries (
                seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                app_name text NOT NULL,
                user_id text NOT NULL,
                session_id text NOT NULL,
                event text NOT NULL,
                document tsvector NOT NULL
            )""",
            """CREATE INDEX adk_memory_entries_by_session
                ON adk_memory_entries (app_name, user_id, session_id)""",
            """CREATE INDEX adk_memory_entries_by_words
                ON adk_memory_entries USING gin (document)""",
        ),
    ),
    Migration(
        "the event of each memory entry, so that adding a session again adds only new events "
        "(entries added before have none: the next add of their session replaces them)",
        (
            "ALTER TABLE adk_memory_entries ADD COLUMN event_id text",
            """CREATE INDEX adk_memory_entries_by_event
                ON adk_memory_entries (app_name, user_id, session_id, event_id)""",
        ),
    ),
)

#: The schema version this code writes.
SCHEMA_VERSION = len(MIGRATIONS)

#: The text search configuration made by the migrations (English stems, no stop words).
DEFAULT_TEXT_SEARCH_CONFIG = "adk_memory"

#: Distinct words of a query that are searched for; the rest are left out.
MAX_QUERY_WORDS = 64
#: Characters of an entry's text that are indexed (a few bytes of ``tsvector`` each at most).
MAX_INDEXED_CHARS = 100_000

_STORE = "memory"
_WHAT = "memory store"
_WORD = re.compile(r"\w+")
# The largest LIMIT the database takes (a larger limit is no limit).
_INT64_MAX = 2**63 - 1


def _normalized(text: str) -> str:
    """``text`` lower-cased, without diacritics and NUL characters (which PostgreSQL text
    cannot hold): the same words on both sides of a search, whatever the database's
    locale."""
    decomposed = unicodedata.normalize("NFD", text.lower().replace("\x00", " "))
    return "".join(char for char in decomposed if not unicodedata.combining(char))


def _query_terms(query: str) -> str | None:
    """The ``to_tsquery`` text of a search (quoted words joined by ``|``), or None when the
    query has no word. Words are word characters only, so none can hold a quote or an
    operator."""
    words = list(dict.fromkeys(_WORD.findall(_normalized(query))))
    if not words:
        return None
    return " | ".join(f"'{word}'" for word in words[:MAX_QUERY_WORDS])


def _entry_row(event: Event) -> tuple[str, str]:
    """An entry's event JSON (its id, time, author and content) and its normalized text."""
    entry = Event(
        id=event.id,
        timestamp=event.timestamp,
        author=event.author,
        llm_response=LlmResponse(content=event.content),
    )
    return entry.model_dump_json(), _normalized(event.text)[:MAX_INDEXED_CHARS]


class PostgresMemoryService(MemoryService):
    """Memory in a PostgreSQL database, searched with full-text search (see the module doc).

    Args:
        url: ``postgresql://user:password@host:port/database`` (or ``postgres://``).
        min_size: connections kept open (default 1).
        max_size: connections at most (default 10).
        migrate: migrate the schema at first use (default); with False only check it.
        connect_timeout: seconds to open one connection.
        pool_options: more keyword arguments for ``asyncpg.create_pool``.
        text_search_config: the text search configuration of new entries and searches.

    Nothing connects until the first call. :meth:`close` closes the pool.

    Raises:
        ConfigError: a URL that is not a PostgreSQL URL, or pool sizes that make no sense.
        AdkIOError: (from any call) the database cannot be used, or the service is closed.
    """

    def __init__(
        self,
        url: str,
        *,
        min_size: int = _postgres.DEFAULT_MIN_SIZE,
        max_size: int = _postgres.DEFAULT_MAX_SIZE,
        migrate: bool = True,
        connect_timeout: float = _postgres.DEFAULT_CONNECT_TIMEOUT,
        pool_options: Mapping[str, Any] | None = None,
        text_search_config: str = DEFAULT_TEXT_SEARCH_CONFIG,
    ) -> None:
        self._database = _postgres.PostgresDatabase(
            url,
            store=_STORE,
            migrations=MIGRATIONS,
            error=AdkIOError,
            what=_WHAT,
            min_size=min_size,
            max_size=max_size,
            migrate=migrate,
            connect_timeout=connect_timeout,
            pool_options=pool_options,
        )
        self._config = text_search_config

    @property
    def url(self) -> str:
        """The database URL, its password replaced by ``***``."""
        return self._database.url

    async def migrate(self) -> int:
        """Create or upgrade the schema now (as ``adk-mesh migrate`` does); its version."""
        return await self._database.migrate()

    async def close(self) -> None:
        """Close the pool. Idempotent."""
        await self._database.close()

    async def add_session_to_memory(self, session: Session) -> None:
        key = (session.app_name, session.user_id, session.id)
        texts = text_events(session)
        async with (
            self._database.connection("adding a session to memory") as connection,
            connection.transaction(),
        ):
            await connection.execute(
                "SELECT pg_advisory_xact_lock($1)", _postgres.advisory_key("memory", *key)
            )
            held = await connection.fetch(
                "SELECT seq, event_id FROM adk_memory_entries "
                "WHERE app_name = $1 AND user_id = $2 AND session_id = $3",
                *key,
            )
            stale, new = changed_entries([(row["seq"], row["event_id"]) for row in held], texts)
            if stale:
                await connection.execute(
                    "DELETE FROM adk_memory_entries WHERE seq = ANY($1::bigint[])", stale
                )
            if new:
                await connection.executemany(
                    "INSERT INTO adk_memory_entries "
                    "(app_name, user_id, session_id, event_id, event, document) "
                    "VALUES ($1, $2, $3, $4, $5, to_tsvector($7::regconfig, $6))",
                    [(*key, event.id, *_entry_row(event), self._config) for event in new],
                )

    async def search_memory(
        self, *, app_name: str, user_id: str, query: str, limit: int | None = None
    ) -> list[MemoryEntry]:
        check_limit(limit)
        terms = _query_terms(query)
        if terms is None:
            if self._database.closed:
                raise AdkIOError(f"the PostgreSQL {_WHAT} is closed")
            return []
        async with self._database.connection("searching memory") as connection:
            # The limit is the query's (NULL: none), so only that many events are sent and
            # decoded, however many match.
            rows = await connection.fetch(
                "SELECT entry.session_id, entry.event "
                "FROM adk_memory_entries AS entry, to_tsquery($3::regconfig, $4) AS query "
                "WHERE entry.app_name = $1 AND entry.user_id = $2 AND entry.document @@ query "
                "ORDER BY ts_rank(entry.document, query) DESC, entry.seq LIMIT $5::bigint",
                app_name,
                user_id,
                self._config,
                terms,
                None if limit is None else min(limit, _INT64_MAX),
            )
        entries: list[MemoryEntry] = []
        for row in rows:
            event = Event.model_validate_json(row["event"])
            assert event.content is not None  # only events with content are added
            entries.append(
                MemoryEntry(
                    content=event.content,
                    author=event.author or None,
                    timestamp=event.timestamp,
                    session_id=row["session_id"],
                )
            )
        return entries
