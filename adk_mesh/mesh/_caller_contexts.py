"""The caller's contexts over a bidirectional call (``CallToolInteractive``, ``RunDelegated``).

A callee (a ToolServer's tool, an AgentServer's delegated run) reaches the caller's artifacts,
memory and session history through :class:`CallerChannel`: its :class:`CallerArtifacts` and
:class:`CallerMemory` implement the store ABCs, and :class:`CallerHistory` fetches the events a
delegated run's window left out, by sending a ``ContextRequest`` on the call and waiting for
the ``ContextResponse`` with the same id. The caller answers with
:func:`answer_context_request` from its own stores, for its own session only (the ids the
callee passes are ignored) and as its delegation scope allows: the root stays the only writer.
A caller takes each request of a call through :class:`ContextAnswers`, which writes the answer.

An artifact larger than one message crosses as a header and chunks ("Artifacts in chunks" in
``tool.proto``), a load from the caller to the callee (:meth:`ContextAnswers.take` sends,
:meth:`CallerChannel.resolve` reassembles), a save the other way (:class:`CallerArtifacts`
sends, :class:`ContextAnswers` reassembles). Each side sends chunks only to a peer that said
it reassembles them, and bounds what it receives with its own limit, and the wait between two
chunks (:data:`CHUNK_STALL_SECONDS`): a sender gone silent in the middle of an artifact fails
it, the bytes held for it are let go, and its chunks that still come are dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
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
from adk_mesh.mesh._artifact_budget import DEFAULT_MAX_ARTIFACT_BYTES, ArtifactBudget
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES
from adk_mesh.mesh._session_service import ARTIFACT_CHUNK_BYTES
from adk_mesh.sessions.base import Session
from adk_mesh.types import Blob, Event, Part
from adk_mesh.v1 import agent_pb2, content_pb2, tool_pb2

__all__ = [
    "CallerArtifacts",
    "CallerChannel",
    "CallerGone",
    "CallerHistory",
    "CallerMemory",
    "ContextAnswers",
    "InteractiveCall",
    "NamedHistory",
    "answer_context_request",
    "error_answer",
]

# The largest SearchMemoryRequest.limit (an int32).
_INT32_MAX = 2**31 - 1

#: The most bytes of one context message: the mesh's message limit, less room for the call's
#: envelope around it. An artifact whose message would be larger goes in chunks.
MAX_CONTEXT_MESSAGE_BYTES = MAX_MESSAGE_BYTES - 64 * 1024

#: The longest wait for the next chunk of an artifact whose header came: past it, the sender
#: is taken to have stopped in the middle (it hangs, or it stopped waiting and sends nothing
#: more), and the artifact fails. Its chunks follow each other at once, so a sender that is
#: alive sends the next well within this; a transfer as a whole may take much longer.
CHUNK_STALL_SECONDS = 30.0


def _split(part: Part) -> tuple[Part, bytes] | None:
    """``part`` without its data, and the data, for an artifact that may cross in chunks
    (inline data, or text as UTF-8); None for another kind of Part, which cannot."""
    if part.inline_data is not None:
        empty = Blob(mime_type=part.inline_data.mime_type, data=b"")
        return part.model_copy(update={"inline_data": empty}), part.inline_data.data
    if part.text is not None:
        return part.model_copy(update={"text": ""}), part.text.encode()
    return None


def _fit_or_split(
    message: Any, holder: Any, part: Part
) -> tuple[int, tuple[Part, bytes] | None] | None:
    """Put ``part`` in ``holder.artifact`` when ``message`` then fits one context message
    (``None``: send it so). Else leave it out and return the bytes it would take and ``part``
    split for chunks (:func:`_split`; ``None``: a kind that cannot go in chunks). Measured on
    the data first: an artifact that goes in chunks is never encoded whole."""
    split = _split(part)
    if split is not None and len(split[1]) > MAX_CONTEXT_MESSAGE_BYTES:
        return len(split[1]), split
    holder.artifact.CopyFrom(codec.part_to_proto(part))
    size: int = message.ByteSize()
    if size <= MAX_CONTEXT_MESSAGE_BYTES:
        return None
    holder.ClearField("artifact")
    return size, split


def _chunks(
    request_id: int, data: bytes, make: Callable[..., Any], stop: Callable[[], bool]
) -> Iterator[Any]:
    """The messages carrying ``data`` after its header, made as they are sent (so the artifact
    is held once, not once more in its messages), until ``stop()`` says the receiver answered
    already (it refused the artifact: the rest would be dropped)."""
    view = memoryview(data)
    for start in range(0, len(data), ARTIFACT_CHUNK_BYTES):
        if stop():
            return
        yield make(
            request_id=request_id, artifact_chunk=bytes(view[start : start + ARTIFACT_CHUNK_BYTES])
        )


class _Assembly:
    """An artifact coming in chunks after its header, held until its last byte is in.

    Raises ArtifactError (nothing held) for a header whose size is over ``limit`` (checked
    before any byte comes), whose Part is of no kind that crosses in chunks or holds data,
    and for chunks that carry more bytes than the header announced."""

    def __init__(
        self, request_id: int, header: content_pb2.Part, size: int, limit: int, what: str
    ) -> None:
        self.request_id = request_id
        self.what = what
        if size < 0 or size > limit:
            raise ArtifactError(
                f"{what} is {size} bytes, over the {limit} bytes the receiver takes in one "
                "artifact; nothing was stored"
            )
        kind = header.WhichOneof("data")
        if kind not in ("inline_data", "text") or header.inline_data.data or header.text:
            raise ArtifactError(
                f"the header of {what} must hold inline data without its bytes or empty text; "
                "nothing was stored"
            )
        self._header = header
        self.size = size
        self._received = bytearray()
        #: Bytes taken from a service's ArtifactBudget for it (given back once).
        self.taken = 0

    @property
    def complete(self) -> bool:
        return len(self._received) == self.size

    def add(self, chunk: bytes) -> None:
        if len(self._received) + len(chunk) > self.size:
            raise ArtifactError(
                f"the chunks of {self.what} carry more than the {self.size} bytes its header "
                "announced; nothing was stored"
            )
        self._received += chunk

    @property
    def left(self) -> int:
        """Bytes still to come."""
        return self.size - len(self._received)

    def cut_short(self) -> ArtifactError:
        """The error for chunks that ended (another message came) before the last byte."""
        return ArtifactError(
            f"the chunks of {self.what} ended after {len(self._received)} of the {self.size} "
            "bytes its header announced; nothing was stored"
        )

    def stalled(self, sender: str, seconds: float) -> ArtifactError:
        """The error for chunks that stopped coming (``sender``: who stopped) for ``seconds``
        before the last byte."""
        received = len(self._received)
        return ArtifactError(
            f"the {sender} stopped sending {self.what} after {received} of {self.size} bytes "
            f"(nothing came for {seconds:g} s); nothing was stored",
            metadata={"received_bytes": str(received), "size_bytes": str(self.size)},
        )

    def part(self) -> Part:
        """The artifact whole."""
        data = bytes(self._received)
        self._received = bytearray()  # the Part holds the bytes from now on
        header = codec.part_from_proto(self._header)
        if header.inline_data is not None:
            blob = Blob(mime_type=header.inline_data.mime_type, data=data)
            return header.model_copy(update={"inline_data": blob})
        try:
            text = data.decode()
        except UnicodeDecodeError as error:
            raise ArtifactError(
                f"the bytes of text {self.what} are not UTF-8 (at byte {error.start}); "
                "nothing was stored"
            ) from None
        return header.model_copy(update={"text": text})


class _StallWatch:
    """Calls ``on_stall`` once :meth:`arm`'s seconds pass without another :meth:`arm` or
    :meth:`disarm`: the wait between two chunks of an artifact, on either side of a call.

    Holds its owner weakly: a pending timer does not keep a finished call's receiver (and the
    bytes it held) alive until it fires."""

    def __init__(self, on_stall: Callable[[], None]) -> None:
        self._on_stall = weakref.WeakMethod(on_stall)
        self._timer: asyncio.TimerHandle | None = None

    def arm(self, seconds: float) -> None:
        """(Re)start the wait: ``on_stall`` runs after ``seconds`` unless armed again first."""
        self.disarm()
        self._timer = asyncio.get_running_loop().call_later(seconds, self._fire)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self) -> None:
        self._timer = None
        on_stall = self._on_stall()
        if on_stall is not None:
            on_stall()


class CallerGone(AdkIOError):
    """The caller ended the call before it answered a context request."""


#: An answer to a context request: the response, and the assembly of an artifact that came in
#: chunks after it.
_Answer = tuple[tool_pb2.ContextResponse, _Assembly | None]


class CallerChannel:
    """The callee's end: sends context requests through ``send`` and matches the answers
    (:meth:`resolve`) to the requests waiting for them.

    ``send_all`` sends several requests in order with nothing between them (a save's header
    and chunks), pulling each from the iterable as it goes; by default each goes through
    ``send``. ``caller_reassembles``: the caller said (on its call's first message) that it
    reassembles a save sent in chunks. ``max_artifact_bytes``: the largest artifact this side
    takes in chunks from the caller. ``chunk_stall_seconds``: the longest wait for the next
    chunk of a load (:data:`CHUNK_STALL_SECONDS`; a class attribute, lowered by tests)."""

    chunk_stall_seconds: float = CHUNK_STALL_SECONDS

    def __init__(
        self,
        send: Callable[[tool_pb2.ContextRequest], Awaitable[None]],
        *,
        send_all: Callable[[Iterable[tool_pb2.ContextRequest]], Awaitable[None]] | None = None,
        max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
    ) -> None:
        self._send = send
        self._send_all = send_all or self._send_each
        self.caller_reassembles = False
        self.max_artifact_bytes = max_artifact_bytes
        #: The service's count of artifact bytes in transfer, if it keeps one: a load in chunks
        #: takes its announced size from it until its last chunk is in.
        self.budget: ArtifactBudget | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[_Answer]] = {}
        #: What each artifact request is about, for the errors of its chunks.
        self._artifact_names: dict[int, str] = {}
        #: The loaded artifact whose chunks are coming (one at a time: nothing comes between
        #: a header and its last chunk).
        self._assembly: _Assembly | None = None
        #: A load refused on its header: its request id and the bytes of its chunks still to
        #: come, dropped as they come.
        self._skipping: tuple[int, int] | None = None
        #: Set while no chunks are expected, or the caller stopped sending them (see
        #: :meth:`settled`).
        self._settled = asyncio.Event()
        self._settled.set()
        #: The requests sent whose answer (or an answer's header) has not come: also those
        #: nobody waits for any more, whose answer the caller still writes.
        self._unanswered: set[int] = set()
        #: Set while ``_unanswered`` is empty.
        self._answered = asyncio.Event()
        self._answered.set()
        #: Bounds the wait for the next chunk while chunks are expected.
        self._stall = _StallWatch(self._stalled)
        self._closed = False

    async def _send_each(self, requests: Iterable[tool_pb2.ContextRequest]) -> None:
        for request in requests:
            await self._send(request)

    async def ask(self, request: tool_pb2.ContextRequest) -> tool_pb2.ContextResponse:
        """Send ``request`` and wait for its answer (an error answer is raised again as the
        error class it names)."""
        return (await self.ask_artifact(request))[0]

    async def ask_artifact(
        self, request: tool_pb2.ContextRequest, data: bytes | None = None
    ) -> _Answer:
        """Send ``request`` (followed by ``data`` in chunks, when given: a save's header) and
        wait for the answer: the response, and the assembly of an artifact that came in
        chunks (the response then holds nothing else)."""
        if self._closed:
            raise CallerGone("the caller ended the call; its artifacts and memory are gone")
        request_id = request.request_id = next(self._ids)
        future: asyncio.Future[_Answer] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        self._unanswered.add(request_id)
        self._answered.clear()
        if request.WhichOneof("request") == "load_artifact":
            self._artifact_names[request_id] = f"artifact {request.load_artifact.filename!r}"
        try:
            if data is None:
                await self._send(request)
            else:
                chunks = _chunks(request_id, data, tool_pb2.ContextRequest, future.done)
                await self._send_all(itertools.chain((request,), chunks))
            response, assembly = await future
        finally:
            self._waiting.pop(request_id, None)
            self._artifact_names.pop(request_id, None)
            if self._assembly is not None and self._assembly.request_id == request_id:
                # Nobody waits for this load any more (the tool was cancelled, by its timeout
                # or its caller): its bytes are let go now and the chunks still to come are
                # dropped as they come; the call still waits for them before it ends.
                self._drop(self._assembly)
        if response.WhichOneof("result") == "error":
            detail = response.error
            cls = error_class_for_reason(detail.reason) or ArtifactError
            raise cls(detail.message, metadata=dict(detail.metadata))
        return response, assembly

    async def settled(self) -> None:
        """Wait until every request sent has its answer, also one nobody waits for any more
        (at most ``chunk_stall_seconds``), and no chunks of a loaded artifact are still to
        come (at once, mostly), or the caller stopped sending them (``chunk_stall_seconds``
        without one).

        A caller writes each answer once it has it, whether the callee still waits or not (it
        cannot know): a call that ended before a request the work gave up on was answered
        would end under that write, as under chunks.

        A callee waits for this before it ends its call, whatever ends it (the work's result
        or its error): a caller still sending the chunks of a load the callee refused (or
        stopped waiting for) would see its call end under its writes, which gRPC reports as
        a failure of the whole call (INTERNAL on the caller's side) instead of its status."""
        if self._unanswered:
            # A caller slower than that (or hung) gets its call ended under its answer: the
            # work's result must not wait for it without end.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.chunk_stall_seconds):
                    await self._answered.wait()
        # An answer that came may be a header, its chunks still to come.
        await self._settled.wait()

    def resolve(self, response: tool_pb2.ContextResponse) -> None:
        """Take one message of the caller: an answer, or a header or chunk of a loaded artifact
        (a waiting load is answered once its last chunk is in)."""
        try:
            self._resolve(response)
        finally:
            if self._assembly is None and self._skipping is None:
                self._stall.disarm()
                self._settled.set()
            else:
                self._stall.arm(self.chunk_stall_seconds)
                self._settled.clear()

    def _stalled(self) -> None:
        """No chunk came for ``chunk_stall_seconds`` while some were expected: a load being
        reassembled fails (its waiter reads why), and the call no longer waits for its
        chunks to end; those that still come are dropped."""
        assembly = self._assembly
        if assembly is not None:
            self._drop(assembly)
            self._fail(assembly.request_id, assembly.stalled("caller", self.chunk_stall_seconds))
        self._settled.set()

    def _drop(self, assembly: _Assembly) -> None:
        """Stop reassembling ``assembly``: its bytes are given back, the rest of its chunks
        dropped as they come."""
        self._assembly = None
        self._give_back(assembly)
        if assembly.left > 0:
            self._skipping = (assembly.request_id, assembly.left)

    def _resolve(self, response: tool_pb2.ContextResponse) -> None:
        kind = response.WhichOneof("result")
        chunk = kind == "artifact_chunk"
        # Whatever comes first for a request answers it, well or not (a chunk without its
        # header is the caller's mistake, failed below): the call no longer waits for it.
        if response.request_id in self._unanswered:
            self._unanswered.discard(response.request_id)
            if not self._unanswered:
                self._answered.set()
        skipping = self._skipping
        if skipping is not None:
            if chunk and response.request_id == skipping[0]:
                left = skipping[1] - len(response.artifact_chunk)
                self._skipping = (skipping[0], left) if left > 0 else None
                return
            self._skipping = None
        assembly = self._assembly
        if assembly is not None and (not chunk or response.request_id != assembly.request_id):
            self._assembly = None
            self._give_back(assembly)
            self._fail(assembly.request_id, assembly.cut_short())
            assembly = None
        if chunk:
            if assembly is not None:
                self._add(assembly, response.artifact_chunk)
            else:
                # A caller's mistake: a request waiting under that id would otherwise wait for
                # an answer that already came.
                self._fail(
                    response.request_id,
                    ArtifactError(
                        f"the caller sent a chunk for request {response.request_id} without "
                        "a header before it"
                    ),
                )
            return
        future = self._waiting.get(response.request_id)
        loaded = response.loaded_artifact
        waiting = future is not None and not future.done()
        # Only a load asked for chunks: a header answering another waiting request is read as
        # that request's (wrong) answer, as any answer of the wrong kind.
        if (
            kind == "loaded_artifact"
            and loaded.chunks_follow
            and (not waiting or response.request_id in self._artifact_names)
        ):
            try:
                if not waiting:
                    # Nobody waits for it any more (the tool was cancelled): its chunks are
                    # dropped as they come.
                    raise ArtifactError("no longer waited for")
                what = self._artifact_names.get(response.request_id, "the artifact")
                assembly = _Assembly(
                    response.request_id,
                    loaded.artifact,
                    loaded.size_bytes,
                    self.max_artifact_bytes,
                    what,
                )
                if self.budget is not None:
                    self.budget.take(assembly.size, f"loading {what}", {})
                    assembly.taken = assembly.size
            except ArtifactError as error:
                # Refused on its header: its chunks are dropped, never held.
                if loaded.size_bytes > 0:
                    self._skipping = (response.request_id, loaded.size_bytes)
                self._fail(response.request_id, error)
                return
            self._assembly = assembly
            self._add(assembly, b"")  # an empty artifact is complete at its header
            return
        if future is not None and waiting:
            future.set_result((response, None))

    def _add(self, assembly: _Assembly, chunk: bytes) -> None:
        try:
            assembly.add(chunk)
        except ArtifactError as error:
            self._assembly = None
            self._give_back(assembly)
            self._fail(assembly.request_id, error)
            return
        if assembly.complete:
            self._assembly = None
            # In: the tool holds the artifact from now on, no longer a transfer.
            self._give_back(assembly)
            future = self._waiting.get(assembly.request_id)
            if future is not None and not future.done():
                answer = tool_pb2.ContextResponse(request_id=assembly.request_id)
                future.set_result((answer, assembly))

    def _fail(self, request_id: int, error: BaseException) -> None:
        future = self._waiting.get(request_id)
        if future is not None and not future.done():
            future.set_exception(error)

    def _give_back(self, assembly: _Assembly) -> None:
        if self.budget is not None and assembly.taken:
            self.budget.give_back(assembly.taken)
            assembly.taken = 0

    def close(self) -> None:
        """The caller's stream ended: every request still waiting fails."""
        self._closed = True
        self._stall.disarm()
        if self._assembly is not None:
            self._give_back(self._assembly)
        self._assembly = self._skipping = None
        self._settled.set()
        self._unanswered.clear()
        self._answered.set()
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
        save = request.save_artifact
        save.filename = filename
        unfit = _fit_or_split(request, save, artifact)
        if unfit is None:
            return int((await self._channel.ask(request)).saved_version)
        size, split = unfit
        if split is None or not self._channel.caller_reassembles:
            # gRPC would refuse to send it and end the whole call; the tool reads this instead,
            # as a store's failure.
            raise ArtifactError(
                f"artifact {filename!r} is {size} bytes, over the mesh's message limit "
                f"({MAX_CONTEXT_MESSAGE_BYTES} bytes), and the caller cannot receive it in "
                "chunks (an older adk-mesh, or a Part that is not data or text); nothing was "
                "stored",
                metadata={"filename": filename, "size_bytes": str(size)},
            )
        header, data = split
        save.artifact.CopyFrom(codec.part_to_proto(header))
        save.size_bytes = len(data)
        save.chunks_follow = True
        return int((await self._channel.ask_artifact(request, data))[0].saved_version)

    async def load_artifact(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        filename: str,
        version: int | None = None,
    ) -> Part | None:
        request = tool_pb2.ContextRequest(accepts_artifact_chunks=True)
        request.load_artifact.filename = filename
        if version is not None:
            request.load_artifact.version = version
        response, assembly = await self._channel.ask_artifact(request)
        if assembly is not None:
            return assembly.part()
        loaded = response.loaded_artifact
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
        return error_answer(request.request_id, error)
    return response


def error_answer(request_id: int, error: AdkError) -> tool_pb2.ContextResponse:
    """The answer to context request ``request_id`` that fails it with ``error``."""
    answer = tool_pb2.ContextResponse(request_id=request_id)
    answer.error.reason = error.reason
    answer.error.message = error.message
    for key, value in error.metadata.items():
        answer.error.metadata[key] = value
    return answer


def _too_large(
    request: tool_pb2.ContextRequest, size: int, *, chunkable: bool = False
) -> tool_pb2.ContextResponse:
    """The answer to ``request`` when its answer (``size`` bytes) is larger than one message and
    cannot go in chunks (``chunkable``: only because the callee did not say it reassembles
    them): an error the callee reads (an ArtifactError for an artifact) and may handle, as a
    store's failure; gRPC would refuse to send it and end the whole call."""
    kind = request.WhichOneof("request")
    what = (
        f"artifact {request.load_artifact.filename!r}"
        if kind == "load_artifact"
        else f"the answer to {kind}"
    )
    message = (
        f"{what} is {size} bytes, over the mesh's message limit ({MAX_CONTEXT_MESSAGE_BYTES} "
        "bytes): the remote tool or agent cannot receive it"
    )
    if chunkable:
        message += " (its adk-mesh does not take artifacts in chunks)"
    failure = AdkError(message) if kind == "search_memory" else ArtifactError(message)
    return error_answer(request.request_id, failure)


class ContextAnswers:
    """The caller's end of a call's context requests (``CallToolInteractive``,
    ``RunDelegated``): :meth:`take` each request as it comes; the answers go through ``write``.

    ``answer`` answers one whole request (:func:`answer_context_request` over the caller's
    stores, or a wrapper of it). Artifacts are loaded and saved here, from ``artifacts`` (the
    store ``answer`` uses) for the calling session: one larger than a message loads as a
    header and chunks when the callee said it reassembles them, and a save the callee sends
    in chunks is reassembled (at most ``max_artifact_bytes``; refused on its header past that)
    and stored whole or not at all. An answer still too large for one message goes as an
    error the callee reads, never as a failure of the call.

    A save whose next chunk does not come within ``chunk_stall_seconds``
    (:data:`CHUNK_STALL_SECONDS`; a class attribute, lowered by tests) is let go and answered
    with an ArtifactError then, not when the callee next sends something (it may send nothing
    more: it was cancelled in the middle, or it hangs); its chunks that still come are
    dropped. That answer is written from a task of its own, never between the messages of
    another answer (a load's header and chunks)."""

    chunk_stall_seconds: float = CHUNK_STALL_SECONDS

    def __init__(
        self,
        answer: Callable[[tool_pb2.ContextRequest], Awaitable[tool_pb2.ContextResponse]],
        write: Callable[[tool_pb2.ContextResponse], Awaitable[None]],
        *,
        artifacts: ArtifactService | None,
        app_name: str,
        user_id: str,
        session_id: str,
        max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
    ) -> None:
        self._answer = answer
        self._write = write
        self._artifacts = artifacts
        self._ids: dict[str, Any] = {
            "app_name": app_name,
            "user_id": user_id,
            "session_id": session_id,
        }
        self.max_artifact_bytes = max_artifact_bytes
        #: The save whose chunks are coming (nothing comes between a header and its last chunk).
        self._saving: tuple[_Assembly, str] | None = None
        #: A save refused before its last chunk: the chunks still coming are dropped.
        self._refused: int | None = None
        #: Bounds the wait for the next chunk of a save.
        self._stall = _StallWatch(self._stalled)
        #: Held while an answer is written (a load's header and chunks together), so that
        #: the answer to a stalled save, written from a task, never comes between them.
        self._writing = asyncio.Lock()
        #: The tasks writing those answers (kept until done: the loop holds tasks weakly).
        self._stall_answers: set[asyncio.Task[None]] = set()

    async def take(self, request: tool_pb2.ContextRequest) -> None:
        """Answer ``request`` (written), or hold it: a chunk of a save whose last byte has not
        come yet."""
        self._stall.disarm()
        try:
            async with self._writing:
                await self._take(request)
        finally:
            if self._saving is not None:
                self._stall.arm(self.chunk_stall_seconds)

    def _stalled(self) -> None:
        """No chunk of the save being reassembled came for ``chunk_stall_seconds``: its bytes
        are let go at once, the callee is answered, and the rest of its chunks dropped."""
        saving = self._saving
        if saving is None:
            return
        assembly = saving[0]
        self._saving = None
        self._refused = assembly.request_id
        answer = error_answer(
            assembly.request_id, assembly.stalled("callee", self.chunk_stall_seconds)
        )
        task = asyncio.get_running_loop().create_task(self._write_alone(answer))
        self._stall_answers.add(task)
        task.add_done_callback(self._stall_answers.discard)

    async def _write_alone(self, answer: tool_pb2.ContextResponse) -> None:
        async with self._writing:
            # The call may have ended meanwhile (the callee gave up, its deadline passed):
            # then nobody reads this answer, and the caller's reading of the call reports why
            # it ended; this write has nothing to add.
            with contextlib.suppress(Exception):
                await self._write(answer)

    async def _take(self, request: tool_pb2.ContextRequest) -> None:
        kind = request.WhichOneof("request")
        chunk = kind == "artifact_chunk"
        saving = self._saving
        if saving is not None and not (chunk and request.request_id == saving[0].request_id):
            self._saving = None
            await self._write(error_answer(saving[0].request_id, saving[0].cut_short()))
            saving = None
        if chunk and request.request_id == self._refused:
            return
        self._refused = None
        if chunk:
            if saving is None:
                failure = ArtifactError(
                    f"no artifact is being sent with request id {request.request_id}: its "
                    "chunks must follow a save_artifact header at once"
                )
                await self._write(error_answer(request.request_id, failure))
                return
            await self._add(saving, request.artifact_chunk)
        elif kind == "save_artifact" and request.save_artifact.chunks_follow:
            await self._start_saving(request)
        elif kind == "load_artifact" and self._artifacts is not None:
            await self._load(request, self._artifacts)
        else:
            answer = await self._answer(request)
            size = answer.ByteSize()
            await self._write(
                answer if size <= MAX_CONTEXT_MESSAGE_BYTES else _too_large(request, size)
            )

    async def _start_saving(self, request: tool_pb2.ContextRequest) -> None:
        save = request.save_artifact
        try:
            if self._artifacts is None:
                raise ArtifactError("no artifact service is configured for this runner")
            assembly = _Assembly(
                request.request_id,
                save.artifact,
                save.size_bytes,
                self.max_artifact_bytes,
                f"artifact {save.filename!r}",
            )
        except ArtifactError as error:
            # Refused on its header: its chunks are dropped as they come, never held.
            self._refused = request.request_id
            await self._write(error_answer(request.request_id, error))
            return
        await self._add((assembly, save.filename), b"")  # an empty one is complete at once

    async def _add(self, saving: tuple[_Assembly, str], chunk: bytes) -> None:
        assembly, filename = saving
        self._saving = saving
        try:
            assembly.add(chunk)
            if not assembly.complete:
                return
            self._saving = None
            assert self._artifacts is not None  # checked on the header
            version = await self._artifacts.save_artifact(
                **self._ids, filename=filename, artifact=assembly.part()
            )
        except AdkError as error:
            if self._saving is not None:  # refused before its last chunk: drop the rest
                self._refused = assembly.request_id
            self._saving = None
            await self._write(error_answer(assembly.request_id, error))
            return
        await self._write(
            tool_pb2.ContextResponse(request_id=assembly.request_id, saved_version=version)
        )

    async def _load(self, request: tool_pb2.ContextRequest, artifacts: ArtifactService) -> None:
        load = request.load_artifact
        response = tool_pb2.ContextResponse(request_id=request.request_id)
        try:
            part = await artifacts.load_artifact(
                **self._ids,
                filename=load.filename,
                version=load.version if load.HasField("version") else None,
            )
        except AdkError as error:
            await self._write(error_answer(request.request_id, error))
            return
        loaded = response.loaded_artifact
        loaded.SetInParent()
        if part is None:
            await self._write(response)
            return
        unfit = _fit_or_split(response, loaded, part)
        if unfit is None:
            await self._write(response)
            return
        size, split = unfit
        if split is None or not request.accepts_artifact_chunks:
            await self._write(_too_large(request, size, chunkable=split is not None))
            return
        header, data = split
        loaded.artifact.CopyFrom(codec.part_to_proto(header))
        loaded.size_bytes = len(data)
        loaded.chunks_follow = True
        await self._write(response)
        # The callee cannot stop the chunks once the header went (it may refuse them: it
        # drops them then), so all go, as they are made.
        for message in _chunks(request.request_id, data, tool_pb2.ContextResponse, lambda: False):
            await self._write(message)


_END = object()


class _Together:
    """Context requests that go one after the other with nothing between them."""

    def __init__(self, requests: Iterable[tool_pb2.ContextRequest]) -> None:
        self.requests = requests


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
        self.channel = CallerChannel(self._send, send_all=self._send_all)
        self._requests: AsyncIterator[Any] | None = None
        self._reader: asyncio.Task[None] | None = None

    async def _send(self, request: tool_pb2.ContextRequest) -> None:
        if self._reader is None:
            self._start_reading()
        self._outgoing.put_nowait((None, self._wrap(context_request=request)))

    async def _send_all(self, requests: Iterable[tool_pb2.ContextRequest]) -> None:
        if self._reader is None:
            self._start_reading()
        # One entry, expanded as it is sent (see stream): the requests go together, in order,
        # and each is made only when the client can take it (a save's chunks).
        self._outgoing.put_nowait((None, _Together(requests)))

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
        # Read once, here: a caller says on its first message whether it reassembles saves
        # sent in chunks (an older one does not, and gets none).
        self.channel.caller_reassembles = bool(getattr(message, "accepts_artifact_chunks", False))
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
                if item is _END or isinstance(item, BaseException):
                    # The call ends, with the work's result or its error, once the caller is
                    # not in the middle of sending a loaded artifact's chunks (see
                    # CallerChannel.settled): ended under the caller's writes, it would fail
                    # as INTERNAL on the caller's side, whatever its status.
                    await self.channel.settled()
                    if isinstance(item, BaseException):
                        raise item
                    break
                if isinstance(item, _Together):
                    for request in item.requests:
                        yield self._wrap(context_request=request)
                    continue
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
