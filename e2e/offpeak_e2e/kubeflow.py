"""Kubeflow training-operator on the local control plane, PyTorchJobs only (built from its Go module by
`offpeak_e2e.build`; its PyTorchJob CRD: `controlplane.install_built_crds(kubeconfig, "training-operator")`).

training-operator always runs its webhook server with certificates from its own rotator (open-policy-agent's
cert-controller): the rotator fills the Secret `training-operator-webhook-cert` in the operator's namespace, and
the server reads them from the fixed folder `/tmp/k8s-webhook-server/serving-certs`, where a pod would have the
Secret mounted. Here nothing mounts it, so `wait_ready` writes the Secret's files there itself; the rotator notices
them within a minute and the controllers start. No webhook is registered with the API server.

That folder is one for the whole machine. Where this process may (root), training-operator runs in a mount
namespace of its own in which the folder is the cluster's run dir, so two clusters on one machine (two test runs)
never share certificates; elsewhere the fixed folder is used.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

from offpeak_e2e import build, kube, procs
from offpeak_e2e.controlplane import StartError, wait_started

NAME = "training-operator"
NAMESPACE = "kubeflow"
SECRET = "training-operator-webhook-cert"
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # fixed in training-operator's pkg/cert


def _private_cert_dir(run_dir: Path) -> Path | None:
    """The run dir's stand-in for CERT_DIR when training-operator can get a mount namespace of its own."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return None
    return run_dir / "config" / "training-operator-certs"


def _wrapper(cert_dir: Path | None) -> list[str]:
    """A command that gives training-operator its own mount namespace with `cert_dir` at CERT_DIR, then becomes it."""
    if cert_dir is None:
        return []
    cert_dir.mkdir(parents=True, exist_ok=True)
    script = f'mkdir -p {CERT_DIR} && mount --bind {cert_dir} {CERT_DIR} && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"]


def _write_certs(kubeconfig: Path, cert_dir: Path) -> bool:
    """Copy the rotator's certificates from its Secret to where the webhook server reads them; False until they
    are there."""
    got = kube.kubectl(kubeconfig, "-n", NAMESPACE, "get", "secret", SECRET, "-o", "json", check=False)
    data = json.loads(got.stdout).get("data") or {} if got.returncode == 0 else {}
    if not {"tls.crt", "tls.key", "ca.crt"} <= set(data):
        return False
    cert_dir.mkdir(parents=True, exist_ok=True)
    for name, value in data.items():
        (cert_dir / name).write_bytes(base64.b64decode(value))
    return True


def launch(sup: procs.Supervisor, *, kubeconfig: Path, run_dir: Path) -> str:
    """Start training-operator under `sup` without waiting for it; returns its readiness URL (`wait_ready`)."""
    binary = build.binary_path(NAME, build.TRAINING_OPERATOR_VERSION)
    if not binary.is_file():
        raise StartError(f"training-operator is not built ({binary}); run `python -m offpeak_e2e.build`")
    kube.kubectl(kubeconfig, "create", "namespace", NAMESPACE, check=False)
    kube.kubectl(kubeconfig, "-n", NAMESPACE, "create", "secret", "generic", SECRET, check=False)
    ports = {n: procs.free_port() for n in ("health", "metrics", "webhook")}
    sup.start(NAME, [str(binary), "--enable-scheme=pytorchjob", f"--metrics-bind-address=127.0.0.1:{ports['metrics']}",
                     f"--health-probe-bind-address=127.0.0.1:{ports['health']}",
                     f"--webhook-server-port={ports['webhook']}"],
              env={"KUBECONFIG": str(kubeconfig), "MY_POD_NAMESPACE": NAMESPACE},
              wrapper=_wrapper(_private_cert_dir(run_dir)))
    return f"http://127.0.0.1:{ports['health']}/readyz"


def wait_ready(sup: procs.Supervisor, *, kubeconfig: Path, url: str, timeout: float = 150.0) -> None:
    """Copy the rotator's certificates where the webhook server reads them once they exist, and wait until
    training-operator answers ready."""
    cert_dir = _private_cert_dir(sup.run_dir) or CERT_DIR
    written = False

    def ready() -> bool:
        nonlocal written
        written = written or _write_certs(kubeconfig, cert_dir)
        return written and kube.http_ok(url)

    wait_started(sup, NAME, f"training-operator {url} (its certificates copied from Secret {SECRET})", ready,
                 timeout=timeout)


def start(sup: procs.Supervisor, *, kubeconfig: Path, run_dir: Path, timeout: float = 150.0) -> str:
    """Start training-operator under `sup` and wait until it is ready (certificates in place, controllers up);
    returns its readiness URL."""
    url = launch(sup, kubeconfig=kubeconfig, run_dir=run_dir)
    wait_ready(sup, kubeconfig=kubeconfig, url=url, timeout=timeout)
    return url
