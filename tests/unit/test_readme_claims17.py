"""README.md tells the truth: the flags, variables, config keys, make targets and Python names
it gives exist, and the snippets that were wrong run as written."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from adk_mesh import codec
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.cli import main
from adk_mesh.testing import ScriptedModel
from adk_mesh.up import _MeshTable, _ServiceTable

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")

#: The `adk-mesh` commands whose --help lists their flags (`up` and `gateway` have their own
#: parsers, reached through `main` as a user reaches them).
COMMANDS = [
    ["serve", "agent"],
    ["serve", "tools"],
    ["run"],
    ["describe"],
    ["api-key"],
    ["migrate"],
    ["gateway"],
    ["up"],
]

#: Flags README names that belong to other programs (docker, podman, kubectl, an MCP server,
#: the benchmarks), not to `adk-mesh`.
OTHER_PROGRAMS_FLAGS = {
    "--all",
    "--for",
    "--force-recreate",
    "--format",
    "--from-file",
    "--from-literal",
    "--history-cache-bytes",
    "--ignore-not-found",
    "--local-timezone",
    "--no-deps",
    "--only",
    "--scale",
    "--secret",
    "--timeout",
    "--volumes",
}

#: `adk_mesh.*` names in README that are not Python objects: span attributes, a logger name.
NOT_PYTHON_NAMES = {
    "adk_mesh.app_name",
    "adk_mesh.cancelled",
    "adk_mesh.closed_early",
    "adk_mesh.invocation_id",
    "adk_mesh.part_kind",
    "adk_mesh.plugins.logging",
}


def _section(title: str) -> str:
    """The text of README's section ``## title``, up to the next ``## `` heading."""
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else len(README)]


def _cli_flags(capsys: pytest.CaptureFixture[str]) -> set[str]:
    flags: set[str] = set()
    for command in COMMANDS:
        with pytest.raises(SystemExit) as exited:
            main([*command, "--help"])
        assert exited.value.code == 0, command
        flags |= set(re.findall(r"--[a-z][a-z0-9-]+", capsys.readouterr().out))
    return flags - {"--help"}


def test_every_flag_readme_names_is_a_flag_of_adk_mesh(capsys: pytest.CaptureFixture[str]) -> None:
    named = set(re.findall(r"--[a-z][a-z0-9-]+", README)) - OTHER_PROGRAMS_FLAGS
    assert sorted(named - _cli_flags(capsys)) == []


def test_every_flag_of_adk_mesh_is_in_readme(capsys: pytest.CaptureFixture[str]) -> None:
    """`adk-mesh run --agent/--stream` and `describe --agent` were in no line of README."""
    missing = [flag for flag in sorted(_cli_flags(capsys)) if not re.search(rf"{flag}\b", README)]
    assert missing == []


def _adk_mesh_variables() -> set[str]:
    names: set[str] = set()
    for folder in ("adk_mesh", "gateway", "services"):
        for path in (ROOT / folder).rglob("*.py"):
            if "/v1/" in path.as_posix():
                continue
            names |= set(re.findall(r"\"(ADK_MESH_[A-Z0-9_]+)\"", path.read_text("utf-8")))
    return names


def test_every_adk_mesh_variable_the_code_reads_is_in_the_configuration_reference() -> None:
    """ADK_MESH_MEMORY (serve's --memory default, set by up) and ADK_MESH_TRACE_QUERY_URL
    (the gateway's Jaeger query service) were missing from the reference table."""
    reference = _section("Configuration reference")
    missing = [name for name in sorted(_adk_mesh_variables()) if name not in reference]
    assert missing == []


def test_every_adk_mesh_variable_readme_names_is_read_somewhere() -> None:
    sources = "\n".join(
        path.read_text("utf-8", errors="replace")
        for folder in ("adk_mesh", "gateway", "services", "deploy")
        for path in (ROOT / folder).rglob("*")
        if path.is_file()
        and path.suffix in {".py", ".yaml", ".yml", ""}
        and "/v1/" not in str(path)
    )
    named = set(re.findall(r"\b(ADK_MESH_[A-Z0-9_]*[A-Z0-9])\b", README))
    assert sorted(name for name in named if name not in sources) == []


def _reference_keys(table: str) -> set[str]:
    """The keys of ``table`` (``mesh`` or ``services.X``) the mesh.toml reference rows name."""
    keys: set[str] = set()
    for row in _section("Configuration reference").splitlines():
        cell = row.split("|")[1] if row.startswith("| `[") else ""
        if not cell.strip().startswith(f"`[{table}"):
            continue
        for name in re.findall(r"`([^`]+)`", cell):
            name = name.removeprefix(f"[{table}] ").removeprefix(f"[{table}.")
            keys.add(name.split(".")[0].rstrip("]"))
    return keys


def test_every_mesh_toml_key_is_in_the_configuration_reference() -> None:
    """`[mesh] env` (extra environment of every service) was in no row."""
    assert sorted(set(_MeshTable.model_fields) - _reference_keys("mesh")) == []
    assert sorted(set(_ServiceTable.model_fields) - _reference_keys("services.X")) == []


def test_make_help_sentence_names_every_target() -> None:
    makefile = (ROOT / "Makefile").read_text("utf-8")
    targets = set(re.findall(r"^([a-z][a-z-]*):.*## ", makefile, re.MULTILINE)) - {"help"}
    sentence = README[README.index("`make help` lists every target") :].split(".\n")[0]
    assert sorted(targets - set(re.findall(r"`([a-z-]+)`", sentence))) == []


def _resolve(name: str) -> Any:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            found = getattr(found, part)
        return found
    raise ImportError(name)


def test_every_adk_mesh_python_name_in_readme_resolves() -> None:
    names = set(re.findall(r"`(adk_mesh(?:\.[A-Za-z_]\w*)+)", README)) - NOT_PYTHON_NAMES
    for name in sorted(names):
        if not name.startswith("adk_mesh.v1."):  # the protobuf package, not Python
            _resolve(name)


def test_every_import_of_readme_python_blocks_runs() -> None:
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    for block in re.findall(r"```python\n(.*?)```", README, re.DOTALL):
        tree = compile(block, "README.md", "exec", flags=flags)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                exec(compile(ast.Module([node], []), "README.md", "exec"), {})


def test_open_channel_is_named_where_it_can_be_imported() -> None:
    """README offered `open_channel(...)` from a module that did not export it."""
    mention = re.search(r"`open_channel\(target[^`]*`\s*\(from `([\w.]+)`", README)
    assert mention is not None
    assert callable(importlib.import_module(mention.group(1)).open_channel)


def test_codec_cache_bounds_readme_names_exist() -> None:
    """README said all four hop caches have `max_bytes`; VIEW_MEMOS and NAMED_WINDOWS are
    bounded by `max_weight` (and `max_entries`): setting `max_bytes` on them did nothing."""
    named = re.findall(r"`(ENCODED_EVENTS|DECODED_EVENTS|VIEW_MEMOS|NAMED_WINDOWS)\.(\w+)`", README)
    assert {cache for cache, _ in named} == {
        "ENCODED_EVENTS",
        "DECODED_EVENTS",
        "VIEW_MEMOS",
        "NAMED_WINDOWS",
    }
    for cache, attribute in named:
        assert isinstance(getattr(getattr(codec, cache), attribute), int), (cache, attribute)


async def test_programmatic_agent_server_snippet_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inline `AgentServer` snippet stopped a `server` it never named."""
    paragraph = README[README.index("Programmatically: `") :].split("\n\n")[0]
    spans = re.findall(r"`([^`]+)`", paragraph)
    code = [span for span in spans if "=" in span or span.startswith("await ")]
    assert code and code[-1].startswith("await server.stop")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {
        "agent": LlmAgent(name="echo", model=ScriptedModel(["hi"])),
        "grace": 0,
    }
    exec("from adk_mesh.mesh import AgentServer", namespace)
    body = "".join(f"    {line}\n" for line in code)
    exec(f"async def snippet():\n{body}    return port\n", namespace)
    assert await namespace["snippet"]() > 0


def test_gateway_commands_against_the_local_mesh_say_how_to_trust_its_ca() -> None:
    """`adk-mesh up` serves TLS: a gateway started as README wrote it reached no agent (503)."""
    blocks = [
        block
        for block in re.findall(r"```bash\n(.*?)```", README, re.DOTALL)
        if "adk-mesh gateway" in block and "127.0.0.1:50051" in block
    ]
    assert blocks
    for block in blocks:
        assert "ADK_MESH_TLS_CA" in block or "--mesh-ca" in block, block


def test_session_routes_example_does_not_create_the_session_the_streamed_turn_made() -> None:
    """Run in order, the routes example's POST of `s1` answered 409: `/run_sse` made it."""
    streamed = _section("The HTTP gateway: google-adk's REST and SSE API over the mesh")
    turn = re.search(r'/run_sse .*?"sessionId": "(\w+)"', streamed, re.DOTALL)
    created = re.search(r'/sessions \\\n.*?"sessionId": "(\w+)"', streamed, re.DOTALL)
    assert turn is not None and created is not None
    assert turn.group(1) != created.group(1)


def test_image_extras_match_the_containerfile() -> None:
    containerfile = (ROOT / "deploy/container/Containerfile").read_text("utf-8")
    installed = re.search(r'"(adk-mesh\[[a-z,]+\])"', containerfile)
    assert installed is not None
    assert f"`{installed.group(1)}`" in _section("Deploy: containers, Compose, Kubernetes")
