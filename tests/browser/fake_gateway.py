"""A small stand-in for the gateway: google-adk's api_server routes the UI calls, over
in-memory sessions, answering one scripted travel-desk turn (a transfer, an AgentTool
delegation with tool progress, streamed partials, a state change and an artifact; asked for
"sources", an answer that carries its grounding) and writing that turn's spans as the
services of a local mesh do (OTLP JSON files), so the real trace route and the real UI files
are what the browser exercises.

It checks the UI's requests as google-adk's server would read them (camelCase bodies).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from adk_mesh.telemetry import OtlpJsonFileSpanExporter
from gateway._security import SecurityHeaders
from gateway._traces import UI_DIRECTORY, TraceSources, trace_router

APP = "travel_desk"
NOTE = "lisbon-in-three-days.md"

#: A message with this word gets an answer that carries its grounding (GROUNDING, CODE_RUNS).
GROUNDED = "sources"
#: Where the answer comes from, as the gateway writes it (google-adk's groundingMetadata):
#: a source whose title is HTML (to be shown as text), one whose URI is a script (never a
#: link), one without a title (its host stands in).
PASTEIS_TITLE = '<img src=x onerror="document.body.dataset.pwned=1">Pastéis de <b>Belém</b>'
SCRIPT_URI = "javascript:document.body.dataset.pwned=1"
GROUNDING: dict[str, Any] = {
    "groundingChunks": [
        {"web": {"uri": "https://fado.example/mouraria", "title": "Fado in Mouraria"}},
        {"web": {"uri": "https://pasteis.example/belem?from=ui", "title": PASTEIS_TITLE}},
        {"web": {"uri": SCRIPT_URI, "title": "Click for a free tram pass"}},
        {"web": {"uri": "https://castelo.example/"}},
    ],
    "groundingSupports": [
        {"segment": {"startIndex": 0, "endIndex": 29}, "groundingChunkIndices": [0, 1]},
    ],
    "webSearchQueries": ["lisbon fado evening", "pastéis de belém <history>"],
}
#: The code the provider ran (customMetadata.adkMesh.codeExecutions).
CODE_RUNS: list[dict[str, Any]] = [
    {"code": "print(3 * 24, '<b>hours</b>')", "output": "72 <b>hours</b>\n", "language": "python",
     "outcome": "OK"},
    {"code": "1 / 0", "output": "ZeroDivisionError", "language": "python", "outcome": "FAILED"},
]  # fmt: skip


def _event(invocation_id: str, author: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": str(uuid.uuid4()),
        "invocationId": invocation_id,
        "author": author,
        "timestamp": time.time(),
        "actions": {"stateDelta": {}, "artifactDelta": {}},
        **fields,
    }


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"text": text}]}


class FakeGateway:
    """In-memory sessions and artifacts for one app; the requests it saw, for assertions."""

    def __init__(self, trace_dir: Path) -> None:
        self.trace_dir = trace_dir
        self.sessions: dict[str, dict[str, Any]] = {}
        self.artifacts: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.run_bodies: list[dict[str, Any]] = []
        #: Set when a client closed a run's stream before its last event.
        self.disconnected = threading.Event()
        self.providers = {
            name: self._provider(name) for name in ("concierge", "planner", "writer", "tools")
        }

    def _provider(self, service: str) -> TracerProvider:
        provider = TracerProvider(
            resource=Resource({"service.name": service}), shutdown_on_exit=False
        )
        provider.add_span_processor(SimpleSpanProcessor(OtlpJsonFileSpanExporter(self.trace_dir)))
        return provider

    def app(self) -> FastAPI:
        sessions = "/apps/{app}/users/{user}/sessions"
        app = FastAPI()
        app.include_router(trace_router(TraceSources(trace_dir=self.trace_dir)))
        app.router.routes.extend(
            [
                Route("/list-apps", self.list_apps),
                Route(sessions, self.sessions_route, methods=["GET", "POST"]),
                Route(sessions + "/{session}", self.session_route, methods=["GET", "DELETE"]),
                Route(sessions + "/{session}/artifacts", self.list_artifacts),
                Route(sessions + "/{session}/artifacts/{name}", self.load_artifact),
                Route(sessions + "/{session}/artifacts/{name}/versions", self.versions),
                Route("/run_sse", self.run_sse, methods=["POST"]),
                Mount("/ui", app=StaticFiles(directory=UI_DIRECTORY, html=True), name="ui"),
            ]
        )
        # The gateway's headers, its Content-Security-Policy included: the UI runs under it.
        app.add_middleware(SecurityHeaders)
        return app

    async def list_apps(self, request: Request) -> Response:
        return JSONResponse([APP])

    def _summary(self, session: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in session.items() if key != "events"}

    async def sessions_route(self, request: Request) -> Response:
        if request.path_params["app"] != APP:
            return JSONResponse({"detail": "no such app"}, status_code=404)
        user = request.path_params["user"]
        if request.method == "GET":
            return JSONResponse(
                [self._summary(s) for s in self.sessions.values() if s["userId"] == user]
            )
        body = json.loads(await request.body() or b"{}")
        session = {
            "id": str(uuid.uuid4()),
            "appName": APP,
            "userId": user,
            "state": body.get("state") or {},
            "events": [],
            "lastUpdateTime": time.time(),
        }
        self.sessions[session["id"]] = session
        return JSONResponse(session)

    async def session_route(self, request: Request) -> Response:
        session = self.sessions.get(request.path_params["session"])
        if session is None:
            return JSONResponse({"detail": "Session not found"}, status_code=404)
        if request.method == "DELETE":
            del self.sessions[session["id"]]
            return Response(status_code=204)
        return JSONResponse(session)

    async def list_artifacts(self, request: Request) -> Response:
        session = request.path_params["session"]
        return JSONResponse(sorted(name for s, name in self.artifacts if s == session))

    async def versions(self, request: Request) -> Response:
        key = (request.path_params["session"], request.path_params["name"])
        return JSONResponse(list(range(len(self.artifacts.get(key, [])))))

    async def load_artifact(self, request: Request) -> Response:
        versions = self.artifacts.get((request.path_params["session"], request.path_params["name"]))
        if not versions:
            return JSONResponse({"detail": "Artifact not found"}, status_code=404)
        version = request.query_params.get("version")
        return JSONResponse(versions[int(version) if version is not None else -1])

    async def run_sse(self, request: Request) -> Response:
        body = await request.json()
        self.run_bodies.append(body)
        session = self.sessions.get(body["sessionId"])
        if session is None or body["appName"] != APP or body["userId"] != session["userId"]:
            return JSONResponse({"detail": "Session not found"}, status_code=404)
        message = body["newMessage"]["parts"][0]["text"]

        # "slowly" in the message: a turn slow enough for a person to stop it.
        pause = 1.0 if "slowly" in message else 0.02

        async def frames() -> AsyncIterator[str]:
            invocation_id = "e-" + uuid.uuid4().hex[:12]
            user_event = _event(invocation_id, "user", content=_text("user", message))
            session["events"].append(user_event)
            finished = False
            try:
                for event in self._turn(session, invocation_id, message):
                    if not event.get("partial"):
                        self._append(session, event)
                    yield f"data: {json.dumps(event, separators=(',', ':'))}\n\n"
                    await asyncio.sleep(pause)
                finished = True
            finally:
                if not finished:
                    self.disconnected.set()
            self._spans(invocation_id)

        return StreamingResponse(frames(), media_type="text/event-stream")

    def _append(self, session: dict[str, Any], event: dict[str, Any]) -> None:
        actions = event["actions"]
        session["state"].update(actions["stateDelta"])
        session["events"].append(event)
        session["lastUpdateTime"] = event["timestamp"]

    def _turn(
        self, session: dict[str, Any], invocation_id: str, message: str
    ) -> list[dict[str, Any]]:
        call_id = "adk-" + uuid.uuid4().hex[:8]
        itinerary = (
            "Day 1: Alfama and the castle, grilled sardines.\n"
            "Day 2: Belém, the monastery and pastéis.\n"
            "Day 3: Mouraria, a fado evening."
        )
        self.artifacts.setdefault((session["id"], NOTE), []).append({"text": itinerary})
        version = len(self.artifacts[(session["id"], NOTE)]) - 1
        events = [
            _event(
                invocation_id,
                "concierge",
                content={
                    "role": "model",
                    "parts": [
                        {
                            "functionCall": {
                                "id": "adk-transfer",
                                "name": "transfer_to_agent",
                                "args": {"agent_name": "trip_planner"},
                            }
                        }
                    ],
                },
            ),
            _event(
                invocation_id,
                "concierge",
                content={
                    "role": "user",
                    "parts": [
                        {
                            "functionResponse": {
                                "id": "adk-transfer",
                                "name": "transfer_to_agent",
                                "response": {"result": None},
                            }
                        }
                    ],
                },
                actions={
                    "stateDelta": {},
                    "artifactDelta": {},
                    "transferToAgent": "trip_planner",
                },
            ),
            _event(
                invocation_id,
                "trip_planner",
                branch="concierge.trip_planner",
                content={
                    "role": "model",
                    "parts": [
                        {
                            "functionCall": {
                                "id": call_id,
                                "name": "itinerary_writer",
                                "args": {"request": message},
                            }
                        }
                    ],
                },
            ),
            {
                **_event(invocation_id, "trip_planner", branch="concierge.trip_planner"),
                "partial": True,
                "toolProgress": {
                    "toolName": "itinerary_writer",
                    "functionCallId": call_id,
                    "message": "drafting, round 1 of 3",
                    "fraction": 0.33,
                },
            },
            _event(
                invocation_id,
                "trip_planner",
                branch="concierge.trip_planner",
                content={
                    "role": "user",
                    "parts": [
                        {
                            "functionResponse": {
                                "id": call_id,
                                "name": "itinerary_writer",
                                "response": {"result": itinerary},
                            }
                        }
                    ],
                },
                actions={
                    "stateDelta": {"itinerary": itinerary, "user:pace": "relaxed"},
                    "artifactDelta": {NOTE: version},
                },
            ),
        ]
        answer = f"Here is your plan for Lisbon.\n{itinerary}"
        words = answer.split(" ")
        for index in range(0, len(words), 4):
            chunk = " ".join(words[index : index + 4]) + (" " if index + 4 < len(words) else "")
            events.append(
                {
                    **_event(
                        invocation_id,
                        "trip_planner",
                        branch="concierge.trip_planner",
                        content=_text("model", chunk),
                    ),
                    "partial": True,
                }
            )
        grounded: dict[str, Any] = {}
        if GROUNDED in message:
            grounded["groundingMetadata"] = GROUNDING
            grounded["customMetadata"] = {"adkMesh": {"codeExecutions": CODE_RUNS}}
        events.append(
            _event(
                invocation_id,
                "trip_planner",
                branch="concierge.trip_planner",
                content=_text("model", answer),
                turnComplete=True,
                usageMetadata={"promptTokenCount": 321, "candidatesTokenCount": 54},
                **grounded,
            )
        )
        return events

    def _spans(self, invocation_id: str) -> None:
        """The turn's spans, each service writing its own file, nested across services."""
        tracer = {name: provider.get_tracer("fake") for name, provider in self.providers.items()}
        stamp = {"adk_mesh.invocation_id": invocation_id}
        here = trace.set_span_in_context
        concierge = tracer["concierge"]
        with concierge.start_as_current_span(
            "invoke_agent concierge", kind=trace.SpanKind.SERVER, attributes=stamp
        ):
            with concierge.start_as_current_span("chat offline", attributes=stamp):
                time.sleep(0.002)
            with concierge.start_as_current_span(
                "execute_tool transfer_to_agent",
                attributes={
                    **stamp,
                    "adk_mesh.control_flow": "pass_control",
                    "adk_mesh.target_agent": "trip_planner",
                },
            ):
                with tracer["planner"].start_as_current_span(
                    "invoke_agent trip_planner",
                    context=here(trace.get_current_span()),
                    kind=trace.SpanKind.SERVER,
                    attributes=stamp,
                ):
                    planner = tracer["planner"]
                    with planner.start_as_current_span("chat offline", attributes=stamp):
                        time.sleep(0.003)
                    with planner.start_as_current_span(
                        "execute_tool itinerary_writer",
                        attributes={
                            **stamp,
                            "gen_ai.tool.name": "itinerary_writer",
                            "adk_mesh.control_flow": "return_to_caller",
                            "adk_mesh.target_agent": "itinerary_writer",
                        },
                    ):
                        with tracer["writer"].start_as_current_span(
                            "invoke_agent itinerary_writer",
                            context=here(trace.get_current_span()),
                            kind=trace.SpanKind.SERVER,
                            attributes=stamp,
                        ):
                            time.sleep(0.01)
                    with tracer["tools"].start_as_current_span(
                        "execute_tool save_note",
                        context=here(trace.get_current_span()),
                        kind=trace.SpanKind.SERVER,
                        attributes=stamp,
                    ):
                        time.sleep(0.002)
                    with planner.start_as_current_span("chat offline", attributes=stamp):
                        time.sleep(0.004)
