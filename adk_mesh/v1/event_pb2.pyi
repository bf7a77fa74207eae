import datetime

from adk_mesh.v1 import content_pb2 as _content_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CodeExecutionOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CODE_EXECUTION_OUTCOME_UNSPECIFIED: _ClassVar[CodeExecutionOutcome]
    CODE_EXECUTION_OUTCOME_OK: _ClassVar[CodeExecutionOutcome]
    CODE_EXECUTION_OUTCOME_FAILED: _ClassVar[CodeExecutionOutcome]
    CODE_EXECUTION_OUTCOME_DEADLINE_EXCEEDED: _ClassVar[CodeExecutionOutcome]

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_MAX_TOKENS: _ClassVar[FinishReason]
    FINISH_REASON_SAFETY: _ClassVar[FinishReason]
    FINISH_REASON_RECITATION: _ClassVar[FinishReason]
    FINISH_REASON_TOOL_CALLS: _ClassVar[FinishReason]
    FINISH_REASON_MALFORMED_FUNCTION_CALL: _ClassVar[FinishReason]
    FINISH_REASON_OTHER: _ClassVar[FinishReason]
CODE_EXECUTION_OUTCOME_UNSPECIFIED: CodeExecutionOutcome
CODE_EXECUTION_OUTCOME_OK: CodeExecutionOutcome
CODE_EXECUTION_OUTCOME_FAILED: CodeExecutionOutcome
CODE_EXECUTION_OUTCOME_DEADLINE_EXCEEDED: CodeExecutionOutcome
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_MAX_TOKENS: FinishReason
FINISH_REASON_SAFETY: FinishReason
FINISH_REASON_RECITATION: FinishReason
FINISH_REASON_TOOL_CALLS: FinishReason
FINISH_REASON_MALFORMED_FUNCTION_CALL: FinishReason
FINISH_REASON_OTHER: FinishReason

class Event(_message.Message):
    __slots__ = ("id", "timestamp", "invocation_id", "branch", "author", "llm_response", "actions", "long_running_tool_ids", "tool_progress")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_FIELD_NUMBER: _ClassVar[int]
    LLM_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    LONG_RUNNING_TOOL_IDS_FIELD_NUMBER: _ClassVar[int]
    TOOL_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    id: str
    timestamp: _timestamp_pb2.Timestamp
    invocation_id: str
    branch: str
    author: str
    llm_response: LlmResponse
    actions: EventActions
    long_running_tool_ids: _containers.RepeatedScalarFieldContainer[str]
    tool_progress: ToolProgressUpdate
    def __init__(self, id: _Optional[str] = ..., timestamp: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., invocation_id: _Optional[str] = ..., branch: _Optional[str] = ..., author: _Optional[str] = ..., llm_response: _Optional[_Union[LlmResponse, _Mapping]] = ..., actions: _Optional[_Union[EventActions, _Mapping]] = ..., long_running_tool_ids: _Optional[_Iterable[str]] = ..., tool_progress: _Optional[_Union[ToolProgressUpdate, _Mapping]] = ...) -> None: ...

class ToolProgressUpdate(_message.Message):
    __slots__ = ("tool_name", "function_call_id", "message", "fraction", "data", "data_json")
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FRACTION_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    DATA_JSON_FIELD_NUMBER: _ClassVar[int]
    tool_name: str
    function_call_id: str
    message: str
    fraction: float
    data: _struct_pb2.Struct
    data_json: str
    def __init__(self, tool_name: _Optional[str] = ..., function_call_id: _Optional[str] = ..., message: _Optional[str] = ..., fraction: _Optional[float] = ..., data: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., data_json: _Optional[str] = ...) -> None: ...

class LlmResponse(_message.Message):
    __slots__ = ("content", "usage_metadata", "finish_reason", "partial", "turn_complete", "interrupted", "error_code", "error_message", "grounding_metadata", "model_version", "grounding_metadata_json", "grounding")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    USAGE_METADATA_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_FIELD_NUMBER: _ClassVar[int]
    TURN_COMPLETE_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTED_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GROUNDING_METADATA_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    GROUNDING_METADATA_JSON_FIELD_NUMBER: _ClassVar[int]
    GROUNDING_FIELD_NUMBER: _ClassVar[int]
    content: _content_pb2.Content
    usage_metadata: UsageMetadata
    finish_reason: FinishReason
    partial: bool
    turn_complete: bool
    interrupted: bool
    error_code: str
    error_message: str
    grounding_metadata: _struct_pb2.Struct
    model_version: str
    grounding_metadata_json: str
    grounding: GroundingMetadata
    def __init__(self, content: _Optional[_Union[_content_pb2.Content, _Mapping]] = ..., usage_metadata: _Optional[_Union[UsageMetadata, _Mapping]] = ..., finish_reason: _Optional[_Union[FinishReason, str]] = ..., partial: _Optional[bool] = ..., turn_complete: _Optional[bool] = ..., interrupted: _Optional[bool] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ..., grounding_metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., model_version: _Optional[str] = ..., grounding_metadata_json: _Optional[str] = ..., grounding: _Optional[_Union[GroundingMetadata, _Mapping]] = ...) -> None: ...

class GroundingMetadata(_message.Message):
    __slots__ = ("sources", "queries", "citations", "code_executions", "search_suggestions_html")
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    QUERIES_FIELD_NUMBER: _ClassVar[int]
    CITATIONS_FIELD_NUMBER: _ClassVar[int]
    CODE_EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    SEARCH_SUGGESTIONS_HTML_FIELD_NUMBER: _ClassVar[int]
    sources: _containers.RepeatedCompositeFieldContainer[GroundingSource]
    queries: _containers.RepeatedScalarFieldContainer[str]
    citations: _containers.RepeatedCompositeFieldContainer[Citation]
    code_executions: _containers.RepeatedCompositeFieldContainer[CodeExecution]
    search_suggestions_html: str
    def __init__(self, sources: _Optional[_Iterable[_Union[GroundingSource, _Mapping]]] = ..., queries: _Optional[_Iterable[str]] = ..., citations: _Optional[_Iterable[_Union[Citation, _Mapping]]] = ..., code_executions: _Optional[_Iterable[_Union[CodeExecution, _Mapping]]] = ..., search_suggestions_html: _Optional[str] = ...) -> None: ...

class GroundingSource(_message.Message):
    __slots__ = ("uri", "title")
    URI_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    uri: str
    title: str
    def __init__(self, uri: _Optional[str] = ..., title: _Optional[str] = ...) -> None: ...

class Citation(_message.Message):
    __slots__ = ("start_index", "end_index", "text", "source_indices", "cited_text")
    START_INDEX_FIELD_NUMBER: _ClassVar[int]
    END_INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_INDICES_FIELD_NUMBER: _ClassVar[int]
    CITED_TEXT_FIELD_NUMBER: _ClassVar[int]
    start_index: int
    end_index: int
    text: str
    source_indices: _containers.RepeatedScalarFieldContainer[int]
    cited_text: str
    def __init__(self, start_index: _Optional[int] = ..., end_index: _Optional[int] = ..., text: _Optional[str] = ..., source_indices: _Optional[_Iterable[int]] = ..., cited_text: _Optional[str] = ...) -> None: ...

class CodeExecution(_message.Message):
    __slots__ = ("code", "language", "outcome", "output")
    CODE_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    code: str
    language: str
    outcome: CodeExecutionOutcome
    output: str
    def __init__(self, code: _Optional[str] = ..., language: _Optional[str] = ..., outcome: _Optional[_Union[CodeExecutionOutcome, str]] = ..., output: _Optional[str] = ...) -> None: ...

class UsageMetadata(_message.Message):
    __slots__ = ("prompt_token_count", "candidates_token_count", "total_token_count", "cached_content_token_count", "thoughts_token_count")
    PROMPT_TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    CACHED_CONTENT_TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    THOUGHTS_TOKEN_COUNT_FIELD_NUMBER: _ClassVar[int]
    prompt_token_count: int
    candidates_token_count: int
    total_token_count: int
    cached_content_token_count: int
    thoughts_token_count: int
    def __init__(self, prompt_token_count: _Optional[int] = ..., candidates_token_count: _Optional[int] = ..., total_token_count: _Optional[int] = ..., cached_content_token_count: _Optional[int] = ..., thoughts_token_count: _Optional[int] = ...) -> None: ...

class EventActions(_message.Message):
    __slots__ = ("state_delta", "artifact_delta", "skip_summarization", "transfer_to_agent", "escalate", "state_delta_json", "requested_tool_confirmations")
    class StateDeltaEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _struct_pb2.Value
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ...) -> None: ...
    class ArtifactDeltaEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class StateDeltaJsonEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class RequestedToolConfirmationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ToolConfirmation
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ToolConfirmation, _Mapping]] = ...) -> None: ...
    STATE_DELTA_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_DELTA_FIELD_NUMBER: _ClassVar[int]
    SKIP_SUMMARIZATION_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_TO_AGENT_FIELD_NUMBER: _ClassVar[int]
    ESCALATE_FIELD_NUMBER: _ClassVar[int]
    STATE_DELTA_JSON_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_TOOL_CONFIRMATIONS_FIELD_NUMBER: _ClassVar[int]
    state_delta: _containers.MessageMap[str, _struct_pb2.Value]
    artifact_delta: _containers.ScalarMap[str, int]
    skip_summarization: bool
    transfer_to_agent: str
    escalate: bool
    state_delta_json: _containers.ScalarMap[str, str]
    requested_tool_confirmations: _containers.MessageMap[str, ToolConfirmation]
    def __init__(self, state_delta: _Optional[_Mapping[str, _struct_pb2.Value]] = ..., artifact_delta: _Optional[_Mapping[str, int]] = ..., skip_summarization: _Optional[bool] = ..., transfer_to_agent: _Optional[str] = ..., escalate: _Optional[bool] = ..., state_delta_json: _Optional[_Mapping[str, str]] = ..., requested_tool_confirmations: _Optional[_Mapping[str, ToolConfirmation]] = ...) -> None: ...

class ToolConfirmation(_message.Message):
    __slots__ = ("hint", "confirmed", "payload", "payload_json")
    HINT_FIELD_NUMBER: _ClassVar[int]
    CONFIRMED_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_JSON_FIELD_NUMBER: _ClassVar[int]
    hint: str
    confirmed: bool
    payload: _struct_pb2.Value
    payload_json: str
    def __init__(self, hint: _Optional[str] = ..., confirmed: _Optional[bool] = ..., payload: _Optional[_Union[_struct_pb2.Value, _Mapping]] = ..., payload_json: _Optional[str] = ...) -> None: ...
