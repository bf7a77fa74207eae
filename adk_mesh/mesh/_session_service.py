"""The session API (``adk_mesh.v1.SessionService``), served by every :class:`AgentServer` next
to its ``AgentService``, over the same stores its root runs use.

What the contract promises (``protos/adk_mesh/v1/session.proto`` documents each field) and how
it is kept here:

* **Doors and identity.** Every method is a front-door call: the door keeper
  (:mod:`adk_mesh.mesh._doors`) authenticates it as it does a root ``Run`` and binds
  ``user_id`` to the principal (another user: PERMISSION_DENIED) before the servicer runs.
  Without authenticators the request's ``user_id`` is the user, so it must be set.
* **Ids** follow :mod:`adk_mesh.ids` under the server's ``max_id_chars``, artifact names the
  artifact-name rule; either is INVALID_ARGUMENT before any store is touched. ``app_name`` may
  be empty (the served app); another app is NOT_FOUND, as for a root run.
* **Writes take the session like a turn.** ``UpdateSessionState``, ``DeleteSession`` and
  ``CreateSession`` with an id wait, in this process, for the turn in flight on the session
  (the queue root runs share, :func:`~adk_mesh.mesh._session_turns.turns_for`), then claim it
  against other processes (:meth:`~adk_mesh.sessions.SessionService.claim_session`: a turn a
  replica is running refuses them at once with SESSION_CONFLICT). Waiting rather than
  refusing matches what a root run does here, so a client that patches state right after a
  turn it started never sees a spurious conflict; the wait ends with the call's deadline.
  The state update is an event appended through the store (author ``user``, invocation id
  ``p-<uuid>``, as google-adk's PATCH records it), so the stale-append check guards it too.
* **Delete takes the artifacts with it.** google-adk's ``delete_session`` leaves a session's
  artifacts behind (its artifact store knows nothing of sessions), and a later session
  created with the same id would inherit them. Here the session's own artifacts are deleted
  first, then the session (a failure in between leaves the session, so a retry finishes the
  job); the user's ``user:`` artifacts belong to every session of the user and stay.
  ``SaveArtifact`` does not wait for the session, so a save racing the delete is caught on
  both sides: the delete sweeps the artifacts again once the session is gone, and a save
  that finds no session after writing deletes what it wrote and answers SESSION_NOT_FOUND.
* **Reads that grow stream.** ``GetSession`` sends the session (state included) first, then
  its events in responses of at most :data:`EVENTS_BYTES_PER_RESPONSE` (one larger event
  alone); an event too large for a message whole goes abridged and is named, as ``Run``
  streams it. ``ListSessions`` reads the store a page of :data:`SESSIONS_PER_RESPONSE`
  sessions at a time (keyset pagination; each session with its merged state, as google-adk
  lists them) and sends each page before it reads the next, in responses of at most
  :data:`EVENTS_BYTES_PER_RESPONSE` (one larger session alone); a session too large for a
  message with its state goes without it and is named. ``page_size`` stops the call early
  with a ``next_page_token``.
* **An update is answered or not written.** ``UpdateSessionState``'s answer holds the whole
  state after it and the event, and is built (and its size checked against
  :data:`MAX_UPDATE_RESPONSE_BYTES`) before the append: an update that could not be
  answered is refused with INVALID_ARGUMENT having written nothing, rather than stored and
  then failed by gRPC (RESOURCE_EXHAUSTED), which a client would retry into a second append.
  INVALID_ARGUMENT, not RESOURCE_EXHAUSTED: retrying the same update cannot succeed.
* **An update with an ``event_id`` is safe to retry.** An answer lost on the way (a
  deadline, a dropped connection, a client's receive limit) leaves the client unsure
  whether the update was written. The client-chosen ``event_id`` becomes the event's id,
  which a session holds once: the store refuses a retry's append, and the retry is answered
  from what the first call stored (the event, the session as it is now), writing nothing.
  The id held by another event (another delta, or a turn's event) is ALREADY_EXISTS.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import grpc.aio
from google.protobuf import timestamp_pb2
from opentelemetry import trace

from adk_mesh import codec
from adk_mesh._confirmation import runtime_claim
from adk_mesh.artifacts import ArtifactService
from adk_mesh.artifacts.base import is_user_scoped
from adk_mesh.errors import (
    AdkJSONError,
    AlreadyExistsError,
    ArtifactNotFoundError,
    ArtifactTooLargeError,
    ConfigError,
    InvalidArgumentError,
    NotFoundError,
    SessionNotFoundError,
)
from adk_mesh.ids import check_artifact_name, check_id, random_uuid, shown
from adk_mesh.mesh._artifact_budget import (
    DEFAULT_MAX_ARTIFACT_BYTES,
    IN_FLIGHT_ARTIFACTS,
    MAX_ARTIFACT_BYTES_LIMIT,
    service_budget,
)
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES
from adk_mesh.mesh._session_turns import turns_for
from adk_mesh.mesh._status import error_boundary
from adk_mesh.sessions import SessionService
from adk_mesh.sessions._common import MAX_EVENT_ID_CHARS, check_event_id
from adk_mesh.sessions.base import Session
from adk_mesh.state import TEMP_PREFIX
from adk_mesh.telemetry._propagation import CONVERSATION_ID, INVOCATION_ID
from adk_mesh.types import Event, EventActions, Part
from adk_mesh.v1 import content_pb2, event_pb2, session_pb2, session_pb2_grpc

if TYPE_CHECKING:
    from adk_mesh.mesh.agent_server import AgentServer

__all__ = [
    "ARTIFACT_CHUNK_BYTES",
    "DEFAULT_MAX_ARTIFACT_BYTES",
    "EVENTS_BYTES_PER_RESPONSE",
    "IN_FLIGHT_ARTIFACTS",
    "MAX_ARTIFACT_BYTES_LIMIT",
    "SERVICE_NAME",
    "SESSIONS_PER_RESPONSE",
    "SessionServicer",
]

logger = logging.getLogger("adk_mesh.mesh")

SERVICE_NAME: str = session_pb2.DESCRIPTOR.services_by_name["SessionService"].full_name

#: A GetSession response is at most this many bytes, unless it holds one larger event alone:
#: within gRPC's default 4 MiB receive limit, so a client that never raised it reads every
#: history whose events are each smaller, and the first events reach the client early.
EVENTS_BYTES_PER_RESPONSE = 4 * 1024 * 1024 - 1024
#: What an entry of a repeated field costs beyond its content: its tag and its length.
_ENTRY_FRAMING = 1 + 5
#: An event whose encoding is larger than this goes abridged: whole, it would not fit a
#: message next to the response's other fields.
MAX_EVENT_BYTES = MAX_MESSAGE_BYTES - 64 * 1024
#: Sessions in one page the ListSessions servicer reads from the store, and at most in one
#: response (a page goes in more when its sessions' states need more bytes).
SESSIONS_PER_RESPONSE = 1000
#: A listed session whose encoding (its state included) is larger than this goes without its
#: state: whole, it would not fit a message next to the response's other fields.
MAX_LISTED_SESSION_BYTES = MAX_MESSAGE_BYTES - 64 * 1024
#: The largest UpdateSessionState answer (the state after the update and the event): the
#: message limit, less room for what may change between the check and the answer.
MAX_UPDATE_RESPONSE_BYTES = MAX_MESSAGE_BYTES - 64 * 1024

#: The bytes of an artifact in one data message of LoadArtifactStream (and of the clients'
#: SaveArtifactStream): far below any message limit, and few enough that a stream holds the
#: artifact once, not its messages too.
ARTIFACT_CHUNK_BYTES = 1024 * 1024
#: A streamed read's response message (GetSessionResponse, ListSessionsResponse).
R = TypeVar("R", session_pb2.GetSessionResponse, session_pb2.ListSessionsResponse)

#: Author and invocation-id prefix of the event that records a state update (google-adk's
#: PATCH writes the same).
UPDATE_AUTHOR = "user"
UPDATE_INVOCATION_PREFIX = "p-"


@dataclass(frozen=True)
class _SessionKey:
    app_name: str
    user_id: str
    session_id: str


class SessionServicer(session_pb2_grpc.SessionServiceServicer):  # type: ignore[misc]
    """Thin adapter from ``SessionService`` to an :class:`AgentServer`'s stores: checks the
    request, calls the stores, maps errors once (:func:`error_boundary`)."""

    def __init__(
        self,
        server: AgentServer,
        *,
        max_artifact_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
        max_artifact_bytes_in_flight: int | None = None,
    ) -> None:
        #: What the artifact streams (and the server's delegated runs) hold at once (see
        #: _artifact_budget); a limit out of bounds is a ConfigError.
        self.artifact_budget = service_budget(max_artifact_bytes, max_artifact_bytes_in_flight)
        self._server = server
        self._max_artifact_bytes = max_artifact_bytes

    # --- requests ---------------------------------------------------------------------------

    @property
    def _sessions(self) -> SessionService:
        return self._server.session_service

    @property
    def _artifacts(self) -> ArtifactService | None:
        return self._server.artifact_service

    def _check_id(self, what: str, value: str) -> None:
        check_id(what, value, max_chars=self._server.limits.max_id_chars)

    def _app(self, app_name: str) -> str:
        served = self._server.app_name
        if app_name:
            self._check_id("app_name", app_name)
            if app_name != served:
                raise NotFoundError(
                    f"app {app_name!r} is not served here; this service serves {served!r} "
                    "(or leave app_name empty)"
                )
        return served

    def _user(self, user_id: str) -> str:
        if not user_id:
            raise InvalidArgumentError("user_id is empty; name the user")
        self._check_id("user_id", user_id)
        return user_id

    def _key(self, request: Any) -> _SessionKey:
        """The session a request names, its ids checked."""
        app_name = self._app(request.app_name)
        user_id = self._user(request.user_id)
        if not request.session_id:
            raise InvalidArgumentError("session_id is empty; name the session")
        self._check_id("session_id", request.session_id)
        _annotate(session_id=request.session_id)
        return _SessionKey(app_name, user_id, request.session_id)

    def _filename(self, filename: str) -> str:
        check_artifact_name(filename, max_chars=self._server.limits.max_id_chars)
        return filename

    # --- stores -----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _held(self, key: _SessionKey) -> AsyncIterator[None]:
        """Hold the session as a root turn does: wait for the turn in flight on it in this
        process, then claim it against other processes (refused at once when one holds it)."""
        store = self._sessions
        async with (
            turns_for(store).hold(key.app_name, key.user_id, key.session_id),
            store.claim_session(
                app_name=key.app_name, user_id=key.user_id, session_id=key.session_id
            ),
        ):
            yield

    async def _existing(self, key: _SessionKey) -> Session | None:
        """The session without its events (state and version only), or None."""
        return await self._sessions.get_session(
            app_name=key.app_name,
            user_id=key.user_id,
            session_id=key.session_id,
            num_recent_events=0,
        )

    async def _required(self, key: _SessionKey) -> Session:
        session = await self._existing(key)
        if session is None:
            raise _session_not_found(key)
        return session

    async def _delete_own_artifacts(self, key: _SessionKey) -> None:
        """Delete the session's own artifacts; the user's ``user:`` ones stay."""
        artifacts = self._artifacts
        if artifacts is None:
            return
        for filename in await artifacts.list_artifact_keys(
            app_name=key.app_name, user_id=key.user_id, session_id=key.session_id
        ):
            if not is_user_scoped(filename):
                await artifacts.delete_artifact(
                    app_name=key.app_name,
                    user_id=key.user_id,
                    session_id=key.session_id,
                    filename=filename,
                )

    # --- methods ----------------------------------------------------------------------------

    async def ListApps(
        self, request: session_pb2.ListAppsRequest, context: grpc.aio.ServicerContext
    ) -> session_pb2.ListAppsResponse:
        async with error_boundary(context, "ListApps"):
            agent = self._server.agent
            return session_pb2.ListAppsResponse(
                apps=[
                    session_pb2.AppSummary(
                        name=self._server.app_name,
                        root_agent_name=agent.name,
                        description=agent.description,
                    )
                ]
            )
        raise AssertionError("unreachable: error_boundary aborts")  # pragma: no cover

    async def CreateSession(
        self, request: session_pb2.CreateSessionRequest, context: grpc.aio.ServicerContext
    ) -> session_pb2.CreateSessionResponse:
        async with error_boundary(context, "CreateSession"):
            app_name = self._app(request.app_name)
            user_id = self._user(request.user_id)
            session_id = request.session_id or None
            if session_id is not None:
                self._check_id("session_id", session_id)
                _annotate(session_id=session_id)
            state = codec.state_from_map(request.state, request.state_json)
            events = [_event_from_proto(event) for event in request.events]
            _check_initial_events(events)
            async with contextlib.AsyncExitStack() as held:
                if session_id is not None:
                    # Nobody else's yet, but a root run may get-or-create the same id now.
                    await held.enter_async_context(
                        self._held(_SessionKey(app_name, user_id, session_id))
                    )
                session = await self._sessions.create_session(
                    app_name=app_name, user_id=user_id, session_id=session_id, state=state
                )
                _annotate(session_id=session.id)
                try:
                    for event in events:
                        await self._sessions.append_event(session, event)
                except BaseException:
                    # A session is made whole or not at all (the app: and user: keys the
                    # state or the events wrote stay: they are shared with other sessions).
                    await self._sessions.delete_session(
                        app_name=app_name, user_id=user_id, session_id=session.id
                    )
                    raise
            return session_pb2.CreateSessionResponse(session=_session_to_proto(session))
        raise AssertionError("unreachable: error_boundary aborts")  # pragma: no cover

    async def GetSession(
        self, request: session_pb2.GetSessionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[session_pb2.GetSessionResponse]:
        async with error_boundary(context, "GetSession"):
            key = self._key(request)
            num_recent_events: int | None = None
            if request.HasField("num_recent_events"):
                num_recent_events = request.num_recent_events
                if num_recent_events < 0:
                    raise InvalidArgumentError(
                        f"num_recent_events is {num_recent_events}; send 0 or more, or leave "
                        "it unset for every event"
                    )
            after = _after(request.after) if request.HasField("after") else None
            session = await self._sessions.get_session(
                app_name=key.app_name,
                user_id=key.user_id,
                session_id=key.session_id,
                num_recent_events=num_recent_events,
                after=after,
            )
            if session is None:
                raise _session_not_found(key)
            for response in _session_responses(session):
                yield response

    async def ListSessions(
        self, request: session_pb2.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[session_pb2.ListSessionsResponse]:
        async with error_boundary(context, "ListSessions"):
            app_name = self._app(request.app_name)
            user_id = self._user(request.user_id)
            if request.page_size < 0:
                raise InvalidArgumentError(
                    f"page_size is {request.page_size}; send 1 or more, or 0 for every session"
                )
            # Sessions this call may still send (None: all of them).
            remaining: int | None = request.page_size or None
            token = request.page_token or None
            while True:
                # One store page at a time, sent (in responses bounded by bytes) before the
                # next is read: memory does not grow with the user's sessions, and the
                # first arrive early.
                page = await self._sessions.list_sessions_page(
                    app_name=app_name,
                    user_id=user_id,
                    page_size=min(SESSIONS_PER_RESPONSE, remaining or SESSIONS_PER_RESPONSE),
                    page_token=token,
                )
                token = page.next_page_token or None
                if remaining is not None:
                    remaining -= len(page.sessions)
                responses = _listed_responses(page.sessions)
                response = next(responses)
                # The page's last response is held back until it is known to be the last,
                # so that it can carry the token.
                for following in responses:
                    yield response
                    response = following
                if token is None:
                    yield response
                    return
                if remaining == 0:
                    response.next_page_token = token
                    yield response
                    return
                yield response

    async def DeleteSession(
        self, request: session_pb2.DeleteSessionRequest, context: grpc.aio.ServicerContext
    ) -> session_pb2.DeleteSessionResponse:
        async with error_boundary(context, "DeleteSession"):
            key = self._key(request)
            async with self._held(key):
                if await self._existing(key) is None:
                    if request.allow_missing:
                        return session_pb2.DeleteSessionResponse()
                    raise _session_not_found(key)
                # The artifacts first: a failure leaves the session, so a retry ends the job.
                await self._delete_own_artifacts(key)
                await self._sessions.delete_session(
                    app_name=key.app_name, user_id=key.user_id, session_id=key.session_id
                )
                # SaveArtifact does not wait for the session: a save that landed after the
                # listing above would outlive it. Once the session is gone, a save either
                # lands before this second sweep (and goes with it) or finds no session
                # when it checks after writing (and undoes itself).
                await self._delete_own_artifacts(key)
            return session_pb2.DeleteSessionResponse()
        raise AssertionError("unreachable: error_boundary aborts")  # pragma: no cover

    async def UpdateSessionState(
        self, request: session_pb2.UpdateSessionStateRequest, context: grpc.aio.ServicerContext
    ) -> session_pb2.UpdateSessionStateResponse:
        async with error_boundary(context, "UpdateSessionState") as call:
            key = self._key(request)
            delta = codec.state_from_map(
                request.state_delta, request.state_delta_json, field="state_delta"
            )
            # temp: keys live for one invocation; this update has none to give them to.
            delta = {k: v for k, v in delta.items() if not k.startswith(TEMP_PREFIX)}
            event = Event(
                author=UPDATE_AUTHOR,
                invocation_id=f"{UPDATE_INVOCATION_PREFIX}{random_uuid()}",
                actions=EventActions(state_delta=delta),
            )
            if request.event_id:
                # The client's idempotency key: the session holds an event id once, so a
                # retry of a written update finds its event rather than appending again.
                _check_update_event_id(request.event_id)
                event = event.model_copy(update={"id": request.event_id})
            call.invocation_id = event.invocation_id
            _annotate(invocation_id=event.invocation_id)
            async with self._held(key):
                session = await self._required(key)
                try:
                    # The answer is built, and its size checked, before the write: an answer
                    # gRPC refused to send would report a failure for a stored update, which
                    # a client's retry would append twice. The session holds the state as
                    # the append leaves it, the event is stored as it is; only the version
                    # moves.
                    response = _update_response(session, event)
                    stored = await self._sessions.append_event(session, event)
                except (AlreadyExistsError, InvalidArgumentError):
                    # A retry of an update an earlier call wrote: the store refuses its id
                    # again (or its answer, the state having grown since, is too large).
                    if not request.event_id:
                        raise
                    replayed = await self._replayed(key, event)
                    if replayed is None:
                        raise
                    call.invocation_id = replayed.event.invocation_id
                    _annotate(invocation_id=replayed.event.invocation_id)
                    return replayed
            response.session.last_update_time = session.last_update_time
            if stored is not event:  # a store that copied it: answer what it stored
                response.event.Clear()
                codec.event_to_proto(stored, into=response.event)
            return response
        raise AssertionError("unreachable: error_boundary aborts")  # pragma: no cover

    async def _replayed(
        self, key: _SessionKey, update: Event
    ) -> session_pb2.UpdateSessionStateResponse | None:
        """The answer to a retry of ``update`` whose event id an earlier call stored: that
        event as stored and the session as it is now; None when the session holds no event
        of the id (the update was not written: the caller's own error stands).

        Read only on a refused write, so the cost of reading the history is a retry's. The
        caller holds the session, so nothing is appended between the refusal and this read.

        Raises:
            AlreadyExistsError: the id is taken by another event (another delta, or an event
                a turn recorded): a retry must repeat its update exactly.
            InvalidArgumentError: the answer no longer fits a message (later writes grew
                the state); the update is written, GetSession reads it.
        """
        session = await self._sessions.get_session_shared(
            app_name=key.app_name, user_id=key.user_id, session_id=key.session_id
        )
        if session is None:
            return None
        stored = next((event for event in session.events if event.id == update.id), None)
        if stored is None:
            return None
        if not _same_update(stored, update):
            raise AlreadyExistsError(
                f"session {shown(key.session_id)} already holds event {shown(update.id)}, "
                "which is not this update (another delta, or not a state update): nothing was "
                "written; a retry sends the same delta with the same event_id, a new update "
                "a new event_id",
                metadata={"session_id": key.session_id, "event_id": update.id},
            )
        response, size = _update_answer(session, stored)
        if size > MAX_UPDATE_RESPONSE_BYTES:
            raise InvalidArgumentError(
                f"the update with event_id {shown(update.id)} was written by an earlier call, "
                f"but its answer (the session's state now and the delta) would be {size} "
                f"bytes, over the {MAX_UPDATE_RESPONSE_BYTES} bytes a message may carry; read "
                "the session with GetSession",
                metadata={"session_id": key.session_id, "event_id": update.id},
            )
        return response

    async def ListArtifactKeys(
        self,
        request: session_pb2.SessionServiceListArtifactKeysRequest,
        context: grpc.aio.ServicerContext,
    ) -> session_pb2.SessionServiceListArtifactKeysResponse:
        async with error_boundary(context, "ListArtifactKeys"):
            key = self._key(request)
            await self._required(key)
            artifacts = self._artifacts
            filenames = (
                []
                if artifacts is None
                else await artifacts.list_artifact_keys(
                    app_name=key.app_name, user_id=key.user_id, session_id=key.session_id
                )
            )
            return session_pb2.SessionServiceListArtifactKeysResponse(filenames=filenames)
        raise AssertionError("unreachable: error_boundary aborts")  # pragma: no cover

    async def LoadArtifact(
        self,
        request: session_pb2.SessionServiceLoadArtifactRequest,
        context: grpc.aio.ServicerContext,
    ) -> session_pb2.SessionServiceLoadArtifactResponse:
        async with error_boundary(context, "LoadArtifact"):
            key, filename, version, part = await self._loaded(request)
            response = session_pb2.SessionServiceLoadArtifactResponse(
                artifact=codec.part_to_proto(part), version=version
            )
            _check_sendable(response, key, filename, part)
            return response
        raise AssertionError("unreachable: error_boundary aborts")  # pragma: no cover

    async def LoadArtifactStream(
        self,
        request: session_pb2.SessionServiceLoadArtifactStreamRequest,
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[session_pb2.SessionServiceLoadArtifactStreamResponse]:
        async with error_boundary(context, "LoadArtifactStream"):
            key, filename, version, part = await self._loaded(request)
            # The header's Part is built without the data, and each chunk is a slice of the
            # stored bytes: the artifact is held once, whatever its size.
            if part.inline_data is not None:
                data = part.inline_data.data
                described = content_pb2.Part(
                    inline_data=content_pb2.Blob(mime_type=part.inline_data.mime_type)
                )
            else:
                data = (part.text or "").encode()
                described = content_pb2.Part(text="")
            # Held while a client reads (however slowly): counted until the stream ends.
            with self.artifact_budget.holding(
                len(data),
                f"loading artifact {shown(filename)} version {version}",
                {"session_id": key.session_id, "filename": filename},
            ):
                yield session_pb2.SessionServiceLoadArtifactStreamResponse(
                    header=session_pb2.LoadArtifactStreamHeader(
                        version=version, artifact=described, size_bytes=len(data)
                    )
                )
                view = memoryview(data)
                for start in range(0, len(data), ARTIFACT_CHUNK_BYTES):
                    yield session_pb2.SessionServiceLoadArtifactStreamResponse(
                        data=bytes(view[start : start + ARTIFACT_CHUNK_BYTES])
                    )

    async def _loaded(self, request: Any) -> tuple[_SessionKey, str, int, Part]:
        """The artifact a LoadArtifact or LoadArtifactStream request names: its session, its
        name, the version loaded and the Part (NOT_FOUND for an unknown one)."""
        key = self._key(request)
        filename = self._filename(request.filename)
        version: int | None = None
        if request.HasField("version"):
            version = request.version
            if version < 0:
                raise InvalidArgumentError(
                    f"version is {version}; versions are numbered from 1 (leave it unset "
                    "for the latest)"
                )
        await self._required(key)
        artifacts = self._artifacts
        if artifacts is None:
            raise _artifact_not_found(key, filename, version)
        if version is None:
            # Read the version first, so the answer names the one it loaded.
            versions = await artifacts.list_versions(
                app_name=key.app_name,
                user_id=key.user_id,
                session_id=key.session_id,
                filename=filename,
            )
            if not versions:
                raise _artifact_not_found(key, filename, None)
            version = versions[-1]
        part = await artifacts.load_artifact(
            app_name=key.app_name,
            user_id=key.user_id,
            session_id=key.session_id,
            filename=filename,
            version=version,
        )
        if part is None:
            raise _artifact_not_found(key, filename, version)
        return key, filename, version, part

    async def SaveArtifact(
        self,
        request: session_pb2.SessionServiceSaveArtifactRequest,
        context: grpc.aio.ServicerContext,
    ) -> session_pb2.SessionServiceSaveArtifactResponse:
        async with error_boundary(context, "SaveArtifact"):
            key = self._key(request)
            filename = self._filename(request.filename)
            if not request.HasField("artifact") or request.artifact.WhichOneof("data") is None:
                raise InvalidArgumentError("the artifact is empty; send inline data or text")
            part = codec.part_from_proto(request.artifact)
            artifacts = self._saving_store()
            await self._required(key)
            version = await self._saved(artifacts, key, filename, part)
            return session_pb2.SessionServiceSaveArtifactResponse(version=version)
        raise AssertionError("unreachable: error_boundary aborts")  # pragma: no cover

    async def SaveArtifactStream(
        self,
        requests: AsyncIterator[session_pb2.SessionServiceSaveArtifactStreamRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[session_pb2.SessionServiceSaveArtifactStreamResponse]:
        async with error_boundary(context, "SaveArtifactStream"):
            first = await anext(aiter(requests), None)
            if first is None or first.WhichOneof("chunk") != "header":
                raise InvalidArgumentError(
                    "SaveArtifactStream's first message is its header (the ids, the name, the "
                    "artifact without its data, its size); the data follows it"
                )
            header = first.header
            key = self._key(header)
            filename = self._filename(header.filename)
            kind = header.artifact.WhichOneof("data")
            if kind == "inline_data":
                mime_type: str | None = header.artifact.inline_data.mime_type
                carried = bool(header.artifact.inline_data.data)
            elif kind == "text":
                mime_type, carried = None, bool(header.artifact.text)
            else:
                raise InvalidArgumentError(
                    "the header's artifact holds no kind; send inline data with its MIME type "
                    'or text set to "", the data in the messages after it'
                )
            if carried:
                raise InvalidArgumentError(
                    "the header's artifact holds data; send it in the messages after the header"
                )
            size = header.size_bytes
            if size < 0:
                raise InvalidArgumentError(f"size_bytes is {size}; send the data's size")
            if size > self._max_artifact_bytes:
                # Refused before a byte is read: the client learns at once, and the service
                # never holds what it will not store.
                raise InvalidArgumentError(
                    f"artifact {shown(filename)} is {size} bytes, over the "
                    f"{self._max_artifact_bytes} bytes this service stores in one artifact; "
                    "nothing was stored (save it in smaller artifacts)",
                    metadata={
                        "session_id": key.session_id,
                        "filename": filename,
                        "size_bytes": str(size),
                        "limit_bytes": str(self._max_artifact_bytes),
                    },
                )
            artifacts = self._saving_store()
            await self._required(key)
            # The bytes are counted before the first is read: refused, the client has sent
            # nothing but its header, and the service holds nothing.
            with self.artifact_budget.holding(
                size,
                f"saving artifact {shown(filename)}",
                {"session_id": key.session_id, "filename": filename},
            ):
                # Stored only once every byte is in: a stream cut short (a cancel, a dropped
                # connection) ends here, in the read, and leaves nothing behind.
                data = await _received(requests, size)
                # Again, now the bytes are in: the session may have gone while they came.
                await self._required(key)
                if mime_type is not None:
                    part = Part.from_inline_data(mime_type, data)
                else:
                    try:
                        text = data.decode()
                    except UnicodeDecodeError as error:
                        raise InvalidArgumentError(
                            f"the text artifact's bytes are not UTF-8 (at byte {error.start}); "
                            "nothing was stored"
                        ) from None
                    part = Part.from_text(text)
                del data  # the Part holds the bytes (or the text) now
                version = await self._saved(artifacts, key, filename, part)
                del part
            yield session_pb2.SessionServiceSaveArtifactStreamResponse(version=version)

    def _saving_store(self) -> ArtifactService:
        artifacts = self._artifacts
        if artifacts is None:
            raise ConfigError(
                "this service has no artifact store; start it with one to save artifacts"
            )
        return artifacts

    async def _saved(
        self, artifacts: ArtifactService, key: _SessionKey, filename: str, part: Part
    ) -> int:
        """Store ``part`` as the name's next version, once the session was found; its
        number."""
        version = await artifacts.save_artifact(
            app_name=key.app_name,
            user_id=key.user_id,
            session_id=key.session_id,
            filename=filename,
            artifact=part,
        )
        if not is_user_scoped(filename) and await self._existing(key) is None:
            # DeleteSession ran while this save wrote (a save does not wait for the
            # session as a turn does): what it wrote would be inherited by a later
            # session of the same id. Every version of the name goes, as the session's
            # other artifacts went; a user: artifact is the user's and stays.
            await artifacts.delete_artifact(
                app_name=key.app_name,
                user_id=key.user_id,
                session_id=key.session_id,
                filename=filename,
            )
            raise _session_not_found(key)
        return version

    async def ListArtifactVersions(
        self,
        request: session_pb2.SessionServiceListArtifactVersionsRequest,
        context: grpc.aio.ServicerContext,
    ) -> session_pb2.SessionServiceListArtifactVersionsResponse:
        async with error_boundary(context, "ListArtifactVersions"):
            key = self._key(request)
            filename = self._filename(request.filename)
            await self._required(key)
            artifacts = self._artifacts
            response = session_pb2.SessionServiceListArtifactVersionsResponse()
            if artifacts is None:
                return response
            if type(artifacts).list_version_metadata is ArtifactService.list_version_metadata:
                # A store that keeps no metadata apart would load every version to describe
                # it: list the numbers only, and a client loads the versions it describes.
                response.versions.extend(
                    await artifacts.list_versions(
                        app_name=key.app_name,
                        user_id=key.user_id,
                        session_id=key.session_id,
                        filename=filename,
                    )
                )
                return response
            for info in await artifacts.list_version_metadata(
                app_name=key.app_name,
                user_id=key.user_id,
                session_id=key.session_id,
                filename=filename,
            ):
                response.versions.append(info.version)
                described = response.metadata.add(version=info.version, size_bytes=info.size)
                if info.mime_type is not None:
                    described.mime_type = info.mime_type
                if info.create_time is not None:
                    described.create_time = info.create_time
            return response
        raise AssertionError("unreachable: error_boundary aborts")  # pragma: no cover

    async def DeleteArtifact(
        self,
        request: session_pb2.SessionServiceDeleteArtifactRequest,
        context: grpc.aio.ServicerContext,
    ) -> session_pb2.SessionServiceDeleteArtifactResponse:
        async with error_boundary(context, "DeleteArtifact"):
            key = self._key(request)
            filename = self._filename(request.filename)
            await self._required(key)
            artifacts = self._artifacts
            exists = artifacts is not None and bool(
                await artifacts.list_versions(
                    app_name=key.app_name,
                    user_id=key.user_id,
                    session_id=key.session_id,
                    filename=filename,
                )
            )
            if not exists:
                if request.allow_missing:
                    return session_pb2.SessionServiceDeleteArtifactResponse()
                raise _artifact_not_found(key, filename, None)
            assert artifacts is not None
            await artifacts.delete_artifact(
                app_name=key.app_name,
                user_id=key.user_id,
                session_id=key.session_id,
                filename=filename,
            )
            return session_pb2.SessionServiceDeleteArtifactResponse()
        raise AssertionError("unreachable: error_boundary aborts")  # pragma: no cover


def _annotate(*, session_id: str = "", invocation_id: str = "") -> None:
    """Put the session (``gen_ai.conversation.id``) or the update's invocation id on the
    call's server span, as a root run's span carries them."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    if session_id:
        span.set_attribute(CONVERSATION_ID, session_id)
    if invocation_id:
        span.set_attribute(INVOCATION_ID, invocation_id)


def _session_not_found(key: _SessionKey) -> SessionNotFoundError:
    return SessionNotFoundError(
        f"session {shown(key.session_id)} of user {shown(key.user_id)} in app "
        f"{key.app_name!r} does not exist",
        metadata={"session_id": key.session_id},
    )


def _artifact_not_found(
    key: _SessionKey, filename: str, version: int | None
) -> ArtifactNotFoundError:
    which = "" if version is None else f" version {version}"
    metadata = {"session_id": key.session_id, "filename": filename}
    if version is not None:
        metadata["version"] = str(version)
    return ArtifactNotFoundError(
        f"artifact {shown(filename)}{which} of session {shown(key.session_id)} does not exist",
        metadata=metadata,
    )


def _check_sendable(
    response: session_pb2.SessionServiceLoadArtifactResponse,
    key: _SessionKey,
    filename: str,
    part: Part,
) -> None:
    """Refuse an artifact whose answer is larger than one message of the mesh (a tool may save
    any size in process): gRPC would refuse to send it with its own RESOURCE_EXHAUSTED, which
    names nothing and reads as "overloaded". FAILED_PRECONDITION: the request is sound, but
    this artifact as stored cannot cross; asking again cannot help. The metadata carries its
    MIME type, so a client may still describe the version.

    Raises:
        ArtifactTooLargeError: the answer is over :data:`MAX_MESSAGE_BYTES`.
    """
    size = response.ByteSize()
    if size <= MAX_MESSAGE_BYTES:
        return
    metadata = {
        "session_id": key.session_id,
        "filename": filename,
        "version": str(response.version),
        "size_bytes": str(size),
        "limit_bytes": str(MAX_MESSAGE_BYTES),
    }
    if part.inline_data is not None:
        metadata["mime_type"] = part.inline_data.mime_type
    raise ArtifactTooLargeError(
        f"artifact {shown(filename)} version {response.version} of session "
        f"{shown(key.session_id)} is {size} bytes encoded, over the mesh's message limit "
        f"({MAX_MESSAGE_BYTES} bytes): LoadArtifact cannot send it; load it with "
        "LoadArtifactStream, which sends it in chunks",
        metadata=metadata,
    )


async def _received(
    requests: AsyncIterator[session_pb2.SessionServiceSaveArtifactStreamRequest], size: int
) -> bytes:
    """The data of a SaveArtifactStream after its header: exactly ``size`` bytes, or
    INVALID_ARGUMENT (a message that is not data, more bytes, or fewer when the client
    closed its side)."""
    received = bytearray()
    async for request in requests:
        if request.WhichOneof("chunk") != "data":
            raise InvalidArgumentError(
                "SaveArtifactStream holds one header, in its first message; the others carry "
                "data; nothing was stored"
            )
        if len(received) + len(request.data) > size:
            raise InvalidArgumentError(
                f"the stream carries more than the {size} bytes its header announced; "
                "nothing was stored"
            )
        received += request.data
    if len(received) != size:
        raise InvalidArgumentError(
            f"the stream ended after {len(received)} of the {size} bytes its header "
            "announced; nothing was stored"
        )
    return bytes(received)


def _after(message: timestamp_pb2.Timestamp) -> datetime:
    """``GetSessionRequest.after`` as a datetime; INVALID_ARGUMENT when no datetime holds it."""
    try:
        return codec.timestamp_to_datetime(message)
    except InvalidArgumentError as error:
        raise InvalidArgumentError(f"GetSessionRequest.after: {error.message}") from None


def _event_from_proto(message: event_pb2.Event) -> Event:
    """An initial event of CreateSession (dated now when it has no timestamp);
    INVALID_ARGUMENT, naming the event, when it cannot be read (a timestamp out of range,
    say)."""
    try:
        event = codec.event_from_proto(message)
    except InvalidArgumentError as error:
        raise InvalidArgumentError(
            f"CreateSessionRequest.events holds event {shown(message.id)}: {error.message}"
        ) from None
    if not message.HasField("timestamp"):
        # Dated now, as google-adk's Event dates itself when made (and as an event without an
        # id gets one): read as it comes, an unset Timestamp is 1970-01-01.
        event = event.model_copy(update={"timestamp": datetime.now(UTC)})
    return event


def _check_initial_events(events: list[Event]) -> None:
    """Refuse, before the session is created, initial events that claim what only the runtime
    writes (:func:`~adk_mesh._confirmation.runtime_claim`: a forged confirmation request would
    run a tool call no model made), and those the store would refuse midway: by then the
    ``app:`` and ``user:`` keys of the state and of the events before would be written, and
    they outlive the session the failure deletes."""
    seen: set[str] = set()
    for index, event in enumerate(events):
        claim = runtime_claim(event)
        if claim is not None:
            raise InvalidArgumentError(
                f"CreateSessionRequest.events[{index}] holds {claim}, which only the runtime "
                "writes: a session's history is restored from its messages, tool calls and "
                "results"
            )
        if event.id and event.id in seen:
            raise InvalidArgumentError(
                f"CreateSessionRequest.events holds the event id {shown(event.id)} twice"
            )
        try:
            # The id every store keeps (PostgreSQL text holds no NUL; its index bounds the
            # length): one store must not fail where the others store the event.
            check_event_id(event.id)
        except InvalidArgumentError as error:
            problem = error.message.removesuffix("; nothing was written")
            raise InvalidArgumentError(
                f"CreateSessionRequest.events: {problem}; send ids every store keeps (or none: "
                "each event then gets a UUID)"
            ) from None
        seen.add(event.id)


def _check_update_event_id(event_id: str) -> None:
    """Refuse, before the session is touched, an ``event_id`` not every store keeps."""
    try:
        check_event_id(event_id)
    except InvalidArgumentError as error:
        problem = error.message.removesuffix("; nothing was written")
        raise InvalidArgumentError(
            f"UpdateSessionStateRequest.event_id: {problem}; send an id every store keeps (at "
            f"most {MAX_EVENT_ID_CHARS} characters, no NUL), or none for a UUID"
        ) from None


def _same_update(stored: Event, update: Event) -> bool:
    """Whether ``stored`` is the event an earlier call wrote for ``update``: a state update
    (author, invocation-id prefix, no content) with the same delta. The invocation id and
    the timestamp are the first call's own."""
    return (
        stored.author == UPDATE_AUTHOR
        and stored.invocation_id.startswith(UPDATE_INVOCATION_PREFIX)
        and stored.content is None
        and stored.actions == update.actions
    )


def _session_to_proto(session: Session) -> session_pb2.Session:
    """The session without its events; ``temp:`` keys (an invocation's) never leave."""
    message = session_pb2.Session(
        app_name=session.app_name,
        user_id=session.user_id,
        id=session.id,
        last_update_time=session.last_update_time,
    )
    codec.state_to_map(message.state, _lasting(session.state), message.state_json)
    return message


def _update_response(session: Session, event: Event) -> session_pb2.UpdateSessionStateResponse:
    """The UpdateSessionState answer for appending ``event`` to ``session``, before the
    append: the state as the append will leave it (the store applies the delta to the
    session object just so) and the event.

    Raises:
        InvalidArgumentError: the answer is larger than :data:`MAX_UPDATE_RESPONSE_BYTES`
            (nothing is written then).
    """
    after = {**session.state, **event.actions.state_delta}
    response, size = _update_answer(session.model_copy(update={"state": after}), event)
    if size > MAX_UPDATE_RESPONSE_BYTES:
        raise InvalidArgumentError(
            f"the update was not written: its answer (the session's state after it, "
            f"{response.session.ByteSize()} bytes, and the delta) would be {size} bytes, over "
            f"the {MAX_UPDATE_RESPONSE_BYTES} bytes a message may carry; send a smaller delta "
            "(or keep large values in artifacts)",
            metadata={"session_id": session.id},
        )
    return response


def _update_answer(
    session: Session, event: Event
) -> tuple[session_pb2.UpdateSessionStateResponse, int]:
    """An UpdateSessionState answer of ``session`` and ``event``, and its size in bytes."""
    response = session_pb2.UpdateSessionStateResponse(session=_session_to_proto(session))
    codec.event_to_proto(event, into=response.event)
    return response, response.ByteSize()


def _lasting(state: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in state.items() if not key.startswith(TEMP_PREFIX)}


def _listed_responses(sessions: list[Session]) -> Iterator[session_pb2.ListSessionsResponse]:
    """One page of a listing as ListSessions responses (at least one): the sessions with
    their state, packed by :func:`_packed`. A session larger than
    :data:`MAX_LISTED_SESSION_BYTES` goes without its state, named."""

    def entries() -> Iterator[tuple[Any, str | None]]:
        for session in sessions:
            encoded = _session_to_proto(session)
            whole = encoded.ByteSize()
            if whole <= MAX_LISTED_SESSION_BYTES:
                yield encoded, None
                continue
            logger.warning(
                "session %s is listed without its state: %d bytes encoded", session.id, whole
            )
            yield _session_to_proto(session.model_copy(update={"state": {}})), session.id

    return _packed(
        session_pb2.ListSessionsResponse(),
        session_pb2.ListSessionsResponse,
        entries(),
        entries_field="sessions",
        named_field="stateless_session_ids",
    )


def _session_responses(session: Session) -> Iterator[session_pb2.GetSessionResponse]:
    """The GetSession stream of ``session``: the session first, then its events, packed by
    :func:`_packed` (an event too large whole goes abridged, named)."""

    def entries() -> Iterator[tuple[Any, str | None]]:
        for event in session.events:
            encoded, abridged = _encoded_event(event)
            yield encoded, event.id if abridged else None

    return _packed(
        session_pb2.GetSessionResponse(session=_session_to_proto(session)),
        session_pb2.GetSessionResponse,
        entries(),
        entries_field="events",
        named_field="abridged_event_ids",
    )


def _packed(
    first: R,
    new: Callable[[], R],
    entries: Iterator[tuple[Any, str | None]],
    *,
    entries_field: str,
    named_field: str,
) -> Iterator[R]:
    """``first`` then as many ``new()`` responses as ``entries`` need, each at most
    :data:`EVENTS_BYTES_PER_RESPONSE` encoded bytes (a larger entry alone), each entry encoded
    only once the previous response is out. An entry sent changed (without its state,
    abridged) comes with its id, which goes in the response's ``named_field``."""
    response = first
    size = response.ByteSize()
    for encoded, named in entries:
        added = encoded.ByteSize() + _ENTRY_FRAMING
        if named is not None:
            added += len(named.encode()) + _ENTRY_FRAMING
        if size and size + added > EVENTS_BYTES_PER_RESPONSE:
            yield response
            response = new()
            size = 0
        getattr(response, entries_field).append(encoded)
        if named is not None:
            getattr(response, named_field).append(named)
        size += added
    yield response


def _encoded_event(event: Event) -> tuple[event_pb2.Event, bool]:
    """``event`` encoded whole, or abridged (and so marked) when the wire cannot carry a value
    of it or it is larger than :data:`MAX_EVENT_BYTES`."""
    try:
        encoded = codec.event_to_proto(event)
    except AdkJSONError as error:
        logger.warning("event %s is sent abridged: %s", event.id, error.message)
    else:
        size = encoded.ByteSize()
        if size <= MAX_EVENT_BYTES:
            return encoded, False
        logger.warning("event %s is sent abridged: %d bytes encoded", event.id, size)
    return codec.event_to_proto(codec.abridged_event(event)), True
