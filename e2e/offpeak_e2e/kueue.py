"""Kueue's controller on the local control plane (built from its Go module by `offpeak_e2e.build`; its CRDs:
`controlplane.install_built_crds(kubeconfig, "kueue")`).

Kueue runs as it would in a cluster, minus its webhooks: nothing registers them here, so Jobs are created with
`spec.suspend: true` (what Kueue's mutating webhook would set, and what offpeak's opt-in asks anyway). Its webhook
server still starts, so it is handed the local CA-signed serving certificate. Feature gates that need pieces this
cluster lacks (MultiKueue, ProvisioningRequest, the visibility API server) are off. TrainingJobs are an external
framework (their Workloads are made and followed by offpeak's operator, `operator.kueue.enabled`), as
docs/trainingjob.md tells a cluster operator to configure Kueue.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from offpeak_e2e import build, kube, procs
from offpeak_e2e.controlplane import StartError, wait_started
from offpeak_operator import names

KUEUE = "kueue"
FEATURE_GATES = "MultiKueue=false,ProvisioningACC=false,VisibilityOnDemand=false"
TRAININGJOB_FRAMEWORK = f"{names.KIND}.{names.VERSION}.{names.GROUP}"  # Kueue's Kind.version.group


def config(*, health_port: int, metrics_port: int, webhook_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta1): batch/v1 Jobs, and TrainingJobs as an external
    framework, queued by name; one replica."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration", "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job"], "externalFrameworks": [TRAININGJOB_FRAMEWORK]},
        "clientConnection": {"qps": 50, "burst": 100},
    }


def start(sup: procs.Supervisor, *, run_dir: Path, kubeconfig: Path, timeout: float = 60.0) -> str:
    """Start Kueue's controller under `sup` and wait for its health endpoint; returns its health URL."""
    binary = build.binary_path(KUEUE, build.KUEUE_VERSION)
    if not binary.is_file():
        raise StartError(f"Kueue is not built ({binary}); run `python -m offpeak_e2e.build --only kueue`")
    pki_dir = run_dir / "pki"
    cert_dir = run_dir / "config" / "kueue-certs"
    cert_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pki_dir / "apiserver.crt", cert_dir / "tls.crt")  # signed for 127.0.0.1 by the local CA
    shutil.copyfile(pki_dir / "apiserver.key", cert_dir / "tls.key")
    ports = {n: procs.free_port() for n in ("health", "metrics", "webhook")}
    cfg = run_dir / "config" / "kueue.yaml"
    cfg.write_text(json.dumps(config(health_port=ports["health"], metrics_port=ports["metrics"],
                                     webhook_port=ports["webhook"], cert_dir=cert_dir), indent=2))
    kube.kubectl(kubeconfig, "create", "namespace", "kueue-system", check=False)
    sup.start(KUEUE, [str(binary), f"--config={cfg}", f"--feature-gates={FEATURE_GATES}", "--zap-log-level=2"],
              env={"KUBECONFIG": str(kubeconfig)})
    url = f"http://127.0.0.1:{ports['health']}/healthz"
    wait_started(sup, KUEUE, f"Kueue {url}", lambda: kube.http_ok(url), timeout=timeout)
    return url
