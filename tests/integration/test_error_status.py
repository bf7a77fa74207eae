"""Every adk-mesh error crosses a real gRPC call and comes back as itself.

A tiny generic service (bytes in, bytes out) runs on a real ``grpc.aio`` server on 127.0.0.1;
its handlers abort with the error the request names, through the same
:func:`~adk_mesh.mesh._status.abort_with_error` the mesh servicers use, and the client maps the
failed call back with :func:`~adk_mesh.mesh._status.error_from_rpc_error`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from adk_mesh.errors import (
    GRPC_STATUS,
    AdkError,
    AdkIOError,
    AgentError,
    InvalidArgumentError,
    ModelError,
    NotFoundError,
)
from adk_mesh.mesh._status import abort_with_error, error_from_rpc_error

SERVICE = "adk_mesh.test.Errors"
UNARY = f"/{SERVICE}/Unary"
STREAM = f"/{SERVICE}/Stream"
FOREIGN = f"/{SERVICE}/Foreign"
FOREIGN_ERROR_INFO = f"/{SERVICE}/ForeignErrorInfo"

ERROR_CLASSES: dict[str, type[AdkError]] = {cls.__name__: cls for cls in GRPC_STATUS}
STREAMED = [b"one", b"two"]


def make_error(cls: type[AdkError]) -> AdkError:
    """The error a handler raises for ``cls``: a unicode message and some metadata."""
    message = f"{cls.__name__} failed: über ☃ 😀"
    metadata = {"key": "value", "unicode": "ü😀", "empty": ""}
    if cls is ModelError:
        return ModelError(message, status_code=429, metadata=metadata)
    return cls(message, metadata=metadata)


# --- the server ----------------------------------------------------------------------------


async def _unary(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    await abort_with_error(context, make_error(ERROR_CLASSES[request.decode()]))


async def _stream(
    request: bytes, context: grpc.aio.ServicerContext[Any, Any]
) -> AsyncIterator[bytes]:
    for message in STREAMED:
        yield message
    await abort_with_error(context, make_error(ERROR_CLASSES[request.decode()]))


async def _foreign(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    """A peer that is not adk-mesh: a plain status, no details. The request names the code."""
    await context.abort(grpc.StatusCode[request.decode()], "x")
    raise AssertionError("unreachable")


async def _foreign_error_info(request: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
    """A rich status whose ErrorInfo is another domain's: our reason names must not match it."""
    info = error_details_pb2.ErrorInfo(reason="SESSION_NOT_FOUND", domain="example.com")
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=grpc.StatusCode.NOT_FOUND.value[0], message="y")
    status.details.append(detail)
    await context.abort(
        grpc.StatusCode.NOT_FOUND,
        "y",
        trailing_metadata=(("grpc-status-details-bin", status.SerializeToString()),),
    )
    raise AssertionError("unreachable")


_HANDLER = grpc.method_handlers_generic_handler(
    SERVICE,
    {
        # No (de)serializers: requests and responses are raw bytes.
        "Unary": grpc.unary_unary_rpc_method_handler(_unary),
        "Stream": grpc.unary_stream_rpc_method_handler(_stream),
        "Foreign": grpc.unary_unary_rpc_method_handler(_foreign),
        "ForeignErrorInfo": grpc.unary_unary_rpc_method_handler(_foreign_error_info),
    },
)


@pytest.fixture
async def port() -> AsyncIterator[int]:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((_HANDLER,))
    bound = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield bound
    finally:
        await server.stop(None)


@pytest.fixture
async def channel(port: int) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as opened:
        yield opened


async def _call_unary(channel: grpc.aio.Channel, method: str, request: str) -> grpc.aio.AioRpcError:
    call = channel.unary_unary(method)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(request.encode(), timeout=10)
    return caught.value


def _assert_same_error(rpc_error: grpc.aio.AioRpcError, cls: type[AdkError]) -> AdkError:
    sent = make_error(cls)
    assert rpc_error.code() == getattr(grpc.StatusCode, GRPC_STATUS[cls])
    received = error_from_rpc_error(rpc_error)
    assert type(received) is cls
    assert received.message == sent.message
    assert str(received) == str(sent)
    assert received.metadata == sent.metadata
    return received


# --- tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", list(GRPC_STATUS), ids=lambda cls: cls.__name__)
async def test_unary_error_round_trips(channel: grpc.aio.Channel, cls: type[AdkError]) -> None:
    rpc_error = await _call_unary(channel, UNARY, cls.__name__)
    _assert_same_error(rpc_error, cls)


@pytest.mark.parametrize("cls", list(GRPC_STATUS), ids=lambda cls: cls.__name__)
async def test_streaming_error_mid_stream_round_trips(
    channel: grpc.aio.Channel, cls: type[AdkError]
) -> None:
    call = channel.unary_stream(STREAM)(cls.__name__.encode(), timeout=10)
    received: list[bytes] = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for message in call:
            received.append(message)
    assert received == STREAMED
    _assert_same_error(caught.value, cls)


async def test_model_error_keeps_its_http_status(channel: grpc.aio.Channel) -> None:
    rpc_error = await _call_unary(channel, UNARY, "ModelError")
    received = _assert_same_error(rpc_error, ModelError)
    assert isinstance(received, ModelError)
    assert received.status_code == 429
    assert received.metadata["status_code"] == "429"


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        ("NOT_FOUND", NotFoundError),
        ("INVALID_ARGUMENT", InvalidArgumentError),
        ("UNAVAILABLE", AdkIOError),
        # A code no adk-mesh class owns becomes the generic run failure.
        ("RESOURCE_EXHAUSTED", AgentError),
    ],
)
async def test_status_from_a_foreign_server_maps_by_code(
    channel: grpc.aio.Channel, code: str, cls: type[AdkError]
) -> None:
    rpc_error = await _call_unary(channel, FOREIGN, code)
    assert rpc_error.code() == grpc.StatusCode[code]
    received = error_from_rpc_error(rpc_error)
    assert type(received) is cls
    assert received.message == "x"
    assert received.metadata == {}


async def test_error_info_of_another_domain_is_ignored(channel: grpc.aio.Channel) -> None:
    rpc_error = await _call_unary(channel, FOREIGN_ERROR_INFO, "")
    received = error_from_rpc_error(rpc_error)
    assert type(received) is NotFoundError
    assert received.message == "y"
