"""Ollama's native chat API (``POST /api/chat``, streamed as newline-delimited JSON).

The server is the constructor's ``host``, else ``OLLAMA_HOST`` (``host``, ``host:port`` or a
URL; ``0.0.0.0`` means this machine), else ``http://127.0.0.1:11434``. No key is needed; an
``api_key`` given to the constructor is sent as ``Authorization: Bearer`` (for hosted Ollama or
an authenticating proxy).

Ollama tool calls carry no ids, so each gets a new random one (``call_`` and 32 hex digits),
unique across calls, responses and sessions: the runtime matches responses, long-running
answers and confirmations to calls by id, so the same call made again in a later turn must not
share the earlier one's id. A turn that ends with tool calls finishes with
:attr:`FinishReason.TOOL_CALLS`, as OpenAI's and Anthropic's do (Ollama itself says ``stop``);
``length`` stays MAX_TOKENS. Tool results go back as ``tool`` messages with ``tool_name``.
Images travel as the message's ``images`` list (base64); inline ``text/*`` becomes text; every
other part (PDFs, audio, file URIs, media in assistant turns) raises :class:`ModelError` naming
it. Thought parts map to the message's ``thinking`` field both ways. Ollama has no server-side
tools: any :class:`BuiltinTool` raises :class:`ModelError`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx

from adk_mesh.errors import ModelError
from adk_mesh.models._convert import (
    b64encode,
    is_model_role,
    json_dumps,
    unsupported_builtin,
    unsupported_part,
)
from adk_mesh.models._http import (
    HttpLlm,
    RetryPolicy,
    Secret,
    SecretHeader,
    StreamParser,
    StreamRecord,
    WireRequest,
    load_json,
    make_usage,
    parse_arguments,
    partial_text,
)
from adk_mesh.models.base import BuiltinTool, LlmRequest
from adk_mesh.types import Content, FinishReason, FunctionCall, LlmResponse, Part, UsageMetadata

__all__ = ["OllamaModel", "normalize_host"]

DEFAULT_HOST = "http://127.0.0.1:11434"

_DONE_REASONS: dict[str, FinishReason] = {
    "stop": FinishReason.STOP,
    "length": FinishReason.MAX_TOKENS,
}


def normalize_host(host: str) -> str:
    """A base URL from an ``OLLAMA_HOST``-style value (scheme and port optional)."""
    host = host.strip().rstrip("/")
    if not host:
        return DEFAULT_HOST
    if "://" not in host:
        host = f"http://{host}"
    parts = urlsplit(host)
    hostname = parts.hostname or "127.0.0.1"
    if hostname in ("0.0.0.0", "::"):
        hostname = "127.0.0.1"
    if ":" in hostname:
        hostname = f"[{hostname}]"
    port = parts.port or (443 if parts.scheme == "https" else 11434)
    return f"{parts.scheme}://{hostname}:{port}{parts.path}"


def _done_reason(value: Any, *, has_calls: bool) -> FinishReason:
    if not isinstance(value, str) or not value:
        value = "stop"
    reason = _DONE_REASONS.get(value, FinishReason.OTHER)
    # Ollama says "stop" after tool calls; the other adapters say TOOL_CALLS there.
    return FinishReason.TOOL_CALLS if has_calls and reason is FinishReason.STOP else reason


def _new_call_id() -> str:
    """A fresh id for a tool call: Ollama sends none, and one derived from the call would be
    the same for the same call made again (in a later turn or another session)."""
    return f"call_{uuid.uuid4().hex}"


def _usage(data: Mapping[str, Any]) -> UsageMetadata | None:
    if "prompt_eval_count" not in data and "eval_count" not in data:
        return None
    return make_usage(data.get("prompt_eval_count"), data.get("eval_count"))


def _raise_if_error(data: Any) -> None:
    if isinstance(data, dict) and data.get("error"):
        raise ModelError(f"ollama error: {data['error']}", metadata={"provider": "ollama"})


def _tool_call_parts(calls: Any) -> list[Part]:
    parts: list[Part] = []
    for call in calls or []:
        function = call.get("function") or {}
        name = function.get("name")
        if not name:
            raise ModelError("ollama returned a tool call without a function name")
        raw = function.get("arguments")
        args = parse_arguments(raw, name) if isinstance(raw, str) else dict(raw or {})
        call_id = call.get("id")
        parts.append(
            Part(
                function_call=FunctionCall(
                    name=name,
                    args=args,
                    id=call_id if isinstance(call_id, str) and call_id else _new_call_id(),
                )
            )
        )
    return parts


class _OllamaStreamParser(StreamParser):
    def __init__(self) -> None:
        super().__init__()
        self._calls: list[Part] = []

    def feed(self, event: StreamRecord) -> list[LlmResponse]:
        data = load_json(event.data, "a stream line")
        _raise_if_error(data)
        if not isinstance(data, dict):
            raise ModelError("ollama sent a stream line that is not a JSON object")
        if isinstance(data.get("model"), str):
            self.model_version = data["model"]
        message = data.get("message") or {}
        partials: list[LlmResponse] = []
        thinking = message.get("thinking")
        if isinstance(thinking, str) and thinking:
            self.parts.add_text(thinking, thought=True)
            partials.append(partial_text(thinking, thought=True, model_version=self.model_version))
        text = message.get("content")
        if isinstance(text, str) and text:
            self.parts.add_text(text)
            partials.append(partial_text(text, model_version=self.model_version))
        if message.get("tool_calls"):
            self._calls.extend(_tool_call_parts(message["tool_calls"]))
        if data.get("done"):
            self.complete = True
            self.finish_reason = _done_reason(data.get("done_reason"), has_calls=bool(self._calls))
            self.usage = _usage(data)
        return partials

    def final(self) -> LlmResponse:
        self.check_complete()
        for call in self._calls:
            self.parts.add_part(call)
        return super().final()


class OllamaModel(HttpLlm):
    """A model served by Ollama.

    Args:
        model: the model name, e.g. ``"llama3.2"``.
        host: the server; defaults to ``OLLAMA_HOST``, then ``http://127.0.0.1:11434``.
        api_key: optional bearer token.
        keep_alive: how long Ollama keeps the model loaded (e.g. ``"5m"``), when set.
        timeout: seconds or an ``httpx.Timeout``.
        retry: the :class:`RetryPolicy`.
        headers: extra headers sent with every request.
    """

    provider = "ollama"
    framing = "ndjson"

    def supports_builtin_tool(self, tool: BuiltinTool) -> bool:
        """Ollama runs no server-side tools."""
        return False

    def __init__(
        self,
        model: str = "llama3.2",
        *,
        host: str | None = None,
        api_key: str | None = None,
        keep_alive: str | None = None,
        timeout: httpx.Timeout | float | None = None,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        secret = Secret(api_key) if api_key else None
        super().__init__(
            model,
            base_url=normalize_host(host or os.environ.get("OLLAMA_HOST") or DEFAULT_HOST),
            api_key=secret,
            headers=headers,
            secret_headers={"authorization": SecretHeader(secret, "Bearer ")} if secret else None,
            timeout=timeout,
            retry=retry,
        )
        self.keep_alive = keep_alive

    # ------------------------------------------------------------------ request

    def _build_request(self, request: LlmRequest, *, stream: bool) -> WireRequest:
        if request.builtin_tools:
            raise unsupported_builtin(
                self.provider, request.builtin_tools[0], "Ollama has no server-side tools"
            )
        body: dict[str, Any] = {
            "model": self._model_for(request),
            "messages": self._messages(request),
            "stream": stream,
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters_schema
                        or {"type": "object", "properties": {}},
                    },
                }
                for tool in request.tools
            ]
        config = request.config
        options: dict[str, Any] = {}
        for key, value in (
            ("temperature", config.temperature),
            ("num_predict", config.max_output_tokens),
            ("top_p", config.top_p),
            ("top_k", config.top_k),
            ("stop", config.stop_sequences),
            ("seed", config.seed),
        ):
            if value is not None:
                options[key] = value
        if options:
            body["options"] = options
        if config.response_schema is not None:
            body["format"] = config.response_schema
        elif config.response_mime_type == "application/json":
            body["format"] = "json"
        if self.keep_alive is not None:
            body["keep_alive"] = self.keep_alive
        return WireRequest(path="/api/chat", body=body)

    def _messages(self, request: LlmRequest) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        if request.system_instruction:
            messages.append({"role": "system", "content": request.system_instruction})
        for content_index, content in enumerate(request.contents):
            if is_model_role(content):
                messages.append(self._assistant_message(content_index, content))
                continue
            texts: list[str] = []
            images: list[str] = []
            for part_index, part in enumerate(content.parts):
                if part.is_server_tool:
                    continue  # another provider's context, as in the model's turns
                if part.function_response is not None:
                    messages.append(
                        {
                            "role": "tool",
                            "tool_name": part.function_response.name,
                            "content": json_dumps(part.function_response.response),
                        }
                    )
                elif part.text is not None:
                    if not part.thought:
                        texts.append(part.text)
                elif part.inline_data is not None and part.inline_data.mime_type.startswith(
                    "image/"
                ):
                    images.append(b64encode(part.inline_data.data))
                elif part.inline_data is not None and part.inline_data.mime_type.startswith(
                    "text/"
                ):
                    try:
                        texts.append(part.inline_data.data.decode("utf-8"))
                    except UnicodeDecodeError:
                        raise unsupported_part(
                            self.provider, content_index, part_index, content, part, "not UTF-8"
                        ) from None
                else:
                    raise unsupported_part(
                        self.provider,
                        content_index,
                        part_index,
                        content,
                        part,
                        "Ollama takes text and inline images only",
                    )
            if texts or images:
                message: dict[str, Any] = {"role": "user", "content": "\n".join(texts)}
                if images:
                    message["images"] = images
                messages.append(message)
        return messages

    def _assistant_message(self, content_index: int, content: Content) -> dict[str, Any]:
        texts: list[str] = []
        thinking: list[str] = []
        calls: list[dict[str, Any]] = []
        for part_index, part in enumerate(content.parts):
            if part.is_server_tool:
                continue  # Gemini's own context, for no other provider
            if part.text is not None:
                (thinking if part.thought else texts).append(part.text)
            elif part.function_call is not None:
                calls.append(
                    {
                        "function": {
                            "name": part.function_call.name,
                            "arguments": part.function_call.args,
                        }
                    }
                )
            else:
                raise unsupported_part(
                    self.provider,
                    content_index,
                    part_index,
                    content,
                    part,
                    "assistant messages carry only text and tool calls",
                )
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
        if thinking:
            message["thinking"] = "".join(thinking)
        if calls:
            message["tool_calls"] = calls
        return message

    # ------------------------------------------------------------------ response

    def _parse_response(self, data: Any) -> LlmResponse:
        _raise_if_error(data)
        if not isinstance(data, dict):
            raise ModelError("ollama returned a body that is not a JSON object")
        message = data.get("message") or {}
        parts: list[Part] = []
        thinking = message.get("thinking")
        if isinstance(thinking, str) and thinking:
            parts.append(Part(text=thinking, thought=True))
        text = message.get("content")
        if isinstance(text, str) and text:
            parts.append(Part(text=text))
        calls = _tool_call_parts(message.get("tool_calls"))
        parts.extend(calls)
        return LlmResponse(
            content=Content(role="model", parts=parts) if parts else None,
            usage_metadata=_usage(data),
            finish_reason=_done_reason(data.get("done_reason"), has_calls=bool(calls)),
            turn_complete=True,
            model_version=data.get("model") if isinstance(data.get("model"), str) else None,
        )

    def _new_stream_parser(self) -> StreamParser:
        return _OllamaStreamParser()
