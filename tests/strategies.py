"""Hypothesis strategies for the adk-mesh core types, shared by every test suite.

Import them as ``from tests.strategies import events, parts, ...`` (``tests`` is a package).

The JSON strategies produce exactly what the codec promises to carry (see
:mod:`adk_mesh.codec`): ``None``, bools, unicode strings (astral characters and ``""``
included), integers within +-2**53, finite floats, and nested lists and string-keyed objects.
:func:`expected_json` states what such a value looks like after a trip over the wire, and
:func:`assert_strictly_equal` compares with types, so that ``True`` never passes for ``1``.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from hypothesis import strategies as st

from adk_mesh.types import (
    Blob,
    Citation,
    CodeExecution,
    CodeExecutionOutcome,
    Content,
    Event,
    EventActions,
    FileData,
    FinishReason,
    FunctionCall,
    FunctionResponse,
    GroundingMetadata,
    GroundingSource,
    LlmResponse,
    Part,
    ServerToolCall,
    ServerToolResponse,
    ToolDeclaration,
    UsageMetadata,
)

__all__ = [
    "MAX_EXACT_INT",
    "assert_strictly_equal",
    "blobs",
    "contents",
    "event_actions",
    "events",
    "expected_json",
    "file_datas",
    "function_calls",
    "function_responses",
    "json_objects",
    "json_values",
    "llm_responses",
    "parts",
    "server_tool_calls",
    "server_tool_responses",
    "texts",
    "timestamps",
    "tool_declarations",
    "usage_metadata",
]

MAX_EXACT_INT = 2**53
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)

# Strings that random generation reaches rarely but that break naive codecs.
_TRICKY_STRINGS = [
    "",
    " ",
    "\x00",
    "é",
    "e\u0301",
    "\u202e",
    "\ufeff",
    "😀",
    "𝄞",
    "👩\u200d👩\u200d👧",
    "\U0010ffff",
    "null",
    "true",
    "1",
    "1e400",
    "NaN",
    '{"a": 1}',
]

#: Any unicode text that protobuf strings carry (no lone surrogates): random BMP text,
#: astral-plane text, and a set of known troublemakers.
texts: st.SearchStrategy[str] = st.one_of(
    st.text(max_size=12),
    st.text(st.characters(min_codepoint=0x10000), max_size=6),
    st.sampled_from(_TRICKY_STRINGS),
)

_json_numbers: st.SearchStrategy[int | float] = st.one_of(
    st.integers(-MAX_EXACT_INT, MAX_EXACT_INT),
    st.sampled_from([MAX_EXACT_INT, -MAX_EXACT_INT, 0, -1]),
    st.floats(allow_nan=False, allow_infinity=False),
)

_json_scalars: st.SearchStrategy[Any] = st.one_of(st.none(), st.booleans(), _json_numbers, texts)

#: Any JSON value the wire carries, nested lists and objects included.
json_values: st.SearchStrategy[Any] = st.recursive(
    _json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(texts, children, max_size=4),
    ),
    max_leaves=10,
)

#: A JSON object (function-call args, responses, state deltas, schemas); ``{}`` included.
json_objects: st.SearchStrategy[dict[str, Any]] = st.dictionaries(texts, json_values, max_size=5)

_optional_texts: st.SearchStrategy[str | None] = st.none() | texts
_mime_types = st.sampled_from(["", "text/plain", "image/png", "application/pdf"]) | texts

blobs: st.SearchStrategy[Blob] = st.builds(Blob, mime_type=_mime_types, data=st.binary())
file_datas: st.SearchStrategy[FileData] = st.builds(
    FileData,
    mime_type=_mime_types,
    file_uri=st.sampled_from(["", "gs://bucket/a.png", "https://example.com/x?y=1"]) | texts,
)
function_calls: st.SearchStrategy[FunctionCall] = st.builds(
    FunctionCall, name=texts, args=json_objects, id=_optional_texts
)
function_responses: st.SearchStrategy[FunctionResponse] = st.builds(
    FunctionResponse, name=texts, response=json_objects, id=_optional_texts
)

_tool_types = st.sampled_from(["", "GOOGLE_SEARCH_WEB", "URL_CONTEXT", "web_search"]) | texts
server_tool_calls: st.SearchStrategy[ServerToolCall] = st.builds(
    ServerToolCall, tool_type=_tool_types, args=json_objects, id=_optional_texts
)
server_tool_responses: st.SearchStrategy[ServerToolResponse] = st.builds(
    ServerToolResponse, tool_type=_tool_types, response=json_objects, id=_optional_texts
)

_part_kinds: st.SearchStrategy[dict[str, Any]] = st.one_of(
    st.fixed_dictionaries({"text": texts}),
    st.fixed_dictionaries({"inline_data": blobs}),
    st.fixed_dictionaries({"file_data": file_datas}),
    st.fixed_dictionaries({"function_call": function_calls}),
    st.fixed_dictionaries({"function_response": function_responses}),
    st.fixed_dictionaries({"server_tool_call": server_tool_calls}),
    st.fixed_dictionaries({"server_tool_response": server_tool_responses}),
)


def _part(kind: dict[str, Any], thought: bool, thought_signature: bytes | None) -> Part:
    return Part(**kind, thought=thought, thought_signature=thought_signature)


#: A Part of any of the seven kinds, with or without the thought flag and signature.
parts: st.SearchStrategy[Part] = st.builds(
    _part, _part_kinds, st.booleans(), st.none() | st.binary(max_size=32)
)

_roles = st.sampled_from(["", "user", "model", "tool"]) | texts

#: Contents, from empty (no role, no parts) to a few parts.
contents: st.SearchStrategy[Content] = st.one_of(
    st.just(Content()),
    st.builds(Content, role=_roles, parts=st.lists(parts, max_size=4)),
)

_token_counts = st.integers(*INT32)

usage_metadata: st.SearchStrategy[UsageMetadata] = st.builds(
    UsageMetadata,
    prompt_token_count=_token_counts,
    candidates_token_count=_token_counts,
    total_token_count=_token_counts,
    cached_content_token_count=st.none() | _token_counts,
    thoughts_token_count=st.none() | _token_counts,
)

_indices = st.integers(min_value=0, max_value=2**31 - 1)


@st.composite
def groundings(draw: st.DrawFn) -> GroundingMetadata:
    """Grounding with every field set or not; citations name only sources that exist."""
    sources = draw(
        st.lists(st.builds(GroundingSource, uri=texts, title=_optional_texts), max_size=3)
    )
    citations = []
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        start = draw(st.none() | _indices)
        end = None if start is None else draw(st.integers(min_value=start, max_value=2**31 - 1))
        indices = (
            draw(st.lists(st.integers(min_value=0, max_value=len(sources) - 1), max_size=3))
            if sources
            else []
        )
        citations.append(
            Citation(
                start_index=start,
                end_index=end,
                text=draw(_optional_texts),
                source_indices=indices,
                cited_text=draw(_optional_texts),
            )
        )
    executions = draw(
        st.lists(
            st.builds(
                CodeExecution,
                code=texts,
                language=_optional_texts,
                outcome=st.none() | st.sampled_from(CodeExecutionOutcome),
                output=texts,
            ),
            max_size=2,
        )
    )
    return GroundingMetadata(
        sources=sources,
        queries=draw(st.lists(texts, max_size=2)),
        citations=citations,
        code_executions=executions,
        search_suggestions_html=draw(_optional_texts),
    )


llm_responses: st.SearchStrategy[LlmResponse] = st.builds(
    LlmResponse,
    content=st.none() | contents,
    usage_metadata=st.none() | usage_metadata,
    finish_reason=st.none() | st.sampled_from(FinishReason),
    partial=st.booleans(),
    turn_complete=st.booleans(),
    interrupted=st.booleans(),
    error_code=_optional_texts,
    error_message=_optional_texts,
    grounding_metadata=st.none() | st.just(GroundingMetadata()) | groundings(),
    model_version=_optional_texts,
)

_state_keys = st.one_of(
    texts,
    st.builds(lambda prefix, key: prefix + key, st.sampled_from(["app:", "user:", "temp:"]), texts),
)

event_actions: st.SearchStrategy[EventActions] = st.builds(
    EventActions,
    state_delta=st.dictionaries(_state_keys, json_values, max_size=5),
    artifact_delta=st.dictionaries(texts, st.integers(*INT64), max_size=4),
    skip_summarization=st.booleans(),
    transfer_to_agent=_optional_texts,
    escalate=st.booleans(),
)

#: Timezone-aware UTC datetimes with microseconds, over the whole range
#: ``google.protobuf.Timestamp`` allows (years 1 to 9999).
timestamps: st.SearchStrategy[datetime] = st.datetimes(
    min_value=datetime(1, 1, 1),
    max_value=datetime(9999, 12, 31, 23, 59, 59, 999_999),
    timezones=st.just(UTC),
)

events: st.SearchStrategy[Event] = st.builds(
    Event,
    id=st.uuids().map(str) | texts,
    timestamp=timestamps,
    invocation_id=texts,
    branch=texts,
    author=texts,
    llm_response=llm_responses,
    actions=event_actions,
    long_running_tool_ids=st.lists(texts, max_size=3),
)

_schemas = st.one_of(st.none(), st.just({}), json_objects)

tool_declarations: st.SearchStrategy[ToolDeclaration] = st.builds(
    ToolDeclaration,
    name=texts,
    description=texts,
    parameters_schema=_schemas,
    response_schema=_schemas,
    long_running=st.booleans(),
)


def expected_json(value: Any) -> Any:
    """What a JSON value looks like after the wire: integral floats within +-2**53 become ints
    (the codec's documented number rule) but ``-0.0``, which an int cannot hold, and tuples
    become lists; all else is unchanged."""
    if (
        isinstance(value, float)
        and value.is_integer()
        and abs(value) <= MAX_EXACT_INT
        and (value != 0 or math.copysign(1.0, value) > 0)
    ):
        return int(value)
    if isinstance(value, dict):
        return {key: expected_json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [expected_json(item) for item in value]
    return value


def assert_strictly_equal(actual: Any, expected: Any, path: str = "$") -> None:
    """Deep equality that also compares types (``True`` is not ``1``, ``1`` is not ``1.0``)."""
    assert type(actual) is type(expected), (
        f"{path}: {type(actual).__name__} {actual!r} != {type(expected).__name__} {expected!r}"
    )
    if isinstance(expected, dict):
        assert actual.keys() == expected.keys(), (
            f"{path}: keys {actual.keys()} != {expected.keys()}"
        )
        for key in expected:
            assert_strictly_equal(actual[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for index, (left, right) in enumerate(zip(actual, expected, strict=True)):
            assert_strictly_equal(left, right, f"{path}[{index}]")
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"
