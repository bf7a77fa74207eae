from adk_mesh.v1 import content_pb2 as _content_pb2
from adk_mesh.v1 import event_pb2 as _event_pb2
from adk_mesh.v1 import tool_pb2 as _tool_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StateMergePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATE_MERGE_POLICY_UNSPECIFIED: _ClassVar[StateMergePolicy]
    STATE_MERGE_POLICY_LAST_WRITER_WINS: _ClassVar[StateMergePolicy]
    STATE_MERGE_POLICY_REJECT_CONFLICTS: _ClassVar[StateMergePolicy]

class StreamingMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STREAMING_MODE_UNSPECIFIED: _ClassVar[StreamingMode]
    STREAMING_MODE_NONE: _ClassVar[StreamingMode]
    STREAMING_MODE_SSE: _ClassVar[StreamingMode]
STATE_MERGE_POLICY_UNSPECIFIED: StateMergePolicy
STATE_MERGE_POLICY_LAST_WRITER_WINS: StateMergePolicy
STATE_MERGE_POLICY_REJECT_CONFLICTS: StateMergePolicy
STREAMING_MODE_UNSPECIFIED: StreamingMode
STREAMING_MODE_NONE: StreamingMode
STREAMING_MODE_SSE: StreamingMode

class RunRequest(_message.Message):
    __slots__ = ("root", "delegated", "run_config", "agent_name", "accept_event_batches")
    ROOT_FIELD_NUMBER: _ClassVar[int]
    DELEGATED_FIELD_NUMBER: _ClassVar[int]
    RUN_CONFIG_FIELD_NUMBER: _ClassVar[int]
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_EVENT_BATCHES_FIELD_NUMBER: _ClassVar[int]
    root: RootRun
    delegated: DelegatedRun
    run_config: RunConfig
    agent_name: str
    accept_event_batches: bool
    def __init__(self, root: _Optional[_Union[RootRun, _Mapping]] = ..., delegated: _Optional[_Union[DelegatedRun, _Mapping]] = ..., run_config: _Optional[_Union[RunConfig, _Mapping]] = ..., agent_name: _Optional[str] = ..., accept_event_batches: _Optional[bool] = ...) -> None: ...

class RootRun(_message.Message):
    __slots__ = ("app_name", "user_id", "session_id", "new_message", "request_metadata")
    class RequestMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    USER_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    NEW_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_METADATA_FIELD_NUMBER: _ClassVar[int]
    app_name: str
    user_id: str
    session_id: str
    new_message: _content_pb2.Content
    request_metadata: _containers.ScalarMap[str, str]
    def __init__(self, app_name: _Optional[str] = ..., user_id: _Optional[str] = ..., session_id: _Optional[str] = ..., new_message: _Optional[_Union[_content_pb2.Content, _Mapping]] = ..., request_metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class DelegatedRun(_message.Message):
    __slots__ = ("invocation_id", "branch", "delegation_depth", "max_delegation_depth", "session", "user_content", "call_path", "llm_calls_made", "scope", "agent_tool", "caller_tree", "no_caller_stores", "forwarded_credentials", "request_metadata", "global_instruction", "workflow_step")
    class RequestMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    DELEGATION_DEPTH_FIELD_NUMBER: _ClassVar[int]
    MAX_DELEGATION_DEPTH_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    USER_CONTENT_FIELD_NUMBER: _ClassVar[int]
    CALL_PATH_FIELD_NUMBER: _ClassVar[int]
    LLM_CALLS_MADE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    AGENT_TOOL_FIELD_NUMBER: _ClassVar[int]
    CALLER_TREE_FIELD_NUMBER: _ClassVar[int]
    NO_CALLER_STORES_FIELD_NUMBER: _ClassVar[int]
    FORWARDED_CREDENTIALS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_METADATA_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_INSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_STEP_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    branch: str
    delegation_depth: int
    max_delegation_depth: int
    session: SessionView
    user_content: _content_pb2.Content
    call_path: _containers.RepeatedScalarFieldContainer[str]
    llm_calls_made: int
    scope: DelegationScope
    agent_tool: DelegationPolicy
    caller_tree: CallerTree
    no_caller_stores: bool
    forwarded_credentials: _containers.RepeatedCompositeFieldContainer[ForwardedCredential]
    request_metadata: _containers.ScalarMap[str, str]
    global_instruction: str
    workflow_step: bool
    def __init__(self, invocation_id: _Optional[str] = ..., branch: _Optional[str] = ..., delegation_depth: _Optional[int] = ..., max_delegation_depth: _Optional[int] = ..., session: _Optional[_Union[SessionView, _Mapping]] = ..., user_content: _Optional[_Union[_content_pb2.Content, _Mapping]] = ..., call_path: _Optional[_Iterable[str]] = ..., llm_calls_made: _Optional[int] = ..., scope: _Optional[_Union[DelegationScope, _Mapping]] = ..., agent_tool: _Optional[_Union[DelegationPolicy, _Mapping]] = ..., caller_tree: _Optional[_Union[CallerTree, _Mapping]] = ..., no_caller_stores: _Optional[bool] = ..., forwarded_credentials: _Optional[_Iterable[_Union[ForwardedCredential, _Mapping]]] = ..., request_metadata: _Optional[_Mapping[str, str]] = ..., global_instruction: _Optional[str] = ..., workflow_step: _Optional[bool] = ...) -> None: ...

class ForwardedCredential(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: str
    def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class DelegationPolicy(_message.Message):
    __slots__ = ("state_keys", "include_parent_state", "include_parent_history", "output_state_keys", "artifact_prefixes", "forward_events", "forward_memory", "max_transfers", "state_merge_policy", "forward_credentials", "forward_request_metadata")
    STATE_KEYS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PARENT_STATE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PARENT_HISTORY_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_STATE_KEYS_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_PREFIXES_FIELD_NUMBER: _ClassVar[int]
    FORWARD_EVENTS_FIELD_NUMBER: _ClassVar[int]
    FORWARD_MEMORY_FIELD_NUMBER: _ClassVar[int]
    MAX_TRANSFERS_FIELD_NUMBER: _ClassVar[int]
    STATE_MERGE_POLICY_FIELD_NUMBER: _ClassVar[int]
    FORWARD_CREDENTIALS_FIELD_NUMBER: _ClassVar[int]
    FORWARD_REQUEST_METADATA_FIELD_NUMBER: _ClassVar[int]
    state_keys: StringList
    include_parent_state: bool
    include_parent_history: bool
    output_state_keys: StringList
    artifact_prefixes: StringList
    forward_events: bool
    forward_memory: bool
    max_transfers: int
    state_merge_policy: StateMergePolicy
    forward_credentials: _containers.RepeatedScalarFieldContainer[str]
    forward_request_metadata: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, state_keys: _Optional[_Union[StringList, _Mapping]] = ..., include_parent_state: _Optional[bool] = ..., include_parent_history: _Optional[bool] = ..., output_state_keys: _Optional[_Union[StringList, _Mapping]] = ..., artifact_prefixes: _Optional[_Union[StringList, _Mapping]] = ..., forward_events: _Optional[bool] = ..., forward_memory: _Optional[bool] = ..., max_transfers: _Optional[int] = ..., state_merge_policy: _Optional[_Union[StateMergePolicy, str]] = ..., forward_credentials: _Optional[_Iterable[str]] = ..., forward_request_metadata: _Optional[_Iterable[str]] = ...) -> None: ...

class StringList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, values: _Optional[_Iterable[str]] = ...) -> None: ...

class DelegationScope(_message.Message):
    __slots__ = ("artifact_prefixes", "memory_withheld")
    ARTIFACT_PREFIXES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_WITHHELD_FIELD_NUMBER: _ClassVar[int]
    artifact_prefixes: _containers.RepeatedCompositeFieldContainer[StringList]
    memory_withheld: bool
    def __init__(self, artifact_prefixes: _Optional[_Iterable[_Union[StringList, _Mapping]]] = ..., memory_withheld: _Optional[bool] = ...) -> None: ...

class CallerTree(_message.Message):
    __slots__ = ("parent", "peers")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    parent: AgentSummary
    peers: _containers.RepeatedCompositeFieldContainer[AgentSummary]
    def __init__(self, parent: _Optional[_Union[AgentSummary, _Mapping]] = ..., peers: _Optional[_Iterable[_Union[AgentSummary, _Mapping]]] = ...) -> None: ...

class DelegationOutcome(_message.Message):
    __slots__ = ("answer", "actions")
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    answer: str
    actions: _event_pb2.EventActions
    def __init__(self, answer: _Optional[str] = ..., actions: _Optional[_Union[_event_pb2.EventActions, _Mapping]] = ...) -> None: ...

class SessionView(_message.Message):
    __slots__ = ("app_name", "user_id", "session_id", "state", "events", "state_json", "omitted_events", "abridged_event_ids", "history_digests")
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
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    STATE_JSON_FIELD_NUMBER: _ClassVar[int]
    OMITTED_EVENTS_FIELD_NUMBER: _ClassVar[int]
    ABRIDGED_EVENT_IDS_FIELD_NUMBER: _ClassVar[int]
    HISTORY_DIGESTS_FIELD_NUMBER: _ClassVar[int]
    app_name: str
    user_id: str
    session_id: str
    state: _containers.MessageMap[str, _struct_pb2.Value]
    events: _containers.RepeatedCompositeFieldContainer[_event_pb2.Event]
    state_json: _containers.ScalarMap[str, str]
    omitted_events: int
    abridged_event_ids: _containers.RepeatedScalarFieldContainer[str]
    history_digests: bytes
    def __init__(self, app_name: _Optional[str] = ..., user_id: _Optional[str] = ..., session_id: _Optional[str] = ..., state: _Optional[_Mapping[str, _struct_pb2.Value]] = ..., events: _Optional[_Iterable[_Union[_event_pb2.Event, _Mapping]]] = ..., state_json: _Optional[_Mapping[str, str]] = ..., omitted_events: _Optional[int] = ..., abridged_event_ids: _Optional[_Iterable[str]] = ..., history_digests: _Optional[bytes] = ...) -> None: ...

class RunConfig(_message.Message):
    __slots__ = ("max_llm_calls", "streaming_mode")
    MAX_LLM_CALLS_FIELD_NUMBER: _ClassVar[int]
    STREAMING_MODE_FIELD_NUMBER: _ClassVar[int]
    max_llm_calls: int
    streaming_mode: StreamingMode
    def __init__(self, max_llm_calls: _Optional[int] = ..., streaming_mode: _Optional[_Union[StreamingMode, str]] = ...) -> None: ...

class RunResponse(_message.Message):
    __slots__ = ("event", "session_id", "events", "outcome", "invocation_ended", "llm_calls", "left_transfer_event_id")
    EVENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    INVOCATION_ENDED_FIELD_NUMBER: _ClassVar[int]
    LLM_CALLS_FIELD_NUMBER: _ClassVar[int]
    LEFT_TRANSFER_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    event: _event_pb2.Event
    session_id: str
    events: _containers.RepeatedCompositeFieldContainer[_event_pb2.Event]
    outcome: DelegationOutcome
    invocation_ended: bool
    llm_calls: int
    left_transfer_event_id: str
    def __init__(self, event: _Optional[_Union[_event_pb2.Event, _Mapping]] = ..., session_id: _Optional[str] = ..., events: _Optional[_Iterable[_Union[_event_pb2.Event, _Mapping]]] = ..., outcome: _Optional[_Union[DelegationOutcome, _Mapping]] = ..., invocation_ended: _Optional[bool] = ..., llm_calls: _Optional[int] = ..., left_transfer_event_id: _Optional[str] = ...) -> None: ...

class DescribeRequest(_message.Message):
    __slots__ = ("agent_name",)
    AGENT_NAME_FIELD_NUMBER: _ClassVar[int]
    agent_name: str
    def __init__(self, agent_name: _Optional[str] = ...) -> None: ...

class DescribeResponse(_message.Message):
    __slots__ = ("card",)
    CARD_FIELD_NUMBER: _ClassVar[int]
    card: AgentCard
    def __init__(self, card: _Optional[_Union[AgentCard, _Mapping]] = ...) -> None: ...

class AgentCard(_message.Message):
    __slots__ = ("name", "description", "sub_agents", "tools", "supports_streaming", "agent_type", "app_name", "input_schema", "output_schema", "input_schema_json", "output_schema_json", "keeps_conversation")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SUB_AGENTS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    SUPPORTS_STREAMING_FIELD_NUMBER: _ClassVar[int]
    AGENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    APP_NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    KEEPS_CONVERSATION_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    sub_agents: _containers.RepeatedCompositeFieldContainer[AgentSummary]
    tools: _containers.RepeatedCompositeFieldContainer[_tool_pb2.ToolDeclaration]
    supports_streaming: bool
    agent_type: str
    app_name: str
    input_schema: _struct_pb2.Struct
    output_schema: _struct_pb2.Struct
    input_schema_json: str
    output_schema_json: str
    keeps_conversation: bool
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., sub_agents: _Optional[_Iterable[_Union[AgentSummary, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[_tool_pb2.ToolDeclaration, _Mapping]]] = ..., supports_streaming: _Optional[bool] = ..., agent_type: _Optional[str] = ..., app_name: _Optional[str] = ..., input_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., output_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., input_schema_json: _Optional[str] = ..., output_schema_json: _Optional[str] = ..., keeps_conversation: _Optional[bool] = ...) -> None: ...

class AgentSummary(_message.Message):
    __slots__ = ("name", "description")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ...) -> None: ...

class RunDelegatedRequest(_message.Message):
    __slots__ = ("run", "context_response", "accepts_artifact_chunks")
    RUN_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    ACCEPTS_ARTIFACT_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    run: RunRequest
    context_response: _tool_pb2.ContextResponse
    accepts_artifact_chunks: bool
    def __init__(self, run: _Optional[_Union[RunRequest, _Mapping]] = ..., context_response: _Optional[_Union[_tool_pb2.ContextResponse, _Mapping]] = ..., accepts_artifact_chunks: _Optional[bool] = ...) -> None: ...

class RunDelegatedResponse(_message.Message):
    __slots__ = ("response", "context_request")
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_REQUEST_FIELD_NUMBER: _ClassVar[int]
    response: RunResponse
    context_request: _tool_pb2.ContextRequest
    def __init__(self, response: _Optional[_Union[RunResponse, _Mapping]] = ..., context_request: _Optional[_Union[_tool_pb2.ContextRequest, _Mapping]] = ...) -> None: ...
