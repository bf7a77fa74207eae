"""``adk-mesh run`` / ``describe`` as a client: what it prints for thoughts and long-running
calls, and one error line (exit 2) for local mistakes in credentials and TLS files."""

from __future__ import annotations

import io
import socket
from pathlib import Path

import pytest

from adk_mesh.cli import EventPrinter, main
from adk_mesh.types import Content, Event, LlmResponse, Part


def unused_target() -> str:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{unused.getsockname()[1]}"


@pytest.fixture(autouse=True)
def no_client_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "ADK_MESH_TLS_CA",
        "ADK_MESH_TLS_CERT",
        "ADK_MESH_TLS_KEY",
        "ADK_MESH_TOKEN",
        "ADK_MESH_API_KEY",
    ):
        monkeypatch.delenv(name, raising=False)


def printed(*events: Event) -> str:
    out = io.StringIO()
    printer = EventPrinter(out)
    for event in events:
        printer.print(event)
    printer.finish()
    return out.getvalue()


def model(*parts: Part, partial: bool = False, long_running: tuple[str, ...] = ()) -> Event:
    return Event(
        author="a",
        llm_response=LlmResponse(content=Content(role="model", parts=list(parts)), partial=partial),
        long_running_tool_ids=list(long_running),
    )


# --- output --------------------------------------------------------------------------------


def test_a_streamed_answer_still_shows_its_thought() -> None:
    """With --stream the thought's partials are not text (Event.text leaves them out); the
    final event repeats thought and answer: the answer was shown, the thought was not."""
    thought = Part(text="thinking hard", thought=True)
    output = printed(
        model(thought, partial=True),
        model(Part(text="answer"), partial=True),
        model(thought, Part(text="answer")),
    )
    assert output == "[a] answer\n[a] (thought) thinking hard\n"
    # As without streaming, where both come from the final event.
    assert printed(model(thought, Part(text="answer"))) == (
        "[a] (thought) thinking hard\n[a] answer\n"
    )


def test_a_partial_without_text_opens_no_empty_line() -> None:
    output = printed(
        model(Part(text="…", thought=True), partial=True),
        model(Part.from_function_call("lookup", {"city": "Oslo"})),
    )
    assert output == '[a] → lookup({"city": "Oslo"})\n'


def test_a_long_running_call_says_it_waits_and_names_its_id() -> None:
    """The turn ends with the call open; answering it takes the call's id."""
    call = Part.from_function_call("approve", {"amount": 5}, id="call-7")
    output = printed(model(call, long_running=("call-7",)))
    assert output == (
        '[a] → approve({"amount": 5})\n'
        "[a] … waiting for the answer to approve (long-running call call-7)\n"
    )


# --- local mistakes: one line, exit 2 ------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [("--token", "abc\ndef"), ("--api-key", "clé"), ("--token", "tab\there")],
)
def test_a_credential_a_header_cannot_carry_is_one_error_line(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", unused_target(), "hello", option, value]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1, error
    assert error.startswith(f"error: {option} ")
    assert value not in error  # a secret is never echoed


def test_a_credential_from_the_environment_a_header_cannot_carry_is_one_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ADK_MESH_TOKEN", "ab\ncd")
    assert main(["describe", unused_target()]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("error: ADK_MESH_TOKEN "), error


@pytest.mark.parametrize("command", [["run", "hello"], ["describe"]])
def test_a_tls_ca_that_does_not_exist_is_one_error_line(
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    missing = tmp_path / "nowhere" / "ca.pem"
    monkeypatch.setenv("ADK_MESH_TLS_CA", str(missing))
    assert main([command[0], unused_target(), *command[1:]]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1, error
    assert error.startswith("error: ") and str(missing) in error


def test_a_client_certificate_without_its_key_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A configuration error, as the module's docstring says: 2, not a failed call's 1."""
    monkeypatch.setenv("ADK_MESH_TLS_CERT", str(tmp_path / "cert.pem"))
    assert main(["run", unused_target(), "hello"]) == 2
    error = capsys.readouterr().err
    assert error == "error: a client certificate needs its key, and a key its certificate\n"


def test_nothing_listening_is_one_line_without_a_tls_hint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Connection refused: no TLS setting would help, so none is suggested."""
    assert main(["run", unused_target(), "hello"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: AdkIOError: ") and error.count("\n") == 1, error
