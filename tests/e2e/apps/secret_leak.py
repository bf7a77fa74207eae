"""The three services of the secret-leak test (``tests/e2e/test_secret_leak.py``), each served
by ``adk-mesh serve`` in a process of its own:

* ``tests.e2e.apps.secret_leak:tools`` (``serve tools --credentials env``): ``charge`` uses the
  service's ``billing_key`` (``ADK_MESH_CREDENTIAL_BILLING_KEY``), ``refund`` fails with it,
  ``void`` raises a ToolError with it in the message and the metadata;
* ``tests.e2e.apps.secret_leak:specialist`` (``serve agent --credentials file:DIR``):
  ``use_secrets`` uses the service's own ``weather_api`` (a file) and the caller's
  ``user_token`` (forwarded), ``fail_with_secrets`` fails with both;
  ``remember_by_token`` (the token in a state key) and ``raw_token`` (the token as bytes)
  are called only in the scenarios of :data:`CARELESS`;
* ``tests.e2e.apps.secret_leak:coordinator`` (``serve agent --credentials env``, its
  ``user_token`` in ``ADK_MESH_CREDENTIAL_USER_TOKEN``): calls ``charge``, ``refund`` and
  ``void`` on the tool service (``$ADK_E2E_TOOLS``) and the specialist
  (``$ADK_E2E_SPECIALIST``) through an AgentTool whose policy forwards ``user_token`` and
  ``x-tenant``, over mutual TLS (``ADK_MESH_TLS_*``). With a :data:`CARELESS` scenario as
  its first message it only hands that scenario to the specialist.

Every tool hands the values back in every way the runtime promises to redact: its response
(text, and the Credential object), its state writes, a progress report, artifacts (text and
bytes), its exception's message, and log lines of the Credential object. None of them logs
``reveal()`` itself or transforms a value: that is outside the guarantee (see the README's
"What is guaranteed, and what is not"). What proves the tools got the values is their SHA-256
digests, which they return.

Every model request is written to ``$ADK_E2E_DIR/<agent>-model-<n>.json``, so the test reads
what each model was sent; each model's final answer repeats the tool responses it read.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
from typing import Any

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.contexts import ToolContext
from adk_mesh.credentials import Credential
from adk_mesh.errors import ToolError
from adk_mesh.mesh import RemoteAgent, RemoteToolset
from adk_mesh.models.base import LlmRequest
from adk_mesh.testing import FunctionModel
from adk_mesh.tools.agent_tool import AgentTool
from adk_mesh.types import Content, LlmResponse, Part
from tests.e2e.apps._common import first_user_text, marker, responses

logger = logging.getLogger("tests.e2e.apps.secret_leak")

_request_numbers = itertools.count()


def digest(value: str) -> str:
    """What a tool returns to prove it got a value (a digest is not the value)."""
    return hashlib.sha256(value.encode()).hexdigest()


def _record(agent: str, request: LlmRequest) -> None:
    marker(f"{agent}-model-{next(_request_numbers)}.json").write_text(request.model_dump_json())


def _calls(*names: str, **args: Any) -> LlmResponse:
    parts = [Part.from_function_call(name, args, id=f"call-{name}") for name in names]
    return LlmResponse(content=Content(role="model", parts=parts), turn_complete=True)


def _answer_with(seen: dict[str, Any]) -> str:
    """A final answer repeating every tool response the model read."""
    return "read: " + json.dumps(
        {name: response.response for name, response in sorted(seen.items())}, sort_keys=True
    )


async def _credential(tool_context: ToolContext, name: str) -> Credential:
    credential = await tool_context.get_credential(name)
    if credential is None:
        raise LookupError(f"no {name} credential")
    return credential


# --- the tool service -----------------------------------------------------------------------


async def charge(tool_context: ToolContext) -> dict[str, Any]:
    """Charges the user with the service's billing key."""
    key = await _credential(tool_context, "billing_key")
    tool_context.state["billing"] = key.reveal()
    tool_context.state["billing_detail"] = {"key": key.reveal(), "object": key}
    await tool_context.report_progress(f"charging with {key.reveal()}", {"key": key.reveal()})
    await tool_context.save_artifact("charge.txt", Part(text=f"charged with {key.reveal()}"))
    await tool_context.save_artifact(
        "charge.bin", Part.from_inline_data("application/octet-stream", key.reveal().encode())
    )
    logger.warning(
        "charge: using %s (%r), detail %s", key, key, {"key": key}, extra={"credential": key}
    )
    return {
        "billing_key_sha256": digest(key.reveal()),
        "echo": f"charged with {key.reveal()}",
        "object": key,
    }


async def refund(tool_context: ToolContext) -> dict[str, Any]:
    """Refunds the user (and fails, naming the key)."""
    key = await _credential(tool_context, "billing_key")
    raise RuntimeError(f"the billing API refused the refund with {key.reveal()}")


async def void(tool_context: ToolContext) -> dict[str, Any]:
    """Voids the charge (and refuses, with the key in the error's message and metadata)."""
    key = await _credential(tool_context, "billing_key")
    raise ToolError(f"void refused for {key.reveal()}", metadata={"key": key.reveal()})


tools = [charge, refund, void]


# --- the specialist -------------------------------------------------------------------------


async def use_secrets(tool_context: ToolContext) -> dict[str, Any]:
    """Calls an API with the service's key and the user's forwarded token."""
    own = await _credential(tool_context, "weather_api")
    forwarded = await _credential(tool_context, "user_token")
    both = f"{own.reveal()}:{forwarded.reveal()}"
    tool_context.state["careless"] = both
    tool_context.state["careless_detail"] = {"own": own.reveal(), "list": [forwarded.reveal()]}
    await tool_context.report_progress(f"calling with {both}", {"keys": both})
    await tool_context.save_artifact("report.txt", Part(text=f"made with {both}"))
    await tool_context.save_artifact(
        "report.bin", Part.from_inline_data("application/octet-stream", both.encode())
    )
    logger.warning(
        "use_secrets: using %s and %r, detail %s",
        own,
        forwarded,
        {"own": own},
        extra={"credential": forwarded},
    )
    return {
        "weather_api_sha256": digest(own.reveal()),
        "user_token_sha256": digest(forwarded.reveal()),
        "tenant": tool_context.request_metadata.get("x-tenant", ""),
        "echo": both,
        "objects": [own, forwarded],
    }


async def fail_with_secrets(tool_context: ToolContext) -> dict[str, Any]:
    """Calls the API again (and fails, naming both values)."""
    own = await _credential(tool_context, "weather_api")
    forwarded = await _credential(tool_context, "user_token")
    raise RuntimeError(f"the API refused {own.reveal()} for {forwarded.reveal()}")


async def remember_by_token(tool_context: ToolContext) -> dict[str, Any]:
    """Remembers it saw the user's token, under a state key naming it."""
    forwarded = await _credential(tool_context, "user_token")
    tool_context.state[f"seen:{forwarded.reveal()}"] = True
    return {"user_token_sha256": digest(forwarded.reveal())}


async def raw_token(tool_context: ToolContext) -> dict[str, Any]:
    """Returns the user's token as the bytes a client library was handed."""
    forwarded = await _credential(tool_context, "user_token")
    return {"user_token_sha256": digest(forwarded.reveal()), "raw": forwarded.reveal().encode()}


#: Scenarios (the coordinator's first message, the request it hands the specialist) in
#: which the specialist calls one tool of these.
CARELESS = {"state key": "remember_by_token", "raw bytes": "raw_token"}


def _specialist_answer(request: LlmRequest) -> LlmResponse | str:
    _record("specialist", request)
    seen = responses(request)
    careless = CARELESS.get(first_user_text(request))
    if careless is not None:
        return _answer_with(seen) if careless in seen else _calls(careless)
    if "use_secrets" not in seen:
        return _calls("use_secrets", "fail_with_secrets")
    return _answer_with(seen)


specialist = LlmAgent(
    name="specialist",
    description="Knows the weather (with the weather API).",
    model=FunctionModel(_specialist_answer, name="specialist-model"),
    tools=[use_secrets, fail_with_secrets, remember_by_token, raw_token],
)


# --- the coordinator ------------------------------------------------------------------------


def _coordinator_answer(request: LlmRequest) -> LlmResponse | str:
    _record("coordinator", request)
    seen = responses(request)
    scenario = first_user_text(request)
    if scenario in CARELESS:
        return (
            _answer_with(seen) if "specialist" in seen else _calls("specialist", request=scenario)
        )
    if "charge" not in seen:
        return _calls("charge", "refund", "void")
    if "specialist" not in seen:
        return _calls("specialist", request="the weather, with my token")
    return _answer_with(seen)


def coordinator() -> LlmAgent:
    return LlmAgent(
        name="coordinator",
        description="Charges the user and asks the specialist.",
        model=FunctionModel(_coordinator_answer, name="coordinator-model"),
        tools=[
            RemoteToolset(os.environ["ADK_E2E_TOOLS"], name="billing"),
            AgentTool(
                RemoteAgent(
                    "specialist",
                    os.environ["ADK_E2E_SPECIALIST"],
                    description="Knows the weather.",
                ),
                include_parent_state=True,
                forward_events=True,
                forward_credentials=["user_token"],
                forward_request_metadata=["x-tenant"],
            ),
        ],
    )
