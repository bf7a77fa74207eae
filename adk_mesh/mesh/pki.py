"""A development certificate authority: a CA and one certificate per service, with
``cryptography``.

``adk-mesh up`` keeps one under ``.adk-mesh/pki/`` so the reference mesh runs with mutual TLS
out of the box; tests make them in a temporary folder. A production mesh takes its certificates
from its own PKI (cert-manager, SPIFFE/SPIRE, a cloud CA) — the servers only read PEM files.

Each service certificate is valid for serving (server auth) and for calling (client auth), and
names the service by a DNS name, ``localhost``, the loopback addresses and a SPIFFE-style URI,
``spiffe://<trust domain>/<service>`` — the identity the mesh door's allow-lists name.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["DEFAULT_TRUST_DOMAIN", "DevCertificateAuthority", "IssuedCertificate", "spiffe_id"]

DEFAULT_TRUST_DOMAIN = "adk-mesh.local"
_CA_DAYS = 365
_LEAF_DAYS = 30
# A certificate this close to its end is issued again rather than reused.
_RENEW_BEFORE = datetime.timedelta(days=3)


def spiffe_id(service: str, trust_domain: str = DEFAULT_TRUST_DOMAIN) -> str:
    """The identity of ``service`` in its certificate and in allow-lists."""
    return f"spiffe://{trust_domain}/{service}"


@dataclass(frozen=True)
class IssuedCertificate:
    """A service's certificate and key files, and the CA file that verifies them."""

    cert_file: Path
    key_file: Path
    ca_file: Path
    identity: str


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)


def _valid_until(path: Path) -> datetime.datetime | None:
    try:
        certificate = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError):
        return None
    return certificate.not_valid_after_utc


class DevCertificateAuthority:
    """A CA in ``directory`` (``ca.pem``, ``ca-key.pem``), created on first use and reused while
    valid; :meth:`issue` makes (or reuses) a service's certificate next to it."""

    def __init__(self, directory: str | Path, *, trust_domain: str = DEFAULT_TRUST_DOMAIN) -> None:
        self.directory = Path(directory)
        self.trust_domain = trust_domain
        self.ca_file = self.directory / "ca.pem"
        self._key_file = self.directory / "ca-key.pem"
        self._ensure_ca()

    def _ensure_ca(self) -> None:
        until = _valid_until(self.ca_file)
        if until is not None and until - _now() > _RENEW_BEFORE and self._key_file.is_file():
            return
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "adk-mesh development CA")])
        now = _now()
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=_CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        _write_private(
            self._key_file,
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
        self.ca_file.parent.mkdir(parents=True, exist_ok=True)
        self.ca_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        # Certificates of a previous CA chain to nothing now.
        for stale in self.directory.glob("*.cert.pem"):
            stale.unlink()

    def issue(
        self,
        service: str,
        *,
        dns_names: tuple[str, ...] = (),
        days: int = _LEAF_DAYS,
        reuse: bool = True,
    ) -> IssuedCertificate:
        """The certificate of ``service`` (reused while it has more than three days left and
        ``reuse``), valid for serving and calling."""
        identity = spiffe_id(service, self.trust_domain)
        cert_file = self.directory / f"{service}.cert.pem"
        key_file = self.directory / f"{service}.key.pem"
        issued = IssuedCertificate(cert_file, key_file, self.ca_file, identity)
        until = _valid_until(cert_file)
        if reuse and until is not None and until - _now() > _RENEW_BEFORE and key_file.is_file():
            return issued
        ca_key = serialization.load_pem_private_key(self._key_file.read_bytes(), password=None)
        ca_certificate = x509.load_pem_x509_certificate(self.ca_file.read_bytes())
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        names: list[x509.GeneralName] = [
            x509.UniformResourceIdentifier(identity),
            *(x509.DNSName(name) for name in (service, *dns_names, "localhost")),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
        ]
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, service)]))
            .issuer_name(ca_certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        _write_private(
            key_file,
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
        cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        return issued
