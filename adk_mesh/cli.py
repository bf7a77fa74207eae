"""The ``adk-mesh`` command.

::

    adk-mesh serve agent MODULE:ATTR --port P [--host H] [--app NAME] [--store URL]
                                     [--artifacts URL] [--memory URL] [--grace SECONDS]
                                     [--credentials env|file:DIR]
    adk-mesh serve tools MODULE:ATTR --port P [--host H] [--grace SECONDS] [--mcp-port P]
                                     [--credentials env|file:DIR]
    adk-mesh run TARGET "message" [--user U] [--session S] [--app A] [--stream] [--json]
    adk-mesh describe TARGET [--agent NAME] [--json]
    adk-mesh up [ARGS...]
    adk-mesh gateway --port P --app NAME=ADDRESS [--app ...] [ARGS...]
    adk-mesh migrate STORE_URL [STORE_URL...] [--store sessions|artifacts|memory]

Exit codes: 0 success; 1 a failed run or call (``error: <class>: <message>``); 2 a usage or
configuration error (``error: <message>``: a bad MODULE:ATTR, a port out of range or taken, an
address that is not this machine's, a store ``serve`` cannot open); 130 when interrupted (while
the command still loads too: see :mod:`adk_mesh.__main__`); 141 (128 + SIGPIPE, as a Unix tool
killed by SIGPIPE) when the reader of the output went away (``adk-mesh run ... | head -1``).
Every error is one line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import io
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any, NoReturn, TextIO

import grpc
import grpc.aio
from google.protobuf import json_format

from adk_mesh import __version__, codec
from adk_mesh.errors import AdkError, ConfigError
from adk_mesh.types import Event, Part, ServerToolCall, ToolProgress
from adk_mesh.v1 import agent_pb2, agent_pb2_grpc, content_pb2

__all__ = ["EventPrinter", "format_card", "format_progress", "format_server_tool_call", "main"]

#: Stores of ``serve agent`` when ``--store`` is not given. In memory for now: sessions are
#: lost when the process stops; pass ``--store sqlite:///sessions.db`` to keep them.
DEFAULT_STORE = "memory://"
#: Where ``serve agent`` and ``migrate`` read store URLs not given as arguments: a URL with a
#: password is better in the environment (from a secret) than on a command line anyone on the
#: machine can read in the process list. The names ``adk-mesh up`` and the services use.
STORE_ENV = {
    "sessions": "ADK_MESH_SESSIONS",
    "artifacts": "ADK_MESH_ARTIFACTS",
    "memory": "ADK_MESH_MEMORY",
}

#: Exit code when stdout's reader went away: what a shell reports for a process killed by
#: SIGPIPE (128 + 13). Python ignores SIGPIPE and raises BrokenPipeError instead.
EXIT_BROKEN_PIPE = 141


# --- printing ------------------------------------------------------------------------------


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def format_progress(progress: ToolProgress) -> str:
    """A tool's progress as one line: ``check_fares … checking SkyLark (25%)``."""
    text = f"{progress.tool_name} … {progress.message}".rstrip()
    if progress.fraction is not None:
        text += f" ({progress.fraction:.0%})"
    return text


#: What people call the built-in tools a provider names by type (Gemini's ``toolType``).
_SERVER_TOOL_LABELS = {"GOOGLE_SEARCH_WEB": "google search", "URL_CONTEXT": "url fetch"}
#: The longest argument summary a server tool's line shows.
_SERVER_TOOL_SUMMARY_CHARS = 120


def format_server_tool_call(call: ServerToolCall) -> str:
    """A built-in tool the provider ran, as one line: ``[google search] "ørsta population"``;
    its queries or URLs when its arguments hold them, else its arguments as compact JSON."""
    label = _SERVER_TOOL_LABELS.get(call.tool_type) or (
        call.tool_type.lower().replace("_", " ") or "server tool"
    )
    listed = call.args.get("queries", call.args.get("urls"))
    if (
        len(call.args) == 1
        and isinstance(listed, list)
        and all(isinstance(item, str) for item in listed)
    ):
        summary = " ".join(_json(item) for item in listed)
    else:
        summary = _json(call.args) if call.args else ""
    if len(summary) > _SERVER_TOOL_SUMMARY_CHARS:
        summary = summary[: _SERVER_TOOL_SUMMARY_CHARS - 1] + "…"
    return f"[{label}] {summary}".rstrip()


class EventPrinter:
    """Prints a run's events for people: one line per text, tool call, result and action;
    a running tool's progress on a line of its own (``… checking SkyLark (25%)``); a built-in
    tool the provider ran itself on one short line (``[google search] "query"``), what it
    returned not at all (the answer's text, and its grounding, say what it found).

    Partial (streamed) text is written inline as it comes; the final event that repeats it
    closes the line instead of printing it again.
    """

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._open_author: str | None = None
        self._streamed = ""

    def _close_line(self) -> None:
        if self._open_author is not None:
            self._out.write("\n")
            self._open_author = None
            self._streamed = ""

    def _line(self, author: str, text: str) -> None:
        self._out.write(f"[{author}] {text}\n")

    def header(self, session_id: str, invocation_id: str) -> None:
        self._close_line()
        invocation = f" · invocation {invocation_id}" if invocation_id else ""
        self._out.write(f"session {session_id}{invocation}\n")

    def print(self, event: Event) -> None:
        author = event.author or "?"
        if event.tool_progress is not None:
            self._close_line()
            self._line(author, format_progress(event.tool_progress))
            self._out.flush()
            return
        if event.partial:
            if not event.text:
                # A thought's chunk (Event.text leaves thoughts out) or no text at all: an
                # empty "[author] " line otherwise. The final event shows what it held.
                return
            if self._open_author != author:
                self._close_line()
                self._out.write(f"[{author}] ")
                self._open_author = author
            self._out.write(event.text)
            self._streamed += event.text
            self._out.flush()
            return
        streamed = self._streamed if self._open_author == author else None
        self._close_line()
        content = event.content
        parts: list[Part] = content.parts if content is not None else []
        text_shown = streamed is not None and streamed == event.text
        for part in parts:
            self._print_part(author, part, skip_text=text_shown)
        for called in event.function_calls():
            if called.id is not None and called.id in event.long_running_tool_ids:
                # The turn ends with the call open; a later turn answers it by this id.
                self._line(
                    author,
                    f"… waiting for the answer to {called.name} (long-running call {called.id})",
                )
        response = event.llm_response
        if response.error_code or response.error_message:
            code = response.error_code or "error"
            self._line(author, f"error: {code}: {response.error_message or ''}".rstrip(": "))
        actions = event.actions
        for key, value in actions.state_delta.items():
            self._line(author, f"state: {key}={_json(value)}")
        for name, version in actions.artifact_delta.items():
            self._line(author, f"artifact: {name} v{version}")
        if actions.transfer_to_agent:
            self._line(author, f"⇢ transfer to {actions.transfer_to_agent}")
        if actions.escalate:
            self._line(author, "⇡ escalate")
        self._out.flush()

    def _print_part(self, author: str, part: Part, *, skip_text: bool) -> None:
        if part.text is not None:
            # Only the answer streamed (Event.text leaves thoughts out): a thought is shown
            # from the final event, streamed or not.
            if part.text and not (skip_text and not part.thought):
                prefix = "(thought) " if part.thought else ""
                self._line(author, prefix + part.text)
        elif part.function_call is not None:
            called = part.function_call
            self._line(author, f"→ {called.name}({_json(called.args)})")
        elif part.function_response is not None:
            answered = part.function_response
            self._line(author, f"← {answered.name}: {_json(answered.response)}")
        elif part.inline_data is not None:
            blob = part.inline_data
            self._line(author, f"<{blob.mime_type}, {len(blob.data)} bytes>")
        elif part.file_data is not None:
            self._line(author, f"<{part.file_data.mime_type} {part.file_data.file_uri}>")
        elif part.server_tool_call is not None:
            self._line(author, format_server_tool_call(part.server_tool_call))

    def finish(self) -> None:
        self._close_line()
        self._out.flush()


def print_events(events: Iterable[Event], out: TextIO) -> None:
    """Print ``events`` as ``adk-mesh run`` does."""
    printer = EventPrinter(out)
    for event in events:
        printer.print(event)
    printer.finish()


def _described(label: str, description: str, indent: str) -> str:
    """``label: description``, the description whole: a docstring's lines after the first are
    dedented and then indented by ``indent``, under the label."""
    if not description.strip():
        return label
    first, *rest = (line.rstrip() for line in inspect.cleandoc(description).splitlines())
    return "\n".join([f"{label}: {first}", *(indent + line if line else "" for line in rest)])


def format_card(card: agent_pb2.AgentCard) -> str:
    """The text ``adk-mesh describe`` prints for an AgentCard."""
    lines = [f"{card.name} ({card.agent_type or 'agent'})"]
    if card.app_name:
        lines.append(f"  app: {card.app_name}")
    if card.description.strip():
        lines.append(_described("  description", card.description, "    "))
    lines.append(f"  streaming: {'yes' if card.supports_streaming else 'no'}")
    lines.append("  sub-agents:" if card.sub_agents else "  sub-agents: none")
    for sub in card.sub_agents:
        lines.append(_described(f"    - {sub.name}", sub.description, "      "))
    lines.append("  tools:" if card.tools else "  tools: none")
    for tool in card.tools:
        lines.append(_described(f"    - {tool.name}", tool.description, "      "))
    return "\n".join(lines) + "\n"


#: What gRPC says when no TLS setting could have helped: nothing listens, or the name does
#: not resolve.
_NOT_TLS_FAILURES = ("connection refused", "resolving", "dns resolution")


def _client_error_line(error: AdkError) -> str:
    """An error line of run/describe, with a hint when plaintext met what may be a TLS port."""
    from adk_mesh.errors import AdkIOError
    from adk_mesh.mesh.security import ClientTLS

    line = _error_line(error)
    if (
        isinstance(error, AdkIOError)
        and ClientTLS.from_env() is None
        and not any(failure in error.message.lower() for failure in _NOT_TLS_FAILURES)
    ):
        line += (
            "\n(if the service serves TLS, set ADK_MESH_TLS_CA to its CA — "
            ".adk-mesh/pki/ca.pem for the mesh of adk-mesh up)"
        )
    return line


def _error_line(error: BaseException) -> str:
    if isinstance(error, AdkError):
        return f"error: {type(error).__name__}: {error.message}"
    return f"error: {type(error).__name__}: {error}"


# --- commands ------------------------------------------------------------------------------


def _console_logging(level: str) -> None:
    """Log lines on stderr, each written inside an invocation with its invocation, trace and
    span ids. Left alone when the process's logging is configured already (by
    ``opentelemetry-instrument``'s log correlation, say)."""
    from adk_mesh.telemetry import InvocationLogFormatter

    root = logging.getLogger()
    root.setLevel(level.upper())
    if any(isinstance(handler, logging.StreamHandler) for handler in root.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(InvocationLogFormatter())
    root.addHandler(handler)


def _serve(args: argparse.Namespace) -> int:
    from adk_mesh.mesh import AgentServer, ServerLimits
    from adk_mesh.mesh._channel import MeshServer
    from adk_mesh.mesh._loader import load_agent
    from adk_mesh.mesh.security import server_security_from_arguments
    from adk_mesh.mesh.serve import BindError, describe_server, serve_until_signal
    from adk_mesh.telemetry import configure_telemetry

    _console_logging(args.log_level)
    if ":" in args.host and not args.host.startswith("["):
        # An IPv6 literal (``::1``, ``::``): gRPC would read ``::1:50051`` as a host name. Set
        # on ``args``, so the A2A and MCP ports bind the same host.
        args.host = f"[{args.host}]"
    address = f"{args.host}:{args.port}"
    try:
        security = server_security_from_arguments(args)
        limits = ServerLimits(
            max_llm_calls=args.max_llm_calls,
            max_delegation_depth=args.max_delegation_depth,
            tool_timeout=args.tool_timeout,
        )
        server: MeshServer
        if args.kind == "agent":
            agent = load_agent(args.reference)
            a2a_server, a2a_options = _a2a_options(args)
            server = (a2a_server or AgentServer)(
                agent,
                app_name=args.app,
                session_service=args.store or DEFAULT_STORE,  # "" in the environment: unset
                artifact_service=args.artifacts or None,
                memory_service=args.memory or None,
                limits=limits,
                max_artifact_bytes=args.max_artifact_bytes,
                max_artifact_bytes_in_flight=args.max_artifact_bytes_in_flight,
                **a2a_options,
            )
        else:
            server = _tool_server(
                args.reference,
                limits,
                max_artifact_bytes=args.max_artifact_bytes,
                max_artifact_bytes_in_flight=args.max_artifact_bytes_in_flight,
            )
        if args.plugin:
            _use_plugins(server, args.plugin)
        if args.credentials:
            from adk_mesh.credentials import credential_service_from_spec

            # Read by the server from its start on (its tools ask it at each call).
            server.credential_service = credential_service_from_spec(  # type: ignore[attr-defined]
                args.credentials
            )
        # Before the gRPC server starts and before any RemoteAgent or RemoteToolset opens its
        # (lazy) channel: the tracing interceptors are installed only if tracing is on then.
        # service.name is the agent's or toolset's name unless OTEL_SERVICE_NAME says otherwise.
        telemetry = configure_telemetry(describe_server(server)[1])
    except ConfigError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 2
    try:
        asyncio.run(
            serve_until_signal(
                server,
                address,
                grace=args.grace,
                security=security,
                mesh_port=args.mesh_port,
                max_concurrent_calls=args.max_concurrent_calls,
                max_connection_age=args.max_connection_age or None,
                mcp_port=getattr(args, "mcp_port", None),
            )
        )
    except (BindError, ConfigError) as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 2
    except AdkError as error:
        print(_error_line(error), file=sys.stderr)
        return 1
    finally:
        # After the drain: the spans of the last calls are exported before the process exits.
        telemetry.shutdown()
    return 0


def _tool_server(reference: str, limits: Any, **options: Any) -> Any:
    """The ToolServer of ``serve tools``: the tools ``reference`` names, and beside them the
    MCP toolsets ``ADK_MESH_MCP_TOOLSETS`` names (``adk-mesh up`` sets it from the service's
    ``[services.<name>.mcp.<toolset>]`` tables)."""
    from adk_mesh.mesh import ToolServer
    from adk_mesh.mesh._loader import load_tools
    from adk_mesh.tools import Toolset
    from adk_mesh.tools.mcp import mcp_toolsets_from_env

    tools = load_tools(reference)
    fronted = mcp_toolsets_from_env()
    if not fronted:
        return ToolServer(tools, limits=limits, **options)
    if isinstance(tools, Toolset):
        return ToolServer([tools, *fronted], name=tools.name, limits=limits, **options)
    return ToolServer([*tools, *fronted], limits=limits, **options)


def _a2a_options(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The server class of ``serve agent`` (``None``: AgentServer) and its A2A arguments: with
    ``--a2a-port``, an :class:`~adk_mesh.mesh.a2a_server.A2aAgentServer` that prints its A2A
    line before the ready line.

    Raises:
        ConfigError: ``--a2a-port`` without the a2a extra installed, or ``--a2a-url`` or
            ``--a2a-max-tasks`` without it.
    """
    if args.a2a_port is None:
        if args.a2a_url:
            raise ConfigError("--a2a-url goes with --a2a-port")
        if args.a2a_max_tasks is not None:
            raise ConfigError("--a2a-max-tasks goes with --a2a-port")
        return None, {}
    try:
        from adk_mesh.mesh.a2a_server import A2aAgentServer
    except ImportError as error:
        raise ConfigError(f"--a2a-port needs {error.name}: pip install 'adk-mesh[a2a]'") from None
    options: dict[str, Any] = {
        "a2a_address": f"{args.host}:{args.a2a_port}",
        "public_url": args.a2a_url or None,
        "announce": lambda line: print(line, flush=True),
    }
    if args.a2a_max_tasks is not None:
        if args.a2a_max_tasks < 1:
            raise ConfigError(f"--a2a-max-tasks must be at least 1, not {args.a2a_max_tasks}")
        options["max_tasks"] = args.a2a_max_tasks
    return A2aAgentServer, options


def _use_plugins(server: Any, references: list[str]) -> None:
    """Give ``server`` (not started yet: it reads them from then on) the plugins
    ``--plugin MODULE:ATTR`` names, in order: each a Plugin, a Plugin class (made with no
    arguments), a list of them, or a zero-argument function that returns one of these."""
    from adk_mesh.mesh import AgentServer, ToolServer
    from adk_mesh.mesh._loader import load_object
    from adk_mesh.plugins import Plugin
    from adk_mesh.plugins._manager import plugin_manager

    def as_plugins(reference: str, value: Any, *, call: bool = True) -> list[Plugin]:
        if isinstance(value, Plugin):
            return [value]
        if isinstance(value, type) and issubclass(value, Plugin):
            try:
                return [value()]
            except ConfigError:
                raise
            except Exception as error:  # a constructor that needs arguments, say
                raise ConfigError(
                    f"making the plugin {reference} raised {type(error).__name__}: {error}"
                ) from error
        if isinstance(value, list | tuple) and all(isinstance(v, Plugin) for v in value):
            return list(value)
        if call and inspect.iscoroutinefunction(value):
            # Called, it would only make a coroutine, never awaited.
            raise ConfigError(
                f"--plugin {reference} is an async function; name a plain (def) function that "
                "returns the plugins, or the plugins themselves"
            )
        if call and callable(value) and not isinstance(value, type):
            try:
                built = value()
            except ConfigError:
                raise
            except Exception as error:
                raise ConfigError(
                    f"calling {reference}() to build plugins raised {type(error).__name__}: {error}"
                ) from error
            return as_plugins(reference, built, call=False)
        raise ConfigError(
            f"--plugin {reference} is {type(value).__name__}, not a plugin; name an "
            "adk_mesh.plugins.Plugin, a Plugin class, a list of them or a function that "
            "returns one"
        )

    plugins = [p for reference in references for p in as_plugins(reference, load_object(reference))]
    assert isinstance(server, AgentServer | ToolServer)
    server.plugins = plugin_manager(plugins)


async def _stream_run(args: argparse.Namespace, out: TextIO) -> None:
    from adk_mesh.mesh._channel import open_channel

    credentials = _credentials(args)
    user = args.user if args.user is not None else ("" if credentials else "user")
    request = agent_pb2.RunRequest(
        root=agent_pb2.RootRun(
            app_name=args.app or "",
            user_id=user,
            session_id=args.session or "",
            new_message=content_pb2.Content(
                role="user", parts=[content_pb2.Part(text=args.message)]
            ),
        ),
        agent_name=args.agent or "",
    )
    if args.stream:
        request.run_config.streaming_mode = agent_pb2.STREAMING_MODE_SSE
    printer = EventPrinter(out)
    async with open_channel(args.target) as channel:
        call = agent_pb2_grpc.AgentServiceStub(channel).Run(request, metadata=credentials)
        try:
            async for response in _responses(call, named=bool(args.session)):
                if response is None:
                    # gRPC hands over None for bytes that do not parse: say so, read on.
                    _warn("skipped a response from the service that does not parse")
                    continue
                if args.json:
                    out.write(json_format.MessageToJson(response, indent=None) + "\n")
                    out.flush()
                    continue
                try:
                    events = codec.run_response_events(response)
                except AdkError as error:
                    _warn(f"skipped an event that cannot be read: {error.message}")
                    events = []
                if response.session_id:
                    invocation_id = events[0].invocation_id if events else ""
                    printer.header(response.session_id, invocation_id)
                for event in events:
                    printer.print(event)
        finally:
            call.cancel()
            printer.finish()


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)


async def _responses(
    call: Any, *, named: bool = False
) -> AsyncIterator[agent_pb2.RunResponse | None]:
    """The call's responses; ``named``: the request named its session (the user knows it)."""
    from adk_mesh.mesh._status import error_from_rpc_error, session_id_in

    try:
        async for response in call:
            named = named or (response is not None and bool(response.session_id))
            yield response
    except grpc.RpcError as error:
        # A turn that failed before its first response may have stored the user's message in
        # a session it created: the trailers name it, passed on as that response would have
        # (a session the request named is not repeated).
        trailers = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
        session_id = "" if named else session_id_in(trailers)
        if session_id:
            yield agent_pb2.RunResponse(session_id=session_id)
        raise error_from_rpc_error(error) from error


def _run(args: argparse.Namespace) -> int:
    if not args.message:
        print("error: the message is empty; say something", file=sys.stderr)
        return 2
    if not _client_settings_usable(args):
        return 2
    try:
        asyncio.run(_stream_run(args, sys.stdout))
    except AdkError as error:
        print(_client_error_line(error), file=sys.stderr)
        return 1
    return 0


def _client_settings_usable(args: argparse.Namespace) -> bool:
    """Whether the credentials and the TLS files of run/describe can be used, else an error
    line (the caller exits 2): a missing or half-written file, a value no header can carry,
    are this machine's settings to fix, not a failed call."""
    from adk_mesh.mesh.security import ClientTLS

    try:
        _check_target(args.target)
        _credentials(args)
        tls = ClientTLS.from_env()
        if tls is not None:
            tls.credentials()  # reads and checks the files, naming the one that is wrong
    except ConfigError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return False
    return True


def _check_target(target: str) -> None:
    """Refuse a target whose port is out of range.

    Raises:
        ConfigError: ``host:99999``, which gRPC would take modulo 65536 and call another
            port (34463) in its place.
    """
    port = target.rpartition(":")[2]
    if port.isascii() and port.isdigit() and int(port) > 65535:
        raise ConfigError(f"the target {target!r} names port {port}; a port is 0 to 65535")


def _secret(given: str | None, option: str, variable: str) -> str:
    """The value of ``option``, else of the environment ``variable``, trimmed.

    Raises:
        ConfigError: it holds what a gRPC header cannot carry (gRPC would refuse the call with
            "Invalid metadata" only); the value is not shown, it is a secret.
    """
    value, source = (given, option) if given else (os.environ.get(variable, ""), variable)
    value = value.strip()
    if not all(" " <= character <= "~" for character in value):
        raise ConfigError(
            f"{source} holds characters a request header cannot carry (a line break, a tab, "
            "a non-ASCII character); a token or key is printable ASCII"
        )
    return value


def _credentials(args: argparse.Namespace) -> tuple[tuple[str, str], ...]:
    """The call metadata that proves who the user is: ``--token`` / ``ADK_MESH_TOKEN`` as a
    bearer token, ``--api-key`` / ``ADK_MESH_API_KEY`` as an API key.

    Raises:
        ConfigError: a value a header cannot carry.
    """
    from adk_mesh.mesh.security import API_KEY_ENV, TOKEN_ENV

    token = _secret(args.token, "--token", TOKEN_ENV)
    api_key = _secret(args.api_key, "--api-key", API_KEY_ENV)
    metadata: list[tuple[str, str]] = []
    if token:
        metadata.append(("authorization", f"Bearer {token}"))
    if api_key:
        metadata.append(("x-api-key", api_key))
    return tuple(metadata)


async def _describe_card(
    target: str, agent_name: str, credentials: tuple[tuple[str, str], ...] = ()
) -> agent_pb2.AgentCard:
    from adk_mesh.mesh._channel import open_channel
    from adk_mesh.mesh._status import error_from_rpc_error

    async with open_channel(target) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        try:
            response = await stub.Describe(
                agent_pb2.DescribeRequest(agent_name=agent_name),
                timeout=30,
                metadata=credentials,
            )
        except grpc.RpcError as error:
            raise error_from_rpc_error(error) from error
    card: agent_pb2.AgentCard = response.card
    return card


def _describe(args: argparse.Namespace) -> int:
    if not _client_settings_usable(args):
        return 2
    try:
        card = asyncio.run(_describe_card(args.target, args.agent or "", _credentials(args)))
    except AdkError as error:
        print(_client_error_line(error), file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(json_format.MessageToJson(card, indent=None) + "\n")
    else:
        sys.stdout.write(format_card(card))
    return 0


def _up(arguments: Sequence[str]) -> int:
    try:
        module = importlib.import_module("adk_mesh.up")
    except ModuleNotFoundError as error:
        if error.name != "adk_mesh.up":
            raise
        print(
            "error: `adk-mesh up` is not available in this installation (module adk_mesh.up "
            "is missing)",
            file=sys.stderr,
        )
        return 2
    code: int = module.main(list(arguments))
    return code


def _gateway(arguments: Sequence[str]) -> int:
    """``adk-mesh gateway ...``: the HTTP gateway (the top-level ``gateway`` package)."""
    try:
        module = importlib.import_module("gateway.cli")
    except ModuleNotFoundError as error:
        if error.name not in ("gateway", "gateway.cli"):
            raise
        print("error: `adk-mesh gateway` is not in this installation", file=sys.stderr)
        return 2
    code: int = module.main(list(arguments))
    return code


# --- parser --------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """A usage mistake is one ``error:`` line, as every other error of the command is."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message}; see {self.prog} --help\n")


def _artifact_bytes_argument(text: str) -> int:
    """``--max-artifact-bytes``' value (argparse ``type``): a bad one is the flag's usage error,
    naming it, before the agent is loaded; the bounds are the session API's own."""
    from adk_mesh.mesh._artifact_budget import MAX_ARTIFACT_BYTES_LIMIT

    bounds = (
        f"must be a whole number of bytes, 1 to {MAX_ARTIFACT_BYTES_LIMIT} (the most a "
        "PostgreSQL artifact store holds)"
    )
    try:
        size = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{bounds}, not {text!r}") from None
    if not 1 <= size <= MAX_ARTIFACT_BYTES_LIMIT:
        raise argparse.ArgumentTypeError(f"{bounds}, not {size}")
    return size


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="adk-mesh", description="Run ADK agents and tools as a gRPC mesh.")
    parser.add_argument("--version", action="version", version=f"adk-mesh {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = commands.add_parser("serve", help="serve an agent or tools over gRPC")
    kinds = serve.add_subparsers(dest="kind", metavar="KIND", required=True)
    agent = kinds.add_parser("agent", help="serve an agent (and its sub-agents)")
    agent.add_argument("reference", metavar="MODULE:ATTR", help="a BaseAgent, or a factory")
    tools = kinds.add_parser("tools", help="serve tools or a Toolset")
    tools.add_argument(
        "reference", metavar="MODULE:ATTR", help="tools/functions, a Toolset, or a factory"
    )
    from adk_mesh.mesh import ServerLimits
    from adk_mesh.mesh._artifact_budget import DEFAULT_MAX_ARTIFACT_BYTES, IN_FLIGHT_ARTIFACTS
    from adk_mesh.mesh._channel import DEFAULT_MAX_CONCURRENT_CALLS, DEFAULT_MAX_CONNECTION_AGE
    from adk_mesh.mesh.security import (
        add_server_security_arguments,
        grace_default,
        port_argument,
        seconds_argument,
    )

    defaults = ServerLimits()
    for sub in (agent, tools):
        add_server_security_arguments(sub)
        sub.add_argument(
            "--plugin",
            action="append",
            default=[],
            metavar="MODULE:ATTR",
            help="a plugin (adk_mesh.plugins.Plugin, a Plugin class, a list or a factory) for "
            "the work this service does; repeat for several, run in that order",
        )
        sub.add_argument(
            "--credentials",
            metavar="env|env:PREFIX|file:DIR",
            help="where tools get credentials by name (tool_context.get_credential): env, the "
            "variables ADK_MESH_CREDENTIAL_<NAME>; file:DIR, one file per name in DIR, readable "
            "by this user only (a Kubernetes Secret volume with defaultMode: 0400)",
        )
        limits = sub.add_argument_group("limits (a caller may lower them, never raise them)")
        limits.add_argument(
            "--max-llm-calls",
            type=int,
            default=defaults.max_llm_calls,
            metavar="N",
            help=f"model calls per invocation (default {defaults.max_llm_calls})",
        )
        limits.add_argument(
            "--max-delegation-depth",
            type=int,
            default=defaults.max_delegation_depth,
            metavar="N",
            help=f"nested delegations (default {defaults.max_delegation_depth})",
        )
        limits.add_argument(
            "--tool-timeout",
            type=float,
            default=defaults.tool_timeout,
            metavar="SECONDS",
            help=f"one tool call (default {defaults.tool_timeout:g})",
        )
        limits.add_argument(
            "--max-concurrent-calls",
            type=int,
            default=DEFAULT_MAX_CONCURRENT_CALLS,
            metavar="N",
            help=f"calls served at once, then RESOURCE_EXHAUSTED (default "
            f"{DEFAULT_MAX_CONCURRENT_CALLS})",
        )
        limits.add_argument(
            "--max-connection-age",
            type=float,
            default=DEFAULT_MAX_CONNECTION_AGE,
            metavar="SECONDS",
            help=f"a client connection is asked to reconnect after this long, so callers find "
            f"new replicas; running calls go on (default {DEFAULT_MAX_CONNECTION_AGE:g}; 0: never)",
        )
        limits.add_argument(
            "--max-artifact-bytes",
            type=_artifact_bytes_argument,
            default=DEFAULT_MAX_ARTIFACT_BYTES,
            metavar="N",
            help="the largest artifact taken in one piece, in bytes: an agent's session API "
            "stores from one SaveArtifactStream, and its delegated runs or a tool service's "
            f"tools load from their callers in chunks (default {DEFAULT_MAX_ARTIFACT_BYTES}); "
            "over it a save is INVALID_ARGUMENT, a load an ArtifactError",
        )
        limits.add_argument(
            "--max-artifact-bytes-in-flight",
            type=_artifact_bytes_argument,
            default=None,
            metavar="N",
            help="the artifact bytes such transfers hold at once, together (default "
            f"{IN_FLIGHT_ARTIFACTS} x --max-artifact-bytes; at least that); one that does not "
            "fit is RESOURCE_EXHAUSTED (ArtifactsBusyError: retry later)",
        )
        sub.add_argument(
            "--port", type=port_argument, required=True, help="port (0: any free port)"
        )
        sub.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
        sub.add_argument(
            "--grace",
            type=seconds_argument,
            default=grace_default(10.0),
            help="seconds running calls get on SIGTERM (default $ADK_MESH_GRACE, which "
            "`adk-mesh up` sets to the mesh's grace, else 10)",
        )
        sub.add_argument(
            "--log-level",
            default="warning",
            choices=["debug", "info", "warning", "error"],
            help="console log level (default warning); each line written inside an invocation "
            "names its invocation, trace and span",
        )
    tools.add_argument(
        "--mcp-port",
        type=port_argument,
        metavar="PORT",
        help="also serve the tools as a streamable-HTTP MCP server on this port of --host, at "
        "/mcp (0: any free port); TLS and authentication as the gRPC port's; beyond loopback "
        "it needs --auth-jwks or --auth-api-keys",
    )
    agent.add_argument("--app", help="app name of root runs (default: the agent's name)")
    agent.add_argument(
        "--a2a-port",
        type=port_argument,
        metavar="PORT",
        help="also serve the agent as an A2A agent: its card and JSON-RPC on this port of "
        "--host (0: any free port), the A2A gRPC binding on --port; TLS and authentication as "
        "the gRPC port's (needs the a2a extra)",
    )
    agent.add_argument(
        "--a2a-url",
        metavar="URL",
        help="the base URL A2A clients reach --a2a-port at, for the agent card (default: "
        "http(s)://HOST:PORT/)",
    )
    agent.add_argument(
        "--a2a-max-tasks",
        type=int,
        metavar="N",
        help="A2A tasks kept in memory (default 10000); past it the least recently used ended "
        "task goes first",
    )
    agent.add_argument(
        "--store",
        default=os.environ.get(STORE_ENV["sessions"]),
        help=f"session store URL (default ${STORE_ENV['sessions']}, else {DEFAULT_STORE}; "
        "e.g. sqlite:///sessions.db, postgresql://...)",
    )
    agent.add_argument(
        "--artifacts",
        default=os.environ.get(STORE_ENV["artifacts"]),
        help=f"artifact store URL (default ${STORE_ENV['artifacts']}, else none; memory://, "
        "file:///dir, postgresql://...)",
    )
    agent.add_argument(
        "--memory",
        default=os.environ.get(STORE_ENV["memory"]),
        help=f"memory store URL (default ${STORE_ENV['memory']}, else none): each finished "
        "turn is added to it, and the load_memory/preload_memory tools search it (memory://, "
        "sqlite:///memory.db, postgresql://...)",
    )

    run = commands.add_parser("run", help="run one user turn on an agent service")
    run.add_argument("target", metavar="TARGET", help="host:port or dns:///host:port")
    run.add_argument("message", help="the user's message")
    run.add_argument("--user", help="user id (default: user; with credentials, the one they prove)")
    run.add_argument("--session", help="session id (default: a new session)")
    run.add_argument("--app", help="app name (default: the service's)")
    run.add_argument("--agent", help="agent of the served tree (default: its root)")
    run.add_argument("--stream", action="store_true", help="ask for streamed (partial) text")
    run.add_argument("--json", action="store_true", help="print one proto-JSON line per response")

    _client_arguments(run)
    describe = commands.add_parser("describe", help="print an agent service's AgentCard")
    describe.add_argument("target", metavar="TARGET", help="host:port or dns:///host:port")
    describe.add_argument("--agent", help="agent of the served tree (default: its root)")
    describe.add_argument("--json", action="store_true", help="print the card as proto-JSON")
    _client_arguments(describe)

    api_key = commands.add_parser(
        "api-key",
        help="make an API key for a user: prints the key, and the line for --auth-api-keys",
    )
    api_key.add_argument("user", help="the user id the key stands for")

    _migrate_arguments(commands)
    gateway = commands.add_parser(
        "gateway",
        help="serve google-adk's REST and SSE API (and the web UI) over the mesh",
        add_help=False,
    )
    gateway.add_argument("arguments", nargs=argparse.REMAINDER, help="passed to adk-mesh gateway")
    up = commands.add_parser("up", help="start a whole mesh from a config file", add_help=False)
    up.add_argument("arguments", nargs=argparse.REMAINDER, help="passed to adk-mesh up")
    return parser


def _migrate_arguments(commands: Any) -> None:
    from adk_mesh._migrations import STORES

    migrate = commands.add_parser(
        "migrate",
        help="create or upgrade the schema of PostgreSQL and SQLite stores",
        description="Create or upgrade store schemas. A postgresql:// URL migrates the "
        "sessions, artifacts and memory stores in its database (or those named by --store), "
        "each in one transaction under an advisory lock; a sqlite:/// URL names a file "
        "holding sessions (default) or memory. Prints each store's schema version.",
    )
    migrate.add_argument(
        "urls",
        nargs="*",
        metavar="STORE_URL",
        help="a store URL (default: those of $ADK_MESH_SESSIONS, $ADK_MESH_ARTIFACTS and "
        "$ADK_MESH_MEMORY, each for its store)",
    )
    migrate.add_argument(
        "--store",
        dest="stores",
        action="append",
        choices=STORES,
        default=[],
        help="only this store (repeatable; default: all three for PostgreSQL, sessions for SQLite)",
    )


def _migrate(args: argparse.Namespace) -> int:
    from adk_mesh._migrations import migrate_url
    from adk_mesh._store_urls import redact_url

    targets = [(url, args.stores) for url in args.urls]
    if not targets:
        # From the environment, each URL for its own store (one URL in several: once, for all).
        by_url: dict[str, list[str]] = {}
        for store, name in STORE_ENV.items():
            url = os.environ.get(name, "").strip()
            scheme = url.partition(":")[0].lower()
            # memory://, file: and SQLite artifacts (there are none) have no schema to migrate.
            has_schema = scheme in ("postgres", "postgresql") or (
                scheme == "sqlite" and store != "artifacts"
            )
            if has_schema and (not args.stores or store in args.stores):
                by_url.setdefault(url, []).append(store)
        targets = list(by_url.items())
        if not targets:
            names = ", ".join(f"${name}" for name in STORE_ENV.values())
            print(
                f"error: no store URL given, and none of {names} names a store with a schema",
                file=sys.stderr,
            )
            return 2
    for url, stores in targets:
        try:
            versions = asyncio.run(migrate_url(url, stores))
        except ConfigError as error:
            print(f"error: {error.message}", file=sys.stderr)
            return 2
        except AdkError as error:
            print(_error_line(error), file=sys.stderr)
            return 1
        for store, version in versions:
            print(f"{redact_url(url)}: {store} at schema version {version}")
    return 0


def _api_key(args: argparse.Namespace) -> int:
    from adk_mesh.mesh.auth import new_api_key

    key, line = new_api_key(args.user)
    print(f"key (give it to {args.user}; it is not stored anywhere): {key}")
    print(f"line for the --auth-api-keys file: {line}")
    return 0


def _client_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "credentials and TLS",
        "TLS follows ADK_MESH_TLS_CA (and ADK_MESH_TLS_CERT / ADK_MESH_TLS_KEY for mutual TLS)",
    )
    group.add_argument("--token", help="bearer token of the user (default: $ADK_MESH_TOKEN)")
    group.add_argument("--api-key", help="API key of the user (default: $ADK_MESH_API_KEY)")


def main(argv: Sequence[str] | None = None) -> int:
    """``adk-mesh ...``; the exit code."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        # An output in a legacy encoding (a cp1252 file, PYTHONIOENCODING=ascii) cannot hold
        # "→" or "·", nor every model's text: escaped, the answer still shows.
        sys.stdout.reconfigure(errors="backslashreplace")
    try:
        code = _main(argv)
        # A reader that went away is noticed here rather than by the flush at interpreter exit.
        sys.stdout.flush()
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        # Ctrl-C before a command's own handling of it (building the parser imports the mesh;
        # `up` and `gateway` read their config first): an interrupt, not a traceback.
        return 130
    return code


def _discard_stdout() -> None:
    """Point stdout at devnull, as the Python docs advise for a broken pipe: what is still
    buffered is then dropped at exit instead of failing a second time."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (captured in a test): nothing will be flushed to a pipe
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, descriptor)
    finally:
        os.close(devnull)


def _main(argv: Sequence[str] | None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["up"]:
        # Everything after `up` belongs to it, options included.
        return _up(arguments[1:])
    if arguments[:1] == ["gateway"]:
        return _gateway(arguments[1:])
    parser = build_parser()
    args = parser.parse_args(arguments)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "run":
            return _run(args)
        if args.command == "describe":
            return _describe(args)
        if args.command == "api-key":
            return _api_key(args)
        if args.command == "migrate":
            return _migrate(args)
    except KeyboardInterrupt:
        return 130
    parser.print_help(sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
