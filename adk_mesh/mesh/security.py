"""Transport security and the two doors of every service, with grpcio's own credentials.

**Transport.** A server serves TLS with :class:`ServerTLS` (its certificate and key, and the CA
its mesh peers' client certificates must chain to); a client connects with :class:`ClientTLS`
(the CA to trust, and its own certificate for mutual TLS), by default from ``ADK_MESH_TLS_CA``,
``ADK_MESH_TLS_CERT`` and ``ADK_MESH_TLS_KEY``. Certificate files are read again when they change
(a server's at its next handshake, a client's at its next call): rotation needs no restart.

**The two doors.** End users come in by the *front door*: root runs and ``Describe``. Other
services of the mesh come in by the *mesh door*: delegated runs, ``ListTools`` and ``CallTool`` —
the calls that assert a user, a session view or an invocation context. A mesh-door call is
accepted only from a *peer*: a caller that proved, with a client certificate signed by the mesh
CA, an identity (a DNS or URI subject alternative name, such as ``spiffe://mesh/planner``) in the
server's allow-list. Anyone else gets PERMISSION_DENIED.

With TLS the mesh door has a port of its own (``--mesh-port``), where a client certificate is
required; the front door's port never asks for one. One port cannot do both here: grpcio's server
credentials either never request a client certificate or require one (gRPC's C core can request
one optionally, but the Python API does not expose it), and the front door must take end users
who have none. Both ports are one server: the same servicers, limits and drain.

Without TLS — development on loopback — there is one port, and its mesh door is open to loopback
peers only. A server bound beyond loopback without TLS refuses to start unless told
``insecure=True`` (``--insecure``), and then says so in its log.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import grpc
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from adk_mesh.errors import ConfigError
from adk_mesh.mesh._watched import WatchedFiles
from adk_mesh.mesh.auth import ApiKeyAuthenticator, Authenticator, JwtAuthenticator

__all__ = [
    "API_KEY_ENV",
    "TLS_CA_ENV",
    "TLS_CERT_ENV",
    "TLS_KEY_ENV",
    "TOKEN_ENV",
    "ClientTLS",
    "ServerSecurity",
    "ServerTLS",
    "add_server_security_arguments",
    "check_transport",
    "grace_default",
    "is_local_peer",
    "is_loopback",
    "port_argument",
    "seconds_argument",
    "server_security_from_arguments",
]

TLS_CA_ENV = "ADK_MESH_TLS_CA"
TLS_CERT_ENV = "ADK_MESH_TLS_CERT"
TLS_KEY_ENV = "ADK_MESH_TLS_KEY"
#: A bearer token ``adk-mesh run`` and ``describe`` send (``--token``).
TOKEN_ENV = "ADK_MESH_TOKEN"
#: An API key ``adk-mesh run`` and ``describe`` send (``--api-key``).
API_KEY_ENV = "ADK_MESH_API_KEY"

logger = logging.getLogger(__name__)


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise ConfigError(f"cannot read the {what} {str(path)!r}: {error.strerror}") from None


def _read_certificates(path: Path, what: str) -> bytes:
    """The PEM certificates of ``path``, checked to parse (a half-written file does not)."""
    data = _read(path, what)
    try:
        x509.load_pem_x509_certificates(data)
    except ValueError:
        raise ConfigError(f"the {what} {str(path)!r} holds no whole PEM certificate") from None
    return data


def _read_key_pair(cert_path: Path, key_path: Path) -> tuple[bytes, bytes]:
    """A certificate chain and its private key, checked to parse and to go together.

    gRPC checks neither before a handshake: a renewal caught half-written (the new certificate
    with the old key) would otherwise fail every connection made with it.
    """
    cert = _read_certificates(cert_path, "certificate")
    key = _read(key_path, "key")
    try:
        private_key = serialization.load_pem_private_key(key, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise ConfigError(
            f"the key {str(key_path)!r} is not a whole, unencrypted PEM private key"
        ) from None
    leaf = x509.load_pem_x509_certificate(cert)
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if leaf.public_key().public_bytes(*spki) != private_key.public_key().public_bytes(*spki):
        raise ConfigError(
            f"the certificate {str(cert_path)!r} and the key {str(key_path)!r} do not match"
        )
    return cert, key


@dataclass(frozen=True)
class ServerTLS:
    """A server's TLS: its certificate chain and key (PEM files), and for the mesh door the CA
    its peers' client certificates must chain to.

    The files are read again at the first handshake after any of them changed (a renewed
    certificate is served to new connections without a restart; a half-written file is skipped
    until it is whole).
    """

    cert_file: str | Path
    key_file: str | Path
    client_ca_file: str | Path | None = None

    def __post_init__(self) -> None:
        for what, path in (
            ("certificate", self.cert_file),
            ("key", self.key_file),
            ("client CA", self.client_ca_file),
        ):
            if path is not None and not Path(path).is_file():
                # A directory (`--tls-cert certs/`) exists: saying it does not would mislead.
                problem = "is a directory" if Path(path).is_dir() else "does not exist"
                raise ConfigError(f"the TLS {what} file {str(path)!r} {problem}")

    def credentials(self, *, require_client_certificate: bool) -> grpc.ServerCredentials:
        """Server credentials that follow the files; with ``require_client_certificate``, a
        client must present a certificate signed by the client CA."""
        if require_client_certificate and self.client_ca_file is None:
            raise ConfigError("a mesh door needs the CA of its peers' certificates (client CA)")
        rotating = _RotatingServerCertificate(self, with_client_ca=require_client_certificate)
        return grpc.dynamic_ssl_server_credentials(
            rotating.initial,
            rotating.fetch,
            require_client_authentication=require_client_certificate,
        )


class _RotatingServerCertificate:
    """The certificate configuration of a server, reloaded when its files change."""

    def __init__(self, tls: ServerTLS, *, with_client_ca: bool) -> None:
        paths = [Path(tls.cert_file), Path(tls.key_file)]
        if with_client_ca and tls.client_ca_file is not None:
            paths.append(Path(tls.client_ca_file))
        self._files = WatchedFiles(paths, lambda: self._load(paths))
        self.initial = self._files.get()
        self._served = self.initial

    @staticmethod
    def _load(paths: list[Path]) -> Any:
        cert, key = _read_key_pair(paths[0], paths[1])
        client_ca = _read_certificates(paths[2], "client CA") if len(paths) > 2 else None
        return grpc.ssl_server_certificate_configuration([(key, cert)], client_ca)

    def fetch(self) -> Any:
        """Called by gRPC at each new handshake: a new configuration, or ``None`` to keep."""
        # gRPC would refuse a configuration of files that do not load and keep the previous
        # one: the previous one is what it gets, said once.
        configuration = self._files.get_or_kept("still serving the previous certificate")
        if configuration is self._served:
            return None
        self._served = configuration
        logger.info("TLS certificate reloaded from %s", self._files.paths[0])
        return configuration


@dataclass(frozen=True)
class ClientTLS:
    """A client's TLS: the CA that signs the servers' certificates (``None``: the system's
    roots), and for the mesh door this service's own certificate and key (mutual TLS).

    A channel of :func:`~adk_mesh.mesh._channel.open_channel` follows the files: the calls
    made after they changed (and load as a matching certificate and key) use the new ones.
    """

    ca_file: str | Path | None = None
    cert_file: str | Path | None = None
    key_file: str | Path | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigError("a client certificate needs its key, and a key its certificate")

    @classmethod
    def from_env(cls) -> ClientTLS | None:
        """From ``ADK_MESH_TLS_CA``, ``ADK_MESH_TLS_CERT`` and ``ADK_MESH_TLS_KEY``; ``None``
        when none is set (plaintext)."""
        ca, cert, key = (os.environ.get(name, "").strip() for name in _CLIENT_ENV)
        if not (ca or cert or key):
            return None
        return cls(ca_file=ca or None, cert_file=cert or None, key_file=key or None)

    @property
    def files(self) -> tuple[Path, ...]:
        """The files these credentials are read from (none: the system's roots, no
        certificate)."""
        return tuple(
            Path(path) for path in (self.ca_file, self.cert_file, self.key_file) if path is not None
        )

    def credentials(self) -> grpc.ChannelCredentials:
        """Credentials from the files as they are now.

        Raises:
            ConfigError: a file cannot be read, is not whole PEM, or the certificate and key
                do not match (e.g. a renewal half-written).
        """
        ca = _read_certificates(Path(self.ca_file), "CA") if self.ca_file is not None else None
        cert = key = None
        if self.cert_file is not None and self.key_file is not None:
            cert, key = _read_key_pair(Path(self.cert_file), Path(self.key_file))
        return grpc.ssl_channel_credentials(
            root_certificates=ca, private_key=key, certificate_chain=cert
        )


_CLIENT_ENV = (TLS_CA_ENV, TLS_CERT_ENV, TLS_KEY_ENV)


@dataclass(frozen=True)
class ServerSecurity:
    """Who a server lets in, and over what.

    Attributes:
        tls: the server's TLS; ``None`` serves plaintext (loopback only, unless ``insecure``).
        allow_peers: the identities (certificate SANs: DNS names, ``spiffe://`` URIs) allowed
            through the mesh door.
        authenticators: how end users prove who they are at the front door; none: the user is
            whoever the request names (development only).
        insecure: serve plaintext beyond loopback (a trusted network; logged loudly).
    """

    tls: ServerTLS | None = None
    allow_peers: frozenset[str] = field(default_factory=frozenset)
    authenticators: tuple[Authenticator, ...] = ()
    insecure: bool = False

    @property
    def mutual_tls(self) -> bool:
        return self.tls is not None and self.tls.client_ca_file is not None


def is_loopback(host: str) -> bool:
    """Whether ``host`` (of a bind address) is a loopback address or ``localhost``."""
    name = host.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


#: How grpc names a peer of this machine (``context.peer()``).
_LOCAL_PEERS = ("ipv4:127.", "ipv6:[::1]", "unix:")


def is_local_peer(peer: object) -> bool:
    """Whether ``peer`` (a ``ServicerContext.peer()``) is a process of this machine: over
    loopback, or a unix socket."""
    return isinstance(peer, str) and peer.startswith(_LOCAL_PEERS)


def check_transport(address: str, security: ServerSecurity) -> None:
    """Refuse plaintext beyond loopback unless ``security.insecure`` says so.

    Raises:
        ConfigError: ``address`` is not a loopback address and there is no TLS.
    """
    if plaintext_beyond_loopback(address, security) and not security.insecure:
        raise ConfigError(
            f"refusing to serve plaintext on {address}, beyond this machine: give a TLS "
            "certificate and key, or --insecure on a network you trust"
        )


def plaintext_beyond_loopback(address: str, security: ServerSecurity) -> bool:
    return security.tls is None and not is_loopback(address.rpartition(":")[0])


# --- the command line -------------------------------------------------------------------------


def add_server_security_arguments(parser: argparse.ArgumentParser) -> None:
    """The security flags of a server command (``adk-mesh serve``, the reference services)."""
    group = parser.add_argument_group("security")
    group.add_argument("--tls-cert", metavar="FILE", help="server certificate chain (PEM)")
    group.add_argument("--tls-key", metavar="FILE", help="server private key (PEM)")
    group.add_argument(
        "--tls-client-ca",
        metavar="FILE",
        help="CA of the mesh peers' client certificates (opens the mesh door on --mesh-port)",
    )
    group.add_argument(
        "--mesh-port",
        type=int,
        metavar="PORT",
        help="port of the mesh door (mutual TLS; 0: any free port)",
    )
    group.add_argument(
        "--allow-peer",
        action="append",
        default=[],
        metavar="ID",
        help="a peer identity (certificate SAN: DNS name or URI) let through the mesh door; "
        "repeatable",
    )
    group.add_argument(
        "--insecure",
        action="store_true",
        help="serve plaintext beyond loopback (a trusted network only)",
    )
    add_authentication_arguments(group)


def add_authentication_arguments(group: Any) -> None:
    """The flags of end users' authentication (``adk-mesh serve``, ``adk-mesh gateway``)."""
    group.add_argument("--auth-jwks", metavar="FILE|URL", help="JWKS of end users' bearer JWTs")
    group.add_argument("--auth-issuer", metavar="ISS", help="the issuer JWTs must name")
    group.add_argument("--auth-audience", metavar="AUD", help="the audience JWTs must name")
    group.add_argument(
        "--auth-user-claim", default="sub", metavar="CLAIM", help="claim with the user id"
    )
    group.add_argument(
        "--auth-jwks-max-stale",
        type=seconds_argument,
        metavar="SECONDS",
        help="how long past their 5 minutes the keys last fetched from the --auth-jwks URL "
        "keep verifying while it cannot be fetched (default 3600; 0: not at all)",
    )
    group.add_argument(
        "--auth-jwks-refresh-cooldown",
        type=seconds_argument,
        metavar="SECONDS",
        help="the --auth-jwks URL is fetched again for an unknown key id at most this often "
        "(default 30)",
    )
    group.add_argument(
        "--auth-api-keys",
        metavar="FILE",
        help="API keys of end users: lines of '<sha256 hex> <user id>'",
    )


def seconds_argument(text: str) -> float:
    """A duration flag's value, 0 or more seconds (argparse ``type``: ``--grace``, the JWKS
    flags): argparse's error then names the flag, and the process exits 2 before anything
    starts (the authenticator refuses the same values, naming its argument)."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(seconds) and seconds >= 0):
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds (0 or more)")
    return seconds


def grace_default(fallback: float) -> float | str:
    """A server's ``--grace`` default: ``ADK_MESH_GRACE`` when set (``adk-mesh up`` sets it to
    the mesh's grace, the drain it waits for before SIGKILL), else ``fallback``. The variable's
    text is handed to argparse as it is, which reads a text default through the flag's
    ``type``: a bad value is the flag's usage error (exit 2), not a traceback."""
    return os.environ.get("ADK_MESH_GRACE", "").strip() or fallback


def port_argument(text: str) -> int:
    """A port flag's value, 0 to 65535 (argparse ``type``: ``--port`` of ``serve`` and the
    gateway, ``--mesh-port``, ...): out of range, ``socket.bind`` raises OverflowError (a
    traceback) and gRPC binds another port."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (0 to 65535)")
    return port


class _JwksTuning(TypedDict, total=False):
    jwks_max_stale: float
    jwks_refresh_cooldown: float


def authenticators_from_arguments(args: argparse.Namespace) -> tuple[Authenticator, ...]:
    """The authenticators :func:`add_authentication_arguments`' flags name.

    Raises:
        ConfigError: JWT flags given in part, or JWKS URL flags without a JWKS URL.
    """
    found: list[Authenticator] = []
    given = [
        flag
        for flag, value in (
            ("--auth-jwks-max-stale", args.auth_jwks_max_stale),
            ("--auth-jwks-refresh-cooldown", args.auth_jwks_refresh_cooldown),
        )
        if value is not None
    ]
    if given and not str(args.auth_jwks or "").startswith(("https://", "http://")):
        # A JWKS file is read again when it changes: the flag would do nothing, and let an
        # operator believe the staleness or the fetches bounded as they asked.
        raise ConfigError(f"{given[0]} tunes the fetches of a JWKS URL: give --auth-jwks a URL")
    tuning: _JwksTuning = {}  # unset, the authenticator's defaults hold
    if args.auth_jwks_max_stale is not None:
        tuning["jwks_max_stale"] = args.auth_jwks_max_stale
    if args.auth_jwks_refresh_cooldown is not None:
        tuning["jwks_refresh_cooldown"] = args.auth_jwks_refresh_cooldown
    if args.auth_jwks:
        if not (args.auth_issuer and args.auth_audience):
            raise ConfigError("--auth-jwks needs --auth-issuer and --auth-audience")
        found.append(
            JwtAuthenticator(
                args.auth_jwks,
                issuer=args.auth_issuer,
                audience=args.auth_audience,
                user_claim=args.auth_user_claim,
                **tuning,
            )
        )
    elif args.auth_issuer or args.auth_audience:
        raise ConfigError("--auth-issuer and --auth-audience go with --auth-jwks")
    if args.auth_api_keys:
        found.append(ApiKeyAuthenticator(args.auth_api_keys))
    return tuple(found)


def server_security_from_arguments(args: argparse.Namespace) -> ServerSecurity:
    """The :class:`ServerSecurity` the flags of :func:`add_server_security_arguments` ask for.

    Raises:
        ConfigError: flags that do not go together, or files that do not exist.
    """
    tls: ServerTLS | None = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            raise ConfigError("--tls-cert and --tls-key go together")
        tls = ServerTLS(args.tls_cert, args.tls_key, args.tls_client_ca)
    elif args.tls_client_ca:
        raise ConfigError("--tls-client-ca needs --tls-cert and --tls-key")
    if args.mesh_port is not None and (tls is None or tls.client_ca_file is None):
        raise ConfigError("--mesh-port is the mutual-TLS door: give --tls-client-ca too")
    if tls is not None and tls.client_ca_file is not None and args.mesh_port is None:
        raise ConfigError("--tls-client-ca opens the mesh door: give it --mesh-port")
    if args.allow_peer and (tls is None or tls.client_ca_file is None):
        raise ConfigError("--allow-peer names mutual-TLS peers: give --tls-client-ca too")
    authenticators = authenticators_from_arguments(args)
    return ServerSecurity(
        tls=tls,
        allow_peers=frozenset(args.allow_peer),
        authenticators=tuple(authenticators),
        insecure=args.insecure,
    )


def peer_identities(auth_context: Any) -> frozenset[str]:
    """The identities a verified client certificate proves: its subject alternative names."""
    names: Sequence[bytes] = auth_context.get("x509_subject_alternative_name", ())
    return frozenset(name.decode(errors="replace") for name in names)
