"""LlmAgent's model hooks in SSE streaming mode: every chunk the model streams passes the
after-model hooks (a plugin's ``after_model``, then the agent's ``after_model_callback``), as
google-adk's ``_call_llm_async`` runs them on every ``LlmResponse`` the model yields, partial
ones included. A redacting hook covers the streamed text a client sees, in process and behind
an AgentServer alike; a replacement stands in the chunk's place (a partial chunk stays a
partial, never stored; a final answer stays final).

And, pinned as google-adk has it: a before-tool hook answering ``{}`` skips the tool."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest

from adk_mesh import codec
from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import CallbackContext, RunConfig, StreamingMode
from adk_mesh.errors import PermissionDeniedError
from adk_mesh.mesh import AgentServer, RemoteAgent
from adk_mesh.mesh._channel import open_channel
from adk_mesh.models.base import Llm, LlmRequest
from adk_mesh.plugins import LoggingPlugin, Plugin
from adk_mesh.runner import Runner
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Content, Event, LlmResponse, Part
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc

APP, USER = "app", "u"
SECRET = "4111-1111"
CHUNKS = ["My card is ", SECRET, " and that is all."]
LOCAL, REMOTE = "local", "remote"
SSE = RunConfig(streaming_mode=StreamingMode.SSE)


class ChunkModel(Llm):
    """Streams ``CHUNKS`` as partial responses, then the whole answer (as providers do)."""

    def __init__(self) -> None:
        super().__init__("chunks")
        self.calls = 0
        self.closed = 0

    async def generate_content(
        self, request: LlmRequest, *, stream: bool = False
    ) -> AsyncIterator[LlmResponse]:
        self.calls += 1
        try:
            if stream:
                for chunk in CHUNKS:
                    yield LlmResponse(content=Content.from_text("model", chunk), partial=True)
            yield LlmResponse(
                content=Content.from_text("model", "".join(CHUNKS)), turn_complete=True
            )
        finally:
            self.closed += 1  # a provider frees its connection here


def redacted(response: LlmResponse) -> LlmResponse | None:
    """A fresh response with the secret blanked out, built the way a callback usually builds
    one (no ``partial`` given); ``None`` when there is nothing to hide."""
    text = response.content.text if response.content is not None else ""
    if SECRET not in text:
        return None
    return LlmResponse(content=Content.from_text("model", text.replace(SECRET, "[redacted]")))


class Redactor(Plugin):
    def __init__(self) -> None:
        super().__init__("redactor")
        self.seen: list[bool] = []

    async def after_model(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        self.seen.append(llm_response.partial)
        return redacted(llm_response)


def redacting_callback(seen: list[bool]) -> Any:
    def after_model(callback_context: CallbackContext, llm_response: LlmResponse) -> Any:
        seen.append(llm_response.partial)
        return redacted(llm_response)

    return after_model


async def _turn(
    root: BaseAgent, *, plugins: list[Plugin] | None = None, run_config: RunConfig = SSE
) -> tuple[list[Event], list[Event]]:
    """One turn; the events yielded and the session's events once it ended."""
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name=APP, user_id=USER)
    runner = Runner(agent=root, app_name=APP, session_service=sessions, plugins=plugins)
    events = [
        event
        async for event in runner.run(
            user_id=USER,
            session_id=session.id,
            new_message=Content.from_text("user", "what is my card?"),
            run_config=run_config,
        )
    ]
    stored = await sessions.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None
    return events, stored.events


def _shown(events: list[Event]) -> list[tuple[bool, str]]:
    return [(event.partial, event.text) for event in events]


EXPECTED = [
    (True, "My card is "),
    (True, "[redacted]"),
    (True, " and that is all."),
    (False, "My card is [redacted] and that is all."),
]


@pytest.mark.parametrize("where", [LOCAL, REMOTE])
@pytest.mark.parametrize("hook", ["callback", "plugin"])
async def test_every_streamed_chunk_passes_the_after_model_hooks(where: str, hook: str) -> None:
    seen: list[bool] = []
    plugin = Redactor()
    agent = LlmAgent(
        name="teller",
        model=ChunkModel(),
        after_model_callback=redacting_callback(seen) if hook == "callback" else None,
    )
    plugins: list[Plugin] | None = [plugin] if hook == "plugin" else None
    async with AsyncExitStack() as stack:
        root: BaseAgent = agent
        if where == REMOTE:
            # The agent's hooks run where it runs: behind the server, with the server's plugins.
            server = AgentServer(agent, app_name=APP, plugins=plugins)
            port = await server.start("127.0.0.1:0")
            stack.push_async_callback(server.stop, None)
            remote = RemoteAgent("teller", f"127.0.0.1:{port}")
            stack.push_async_callback(remote.close)
            root, plugins = remote, None
        events, stored = await _turn(root, plugins=plugins)
    assert _shown(events) == EXPECTED
    assert all(SECRET not in (event.text or "") for event in events)
    # The replacements of partial chunks stayed partial: only the final answer was stored.
    assert _shown(stored) == [(False, "what is my card?"), EXPECTED[-1]]
    assert (seen if hook == "callback" else plugin.seen) == [True, True, True, False]


async def test_a_root_run_of_a_served_agent_streams_the_hooked_chunks() -> None:
    """A client of the gRPC contract (any language) reads the chunks the server's hooks
    left: the partial events on the wire are the hooked ones."""
    server = AgentServer(LlmAgent(name="teller", model=ChunkModel()), plugins=[Redactor()])
    port = await server.start("127.0.0.1:0")
    try:
        request = agent_pb2.RunRequest(
            root=agent_pb2.RootRun(
                user_id=USER,
                new_message=codec.content_to_proto(Content.from_text("user", "card?")),
            ),
            run_config=codec.run_config_to_proto(SSE),
        )
        async with open_channel(f"127.0.0.1:{port}", tls=None) as channel:
            stub = agent_pb2_grpc.AgentServiceStub(channel)
            responses = [response async for response in stub.Run(request, timeout=60)]
    finally:
        await server.stop(None)
    events = [event for response in responses for event in codec.run_response_events(response)]
    assert _shown([event for event in events if event.author == "teller"]) == EXPECTED


async def test_a_chunk_changed_in_place_is_streamed_as_changed() -> None:
    def scrub(callback_context: CallbackContext, llm_response: LlmResponse) -> None:
        for part in llm_response.content.parts if llm_response.content is not None else []:
            if part.text:
                part.text = part.text.replace(SECRET, "****")

    events, _ = await _turn(LlmAgent(name="teller", model=ChunkModel(), after_model_callback=scrub))
    assert [event.text for event in events] == [
        "My card is ",
        "****",
        " and that is all.",
        "My card is **** and that is all.",
    ]


async def test_a_before_model_answer_skips_the_after_model_hooks_when_streaming() -> None:
    seen: list[bool] = []
    plugin = Redactor()
    model = ChunkModel()

    def answer(callback_context: CallbackContext, llm_request: LlmRequest) -> LlmResponse:
        return LlmResponse(content=Content.from_text("model", f"cached: {SECRET}"))

    agent = LlmAgent(
        name="teller",
        model=model,
        before_model_callback=answer,
        after_model_callback=redacting_callback(seen),
    )
    events, _ = await _turn(agent, plugins=[plugin])
    assert _shown(events) == [(False, f"cached: {SECRET}")]
    assert seen == [] and plugin.seen == [] and model.calls == 0


async def test_a_hook_failing_on_a_chunk_is_not_a_model_error() -> None:
    """An after-model hook that refuses a chunk ends the step with its error; the model did
    not fail, so the on-model-error hooks are not asked to answer for it (google-adk runs
    them around the model's stream only)."""
    answered: list[Exception] = []

    def refuse(callback_context: CallbackContext, llm_response: LlmResponse) -> None:
        if SECRET in (llm_response.content.text if llm_response.content is not None else ""):
            raise PermissionDeniedError("the answer holds a card number")

    def fallback(
        callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse:
        answered.append(error)
        return LlmResponse(content=Content.from_text("model", "fallback"))

    model = ChunkModel()
    agent = LlmAgent(
        name="teller",
        model=model,
        after_model_callback=refuse,
        on_model_error_callback=fallback,
    )
    shown: list[tuple[bool, str]] = []
    with pytest.raises(PermissionDeniedError, match="card number"):
        sessions = InMemorySessionService()
        session = await sessions.create_session(app_name=APP, user_id=USER)
        runner = Runner(agent=agent, app_name=APP, session_service=sessions)
        async for event in runner.run(
            user_id=USER,
            session_id=session.id,
            new_message=Content.from_text("user", "card?"),
            run_config=SSE,
        ):
            shown.append((event.partial, event.text))
    assert shown == [(True, "My card is ")]
    assert answered == []
    # The model's stream, left in the middle, was closed before the error went up.
    assert model.closed == 1


@pytest.mark.parametrize("mode", [StreamingMode.NONE, StreamingMode.SSE])
async def test_a_partial_replacement_of_the_final_answer_stays_final(mode: StreamingMode) -> None:
    """A hook's replacement takes the place of what it replaces: the final answer stays the
    final answer (stored, the turn over), even when the hook built it as a partial one."""

    def rewrite(callback_context: CallbackContext, llm_response: LlmResponse) -> LlmResponse:
        return LlmResponse(content=Content(role="model", parts=[Part(text="ok")]), partial=True)

    model = ScriptedModel(["the answer"])
    agent = LlmAgent(name="teller", model=model, after_model_callback=rewrite)
    events, stored = await _turn(agent, run_config=RunConfig(streaming_mode=mode))
    assert events[-1].partial is False and events[-1].text == "ok"
    assert _shown(stored)[-1] == (False, "ok")
    model.assert_consumed()  # asked once: the turn ended with that answer


# --- before-tool hooks answering {} -------------------------------------------------------
# Not a defect (kept as it is, pinned here): google-adk ends its before-tool chains on a value
# that is not None (the plugin manager's _run_callbacks, the agent's callbacks through
# _stop_on_non_none), and a value it got skips the tool — ``{}`` included — so an empty dict
# answers the call with ``{}``, from a plugin or from an agent's callback alike.


def _pinned_tool(ran: list[str]) -> Any:
    def lookup(account: str) -> dict[str, str]:
        """Look an account up."""
        ran.append(account)
        return {"owner": "Ada"}

    return lookup


@pytest.mark.parametrize("hook", ["callback", "plugin"])
async def test_an_empty_dict_from_a_before_tool_hook_answers_the_call(hook: str) -> None:
    ran: list[str] = []
    later: list[str] = []

    def empty(tool: Any, args: dict[str, Any], tool_context: Any) -> dict[str, Any]:
        return {}

    def next_callback(tool: Any, args: dict[str, Any], tool_context: Any) -> None:
        later.append(tool.name)

    class Empty(Plugin):
        async def before_tool(self, **kwargs: Any) -> dict[str, Any]:
            return {}

    model = ScriptedModel([call("lookup", {"account": "a-1"}, id="c1"), "done"])
    agent = LlmAgent(
        name="teller",
        model=model,
        tools=[_pinned_tool(ran)],
        before_tool_callback=[empty, next_callback] if hook == "callback" else next_callback,
    )
    events, _ = await _turn(
        agent, plugins=[Empty()] if hook == "plugin" else None, run_config=RunConfig()
    )
    responses = [r for event in events for r in event.function_responses()]
    assert [(r.id, r.response) for r in responses] == [("c1", {})]
    assert ran == [] and later == []


async def test_the_logging_plugin_marks_the_records_of_streamed_chunks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One ``after_model`` record per chunk, as google-adk's: each chunk's says ``partial``,
    the final answer's does not — a reader can tell the stream from the answer."""
    with caplog.at_level(logging.INFO, logger="adk_mesh.plugins.logging"):
        await _turn(LlmAgent(name="a", model=ChunkModel()), plugins=[LoggingPlugin()])
    after = [
        record.adk_mesh
        for record in caplog.records
        if getattr(record, "adk_mesh", {}).get("hook") == "after_model"
    ]
    assert [fact.get("partial", False) for fact in after] == [True, True, True, False]
    assert [
        r.getMessage().endswith("partial=True")
        for r in caplog.records
        if "after_model" in r.getMessage()
    ] == [True, True, True, False]
