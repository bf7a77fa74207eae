"""The ``adk-mesh`` command: MODULE:ATTR loading, run and describe output, startup errors."""

from __future__ import annotations

import io
import socket
import sys
import textwrap
import types
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.cli import EventPrinter, format_card, main, print_events
from adk_mesh.errors import ConfigError
from adk_mesh.mesh._loader import load_agent, load_object, load_tools
from adk_mesh.tools.base import Toolset
from adk_mesh.tools.function_tool import FunctionTool
from adk_mesh.types import Content, Event, EventActions, LlmResponse, Part
from adk_mesh.v1 import agent_pb2, tool_pb2

# --- MODULE:ATTR loading -------------------------------------------------------------------

APP_SOURCE = """
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.testing import ScriptedModel
from adk_mesh.tools.base import Toolset


def greet(name: str) -> dict:
    \"\"\"Greet someone.\"\"\"
    return {"greeting": f"hello {name}"}


class Nothing(Toolset):
    async def tools(self, ctx):
        return []


agent = LlmAgent(name="helper", model=ScriptedModel(["hi"]))
tools = [greet]
toolset = Nothing("nothing")
number = 42
holder = type("Holder", (), {"agent": agent})


def build():
    return LlmAgent(name="built", model=ScriptedModel(["hi"]))


def build_number():
    return 7


def explode():
    raise RuntimeError("no config")
"""


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module in a fresh current directory, importable only because the cwd is on the path."""
    name = f"app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(APP_SOURCE))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield name
    sys.modules.pop(name, None)


def test_load_agent_finds_an_agent_a_dotted_attribute_and_a_factory(app_module: str) -> None:
    assert load_agent(f"{app_module}:agent").name == "helper"
    assert load_agent(f"{app_module}:holder.agent").name == "helper"
    assert load_agent(f"{app_module}:build").name == "built"


def test_load_tools_wraps_functions_and_keeps_a_toolset(app_module: str) -> None:
    tools = load_tools(f"{app_module}:tools")
    assert isinstance(tools, list)
    [tool] = tools
    assert isinstance(tool, FunctionTool) and tool.name == "greet"
    assert isinstance(load_tools(f"{app_module}:toolset"), Toolset)


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("no_colon", "'no_colon' is not a MODULE:ATTR reference"),
        ("{app}:", "is not a MODULE:ATTR reference"),
        ("missing_module_xyz:agent", "cannot import module 'missing_module_xyz'"),
        ("{app}:nope", "has no attribute 'nope'"),
        ("{app}:holder.nope", "'{app}:holder' has no attribute 'nope'"),
        ("{app}:number", "is int 42, not an agent"),
        ("{app}:build_number", "{app}:build_number() returned int 7, not an agent"),
        ("{app}:explode", "raised RuntimeError: no config"),
        ("{app}:tools", "is list"),
    ],
)
def test_load_agent_errors_say_what_was_wrong(
    app_module: str, reference: str, message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_agent(reference.format(app=app_module))
    assert message.format(app=app_module) in raised.value.message


def test_attribute_errors_list_what_the_module_defines(app_module: str) -> None:
    with pytest.raises(ConfigError, match=r"it defines: .*agent.*build"):
        load_object(f"{app_module}:nope")


def test_load_tools_errors(app_module: str) -> None:
    with pytest.raises(ConfigError, match="name a list of tools or functions"):
        load_tools(f"{app_module}:number")
    with pytest.raises(ConfigError, match=r"returned int 7; return a list"):
        load_tools(f"{app_module}:build_number")


def test_a_module_whose_dependency_is_missing_names_the_dependency(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"broken_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("import not_installed_dependency_xyz\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(ConfigError, match="it needs 'not_installed_dependency_xyz'"):
        load_object(f"{name}:agent")


# --- run output ----------------------------------------------------------------------------


def model_event(author: str, *parts: Part, partial: bool = False, **actions: object) -> Event:
    return Event(
        author=author,
        invocation_id="inv-1",
        llm_response=LlmResponse(content=Content(role="model", parts=list(parts)), partial=partial),
        actions=EventActions(**actions),  # type: ignore[arg-type]
    )


def test_run_output_shows_text_calls_results_transfers_state_and_artifacts() -> None:
    events = [
        model_event("coordinator", Part.from_function_call("lookup", {"city": "Porto"})),
        model_event(
            "coordinator",
            Part.from_function_response("lookup", {"temp_c": 21}),
            state_delta={"looked_up": "Porto"},
            artifact_delta={"report.txt": 2},
        ),
        model_event(
            "coordinator",
            Part.from_function_call("transfer_to_agent", {"agent_name": "specialist"}),
        ),
        model_event(
            "coordinator",
            Part.from_function_response("transfer_to_agent", {}),
            transfer_to_agent="specialist",
        ),
        model_event("specialist", Part.from_text("Porto "), partial=True),
        model_event("specialist", Part.from_text("it is"), partial=True),
        model_event("specialist", Part.from_text("Porto it is"), state_delta={"n": 1}),
        model_event("specialist", Part.from_text("Bye")),
    ]
    out = io.StringIO()
    print_events(events, out)
    assert out.getvalue() == (
        '[coordinator] → lookup({"city": "Porto"})\n'
        '[coordinator] ← lookup: {"temp_c": 21}\n'
        '[coordinator] state: looked_up="Porto"\n'
        "[coordinator] artifact: report.txt v2\n"
        '[coordinator] → transfer_to_agent({"agent_name": "specialist"})\n'
        "[coordinator] ← transfer_to_agent: {}\n"
        "[coordinator] ⇢ transfer to specialist\n"
        "[specialist] Porto it is\n"
        "[specialist] state: n=1\n"
        "[specialist] Bye\n"
    )


def test_run_output_header_and_errors() -> None:
    out = io.StringIO()
    printer = EventPrinter(out)
    printer.header("s-1", "inv-1")
    printer.print(
        Event(
            author="coordinator",
            llm_response=LlmResponse(error_code="SAFETY", error_message="blocked"),
            actions=EventActions(escalate=True),
        )
    )
    printer.finish()
    assert out.getvalue() == (
        "session s-1 · invocation inv-1\n[coordinator] error: SAFETY: blocked\n"
        "[coordinator] ⇡ escalate\n"
    )


def test_a_stream_cut_after_partial_text_still_ends_its_line() -> None:
    out = io.StringIO()
    print_events([model_event("a", Part.from_text("half"), partial=True)], out)
    assert out.getvalue() == "[a] half\n"


# --- describe output -----------------------------------------------------------------------


def test_describe_output_lists_sub_agents_and_tools() -> None:
    card = agent_pb2.AgentCard(
        name="coordinator",
        description="Plans and delegates.",
        agent_type="LlmAgent",
        app_name="travel",
        supports_streaming=True,
        sub_agents=[agent_pb2.AgentSummary(name="specialist", description="Knows cities.")],
        tools=[
            tool_pb2.ToolDeclaration(name="lookup", description="Look up.\n\nMore detail."),
            tool_pb2.ToolDeclaration(name="bare"),
        ],
    )
    assert format_card(card) == (
        "coordinator (LlmAgent)\n"
        "  app: travel\n"
        "  description: Plans and delegates.\n"
        "  streaming: yes\n"
        "  sub-agents:\n"
        "    - specialist: Knows cities.\n"
        "  tools:\n"
        "    - lookup: Look up.\n"
        "\n"
        "      More detail.\n"
        "    - bare\n"
    )
    assert format_card(agent_pb2.AgentCard(name="solo")).endswith(
        "  sub-agents: none\n  tools: none\n"
    )


def test_describe_output_keeps_whole_descriptions_indented_under_their_item() -> None:
    card = agent_pb2.AgentCard(
        name="coordinator",
        description="Plans trips.\nDelegates bookings.",
        sub_agents=[
            agent_pb2.AgentSummary(
                name="specialist",
                description="Knows cities.\n\n    Ask it about:\n        - museums\n    ",
            ),
            agent_pb2.AgentSummary(name="quiet", description="  \n  "),
        ],
        tools=[
            tool_pb2.ToolDeclaration(name="lookup", description="\n    Look up.\n    Fast.\n    ")
        ],
    )
    assert format_card(card) == (
        "coordinator (agent)\n"
        "  description: Plans trips.\n"
        "    Delegates bookings.\n"
        "  streaming: no\n"
        "  sub-agents:\n"
        "    - specialist: Knows cities.\n"
        "\n"
        "      Ask it about:\n"
        "          - museums\n"
        "    - quiet\n"
        "  tools:\n"
        "    - lookup: Look up.\n"
        "      Fast.\n"
    )


# --- commands ------------------------------------------------------------------------------


def test_serve_on_a_taken_port_exits_2_with_a_clear_error(
    app_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        code = main(["serve", "tools", f"{app_module}:tools", "--port", str(port)])
    assert code == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: port {port} is taken\n"
    assert captured.out == ""


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["serve", "tools", "m:t", "--port", "70000"], "argument --port: 70000 is not a port"),
        (["serve", "tools", "m:t", "--port", "-5"], "argument --port: -5 is not a port number"),
        (["serve", "tools", "m:t", "--port", "x"], "argument --port: 'x' is not a port number"),
        (["serve", "tools", "m:t"], "the following arguments are required: --port"),
        (["describe"], "the following arguments are required: TARGET"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_usage_mistakes_are_one_error_line_and_exit_2(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(arguments)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err
    assert err.endswith(" --help\n") and err.count("\n") == 1


def test_serve_with_a_bad_reference_exits_2(
    app_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "agent", f"{app_module}:number", "--port", "0"]) == 2
    assert capsys.readouterr().err.startswith(f"error: '{app_module}:number' is int 42")


def test_serve_with_a_bad_store_url_exits_2(
    app_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "agent", f"{app_module}:agent", "--port", "0", "--store", "x"]) == 2
    assert "session store URL 'x' has no scheme" in capsys.readouterr().err


def test_run_against_nothing_prints_the_error_class_and_exits_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    assert main(["run", f"127.0.0.1:{port}", "hello"]) == 1
    assert capsys.readouterr().err.startswith("error: AdkIOError: ")


def test_up_passes_every_remaining_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    received: list[list[str]] = []
    fake = types.ModuleType("adk_mesh.up")
    fake.main = lambda argv: received.append(argv) or 3  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "adk_mesh.up", fake)
    assert main(["up", "--config", "mesh.toml", "--dry-run"]) == 3
    assert received == [["--config", "mesh.toml", "--dry-run"]]


def test_up_without_its_module_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "adk_mesh.up", None)
    assert main(["up"]) == 2
    assert "module adk_mesh.up is missing" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("adk-mesh ")


def test_an_agent_is_loaded_once_per_module(app_module: str) -> None:
    first = load_agent(f"{app_module}:agent")
    assert isinstance(first, LlmAgent)
    assert load_agent(f"{app_module}:agent") is first


def test_serve_agent_reads_store_urls_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A URL with a password is better in the environment (a secret) than in the process list.
    from adk_mesh.cli import build_parser

    arguments = ["serve", "agent", "app:agent", "--port", "0"]
    for name in ("ADK_MESH_SESSIONS", "ADK_MESH_ARTIFACTS", "ADK_MESH_MEMORY"):
        monkeypatch.delenv(name, raising=False)
    parsed = build_parser().parse_args(arguments)
    assert (parsed.store, parsed.artifacts, parsed.memory) == (None, None, None)

    monkeypatch.setenv("ADK_MESH_SESSIONS", "postgresql://u:pw@db/s")
    monkeypatch.setenv("ADK_MESH_ARTIFACTS", "file:///data")
    monkeypatch.setenv("ADK_MESH_MEMORY", "sqlite:///memory.db")
    parsed = build_parser().parse_args(arguments)
    assert (parsed.store, parsed.artifacts, parsed.memory) == (
        "postgresql://u:pw@db/s",
        "file:///data",
        "sqlite:///memory.db",
    )
    parsed = build_parser().parse_args([*arguments, "--store", "memory://"])
    assert parsed.store == "memory://"  # an argument wins
