"""The session and artifact routes of google-adk's api_server, over the contract's
``SessionService`` (served by the agent service of each app).

Every route is under ``/apps/{app_name}/users/{user_id}/sessions`` and is the user's own: with
authenticators, ``{user_id}`` must be the principal (403 otherwise), and the user's credentials
go along to the service, which checks them again.

Where adk-mesh differs from google-adk: artifact versions are numbered as the agent service
numbers them (adk-mesh: from 1); an artifact version's ``createTime`` is the store's time of
the save, or 0 when the service does not tell it (a service from before
``ListArtifactVersions`` described versions, or a store that keeps no time);
``customMetadata`` on save, and a new session's ``options``, are refused when not empty
(the contract has no place for them); a version larger than one message of the mesh (32 MiB;
a tool may save one in process) does not load (400, naming it and the limit), though its
metadata is still described. The session list is streamed as ListSessions reads the store
(same JSON array), one call per page of 1,000 sessions, each with its own deadline (60 s):
no deadline bounds the whole list, as nothing is held open for it while a slow client reads
(the service answers each call with one page; the gateway holds that page); a failure after
the list began is logged, recorded on the request's span, and leaves the array unclosed.
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations at run time,
# and they name dependencies local to the factory.

import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import Annotated, Any

import grpc
from fastapi import APIRouter, Body, Depends, Header, Query
from fastapi.responses import JSONResponse, Response, StreamingResponse
from opentelemetry import trace
from pydantic import ValidationError

from adk_mesh import codec
from adk_mesh._confirmation import runtime_claim
from adk_mesh.artifacts import is_user_scoped
from adk_mesh.errors import AdkError, ArtifactError, ArtifactTooLargeError, InvalidArgumentError
from adk_mesh.mesh._channel import MAX_MESSAGE_BYTES
from adk_mesh.mesh._session_service import ARTIFACT_CHUNK_BYTES
from adk_mesh.types import Event, Part
from adk_mesh.v1 import content_pb2, session_pb2
from gateway._json import event_from_json, event_to_json, part_from_json, part_to_json
from gateway._mesh import Credentials, MeshClient, rpc_failure
from gateway._models import (
    ArtifactVersionBody,
    CreateSessionRequest,
    PartBody,
    SaveArtifactRequest,
    SessionBody,
    UpdateSessionRequest,
)
from gateway._problems import documented_problems
from gateway._security import Caller
from gateway._settings import GatewaySettings
from gateway._tracing import TracedRoute

__all__ = ["session_router"]

logger = logging.getLogger("gateway")

_SESSIONS = "/apps/{app_name}/users/{user_id}/sessions"
_SESSION = _SESSIONS + "/{session_id}"
_ARTIFACTS = _SESSION + "/artifacts"
#: The largest SaveArtifact request sent in one message; a larger one goes in chunks.
_MAX_UNARY_SAVE_BYTES = MAX_MESSAGE_BYTES - 64 * 1024
#: Seconds a session or artifact call may take (each page of a session list: one call).
_CALL_SECONDS = 60.0
#: Sessions asked of each ListSessions call of a listing: one of the contract's batches
#: (session.proto), which the service reads from its store at once (and sends in as many
#: responses as their states need).
_SESSIONS_PER_CALL = 1000
#: The contract's artifact versions are int32.
_MAX_VERSION = 2**31 - 1
_PROBLEMS = documented_problems(
    (400, "A request the agent service refuses"),
    (401, "No credentials, or invalid ones"),
    (403, "The path names another user than the credentials"),
    (404, "Unknown app, session or artifact"),
    (409, "The session exists, or a turn is running on it (retry)"),
    (429, "The agent service is at its limit of calls at once, or of artifact bytes in transfer"),
    (503, "The agent service is unavailable"),
)


def _session_json(app: str, message: session_pb2.Session, events: list[Event]) -> dict[str, Any]:
    return {
        "id": message.id,
        "appName": app,
        "userId": message.user_id,
        "state": codec.state_from_map(message.state, message.state_json),
        "events": [event_to_json(event) for event in events],
        "lastUpdateTime": message.last_update_time,
    }


def _json_bytes(value: Any) -> bytes:
    # JSONResponse's rendering, so a streamed list has the bytes of one JSONResponse.
    return json.dumps(
        value, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode("utf-8")


async def _session_pages(
    mesh: MeshClient, app: str, user: str, credentials: Credentials
) -> AsyncGenerator[session_pb2.ListSessionsResponse, None]:
    """The ListSessions responses of the user's whole listing, a call per page continued by
    its ``next_page_token``: each call has its own deadline, so one over the whole list does
    not cut off a client that reads a long list slowly though each page came at once.

    Each call is made when the page before it has been taken, in the caller's trace context:
    the request's span is every call's parent.
    """
    token = ""
    while True:
        last: session_pb2.ListSessionsResponse | None = None
        responses: AsyncGenerator[session_pb2.ListSessionsResponse, None] = mesh.responses(
            app,
            mesh.sessions(app).ListSessions,
            session_pb2.ListSessionsRequest(
                user_id=user, page_size=_SESSIONS_PER_CALL, page_token=token
            ),
            credentials=credentials,
            seconds=_CALL_SECONDS,
        )
        try:
            async for response in responses:
                last = response
                yield response
        finally:
            await responses.aclose()
        token = last.next_page_token if last is not None else ""
        if not token:
            return


async def _listing(
    app: str,
    user: str,
    first: session_pb2.ListSessionsResponse | None,
    pages: AsyncGenerator[session_pb2.ListSessionsResponse, None],
) -> AsyncIterator[bytes]:
    """The JSON array of the user's sessions, a page of ListSessions at a time: the gateway
    holds one page, and the client reads the first sessions while the store reads the next.

    A failure after the answer began cannot change its status: it is logged and the array is
    left open (no ``]``), so no JSON parser takes what was sent for the whole list.
    """
    written = 0
    try:
        response = first
        while response is not None:
            if response.stateless_session_ids:
                # Too large for a message with its state (GetSession cannot read it either):
                # listed with an empty state rather than failing the whole list.
                logger.warning(
                    "sessions %s of user %r of app %r are listed without their state: the "
                    "agent service cannot send it in one message",
                    list(response.stateless_session_ids),
                    user,
                    app,
                )
            items = [_json_bytes(_session_json(app, session, [])) for session in response.sessions]
            if items:
                yield (b"," if written else b"[") + b",".join(items)
                written += len(items)
            response = await anext(pages, None)
    except AdkError as error:
        logger.warning(
            "session listing of user %r of app %r failed after %d sessions were sent; the "
            "response ends without its closing bracket: %s",
            user,
            app,
            written,
            error,
        )
        # The response is sent within the request's span (TracedRoute): the failure, which
        # no status can tell any more, is recorded there.
        span = trace.get_current_span()
        span.record_exception(error)
        span.set_status(trace.StatusCode.ERROR, f"{type(error).__name__}: {error}")
        return
    finally:
        # The client gone (or the failure above): the call is cancelled, not left reading.
        await pages.aclose()
    yield b"]" if written else b"[]"


def _check_initial_event(event: Event, where: str) -> None:
    """Refuse an initial event with actions, as google-adk's api_server does
    (google/adk-python#5290): a conversation is restored from its messages, tool calls and
    results, never with side effects a client wrote (state, artifact versions, a route for the
    next turn, as only agents write them); the session's initial state goes in ``state``.
    What only the runtime writes (a confirmation request, which would run a tool call no model
    made) the session service refuses for every client."""
    if not event.actions.is_empty():
        raise InvalidArgumentError(
            f"{where} cannot include actions (stateDelta, artifactDelta, transferToAgent, "
            "escalate, skipSummarization, requestedToolConfirmations): give the session's "
            "state as `state`"
        )
    claim = runtime_claim(event)
    if claim is not None:
        raise InvalidArgumentError(f"{where} cannot include {claim}")


def _events_to_proto(raw: list[dict[str, Any]]) -> list[Any]:
    events = []
    for index, body in enumerate(raw):
        where = f"events[{index}]"
        try:
            event = event_from_json(body, where)
            proto = codec.event_to_proto(event)
        except ValidationError as error:
            raise InvalidArgumentError(
                f"{where} is not an event: {error.errors()[0]['msg']}"
            ) from None
        # After the member checks: a member that does not parse is still named by its path.
        _check_initial_event(event, where)
        events.append(proto)
    return events


def _canonical_uri(app: str, user: str, session: str, name: str, version: int) -> str:
    # google-adk's artifact URI (artifact_util.get_artifact_uri): a "user:" artifact is the
    # user's, shared by their sessions, so its URI names no session (a client that resolves
    # the URI must not read it as the session's, gone with it).
    if is_user_scoped(name):
        return f"artifact://apps/{app}/users/{user}/artifacts/{name}/versions/{version}"
    return (
        f"artifact://apps/{app}/users/{user}/sessions/{session}/artifacts/{name}/versions/{version}"
    )


def session_router(settings: GatewaySettings, mesh: MeshClient, user_caller: Any) -> APIRouter:
    """The session and artifact routes; ``user_caller`` authenticates the path's user."""
    router = APIRouter(tags=["sessions"], responses=_PROBLEMS, route_class=TracedRoute)
    Who = Annotated[Caller, Depends(user_caller)]

    async def read_session(app: str, user: str, session: str, who: Caller) -> dict[str, Any]:
        responses = await mesh.streamed(
            app,
            mesh.sessions(app).GetSession,
            session_pb2.GetSessionRequest(user_id=user, session_id=session),
            credentials=who.credentials,
            seconds=_CALL_SECONDS,
        )
        first = responses[0]
        events = [codec.event_from_proto(e) for response in responses for e in response.events]
        return _session_json(app, first.session, events)

    async def create(
        app: str, user: str, who: Caller, body: CreateSessionRequest | None
    ) -> dict[str, Any]:
        request = session_pb2.CreateSessionRequest(user_id=user)
        if body is not None and body.options:
            # google-adk refuses options its session service does not take (400); the
            # contract has no place for any, so they are refused rather than dropped.
            raise InvalidArgumentError(
                f"options ({', '.join(sorted(body.options))}) are not supported by adk-mesh's "
                "session stores; leave them out"
            )
        if body is not None:
            request.session_id = body.session_id or ""
            if body.state:
                codec.state_to_map(request.state, body.state, request.state_json)
            request.events.extend(_events_to_proto(body.events or []))
        response = await mesh.unary(
            app,
            mesh.sessions(app).CreateSession,
            request,
            credentials=who.credentials,
            seconds=_CALL_SECONDS,
        )
        if body is not None and body.events:
            # The session as google-adk answers it: with the events it starts with.
            return await read_session(app, user, response.session.id, who)
        return _session_json(app, response.session, [])

    @router.get(_SESSIONS, response_model=list[SessionBody], summary="The user's sessions")
    async def list_sessions(app_name: str, user_id: str, who: Who) -> Response:
        pages = _session_pages(mesh, app_name, user_id, who.credentials)
        # The first page is read before answering: a refusal or an unreachable service is
        # still a plain HTTP error (its status, problem+json), as when the list was whole.
        first = await anext(pages, None)
        return StreamingResponse(
            _listing(app_name, user_id, first, pages), media_type="application/json"
        )

    @router.post(_SESSIONS, response_model=SessionBody, summary="Create a session")
    async def create_session(
        app_name: str,
        user_id: str,
        who: Who,
        body: Annotated[CreateSessionRequest | None, Body()] = None,
    ) -> Response:
        return JSONResponse(await create(app_name, user_id, who, body))

    @router.post(
        _SESSION,
        response_model=SessionBody,
        summary="Create a session with this id (google-adk: deprecated)",
    )
    async def create_session_with_id(
        app_name: str,
        user_id: str,
        session_id: str,
        who: Who,
        state: Annotated[dict[str, Any] | None, Body()] = None,
    ) -> Response:
        body = CreateSessionRequest(session_id=session_id, state=state)
        return JSONResponse(await create(app_name, user_id, who, body))

    @router.get(_SESSION, response_model=SessionBody, summary="A session with its events")
    async def get_session(app_name: str, user_id: str, session_id: str, who: Who) -> Response:
        return JSONResponse(await read_session(app_name, user_id, session_id, who))

    @router.patch(
        _SESSION,
        response_model=SessionBody,
        summary="Change a session's state (recorded as an event, as google-adk's PATCH)",
    )
    async def update_session(
        app_name: str,
        user_id: str,
        session_id: str,
        body: UpdateSessionRequest,
        who: Who,
        idempotency_key: Annotated[
            str | None,
            Header(
                alias="Idempotency-Key",
                description=(
                    "Makes the change safe to retry: the id of the event that records it (at "
                    "most 512 characters). A retry with the key and the same stateDelta "
                    "writes nothing and answers the session as it is; the key with another "
                    "stateDelta is 409."
                ),
            ),
        ] = None,
    ) -> Response:
        request = session_pb2.UpdateSessionStateRequest(user_id=user_id, session_id=session_id)
        if idempotency_key:
            # A client that lost the answer retries with the key rather than patching twice
            # (UpdateSessionStateRequest.event_id).
            request.event_id = idempotency_key
        codec.state_to_map(request.state_delta, body.state_delta, request.state_delta_json)
        await mesh.unary(
            app_name,
            mesh.sessions(app_name).UpdateSessionState,
            request,
            credentials=who.credentials,
            seconds=_CALL_SECONDS,
        )
        return JSONResponse(await read_session(app_name, user_id, session_id, who))

    @router.delete(_SESSION, summary="Delete a session (an unknown one too, as google-adk)")
    async def delete_session(app_name: str, user_id: str, session_id: str, who: Who) -> Response:
        await mesh.unary(
            app_name,
            mesh.sessions(app_name).DeleteSession,
            session_pb2.DeleteSessionRequest(
                user_id=user_id, session_id=session_id, allow_missing=True
            ),
            credentials=who.credentials,
            seconds=_CALL_SECONDS,
        )
        return JSONResponse(None)

    # --- artifacts ------------------------------------------------------------------------

    async def load(
        app: str, user: str, session: str, name: str, version: int | None, who: Caller
    ) -> tuple[dict[str, Any], int]:
        request = session_pb2.SessionServiceLoadArtifactRequest(
            user_id=user, session_id=session, filename=name
        )
        if version is not None:
            if not -_MAX_VERSION <= version <= _MAX_VERSION:
                raise InvalidArgumentError(
                    f"version {version} is out of range; versions are numbered from 1"
                )
            request.version = version
        # In chunks, so no size fails for the mesh's message limit (LoadArtifact refuses an
        # artifact over 32 MiB); a service from before LoadArtifactStream answers in one.
        streamed = session_pb2.SessionServiceLoadArtifactStreamRequest(
            user_id=user, session_id=session, filename=name
        )
        if version is not None:
            streamed.version = version
        call = mesh.sessions(app).LoadArtifactStream(
            streamed, metadata=tuple(who.credentials), timeout=_CALL_SECONDS
        )
        header: session_pb2.LoadArtifactStreamHeader | None = None
        chunks: list[bytes] = []
        try:
            async for response in call:
                if header is None:
                    header = response.header
                else:
                    chunks.append(response.data)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.UNIMPLEMENTED or header is not None:
                raise rpc_failure(error, app, mesh.target(app)) from None
            answer = await mesh.unary(
                app,
                mesh.sessions(app).LoadArtifact,
                request,
                credentials=who.credentials,
                seconds=_CALL_SECONDS,
            )
            return part_to_json(codec.part_from_proto(answer.artifact)), answer.version
        finally:
            call.cancel()
        if header is None:
            raise ArtifactError(f"the service sent artifact {name!r} without its header")
        data = b"".join(chunks)
        del chunks
        if header.artifact.WhichOneof("data") == "text":
            part = Part.from_text(data.decode())
        else:
            part = Part.from_inline_data(header.artifact.inline_data.mime_type, data)
        return part_to_json(part), header.version

    async def save_in_chunks(
        app: str, saved: session_pb2.SessionServiceSaveArtifactRequest, who: Caller
    ) -> int:
        """Save ``saved``'s artifact with SaveArtifactStream: its header, then its bytes in
        chunks of :data:`ARTIFACT_CHUNK_BYTES`; its version."""
        artifact = saved.artifact
        if artifact.WhichOneof("data") == "text":
            data = artifact.text.encode()
            described = content_pb2.Part(text="")
        else:
            data = artifact.inline_data.data
            described = content_pb2.Part(
                inline_data=content_pb2.Blob(mime_type=artifact.inline_data.mime_type)
            )

        def requests() -> Iterator[session_pb2.SessionServiceSaveArtifactStreamRequest]:
            yield session_pb2.SessionServiceSaveArtifactStreamRequest(
                header=session_pb2.SaveArtifactStreamHeader(
                    user_id=saved.user_id,
                    session_id=saved.session_id,
                    filename=saved.filename,
                    artifact=described,
                    size_bytes=len(data),
                )
            )
            view = memoryview(data)
            for start in range(0, len(data), ARTIFACT_CHUNK_BYTES):
                yield session_pb2.SessionServiceSaveArtifactStreamRequest(
                    data=bytes(view[start : start + ARTIFACT_CHUNK_BYTES])
                )

        responses = await mesh.streamed(
            app,
            mesh.sessions(app).SaveArtifactStream,
            requests(),
            credentials=who.credentials,
            seconds=_CALL_SECONDS,
        )
        if len(responses) != 1:
            raise ArtifactError(f"the service answered a save with {len(responses)} responses")
        version: int = responses[0].version
        return version

    def version_number(version_id: str) -> int | None:
        if version_id == "latest":
            return None
        try:
            return int(version_id)
        except ValueError:
            raise InvalidArgumentError(
                f"version {version_id!r} is not a number (or 'latest')"
            ) from None

    @router.get(_ARTIFACTS, response_model=list[str], summary="The session's artifact names")
    async def list_artifact_names(
        app_name: str, user_id: str, session_id: str, who: Who
    ) -> Response:
        response = await mesh.unary(
            app_name,
            mesh.sessions(app_name).ListArtifactKeys,
            session_pb2.SessionServiceListArtifactKeysRequest(
                user_id=user_id, session_id=session_id
            ),
            credentials=who.credentials,
            seconds=_CALL_SECONDS,
        )
        return JSONResponse(list(response.filenames))

    @router.post(_ARTIFACTS, response_model=ArtifactVersionBody, summary="Save an artifact")
    async def save_artifact(
        app_name: str, user_id: str, session_id: str, body: SaveArtifactRequest, who: Who
    ) -> Response:
        if body.custom_metadata:
            raise InvalidArgumentError(
                "customMetadata is not kept by adk-mesh's artifact stores; leave it out"
            )
        part = part_from_json(
            body.artifact.model_dump(by_alias=True, exclude_none=True), "artifact"
        )
        saved = session_pb2.SessionServiceSaveArtifactRequest(
            user_id=user_id,
            session_id=session_id,
            filename=body.filename,
            artifact=codec.part_to_proto(part),
        )
        if saved.ByteSize() <= _MAX_UNARY_SAVE_BYTES:
            response = await mesh.unary(
                app_name,
                mesh.sessions(app_name).SaveArtifact,
                saved,
                credentials=who.credentials,
                seconds=_CALL_SECONDS,
            )
            version = response.version
        else:
            # Over one message of the mesh (a gateway whose max_body_bytes lets it in): in
            # chunks, as SaveArtifactStream takes it.
            version = await save_in_chunks(app_name, saved, who)
        return JSONResponse(
            {
                "version": version,
                "canonicalUri": _canonical_uri(
                    app_name, user_id, session_id, body.filename, version
                ),
                "customMetadata": {},
                "createTime": time.time(),
                **({"mimeType": part.mime_type} if part.mime_type else {}),
            }
        )

    async def described_versions(
        app: str, user: str, session: str, name: str, who: Caller
    ) -> tuple[list[int], dict[int, dict[str, Any]] | None]:
        """The versions of an artifact and, when the service describes them (without their
        data), each one's JSON by number; ``None`` when it does not (an older service), and
        a description needs a load."""
        response = await list_versions(app, user, session, name, who)
        versions = list(response.versions)
        if len(response.metadata) != len(versions):
            return versions, None
        bodies: dict[int, dict[str, Any]] = {}
        for described in response.metadata:
            body: dict[str, Any] = {
                "version": described.version,
                "canonicalUri": _canonical_uri(app, user, session, name, described.version),
                "customMetadata": {},
                "createTime": (described.create_time if described.HasField("create_time") else 0.0),
            }
            if described.HasField("mime_type"):
                body["mimeType"] = described.mime_type
            bodies[described.version] = body
        return versions, bodies

    async def version_metadata(
        app: str, user: str, session: str, name: str, version: int | None, who: Caller
    ) -> dict[str, Any]:
        """A version's JSON, from its loaded content (for a service that does not describe
        versions, or to refuse a version that does not exist as a load does)."""
        mime_type: str | None = None
        try:
            part, number = await load(app, user, session, name, version, who)
        except ArtifactTooLargeError as error:
            # A version too large to load over the contract: the service's refusal names
            # its number and MIME type, which is all a description needs.
            number = int(error.metadata["version"])
            mime_type = error.metadata.get("mime_type")
        else:
            blob = part.get("inlineData") or part.get("fileData")
            if blob is not None:
                mime_type = blob["mimeType"]
        body: dict[str, Any] = {
            "version": number,
            "canonicalUri": _canonical_uri(app, user, session, name, number),
            "customMetadata": {},
            "createTime": 0.0,
        }
        if mime_type is not None:
            body["mimeType"] = mime_type
        return body

    @router.get(
        _ARTIFACTS + "/{artifact_name:path}/versions/metadata",
        response_model=list[ArtifactVersionBody],
        summary="Every version of an artifact, described",
    )
    async def list_artifact_versions_metadata(
        app_name: str, user_id: str, session_id: str, artifact_name: str, who: Who
    ) -> Response:
        versions, bodies = await described_versions(
            app_name, user_id, session_id, artifact_name, who
        )
        if bodies is not None:
            return JSONResponse([bodies[number] for number in versions])
        return JSONResponse(
            [
                await version_metadata(app_name, user_id, session_id, artifact_name, number, who)
                for number in versions
            ]
        )

    @router.get(
        _ARTIFACTS + "/{artifact_name:path}/versions/{version_id}/metadata",
        response_model=ArtifactVersionBody,
        summary="One version of an artifact, described ('latest' for the latest)",
    )
    async def get_artifact_version_metadata(
        app_name: str, user_id: str, session_id: str, artifact_name: str, version_id: str, who: Who
    ) -> Response:
        number = version_number(version_id)
        versions, bodies = await described_versions(
            app_name, user_id, session_id, artifact_name, who
        )
        if bodies is not None:
            wanted = versions[-1] if number is None and versions else number
            if wanted in bodies:
                return JSONResponse(bodies[wanted])
        # Not described (an older service), or not listed: the load describes it or refuses
        # it as loading it would (an unknown name or version, a version out of range).
        return JSONResponse(
            await version_metadata(app_name, user_id, session_id, artifact_name, number, who)
        )

    async def list_versions(
        app: str, user: str, session: str, name: str, who: Caller
    ) -> session_pb2.SessionServiceListArtifactVersionsResponse:
        response: session_pb2.SessionServiceListArtifactVersionsResponse = await mesh.unary(
            app,
            mesh.sessions(app).ListArtifactVersions,
            session_pb2.SessionServiceListArtifactVersionsRequest(
                user_id=user, session_id=session, filename=name
            ),
            credentials=who.credentials,
            seconds=_CALL_SECONDS,
        )
        return response

    async def _versions(app: str, user: str, session: str, name: str, who: Caller) -> list[int]:
        return list((await list_versions(app, user, session, name, who)).versions)

    @router.get(
        _ARTIFACTS + "/{artifact_name:path}/versions",
        response_model=list[int],
        summary="The versions of an artifact",
    )
    async def list_artifact_versions(
        app_name: str, user_id: str, session_id: str, artifact_name: str, who: Who
    ) -> Response:
        return JSONResponse(await _versions(app_name, user_id, session_id, artifact_name, who))

    @router.get(
        _ARTIFACTS + "/{artifact_name:path}/versions/{version_id}",
        response_model=PartBody,
        summary="One version of an artifact",
    )
    async def load_artifact_version(
        app_name: str, user_id: str, session_id: str, artifact_name: str, version_id: str, who: Who
    ) -> Response:
        number = version_number(version_id)
        part, _ = await load(app_name, user_id, session_id, artifact_name, number, who)
        return JSONResponse(part)

    # After the /versions routes: an artifact name may hold '/'.
    @router.get(
        _ARTIFACTS + "/{artifact_name:path}",
        response_model=PartBody,
        summary="An artifact (its latest version, or ?version=N)",
    )
    async def load_artifact(
        app_name: str,
        user_id: str,
        session_id: str,
        artifact_name: str,
        who: Who,
        version: Annotated[int | None, Query()] = None,
    ) -> Response:
        part, _ = await load(app_name, user_id, session_id, artifact_name, version, who)
        return JSONResponse(part)

    @router.delete(
        _ARTIFACTS + "/{artifact_name:path}",
        summary="Delete every version of an artifact (an unknown one too, as google-adk)",
    )
    async def delete_artifact(
        app_name: str, user_id: str, session_id: str, artifact_name: str, who: Who
    ) -> Response:
        await mesh.unary(
            app_name,
            mesh.sessions(app_name).DeleteArtifact,
            session_pb2.SessionServiceDeleteArtifactRequest(
                user_id=user_id, session_id=session_id, filename=artifact_name, allow_missing=True
            ),
            credentials=who.credentials,
            seconds=_CALL_SECONDS,
        )
        return JSONResponse(None)

    return router
