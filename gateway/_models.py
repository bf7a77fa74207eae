"""Request and response bodies of google-adk's api_server API, as pydantic models.

Names are camelCase on the wire (google-adk's alias generator) and either spelling is
accepted in requests, as google-adk's own models accept both. Response models document what
the routes write (the OpenAPI document is generated from them); the routes write that JSON
directly, from :mod:`gateway._json`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "AppInfo",
    "ArtifactVersionBody",
    "ContentBody",
    "CreateSessionRequest",
    "ErrorFrame",
    "EventBody",
    "ListAppsResponse",
    "PartBody",
    "ProblemBody",
    "RunAgentRequest",
    "SaveArtifactRequest",
    "SessionBody",
    "UpdateSessionRequest",
    "VersionBody",
]


class _Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class _OpenBody(BaseModel):
    """A body whose unknown members are kept, so that a converter can refuse them by name."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")


class FunctionCallBody(_OpenBody):
    id: str | None = None
    name: str
    args: dict[str, Any] | None = None


class FunctionResponseBody(_OpenBody):
    id: str | None = None
    name: str
    response: dict[str, Any] | None = None


class ToolCallBody(_OpenBody):
    """genai's ToolCall: a built-in tool the model's provider ran itself (never run here)."""

    id: str | None = None
    tool_type: str | None = Field(default=None, description='e.g. "GOOGLE_SEARCH_WEB"')
    args: dict[str, Any] | None = None


class ToolResponseBody(_OpenBody):
    """genai's ToolResponse: what that built-in tool returned."""

    id: str | None = None
    tool_type: str | None = None
    response: dict[str, Any] | None = None


class BlobBody(_OpenBody):
    mime_type: str
    data: str = Field(description="The bytes, base64 (standard or URL-safe).")


class FileDataBody(_OpenBody):
    mime_type: str | None = None
    file_uri: str


class PartBody(_OpenBody):
    """google-genai's Part: exactly one of text, functionCall, functionResponse, inlineData,
    fileData, toolCall, toolResponse (the kinds adk-mesh carries)."""

    text: str | None = None
    function_call: FunctionCallBody | None = None
    function_response: FunctionResponseBody | None = None
    inline_data: BlobBody | None = None
    file_data: FileDataBody | None = None
    tool_call: ToolCallBody | None = None
    tool_response: ToolResponseBody | None = None
    thought: bool | None = None
    thought_signature: str | None = Field(default=None, description="base64")


class ContentBody(_OpenBody):
    """google-genai's Content."""

    role: str | None = None
    parts: list[PartBody] = Field(default_factory=list)


class RunAgentRequest(_Body):
    """The body of ``POST /run`` and ``POST /run_sse`` (google-adk's RunAgentRequest)."""

    app_name: str | None = Field(
        default=None, description="The app; may be left out when the gateway serves one app."
    )
    user_id: str
    session_id: str = Field(
        description="The session; an id the app does not know yet starts that session."
    )
    new_message: ContentBody | None = None
    streaming: bool = Field(
        default=False,
        description="/run_sse: stream the model's partial answers (partial events). /run "
        "ignores it, as google-adk's does.",
    )
    state_delta: dict[str, Any] | None = Field(
        default=None, description="Not supported by adk-mesh: a non-empty delta is refused."
    )
    function_call_event_id: str | None = Field(
        default=None, description="Not supported by adk-mesh (resuming long-running calls)."
    )
    invocation_id: str | None = Field(
        default=None, description="Not supported by adk-mesh (resuming an invocation)."
    )
    custom_metadata: dict[str, Any] | None = Field(
        default=None, description="Accepted and ignored (adk-mesh has no counterpart)."
    )
    service_tier: str | None = Field(default=None, description="Accepted and ignored.")


class CreateSessionRequest(_Body):
    """The body of ``POST /apps/{app}/users/{user}/sessions`` (all optional)."""

    session_id: str | None = None
    state: dict[str, Any] | None = None
    events: list[dict[str, Any]] | None = None
    options: dict[str, Any] | None = Field(
        default=None,
        description="google-adk's options for its session service: adk-mesh's session "
        "stores take none, so options that are not empty are refused.",
    )


class UpdateSessionRequest(_Body):
    """The body of ``PATCH /apps/{app}/users/{user}/sessions/{session}``."""

    state_delta: dict[str, Any]


class SaveArtifactRequest(_Body):
    """The body of ``POST .../artifacts``."""

    filename: str
    artifact: PartBody
    custom_metadata: dict[str, Any] | None = None


class ActionsBody(_Body):
    skip_summarization: bool | None = None
    state_delta: dict[str, Any] = Field(default_factory=dict)
    artifact_delta: dict[str, int] = Field(default_factory=dict)
    transfer_to_agent: str | None = None
    escalate: bool | None = None
    requested_auth_configs: dict[str, Any] = Field(default_factory=dict)
    requested_tool_confirmations: dict[str, Any] = Field(default_factory=dict)


class UsageBody(_Body):
    cached_content_token_count: int | None = None
    candidates_token_count: int | None = None
    prompt_token_count: int | None = None
    thoughts_token_count: int | None = None
    total_token_count: int | None = None


class EventBody(_Body):
    """google-adk's Event as the gateway writes it (members that are not set are left out)."""

    model_version: str | None = None
    content: ContentBody | None = None
    grounding_metadata: dict[str, Any] | None = None
    partial: bool | None = None
    turn_complete: bool | None = None
    finish_reason: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    interrupted: bool | None = None
    custom_metadata: dict[str, Any] | None = Field(
        default=None,
        description="adkMesh.toolProgress: a running tool's progress update "
        "({toolName, functionCallId, message, fraction, data}) on a partial event.",
    )
    usage_metadata: UsageBody | None = None
    invocation_id: str
    author: str
    actions: ActionsBody
    node_info: dict[str, Any] | None = None
    long_running_tool_ids: list[str] | None = None
    branch: str | None = None
    id: str
    timestamp: float = Field(description="Seconds since the epoch.")


class SessionBody(_Body):
    """google-adk's Session."""

    id: str
    app_name: str
    user_id: str
    state: dict[str, Any] = Field(default_factory=dict)
    events: list[EventBody] = Field(default_factory=list)
    last_update_time: float = 0.0


class ArtifactVersionBody(_Body):
    """google-adk's ArtifactVersion."""

    version: int
    canonical_uri: str
    custom_metadata: dict[str, Any] = Field(default_factory=dict)
    create_time: float
    mime_type: str | None = None


class AppInfo(_Body):
    name: str
    root_agent_name: str
    description: str
    language: Literal["yaml", "python"] = "python"


class ListAppsResponse(_Body):
    apps: list[AppInfo]


class VersionBody(BaseModel):
    version: str
    language: str
    language_version: str


class ErrorDetails(BaseModel):
    error_type: str
    error_message: str
    timestamp: float
    reason: str = Field(description="The ErrorInfo reason of the mesh's error.")


class ErrorFrame(BaseModel):
    """The ``data:`` of the frame that ends an event stream when the run fails, as google-adk
    writes it (plus ``error_details.reason``)."""

    error: str = Field(description="'<error class>: <message>'")
    error_details: ErrorDetails


class ProblemBody(BaseModel):
    """RFC 9457 problem details."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
    reason: str = Field(description="google.rpc.ErrorInfo reason (e.g. SESSION_NOT_FOUND).")
    domain: str = "adk-mesh"
    metadata: dict[str, str] | None = None
    errors: list[dict[str, Any]] | None = Field(
        default=None, description="What is wrong with a request body (422)."
    )
