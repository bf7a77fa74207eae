import datetime

from adk_mesh.v1 import content_pb2 as _content_pb2
from adk_mesh.v1 import event_pb2 as _event_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Session(_message.Message):
    __slots__ = ("app_name", "user_id", "id", "state", "state_json", "last_update_time")
    class StateEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _struct_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...
    class StateJsonEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_JSON_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    app_name: str
    user_id: str
    id: str
    state: _containers.MessageMap[str, _struct_pb2.Value]
    state_json: _containers.ScalarMap[str, str]
    last_update_time: float
    def __init__(self, app_name: _Optional[str] = ..., user_id: _Optional[str] = ..., id: _Optional[str] = ..., state: _Optional[_Mapping[str, _struct_pb2.Value]] = ..., state_json: _Optional[_Mapping[str, str]] = ..., last_update_time: _Optional[float] = ...) -> None: ...

class AppSummary(_message.Message):
    __slots__ = ("name", "root_agent_name", "description")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROOT_AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    root_agent_name: str
    description: str
    def __init__(self, name: _Optional[str] = ..., root_agent_name: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...

class ListAppsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAppsResponse(_message.Message):
    __slots__ = ("apps",)
    APPS_FIELD_NUMBER: _ClassVar[int]
    apps: _containers.RepeatedCompositeFieldContainer[AppSummary]
    def __init__(self, apps: _Optional[_Iterable[_Union[AppSummary, _Mapping]]] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ("app_name", "user_id", "session_id", "state", "state_json", "events")
    class StateEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _struct_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...
    class StateJsonEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_JSON_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    app_name: str
    user_id: str
    session_id: str
    state: _containers.MessageMap[str, _struct_pb2.Value]
    state_json: _containers.ScalarMap[str, str]
    events: _containers.RepeatedCompositeFieldContainer[_event_pb2.Event]
    def __init__(self, app_name: _Optional[str] = ..., user_id: _Optional[str] = ..., session_id: _Optional[str] = ..., state: _Optional[_Mapping[str, _struct_pb2.Value]] = ..., state_json: _Optional[_Mapping[str, str]] = ..., events: _Optional[_Iterable[_Union[_event_pb2.Event, _Mapping]]] = ...) -> None: ...

class CreateSessionResponse(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: Session
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("app_name", "user_id", "session_id", "num_recent_events", "after")
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_RECENT_EVENTS_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    app_name: str
    user_id: str
    session_id: str
    num_recent_events: int
    after: _timestamp_pb2.Timestamp
    def __init__(self, app_name: _Optional[str] = ..., user_id: _Optional[str] = ..., session_id: _Optional[str] = ..., num_recent_events: _Optional[int] = ..., after: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session", "events", "abridged_event_ids")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    ABRIDGED_EVENT_IDS_FIELD_NUMBER: _ClassVar[int]
    session: Session
    events: _containers.RepeatedCompositeFieldContainer[_event_pb2.Event]
    abridged_event_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ..., events: _Optional[_Iterable[_Union[_event_pb2.Event, _Mapping]]] = ..., abridged_event_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("app_name", "user_id", "page_size", "page_token")
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    app_name: str
    user_id: str
    page_size: int
    page_token: str
    def __init__(self, app_name: _Optional[str] = ..., user_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_page_token", "stateless_session_ids")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATELESS_SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[Session]
    next_page_token: str
    stateless_session_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, sessions: _Optional[_Iterable[_Union[Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., stateless_session_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteSessionRequest(_message.Message):
    __slots__ = ("app_name", "user_id", "session_id", "allow_missing")
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    app_name: str
    user_id: str
    session_id: str
    allow_missing: bool
    def __init__(self, app_name: _Optional[str] = ..., user_id: _Optional[str] = ..., session_id: _Optional[str] = ..., allow_missing: _Optional[bool] = ...) -> None: ...

class DeleteSessionResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UpdateSessionStateRequest(_message.Message):
    __slots__ = ("app_name", "user_id", "session_id", "state_delta", "state_delta_json", "event_id")
    class StateDeltaEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _struct_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...
    class StateDeltaJsonEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_DELTA_FIELD_NUMBER: _ClassVar[int]
    STATE_DELTA_JSON_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    app_name: str
    user_id: str
    session_id: str
    state_delta: _containers.MessageMap[str, _struct_pb2.Value]
    state_delta_json: _containers.ScalarMap[str, str]
    event_id: str
    def __init__(self, app_name: _Optional[str] = ..., user_id: _Optional[str] = ..., session_id: _Optional[str] = ..., state_delta: _Optional[_Mapping[str, _struct_pb2.Value]] = ..., state_delta_json: _Optional[_Mapping[str, str]] = ..., event_id: _Optional[str] = ...) -> None: ...

class UpdateSessionStateResponse(_message.Message):
    __slots__ = ("session", "event")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    session: Session
    event: _event_pb2.Event
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ..., event: _Optional[_Union[_event_pb2.Event, _Mapping]] = ...) -> None: ...

class SessionServiceListArtifactKeysRequest(_message.Message):
    __slots__ = ("app_name", "user_id", "session_id")
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    app_name: str
    user_id: str
    session_id: str
    def __init__(self, app_name: _Optional[str] = ..., user_id: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class SessionServiceListArtifactKeysResponse(_message.Message):
    __slots__ = ("filenames",)
    FILENAMES_FIELD_NUMBER: _ClassVar[int]
    filenames: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, filenames: _Optional[_Iterable[str]] = ...) -> None: ...

class SessionServiceLoadArtifactRequest(_message.Message):
    __slots__ = ("app_name", "user_id", "session_id", "filename", "version")
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    app_name: str
    user_id: str
    session_id: str
    filename: str
    version: int
    def __init__(self, app_name: _Optional[str] = ..., user_id: _Optional[str] = ..., session_id: _Optional[str] = ..., filename: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class SessionServiceLoadArtifactResponse(_message.Message):
    __slots__ = ("artifact", "version")
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    artifact: _content_pb2.Part
    version: int
    def __init__(self, artifact: _Optional[_Union[_content_pb2.Part, _Mapping]] = ..., version: _Optional[int] = ...) -> None: ...

class SessionServiceSaveArtifactRequest(_message.Message):
    __slots__ = ("app_name", "user_id", "session_id", "filename", "artifact")
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    app_name: str
    user_id: str
    session_id: str
    filename: str
    artifact: _content_pb2.Part
    def __init__(self, app_name: _Optional[str] = ..., user_id: _Optional[str] = ..., session_id: _Optional[str] = ..., filename: _Optional[str] = ..., artifact: _Optional[_Union[_content_pb2.Part, _Mapping]] = ...) -> None: ...

class SessionServiceSaveArtifactResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class SessionServiceListArtifactVersionsRequest(_message.Message):
    __slots__ = ("app_name", "user_id", "session_id", "filename")
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    app_name: str
    user_id: str
    session_id: str
    filename: str
    def __init__(self, app_name: _Optional[str] = ..., user_id: _Optional[str] = ..., session_id: _Optional[str] = ..., filename: _Optional[str] = ...) -> None: ...

class SessionServiceListArtifactVersionsResponse(_message.Message):
    __slots__ = ("versions", "metadata")
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedScalarFieldContainer[int]
    metadata: _containers.RepeatedCompositeFieldContainer[ArtifactVersionMetadata]
    def __init__(self, versions: _Optional[_Iterable[int]] = ..., metadata: _Optional[_Iterable[_Union[ArtifactVersionMetadata, _Mapping]]] = ...) -> None: ...

class ArtifactVersionMetadata(_message.Message):
    __slots__ = ("version", "mime_type", "size_bytes", "create_time")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    version: int
    mime_type: str
    size_bytes: int
    create_time: float
    def __init__(self, version: _Optional[int] = ..., mime_type: _Optional[str] = ..., size_bytes: _Optional[int] = ..., create_time: _Optional[float] = ...) -> None: ...

class SessionServiceDeleteArtifactRequest(_message.Message):
    __slots__ = ("app_name", "user_id", "session_id", "filename", "allow_missing")
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    ALLOW_MISSING_FIELD_NUMBER: _ClassVar[int]
    app_name: str
    user_id: str
    session_id: str
    filename: str
    allow_missing: bool
    def __init__(self, app_name: _Optional[str] = ..., user_id: _Optional[str] = ..., session_id: _Optional[str] = ..., filename: _Optional[str] = ..., allow_missing: _Optional[bool] = ...) -> None: ...

class SessionServiceDeleteArtifactResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SessionServiceSaveArtifactStreamRequest(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: SaveArtifactStreamHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[SaveArtifactStreamHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class SaveArtifactStreamHeader(_message.Message):
    __slots__ = ("app_name", "user_id", "session_id", "filename", "artifact", "size_bytes")
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    app_name: str
    user_id: str
    session_id: str
    filename: str
    artifact: _content_pb2.Part
    size_bytes: int
    def __init__(self, app_name: _Optional[str] = ..., user_id: _Optional[str] = ..., session_id: _Optional[str] = ..., filename: _Optional[str] = ..., artifact: _Optional[_Union[_content_pb2.Part, _Mapping]] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class SessionServiceSaveArtifactStreamResponse(_message.Message):
    __slots__ = ("version",)
    VERSION_FIELD_NUMBER: _ClassVar[int]
    version: int
    def __init__(self, version: _Optional[int] = ...) -> None: ...

class SessionServiceLoadArtifactStreamRequest(_message.Message):
    __slots__ = ("app_name", "user_id", "session_id", "filename", "version")
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    app_name: str
    user_id: str
    session_id: str
    filename: str
    version: int
    def __init__(self, app_name: _Optional[str] = ..., user_id: _Optional[str] = ..., session_id: _Optional[str] = ..., filename: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class SessionServiceLoadArtifactStreamResponse(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: LoadArtifactStreamHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[LoadArtifactStreamHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class LoadArtifactStreamHeader(_message.Message):
    __slots__ = ("version", "artifact", "size_bytes")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    version: int
    artifact: _content_pb2.Part
    size_bytes: int
    def __init__(self, version: _Optional[int] = ..., artifact: _Optional[_Union[_content_pb2.Part, _Mapping]] = ..., size_bytes: _Optional[int] = ...) -> None: ...
