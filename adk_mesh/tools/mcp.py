"""McpToolset: the tools of a Model Context Protocol server, as a Toolset.

Built on the official ``mcp`` SDK (``pip install 'adk-mesh[mcp]'``), which is imported when a
toolset first connects, never by ``import adk_mesh``. Two transports::

    McpToolset(command="npx", args=["-y", "@modelcontextprotocol/server-everything"])  # stdio
    McpToolset(url="https://tools.example.com/mcp", headers={"Authorization": "Bearer ..."})

Use it as any toolset: in an agent (``LlmAgent(tools=[McpToolset(...)])``) or behind a
:class:`~adk_mesh.mesh.ToolServer`, so that one tool service fronts MCP servers for the
whole mesh.

**One session, kept open.** The first listing or call connects (the SDK negotiates the
protocol era: ``server/discover`` of 2026-07-28, else the ``initialize`` handshake) and the
session stays open for every later call, from any task, until :meth:`McpToolset.close`.
:meth:`McpToolset.warm_up` connects and lists ahead of the first caller: a ToolServer or an
AgentServer calls it before it serves (``adk-mesh serve`` does), so no user's turn waits for
a server to start (an ``npx`` server may take ten seconds and more). It is
owned by a task of its own, because the SDK's transports are anyio task groups that one task
must enter and leave. A session is bound to the event loop that opened it: used from another
loop, the toolset opens a new one there.

**The listing** is kept and asked again only when the server says its tools changed (the
``notifications/tools/list_changed`` of the handshake era, or a ``subscriptions/listen``
stream of the 2026-07-28 era, opened when the server offers it) and after a reconnection.
A tool whose name some model provider refuses (other characters than letters, digits, ``_``
and ``-``, or over 64) is offered under one that fits (``files.read``: ``files_read``); the
server is still called by its own name (``tool_filter`` names the server's tools too).

**Calls.** Progress notifications of a call become the tool's progress
(:meth:`~adk_mesh.contexts.ToolContext.report_progress`: the message, ``fraction`` =
progress / total when the server gives a total, and ``{"progress", "total"}`` as data). A result
with ``structuredContent`` returns that object; otherwise its content as text in
``{"result": ...}`` (images, audio and binary resources are described, not passed on). Every
failure is a :class:`~adk_mesh.errors.ToolError` whose message the model reads: an ``isError``
result (its text), a protocol error (the server's message), a server that cannot be reached
or that died during the call, and a result larger than ``max_result_bytes``. A call is never
retried (it may have had effects); after a dead session the next listing or call connects
again, starting a stdio server anew.

**Result size.** ``max_result_bytes`` (default 32 MiB, the mesh's gRPC message cap) bounds a
result as the server sends it: the JSON of its content blocks and ``structuredContent`` (a
server that sends the result both ways, as adk-mesh's own McpServer does, uses twice its
size). Over HTTP it is the SDK's limit on one server-sent event, so a larger streamed answer is
never buffered whole; a plain JSON answer (and a stdio line) is measured once received. A
result over it is a ToolError the model reads, and the session stays open.

**Secrets in the URL.** A server's URL may carry a key (``?api_key=...``, ``user:password@``):
it is used as given to connect, and shown everywhere else (the default name, logs, errors,
hence spans and what a ToolServer tells its callers) with the password and the values of
query parameters whose names look like secrets (``api_key``, ``token``, ``accessToken``,
``password``, ... as span attributes judge keys; and a pre-signed URL's ``X-Amz-Signature``,
``sig``, ..., OAuth's ``code``) replaced by ``[redacted]``; those values are also taken out
of the errors the HTTP client and the server give. A stdio server's command line is shown
(in logs) with the same care: the value after a secret-looking flag (``--api-key X``), of
``--token=X``, of a header argument (``Authorization: Bearer X``) and a URL argument's secrets
are ``[redacted]``; its ``env`` is never shown. The values of secret-looking ``headers``
(``Authorization``, ``x-api-key``, ...) are taken out of errors too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import ssl
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adk_mesh._env_tables import tables_from_env
from adk_mesh._tool_names import PORTABLE_NAME, fitted_name
from adk_mesh._version import __version__
from adk_mesh.credentials import KnownSecrets
from adk_mesh.credentials._redaction import (
    add_header_secrets,
    redact_http_logs,
    shown_arguments,
    shown_url,
)
from adk_mesh.errors import AdkIOError, ConfigError, ToolError
from adk_mesh.tools.base import BaseTool, Toolset
from adk_mesh.tools.function_tool import _model_friendly
from adk_mesh.types import ToolDeclaration

if TYPE_CHECKING:
    from mcp import Client
    from mcp.client.session import IncomingMessage, MessageHandlerFnT
    from mcp.types import CallToolResult, Tool

    from adk_mesh.contexts import ReadonlyContext, ToolContext

__all__ = ["MCP_TOOLSETS_ENV", "McpTool", "McpToolset", "mcp_toolsets_from_env"]

logger = logging.getLogger("adk_mesh.tools.mcp")

#: Where ``adk-mesh up`` puts the MCP toolsets ``mesh.toml`` declares for a service: a JSON
#: object of toolset name to its server (see :func:`mcp_toolsets_from_env`).
MCP_TOOLSETS_ENV = "ADK_MESH_MCP_TOOLSETS"

#: Seconds to start or reach a server and finish the protocol's opening exchange.
DEFAULT_CONNECT_TIMEOUT = 30.0
#: Seconds one tools/list page may take.
DEFAULT_LIST_TIMEOUT = 30.0
#: Pages of one tools/list walk at most: a server whose cursor never ends cannot hang a listing.
MAX_LIST_PAGES = 100

#: The largest result a toolset takes by default (``max_result_bytes``): the mesh's gRPC
#: message cap, ``adk_mesh.mesh._channel.MAX_MESSAGE_BYTES`` (a test pins them equal), so a
#: result that arrives can also cross the mesh. Not imported from there: ``adk_mesh.tools``
#: imports this module, and importing ``adk_mesh.mesh`` here would load grpc and the whole mesh
#: package with it (and import it in a cycle).
DEFAULT_MAX_RESULT_BYTES = 32 * 1024 * 1024

#: How the SDK says an SSE event was over its ``max_sse_event_size`` (it gives the failed
#: request a CONNECTION_CLOSED error whose message only holds this text).
_EVENT_TOO_LARGE = re.compile(r"exceeded the \d+ byte limit")

#: The header of a streamable-HTTP session's id (HTTP headers are case-insensitive).
_SESSION_ID_HEADER = "mcp-session-id"

_CONFIG_KEYS = frozenset(
    {"command", "args", "env", "cwd", "url", "headers", "tools", "max_result_bytes"}
)


class McpToolset(Toolset):
    """The tools of one MCP server (see the module docstring for sessions, listings and calls).

    Give either ``command`` (a stdio server: a subprocess this toolset starts and stops) or
    ``url`` (a streamable-HTTP server).

    Args:
        command: the program of a stdio server (``"npx"``, ``sys.executable``, ...).
        args: its arguments.
        env: environment of the stdio server, over the SDK's safe default (``HOME``, ``PATH``,
            ``USER``, ... — not this process's whole environment, so secrets are passed on
            only when named here).
        cwd: working directory of the stdio server.
        url: the endpoint of a streamable-HTTP server (``http://127.0.0.1:8000/mcp``); its
            secrets are shown nowhere (see the module docstring).
        headers: HTTP headers of every request (an ``Authorization`` bearer token, an API key).
        ca_file: a PEM CA bundle to verify an ``https://`` server with (default: the system's).
        tool_filter: names of the server's tools to offer (default: all of them).
        name: this toolset's name (default: ``mcp:<command or url>``, the url without its
            secrets).
        connect_timeout: seconds to start or reach the server and open the session.
        list_timeout: seconds one ``tools/list`` page may take.
        max_result_bytes: the largest result a call may return, as the server sends it (see
            the module docstring); a larger one is a ToolError the model reads.

    Raises:
        ConfigError: neither or both of ``command`` and ``url``; options of the other
            transport; a ``max_result_bytes`` below 1.
    """

    def __init__(
        self,
        *,
        command: str | None = None,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        ca_file: str | os.PathLike[str] | None = None,
        tool_filter: Collection[str] | None = None,
        name: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        list_timeout: float = DEFAULT_LIST_TIMEOUT,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        if (command is None) == (url is None):
            raise ConfigError("McpToolset needs either command (a stdio server) or url (HTTP)")
        # The URL (or the command line) as logs, errors and the name show it, and its
        # secrets, to take them out of what the HTTP client and the server say.
        self._shown_url: str | None = None
        self._secrets = KnownSecrets()
        if url is not None:
            self._shown_url = shown_url(url, self._secrets)
        self._shown_args = shown_arguments(args, self._secrets)
        add_header_secrets(headers or {}, self._secrets)
        if command is not None and (headers or ca_file is not None):
            raise ConfigError("headers and ca_file are for an HTTP server (url), not a command")
        if url is not None and (args or env or cwd is not None):
            raise ConfigError("args, env and cwd are for a stdio server (command), not a url")
        if url is not None and not url.startswith(("http://", "https://")):
            raise ConfigError(
                f"an MCP server url starts with http:// or https://, not {self._shown_url!r}"
            )
        if command is not None and not command.strip():
            raise ConfigError("the command of an MCP server is empty")
        if isinstance(tool_filter, str):
            raise ConfigError("tool_filter is a collection of tool names, not one string")
        if isinstance(max_result_bytes, bool) or not isinstance(max_result_bytes, int):
            raise ConfigError(f"max_result_bytes is a number of bytes, not {max_result_bytes!r}")
        if max_result_bytes < 1:
            raise ConfigError(f"max_result_bytes must be at least 1, not {max_result_bytes}")
        super().__init__(name or f"mcp:{command if command is not None else self._shown_url}")
        self.command = command
        self.args = tuple(args)
        self.env = dict(env or {})
        self.cwd = None if cwd is None else Path(cwd)
        self.url = url
        self.headers = dict(headers or {})
        self.ca_file = None if ca_file is None else Path(ca_file)
        self.tool_filter = None if tool_filter is None else frozenset(tool_filter)
        self.connect_timeout = connect_timeout
        self.list_timeout = list_timeout
        self.max_result_bytes = max_result_bytes
        self._session: _Session | None = None
        self._connecting: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        self._listing: list[BaseTool] | None = None
        # Bumped by each list-changed notification: a listing is current while it is the
        # count the listing started at.
        self._changes = 0
        self._listed_at_change = -1

    def __repr__(self) -> str:
        return f"McpToolset(name={self.name!r})"

    @property
    def _where(self) -> str:
        """The server, for this process's log (models and clients read the toolset's name)."""
        if self._shown_url is not None:
            return self._shown_url
        return " ".join([str(self.command), *self._shown_args])

    def _redacted(self, text: str) -> str:
        """``text`` (an error's, a server's message) without the secrets of the URL or of
        the command line."""
        return self._secrets.redact_text(text)

    def _reason(self, error: BaseException) -> str:
        """:func:`_reason` without the secrets of the URL (an HTTP error may name it)."""
        return self._redacted(_reason(error))

    # --- the listing ------------------------------------------------------------------------

    async def tools(self, ctx: ReadonlyContext) -> list[BaseTool]:
        """The server's tools (those of ``tool_filter``); the kept listing while the server
        announced no change. A server that cannot be reached: the last listing when there is
        one (its calls then fail as ToolErrors the model reads), else
        :class:`~adk_mesh.errors.AdkIOError`. The listing is the same for every caller:
        ``ctx`` is not read."""
        return await self._current_listing(offer_kept=True)

    async def warm_up(self) -> None:
        """Start or reach the server, open the session and list its tools now, as the first
        listing would (bounded by ``connect_timeout`` and ``list_timeout``): the first
        caller then gets the kept listing at once. Nothing to do while the session is open
        and the listing current.

        Raises:
            AdkIOError: the server cannot be started or reached, or its listing failed (as
                the first listing would raise it; also when an older listing is kept). A
                later listing tries again.
        """
        await self._current_listing(offer_kept=False, quiet=True)

    async def _current_listing(self, *, offer_kept: bool, quiet: bool = False) -> list[BaseTool]:
        """The listing, asked again when it is not current. ``offer_kept``: the last listing
        when the server cannot be reached. ``quiet``: a session that cannot be opened is not
        logged here; the caller reports the error it gets (a warm-up logs one line)."""
        session = self._session
        kept = self._listing
        if (
            kept is not None
            and self._listed_at_change == self._changes
            and session is not None
            and session.usable()
        ):
            return kept
        try:
            session = await self._open(quiet=quiet)
            changes = self._changes
            declared = await self._list(session)
        except AdkIOError as error:
            if kept is not None and offer_kept:
                logger.warning("MCP server %s: %s; offering its last listing", self._where, error)
                return kept
            raise
        offered = [
            tool for tool in declared if self.tool_filter is None or tool.name in self.tool_filter
        ]
        # MCP allows more than every provider takes (``.``, up to 128), and servers use more
        # still: such a tool is offered under a portable name. The names that fit are kept
        # first, so a fitted one never takes them.
        taken = {tool.name for tool in offered if PORTABLE_NAME.fullmatch(tool.name)}
        listing: list[BaseTool] = []
        for tool in offered:
            name = tool.name
            if not PORTABLE_NAME.fullmatch(name):
                name = fitted_name(name, taken)
                taken.add(name)
                logger.info(
                    "MCP server %s: its tool %r is offered to models as %r",
                    self._where,
                    tool.name,
                    name,
                )
            listing.append(McpTool(self, tool, name=name))
        self._listing, self._listed_at_change = listing, changes
        return listing

    async def _list(self, session: _Session) -> list[Tool]:
        from mcp import MCPError

        client = session.client
        found: list[Tool] = []
        cursor: str | None = None
        try:
            for _ in range(MAX_LIST_PAGES):
                async with asyncio.timeout(self.list_timeout):
                    page = await client.list_tools(cursor=cursor, cache_mode="bypass")
                found.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
        except MCPError as error:
            session.check(error)
            raise AdkIOError(
                f"{self.name}: tools/list failed: {self._redacted(error.error.message)}"
            ) from error
        except TimeoutError:
            raise AdkIOError(
                f"{self.name}: tools/list did not answer within {self.list_timeout:g} s"
            ) from None
        except Exception as error:
            session.check(error)
            raise AdkIOError(f"{self.name}: tools/list failed: {self._reason(error)}") from error
        return found

    def _listing_changed(self) -> None:
        self._changes += 1

    # --- the session ------------------------------------------------------------------------

    def _lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._connecting is None or self._lock_loop is not loop:
            self._connecting, self._lock_loop = asyncio.Lock(), loop
        return self._connecting

    async def _open(self, *, quiet: bool = False) -> _Session:
        """The open session, connecting first when there is none (or it died); ``quiet``: a
        failure to open it is the caller's to log."""
        session = self._session
        if session is not None and session.usable():
            return session
        async with self._lock():
            session = self._session
            if session is not None and session.usable():
                return session
            if session is not None:
                await session.close(same_loop_only=True)
            session = _Session(self, quiet=quiet)
            self._session = session
            try:
                await session.start(self.connect_timeout)
            except BaseException:
                self._session = None
                raise
            # Whatever the last session listed may have changed while nobody listened.
            self._changes += 1
            return session

    def _client(
        self, message_handler: MessageHandlerFnT, on_session_gone: Callable[[], None]
    ) -> Client:
        from mcp import Client, StdioServerParameters
        from mcp.types import Implementation

        target: Any
        if self.command is not None:
            target = StdioServerParameters(
                command=self.command,
                args=list(self.args),
                env=self.env or None,
                cwd=self.cwd,
            )
        else:
            assert self.url is not None
            target = self._http_transport(self.url, on_session_gone)
        return Client(
            target,
            message_handler=message_handler,
            client_info=Implementation(name="adk-mesh", version=__version__),
            # The toolset keeps its own listing and asks again on the server's word.
            cache=None,
        )

    def _http_transport(self, url: str, on_session_gone: Callable[[], None]) -> Any:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        # httpx2 and the SDK log the URL asked for: its secrets show redacted.
        redact_http_logs()
        client = create_mcp_http_client(headers=self.headers or None)
        if self.ca_file is not None:
            # The SDK's factory sets headers and timeouts; the verification is ours.
            context = ssl.create_default_context(cafile=str(self.ca_file))
            client = httpx2.AsyncClient(
                headers=self.headers or None, timeout=client.timeout, verify=context
            )

        async def session_gone(response: httpx2.Response) -> None:
            # MCP (streamable HTTP): a 404 to a request that carries an Mcp-Session-Id says
            # the server no longer knows the session (it restarted, or ended it idle), and
            # the client must open a new one. The SDK only turns it into the request's
            # error, so without this every later request would send the dead id again.
            if response.status_code == 404 and _SESSION_ID_HEADER in response.request.headers:
                on_session_gone()

        client.event_hooks["response"].append(session_gone)
        transport = streamable_http_client(
            url, http_client=client, max_sse_event_size=self.max_result_bytes
        )
        return _OwnedHttpTransport(transport, client)

    async def close(self) -> None:
        """End the session (a stdio server is stopped). Idempotent; a later listing or call
        connects again."""
        # Under the connecting lock: a session being opened right now (a listing a call
        # started) is the one closed, not one left behind once it finishes opening.
        try:
            async with self._lock():
                session, self._session = self._session, None
        except RuntimeError:  # pragma: no cover - no running loop: nothing can be opening
            session, self._session = self._session, None
        if session is not None:
            await session.close(same_loop_only=True)


@dataclass
class _OwnedHttpTransport:
    """The streamable-HTTP transport and the HTTP client it was given, closed together."""

    transport: Any
    http_client: Any
    _stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    async def __aenter__(self) -> Any:
        await self._stack.enter_async_context(self.http_client)
        return await self._stack.enter_async_context(self.transport)

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return await self._stack.__aexit__(*exc_info)


class _Session:
    """One open MCP session, held by a task of its own from open to close.

    The SDK's client is a stack of anyio task groups, which the task that entered them must
    leave: the owner task enters it, reports ready, and waits to be told to close. Requests go
    through the client from any task of the same loop.
    """

    def __init__(self, toolset: McpToolset, *, quiet: bool = False) -> None:
        self._toolset = toolset
        #: A failure to open is reported by whoever opened (a warm-up's one log line), not
        #: logged here as well.
        self._quiet = quiet
        self._loop = asyncio.get_running_loop()
        self._ready: asyncio.Future[None] = self._loop.create_future()
        self._closing = asyncio.Event()
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self.failure: BaseException | None = None

    @property
    def client(self) -> Client:
        assert self._client is not None
        return self._client

    def usable(self) -> bool:
        """Open, in this event loop, and not known to be dead."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover - always called from a coroutine
            return False
        return (
            loop is self._loop
            and self._client is not None
            and self.failure is None
            and self._task is not None
            and not self._task.done()
        )

    async def start(self, seconds: float) -> None:
        self._task = self._loop.create_task(self._own(), name=f"mcp session {self._toolset.name}")
        try:
            async with asyncio.timeout(seconds):
                await asyncio.shield(self._ready)
        except TimeoutError:
            if not self._quiet:
                logger.warning(
                    "MCP server %s did not open a session within %g s; stopping it",
                    self._toolset._where,
                    seconds,
                )
            await self._abandon()
            raise AdkIOError(
                f"{self._toolset.name}: the MCP server did not open a session within {seconds:g} s"
            ) from None
        except BaseException:
            await self._abandon()
            raise

    async def _abandon(self) -> None:
        """Stop an opening that did not finish. Its owner task may still be inside the SDK's
        opening exchange, which never looks at the close signal (a server that never
        answers would hold it until it exits by itself), so it is cancelled: the SDK stops a
        stdio server on the way out."""
        self._ready.cancel()  # its outcome is no one's any more
        self._closing.set()
        task = self._task
        if task is not None:
            task.cancel()
            await asyncio.wait({task})

    async def _own(self) -> None:
        toolset = self._toolset
        try:
            async with toolset._client(self._on_message, self._session_gone) as client:
                self._client = client
                async with contextlib.AsyncExitStack() as listening:
                    await self._listen(client, listening)
                    self._ready.set_result(None)
                    await self._closing.wait()
        except BaseException as error:
            if not self._ready.done():
                reason = toolset._reason(error)
                self._ready.set_exception(
                    AdkIOError(f"{toolset.name}: cannot open the MCP session: {reason}")
                )
                if not self._quiet:
                    logger.warning("cannot open an MCP session with %s: %s", toolset._where, reason)
            elif not self._closing.is_set():
                self.failure = error
                logger.warning(
                    "MCP session with %s ended: %s", toolset._where, toolset._reason(error)
                )
            if isinstance(error, asyncio.CancelledError):
                raise
        finally:
            self._client = None

    async def _listen(self, client: Client, stack: contextlib.AsyncExitStack) -> None:
        """Open a ``subscriptions/listen`` stream for tool changes when the server's era has
        them there (2026-07-28) and it offers them; its events reach :meth:`_on_message`."""
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        tools = client.server_capabilities.tools
        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS or not (
            tools and tools.list_changed
        ):
            return
        try:
            await stack.enter_async_context(client.listen(tools_list_changed=True))
        except Exception as error:
            logger.info(
                "MCP server %s offers no tool change stream (%s); its listing is kept",
                self._toolset._where,
                self._toolset._reason(error),
            )

    async def _on_message(self, message: IncomingMessage) -> None:
        from mcp.types import ToolListChangedNotification

        if isinstance(message, ValueError):
            # A line (stdio) or an event (HTTP) that is not a JSON-RPC message: a stray
            # print or a banner. The SDK logged it; the session goes on, as the SDK's own.
            logger.warning(
                "MCP server %s sent what is not an MCP message (ignored): %s",
                self._toolset._where,
                self._toolset._reason(message),
            )
        elif isinstance(message, Exception):
            self.fail(message)
        elif isinstance(message, ToolListChangedNotification):
            self._toolset._listing_changed()

    def _session_gone(self) -> None:
        if self._closing.is_set():
            return  # the 404 of ending it (DELETE), or of a request racing the end
        logger.warning(
            "MCP server %s no longer knows the session (HTTP 404); the next request opens "
            "a new one",
            self._toolset._where,
        )
        self.fail(AdkIOError(f"{self._toolset.name}: the MCP server ended the session"))

    def fail(self, error: BaseException) -> None:
        """The session is dead: the next listing or call connects again."""
        if self.failure is None:
            self.failure = error
            self._closing.set()

    def check(self, error: Exception) -> None:
        """After a request failed with ``error`` (an ``MCPError``): a closed connection, or a
        session whose owner task ended, is dead."""
        from mcp_types import CONNECTION_CLOSED

        code = getattr(error, "code", None)
        if code == CONNECTION_CLOSED or (self._task is not None and self._task.done()):
            self.fail(self.failure or error)

    async def close(self, *, same_loop_only: bool = False) -> None:
        self._closing.set()
        task = self._task
        if task is None or task.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover
            return
        if loop is not self._loop:
            # Its loop is gone or elsewhere; the transport goes with it.
            if not same_loop_only:  # pragma: no cover
                task.cancel()
            return
        # Waits for the task without taking on its outcome, and without swallowing a
        # cancellation of the caller (awaiting the task would do both).
        await asyncio.wait({task})


class McpTool(BaseTool):
    """One tool of an :class:`McpToolset`, declared as the server declares it (its JSON
    Schemas made model-friendly: ``$ref`` inlined, ``title`` dropped)."""

    is_remote = True

    def __init__(self, toolset: McpToolset, tool: Tool, *, name: str | None = None) -> None:
        super().__init__(name or tool.name, tool.description or tool.title or "")
        #: The tool's name on its server (``name``: the one models call it by, when the
        #: server's is one a provider refuses).
        self.server_name = tool.name
        self._toolset = toolset
        schema = _friendly(tool.input_schema) if tool.input_schema else None
        self._parameters = schema if schema and _takes_arguments(schema) else None
        self._response = _friendly(tool.output_schema) if tool.output_schema else None

    @property
    def parameters_schema(self) -> dict[str, Any] | None:
        return None if self._parameters is None else json.loads(json.dumps(self._parameters))

    @property
    def response_schema(self) -> dict[str, Any] | None:
        return None if self._response is None else json.loads(json.dumps(self._response))

    def declaration(self) -> ToolDeclaration:
        return ToolDeclaration(
            name=self.name,
            description=self.description,
            parameters_schema=self.parameters_schema,
            response_schema=self.response_schema,
        )

    async def execute(self, ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any] | None:
        from mcp import MCPError

        toolset = self._toolset
        try:
            session = await toolset._open()
        except AdkIOError as error:
            raise ToolError(
                f"the MCP server of {toolset.name!r} cannot be reached, so {self.name!r} did "
                f"not run: {error.message}"
            ) from error

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            fraction = min(1.0, max(0.0, progress / total)) if total else None
            data: dict[str, Any] = {"progress": progress}
            if total is not None:
                data["total"] = total
            await ctx.report_progress(message or "", data, fraction)

        try:
            result = await session.client.call_tool(
                self.server_name, args, progress_callback=on_progress
            )
        except MCPError as error:
            if _EVENT_TOO_LARGE.search(error.error.message):
                # The answer came and was too large: the session is fine, the result dropped.
                raise self._too_large() from error
            session.check(error)
            if session.failure is not None:
                raise self._lost(error) from error
            raise ToolError(
                f"the MCP server refused the call to {self.name!r}: "
                f"{toolset._redacted(error.error.message)}"
            ) from error
        except Exception as error:
            session.check(error)
            if session.failure is not None:
                raise self._lost(error) from error
            raise ToolError(
                f"the call to {self.name!r} failed: {toolset._reason(error)}"
            ) from error
        if _result_bytes(result) > toolset.max_result_bytes:
            raise self._too_large()
        return _response(self.name, result, toolset._redacted)

    def _too_large(self) -> ToolError:
        toolset = self._toolset
        return ToolError(
            f"the MCP tool's result is larger than {toolset.max_result_bytes} bytes (the "
            f"max_result_bytes of toolset {toolset.name!r}), so the result of {self.name!r} "
            "was dropped; it ran. Ask it for less (a narrower query, fewer items)."
        )

    def _lost(self, error: BaseException) -> ToolError:
        logger.warning(
            "MCP server %s was lost during a call to %r: %s",
            self._toolset._where,
            self.name,
            self._toolset._reason(error),
        )
        return ToolError(
            f"the MCP server of {self._toolset.name!r} stopped answering during the call to "
            f"{self.name!r}; it was not retried (it may have run). The next call connects again."
        )


def _friendly(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A server's JSON Schema made model-friendly (:func:`_model_friendly`), after every local
    ``$ref`` is made one into ``$defs``: MCP servers also point at ``#/definitions/X`` (draft
    07) and into the schema itself (``#/properties/a``, as zod-to-json-schema does for a
    schema used twice), which ``_model_friendly`` alone would turn into ``{}``."""
    names: dict[str, str] = {}
    definitions: dict[str, Any] = {}

    def rewrite(node: Any) -> Any:
        if isinstance(node, list):
            return [rewrite(item) for item in node]
        if not isinstance(node, dict):
            return node
        result = {key: rewrite(value) for key, value in node.items()}
        reference = node.get("$ref")
        if isinstance(reference, str) and reference.startswith("#"):
            name = names.get(reference)
            if name is None:
                name = names[reference] = f"ref{len(names)}"
                definitions[name] = {}  # a reference inside its own target: recursive
                definitions[name] = rewrite(_pointed_at(schema, reference))
            result["$ref"] = f"#/$defs/{name}"
        return result

    rewritten = rewrite(dict(schema))
    rewritten.pop("definitions", None)
    rewritten["$defs"] = definitions
    return _model_friendly(rewritten)


def _pointed_at(schema: Mapping[str, Any], reference: str) -> Any:
    """What a local JSON pointer (``#/a/b~1c``) names in ``schema``; ``{}`` when nothing."""
    node: Any = schema
    for token in reference[1:].split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return {}
    return node


def _takes_arguments(schema: Mapping[str, Any]) -> bool:
    """Whether an input schema lets the model pass anything: named properties, or properties
    of any name (``additionalProperties`` / ``patternProperties`` a schema), or alternatives
    (``anyOf``, ``oneOf``, ``allOf``). A bare ``{"type": "object"}`` (or one with
    ``additionalProperties: true``) declares no parameters."""
    if schema.get("properties") or schema.get("patternProperties"):
        return True
    if isinstance(schema.get("additionalProperties"), dict):
        return True
    return any(schema.get(key) for key in ("anyOf", "oneOf", "allOf"))


def _result_bytes(result: CallToolResult) -> int:
    """The size of a result as the server sends it: its content blocks and
    ``structuredContent`` as JSON (what an SSE event carries, less the JSON-RPC envelope)."""
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


def _response(name: str, result: CallToolResult, redact: Callable[[str], str]) -> dict[str, Any]:
    """A tool result as the model reads it; an ``isError`` result as a ToolError, its text
    through ``redact`` (a server's error may echo the URL it was asked at)."""
    text = _content_text(result.content)
    if result.is_error:
        raise ToolError(redact(text) or f"the MCP tool {name!r} failed without saying why")
    if isinstance(result.structured_content, dict):
        return dict(result.structured_content)
    return {"result": text}


def _content_text(blocks: Sequence[Any]) -> str:
    """The content blocks of a result as text: text as it is, the rest described."""
    from mcp.types import (
        AudioContent,
        BlobResourceContents,
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextContent,
        TextResourceContents,
    )

    pieces: list[str] = []
    for block in blocks:
        if isinstance(block, TextContent):
            pieces.append(block.text)
        elif isinstance(block, ImageContent | AudioContent):
            kind = "image" if isinstance(block, ImageContent) else "audio"
            size = len(block.data.rstrip("=")) * 3 // 4  # base64's padding is no data
            pieces.append(f"[{kind} {block.mime_type}, {size} bytes]")
        elif isinstance(block, ResourceLink):
            pieces.append(f"[resource {block.name}: {block.uri}]")
        elif isinstance(block, EmbeddedResource):
            resource = block.resource
            if isinstance(resource, TextResourceContents):
                pieces.append(resource.text)
            elif isinstance(resource, BlobResourceContents):
                pieces.append(f"[resource {resource.uri}, {resource.mime_type or 'binary'}]")
        else:
            pieces.append(f"[{getattr(block, 'type', type(block).__name__)} content]")
    return "\n".join(pieces)


def _reason(error: BaseException) -> str:
    """One line about an error, from inside an exception group when it is one."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


# --- toolsets named by the environment ------------------------------------------------------


def mcp_toolsets_from_env(environ: Mapping[str, str] | None = None) -> list[McpToolset]:
    """The MCP toolsets ``ADK_MESH_MCP_TOOLSETS`` names (what ``adk-mesh up`` sets from a
    service's ``[services.<name>.mcp.<toolset>]`` tables); none when it is unset.

    The variable holds a JSON object of toolset name to server: ``{"time": {"command":
    "{python}", "args": ["-m", "mcp_server_time"]}}`` for a stdio server (keys ``command``,
    ``args``, ``env``, ``cwd``), ``{"url": "...", "headers": {...}}`` for an HTTP one, either
    with ``tools`` (the names to offer) and ``max_result_bytes`` (a positive integer; default
    :data:`DEFAULT_MAX_RESULT_BYTES`). ``{python}`` in the command or the arguments is this
    process's Python (``sys.executable``), so a server installed beside adk-mesh runs from the
    same environment. ``adk-mesh serve tools`` serves these toolsets beside its own tools.

    Raises:
        ConfigError: the variable is not such a JSON object, or a key's value is of the wrong
            type (``max_result_bytes`` below 1 too), naming the toolset and the key.
    """
    tables = tables_from_env(
        MCP_TOOLSETS_ENV,
        known_keys=_CONFIG_KEYS,
        entry="toolset",
        expected="an object with command or url",
        environ=environ,
    )
    return [_toolset_from_config(name, server) for name, server in tables.items()]


def _toolset_from_config(name: str, server: dict[str, Any]) -> McpToolset:
    where = f"{MCP_TOOLSETS_ENV} {name!r}"

    def strings(key: str) -> list[str]:
        value = server.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ConfigError(f"{where}: {key} must be an array of strings")
        return value

    def table(key: str) -> dict[str, str]:
        value = server.get(key, {})
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise ConfigError(f"{where}: {key} must be an object of strings")
        return value

    def text(key: str) -> str | None:
        value = server.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{where}: {key} must be a string")
        return value

    def byte_count(key: str) -> int:
        value = server.get(key, DEFAULT_MAX_RESULT_BYTES)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(
                f"{where}: {key} must be a positive integer (a number of bytes), not {value!r}"
            )
        return value

    command = text("command")
    tools = strings("tools") if "tools" in server else None
    return McpToolset(
        command=None if command is None else _with_python(command),
        args=[_with_python(arg) for arg in strings("args")],
        env=table("env"),
        cwd=text("cwd"),
        url=text("url"),
        headers=table("headers"),
        tool_filter=tools,
        name=name,
        max_result_bytes=byte_count("max_result_bytes"),
    )


def _with_python(value: str) -> str:
    return value.replace("{python}", sys.executable)
