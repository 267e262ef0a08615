"""TLS material of the status server: mounted (the chart's Secret: tls.crt, tls.key, ca.crt), kept in a folder of a
local operator's (made there on its first start), or made at start-up and kept in memory.

Pods trust the CA they were given when they were created. Material made in memory lives as long as the process:
enough for one operator beside a local cluster, not for restarts or HA replicas, which need the same material
every time (the chart's Secret, or a folder that survives the restart).
"""

from __future__ import annotations

import ipaddress
import os
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CERT_FILE, KEY_FILE, CA_FILE = "tls.crt", "tls.key", "ca.crt"
MADE_FOR_DAYS = 365


class TlsError(RuntimeError):
    """The mounted TLS material is missing or unreadable; the message says which file."""


@dataclass(frozen=True)
class TlsMaterial:
    cert_pem: bytes  # the server's certificate
    key_pem: bytes  # its private key
    ca_pem: str  # the CA the pods trust (given to each training pod)

    def server_context(self) -> ssl.SSLContext:
        """A TLS server context serving this certificate (loaded through a private temporary folder: `ssl` reads
        certificates from files only)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        with tempfile.TemporaryDirectory(prefix="offpeak-status-") as folder:
            cert, key = Path(folder) / CERT_FILE, Path(folder) / KEY_FILE
            cert.write_bytes(self.cert_pem)
            write_private(key, self.key_pem)
            context.load_cert_chain(cert, key)
        return context


def load(folder: str) -> TlsMaterial:
    """tls.crt, tls.key and ca.crt from `folder` (a mounted Secret with the certificate and its CA)."""
    files = {}
    for name in (CERT_FILE, KEY_FILE, CA_FILE):
        path = Path(folder) / name
        try:
            files[name] = path.read_bytes()
        except OSError as e:
            raise TlsError(f"cannot read {path}: {e.strerror or e} (mount a Secret with {CERT_FILE}, {KEY_FILE} and "
                           f"{CA_FILE})") from e
    return TlsMaterial(cert_pem=files[CERT_FILE], key_pem=files[KEY_FILE], ca_pem=files[CA_FILE].decode())


def load_or_make(folder: str, *, hosts: Sequence[str]) -> TlsMaterial:
    """The material in `folder`; made for `hosts` and written there first when the folder has none of it (a local
    operator's first start), so a restarted operator serves what its pods trust."""
    present = [n for n in (CERT_FILE, KEY_FILE, CA_FILE) if (Path(folder) / n).exists()]
    if present:
        return load(folder)
    made = generate(hosts=hosts)
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        write_private(Path(folder) / KEY_FILE, made.key_pem)
        (Path(folder) / CERT_FILE).write_bytes(made.cert_pem)
        (Path(folder) / CA_FILE).write_text(made.ca_pem)
    except OSError as e:
        raise TlsError(f"{folder} holds no {CERT_FILE}, {KEY_FILE}, {CA_FILE} and they cannot be written there: "
                       f"{e.strerror or e}") from e
    return made


def write_private(path: Path, data: bytes) -> None:
    """Write a file only its owner may read (a private key, a token key)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "offpeak"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _alt_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def generate(*, hosts: Sequence[str], now: datetime | None = None, days: int = MADE_FOR_DAYS) -> TlsMaterial:
    """A fresh CA (P-256) and a server certificate it signed for `hosts` (names or IP addresses)."""
    now = now or datetime.now(UTC)
    start, end = now - timedelta(minutes=5), now + timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (x509.CertificateBuilder().subject_name(_name("offpeak status CA")).issuer_name(_name("offpeak status CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(ca_ski, critical=False)
          .sign(ca_key, hashes.SHA256()))  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    names = list(dict.fromkeys(hosts))
    cert = (x509.CertificateBuilder().subject_name(_name(names[0] if names else "offpeak-status"))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName([_alt_name(h) for h in names]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False, key_cert_sign=False,
                                         crl_sign=False, content_commitment=False, data_encipherment=False,
                                         key_agreement=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
            .sign(ca_key, hashes.SHA256()))  # fmt: skip
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return TlsMaterial(cert_pem=cert.public_bytes(pem), key_pem=key_pem, ca_pem=ca.public_bytes(pem).decode())
