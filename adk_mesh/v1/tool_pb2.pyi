import datetime

from adk_mesh.v1 import content_pb2 as _content_pb2
from adk_mesh.v1 import event_pb2 as _event_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ToolDeclaration(_message.Message):
    __slots__ = ("name", "description", "parameters_schema", "response_schema", "long_running", "parameters_schema_json", "response_schema_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    LONG_RUNNING_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_schema: _struct_pb2.Struct
    response_schema: _struct_pb2.Struct
    long_running: bool
    parameters_schema_json: str
    response_schema_json: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., response_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., long_running: _Optional[bool] = ..., parameters_schema_json: _Optional[str] = ..., response_schema_json: _Optional[str] = ...) -> None: ...

class CallerContext(_message.Message):
    __slots__ = ("app_name", "user_id", "session_id", "agent_name", "invocation_id", "branch")
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    app_name: str
    user_id: str
    session_id: str
    agent_name: str
    invocation_id: str
    branch: str
    def __init__(self, app_name: _Optional[str] = ..., user_id: _Optional[str] = ..., session_id: _Optional[str] = ..., agent_name: _Optional[str] = ..., invocation_id: _Optional[str] = ..., branch: _Optional[str] = ...) -> None: ...

class CallToolInteractiveRequest(_message.Message):
    __slots__ = ("call", "context_response", "accepts_artifact_chunks")
    CALL_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ACCEPTS_ARTIFACT_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    call: CallToolRequest
    context_response: ContextResponse
    accepts_artifact_chunks: bool
    def __init__(self, call: _Optional[_Union[CallToolRequest, _Mapping]] = ..., context_response: _Optional[_Union[ContextResponse, _Mapping]] = ..., accepts_artifact_chunks: _Optional[bool] = ...) -> None: ...

class CallToolInteractiveResponse(_message.Message):
    __slots__ = ("response", "context_request")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_REQUEST_FIELD_NUMBER: _ClassVar[int]
    response: CallToolResponse
    context_request: ContextRequest
    def __init__(self, response: _Optional[_Union[CallToolResponse, _Mapping]] = ..., context_request: _Optional[_Union[ContextRequest, _Mapping]] = ...) -> None: ...

class ContextRequest(_message.Message):
    __slots__ = ("request_id", "load_artifact", "save_artifact", "list_artifact_keys", "list_artifact_versions", "search_memory", "load_events", "artifact_chunk", "accepts_artifact_chunks")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    LOAD_ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    SAVE_ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    LIST_ARTIFACT_KEYS_FIELD_NUMBER: _ClassVar[int]
    LIST_ARTIFACT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    SEARCH_MEMORY_FIELD_NUMBER: _ClassVar[int]
    LOAD_EVENTS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_CHUNK_FIELD_NUMBER: _ClassVar[int]
    ACCEPTS_ARTIFACT_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    load_artifact: LoadArtifactRequest
    save_artifact: SaveArtifactRequest
    list_artifact_keys: ListArtifactKeysRequest
    list_artifact_versions: ListArtifactVersionsRequest
    search_memory: SearchMemoryRequest
    load_events: LoadEventsRequest
    artifact_chunk: bytes
    accepts_artifact_chunks: bool
    def __init__(self, request_id: _Optional[int] = ..., load_artifact: _Optional[_Union[LoadArtifactRequest, _Mapping]] = ..., save_artifact: _Optional[_Union[SaveArtifactRequest, _Mapping]] = ..., list_artifact_keys: _Optional[_Union[ListArtifactKeysRequest, _Mapping]] = ..., list_artifact_versions: _Optional[_Union[ListArtifactVersionsRequest, _Mapping]] = ..., search_memory: _Optional[_Union[SearchMemoryRequest, _Mapping]] = ..., load_events: _Optional[_Union[LoadEventsRequest, _Mapping]] = ..., artifact_chunk: _Optional[bytes] = ..., accepts_artifact_chunks: _Optional[bool] = ...) -> None: ...

class LoadArtifactRequest(_message.Message):
    __slots__ = ("filename", "version")
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    filename: str
    version: int
    def __init__(self, filename: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...

class SaveArtifactRequest(_message.Message):
    __slots__ = ("filename", "artifact", "size_bytes", "chunks_follow")
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FOLLOW_FIELD_NUMBER: _ClassVar[int]
    filename: str
    artifact: _content_pb2.Part
    size_bytes: int
    chunks_follow: bool
    def __init__(self, filename: _Optional[str] = ..., artifact: _Optional[_Union[_content_pb2.Part, _Mapping]] = ..., size_bytes: _Optional[int] = ..., chunks_follow: _Optional[bool] = ...) -> None: ...

class ListArtifactKeysRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListArtifactVersionsRequest(_message.Message):
    __slots__ = ("filename",)
    FILENAME_FIELD_NUMBER: _ClassVar[int]
    filename: str
    def __init__(self, filename: _Optional[str] = ...) -> None: ...

class SearchMemoryRequest(_message.Message):
    __slots__ = ("query", "limit")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    query: str
    limit: int
    def __init__(self, query: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class LoadEventsRequest(_message.Message):
    __slots__ = ("before_event_id", "max_events", "event_ids")
    BEFORE_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_EVENTS_FIELD_NUMBER: _ClassVar[int]
    EVENT_IDS_FIELD_NUMBER: _ClassVar[int]
    before_event_id: str
    max_events: int
    event_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, before_event_id: _Optional[str] = ..., max_events: _Optional[int] = ..., event_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ContextResponse(_message.Message):
    __slots__ = ("request_id", "error", "loaded_artifact", "saved_version", "artifact_keys", "artifact_versions", "memories", "loaded_events", "artifact_chunk")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LOADED_ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    SAVED_VERSION_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_KEYS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    LOADED_EVENTS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_CHUNK_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    error: ErrorDetail
    loaded_artifact: LoadedArtifact
    saved_version: int
    artifact_keys: ArtifactKeys
    artifact_versions: ArtifactVersions
    memories: MemoryResults
    loaded_events: LoadedEvents
    artifact_chunk: bytes
    def __init__(self, request_id: _Optional[int] = ..., error: _Optional[_Union[ErrorDetail, _Mapping]] = ..., loaded_artifact: _Optional[_Union[LoadedArtifact, _Mapping]] = ..., saved_version: _Optional[int] = ..., artifact_keys: _Optional[_Union[ArtifactKeys, _Mapping]] = ..., artifact_versions: _Optional[_Union[ArtifactVersions, _Mapping]] = ..., memories: _Optional[_Union[MemoryResults, _Mapping]] = ..., loaded_events: _Optional[_Union[LoadedEvents, _Mapping]] = ..., artifact_chunk: _Optional[bytes] = ...) -> None: ...

class LoadedEvents(_message.Message):
    __slots__ = ("events", "omitted_events", "abridged_event_ids")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    OMITTED_EVENTS_FIELD_NUMBER: _ClassVar[int]
    ABRIDGED_EVENT_IDS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_event_pb2.Event]
    omitted_events: int
    abridged_event_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, events: _Optional[_Iterable[_Union[_event_pb2.Event, _Mapping]]] = ..., omitted_events: _Optional[int] = ..., abridged_event_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class LoadedArtifact(_message.Message):
    __slots__ = ("artifact", "size_bytes", "chunks_follow")
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FOLLOW_FIELD_NUMBER: _ClassVar[int]
    artifact: _content_pb2.Part
    size_bytes: int
    chunks_follow: bool
    def __init__(self, artifact: _Optional[_Union[_content_pb2.Part, _Mapping]] = ..., size_bytes: _Optional[int] = ..., chunks_follow: _Optional[bool] = ...) -> None: ...

class ArtifactKeys(_message.Message):
    __slots__ = ("filenames",)
    FILENAMES_FIELD_NUMBER: _ClassVar[int]
    filenames: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, filenames: _Optional[_Iterable[str]] = ...) -> None: ...

class ArtifactVersions(_message.Message):
    __slots__ = ("versions",)
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    versions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, versions: _Optional[_Iterable[int]] = ...) -> None: ...

class MemoryResults(_message.Message):
    __slots__ = ("memories",)
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[MemoryResult]
    def __init__(self, memories: _Optional[_Iterable[_Union[MemoryResult, _Mapping]]] = ...) -> None: ...

class MemoryResult(_message.Message):
    __slots__ = ("content", "author", "timestamp", "session_id")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    content: _content_pb2.Content
    author: str
    timestamp: _timestamp_pb2.Timestamp
    session_id: str
    def __init__(self, content: _Optional[_Union[_content_pb2.Content, _Mapping]] = ..., author: _Optional[str] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., session_id: _Optional[str] = ...) -> None: ...

class ListToolsRequest(_message.Message):
    __slots__ = ("context", "state", "state_json")
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
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_JSON_FIELD_NUMBER: _ClassVar[int]
    context: CallerContext
    state: _containers.MessageMap[str, _struct_pb2.Value]
    state_json: _containers.ScalarMap[str, str]
    def __init__(self, context: _Optional[_Union[CallerContext, _Mapping]] = ..., state: _Optional[_Mapping[str, _struct_pb2.Value]] = ..., state_json: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools", "toolset_name", "listing_version", "depends_on_state")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOLSET_NAME_FIELD_NUMBER: _ClassVar[int]
    LISTING_VERSION_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_STATE_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolDeclaration]
    toolset_name: str
    listing_version: str
    depends_on_state: bool
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolDeclaration, _Mapping]]] = ..., toolset_name: _Optional[str] = ..., listing_version: _Optional[str] = ..., depends_on_state: _Optional[bool] = ...) -> None: ...

class CallToolRequest(_message.Message):
    __slots__ = ("context", "tool_name", "function_call_id", "args", "state", "args_json", "state_json", "user_content", "tool_confirmation")
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
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    STATE_JSON_FIELD_NUMBER: _ClassVar[int]
    USER_CONTENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CONFIRMATION_FIELD_NUMBER: _ClassVar[int]
    context: CallerContext
    tool_name: str
    function_call_id: str
    args: _struct_pb2.Struct
    state: _containers.MessageMap[str, _struct_pb2.Value]
    args_json: str
    state_json: _containers.ScalarMap[str, str]
    user_content: _content_pb2.Content
    tool_confirmation: _event_pb2.ToolConfirmation
    def __init__(self, context: _Optional[_Union[CallerContext, _Mapping]] = ..., tool_name: _Optional[str] = ..., function_call_id: _Optional[str] = ..., args: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., state: _Optional[_Mapping[str, _struct_pb2.Value]] = ..., args_json: _Optional[str] = ..., state_json: _Optional[_Mapping[str, str]] = ..., user_content: _Optional[_Union[_content_pb2.Content, _Mapping]] = ..., tool_confirmation: _Optional[_Union[_event_pb2.ToolConfirmation, _Mapping]] = ...) -> None: ...

class CallToolResponse(_message.Message):
    __slots__ = ("progress", "result")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    progress: ToolProgress
    result: ToolResult
    def __init__(self, progress: _Optional[_Union[ToolProgress, _Mapping]] = ..., result: _Optional[_Union[ToolResult, _Mapping]] = ...) -> None: ...

class ToolProgress(_message.Message):
    __slots__ = ("message", "data", "fraction", "data_json")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    FRACTION_FIELD_NUMBER: _ClassVar[int]
    DATA_JSON_FIELD_NUMBER: _ClassVar[int]
    message: str
    data: _struct_pb2.Struct
    fraction: float
    data_json: str
    def __init__(self, message: _Optional[str] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., fraction: _Optional[float] = ..., data_json: _Optional[str] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("response", "error", "response_json", "actions", "listing_version")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_JSON_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    LISTING_VERSION_FIELD_NUMBER: _ClassVar[int]
    response: _struct_pb2.Struct
    error: ErrorDetail
    response_json: str
    actions: _event_pb2.EventActions
    listing_version: str
    def __init__(self, response: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., error: _Optional[_Union[ErrorDetail, _Mapping]] = ..., response_json: _Optional[str] = ..., actions: _Optional[_Union[_event_pb2.EventActions, _Mapping]] = ..., listing_version: _Optional[str] = ...) -> None: ...

class ErrorDetail(_message.Message):
    __slots__ = ("reason", "message", "metadata", "propagate")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    PROPAGATE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    message: str
    metadata: _containers.ScalarMap[str, str]
    propagate: bool
    def __init__(self, reason: _Optional[str] = ..., message: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ..., propagate: _Optional[bool] = ...) -> None: ...
