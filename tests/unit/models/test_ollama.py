"""Ollama specifics: NDJSON streaming, host resolution, images, generated tool-call ids."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from adk_mesh.errors import ModelError
from adk_mesh.models import BuiltinTool, GenerateContentConfig, LlmRequest, OllamaModel
from adk_mesh.models.ollama import normalize_host
from adk_mesh.testing.fake_providers import FakeOllama, RawReply, ScriptedToolCall, ScriptedTurn
from adk_mesh.types import Content, FinishReason, LlmResponse


async def run(
    server: FakeOllama, request: LlmRequest, *, stream: bool, **kwargs: Any
) -> list[LlmResponse]:
    async with server.make_model(**kwargs) as model:
        return [r async for r in model.generate_content(request, stream=stream)]


def user(text: str, **kwargs: Any) -> LlmRequest:
    return LlmRequest(contents=[Content.from_text("user", text)], **kwargs)


async def test_ndjson_stream_usage_and_done_reason() -> None:
    turn = ScriptedTurn(
        text=["Ein ", "Wörtchen ", "🎉"],
        finish="length",
        input_tokens=26,
        output_tokens=298,
        write_size=(1, 4, 2),
    )
    async with FakeOllama(turn) as server:
        responses = await run(server, user("hi"), stream=True)

    assert [r.content.text for r in responses[:-1] if r.content] == ["Ein ", "Wörtchen ", "🎉"]
    final = responses[-1]
    assert final.content is not None and final.content.text == "Ein Wörtchen 🎉"
    assert final.finish_reason is FinishReason.MAX_TOKENS
    assert final.usage_metadata is not None
    assert final.usage_metadata.prompt_token_count == 26
    assert final.usage_metadata.candidates_token_count == 298
    assert final.usage_metadata.total_token_count == 324
    assert server.requests[0].path == "/api/chat"
    assert server.requests[0].json()["stream"] is True


async def test_non_streaming_request_says_stream_false_and_maps_options() -> None:
    config = GenerateContentConfig(
        temperature=0.1, max_output_tokens=50, top_p=0.8, top_k=30, stop_sequences=["x"], seed=1
    )
    async with FakeOllama(ScriptedTurn(text="ok")) as server:
        await run(server, user("hi", config=config), stream=False, keep_alive="10m")

    body = server.requests[0].json()
    assert body["stream"] is False and body["keep_alive"] == "10m"
    assert body["options"] == {
        "temperature": 0.1,
        "num_predict": 50,
        "top_p": 0.8,
        "top_k": 30,
        "stop": ["x"],
        "seed": 1,
    }


async def test_error_line_mid_stream_raises_model_error() -> None:
    lines = [
        json.dumps(
            {"model": "m", "message": {"role": "assistant", "content": "a"}, "done": False}
        ).encode()
        + b"\n",
        b'{"error":"an error was encountered while running the model: unexpected EOF"}\n',
    ]
    async with FakeOllama(RawReply(chunks=lines, content_type="application/x-ndjson")) as server:
        with pytest.raises(ModelError, match="unexpected EOF"):
            await run(server, user("hi"), stream=True)


async def test_images_and_thinking_round_trip() -> None:
    png = b"\x89PNG\r\n\x1a\n"
    request = LlmRequest(
        contents=[
            Content(role="user").with_text("What is this?").with_inline_data("image/png", png),
        ]
    )
    async with FakeOllama(ScriptedTurn(thoughts=["pixels…"], text="A PNG.")) as server:
        responses = await run(server, request, stream=True)
        final = responses[-1]
        assert final.content is not None
        assert [(p.thought, p.text) for p in final.content.parts] == [
            (True, "pixels…"),
            (False, "A PNG."),
        ]
        server.enqueue(ScriptedTurn(text="ok"))
        follow_up = LlmRequest(
            contents=[*request.contents, final.content, Content.from_text("user", "sure?")]
        )
        await run(server, follow_up, stream=False)

    first, second = (r.json()["messages"] for r in server.requests)
    assert first == [
        {"role": "user", "content": "What is this?", "images": [base64.b64encode(png).decode()]}
    ]
    assert second[1] == {"role": "assistant", "content": "A PNG.", "thinking": "pixels…"}


async def test_generated_tool_call_ids_are_unique_across_calls_and_responses() -> None:
    calls = [ScriptedToolCall("add", {"a": 1, "b": 2}), ScriptedToolCall("add", {"a": 1, "b": 2})]
    async with FakeOllama(ScriptedTurn(tool_calls=calls), ScriptedTurn(tool_calls=calls)) as server:
        streamed = (await run(server, user("add"), stream=True))[-1]
        plain = (await run(server, user("add"), stream=False))[-1]

    assert streamed.content is not None and plain.content is not None
    ids = [c.id for r in (streamed, plain) for c in r.content.function_calls]  # type: ignore[union-attr]
    assert len(set(ids)) == 4 and all(ids)


async def test_builtin_tools_and_pdfs_are_refused() -> None:
    async with FakeOllama() as server:
        with pytest.raises(ModelError, match="web_search"):
            await run(server, user("x", builtin_tools=[BuiltinTool.WEB_SEARCH]), stream=False)
        with pytest.raises(ModelError, match="application/pdf"):
            pdf = LlmRequest(
                contents=[Content(role="user").with_inline_data("application/pdf", b"%PDF")]
            )
            await run(server, pdf, stream=False)
    assert server.requests == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", "http://127.0.0.1:11434"),
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("gpu-box:8080", "http://gpu-box:8080"),
        ("https://ollama.example.org", "https://ollama.example.org:443"),
        ("http://[::1]:11434/", "http://[::1]:11434"),
    ],
)
def test_ollama_host_forms(value: str, expected: str) -> None:
    assert normalize_host(value) == expected


def test_ollama_host_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert OllamaModel("llama3.2").base_url == "http://127.0.0.1:11434"
    monkeypatch.setenv("OLLAMA_HOST", "10.0.0.5:11500")
    assert OllamaModel("llama3.2").base_url == "http://10.0.0.5:11500"
