"""A2aAgent: any A2A agent (protocol 1.0), used as an agent of the tree (``pip install
'adk-mesh[a2a]'``).

The A2A SDK (``a2a-sdk``) loads when the agent first runs, not when this module is imported:
an agent tree that holds an ``A2aAgent`` is built without it.

``adk-mesh up`` hands a service the remote A2A agents its ``[services.<name>.a2a_agents.<agent>]``
tables declare as ``ADK_MESH_A2A_AGENTS``; :func:`a2a_agents_from_env` makes them, for the
service's module to place in its tree (``sub_agents=`` or ``AgentTool``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from adk_mesh._env_tables import tables_from_env
from adk_mesh.agents.base import BaseAgent
from adk_mesh.contexts import InvocationContext
from adk_mesh.credentials import KnownSecrets
from adk_mesh.credentials._redaction import add_header_secrets, redact_http_logs, shown_url
from adk_mesh.errors import AdkError, ConfigError, InvalidArgumentError
from adk_mesh.ids import USER_ARTIFACT_PREFIX, check_artifact_name
from adk_mesh.telemetry._propagation import trace_headers
from adk_mesh.telemetry._providers import get_tracer
from adk_mesh.types import Content, Event, EventActions, LlmResponse

if TYPE_CHECKING:
    from a2a.client import Client
    from a2a.types import a2a_pb2

    from adk_mesh.mesh.security import ClientTLS

__all__ = [
    "A2A_AGENTS_ENV",
    "KEEPS_CONVERSATION_EXTENSION",
    "A2aAgent",
    "a2a_agents_from_env",
    "context_state_key",
    "keeps_conversation_extension",
]

logger = logging.getLogger(__name__)

#: Seconds to fetch the agent card, and to send ``CancelTask`` when a run is abandoned (and,
#: before that, to wait for the first event that names the remote task).
CARD_TIMEOUT = 10.0
CANCEL_TIMEOUT = 5.0
#: Seconds after a card could not be read before :meth:`A2aAgent.load_keeps_conversation`
#: asks again: an agent that is down would otherwise hold every turn up to CARD_TIMEOUT.
CARD_RETRY_AFTER = 30.0
#: Responses the reader of a call may hold that the run has not taken yet.
_READ_AHEAD = 64
_STATE_PREFIX = "a2a_agent."
#: Cancellations of remote tasks still being sent after their run ended.
_cancellations: set[asyncio.Task[None]] = set()

Binding = Literal["jsonrpc", "grpc"]
_BINDINGS: dict[str, str] = {"jsonrpc": "JSONRPC", "grpc": "GRPC"}

#: Where ``adk-mesh up`` puts the remote A2A agents ``mesh.toml`` declares for a service: a JSON
#: object of agent name to its settings (see :func:`a2a_agents_from_env`).
A2A_AGENTS_ENV = "ADK_MESH_A2A_AGENTS"
_ENV_KEYS = frozenset({"url", "description", "binding", "timeout", "headers"})


#: The URI of the A2A extension (in the card's ``capabilities.extensions``) by which an
#: adk-mesh A2A server says whether its agent keeps the conversation, which A2A's AgentCard
#: has no field for. A URN: adk-mesh owns no domain to publish a URL under. Its ``params``
#: are ``{"keeps_conversation": <bool>}``; it is never ``required`` (a client that does not
#: know it loses nothing but this hint).
KEEPS_CONVERSATION_EXTENSION = "urn:adk-mesh:a2a:keeps-conversation:v1"
_KEEPS_PARAM = "keeps_conversation"


def keeps_conversation_extension(keeps: bool) -> a2a_pb2.AgentExtension:
    """The card extension (:data:`KEEPS_CONVERSATION_EXTENSION`) saying whether the served
    agent, placed under a caller's agent and having answered last, answers the user's next
    turn itself (``keeps``) or leaves it to the caller's root (a workflow agent)."""
    from a2a.types import a2a_pb2

    extension = a2a_pb2.AgentExtension(
        uri=KEEPS_CONVERSATION_EXTENSION,
        description=(
            "adk-mesh: whether this agent, under a caller's agent and having answered last, "
            "answers the user's next turn itself (params.keeps_conversation); when false the "
            "next turn starts again from the caller's root, as a workflow agent's does"
        ),
        required=False,
    )
    extension.params[_KEEPS_PARAM] = keeps
    return extension


def _card_keeps_conversation(card: a2a_pb2.AgentCard) -> bool | None:
    """What ``card``'s :data:`KEEPS_CONVERSATION_EXTENSION` says; ``None`` without it (any
    other A2A server), or when its parameter is not a boolean."""
    for extension in card.capabilities.extensions:
        if extension.uri != KEEPS_CONVERSATION_EXTENSION:
            continue
        value = extension.params.fields.get(_KEEPS_PARAM)
        if value is not None and value.WhichOneof("kind") == "bool_value":
            return value.bool_value
        return None
    return None


def context_state_key(agent_name: str) -> str:
    """The session state key under which an :class:`A2aAgent` keeps its remote conversation
    (``{"context_id": ..., "task_id": ...}``)."""
    return f"{_STATE_PREFIX}{agent_name}"


@dataclass
class _Remote:
    """What one run learned of the remote task."""

    context_id: str = ""
    task_id: str = ""
    state: str = ""
    invocation_id: str = ""
    #: Text streamed so far, per artifact id (for the partial events).
    streamed: dict[str, str] = field(default_factory=dict)
    #: Each artifact as it stands, by id (chunks appended), until it is turned into an event.
    artifacts: dict[str, a2a_pb2.Artifact] = field(default_factory=dict)
    #: The artifacts already turned into events (a final Task repeats them).
    done: set[str] = field(default_factory=set)


class A2aAgent(BaseAgent):
    """Calls an A2A agent (any vendor's: an adk-mesh ``serve --a2a-port``, a plain ``a2a-sdk``
    server, ...) and streams its answer into this invocation as this agent's events.

    Usable wherever an agent is: a sub-agent a model transfers to (the caller's Runner stores
    its events, and it keeps the conversation for the user's next turn as the remote agent
    would as a child: see ``keeps_conversation``), or inside ``AgentTool(A2aAgent(...))``,
    whose answer is the remote agent's.

    **One message per run.** The run sends the user's message of this turn (``user_content``:
    the user's words, or the AgentTool's request) as an A2A message, streamed
    (``SendStreamingMessage``) when the card says the agent streams. Its metadata carries the
    invocation id (``{"adk_mesh": {"invocation_id": ...}}``: an adk-mesh server runs the turn
    under it); the call carries ``traceparent`` (never baggage: the invocation's user and
    session ids stay in the mesh), so the remote spans join this trace under an
    ``lf.a2a.v1.A2AService/SendStreamingMessage`` CLIENT span.

    **The conversation goes on.** The remote ``contextId`` is kept in this session's state
    under :func:`context_state_key` (``a2a_agent.<name>``: session-scoped, persisted with the
    session; an AgentTool child sees it only if its ``state_keys`` and ``output_state_keys``
    name it), so the next turn continues the same remote context. A task left
    ``input-required`` is continued by the next message too (its id is kept with the context).

    **What comes back**, as events authored by this agent:

    * streamed artifact text → partial events (shown, never stored);
    * a ``working`` status message → an event with its content (text; data parts as their JSON
      text; function calls and responses, and the calls and results of a tool the remote's
      model provider ran itself, that the remote marks as such, as parts of those kinds);
    * each artifact, once whole → an event whose content is its text and data; its files
      (raw bytes) go to this invocation's artifact store under the artifact's name, in this
      session (a ``user:`` prefix is dropped: a remote never writes the user's scope; the
      event's ``artifact_delta`` says which version), or, without a store, into the content as
      inline data; a direct ``Message`` reply → an event with its content;
    * ``input-required`` → an event with the remote's question, and the next turn answers it;
      the calls it holds (an adk-mesh remote's long-running call or confirmation request) are
      the event's ``long_running_tool_ids``, so the client answers them with function
      responses, as a local agent's;
    * ``failed``, ``rejected``, ``canceled``, and every error of the call (the card or the agent
      unreachable, an error response, the deadline) → one event with ``error_code``
      (``A2A_FAILED``, ``A2A_REJECTED``, ``A2A_CANCELED``, ``A2A_ERROR``, ``A2A_UNAVAILABLE``,
      ``DEADLINE_EXCEEDED``) and a message naming this agent: the invocation goes on, as after
      a model's error; nothing is raised.

    **Secrets of the endpoint.** A key in ``url`` (``user:password@``, ``?api_key=...``) is used
    to fetch the card (the password as basic auth, the query as the card request's) and shown
    nowhere else: the span's ``url.full``, logs and error messages show the URL with the
    password and the values of secret-looking query parameters as ``[redacted]`` (as
    :class:`~adk_mesh.McpToolset` shows its URL). Those values, and those of secret-looking
    ``headers`` (``Authorization``, ``x-api-key``, ...), are taken out of every error message
    and log line, the remote's own failure messages included.

    **Cancel and deadline.** Closing the run (the invocation ends, is cancelled, or a parent
    stops reading) sends ``CancelTask`` for a task still going on. A2A names a new task only
    in the server's first event (a client cannot choose its id), so the call's stream is read
    by a task of its own: a run closed before that event leaves it reading until an event
    names the task (at most :data:`CANCEL_TIMEOUT` seconds), then the task is cancelled. The
    call is bounded by the invocation's deadline (or ``timeout`` when shorter).

    Args:
        name: this agent's name in the tree (and the author of its events).
        url: the A2A agent's base URL (its card is at ``<url>/.well-known/agent-card.json``).
        description: what it does, for a model choosing where to transfer (default: the card's).
        binding: ``"jsonrpc"`` or ``"grpc"``; default: the card's first interface of the two.
        timeout: seconds a run may take (the invocation's deadline bounds it too).
        headers: sent with every call: credentials (``{"authorization": "Bearer ..."}``,
            ``{"x-api-key": ...}``).
        tls: for the gRPC binding, the CA (and client certificate) to use; plaintext without
            it (loopback). For HTTPS, ``tls.ca_file`` is the CA to trust instead of the
            system's.
        keeps_conversation: whether, when it answered last, it answers the user's next turn
            (default: what the card's :data:`KEEPS_CONVERSATION_EXTENSION` says, as an
            adk-mesh A2A server declares it: no for a workflow agent, or an LLM agent that
            may not transfer to its parent; read when the Runner picks who answers a turn it
            answered last, :meth:`load_keeps_conversation`, or with the card its first run
            fetches; yes, as an LLM agent, for a card without the extension — any other A2A
            server — and while the card is unknown). Say it to override the card.
    """

    def __init__(
        self,
        name: str,
        url: str,
        *,
        description: str = "",
        binding: Binding | None = None,
        timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
        tls: ClientTLS | None = None,
        keeps_conversation: bool | None = None,
    ) -> None:
        super().__init__(name=name, description=description)
        # The URL as the span, logs and errors show it; its secrets and the headers', to
        # take out of what the HTTP client and the remote agent say.
        self._secrets = KnownSecrets()
        self._shown_url = shown_url(url.rstrip("/"), self._secrets)
        add_header_secrets(headers or {}, self._secrets)
        if not url.startswith(("http://", "https://")):
            raise ConfigError(
                f"A2aAgent {name!r}: url {self._shown_url!r} must be an http:// or https:// URL"
            )
        if binding is not None and binding not in _BINDINGS:
            raise ConfigError(
                f"A2aAgent {name!r}: binding {binding!r} is not one of {', '.join(_BINDINGS)}"
            )
        if timeout is not None and timeout <= 0:
            raise ConfigError(f"A2aAgent {name!r}: timeout must be positive seconds")
        self.url = url.rstrip("/")
        self.binding = binding
        self.timeout = timeout
        self.headers = {key.lower(): value for key, value in (headers or {}).items()}
        self.tls = tls
        self._keeps_conversation = keeps_conversation  # None: what the card says
        # What the card's extension said (None: nothing, or no card read yet), whether a card
        # was read, and when reading one last failed (time.monotonic()).
        self._card_keeps_conversation: bool | None = None
        self._card_read = False
        self._card_failed_at = -CARD_RETRY_AFTER
        self._card: a2a_pb2.AgentCard | None = None
        self._client: Client | None = None
        self._connecting = asyncio.Lock()
        self._http: Any = None

    @property
    def keeps_conversation(self) -> bool:
        """The ``keeps_conversation`` argument when given; else what the card's extension said
        once a card was read; else yes, as an LLM agent: a model placed it here among its
        parent's peers, so it can hand the conversation back."""
        declared = self.declared_keeps_conversation()
        return True if declared is None else declared

    def declared_keeps_conversation(self) -> bool | None:
        """The ``keeps_conversation`` argument, else what the card's extension said; ``None``
        while neither is known (no card read yet, or a card without the extension)."""
        if self._keeps_conversation is not None:
            return self._keeps_conversation
        return self._card_keeps_conversation

    async def load_keeps_conversation(self) -> bool:
        """:attr:`keeps_conversation`, once the card said it: the card is fetched (with the
        client, kept for the runs) unless the argument was given or a card was read already
        (the first run reads it). A failure is a warning, the default (yes) stands, and the
        card is not asked for again for :data:`CARD_RETRY_AFTER` seconds."""
        if (
            self._keeps_conversation is not None
            or self._card_read
            or time.monotonic() - self._card_failed_at < CARD_RETRY_AFTER
        ):
            return self.keeps_conversation
        try:
            await self._connect()
        except Exception as error:
            if not self._card_read:  # a card read but unfit (no usable interface) still said
                self._card_failed_at = time.monotonic()
                logger.warning(
                    "whether A2A agent %r keeps the conversation is unknown for now (taken as "
                    "yes): its card at %s cannot be read: %s",
                    self.name,
                    self._shown_url,
                    self._secrets.redact_text(_message_of(error)),
                )
        return self.keeps_conversation

    # --- the client ----------------------------------------------------------------------------

    def _verify(self) -> Any:
        if self.tls is not None and self.tls.ca_file is not None:
            import ssl

            return ssl.create_default_context(cafile=str(self.tls.ca_file))
        return True

    async def _connect(self) -> Client:
        """The client, made on first use from the card (kept: one per agent)."""
        if self._client is not None:
            return self._client
        # Runs that start together (a served tree's concurrent first requests) wait for one
        # client: each made its own, and all but the one kept leaked their connections.
        async with self._connecting:
            if self._client is not None:
                return self._client
            return await self._make_client()

    async def _make_client(self) -> Client:
        import httpx
        from a2a.client import A2ACardResolver, ClientConfig, ClientFactory

        base, request = _card_request(self.url)
        # httpx and the SDK log the URLs asked for: their secrets show redacted.
        redact_http_logs()
        async with httpx.AsyncClient(
            verify=self._verify(), timeout=CARD_TIMEOUT, headers=self.headers
        ) as http:
            card = await A2ACardResolver(http, base).get_agent_card(http_kwargs=request)
        # Learned before the interfaces are checked: what the card says of the conversation
        # holds even when none of its interfaces can be used.
        self._card_read = True
        self._card_keeps_conversation = _card_keeps_conversation(card)
        offered = [interface.protocol_binding for interface in card.supported_interfaces]
        if self.binding is not None:
            wanted = _BINDINGS[self.binding]
            if wanted not in offered:
                raise _Unavailable(
                    f"its card offers {', '.join(offered) or 'no interface'}, not {wanted}"
                )
            bindings = [wanted]
        else:
            bindings = [binding for binding in offered if binding in _BINDINGS.values()][:1]
            if not bindings:
                raise _Unavailable(f"its card offers no JSON-RPC or gRPC interface ({offered})")
        # Ours to close (a client given one does not close it).
        self._http = httpx.AsyncClient(verify=self._verify(), timeout=None)
        config = ClientConfig(
            streaming=True,
            supported_protocol_bindings=bindings,
            httpx_client=self._http,
            grpc_channel_factory=self._channel,
        )
        self._card = card
        self._client = ClientFactory(config).create(card)
        if not self.description:
            self.description = card.description
        return self._client

    def _channel(self, url: str) -> Any:
        import grpc.aio

        target = url.split("://", 1)[-1].rstrip("/")
        options = [
            ("grpc.max_send_message_length", 32 * 1024 * 1024),
            ("grpc.max_receive_message_length", 32 * 1024 * 1024),
        ]
        if self.tls is None and not url.startswith(("https://", "grpcs://")):
            return grpc.aio.insecure_channel(target, options=options)
        import grpc

        credentials = (
            self.tls.credentials() if self.tls is not None else grpc.ssl_channel_credentials()
        )
        return grpc.aio.secure_channel(target, credentials, options=options)

    async def close(self) -> None:
        """Close the client (its HTTP connections or gRPC channel). Idempotent."""
        client, self._client = self._client, None
        http, self._http = self._http, None
        if client is not None:
            await client.close()
        if http is not None:
            await http.aclose()

    # --- a run ---------------------------------------------------------------------------------

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        remaining = ctx.time_remaining()
        if self.timeout is not None:
            remaining = self.timeout if remaining is None else min(remaining, self.timeout)
        remote = _Remote()
        kept = ctx.session.state.get(context_state_key(self.name))
        if isinstance(kept, dict):
            remote.context_id = str(kept.get("context_id") or "")
            remote.task_id = str(kept.get("task_id") or "")
        kept_ids = (remote.context_id, remote.task_id)
        events = self._exchange(ctx, remote)
        # Each stored event goes out once the next one came: the last carries the state.
        pending: Event | None = None
        failure: Event | None = None
        try:
            async with asyncio.timeout(max(remaining, 0) if remaining is not None else None):
                async for event in events:
                    if event.partial:
                        yield event
                        continue
                    if pending is not None:
                        yield pending
                    pending = event
        except TimeoutError:
            failure = self._error(ctx, "DEADLINE_EXCEEDED", "the deadline passed")
        except _Unavailable as error:
            failure = self._error(ctx, "A2A_UNAVAILABLE", f"cannot be reached: {error}")
        except AdkError as error:
            failure = self._error(ctx, "A2A_ERROR", error.message)
        except Exception as error:
            failure = self._error(ctx, _code_of(error), _message_of(error))
        finally:
            # The run ends (closed, cancelled, failed): a remote task going on is cancelled.
            await events.aclose()
        if failure is not None:
            if pending is not None:
                yield pending
            pending = failure
        if pending is None:
            if (remote.context_id, remote.task_id) == kept_ids:
                return
            pending = ctx.new_event()
        yield self._with_conversation(pending, remote)

    def _error(self, ctx: InvocationContext, code: str, message: str) -> Event:
        # Errors of the HTTP client and the SDK name the URL; a remote may echo a key.
        message = self._secrets.redact_text(message)
        logger.warning("A2A agent %r: %s: %s", self.name, code, message)
        return Event(
            author=self.name,
            invocation_id=ctx.invocation_id,
            branch=ctx.branch,
            llm_response=LlmResponse(
                error_code=code, error_message=f"A2A agent {self.name!r}: {message}"
            ),
        )

    def _with_conversation(self, event: Event, remote: _Remote) -> Event:
        """``event`` carrying the remote context (and a task waiting for input) in the state."""
        task_id = remote.task_id if remote.state == "TASK_STATE_INPUT_REQUIRED" else ""
        if not remote.context_id:
            return event
        delta = dict(event.actions.state_delta)
        delta[context_state_key(self.name)] = {"context_id": remote.context_id, "task_id": task_id}
        actions = event.actions.model_copy(update={"state_delta": delta})
        return event.model_copy(update={"actions": actions})

    async def _exchange(
        self, ctx: InvocationContext, remote: _Remote
    ) -> AsyncGenerator[Event, None]:
        """Send the turn's message and yield the events its answer makes."""
        from a2a.client import ClientCallContext
        from a2a.types import a2a_pb2

        from adk_mesh.agents._a2a_parts import METADATA_KEY, content_to_a2a_parts, struct_of

        try:
            client = await self._connect()
        except _Unavailable:
            raise
        except Exception as error:
            raise _Unavailable(_message_of(error)) from error
        content = ctx.user_content or Content(role="user", parts=[])
        parts = content_to_a2a_parts(content)
        if not parts:
            raise InvalidArgumentError("there is no user message to send")
        message = a2a_pb2.Message(
            message_id=f"{ctx.invocation_id}-{self.name}-{time.monotonic_ns()}",
            role=a2a_pb2.Role.ROLE_USER,
            parts=parts,
            context_id=remote.context_id,
            task_id=remote.task_id,
            metadata=struct_of({METADATA_KEY: {"invocation_id": ctx.invocation_id}}),
        )
        tracer = get_tracer()
        span = None
        if tracer is not None:
            span = tracer.start_span(
                "lf.a2a.v1.A2AService/SendStreamingMessage",
                kind=SpanKind.CLIENT,
                attributes={
                    "rpc.system": "a2a",
                    "rpc.service": "lf.a2a.v1.A2AService",
                    "rpc.method": "SendStreamingMessage",
                    "url.full": self._shown_url,
                    "gen_ai.agent.name": self.name,
                },
            )
        parameters = dict(self.headers)
        if span is not None:
            parameters.update(trace_headers(trace.set_span_in_context(span)))
        remaining = ctx.time_remaining()
        context = ClientCallContext(service_parameters=parameters, timeout=remaining)
        call = _RemoteCall(
            self.name,
            client,
            client.send_message(a2a_pb2.SendMessageRequest(message=message), context=context),
            task_id=remote.task_id,
            headers=self.headers,
            redact=self._secrets.redact_text,
        )
        try:
            while (response := await call.next()) is not None:
                for event in await self._events_of(response, remote, ctx):
                    yield event
            for event in await self._artifacts_left(remote, ctx):
                yield event
            if remote.state not in _FINISHED:
                # The stream ended with the task still going on (or never named): what came
                # is not the whole answer, and the run says so rather than pass it as one.
                raise _CutShort(
                    f"the stream ended with the remote task "
                    f"{remote.state.removeprefix('TASK_STATE_').lower() or 'never started'}, "
                    "before a final status"
                )
        except BaseException as error:
            if span is not None and not isinstance(error, asyncio.CancelledError | GeneratorExit):
                span.set_status(Status(StatusCode.ERROR, type(error).__name__))
            raise
        finally:
            call.close()
            if span is not None:
                span.end()

    def _event(
        self, ctx: InvocationContext, content: Content | None, *, partial: bool = False, **kw: Any
    ) -> Event:
        return Event(
            author=self.name,
            invocation_id=ctx.invocation_id,
            branch=ctx.branch,
            llm_response=LlmResponse(content=content, partial=partial, **kw),
        )

    def _content(self, parts: Any) -> Content | None:
        from adk_mesh.agents._a2a_parts import a2a_parts_to_content

        converted = a2a_parts_to_content(parts, "model")
        return converted if converted.parts else None

    async def _events_of(
        self, response: a2a_pb2.StreamResponse, remote: _Remote, ctx: InvocationContext
    ) -> list[Event]:
        kind = response.WhichOneof("payload")
        if kind == "message":
            remote.state = "TASK_STATE_COMPLETED"  # a direct reply ends the exchange
            remote.context_id = response.message.context_id or remote.context_id
            return [self._event(ctx, self._content(response.message.parts))]
        if kind == "task":
            task = response.task
            remote.task_id, remote.context_id = task.id, task.context_id or remote.context_id
            self._note_ids(task.metadata, remote)
            for artifact in task.artifacts:
                if artifact.artifact_id not in remote.done:
                    remote.artifacts[artifact.artifact_id] = artifact
            return await self._status_events(task.status, remote, ctx)
        if kind == "status_update":
            update = response.status_update
            remote.task_id = update.task_id or remote.task_id
            remote.context_id = update.context_id or remote.context_id
            self._note_ids(update.metadata, remote)
            return await self._status_events(update.status, remote, ctx)
        if kind == "artifact_update":
            return self._artifact_chunk(response.artifact_update, remote, ctx)
        return []

    def _note_ids(self, metadata: Any, remote: _Remote) -> None:
        from adk_mesh.agents._a2a_parts import metadata_of

        invocation = metadata_of(metadata).get("invocation_id")
        if isinstance(invocation, str):
            remote.invocation_id = invocation

    async def _status_events(
        self, status: a2a_pb2.TaskStatus, remote: _Remote, ctx: InvocationContext
    ) -> list[Event]:
        from a2a.types import a2a_pb2

        state = a2a_pb2.TaskState.Name(status.state)
        remote.state = state
        content = self._content(status.message.parts) if status.HasField("message") else None
        if state in _FAILURES:
            code, what = _FAILURES[state]
            text = content.text if content is not None else ""
            return [
                *await self._artifacts_left(remote, ctx),
                self._error(ctx, code, f"{what}{': ' + text if text else ''}"),
            ]
        events = []
        if state in ("TASK_STATE_COMPLETED", "TASK_STATE_INPUT_REQUIRED"):
            events.extend(await self._artifacts_left(remote, ctx))
        if content is not None:
            event = self._event(ctx, content)
            if state == "TASK_STATE_INPUT_REQUIRED":
                # The calls the remote waits on (a long-running tool's, a confirmation
                # request) are the client's to answer, as a local agent's would be: the
                # Runner refused their answers, so the remote task could never go on.
                event.long_running_tool_ids = [
                    call.id for call in event.function_calls() if call.id is not None
                ]
            events.append(event)
        return events

    def _artifact_chunk(
        self, update: a2a_pb2.TaskArtifactUpdateEvent, remote: _Remote, ctx: InvocationContext
    ) -> list[Event]:
        from a2a.types import a2a_pb2

        artifact = update.artifact
        kept = remote.artifacts.get(artifact.artifact_id)
        if update.append and kept is not None:
            kept.parts.extend(artifact.parts)
        else:
            kept = a2a_pb2.Artifact()
            kept.CopyFrom(artifact)
            remote.artifacts[artifact.artifact_id] = kept
            remote.streamed.pop(artifact.artifact_id, None)
        events: list[Event] = []
        if not update.last_chunk:
            # Streamed text shows as it comes; the whole artifact is the stored event.
            text = "".join(part.text for part in artifact.parts if part.HasField("text"))
            shown = remote.streamed.get(artifact.artifact_id, "")
            whole = "".join(part.text for part in kept.parts if part.HasField("text"))
            new = whole[len(shown) :] if whole.startswith(shown) else text
            if new:
                remote.streamed[artifact.artifact_id] = whole
                events.append(self._event(ctx, Content.from_text("model", new), partial=True))
        return events

    async def _artifacts_left(self, remote: _Remote, ctx: InvocationContext) -> list[Event]:
        """One event per artifact received whole (then forgotten), in the order they came."""
        events: list[Event] = []
        for artifact_id in list(remote.artifacts):
            artifact = remote.artifacts.pop(artifact_id)
            remote.streamed.pop(artifact_id, None)
            remote.done.add(artifact_id)
            event = await self._artifact_event(artifact, ctx)
            if event is not None:
                events.append(event)
        return events

    async def _artifact_event(
        self, artifact: a2a_pb2.Artifact, ctx: InvocationContext
    ) -> Event | None:
        """The event of one whole artifact: its text and data as content; its files saved in
        this invocation's artifact store (or, without one, in the content)."""
        content = self._content(artifact.parts)
        if content is None:
            return None
        store = ctx.artifact_service
        readable = [part for part in content.parts if part.inline_data is None or store is None]
        files = [part for part in content.parts if part.inline_data is not None]
        event = self._event(ctx, Content(role="model", parts=readable) if readable else None)
        if store is None or not files:
            return event
        # The remote names its files, but they stay in this session: a "user:" name would put
        # them in the user's scope, replacing a file every session of the user reads.
        name = (artifact.name or artifact.artifact_id).removeprefix(USER_ARTIFACT_PREFIX)
        saved: dict[str, int] = {}
        for index, part in enumerate(files):
            filename = name if len(files) == 1 else f"{name}-{index}"
            try:
                check_artifact_name(filename)
            except InvalidArgumentError:
                filename = f"a2a-artifact-{len(saved)}"
            saved[filename] = await store.save_artifact(
                app_name=ctx.app_name,
                user_id=ctx.user_id,
                session_id=ctx.session_id,
                filename=filename,
                artifact=part,
            )
        event.actions = EventActions(artifact_delta=saved)
        return event


_FINISHED = frozenset(
    {
        "TASK_STATE_COMPLETED",
        "TASK_STATE_FAILED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_REJECTED",
        "TASK_STATE_INPUT_REQUIRED",
        "TASK_STATE_AUTH_REQUIRED",
    }
)
_FAILURES = {
    "TASK_STATE_FAILED": ("A2A_FAILED", "the remote task failed"),
    "TASK_STATE_REJECTED": ("A2A_REJECTED", "the remote agent rejected the task"),
    "TASK_STATE_CANCELED": ("A2A_CANCELED", "the remote task was canceled"),
    "TASK_STATE_AUTH_REQUIRED": ("A2A_AUTH_REQUIRED", "the remote agent asks for authentication"),
}


class _End:
    """The end of a call's stream, in its queue."""


_END = _End()


class _RemoteCall:
    """One ``SendStreamingMessage`` call, its stream read by a task of its own.

    The run takes the responses with :meth:`next`. The reader notes the remote task's id and
    state from every response as it reads it, so that when the run is over (:meth:`close`)
    a task still going on can be cancelled — even one the run never heard of: a run closed
    before the first event keeps the reader going (at most :data:`CANCEL_TIMEOUT` seconds)
    until an event names the task, and then cancels it. The stream is only ever read, and
    closed, by the reader's task.
    """

    def __init__(
        self,
        agent_name: str,
        client: Client,
        stream: AsyncIterator[a2a_pb2.StreamResponse],
        *,
        task_id: str,
        headers: Mapping[str, str],
        redact: Callable[[str], str],
    ) -> None:
        self._agent_name = agent_name
        self._client = client
        self._headers = dict(headers)
        self._redact = redact
        #: The remote task (known from the start when the message continues one) and its
        #: last state, as the reader saw them.
        self.task_id = task_id
        self.state = ""
        self._queue: asyncio.Queue[a2a_pb2.StreamResponse | BaseException | _End] = asyncio.Queue(
            _READ_AHEAD
        )
        self._closed = False
        self._reader = asyncio.ensure_future(self._read(stream))

    async def next(self) -> a2a_pb2.StreamResponse | None:
        """The next response; ``None`` once the stream ended.

        Raises:
            Exception: what reading the stream raised.
        """
        item = await self._queue.get()
        if isinstance(item, _End):
            return None
        if isinstance(item, BaseException):
            raise item
        return item

    async def _read(self, stream: AsyncIterator[a2a_pb2.StreamResponse]) -> None:
        outcome: BaseException | _End = _END
        try:
            async for response in stream:
                self._note(response)
                if not self._closed:
                    await self._queue.put(response)
                elif self.task_id:
                    break  # closed, and now the task can be named: close() cancels it
        except Exception as error:
            outcome = error
        finally:
            closing = getattr(stream, "aclose", None)
            if closing is not None:
                with contextlib.suppress(Exception):
                    await closing()
        if not self._closed:
            await self._queue.put(outcome)

    def _note(self, response: a2a_pb2.StreamResponse) -> None:
        from a2a.types import a2a_pb2

        kind = response.WhichOneof("payload")
        task_id = ""
        if kind == "task":
            task_id = response.task.id
            self.state = a2a_pb2.TaskState.Name(response.task.status.state)
        elif kind == "status_update":
            task_id = response.status_update.task_id
            self.state = a2a_pb2.TaskState.Name(response.status_update.status.state)
        elif kind == "artifact_update":
            task_id = response.artifact_update.task_id
        elif kind == "message":
            self.state = "TASK_STATE_COMPLETED"  # a direct reply: no task goes on
        if task_id and not self.task_id:
            self.task_id = task_id

    def close(self) -> None:
        """The run is over: cancel a remote task still going on (in the background, as the
        run is being closed), once it is named (see the class docstring)."""
        if self._closed:
            return
        self._closed = True
        while not self._queue.empty():  # a reader waiting to hand a response over goes on
            self._queue.get_nowait()
        if self._reader.done() and (not self.task_id or self.state in _FINISHED):
            return
        task = asyncio.ensure_future(self._settle())
        _cancellations.add(task)
        task.add_done_callback(_cancellations.discard)

    async def _settle(self) -> None:
        if not self.task_id and not self._reader.done():
            # The first event has not come: read on until one names the task.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CANCEL_TIMEOUT):
                    await asyncio.wait([self._reader])
        if not self._reader.done():
            self._reader.cancel()
            await asyncio.wait([self._reader])  # its stream closed (what it raised is moot)
        if not self.task_id or self.state in _FINISHED:
            if not self.task_id:
                logger.info(
                    "A2A agent %r: no event named the remote task within %gs; it is not cancelled",
                    self._agent_name,
                    CANCEL_TIMEOUT,
                )
            return
        from a2a.client import ClientCallContext
        from a2a.types import a2a_pb2

        try:
            async with asyncio.timeout(CANCEL_TIMEOUT):
                await self._client.cancel_task(
                    a2a_pb2.CancelTaskRequest(id=self.task_id),
                    context=ClientCallContext(service_parameters=dict(self._headers)),
                )
        except Exception as error:  # the run is over: a failed cancel is only logged
            logger.info(
                "A2A agent %r: cancelling task %s failed: %s",
                self._agent_name,
                self.task_id,
                self._redact(str(error)),
            )


class _CutShort(AdkError):
    """A remote task's stream that ended before the task did."""


class _Unavailable(Exception):
    """The remote agent cannot be used: its card unreachable or unfit."""


def _card_request(url: str) -> tuple[str, dict[str, Any]]:
    """The base URL to give the card resolver, and the card request's keyword arguments:
    the resolver appends the card's path to the base as text, so a query string must travel
    as the request's ``params`` (else it would end in the middle of the query), and the user
    info as its ``auth`` (what httpx makes of it; the SDK logs the base URL it is given)."""
    parts = urllib.parse.urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    request: dict[str, Any] = {}
    if at:
        user, _, password = userinfo.partition(":")
        request["auth"] = (urllib.parse.unquote(user), urllib.parse.unquote(password))
    if parts.query:
        request["params"] = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    base = urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))
    return base, request


def _code_of(error: BaseException) -> str:
    name = type(error).__name__
    if "Timeout" in name:
        return "DEADLINE_EXCEEDED"
    if name in ("A2AClientError", "ConnectError", "ConnectTimeout", "AgentCardResolutionError"):
        return "A2A_UNAVAILABLE"
    return "A2A_ERROR"


def _message_of(error: BaseException) -> str:
    message = getattr(error, "message", None)
    text = message if isinstance(message, str) and message else str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def a2a_agents_from_env(environ: Mapping[str, str] | None = None) -> list[A2aAgent]:
    """The remote A2A agents ``ADK_MESH_A2A_AGENTS`` names (what ``adk-mesh up`` sets from a
    service's ``[services.<name>.a2a_agents.<agent>]`` tables), in the order given; none when
    it is unset.

    The variable holds a JSON object of agent name to settings: ``{"weather": {"url":
    "https://weather.example/a2a", "description": "...", "binding": "grpc", "timeout": 30,
    "headers": {"x-api-key": "..."}}}`` (only ``url`` is required). Each becomes an
    :class:`A2aAgent` of that name, for the service's module to place in its tree: a model
    transfers to it as a sub-agent, or calls it as ``AgentTool(agent)``.

    Raises:
        ConfigError: the variable is not such a JSON object (the message names the agent and
            the key).
    """
    tables = tables_from_env(
        A2A_AGENTS_ENV,
        known_keys=_ENV_KEYS,
        entry="agent",
        expected="an object with a url",
        environ=environ,
    )
    return [_agent_from_config(name, settings) for name, settings in tables.items()]


def _agent_from_config(name: str, settings: dict[str, Any]) -> A2aAgent:
    where = f"{A2A_AGENTS_ENV} {name!r}"
    url, description = settings.get("url"), settings.get("description", "")
    binding, timeout = settings.get("binding"), settings.get("timeout")
    headers = settings.get("headers", {})
    if not isinstance(url, str) or not url:
        raise ConfigError(f"{where}: url must be a non-empty string")
    if not isinstance(description, str):
        raise ConfigError(f"{where}: description must be a string")
    if binding is not None and binding not in _BINDINGS:
        raise ConfigError(f"{where}: binding must be one of {', '.join(_BINDINGS)}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int | float)):
        raise ConfigError(f"{where}: timeout must be a number of seconds")
    if not isinstance(headers, dict) or not all(
        isinstance(value, str) for value in headers.values()
    ):
        raise ConfigError(f"{where}: headers must be an object of strings")
    return A2aAgent(
        name,
        url,
        description=description,
        binding=binding,
        timeout=None if timeout is None else float(timeout),
        headers=headers,
    )
