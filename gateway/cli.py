"""``adk-mesh gateway``: serve google-adk's api_server API over the mesh, on uvicorn.

::

    adk-mesh gateway --port 8000 --app travel_desk=127.0.0.1:50051 [--app NAME=ADDRESS ...]
    adk-mesh gateway --config mesh.toml          # the [gateway] table and the mesh's services

Once it accepts connections it prints ``adk-mesh: serving gateway on <host>:<port>`` (the real
port for ``--port 0``). TLS to the agent services follows ``--mesh-ca``/``--mesh-cert``/
``--mesh-key`` or ``ADK_MESH_TLS_CA``/``_CERT``/``_KEY`` (with a certificate: mutual TLS). The
gateway's own port serves HTTPS with ``--tls-cert``/``--tls-key``; beyond loopback it refuses
plaintext unless ``--insecure``. Users authenticate as at the services (``--auth-jwks`` with
``--auth-issuer``/``--auth-audience``, ``--auth-api-keys``). SIGTERM or Ctrl-C stops it: open
event streams end and their runs are cancelled.

Exit codes: 0 stopped, 2 a usage or configuration error (one ``error:`` line on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from adk_mesh.errors import ConfigError
from adk_mesh.mesh.security import (
    ClientTLS,
    ServerTLS,
    add_authentication_arguments,
    authenticators_from_arguments,
    is_loopback,
    port_argument,
)
from gateway._settings import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_RUN_TIMEOUT,
    GatewaySettings,
    parse_app,
)

__all__ = ["build_parser", "main"]

READY = "adk-mesh: serving gateway on {host}:{port}"

logger = logging.getLogger("gateway")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"error: {message}; see {self.prog} --help\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="adk-mesh gateway",
        description="Serve google-adk's api_server REST and SSE API over an adk-mesh.",
    )
    parser.add_argument("--port", type=port_argument, help="port (0: any free port; default 8000)")
    parser.add_argument("--host", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--app",
        action="append",
        default=[],
        metavar="NAME=ADDRESS",
        help="an app and the host:port of the agent service that serves it; repeatable",
    )
    parser.add_argument(
        "--request-header",
        action="append",
        default=[],
        metavar="NAME",
        help="an HTTP header of run requests that reaches the run as request metadata "
        "(tool_context.request_metadata); repeatable; none by default",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="a mesh config (mesh.toml): its [gateway] table, apps at its services' ports",
    )
    group = parser.add_argument_group("TLS")
    group.add_argument("--tls-cert", metavar="FILE", help="this gateway's certificate (HTTPS)")
    group.add_argument("--tls-key", metavar="FILE", help="its private key")
    group.add_argument(
        "--insecure", action="store_true", help="serve plaintext HTTP beyond loopback"
    )
    group.add_argument("--mesh-ca", metavar="FILE", help="CA of the agent services (TLS to them)")
    group.add_argument(
        "--mesh-cert", metavar="FILE", help="this gateway's client certificate (mutual TLS)"
    )
    group.add_argument("--mesh-key", metavar="FILE", help="its private key")
    add_authentication_arguments(parser.add_argument_group("users"))
    limits = parser.add_argument_group("requests")
    limits.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="an origin browsers may call from (https://app.example.com); repeatable",
    )
    limits.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        metavar="N",
        help=f"largest request body (default {DEFAULT_MAX_BODY_BYTES})",
    )
    limits.add_argument(
        "--run-timeout",
        type=float,
        default=DEFAULT_RUN_TIMEOUT,
        metavar="SECONDS",
        help=f"deadline of a run (default {DEFAULT_RUN_TIMEOUT:g}); clients may ask for less",
    )
    parser.add_argument(
        "--log-level", default="warning", choices=["debug", "info", "warning", "error"]
    )
    return parser


def _mesh_tls(args: argparse.Namespace) -> ClientTLS | None:
    if args.mesh_ca or args.mesh_cert or args.mesh_key:
        return ClientTLS(ca_file=args.mesh_ca, cert_file=args.mesh_cert, key_file=args.mesh_key)
    return ClientTLS.from_env()


def settings_from_arguments(args: argparse.Namespace) -> tuple[GatewaySettings, str, int]:
    """The settings, host and port the arguments ask for.

    Raises:
        ConfigError: arguments that do not go together, files that do not exist.
    """
    apps = dict(parse_app(text) for text in args.app)
    host, port = args.host, args.port
    tls = _mesh_tls(args)
    cors = list(args.cors_origin)
    if args.config:
        from adk_mesh.up import gateway_options, load_config

        options = gateway_options(load_config(args.config))
        apps = {**options.apps, **apps}
        host = host or options.host
        port = options.port if port is None else port
        cors = [*options.cors_origins, *cors]
        if tls is None:
            tls = options.tls
    if not apps:
        raise ConfigError("no app to serve: give --app NAME=HOST:PORT (or --config mesh.toml)")
    if tls is not None:
        # Read and checked now, naming the file that is wrong: otherwise the gateway serves,
        # and every call to the agent services fails.
        tls.credentials()
    settings = GatewaySettings(
        apps=apps,
        tls=tls,
        authenticators=authenticators_from_arguments(args),
        cors_origins=tuple(cors),
        max_body_bytes=args.max_body_bytes,
        run_timeout=args.run_timeout,
        request_headers=tuple(name.lower() for name in args.request_header),
    )
    return settings, host or "127.0.0.1", 8000 if port is None else port


def _bind(host: str, port: int) -> socket.socket:
    name = host.strip("[]")
    family = socket.AF_INET6 if ":" in name else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((name, port))
    except OSError as error:
        sock.close()
        reason = "the port is taken" if error.errno == 98 else (error.strerror or str(error))
        raise ConfigError(f"cannot bind {host}:{port}: {reason}") from None
    # Accepted connections inherit it: without it, a response written in several small sends
    # (headers, body, end) waits on the client's delayed ACK, some 40 ms per request.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.listen(1024)
    sock.setblocking(False)
    return sock


async def serve(
    settings: GatewaySettings,
    host: str,
    port: int,
    *,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    log_level: str = "warning",
) -> None:
    """Serve the gateway until SIGTERM or SIGINT; print the ready line once it accepts."""
    import uvicorn

    from adk_mesh.mesh._drain import HttpGate
    from gateway._app import create_app

    sock = _bind(host, port)
    # Read now: uvicorn closes the socket when it stops, which a signal during its start
    # makes it do right after it started.
    bound = sock.getsockname()[1]
    gate = HttpGate(create_app(settings), jsonrpc=False)
    config = uvicorn.Config(
        gate,
        log_level=log_level,
        ssl_certfile=tls_cert,
        ssl_keyfile=tls_key,
        timeout_graceful_shutdown=5,
        proxy_headers=False,
        server_header=False,
    )
    server = uvicorn.Server(config)
    # SIGTERM and SIGINT stop the server gracefully, and the command then exits 0 as
    # `adk-mesh serve` does (uvicorn's own handlers raise the signal again once stopped).
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]
    loop = asyncio.get_running_loop()

    def stop(number: int) -> None:
        # uvicorn's shutdown misses a connection accepted in the turn it closes the listener:
        # the gate refuses what such a connection still sends.
        gate.close()
        server.handle_exit(number, None)

    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, stop, number)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    # uvicorn sets `started` and offers nothing to await: poll until it is up (or failed).
    while not server.started and not task.done():  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    if server.started and not server.should_exit:
        # Not when a signal came during the start: it is stopping, not ready.
        print(READY.format(host=host, port=bound), flush=True)
    await task


def main(argv: Sequence[str] | None = None) -> int:
    """``adk-mesh gateway ...``; the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        import fastapi  # noqa: F401
        import sse_starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as error:
        print(
            f"error: the gateway needs {error.name}: pip install 'adk-mesh[gateway]'",
            file=sys.stderr,
        )
        return 2
    from adk_mesh.telemetry import configure_telemetry

    try:
        settings, host, port = settings_from_arguments(args)
        if bool(args.tls_cert) != bool(args.tls_key):
            raise ConfigError("--tls-cert and --tls-key go together")
        for path in (args.tls_cert, args.tls_key):
            if path and not Path(path).is_file():
                problem = "is a directory" if Path(path).is_dir() else "does not exist"
                raise ConfigError(f"the TLS file {path!r} {problem}")
        if args.tls_cert:
            # Read and checked as `adk-mesh serve` does (whole PEM, a certificate and key that
            # go together): uvicorn would fail on them later, with an ssl.SSLError traceback.
            ServerTLS(args.tls_cert, args.tls_key).credentials(require_client_certificate=False)
        if not args.tls_cert and not is_loopback(host):
            if not args.insecure:
                raise ConfigError(
                    f"refusing to serve plaintext HTTP on {host}, beyond this machine: give "
                    "--tls-cert and --tls-key, or --insecure on a network you trust"
                )
            logger.warning("serving PLAINTEXT HTTP on %s (--insecure)", host)
        if not settings.authenticators:
            logger.warning("no authenticator: a request's user is whoever its path names")
        telemetry = configure_telemetry("adk-mesh-gateway")
    except ConfigError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 2
    try:
        asyncio.run(
            serve(
                settings,
                host,
                port,
                tls_cert=args.tls_cert,
                tls_key=args.tls_key,
                log_level=args.log_level,
            )
        )
    except ConfigError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        telemetry.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
