"""The throw-away PKI: a CA that signs a serving cert for 127.0.0.1 and an admin client cert in system:masters."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from offpeak_e2e import pki


def _text(cert: Path) -> str:
    return subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-text"], capture_output=True, text=True,
                          check=True).stdout


def test_pki_signs_server_and_admin_certs(tmp_path: Path) -> None:
    p = pki.ensure_pki(tmp_path / "pki")
    for cert in (p.apiserver_crt, p.admin_crt):
        ok = subprocess.run(["openssl", "verify", "-CAfile", str(p.ca_crt), str(cert)], capture_output=True,
                            text=True, check=False)
        assert ok.returncode == 0, ok.stderr
    server = _text(p.apiserver_crt)
    assert "IP Address:127.0.0.1" in server and "TLS Web Server Authentication" in server
    admin = _text(p.admin_crt)
    assert "O = system:masters" in admin and "TLS Web Client Authentication" in admin
    before = p.ca_crt.read_bytes()
    assert pki.ensure_pki(tmp_path / "pki") == p and p.ca_crt.read_bytes() == before  # reused, not remade


def test_kubeconfig_points_at_the_certs(tmp_path: Path) -> None:
    p = pki.Pki(tmp_path)
    cfg = yaml.safe_load(pki.kubeconfig_yaml(server="https://127.0.0.1:6443", pki=p))
    assert cfg["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"
    assert cfg["users"][0]["user"]["client-certificate"] == str(p.admin_crt)
    assert cfg["current-context"] == cfg["contexts"][0]["name"]
