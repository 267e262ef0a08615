"""Bring up / tear down the loopback control plane: etcd, kube-apiserver, kube-controller-manager, the default
kube-scheduler, the ``offpeak-scheduler`` and kwok with fake GPU nodes.

Everything listens on 127.0.0.1 on free ports; state lives in a run directory (pid files, logs, certs, etcd data,
``cluster.json``) so `offpeak cluster down` can find and stop it from another process.
"""

from __future__ import annotations

import functools
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from offpeak_e2e import build, kube, pki, procs, schedconfig, stages
from offpeak_e2e import nodes as fakenodes

Echo = Callable[[str], None]

# Stop order: clients before the API server, the API server before etcd.
STOP_ORDER = (
    "offpeak-scheduler", "kube-scheduler", "kwok", "kube-controller-manager", "kube-apiserver", "etcd",
)


@dataclass(frozen=True)
class ControlPlaneSettings:
    """What to start. Ports of 0 are picked free at start."""

    name: str = "default"
    nodes: int = 4
    gpus_per_node: int = 8
    gpu_types: tuple[str, ...] = fakenodes.DEFAULT_GPU_TYPES
    node_specs: tuple[fakenodes.NodeSpec, ...] = ()  # these nodes exactly, instead of `nodes` x `gpu_types`
    # offpeak-scheduler retries a pod its extender refused after this long without waiting for a cluster event (the
    # chart's scheduler.retryUnschedulableSeconds; kube-scheduler moves such pods every 30 s)
    retry_unschedulable_s: int = 20
    extender_port: int = 0  # the offpeak-scheduler calls http://127.0.0.1:<extender_port>
    build_missing: bool = True  # build binaries that are not cached yet (slow the first time)
    start_timeout_s: float = 120.0


@dataclass
class ClusterState:
    """Where the running cluster is; written to ``<run>/cluster.json``."""

    name: str
    run_dir: str
    kubeconfig: str
    apiserver: str
    ports: dict[str, int] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)
    urls: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def save(self) -> None:
        Path(self.run_dir, "cluster.json").write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, run_dir: Path) -> ClusterState | None:
        try:
            return cls(**json.loads((run_dir / "cluster.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None


def run_dir_for(name: str) -> Path:
    """The run directory of the cluster called `name`."""
    return build.cache_dir() / "run" / name


class StartError(RuntimeError):
    """A component did not come up; the message names it and its log."""


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
    except OSError:
        return ""


class ControlPlane:
    """Starts the Kubernetes side of the local cluster; `stop()` stops everything recorded in its run dir."""

    def __init__(self, settings: ControlPlaneSettings, *, echo: Echo = print) -> None:
        self.settings = settings
        self.echo = echo
        self.run_dir = run_dir_for(settings.name)
        self.sup = procs.Supervisor(self.run_dir)
        self.state: ClusterState | None = None

    # -- helpers --------------------------------------------------------------------------------------------
    def _timed(self, label: str, fn: Callable[[], Any]) -> Any:
        start = time.monotonic()
        result = fn()
        took = time.monotonic() - start
        assert self.state is not None
        self.state.timings[label] = round(took, 2)
        self.echo(f"[cluster] {label}: {took:.1f}s")
        return result

    def _wait(self, name: str, what: str, predicate: Callable[[], bool], timeout: float | None = None) -> None:
        wait_started(self.sup, name, what, predicate, timeout=timeout or self.settings.start_timeout_s)

    # -- start ----------------------------------------------------------------------------------------------
    def start(self) -> ClusterState:
        """Start the control plane (stopping a previous one of the same name first); return its state."""
        s = self.settings
        if self.sup.procs():
            self.echo(f"[cluster] stopping a previous cluster {s.name!r} first")
            self.stop()
        for sub in ("etcd-data", "config"):
            shutil.rmtree(self.run_dir / sub, ignore_errors=True)
        (self.run_dir / "config").mkdir(parents=True, exist_ok=True)
        ports = {n: procs.free_port() for n in (
            "etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler", "offpeak-scheduler", "kwok",
        )}
        ports["extender"] = s.extender_port or procs.free_port()
        self.state = ClusterState(
            name=s.name, run_dir=str(self.run_dir), kubeconfig=str(self.run_dir / "kubeconfig"),
            apiserver=f"https://127.0.0.1:{ports['apiserver']}", ports=ports,
        )
        self.state.save()
        bins = self._timed("binaries", self._binaries)
        certs = self._timed("pki", lambda: pki.ensure_pki(self.run_dir / "pki"))
        kubeconfig = Path(self.state.kubeconfig)
        kubeconfig.write_text(pki.kubeconfig_yaml(server=self.state.apiserver, pki=certs))
        self._timed("etcd", lambda: self._etcd(bins, ports))
        self._timed("kube-apiserver", lambda: self._apiserver(bins, ports, certs))
        self._timed("controllers+schedulers+kwok", lambda: self._controllers(bins, ports, certs, kubeconfig))
        self._timed("nodes", lambda: self._nodes(kubeconfig))
        self._timed("crds", lambda: self._crds(kubeconfig))
        self.state.save()
        return self.state

    def _binaries(self) -> dict[str, Path]:
        missing = build.missing()
        if missing and not self.settings.build_missing:
            raise StartError(f"binaries not built: {', '.join(missing)}; run `python -m offpeak_e2e.build`")
        if missing:
            self.echo(f"[cluster] building {', '.join(missing)} from Go modules (slow the first time) ...")
            try:
                build.build_all(echo=self.echo)
            except build.BuildError as e:
                raise StartError(f"cannot build the control plane: {e}") from e
        return build.binaries()

    def _etcd(self, bins: dict[str, Path], ports: dict[str, int]) -> None:
        client = f"http://127.0.0.1:{ports['etcd']}"
        peer = f"http://127.0.0.1:{ports['etcd-peer']}"
        self.sup.start("etcd", [
            str(bins["etcd"]), "--name=offpeak", f"--data-dir={self.run_dir / 'etcd-data'}",
            f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=offpeak={peer}", "--unsafe-no-fsync", "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ])
        self._wait("etcd", "etcd /health", lambda: kube.http_ok(f"{client}/health"))

    def _apiserver(self, bins: dict[str, Path], ports: dict[str, int], certs: pki.Pki) -> None:
        self.sup.start("kube-apiserver", [
            str(bins["kube-apiserver"]),
            f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={ports['apiserver']}",
            f"--cert-dir={self.run_dir / 'pki'}",
            f"--tls-cert-file={certs.apiserver_crt}", f"--tls-private-key-file={certs.apiserver_key}",
            f"--client-ca-file={certs.ca_crt}", f"--requestheader-client-ca-file={certs.ca_crt}",
            "--requestheader-allowed-names=front-proxy-client", "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group", "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--service-account-key-file={certs.sa_pub}", f"--service-account-signing-key-file={certs.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-cluster-ip-range=10.96.0.0/16", "--authorization-mode=Node,RBAC", "--allow-privileged=true",
            "--enable-priority-and-fairness=false", "--max-requests-inflight=2000",
            "--max-mutating-requests-inflight=1000", "--profiling=false", "--v=1",
        ])
        self._wait("kube-apiserver", "kube-apiserver /readyz", lambda: kube.https_ok(
            f"https://127.0.0.1:{ports['apiserver']}/readyz", ca=certs.ca_crt, cert=certs.admin_crt,
            key=certs.admin_key,
        ))

    def _controllers(self, bins: dict[str, Path], ports: dict[str, int], certs: pki.Pki, kubeconfig: Path) -> None:
        cfg = self.run_dir / "config"
        auth = [f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}"]
        self.sup.start("kube-controller-manager", [
            str(bins["kube-controller-manager"]), f"--kubeconfig={kubeconfig}", *auth,
            "--bind-address=127.0.0.1", f"--secure-port={ports['controller-manager']}", "--leader-elect=false",
            f"--service-account-private-key-file={certs.sa_key}", f"--root-ca-file={certs.ca_crt}",
            f"--cluster-signing-cert-file={certs.ca_crt}", f"--cluster-signing-key-file={certs.ca_key}",
            "--use-service-account-credentials=false", "--controllers=*",
            "--kube-api-qps=200", "--kube-api-burst=400", "--v=1",
        ])
        default_cfg = schedconfig.dump(schedconfig.default_scheduler_config(kubeconfig=kubeconfig),
                                       cfg / "scheduler.yaml")
        offpeak_cfg = schedconfig.dump(
            schedconfig.offpeak_scheduler_config(
                kubeconfig=kubeconfig, extender_url=f"http://127.0.0.1:{ports['extender']}",
            ),
            cfg / "offpeak-scheduler.yaml",
        )
        for name, config in (("kube-scheduler", default_cfg), ("offpeak-scheduler", offpeak_cfg)):
            port = ports["scheduler" if name == "kube-scheduler" else "offpeak-scheduler"]
            # offpeak's scheduler retries pods its extender refused without waiting for a cluster event, as the
            # chart's does (scheduler.retryUnschedulableSeconds); the default scheduler stays stock
            retry = ([f"--pod-max-in-unschedulable-pods-duration={self.settings.retry_unschedulable_s}s"]
                     if name == "offpeak-scheduler" else [])
            self.sup.start(name, [
                str(bins["kube-scheduler"]), f"--config={config}", *auth, "--bind-address=127.0.0.1",
                f"--secure-port={port}", "--v=1", *retry,
            ])
        stage_file = cfg / "kwok-stages.yaml"
        stage_file.write_text(stages.stages_yaml())
        self.sup.start("kwok", [
            str(bins["kwok"]), f"--kubeconfig={kubeconfig}", f"--config={stage_file}",
            "--manage-all-nodes=false", f"--manage-nodes-with-annotation-selector={fakenodes.KWOK_ANNOTATION}=fake",
            f"--server-address=127.0.0.1:{ports['kwok']}", "--node-lease-duration-seconds=40",
            "--node-ip=10.0.0.1", "--cidr=10.244.0.0/16",
        ])
        for name, key in (("kube-controller-manager", "controller-manager"), ("kube-scheduler", "scheduler"),
                          ("offpeak-scheduler", "offpeak-scheduler")):
            url = f"https://127.0.0.1:{ports[key]}/healthz"
            self._wait(name, f"{name} /healthz", functools.partial(kube.insecure_https_ok, url))
        self._wait("kwok", "kwok /healthz", lambda: kube.http_ok(f"http://127.0.0.1:{ports['kwok']}/healthz"))

    def _nodes(self, kubeconfig: Path) -> None:
        specs = node_specs(self.settings)
        kube.apply(kubeconfig, [fakenodes.node_manifest(n) for n in specs], server_side=False)
        assert self.state is not None
        self.state.nodes = [n.name for n in specs]

        def all_ready() -> bool:
            items = kube.get_json(kubeconfig, "nodes", "-l", "type=kwok")["items"]
            ready = sum(
                1 for n in items
                if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
            )
            return ready >= len(specs)

        self._wait("kwok", f"{len(specs)} fake GPU nodes Ready", all_ready)
        # the namespace's default ServiceAccount is made by the controller-manager; pods need it
        self._wait("kube-controller-manager", "ServiceAccount default/default",
                   lambda: kube.kubectl(kubeconfig, "get", "serviceaccount", "default", check=False).returncode == 0)

    def _crds(self, kubeconfig: Path) -> None:
        crd_dir = repo_root() / "crds"
        files = sorted(crd_dir.glob("*.yaml")) if crd_dir.is_dir() else []
        if not files:
            self.echo(f"[cluster] no CRDs found in {crd_dir}; skipping")
            return
        apply_crds(kubeconfig, files)

    # -- stop -----------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop every process recorded in the run dir (offpeak's services first, etcd last)."""
        self.sup.stop_all(order=STOP_ORDER)
        shutil.rmtree(self.run_dir / "etcd-data", ignore_errors=True)


def node_specs(settings: ControlPlaneSettings) -> list[fakenodes.NodeSpec]:
    """The fake GPU nodes a control plane gets."""
    if settings.node_specs:
        return list(settings.node_specs)
    return fakenodes.plan_nodes(count=settings.nodes, gpu_types=settings.gpu_types, gpus=settings.gpus_per_node)


def wait_started(sup: procs.Supervisor, name: str, what: str, predicate: Callable[[], bool], *,
                 timeout: float) -> None:
    """Wait until `predicate` holds for the process `name` started by `sup`; StartError with its log's tail when it
    exits first or the time runs out."""
    log = sup.log_dir / f"{name}.log"

    def ok() -> bool:
        code = sup.exited(name)
        if code is not None:
            raise StartError(f"{name} exited with code {code}; log {log}:\n{_log_tail(log)}")
        return predicate()

    try:
        kube.wait_for(what, ok, timeout=timeout)
    except kube.KubeError as e:
        raise StartError(f"{e}; log {log}:\n{_log_tail(log)}") from e


def apply_crds(kubeconfig: Path, files: Sequence[Path]) -> None:
    """Apply CRD files (server-side) and wait until every CRD in the cluster is served."""
    for f in files:
        kube.kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(f))
    kube.kubectl(kubeconfig, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s", timeout=90)


def install_built_crds(kubeconfig: Path, target: str) -> list[str]:
    """Apply the CRDs `offpeak_e2e.build` copied from a target's module (Kueue's, training-operator's); their
    file names."""
    files = sorted(build.crd_dir(target).glob("*.yaml"))
    if not files:
        raise StartError(f"{target}'s CRDs are not in {build.crd_dir(target)}; run `python -m offpeak_e2e.build`")
    apply_crds(kubeconfig, files)
    return [f.name for f in files]


def repo_root() -> Path:
    """The offpeak checkout (this file is e2e/offpeak_e2e/controlplane.py)."""
    return Path(__file__).resolve().parents[2]
