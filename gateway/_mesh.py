"""The gateway's side of the gRPC contract: one channel per agent service, calls that carry the
user's credentials and the request's deadline, and failures turned back into adk-mesh errors.

The gateway reaches agents only here, through the generated ``adk_mesh.v1`` stubs and
:mod:`adk_mesh.codec`; it never imports agent code.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any

import grpc
import grpc.aio

from adk_mesh import codec
from adk_mesh.contexts import check_request_metadata
from adk_mesh.errors import AdkError, NotFoundError
from adk_mesh.mesh._channel import open_channel
from adk_mesh.mesh._status import _error_info, error_from_downstream, error_from_rpc_error
from adk_mesh.mesh.security import ClientTLS
from adk_mesh.types import Content, Event
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, session_pb2_grpc

__all__ = ["Credentials", "MeshClient", "RunStream"]

logger = logging.getLogger("gateway")

#: Call metadata that proves who the user is, forwarded as the client sent it: a service with
#: authenticators of its own checks the user again.
Credentials = Sequence[tuple[str, str]]


def rpc_failure(error: grpc.RpcError, app: str, target: str) -> AdkError:
    """The adk-mesh error for a failed call to ``app``'s service.

    An error the service sent (with its ErrorInfo) comes back as it is, a refusal of the
    user's credentials included (401 or 403 for the client). A status without it (the service
    unreachable, a TLS failure) gets a message that names the app, not the address: that goes
    to the gateway's log.
    """
    if _error_info(error) is not None:
        return error_from_rpc_error(error)
    return error_from_downstream(error, f"app {app!r}", target)


class RunStream:
    """One root run: its events as they come, and the session the service used.

    The gRPC call starts when :meth:`events` is first iterated (in the caller's trace context,
    so its span is the request's child). Iterating yields each event once it arrives (batches
    unpacked); closing (or the iterating task being cancelled) cancels the call, so the run
    stops in the service too.
    """

    def __init__(
        self, method: Any, request: Any, options: dict[str, Any], app: str, target: str
    ) -> None:
        self._method = method
        self._request = request
        self._options = options
        self._call: Any = None
        self._app = app
        self._target = target
        #: Set from the first response (the session the service created or used).
        self.session_id = ""

    async def events(self) -> AsyncIterator[Event]:
        self._call = call = self._method(self._request, **self._options)
        try:
            async for response in call:
                if response.session_id:
                    self.session_id = response.session_id
                for event in codec.run_response_events(response):
                    yield event
        except grpc.RpcError as error:
            raise rpc_failure(error, self._app, self._target) from None
        finally:
            call.cancel()

    def cancel(self) -> None:
        if self._call is not None:
            self._call.cancel()


class MeshClient:
    """Channels to the agent services of a gateway's apps, opened on first use.

    Args:
        apps: app name to its agent service's address.
        tls: TLS to the services (``None``: plaintext).
    """

    def __init__(self, apps: Mapping[str, str], tls: ClientTLS | None) -> None:
        self.apps = dict(apps)
        self._tls = tls
        self._channels: dict[str, grpc.aio.Channel] = {}

    def target(self, app: str) -> str:
        try:
            return self.apps[app]
        except KeyError:
            known = ", ".join(sorted(self.apps)) or "none"
            raise NotFoundError(
                f"app {app!r} is not served by this gateway; apps: {known}",
                metadata={"app": app},
            ) from None

    def _channel(self, app: str) -> grpc.aio.Channel:
        channel = self._channels.get(app)
        if channel is None:
            channel = self._channels[app] = open_channel(self.target(app), tls=self._tls)
        return channel

    def agents(self, app: str) -> agent_pb2_grpc.AgentServiceStub:
        return agent_pb2_grpc.AgentServiceStub(self._channel(app))

    def sessions(self, app: str) -> session_pb2_grpc.SessionServiceStub:
        return session_pb2_grpc.SessionServiceStub(self._channel(app))

    async def unary(
        self, app: str, method: Any, request: Any, *, credentials: Credentials, seconds: float
    ) -> Any:
        """Call the unary ``method`` (a stub's multi-callable) of ``app``'s service."""
        try:
            return await method(request, metadata=tuple(credentials), timeout=seconds)
        except grpc.RpcError as error:
            raise rpc_failure(error, app, self.target(app)) from None

    async def streamed(
        self, app: str, method: Any, request: Any, *, credentials: Credentials, seconds: float
    ) -> list[Any]:
        """Every response of the server-streaming ``method`` of ``app``'s service."""
        responses = self.responses(app, method, request, credentials=credentials, seconds=seconds)
        return [response async for response in responses]

    async def responses(
        self, app: str, method: Any, request: Any, *, credentials: Credentials, seconds: float
    ) -> AsyncGenerator[Any, None]:
        """The responses of the server-streaming ``method`` of ``app``'s service, each as it
        arrives: a caller that answers as it reads holds one response at a time.

        The call starts at the first iteration (in the caller's trace context); a failure is
        raised as an adk-mesh error where it happens, and closing the iterator (or the
        iterating task being cancelled) cancels the call, so the service stops too.
        """
        call = method(request, metadata=tuple(credentials), timeout=seconds)
        try:
            async for response in call:
                yield response
        except grpc.RpcError as error:
            raise rpc_failure(error, app, self.target(app)) from None
        finally:
            call.cancel()

    def run(
        self,
        app: str,
        *,
        user_id: str,
        session_id: str,
        message: Content,
        streaming: bool,
        credentials: Credentials,
        timeout: float,
        request_metadata: Mapping[str, str] | None = None,
    ) -> RunStream:
        """Start a root run of ``app`` (nothing is sent before the stream is read)."""
        request = agent_pb2.RunRequest(
            root=agent_pb2.RootRun(
                user_id=user_id,
                session_id=session_id,
                new_message=codec.content_to_proto(message),
                request_metadata=check_request_metadata(request_metadata or {}),
            ),
            # Several events in one response when the gateway falls behind a fast stream of
            # partials: fewer messages, same events, same order.
            accept_event_batches=True,
        )
        if streaming:
            request.run_config.streaming_mode = agent_pb2.STREAMING_MODE_SSE
        options = {"metadata": tuple(credentials), "timeout": timeout}
        return RunStream(self.agents(app).Run, request, options, app, self.target(app))

    async def describe(
        self, app: str, *, credentials: Credentials, seconds: float = 10.0
    ) -> agent_pb2.AgentCard:
        try:
            response = await self.agents(app).Describe(
                agent_pb2.DescribeRequest(), metadata=tuple(credentials), timeout=seconds
            )
        except grpc.RpcError as error:
            raise rpc_failure(error, app, self.target(app)) from None
        card: agent_pb2.AgentCard = response.card
        return card

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        for channel in channels.values():
            await channel.close()
