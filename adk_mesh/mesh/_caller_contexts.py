"""The caller's contexts over a bidirectional call (``CallToolInteractive``, ``RunDelegated``).

A callee (a ToolServer's tool, an AgentServer's delegated run) reaches the caller's artifacts,
memory and session history through :class:`CallerChannel`: its :class:`CallerArtifacts` and
:class:`CallerMemory` implement the store ABCs, and :class:`CallerHistory` fetches the events a
delegated run's window left out, by sending a ``ContextRequest`` on the call and waiting for
the ``ContextResponse`` with the same id. The caller answers with
:func:`answer_context_request` from its own stores, for its own session only (the ids the
callee passes are ignored) and as its delegation scope allows: the root stays the only writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from adk_mesh import codec
from adk_mesh.artifacts.base import ArtifactService
from adk_mesh.contexts import SessionHistory, page_of
from adk_mesh.errors import (
    AdkError,
    AdkIOError,
    ArtifactError,
    InvalidArgumentError,
    error_class_for_reason,
)
from adk_mesh.memory.base import MemoryEntry, MemoryService, check_limit, search_with_limit
from adk_mesh.sessions.base import Session
from adk_mesh.types import Event, Part
from adk_mesh.v1 import agent_pb2, tool_pb2

__all__ = [
    "CallerArtifacts",
    "CallerChannel",
    "CallerGone",
    "CallerHistory",
    "CallerMemory",
    "InteractiveCall",
    "NamedHistory",
    "answer_context_request",
]

# The largest SearchMemoryRequest.limit (an int32).
_INT32_MAX = 2**31 - 1


class CallerGone(AdkIOError):
    """The caller ended the call before it answered a context request."""


class CallerChannel:
    """The callee's end: sends context requests through ``send`` and matches the answers
    (:meth:`resolve`) to the requests waiting for them."""

    def __init__(self, send: Callable[[tool_pb2.ContextRequest], Awaitable[None]]) -> None:
        self._send = send
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[tool_pb2.ContextResponse]] = {}
        self._closed = False

    async def ask(self, request: tool_pb2.ContextRequest) -> tool_pb2.ContextResponse:
        if self._closed:
            raise CallerGone("the caller ended the call; its artifacts and memory are gone")
        request.request_id = next(self._ids)
        future: asyncio.Future[tool_pb2.ContextResponse] = (
            asyncio.get_running_loop().create_future()
        )
        self._waiting[request.request_id] = future
        try:
            await self._send(request)
            response = await future
        finally:
            self._waiting.pop(request.request_id, None)
        if response.WhichOneof("result") == "error":
            detail = response.error
            cls = error_class_for_reason(detail.reason) or ArtifactError
            raise cls(detail.message, metadata=dict(detail.metadata))
        return response

    def resolve(self, response: tool_pb2.ContextResponse) -> None:
        future = self._waiting.get(response.request_id)
        if future is not None and not future.done():
            future.set_result(response)

    def close(self) -> None:
        """The caller's stream ended: every request still waiting fails."""
        self._closed = True
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(CallerGone("the caller ended the call before it answered"))


class CallerArtifacts(ArtifactService):
    """The caller's artifact store, of the calling session (the ids passed are ignored)."""

    def __init__(self, channel: CallerChannel) -> None:
        self._channel = channel

    async def save_artifact(
        self, *, app_name: str, user_id: str, session_id: str, filename: str, artifact: Part
    ) -> int:
        request = tool_pb2.ContextRequest()
        request.save_artifact.filename = filename
        request.save_artifact.artifact.CopyFrom(codec.part_to_proto(artifact))
        return int((await self._channel.ask(request)).saved_version)

    async def load_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        filename: str,
        version: int | None = None,
    ) -> Part | None:
        request = tool_pb2.ContextRequest()
        request.load_artifact.filename = filename
        if version is not None:
            request.load_artifact.version = version
        loaded = (await self._channel.ask(request)).loaded_artifact
        return codec.part_from_proto(loaded.artifact) if loaded.HasField("artifact") else None

    async def list_artifact_keys(
        self, *, app_name: str, user_id: str, session_id: str
    ) -> list[str]:
        request = tool_pb2.ContextRequest(list_artifact_keys=tool_pb2.ListArtifactKeysRequest())
        return list((await self._channel.ask(request)).artifact_keys.filenames)

    async def list_versions(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> list[int]:
        request = tool_pb2.ContextRequest()
        request.list_artifact_versions.filename = filename
        return list((await self._channel.ask(request)).artifact_versions.versions)

    async def delete_artifact(
        self, *, app_name: str, user_id: str, session_id: str, filename: str
    ) -> None:
        # Deleting is not part of a tool's or agent's context, in process either.
        raise ArtifactError("a remote callee cannot delete its caller's artifacts")


class CallerMemory(MemoryService):
    """The caller's memory, searched for the calling user."""

    def __init__(self, channel: CallerChannel) -> None:
        self._channel = channel

    async def add_session_to_memory(self, session: Session) -> None:
        raise AdkError("a remote callee cannot add to its caller's memory")

    async def search_memory(
        self, *, app_name: str, user_id: str, query: str, limit: int | None = None
    ) -> list[MemoryEntry]:
        check_limit(limit)
        request = tool_pb2.ContextRequest()
        request.search_memory.query = query
        # The caller's store finds at most that many, and only they cross back (0: all; a
        # limit past int32 is as good as none).
        request.search_memory.limit = 0 if limit is None or limit > _INT32_MAX else limit
        results = (await self._channel.ask(request)).memories.memories
        # A caller of an older adk-mesh does not know the limit and sends every match.
        return [
            MemoryEntry(
                content=codec.content_from_proto(result.content),
                author=result.author or None,
                timestamp=(
                    codec.timestamp_to_datetime(result.timestamp)
                    if result.HasField("timestamp")
                    else None
                ),
                session_id=result.session_id or None,
            )
            for result in results[:limit]
        ]


class CallerHistory(SessionHistory):
    """A delegated run's window of its caller's history, and the rest fetched from the caller.

    ``omitted``: how many older events the window left out (``None``: unknown, as for a tool
    served by a ToolServer, whose session carries no events: every page is asked for);
    ``abridged``: ids of the window's events sent abridged; ``first_event_id``: the window's
    first event (older events are asked for before it)."""

    def __init__(
        self,
        channel: CallerChannel,
        *,
        omitted: int | None,
        abridged: Sequence[str] = (),
        first_event_id: str = "",
    ) -> None:
        self._channel = channel
        self._omitted = omitted
        self._abridged = frozenset(abridged)
        self._first_event_id = first_event_id

    async def page(
        self, events: Sequence[Event], *, before_event_id: str | None, max_events: int
    ) -> list[Event]:
        try:
            chosen = page_of(events, before_event_id, max_events)
        except InvalidArgumentError:  # older than the window: the caller's to answer
            assert before_event_id is not None
            return await self._load(before_event_id=before_event_id, max_events=max_events)
        older_wanted = max_events - len(chosen)
        window_start = next((e for e in events if not e.partial), None)
        reached_start = not chosen or chosen[0] is window_start
        if older_wanted and reached_start and self._omitted != 0:
            older = await self._load(
                before_event_id=chosen[0].id if chosen else self._first_event_id,
                max_events=older_wanted,
            )
            chosen = older + chosen
        abridged = [event.id for event in chosen if event.id in self._abridged]
        if abridged:
            whole = {event.id: event for event in await self._load(event_ids=abridged)}
            chosen = [whole.get(event.id, event) for event in chosen]
        return chosen

    async def _load(
        self, *, before_event_id: str = "", max_events: int = 0, event_ids: Sequence[str] = ()
    ) -> list[Event]:
        request = tool_pb2.ContextRequest()
        load = request.load_events
        load.before_event_id = before_event_id
        load.max_events = max_events
        load.event_ids.extend(event_ids)
        loaded = (await self._channel.ask(request)).loaded_events
        return [codec.event_from_proto(event) for event in loaded.events]


class NamedHistory:
    """The events a delegated run's view names by digest (``SessionView.history_digests``)
    instead of sending them: those this process kept from earlier views
    (:data:`~adk_mesh.codec.DECODED_EVENTS`), and, when some were not kept (another replica
    ran the last turn, or they were dropped), the ``load_events`` requests that fetch the
    named events from the oldest one not kept on from the caller before the run starts
    (:meth:`next_request`, :meth:`take`: the named events are the newest before ``events[0]``,
    so those are its newest), so that the run sees the window the caller meant. Without a
    caller to ask (a plain ``Run``), the window starts after the newest event not kept; the
    others stay among the omitted events. What is loaded is bounded as one message is
    (:data:`MAX_NAMED_LOAD_BYTES`): past it, the window is the newest events loaded."""

    def __init__(self, view: agent_pb2.SessionView, *, can_ask: bool) -> None:
        self._budget = MAX_NAMED_LOAD_BYTES
        self._digests = view.history_digests
        self._held, self._held_weights = codec.named_events_weighed(view)
        missing = [index for index, event in enumerate(self._held) if event is None]
        self._missing = bool(missing)
        self._first_event_id = view.events[0].id if view.events else ""
        #: Kept from the start of the named events: all, or those before the first missing.
        self._kept = missing[0] if missing and can_ask else len(self._held)
        self._wanted = len(self._held) - self._kept if can_ask else 0
        self._loaded: list[tuple[Event, bytes, int]] = []

    def next_request(self) -> tool_pb2.ContextRequest | None:
        """The next page to load from the caller; None once the window is whole."""
        if len(self._loaded) >= self._wanted:
            return None
        request = tool_pb2.ContextRequest()
        load = request.load_events
        load.before_event_id = self._loaded[0][0].id if self._loaded else self._first_event_id
        load.max_events = min(MAX_LOAD_EVENTS, self._wanted - len(self._loaded))
        return request

    def take(self, response: tool_pb2.ContextResponse) -> None:
        """The caller's answer to the last :meth:`next_request`."""
        page = [
            codec.DECODED_EVENTS.decode_weighed(event) for event in response.loaded_events.events
        ]
        self._budget -= response.loaded_events.ByteSize()
        if self._budget < 0:  # a view cannot name more than one message could carry
            page = []
        if not page:  # the caller's history is shorter than named: the window is what it has
            self._wanted = len(self._loaded)
            self._kept = 0
        self._loaded[:0] = page

    def digests(self) -> bytes | None:
        """The digests :meth:`events` are kept under in this process (None: not all are)."""
        if self._wanted or self._kept < len(self._held):
            kept = self._digests[: self._kept * codec.DIGEST_BYTES]
            return kept + b"".join([digest for _, digest, _ in self._loaded])
        return None if self._missing else self._digests

    def window(self) -> tuple[list[Event], list[int]]:
        """The named events of the window, oldest first, and the estimated memory of each."""
        if self._wanted or self._kept < len(self._held):
            kept: list[Event] = self._held[: self._kept]  # type: ignore[assignment]
            return (
                [*kept, *(event for event, _, _ in self._loaded)],
                [*self._held_weights[: self._kept], *(weight for _, _, weight in self._loaded)],
            )
        start = 0
        if self._missing:  # the newest events after the last one not kept
            start = len(self._held) - self._held[::-1].index(None)
        return self._held[start:], self._held_weights[start:]  # type: ignore[return-value]

    def events(self) -> list[Event]:
        """The named events of the window, oldest first."""
        return self.window()[0]


#: The most bytes of named events a delegated run loads from its caller before it starts (a
#: view could not carry more: the mesh's message limit).
MAX_NAMED_LOAD_BYTES = 32 * 1024 * 1024

#: A LoadEventsRequest without max_events, and the most one may ask for.
DEFAULT_LOAD_EVENTS = 100
MAX_LOAD_EVENTS = 1000


def _loaded_events(
    load: tool_pb2.LoadEventsRequest,
    history: Sequence[Event],
    response: tool_pb2.ContextResponse,
    max_bytes: int,
) -> None:
    """Answer ``load`` from ``history`` (what the callee may see of the session), in at most
    ``max_bytes`` of encoded events (never less than a view's default), as a view of that many
    bytes would carry them."""
    visible = [event for event in history if not event.partial]
    skipped = 0
    if load.event_ids:
        wanted = set(load.event_ids)
        chosen = [event for event in visible if event.id in wanted]
    else:
        if load.max_events < 0:
            raise InvalidArgumentError("LoadEventsRequest.max_events cannot be negative")
        count = min(load.max_events or DEFAULT_LOAD_EVENTS, MAX_LOAD_EVENTS)
        end = len(visible)
        if load.before_event_id:
            end = next((i for i, e in enumerate(visible) if e.id == load.before_event_id), -1)
            if end < 0:
                raise InvalidArgumentError(
                    f"no event {load.before_event_id!r} in the history this call may see"
                )
        skipped = max(0, end - count)
        chosen = visible[skipped:end]
    view = codec.session_view_to_proto(
        Session(id="history", app_name="history", user_id="history", events=chosen),
        max_events=len(chosen),
        max_bytes=max(max_bytes, codec.DEFAULT_HISTORY_MAX_BYTES),
    )
    loaded = response.loaded_events
    loaded.SetInParent()
    loaded.events.extend(view.events)
    loaded.omitted_events = skipped + view.omitted_events
    loaded.abridged_event_ids.extend(view.abridged_event_ids)


async def answer_context_request(
    request: tool_pb2.ContextRequest,
    *,
    artifacts: ArtifactService | None,
    memory: MemoryService | None,
    app_name: str,
    user_id: str,
    session_id: str,
    history: Sequence[Event] | None = None,
    history_max_bytes: int = codec.DEFAULT_HISTORY_MAX_BYTES,
) -> tool_pb2.ContextResponse:
    """The caller's answer, from ``artifacts`` and ``memory`` (already limited to what the
    callee may reach) and ``history`` (the session's events the callee may see) for its own
    session; an error becomes the answer's ``error``. ``history_max_bytes``: a
    ``RemoteAgent``'s bound on its views; an answer loading events carries up to that many
    bytes of them when it is over the default (8 MiB), so that the events its views named by
    digest, which it sent whole, come back whole when loaded (an event larger than what is
    left of the answer is abridged, as in a view)."""
    response = tool_pb2.ContextResponse(request_id=request.request_id)
    ids: dict[str, Any] = {"app_name": app_name, "user_id": user_id, "session_id": session_id}
    kind = request.WhichOneof("request")
    try:
        if kind == "load_events":
            if history is None:
                raise InvalidArgumentError("this call shares no session history")
            _loaded_events(request.load_events, history, response, history_max_bytes)
            return response
        if kind == "search_memory":
            found = (
                []
                if memory is None
                else await search_with_limit(
                    memory,
                    app_name=app_name,
                    user_id=user_id,
                    query=request.search_memory.query,
                    limit=request.search_memory.limit or None,
                )
            )
            response.memories.SetInParent()
            for entry in found:
                result = response.memories.memories.add(
                    content=codec.content_to_proto(entry.content),
                    author=entry.author or "",
                    session_id=entry.session_id or "",
                )
                if entry.timestamp is not None:
                    result.timestamp.CopyFrom(codec.timestamp_from_datetime(entry.timestamp))
            return response
        if artifacts is None:
            raise ArtifactError("no artifact service is configured for this runner")
        if kind == "save_artifact":
            response.saved_version = await artifacts.save_artifact(
                **ids,
                filename=request.save_artifact.filename,
                artifact=codec.part_from_proto(request.save_artifact.artifact),
            )
        elif kind == "load_artifact":
            load = request.load_artifact
            part = await artifacts.load_artifact(
                **ids,
                filename=load.filename,
                version=load.version if load.HasField("version") else None,
            )
            response.loaded_artifact.SetInParent()
            if part is not None:
                response.loaded_artifact.artifact.CopyFrom(codec.part_to_proto(part))
        elif kind == "list_artifact_keys":
            response.artifact_keys.SetInParent()
            response.artifact_keys.filenames.extend(await artifacts.list_artifact_keys(**ids))
        elif kind == "list_artifact_versions":
            response.artifact_versions.SetInParent()
            response.artifact_versions.versions.extend(
                await artifacts.list_versions(
                    **ids, filename=request.list_artifact_versions.filename
                )
            )
        else:
            raise ArtifactError(f"unknown context request {kind!r}")
    except AdkError as error:
        response.error.reason = error.reason
        response.error.message = error.message
        for key, value in error.metadata.items():
            response.error.metadata[key] = value
    return response


_END = object()
#: How many responses the work of a bidirectional call may run ahead of its client...
MAX_PENDING_RESPONSES = 16
#: ... and how many bytes of them (as the work measured them), whichever comes first: a
#: response may be up to a message (32 MiB), so a count alone let one slow client make the
#: server hold half a GiB. A response larger than this still goes, alone.
MAX_PENDING_RESPONSE_BYTES = 32 * 1024 * 1024


class InteractiveCall:
    """The server's side of a bidirectional call: :meth:`start` reads the first message; from
    the first context request on, a task keeps reading the caller's answers; :meth:`stream`
    sends the responses of the work with the context requests it makes, in the order they
    come."""

    def __init__(self, wrap: Callable[..., Any]) -> None:
        #: ``wrap(response=...)`` or ``wrap(context_request=...)``: one server message.
        self._wrap = wrap
        #: ``(size, message)``: a response of the work and its bytes (:meth:`stream`), or
        #: ``(None, ...)``: a context request, the work's failure, or its end.
        self._outgoing: asyncio.Queue[tuple[int | None, Any]] = asyncio.Queue()
        self.channel = CallerChannel(self._send)
        self._requests: AsyncIterator[Any] | None = None
        self._reader: asyncio.Task[None] | None = None

    async def _send(self, request: tool_pb2.ContextRequest) -> None:
        if self._reader is None:
            self._start_reading()
        self._outgoing.put_nowait((None, self._wrap(context_request=request)))

    def _start_reading(self) -> None:
        """Read the caller's answers from now on. Started with the first context request:
        most calls make none, and a call that asks nothing needs no reader (nor its task)."""
        iterator = self._requests
        assert iterator is not None, "start() reads the first message first"

        async def read() -> None:
            try:
                async for answer in iterator:
                    if answer.WhichOneof("message") == "context_response":
                        self.channel.resolve(answer.context_response)
            except Exception:  # the call ended; the waiting requests fail below
                pass
            finally:
                self.channel.close()

        self._reader = asyncio.create_task(read())

    async def start(self, requests: AsyncIterator[Any], first: str) -> Any:
        """The first message's ``first`` field; it must be set."""
        iterator = aiter(requests)
        try:
            message = await anext(iterator)
        except StopAsyncIteration:
            raise InvalidArgumentError(f"the call ended before its {first} message") from None
        if message.WhichOneof("message") != first:
            raise InvalidArgumentError(f"the first message of the call must set {first}")
        self._requests = iterator
        return getattr(message, first)

    def request_before_stream(self, request: tool_pb2.ContextRequest) -> Any:
        """``request`` as the server's next message, sent before :meth:`stream` starts (the
        caller of this yields it); :meth:`answer_before_stream` reads the answer."""
        request.request_id = next(self.channel._ids)
        return self._wrap(context_request=request)

    async def answer_before_stream(self, request_id: int) -> tool_pb2.ContextResponse:
        """The caller's answer to :meth:`request_before_stream`'s request ``request_id``: the
        call's next message."""
        iterator = self._requests
        assert iterator is not None, "start() reads the first message first"
        try:
            message = await anext(iterator)
        except StopAsyncIteration:
            raise CallerGone("the caller ended the call before it answered") from None
        if message.WhichOneof("message") != "context_response" or (
            message.context_response.request_id != request_id
        ):
            raise InvalidArgumentError(
                f"the call's next message must answer context request {request_id}"
            )
        response: tool_pb2.ContextResponse = message.context_response
        if response.WhichOneof("result") == "error":
            detail = response.error
            cls = error_class_for_reason(detail.reason) or InvalidArgumentError
            raise cls(detail.message, metadata=dict(detail.metadata))
        return response

    async def stream(
        self, responses: AsyncIterator[Any], *, size_of: Callable[[Any], int] | None = None
    ) -> AsyncIterator[Any]:
        """The server's messages: the work's ``responses``, read in a task of their own, and
        the context requests the work makes meanwhile. The work runs at most
        MAX_PENDING_RESPONSES responses ahead of the client and, with ``size_of`` (the bytes
        of a response just yielded, as the work knows them: measuring here would encode
        each response once more), MAX_PENDING_RESPONSE_BYTES of them; one larger goes once
        nothing else waits. ``size_of`` is asked right after each response comes, before
        anything else runs."""
        room = asyncio.Semaphore(MAX_PENDING_RESPONSES)
        held = 0  # bytes of the responses waiting for the client
        drained = asyncio.Event()  # set whenever a response went to the client

        async def produce() -> None:
            nonlocal held
            try:
                async for response in responses:
                    size = 0 if size_of is None else size_of(response)
                    await room.acquire()
                    while held and held + size > MAX_PENDING_RESPONSE_BYTES:
                        drained.clear()
                        await drained.wait()
                    held += size
                    self._outgoing.put_nowait((size, self._wrap(response=response)))
            except BaseException as error:
                self._outgoing.put_nowait((None, error))
                raise
            finally:
                self._outgoing.put_nowait((None, _END))
                close = getattr(responses, "aclose", None)
                if close is not None:
                    await close()

        producer = asyncio.create_task(produce())
        try:
            while True:
                size, item = await self._outgoing.get()
                if item is _END:
                    break
                if isinstance(item, BaseException):
                    raise item
                if size is not None:  # a response of the work (not a context request)
                    room.release()
                    held -= size
                    drained.set()
                yield item
        finally:
            producer.cancel()
            if self._reader is not None:
                self._reader.cancel()
            with contextlib.suppress(BaseException):
                await producer
