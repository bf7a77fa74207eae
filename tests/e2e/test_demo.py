"""The demo conversation against the reference mesh started as separate processes."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sqlite3
import sys
from pathlib import Path
from types import ModuleType

import pytest

from adk_mesh.up import Mesh, load_config

REPO = Path(__file__).resolve().parents[2]


def _demo_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("adk_mesh_demo", REPO / "scripts" / "demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.e2e
async def test_the_demo_conversation(tmp_path: Path) -> None:
    demo = _demo_module()
    config = load_config(REPO / "mesh.toml")
    config = dataclasses.replace(
        config,
        state_dir=tmp_path,
        sessions="",
        artifacts="",
        model="offline",
        services=tuple(dataclasses.replace(s, port=0) for s in config.services),
    )
    async with Mesh(
        config, log=lambda *_: None, env={"ADK_MESH_TRACE_DIR": str(tmp_path / "traces")}
    ) as mesh:
        assert mesh.client_tls is not None  # mutual TLS between the services, TLS to the root
        turns = await demo.run_conversation(mesh.targets["concierge"], tls=mesh.client_tls)
        assert demo.tls_line(config).startswith("mTLS on: 5 services, certificates in ")
        assert demo.tls_line(config).endswith("pki/")
        assert (tmp_path / "pki" / "concierge.cert.pem").is_file()

    assert len(turns) == len(demo.TURNS)
    assert all(turn.final_text.startswith("[offline model]") for turn in turns)
    prefs, plan, fares, save, read, clock, run, budget, luggage = turns
    assert prefs.state_delta()["user:pace"] == "relaxed"
    # Transfer across services, and the AgentTool delegation with its write-back policy.
    assert plan.transfers() == ["trip_planner"]
    assert "itinerary_writer" in plan.calls()
    delta = plan.state_delta()
    assert "Day 3:" in delta["itinerary"] and "Tip:" in delta["itinerary"]
    assert not any(key.startswith("temp:review") or key == "temp:draft_round" for key in delta)
    assert "relaxed pace" in delta["itinerary"]
    assert "check_fares" in fares.calls()
    # The tool service's progress crosses two hops (tool service -> trip_planner's service ->
    # concierge) as progress, with its fraction and call id, never as model text.
    progress = [event.tool_progress for event in fares.events if event.tool_progress]
    assert [update.message for update in progress][:2] == [
        "checking SkyLark",
        "checking Atlantic Air",
    ]
    assert [update.fraction for update in progress][:2] == [0.0, 0.25]
    fare_calls = [c for e in fares.events for c in e.function_calls() if c.name == "check_fares"]
    assert {update.function_call_id for update in progress} == {fare_calls[0].id}
    assert {update.tool_name for update in progress} == {"check_fares"}
    assert not any("checking" in event.text for event in fares.events if event.partial)
    assert save.artifact_delta() == {"lisbon-in-three-days.md": 1}
    assert "load_artifacts" in read.calls() and "Day 1:" in read.final_text
    # convert_time of the MCP time server, fronted by the tool service (McpToolset).
    assert clock.transfers() == ["logistics"] and "convert_time" in clock.calls()
    assert "Asia/Tokyo" in clock.final_text and "time_difference: +" in clock.final_text
    assert "miles" in run.final_text
    assert "= 600" in budget.final_text
    assert luggage.session_id != prefs.session_id
    assert "lb" in luggage.final_text  # user:units remembered in another session

    database = sqlite3.connect(tmp_path / "sessions.db")
    try:
        tables = {
            row[0]
            for row in database.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        assert tables
        dump = "\n".join(
            json.dumps(row, default=str)
            for table in tables
            if not table.startswith("sqlite_")
            for row in database.execute(f'SELECT * FROM "{table}"')
        )
    finally:
        database.close()
    for turn in turns:
        assert turn.invocation_id in dump
    assert "user:units" in dump or "imperial" in dump
    assert "requests_served" in dump
    assert "temp:turn_started" not in dump

    try:
        from adk_mesh.telemetry import read_trace_files  # type: ignore[attr-defined]
    except ImportError:
        return
    spans = read_trace_files(tmp_path / "traces")
    text = json.dumps([getattr(span, "__dict__", str(span)) for span in spans], default=str)
    assert plan.invocation_id in text
