"""Every served RPC against hostile input at the wire level, property-based.

Real AgentServer (AgentService, SessionService, health), ToolServer (ToolService) and
A2aAgentServer (A2AService) on 127.0.0.1, over a SQLite session store and a file artifact
store, are sent requests built from the real descriptors: a valid request of each method with
adversarial fields set or merged in (empty, huge, NUL and control-character strings, lone dots
and ``..``, numbers at and past their limits, enum values outside the enum, deep and invalid
JSON in the ``*_json`` fields, out-of-range timestamps, unset oneofs, duplicated repeated
fields), raw bytes (truncated, flipped, unknown fields appended, garbage), Values nested past
every limit and, for the bidirectional RPCs, streams that end early, start with the wrong
message, send a second first message or answer context requests with hostile answers.

For every call: the status is never UNKNOWN or INTERNAL (nor a hang: DEADLINE_EXCEEDED); a
refusal carries a message (and, from adk-mesh's services, its ErrorInfo: a status without it
is the client's transport failing, e.g. on a trailer past its metadata limit); the servers
keep serving; a refused write leaves the session, its listing and its artifacts as they
were, and an accepted one leaves a session that reads back. Reflection is gRPC's own (its
servicer answers bytes that do not parse with UNKNOWN), and health's Watch streams until
cancelled: neither is sent hostile requests.

The servers run on an event loop in a thread of their own for the whole module, so
hypothesis drives plain synchronous tests; each call is a coroutine handed to that loop.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
import grpc.aio
import pytest
from a2a.types import a2a_pb2
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.artifacts import FileArtifactService
from adk_mesh.contexts import ToolContext
from adk_mesh.memory.in_memory import InMemoryMemoryService
from adk_mesh.mesh import AgentServer, ToolServer, _status
from adk_mesh.mesh.a2a_server import A2aAgentServer
from adk_mesh.sessions import SqliteSessionService
from adk_mesh.testing import FunctionModel
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Part
from adk_mesh.v1 import agent_pb2, content_pb2, session_pb2, tool_pb2

T = TypeVar("T")

USER = "u1"
SESSION = "s-fuzz"
ARTIFACT = "doc.txt"
#: Seconds any one call may take: a call still running past it hangs (a property violation).
CALL_TIMEOUT = 10.0

#: Statuses a refusal may have: what the contract documents for bad requests
#: (PERMISSION_DENIED: credentials or request metadata forwarded over a call without mutual
#: TLS, DelegatedRun.forwarded_credentials).
REFUSALS = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.PERMISSION_DENIED,
    }
)

#: The writes of the session API and of a root run: refused, they must leave nothing behind.
WRITES = frozenset(
    {
        "/adk_mesh.v1.SessionService/CreateSession",
        "/adk_mesh.v1.SessionService/DeleteSession",
        "/adk_mesh.v1.SessionService/UpdateSessionState",
        "/adk_mesh.v1.SessionService/SaveArtifact",
        "/adk_mesh.v1.SessionService/DeleteArtifact",
        "/adk_mesh.v1.AgentService/Run",
    }
)


def echo(value: Any = None) -> dict[str, Any]:
    """Echo the value."""
    return {"value": value}


async def keep(tool_context: ToolContext) -> dict[str, Any]:
    """Save, load and list an artifact and search memory: every kind of context request."""
    version = await tool_context.save_artifact("note.txt", Part(text="note"))
    loaded = await tool_context.load_artifact("note.txt")
    keys = await tool_context.list_artifacts()
    memories = await tool_context.search_memory("note")
    return {
        "version": version,
        "loaded": loaded is not None,
        "keys": len(keys),
        "memories": len(memories),
    }


# --- the served mesh, on a loop of its own ------------------------------------------------


@dataclass
class Method:
    """One served RPC, as its descriptor tells it."""

    path: str
    input: Descriptor
    client_streaming: bool
    server_streaming: bool
    target: str

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[1]


@dataclass
class Call:
    """How one call ended."""

    code: grpc.StatusCode
    details: str
    responses: list[bytes]
    #: The reason of the adk-mesh ErrorInfo in the rich status ("" without one).
    reason: str = ""


class Mesh:
    """The servers and a client channel on an event loop in a thread (see the module doc)."""

    def __init__(self, root: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.root = root
        self.agent_target = ""
        self.tool_target = ""
        self.a2a_target = ""
        self.run(self._start())

    def run(self, coroutine: Awaitable[T]) -> T:
        async def wrapped() -> T:
            return await coroutine

        future: Future[T] = asyncio.run_coroutine_threadsafe(wrapped(), self.loop)
        return future.result(timeout=4 * CALL_TIMEOUT)

    async def _start(self) -> None:
        self.sessions = SqliteSessionService(self.root / "sessions.db")
        self.artifacts = FileArtifactService(self.root / "artifacts")
        agent = LlmAgent(name="helper", model=FunctionModel(lambda request: "done"))
        self.agent_server = AgentServer(
            agent,
            session_service=self.sessions,
            artifact_service=self.artifacts,
            memory_service=InMemoryMemoryService(),
        )
        self.tool_server = ToolServer([FunctionTool(echo), FunctionTool(keep)], name="echoes")
        self.agent_target = f"127.0.0.1:{await self.agent_server.start('127.0.0.1:0')}"
        self.tool_target = f"127.0.0.1:{await self.tool_server.start('127.0.0.1:0')}"
        # The A2A binding (its gRPC service, beside AgentService and SessionService).
        self.a2a_server = A2aAgentServer(
            LlmAgent(name="helper", model=FunctionModel(lambda request: "done"))
        )
        self.a2a_target = f"127.0.0.1:{await self.a2a_server.start('127.0.0.1:0')}"
        options = [("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        self.channels = {
            self.agent_target: grpc.aio.insecure_channel(self.agent_target, options=options),
            self.tool_target: grpc.aio.insecure_channel(self.tool_target, options=options),
            self.a2a_target: grpc.aio.insecure_channel(self.a2a_target, options=options),
        }
        await self.sessions.create_session(
            app_name="helper", user_id=USER, session_id=SESSION, state={"k": 1}
        )
        await self.artifacts.save_artifact(
            app_name="helper",
            user_id=USER,
            session_id=SESSION,
            filename=ARTIFACT,
            artifact=Part(text="first"),
        )

    async def _stop(self) -> None:
        for channel in self.channels.values():
            await channel.close()
        await self.agent_server.stop(None)
        await self.tool_server.stop(None)
        await self.a2a_server.stop(None)
        await self.sessions.close()
        await self.artifacts.close()

    def close(self) -> None:
        try:
            self.run(self._stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()
            self.loop.close()

    async def invoke(self, method: Method, payloads: list[bytes]) -> Call:
        """Send ``payloads`` (raw bytes, unchecked) to ``method``; how the call ended."""
        channel = self.channels[method.target]
        responses: list[bytes] = []
        try:
            if method.client_streaming:
                stream = channel.stream_stream(method.path)(iter(payloads), timeout=CALL_TIMEOUT)
                responses = [response async for response in stream]
            elif method.server_streaming:
                stream = channel.unary_stream(method.path)(payloads[0], timeout=CALL_TIMEOUT)
                responses = [response async for response in stream]
            else:
                responses = [
                    await channel.unary_unary(method.path)(payloads[0], timeout=CALL_TIMEOUT)
                ]
        except grpc.aio.AioRpcError as error:
            info = _status._error_info(error)
            reason = info.reason if info is not None else ""
            return Call(error.code(), error.details() or "", responses, reason)
        return Call(grpc.StatusCode.OK, "", responses)

    async def interactive(
        self, path: str, first: Message, answer: Callable[[int], Message]
    ) -> tuple[Call, int]:
        """A bidirectional call that answers each context request the server makes with
        ``answer(request_id)``; how it ended, and how many requests it answered."""
        target = self.tool_target if "ToolService" in path else self.agent_target
        call = self.channels[target].stream_stream(path)(timeout=CALL_TIMEOUT)
        responses: list[bytes] = []
        answered = 0
        response_class = message_class(
            first.DESCRIPTOR.file.services_by_name[path.split("/")[1].rsplit(".", 1)[1]]
            .methods_by_name[path.rsplit("/", 1)[1]]
            .output_type
        )
        try:
            await call.write(first.SerializeToString())
            while (raw := await call.read()) is not grpc.aio.EOF:
                responses.append(raw)
                message = response_class.FromString(raw)
                if message.WhichOneof("message") == "context_request":
                    answered += 1
                    await call.write(
                        answer(message.context_request.request_id).SerializeToString()  # type: ignore[attr-defined]
                    )
            await call.wait_for_connection()
        except grpc.aio.AioRpcError as error:
            info = _status._error_info(error)
            return Call(
                error.code(), error.details() or "", responses, info.reason if info else ""
            ), answered
        code = await call.code()
        details = await call.details()
        return Call(code, details or "", responses), answered

    async def unary(self, path: str, request: Message, target: str = "") -> Call:
        method = Method(path, request.DESCRIPTOR, False, False, target or self.agent_target)
        return await self.invoke(method, [request.SerializeToString()])

    async def streamed(self, path: str, request: Message) -> Call:
        method = Method(path, request.DESCRIPTOR, False, True, self.agent_target)
        return await self.invoke(method, [request.SerializeToString()])


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    served = Mesh(tmp_path_factory.mktemp("fuzz17"))
    try:
        yield served
    finally:
        served.close()


def _methods() -> list[tuple[str, Descriptor, MethodDescriptor]]:
    """Every method of the services the servers register, with its request type."""
    found = []
    for module in (agent_pb2, session_pb2, tool_pb2, health_pb2, a2a_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                found.append((f"/{service.full_name}/{method.name}", method.input_type, method))
    return found


#: Every method of every service the servers register (reflection is gRPC's own).
METHODS = [
    path
    for path, _, _ in _methods()
    # Watch streams until cancelled; List is not implemented by grpcio's health servicer
    # (UNIMPLEMENTED, gRPC's answer for a method a server does not serve).
    if path not in ("/grpc.health.v1.Health/Watch", "/grpc.health.v1.Health/List")
]


def method_of(mesh: Mesh, path: str) -> Method:
    for found, input_type, method in _methods():
        if found == path:
            target = (
                mesh.tool_target
                if "ToolService" in path
                else mesh.a2a_target
                if path.startswith("/lf.a2a.")
                else mesh.agent_target
            )
            return Method(
                path, input_type, method.client_streaming, method.server_streaming, target
            )
    raise KeyError(path)


def message_class(descriptor: Descriptor) -> type[Message]:
    cls: type[Message] = message_factory.GetMessageClass(descriptor)
    return cls


# --- adversarial values ---------------------------------------------------------------------

_DEEP = 5000
_HOSTILE_TEXT = [
    "",
    " ",
    "u1",
    "s-other",
    "helper",
    "\x00",
    "a\x00b",
    "\x07\x1b[31m\r\n",
    "\u202e",
    "\ufeff",
    "😀",
    "e\u0301",
    ".",
    "..",
    ".a",
    "a.",
    "a/b",
    "../../etc/passwd",
    "/abs",
    "user:",
    "user:../x",
    "user:a/../b",
    "%s%n",
    "a" * 129,
    "x" * 100_000,
]
_HOSTILE_JSON = [
    "",
    "{",
    "[1,",
    "nul",
    "NaN",
    "Infinity",
    "-Infinity",
    "1" * 400,
    '"\\ud800"',
    '{"a": 1, "a": 2}',
    "[" * _DEEP + "]" * _DEEP,
    '{"a":' * _DEEP + "1" + "}" * _DEEP,
    "[" * 300 + "]" * 300,
    "null",
    "1e999",
    '"\\u0000"',
    "{} trailing",
    "\x00",
]
_INT32 = [-(2**31), -1, 0, 1, 2, 2**31 - 1]
_INT64 = [-(2**63), -(2**53) - 1, -1, 0, 1, 2**53 + 1, 2**63 - 1]
_UINT32 = [0, 1, 2**32 - 1]
_UINT64 = [0, 1, 2**63, 2**64 - 1]
_DOUBLES = [math.nan, math.inf, -math.inf, -0.0, 0.0, 1e308, 5e-324, -1.0]
_ENUMS = [-(2**31), -1, 0, 1, 2, 3, 99, 2**31 - 1]
_TIMESTAMP_SECONDS = [-62135596801, -62135596800, -1, 0, 253402300799, 253402300800, 2**63 - 1]
_TIMESTAMP_NANOS = [-1, 0, 999_999_999, 1_000_000_000, 2**31 - 1]

texts = st.sampled_from(_HOSTILE_TEXT) | st.text(max_size=12)
json_texts = st.sampled_from(_HOSTILE_JSON) | texts
datas = st.sampled_from([b"", b"\x00" * 31, b"\xff" * 33, b"\x00" * 32 * 10_001]) | st.binary(
    max_size=70
)

_SCALARS: dict[int, st.SearchStrategy[Any]] = {
    FieldDescriptor.TYPE_INT32: st.sampled_from(_INT32),
    FieldDescriptor.TYPE_SINT32: st.sampled_from(_INT32),
    FieldDescriptor.TYPE_SFIXED32: st.sampled_from(_INT32),
    FieldDescriptor.TYPE_INT64: st.sampled_from(_INT64),
    FieldDescriptor.TYPE_SINT64: st.sampled_from(_INT64),
    FieldDescriptor.TYPE_SFIXED64: st.sampled_from(_INT64),
    FieldDescriptor.TYPE_UINT32: st.sampled_from(_UINT32),
    FieldDescriptor.TYPE_FIXED32: st.sampled_from(_UINT32),
    FieldDescriptor.TYPE_UINT64: st.sampled_from(_UINT64),
    FieldDescriptor.TYPE_FIXED64: st.sampled_from(_UINT64),
    FieldDescriptor.TYPE_DOUBLE: st.sampled_from(_DOUBLES),
    FieldDescriptor.TYPE_FLOAT: st.sampled_from(_DOUBLES),
    FieldDescriptor.TYPE_BOOL: st.booleans(),
    FieldDescriptor.TYPE_ENUM: st.sampled_from(_ENUMS),
    FieldDescriptor.TYPE_BYTES: datas,
}

MAX_DEPTH = 4


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    if field.type == FieldDescriptor.TYPE_STRING:
        return json_texts if field.name.endswith("_json") else texts
    return _SCALARS[field.type]


@st.composite
def messages(draw: st.DrawFn, descriptor: Descriptor, depth: int = 0) -> Message:
    """A sparse message of ``descriptor``: a few fields, each with a hostile value."""
    message = message_class(descriptor)()
    if descriptor.full_name == "google.protobuf.Timestamp":
        message.seconds = draw(st.sampled_from(_TIMESTAMP_SECONDS))  # type: ignore[attr-defined]
        message.nanos = draw(st.sampled_from(_TIMESTAMP_NANOS))  # type: ignore[attr-defined]
        return message
    if depth >= MAX_DEPTH or not descriptor.fields:
        return message
    chosen = draw(
        st.lists(
            st.sampled_from(list(descriptor.fields)), max_size=4 if depth == 0 else 2, unique=True
        )
    )
    for field in chosen:
        _set_field(draw, message, field, depth)
    return message


def _set_field(draw: st.DrawFn, message: Message, field: FieldDescriptor, depth: int) -> None:
    target = getattr(message, field.name)
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key_field = field.message_type.fields_by_name["key"]
        value_field = field.message_type.fields_by_name["value"]
        for _ in range(draw(st.integers(1, 3))):
            key = draw(_scalar(key_field))
            if value_field.message_type is not None:
                target[key].CopyFrom(draw(messages(value_field.message_type, depth + 1)))
            else:
                target[key] = draw(_scalar(value_field))
        return
    repeated = field.is_repeated
    count = draw(st.integers(1, 3)) if repeated else 1
    values: list[Any] = []
    for _ in range(count):
        if values and draw(st.booleans()):
            values.append(values[-1])  # a duplicate
        elif field.message_type is not None:
            values.append(draw(messages(field.message_type, depth + 1)))
        else:
            values.append(draw(_scalar(field)))
    if repeated:
        if field.message_type is not None:
            for value in values:
                target.add().CopyFrom(value)
        else:
            target.extend(values)
    elif field.message_type is not None:
        target.CopyFrom(values[0])
    else:
        setattr(message, field.name, values[0])


def mutate(draw: st.DrawFn, message: Message, depth: int = 0) -> None:
    """Set one field somewhere in ``message`` (a valid request) to a hostile value: the rest
    stays valid, so the call gets past the first checks to the code behind them."""
    fields = list(message.DESCRIPTOR.fields)
    if not fields:
        return
    field = draw(st.sampled_from(fields))
    descend = (
        field.message_type is not None
        and not field.is_repeated
        and depth < MAX_DEPTH
        and field.message_type.full_name != "google.protobuf.Timestamp"
        and draw(st.integers(0, 3)) > 0
    )
    if descend:
        mutate(draw, getattr(message, field.name), depth + 1)
    else:
        _set_field(draw, message, field, depth)


#: A path to a string somewhere in a request: field names, then "key" when the string is a
#: map's key.
StringPath = tuple[str, ...]
#: Deep enough to reach the text of a part of an event of a delegated run's session view.
PATH_DEPTH = 7


def string_paths(descriptor: Descriptor, depth: int = 0) -> list[StringPath]:
    """Every string field (and string map key) of ``descriptor``, down to PATH_DEPTH levels."""
    found: list[StringPath] = []
    for field in descriptor.fields:
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            found.append((field.name, "key"))
            value = entry.fields_by_name["value"]
            if value.type == FieldDescriptor.TYPE_STRING:
                found.append((field.name, "value"))
            elif value.message_type is not None and depth < PATH_DEPTH:
                found.extend(
                    (field.name, "value", *rest)
                    for rest in string_paths(value.message_type, depth + 1)
                )
        elif field.type == FieldDescriptor.TYPE_STRING:
            found.append((field.name,))
        elif entry is not None and depth < PATH_DEPTH:
            found.extend((field.name, *rest) for rest in string_paths(entry, depth + 1))
    return found


def set_string(message: Message, path: StringPath, text: str) -> None:
    """Put ``text`` at ``path`` in ``message`` (creating what leads there)."""
    name, rest = path[0], path[1:]
    field = message.DESCRIPTOR.fields_by_name[name]
    target = getattr(message, name)
    entry = field.message_type
    if entry is not None and entry.GetOptions().map_entry:
        value = entry.fields_by_name["value"]
        if rest[0] == "key":
            if value.message_type is not None:
                target[text].SetInParent()
            else:
                target[text] = "" if value.type == FieldDescriptor.TYPE_STRING else 0
        elif value.message_type is None:
            target["k"] = text
        else:
            set_string(target["k"], rest[1:], text)
    elif entry is not None:
        set_string(target.add() if field.is_repeated else target, rest, text)
    elif field.is_repeated:
        target.append(text)
    else:
        setattr(message, name, text)


# --- valid requests, each method's base -----------------------------------------------------


def _hi() -> content_pb2.Content:
    return content_pb2.Content(role="user", parts=[content_pb2.Part(text="hi")])


def _caller() -> tool_pb2.CallerContext:
    return tool_pb2.CallerContext(
        app_name="helper", user_id=USER, session_id=SESSION, agent_name="helper"
    )


def _delegated_run() -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        delegated=agent_pb2.DelegatedRun(
            invocation_id="e-fuzz",
            user_content=_hi(),
            session=agent_pb2.SessionView(app_name="helper", user_id=USER, session_id="s-view"),
        )
    )


def _call_keep() -> tool_pb2.CallToolRequest:
    return tool_pb2.CallToolRequest(context=_caller(), tool_name="keep")


def _call_tool() -> tool_pb2.CallToolRequest:
    request = tool_pb2.CallToolRequest(context=_caller(), tool_name="echo")
    request.args.update({"value": 1})
    return request


def base_requests(path: str) -> list[Message]:
    """Valid first messages of ``path`` (more than one where a method has modes)."""
    ids = {"user_id": USER, "session_id": SESSION}
    bases: dict[str, list[Message]] = {
        "ListApps": [session_pb2.ListAppsRequest()],
        "CreateSession": [session_pb2.CreateSessionRequest(user_id=USER)],
        "GetSession": [session_pb2.GetSessionRequest(**ids)],
        "ListSessions": [session_pb2.ListSessionsRequest(user_id=USER, page_size=2)],
        "DeleteSession": [
            session_pb2.DeleteSessionRequest(user_id=USER, session_id="s-gone", allow_missing=True)
        ],
        "UpdateSessionState": [session_pb2.UpdateSessionStateRequest(**ids)],
        "ListArtifactKeys": [session_pb2.SessionServiceListArtifactKeysRequest(**ids)],
        "LoadArtifact": [session_pb2.SessionServiceLoadArtifactRequest(**ids, filename=ARTIFACT)],
        "SaveArtifact": [
            session_pb2.SessionServiceSaveArtifactRequest(
                **ids, filename=ARTIFACT, artifact=content_pb2.Part(text="next")
            )
        ],
        "ListArtifactVersions": [
            session_pb2.SessionServiceListArtifactVersionsRequest(**ids, filename=ARTIFACT)
        ],
        "SaveArtifactStream": [
            session_pb2.SessionServiceSaveArtifactStreamRequest(
                header=session_pb2.SaveArtifactStreamHeader(
                    **ids, filename=ARTIFACT, artifact=content_pb2.Part(text=""), size_bytes=0
                )
            )
        ],
        "LoadArtifactStream": [
            session_pb2.SessionServiceLoadArtifactStreamRequest(**ids, filename=ARTIFACT)
        ],
        "DeleteArtifact": [
            session_pb2.SessionServiceDeleteArtifactRequest(
                **ids, filename="gone.txt", allow_missing=True
            )
        ],
        "Run": [
            agent_pb2.RunRequest(root=agent_pb2.RootRun(**ids, new_message=_hi())),
            _delegated_run(),
        ],
        "RunDelegated": [agent_pb2.RunDelegatedRequest(run=_delegated_run())],
        "Describe": [agent_pb2.DescribeRequest()],
        "ListTools": [tool_pb2.ListToolsRequest(context=_caller())],
        "CallTool": [_call_tool()],
        "CallToolInteractive": [tool_pb2.CallToolInteractiveRequest(call=_call_tool())],
        "Check": [health_pb2.HealthCheckRequest()],
        "SendMessage": [_a2a_message()],
        "SendStreamingMessage": [_a2a_message()],
        "GetTask": [a2a_pb2.GetTaskRequest(id="t-1")],
        "ListTasks": [a2a_pb2.ListTasksRequest()],
        "CancelTask": [a2a_pb2.CancelTaskRequest(id="t-1")],
        "SubscribeToTask": [a2a_pb2.SubscribeToTaskRequest(id="t-1")],
        "CreateTaskPushNotificationConfig": [a2a_pb2.TaskPushNotificationConfig()],
        "GetTaskPushNotificationConfig": [a2a_pb2.GetTaskPushNotificationConfigRequest()],
        "ListTaskPushNotificationConfigs": [a2a_pb2.ListTaskPushNotificationConfigsRequest()],
        "GetExtendedAgentCard": [a2a_pb2.GetExtendedAgentCardRequest()],
        "DeleteTaskPushNotificationConfig": [a2a_pb2.DeleteTaskPushNotificationConfigRequest()],
    }
    return bases[path.rsplit("/", 1)[1]]


def _a2a_message() -> a2a_pb2.SendMessageRequest:
    request = a2a_pb2.SendMessageRequest()
    request.message.message_id = "m-1"
    request.message.role = a2a_pb2.Role.ROLE_USER
    request.message.parts.add().text = "hi"
    return request


# --- the properties -------------------------------------------------------------------------


def _target_ids(path: str, request: Message | None) -> tuple[str, str, str]:
    """The user, session and artifact a write names (as sent), to read them before and after."""
    if request is None:
        return USER, SESSION, ARTIFACT
    if path.endswith("/Run"):
        run = request  # a RunRequest
        if run.WhichOneof("mode") != "root":  # type: ignore[attr-defined]
            return USER, SESSION, ARTIFACT
        root = run.root  # type: ignore[attr-defined]
        return root.user_id, root.session_id, ARTIFACT
    fields = request.DESCRIPTOR.fields_by_name
    user = request.user_id if "user_id" in fields else USER  # type: ignore[attr-defined]
    session = request.session_id if "session_id" in fields else SESSION  # type: ignore[attr-defined]
    filename = request.filename if "filename" in fields else ARTIFACT  # type: ignore[attr-defined]
    return user, session, filename


async def snapshot(mesh: Mesh, user: str, session: str, filename: str) -> tuple[Any, ...]:
    """What a write to ``session`` could change, as a client reads it (or how the read ended)."""
    read = await mesh.streamed(
        "/adk_mesh.v1.SessionService/GetSession",
        session_pb2.GetSessionRequest(user_id=user, session_id=session),
    )
    listed = await mesh.streamed(
        "/adk_mesh.v1.SessionService/ListSessions", session_pb2.ListSessionsRequest(user_id=user)
    )
    keys = await mesh.unary(
        "/adk_mesh.v1.SessionService/ListArtifactKeys",
        session_pb2.SessionServiceListArtifactKeysRequest(user_id=user, session_id=session),
    )
    versions = await mesh.unary(
        "/adk_mesh.v1.SessionService/ListArtifactVersions",
        session_pb2.SessionServiceListArtifactVersionsRequest(
            user_id=user, session_id=session, filename=filename
        ),
    )
    return tuple((call.code, call.responses) for call in (read, listed, keys, versions))


def _session_made(method: Method, call: Call) -> str:
    """The id of the session a write without one made (CreateSession, a root Run)."""
    if method.name == "CreateSession" and call.responses:
        made = session_pb2.CreateSessionResponse.FromString(call.responses[0])
        return made.session.id
    if method.name == "Run" and call.responses:
        return agent_pb2.RunResponse.FromString(call.responses[0]).session_id
    return ""


async def still_serving(mesh: Mesh) -> None:
    described = await mesh.unary("/adk_mesh.v1.AgentService/Describe", agent_pb2.DescribeRequest())
    assert described.code == grpc.StatusCode.OK, described
    listed = await mesh.unary(
        "/adk_mesh.v1.ToolService/ListTools",
        tool_pb2.ListToolsRequest(context=_caller()),
        mesh.tool_target,
    )
    assert listed.code == grpc.StatusCode.OK, listed


def assert_clean(call: Call, what: str) -> None:
    assert call.code not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), (what, call)
    if call.code == grpc.StatusCode.OK:
        return
    assert call.code in REFUSALS, (what, call)
    if what.startswith("/grpc.health."):
        # gRPC's own health service: its protocol answers an unknown service NOT_FOUND
        # without a message, as every gRPC health server does.
        return
    if what.startswith("/lf.a2a."):
        # a2a-sdk's servicer refuses in A2A's terms (its own error details), with a message.
        assert call.details.strip(), (what, call)
        return
    # Every adk-mesh refusal says why in ErrorInfo: a status without it is gRPC's own (a
    # transport failure, a trailer over the client's metadata limit), not the service's.
    assert call.reason, (what, call)
    assert call.details.strip(), (what, call)
    assert call.details != call.code.name, (what, call)


async def check_call(
    mesh: Mesh, method: Method, payloads: list[bytes], request: Message | None
) -> Call:
    """Send the call and assert every property of the module docstring."""
    write = method.path in WRITES
    ids = _target_ids(method.path, request)
    before = await snapshot(mesh, *ids) if write else None
    call = await mesh.invoke(method, payloads)
    assert_clean(call, method.path)
    if write and call.code != grpc.StatusCode.OK:
        assert await snapshot(mesh, *ids) == before, (method.path, call, "left something behind")
    if write and call.code == grpc.StatusCode.OK and not method.name.startswith("Delete"):
        # What a write accepted reads back: no stored value the read path refuses.
        user, session, _ = ids
        session = session or _session_made(method, call)
        if session:
            read = await mesh.streamed(
                "/adk_mesh.v1.SessionService/GetSession",
                session_pb2.GetSessionRequest(user_id=user, session_id=session),
            )
            assert read.code == grpc.StatusCode.OK, (method.path, request, read)
    await still_serving(mesh)
    return call


FUZZ = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("path", METHODS)
@FUZZ
@given(data=st.data())
def test_hostile_fields_are_refused_cleanly(mesh: Mesh, path: str, data: st.DataObject) -> None:
    method = method_of(mesh, path)
    request = data.draw(st.sampled_from(base_requests(path)), label="base")
    request = message_class(request.DESCRIPTOR).FromString(request.SerializeToString())
    mode = data.draw(st.sampled_from(["mutate", "merge", "scratch"]), label="mode")
    if mode == "mutate":
        for _ in range(data.draw(st.integers(1, 3), label="mutations")):
            data.draw(st.composite(lambda draw: mutate(draw, request))())
    else:
        if mode == "scratch":
            request.Clear()
        request.MergeFrom(data.draw(messages(request.DESCRIPTOR), label="hostile"))
    payloads = [request.SerializeToString()]
    if method.client_streaming and data.draw(st.booleans(), label="second message"):
        payloads.append(data.draw(messages(request.DESCRIPTOR), label="next").SerializeToString())
    mesh.run(check_call(mesh, method, payloads, request))


# --- regressions the properties found, each as a plain test ---------------------------------

#: A refusal's message travels twice in the trailers (grpc-message, and in the rich status),
#: which a client refuses whole past its metadata limit (16 KiB by default, 8 KiB soft): a
#: message must stay far below, whatever the request held.
MAX_DETAILS_CHARS = 1024


def _refused_briefly(call: Call, *named: str) -> None:
    assert call.code == grpc.StatusCode.INVALID_ARGUMENT, call
    assert call.reason, call
    assert len(call.details) <= MAX_DETAILS_CHARS, call.details[:200]
    for name in named:
        assert name in call.details, call.details


@pytest.mark.parametrize(
    ("path", "request_"),
    [
        (
            "/adk_mesh.v1.SessionService/CreateSession",
            session_pb2.CreateSessionRequest(user_id=USER, state_json={"x" * 100_000: ""}),
        ),
        (
            "/adk_mesh.v1.SessionService/UpdateSessionState",
            session_pb2.UpdateSessionStateRequest(
                user_id=USER, session_id=SESSION, state_delta_json={"é" * 20_000: "{"}
            ),
        ),
        (
            "/adk_mesh.v1.ToolService/ListTools",
            tool_pb2.ListToolsRequest(context=_caller(), state_json={"x" * 100_000: "nul"}),
        ),
    ],
    ids=["create-session", "update-state", "list-tools"],
)
def test_a_huge_key_of_an_unreadable_json_entry_is_not_echoed(
    mesh: Mesh, path: str, request_: Message
) -> None:
    # The key came back whole in the message: the client got RESOURCE_EXHAUSTED "received
    # metadata size exceeds hard limit" from its own transport, never the refusal.
    target = mesh.tool_target if "ToolService" in path else mesh.agent_target
    call = mesh.run(mesh.unary(path, request_, target))
    _refused_briefly(call, "_json[", "characters")


def test_a_huge_key_of_a_value_map_entry_that_is_no_json_is_not_echoed(mesh: Mesh) -> None:
    request = tool_pb2.CallToolRequest(context=_caller(), tool_name="echo")
    request.state["k" * 100_000].number_value = math.nan
    call = mesh.run(mesh.unary("/adk_mesh.v1.ToolService/CallTool", request, mesh.tool_target))
    _refused_briefly(call, "CallToolRequest.state[", "nan")


@pytest.mark.parametrize(
    "number", ["1" * 100_000 + ".5", "9" * 50_000 + "e9", "-" + "1" * 100_000 + "e5"]
)
def test_a_huge_number_in_json_text_is_not_echoed(mesh: Mesh, number: str) -> None:
    request = tool_pb2.CallToolRequest(
        context=_caller(), tool_name="echo", args_json='{"value": ' + number + "}"
    )
    call = mesh.run(mesh.unary("/adk_mesh.v1.ToolService/CallTool", request, mesh.tool_target))
    _refused_briefly(call, "CallToolRequest.args_json", "not a finite number")
    update = session_pb2.UpdateSessionStateRequest(
        user_id=USER, session_id=SESSION, state_delta_json={"k": number}
    )
    before = mesh.run(snapshot(mesh, USER, SESSION, ARTIFACT))
    call = mesh.run(mesh.unary("/adk_mesh.v1.SessionService/UpdateSessionState", update))
    _refused_briefly(call, "state_delta_json['k']")
    assert mesh.run(snapshot(mesh, USER, SESSION, ARTIFACT)) == before


#: Bytes no message of the contract parses from (field 1 of every request here is a message
#: or a string): a tag with no value, a length past the end, a varint that never ends, the
#: end of a group never opened.
MALFORMED = {
    "tag-without-value": b"\x0a",
    "length-past-the-end": b"\x0a\x7f\x01",
    "invalid-varint": b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
    "group-end-without-start": b"\x0c",
}


@pytest.mark.parametrize("malformed", list(MALFORMED.values()), ids=list(MALFORMED))
@pytest.mark.parametrize(
    "path",
    ["/adk_mesh.v1.AgentService/RunDelegated", "/adk_mesh.v1.ToolService/CallToolInteractive"],
)
def test_a_bidirectional_call_whose_first_message_does_not_parse_is_invalid_argument(
    mesh: Mesh, path: str, malformed: bytes
) -> None:
    # gRPC's deserializer raised into the servicer's first read: INTERNAL, as if the
    # service had failed, where the unary methods answer INVALID_ARGUMENT.
    call = mesh.run(mesh.invoke(method_of(mesh, path), [malformed]))
    assert call.code == grpc.StatusCode.INVALID_ARGUMENT, call
    assert call.reason, call
    assert "not a valid" in call.details, call.details
    mesh.run(still_serving(mesh))


def test_a_delegated_run_whose_answer_to_its_context_request_does_not_parse_is_refused(
    mesh: Mesh,
) -> None:
    # A view naming one event by its digest (never sent here before): the service asks the
    # caller for it before the run starts, and the caller's answer is bytes that do not parse.
    request = _delegated_run()
    request.delegated.session.omitted_events = 1
    request.delegated.session.history_digests = b"\x01" * 32
    first = agent_pb2.RunDelegatedRequest(run=request).SerializeToString()
    method = method_of(mesh, "/adk_mesh.v1.AgentService/RunDelegated")
    call = mesh.run(mesh.invoke(method, [first, MALFORMED["length-past-the-end"]]))
    assert call.code == grpc.StatusCode.INVALID_ARGUMENT, call
    assert "not a valid" in call.details, call.details


# --- raw bytes and stream shapes --------------------------------------------------------------


@st.composite
def raw_payloads(draw: st.DrawFn, encoded: bytes) -> bytes:
    """``encoded`` (a valid request) cut, extended or replaced at the byte level."""
    kind = draw(st.sampled_from(["truncated", "unknown-field", "garbage", "flipped", "appended"]))
    if kind == "truncated" and encoded:
        return encoded[: draw(st.integers(0, len(encoded) - 1))]
    if kind == "unknown-field":
        # Field 1000 as a varint, a fixed64, a length-delimited run and a fixed32: unknown
        # fields a newer client may send, which a proto3 reader keeps aside and ignores.
        unknown = draw(
            st.sampled_from(
                [
                    b"\xc0\x3e\x01",
                    b"\xc1\x3e" + b"\x00" * 8,
                    b"\xc2\x3e\x03abc",
                    b"\xc5\x3e\x00\x00\x00\x00",
                ]
            )
        )
        return encoded + unknown
    if kind == "flipped" and encoded:
        at = draw(st.integers(0, len(encoded) - 1))
        return encoded[:at] + bytes([encoded[at] ^ draw(st.integers(1, 255))]) + encoded[at + 1 :]
    if kind == "appended":
        return encoded + draw(st.binary(min_size=1, max_size=16))
    return draw(st.binary(max_size=64))


@pytest.mark.parametrize("path", METHODS)
@FUZZ
@given(data=st.data())
def test_raw_bytes_are_refused_cleanly(mesh: Mesh, path: str, data: st.DataObject) -> None:
    method = method_of(mesh, path)
    request = data.draw(st.sampled_from(base_requests(path)), label="base")
    payload = data.draw(raw_payloads(request.SerializeToString()), label="payload")
    payloads = [payload]
    if method.client_streaming and data.draw(st.booleans(), label="valid first"):
        payloads = [request.SerializeToString(), payload]
    parsed: Message | None
    try:
        parsed = message_class(request.DESCRIPTOR).FromString(payload)
    except Exception:
        parsed = None
    mesh.run(check_call(mesh, method, payloads, parsed if len(payloads) == 1 else request))


BIDIRECTIONAL = [
    path for path in METHODS if path.endswith(("/RunDelegated", "/CallToolInteractive"))
]


def _context_response(path: str, request_id: int) -> bytes:
    message = (
        agent_pb2.RunDelegatedRequest()
        if "RunDelegated" in path
        else tool_pb2.CallToolInteractiveRequest()
    )
    message.context_response.request_id = request_id
    message.context_response.saved_version = 1
    return message.SerializeToString()


@pytest.mark.parametrize("path", BIDIRECTIONAL)
@pytest.mark.parametrize(
    "shape",
    [
        "no-message",
        "answer-first",
        "empty-first",
        "two-firsts",
        "unasked-answer",
        "answer-then-first",
    ],
)
def test_a_bidirectional_call_of_the_wrong_shape_is_refused_cleanly(
    mesh: Mesh, path: str, shape: str
) -> None:
    first = base_requests(path)[0].SerializeToString()
    payloads = {
        "no-message": [],
        "answer-first": [_context_response(path, 1)],
        "empty-first": [b""],
        "two-firsts": [first, first],
        "unasked-answer": [first, _context_response(path, 2**64 - 1)],
        "answer-then-first": [_context_response(path, 0), first],
    }[shape]
    call = mesh.run(check_call(mesh, method_of(mesh, path), payloads, None))
    if shape in ("no-message", "answer-first", "empty-first", "answer-then-first"):
        assert call.code == grpc.StatusCode.INVALID_ARGUMENT, call


@pytest.mark.parametrize("malformed", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_health_check_that_does_not_parse_is_invalid_argument(
    mesh: Mesh, malformed: bytes
) -> None:
    # Registered as generated, health answered bytes that do not parse with gRPC's UNKNOWN
    # (its deserializer raised), unlike every other method of the port.
    method = method_of(mesh, "/grpc.health.v1.Health/Check")
    for target in (mesh.agent_target, mesh.tool_target, mesh.a2a_target):
        method.target = target
        call = mesh.run(mesh.invoke(method, [malformed]))
        assert call.code == grpc.StatusCode.INVALID_ARGUMENT, call
        assert "grpc.health.v1.HealthCheckRequest" in call.details, call.details
    served = mesh.run(mesh.unary("/grpc.health.v1.Health/Check", health_pb2.HealthCheckRequest()))
    assert served.code == grpc.StatusCode.OK, served
    assert health_pb2.HealthCheckResponse.FromString(served.responses[0]).status == (
        health_pb2.HealthCheckResponse.SERVING
    )


def test_a_health_watch_streams_through_the_guard(mesh: Mesh) -> None:
    """grpcio's health Watch streams by writing (context.write in a coroutine), not by
    yielding: the guard that refuses bytes that do not parse wrapped it as a generator, and
    every Watch failed with UNKNOWN ("'async for' requires an object with __aiter__") — a
    Kubernetes or Envoy health watcher, and a draining server's NOT_SERVING, went unseen."""

    async def first_status(target: str) -> int:
        async with grpc.aio.insecure_channel(target) as channel:
            watch = channel.unary_stream(
                "/grpc.health.v1.Health/Watch",
                request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                response_deserializer=health_pb2.HealthCheckResponse.FromString,
            )(health_pb2.HealthCheckRequest(), timeout=10)
            async for response in watch:
                watch.cancel()
                return int(response.status)
        raise AssertionError("the watch ended without a status")

    for target in (mesh.agent_target, mesh.tool_target, mesh.a2a_target):
        assert mesh.run(first_status(target)) == health_pb2.HealthCheckResponse.SERVING


@FUZZ
@given(data=st.data())
def test_hostile_answers_to_context_requests_are_handled_cleanly(
    mesh: Mesh, data: st.DataObject
) -> None:
    # The server asks its caller for artifacts and memory; the caller's answers are hostile
    # (the wrong kind, bad parts, out-of-range versions and timestamps, errors of any reason).
    path = "/adk_mesh.v1.ToolService/CallToolInteractive"

    # Drawn here: hypothesis draws in the test's thread only, the answers go from the loop's.
    answers = [
        data.draw(messages(tool_pb2.ContextResponse.DESCRIPTOR), label=f"answer {number}")
        for number in range(4)
    ]

    def answer(request_id: int) -> Message:
        response = answers[min(request_id, len(answers)) - 1]
        response.request_id = request_id  # type: ignore[attr-defined]
        return tool_pb2.CallToolInteractiveRequest(context_response=response)

    first = tool_pb2.CallToolInteractiveRequest(call=_call_keep())
    call, answered = mesh.run(mesh.interactive(path, first, answer))
    assert answered >= 1
    assert_clean(call, path)
    mesh.run(still_serving(mesh))


@pytest.mark.parametrize("malformed", list(MALFORMED.values()), ids=list(MALFORMED))
@pytest.mark.parametrize(
    "path", ["/lf.a2a.v1.A2AService/SendMessage", "/lf.a2a.v1.A2AService/SubscribeToTask"]
)
def test_an_a2a_request_that_does_not_parse_is_invalid_argument(
    mesh: Mesh, path: str, malformed: bytes
) -> None:
    # Registered as generated, the A2A service answered bytes that do not parse with gRPC's
    # UNKNOWN (its deserializer raised), unlike the other services of the same port.
    call = mesh.run(mesh.invoke(method_of(mesh, path), [malformed]))
    assert call.code == grpc.StatusCode.INVALID_ARGUMENT, call
    assert "lf.a2a.v1." in call.details, call.details
    answered = mesh.run(mesh.invoke(method_of(mesh, path), [_a2a_message().SerializeToString()]))
    assert answered.code != grpc.StatusCode.UNKNOWN, answered


@pytest.mark.parametrize(
    ("seconds", "nanos"),
    [(-62135596801, 0), (253402300800, 0), (0, -1), (0, 1_000_000_000)],
    ids=["before-year-1", "after-year-9999", "negative-nanos", "nanos-past-a-second"],
)
def test_listing_a2a_tasks_after_a_time_no_timestamp_holds_is_invalid_argument(
    mesh: Mesh, seconds: int, nanos: int
) -> None:
    # The task store read the time with protobuf's ToNanoseconds, whose ValueError reached
    # gRPC as UNKNOWN (JSON-RPC refuses such a time as it parses the request).
    request = a2a_pb2.ListTasksRequest()
    request.status_timestamp_after.seconds = seconds
    request.status_timestamp_after.nanos = nanos
    path = "/lf.a2a.v1.A2AService/ListTasks"
    call = mesh.run(mesh.invoke(method_of(mesh, path), [request.SerializeToString()]))
    assert call.code == grpc.StatusCode.INVALID_ARGUMENT, call
    assert "status_timestamp_after" in call.details, call.details
    listed = mesh.run(mesh.invoke(method_of(mesh, path), [b""]))
    assert listed.code == grpc.StatusCode.OK, listed


def _length_delimited(tag: int, payload: bytes) -> bytes:
    size, length = bytearray(), len(payload)
    while True:
        byte, length = length & 0x7F, length >> 7
        size.append(byte | (0x80 if length else 0))
        if not length:
            return bytes([tag]) + bytes(size) + payload


def deep_value(depth: int) -> bytes:
    """A ``google.protobuf.Value`` nested ``depth`` lists deep, as bytes: a client's encoder
    may write what no protobuf message object here would let us build (upb stops at 100)."""
    value = _length_delimited(0x1A, b"leaf")  # string_value
    for _ in range(depth):
        value = _length_delimited(0x32, _length_delimited(0x0A, value))  # list_value.values
    return value


@pytest.mark.parametrize("depth", [30, 60, 120, 5_000])
@pytest.mark.parametrize(
    ("path", "request_", "map_tag"),
    [
        ("/adk_mesh.v1.ToolService/CallTool", _call_tool(), 0x2A),
        (
            "/adk_mesh.v1.SessionService/UpdateSessionState",
            session_pb2.UpdateSessionStateRequest(user_id=USER, session_id=SESSION),
            0x22,
        ),
        (
            "/adk_mesh.v1.SessionService/CreateSession",
            session_pb2.CreateSessionRequest(user_id=USER, session_id="s-deep"),
            0x22,
        ),
    ],
    ids=["call-tool-state", "update-state", "create-session"],
)
def test_a_value_nested_past_every_limit_is_refused_cleanly(
    mesh: Mesh, path: str, request_: Message, map_tag: int, depth: int
) -> None:
    entry = _length_delimited(0x0A, b"k") + _length_delimited(0x12, deep_value(depth))
    payload = request_.SerializeToString() + _length_delimited(map_tag, entry)
    call = mesh.run(check_call(mesh, method_of(mesh, path), [payload], request_))
    if depth > 100:
        assert call.code == grpc.StatusCode.INVALID_ARGUMENT, call
