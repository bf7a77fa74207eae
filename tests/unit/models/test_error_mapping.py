"""Provider failures become the error that says what they mean, and every failed call is logged.

401 and 403 (our key is wrong or lacks access) are not worth retrying: ModelAuthError,
FAILED_PRECONDITION. 429 is RESOURCE_EXHAUSTED (ModelRateLimitError). Other 4xx: the request
was refused as built (ModelRequestError, INTERNAL). 5xx and connection failures stay the
retryable ModelError, UNAVAILABLE. Each provider speaks its real wire format from a real
local server.
"""

from __future__ import annotations

import logging
import socket

import pytest

from adk_mesh.errors import (
    GRPC_STATUS,
    ModelAuthError,
    ModelError,
    ModelRateLimitError,
    ModelRequestError,
    error_class_for_reason,
    model_error,
    status_name_for,
)
from adk_mesh.models import LlmRequest, OpenAIModel, RetryPolicy
from adk_mesh.testing.fake_providers import (
    ErrorReply,
    FakeAnthropic,
    FakeGemini,
    FakeOllama,
    FakeOpenAI,
    FakeProviderServer,
    RawReply,
)
from adk_mesh.testing.fake_responses import FakeOpenAIResponses
from adk_mesh.types import Content

PROVIDERS: list[type[FakeProviderServer]] = [
    FakeOpenAI,
    FakeOpenAIResponses,
    FakeGemini,
    FakeAnthropic,
    FakeOllama,
]

CASES = [
    (401, ModelAuthError, "FAILED_PRECONDITION"),
    (403, ModelAuthError, "FAILED_PRECONDITION"),
    (429, ModelRateLimitError, "RESOURCE_EXHAUSTED"),
    (400, ModelRequestError, "INTERNAL"),
    (404, ModelRequestError, "INTERNAL"),
    (500, ModelError, "UNAVAILABLE"),
    (503, ModelError, "UNAVAILABLE"),
]


def request() -> LlmRequest:
    return LlmRequest(contents=[Content.from_text("user", "hi")])


@pytest.mark.parametrize(("status", "cls", "code"), CASES)
def test_model_error_picks_the_class_by_status(status: int, cls: type, code: str) -> None:
    error = model_error("failed", status_code=status, metadata={"provider": "p"})

    assert type(error) is cls
    assert error.status_code == status
    assert status_name_for(error) == code
    # The class travels as its reason and comes back as itself.
    assert error_class_for_reason(error.reason) is cls


def test_no_status_and_408_stay_retryable() -> None:
    assert type(model_error("reset")) is ModelError
    assert type(model_error("timeout", status_code=408)) is ModelError
    assert GRPC_STATUS[ModelError] == "UNAVAILABLE"


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda cls: cls.__name__)
@pytest.mark.parametrize(("status", "cls", "code"), CASES)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
async def test_each_provider_maps_its_http_errors(
    provider: type[FakeProviderServer],
    status: int,
    cls: type,
    code: str,
    stream: bool,
    retry: RetryPolicy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    replies = [ErrorReply(status, "nope")] * retry.max_attempts
    with caplog.at_level(logging.WARNING, logger="adk_mesh.models"):
        async with provider(*replies) as server:
            async with server.make_model(retry=retry) as model:
                with pytest.raises(ModelError) as caught:
                    async for _ in model.generate_content(request(), stream=stream):
                        pass

    assert type(caught.value) is cls
    assert caught.value.status_code == status
    assert status_name_for(caught.value) == code
    failed = [r for r in caplog.records if "call failed" in r.getMessage()]
    assert len(failed) == 1
    assert failed[0].levelno == logging.WARNING
    assert f"HTTP {status}" in failed[0].getMessage()


async def test_an_unreachable_provider_is_unavailable_without_its_address(
    retry: RetryPolicy, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    with caplog.at_level(logging.WARNING, logger="adk_mesh.models"):
        async with OpenAIModel("m", base_url=base_url, retry=retry) as model:
            with pytest.raises(ModelError) as caught:
                async for _ in model.generate_content(request()):
                    pass

    error = caught.value
    assert type(error) is ModelError
    assert status_name_for(error) == "UNAVAILABLE"
    assert "ConnectError" in error.message
    assert "127.0.0.1" not in error.message and str(port) not in error.message
    # The address is in this service's log instead, and the call's failure is logged once.
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert base_url in logged
    assert sum("call failed" in record.getMessage() for record in caplog.records) == 1


async def test_a_proxys_error_page_stays_in_the_log(
    retry: RetryPolicy, caplog: pytest.LogCaptureFixture
) -> None:
    """A body that is not the provider's JSON (a gateway's page naming internal hosts) is
    logged, not carried in the error a client may read."""
    page = b"<html>502 Bad Gateway: upstream llm-7.internal.example:8000 refused</html>"
    replies = [RawReply(status=502, body=page, content_type="text/html")] * retry.max_attempts
    with caplog.at_level(logging.WARNING, logger="adk_mesh.models"):
        async with FakeOpenAI(*replies) as server:
            async with server.make_model(retry=retry) as model:
                with pytest.raises(ModelError) as caught:
                    async for _ in model.generate_content(request()):
                        pass

    assert caught.value.status_code == 502
    assert "internal.example" not in caught.value.message
    assert "HTTP 502" in caught.value.message
    assert any("internal.example" in record.getMessage() for record in caplog.records)
