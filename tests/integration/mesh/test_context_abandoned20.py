"""A context request its callee stopped waiting for, answered after the call ended.

A remote tool asks its caller for an artifact, then stops waiting (its own timeout) and
returns. The call ends with the tool's result while the caller is still loading the artifact
from its store; the caller then writes its answer to a call that is over. That answer has no
reader, and the call's result is already on its way: the caller must read it, not fail the
tool call with the write's error (``asyncio.InvalidStateError`` from grpc.aio, or the call's
status), which the model would read as the tool failing.
"""

from __future__ import annotations

import asyncio
from typing import Any

from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.contexts import ToolContext
from adk_mesh.mesh import ToolServer
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Part
from tests.integration.mesh.test_context_artifacts19 import _pdf, _remote_tool, _saving


class SlowStore(InMemoryArtifactService):
    """The caller's store: a load waits until the remote tool has returned and its server
    has ended the call, so the answer is written to a call that is over."""

    def __init__(self, tool_done: asyncio.Event, server: ToolServer) -> None:
        super().__init__()
        self._tool_done = tool_done
        self._server = server

    async def load_artifact(self, **kwargs: Any) -> Part | None:
        await self._tool_done.wait()
        # Until the server has no call left (a server that ends the call before this answer
        # came: its handler ended and sent the status), or a second passed (one that waits
        # for the answer, as it must, keeps the call).
        for _ in range(100):
            if self._server._gate.in_flight == 0:
                await asyncio.sleep(0.05)  # the status reaches this side's call
                break
            await asyncio.sleep(0.01)
        return await super().load_artifact(**kwargs)


async def test_an_answer_the_tool_stopped_waiting_for_does_not_fail_the_call() -> None:
    tool_done = asyncio.Event()

    async def peek(tool_context: ToolContext) -> dict[str, Any]:
        """Looks at the report if it comes quickly."""
        try:
            async with asyncio.timeout(0.2):
                await tool_context.load_artifact("report.pdf")
        except TimeoutError:
            return {"looked": False}
        finally:
            tool_done.set()
        return {"looked": True}

    server = ToolServer([FunctionTool(peek)], name="files")
    port = await server.start("127.0.0.1:0")
    try:
        artifacts = SlowStore(tool_done, server)
        response, _ = await _remote_tool(
            f"127.0.0.1:{port}",
            "peek",
            {},
            artifacts,
            _saving("report.pdf", _pdf(b"%PDF small"), artifacts),
        )
    finally:
        await server.stop(None)
    assert response == {"looked": False}


async def test_a_chunk_without_its_header_answers_the_request_and_the_call_ends_at_once() -> None:
    # A caller's mistake (a hostile or broken client): the first thing it sends for a load is
    # a chunk. The tool reads an ArtifactError, returns, and the call ends with its result at
    # once: the request got its answer (a wrong one), so the callee does not wait 30 s for
    # another before it ends the call.
    from adk_mesh.mesh import _caller_contexts
    from tests.integration.mesh.test_context_artifacts20 import RawCaller, _load_chunk

    async def peek(tool_context: ToolContext) -> dict[str, Any]:
        """Loads the report."""
        try:
            await tool_context.load_artifact("report.pdf")
        except Exception as error:
            return {"error": str(error)}
        return {"loaded": True}

    server = ToolServer([FunctionTool(peek)], name="files")
    port = await server.start("127.0.0.1:0")
    caller = RawCaller(f"127.0.0.1:{port}", "peek", {})
    try:
        await caller.open()
        request = await caller.next_request()
        await caller.call.write(_load_chunk(request.request_id, b""))
        async with asyncio.timeout(_caller_contexts.CHUNK_STALL_SECONDS / 3):
            result = await caller.result()
    finally:
        await caller.close()
        await server.stop(None)
    assert "without a header" in str(result)
