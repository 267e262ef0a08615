"""Thin adapters over `kubectl` and HTTPS health checks used while bringing the cluster up and in tests."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml


class KubeError(RuntimeError):
    """kubectl failed or a wait timed out."""


def kubectl_path() -> str:
    exe = shutil.which("kubectl")
    if exe is None:
        raise KubeError("kubectl is not installed (need kubectl 1.32 on PATH)")
    return exe


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, timeout: float = 60.0,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run kubectl against the local cluster; raise KubeError with its stderr on failure when `check`."""
    proc = subprocess.run(
        [kubectl_path(), f"--kubeconfig={kubeconfig}", *args], input=stdin, capture_output=True, text=True,
        timeout=timeout, check=False,
    )
    if check and proc.returncode != 0:
        raise KubeError(f"kubectl {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def apply(kubeconfig: Path, objects: Sequence[dict[str, Any]] | str, *, server_side: bool = True) -> None:
    """Apply manifests (objects or YAML text)."""
    text = objects if isinstance(objects, str) else yaml.safe_dump_all(list(objects), sort_keys=False)
    args = ["apply", "-f", "-"]
    if server_side:
        args += ["--server-side", "--force-conflicts", "--field-manager=offpeak-e2e"]
    kubectl(kubeconfig, *args, stdin=text, timeout=120)


def get_json(kubeconfig: Path, *args: str) -> dict[str, Any]:
    """`kubectl get ... -o json` parsed."""
    return json.loads(kubectl(kubeconfig, "get", *args, "-o", "json").stdout)


def wait_for(what: str, predicate: Callable[[], bool], *, timeout: float, interval: float = 0.5) -> float:
    """Poll `predicate` until true; return seconds waited; raise KubeError naming `what` on timeout."""
    start = time.monotonic()
    last_error: Exception | None = None
    while time.monotonic() - start < timeout:
        try:
            if predicate():
                return time.monotonic() - start
        except Exception as e:  # noqa: BLE001 - a probe failing just means "not yet"
            last_error = e
        time.sleep(interval)
    detail = f" (last error: {last_error})" if last_error else ""
    raise KubeError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")


def https_ok(url: str, *, ca: Path, cert: Path, key: Path, timeout: float = 2.0) -> bool:
    """Whether GET `url` answers 200 using the admin client certificate."""
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as r:  # noqa: S310 - local URL
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def http_ok(url: str, *, timeout: float = 2.0) -> bool:
    """Whether GET `url` answers 2xx (plain HTTP, loopback services)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - local URL
            return 200 <= r.status < 300
    except (urllib.error.URLError, OSError):
        return False


def insecure_https_ok(url: str, *, timeout: float = 2.0) -> bool:
    """Whether a component's self-signed HTTPS health endpoint answers 200 (kube-scheduler, controller-manager)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as r:  # noqa: S310 - local URL
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False
