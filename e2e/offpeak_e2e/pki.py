"""A throw-away PKI for the loopback control plane: a CA, the API server's serving cert, an admin client cert and
the service-account signing key, made with the `openssl` CLI (no extra Python dependency)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


class PkiError(RuntimeError):
    """openssl is missing or failed."""


@dataclass(frozen=True)
class Pki:
    """Paths of the files the control plane's components are started with."""

    dir: Path

    @property
    def ca_crt(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def apiserver_crt(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def apiserver_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def admin_crt(self) -> Path:
        return self.dir / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.dir / "admin.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise PkiError("openssl is not installed; install it (apt-get install -y openssl)")
    proc = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise PkiError(f"openssl {args[0]} failed: {proc.stderr.strip()}")


def _sign(pki: Pki, *, name: str, subject: str, extensions: str) -> None:
    d = pki.dir
    _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=d)
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=d)
    (d / f"{name}.ext").write_text(extensions)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "365", "-sha256", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=d,
    )


def ensure_pki(directory: Path) -> Pki:
    """Create the PKI in `directory` unless it is already complete; return its paths."""
    pki = Pki(directory)
    needed = (pki.ca_crt, pki.apiserver_crt, pki.admin_crt, pki.sa_key, pki.sa_pub)
    if all(p.is_file() for p in needed):
        return pki
    directory.mkdir(parents=True, exist_ok=True)
    _openssl("genrsa", "-out", "ca.key", "2048", cwd=directory)
    _openssl(
        "req", "-x509", "-new", "-nodes", "-key", "ca.key", "-subj", "/CN=offpeak-local-ca", "-days", "365",
        "-sha256", "-out", "ca.crt", cwd=directory,
    )
    _sign(
        pki, name="apiserver", subject="/CN=kube-apiserver",
        extensions=(
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
            "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
        ),
    )
    _sign(
        pki, name="admin", subject="/O=system:masters/CN=offpeak-admin",
        extensions="basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=clientAuth\n",
    )
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=directory)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=directory)
    return pki


def kubeconfig_yaml(*, server: str, pki: Pki, name: str = "offpeak-local") -> str:
    """An admin kubeconfig (client certificate in group system:masters) for `server`."""
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: {name}\n  cluster:\n    server: {server}\n"
        f"    certificate-authority: {pki.ca_crt}\n"
        f"users:\n- name: {name}-admin\n  user:\n    client-certificate: {pki.admin_crt}\n"
        f"    client-key: {pki.admin_key}\n"
        f"contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}-admin\n"
        f"    namespace: default\ncurrent-context: {name}\n"
    )
