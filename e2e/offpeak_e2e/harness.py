"""Test-side handle on a running local cluster: kubectl, waits, TrainingJob helpers, service fault injection.

Used by e2e/conftest.py's session fixture `e2e_cluster` and by the demo.
"""

from __future__ import annotations

import base64
import fcntl
import gzip
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from offpeak_core.gpuproducts import node_gpu_type
from offpeak_graph.schema import ModelGraph, Op
from offpeak_core.timeparse import parse_timestamp
from offpeak_e2e import kube
from offpeak_e2e.cluster import ClusterSettings, LocalCluster
from offpeak_e2e.controlplane import ClusterState, ControlPlaneSettings, StartError, run_dir_for
from offpeak_e2e.lanes import Lane

TERMINAL_PHASES = ("Succeeded", "Failed")
TJ = "trainingjobs.offpeak.io"


def session_cluster_name(prefix: str) -> str:
    """A cluster name unique to this process: two pytest sessions on one machine must not share a run dir
    (starting a cluster of the same name stops the previous one)."""
    return f"{prefix}-{os.getpid()}"


def reap_stale_sessions(*, echo: Callable[[str], None] = print) -> list[str]:
    """Stop and remove test clusters left by pytest processes that no longer run (killed sessions): every
    `session_cluster_name("pytest...")` run dir, the shared cluster's and each scenario's own."""
    from offpeak_e2e.build import cache_dir  # noqa: PLC0415
    from offpeak_e2e.controlplane import ControlPlane  # noqa: PLC0415

    reaped = []
    for run in sorted((cache_dir() / "run").glob("*-*")):
        prefix, _, pid = run.name.rpartition("-")
        if not prefix.startswith("pytest") or not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        ControlPlane(ControlPlaneSettings(name=run.name), echo=echo).stop()
        shutil.rmtree(run, ignore_errors=True)
        reaped.append(run.name)
    if reaped:
        echo(f"[e2e] removed clusters of dead test sessions: {', '.join(reaped)}")
    return reaped


def results_file(cluster_name: str, scenario: str) -> Path:
    """Where a scenario writes its figures: ``<cache>/results/<scenario>-<time>-<cluster>.json`` (outlives the
    test cluster's run dir)."""
    from offpeak_e2e.build import cache_dir  # noqa: PLC0415

    d = cache_dir() / "results"
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{scenario}-{time.strftime('%Y%m%dT%H%M%S')}-{cluster_name}.json"


@dataclass
class E2ECluster:
    """A started LocalCluster plus helpers; `stop()` tears everything down."""

    cluster: LocalCluster
    state: ClusterState

    @classmethod
    def start(cls, settings: ClusterSettings, *, echo: Callable[[str], None] = print) -> E2ECluster:
        cluster = LocalCluster(settings, echo=echo)
        state = cluster.up()
        return cls(cluster=cluster, state=state)

    @classmethod
    def attach(cls, settings: ClusterSettings, *, echo: Callable[[str], None] = print) -> E2ECluster | None:
        """The cluster of these settings that another process started and finished starting (None if there is
        none): test workers share one cluster."""
        state = ClusterState.load(run_dir_for(settings.control_plane.name))
        if state is None or "total" not in state.timings:
            return None
        cluster = LocalCluster(settings, echo=echo)
        cluster.state = cluster.cp.state = state
        return cls(cluster=cluster, state=state)

    @classmethod
    def shared(cls, settings: ClusterSettings, *, echo: Callable[[str], None] = print) -> E2ECluster:
        """Attach to the cluster of these settings, or start it when no process has yet. Test processes call this
        at the same time: a lock file beside the run dir makes one start it while the others wait; a start that
        failed is remembered, so every process fails at once with its reason."""
        run_dir = run_dir_for(settings.control_plane.name)
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        failed = run_dir.with_name(f"{run_dir.name}.failed")
        with run_dir.with_name(f"{run_dir.name}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if failed.exists():
                raise StartError(failed.read_text())
            attached = cls.attach(settings, echo=echo)
            if attached is not None:
                return attached
            try:
                return cls.start(settings, echo=echo)
            except StartError as e:
                failed.write_text(str(e))
                raise

    def stop(self, *, keep_logs: bool | None = None) -> None:
        """Tear down; drop the run dir too (set OFFPEAK_E2E_KEEP_LOGS=1 to keep logs for debugging)."""
        self.cluster.down()
        if keep_logs is None:
            keep_logs = os.environ.get("OFFPEAK_E2E_KEEP_LOGS") == "1"
        if not keep_logs:
            shutil.rmtree(self.state.run_dir, ignore_errors=True)

    # -- plumbing -------------------------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return Path(self.state.kubeconfig)

    @property
    def nodes(self) -> list[str]:
        return list(self.state.nodes)

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 60.0) -> Any:
        return kube.kubectl(self.kubeconfig, *args, stdin=stdin, check=check, timeout=timeout)

    def apply(self, objects: Iterable[dict[str, Any]] | dict[str, Any] | str, *, check: bool = True) -> Any:
        """`kubectl apply` (client-side, so admission/schema errors come back in stderr)."""
        if isinstance(objects, dict):
            objects = [objects]
        text = objects if isinstance(objects, str) else "\n---\n".join(json.dumps(o) for o in objects)
        return self.kubectl("apply", "-f", "-", stdin=text, check=check)

    def get(self, *args: str) -> dict[str, Any]:
        return kube.get_json(self.kubeconfig, *args)

    def wait_for(self, what: str, predicate: Callable[[], bool], *, timeout: float, interval: float = 1.0) -> float:
        return kube.wait_for(what, predicate, timeout=timeout, interval=interval)

    def new_namespace(self, prefix: str = "e2e") -> str:
        ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.kubectl("create", "namespace", ns)
        self.wait_for(f"ServiceAccount {ns}/default",
                      lambda: self.kubectl("-n", ns, "get", "sa", "default", check=False).returncode == 0,
                      timeout=60)
        return ns

    def delete_namespace(self, ns: str) -> None:
        self.kubectl("delete", "namespace", ns, "--wait=false", check=False)

    def stop_service(self, name: str) -> None:
        self.cluster.stop_service(name)

    def kill_service(self, name: str) -> None:
        """SIGKILL a service (crash, no graceful shutdown)."""
        self.cluster.sup.kill(name)

    def start_service(self, name: str) -> None:
        self.cluster.start_service(name)

    # -- TrainingJobs ---------------------------------------------------------------------------------------
    def node_of_type(self, gpu_type: str) -> str:
        """The first node whose GPU type (override label, else GPU feature discovery's product) is `gpu_type`."""
        items = [n for n in self.get("nodes")["items"] if node_gpu_type(n["metadata"].get("labels") or {}) == gpu_type]
        assert items, f"no node of type {gpu_type}"
        return str(items[0]["metadata"]["name"])

    def trainingjob(self, ns: str, name: str) -> dict[str, Any]:
        return self.get(TJ, name, "-n", ns)

    def phase(self, ns: str, name: str) -> str | None:
        return (self.trainingjob(ns, name).get("status") or {}).get("phase")

    def wait_phase(self, ns: str, name: str, phases: Iterable[str], *, timeout: float) -> dict[str, Any]:
        """Wait until the TrainingJob's phase is one of `phases`; return the object."""
        wanted = tuple(phases)
        seen: list[str] = []

        def ok() -> bool:
            p = self.phase(ns, name)
            if p and (not seen or seen[-1] != p):
                seen.append(p)
            return p in wanted

        try:
            self.wait_for(f"TrainingJob {ns}/{name} phase in {wanted}", ok, timeout=timeout)
        except kube.KubeError as e:
            raise kube.KubeError(f"{e}; phases seen: {seen}; status: "
                                 f"{json.dumps(self.trainingjob(ns, name).get('status'))}") from e
        return self.trainingjob(ns, name)

    def pods(self, ns: str, selector: str) -> list[dict[str, Any]]:
        return list(self.get("pods", "-n", ns, "-l", selector)["items"])

    def online_waits(self, node: str) -> list[float]:
        """Seconds from creation to start of each running online pod on `node` (whole-second timestamps): how long
        online work waited for its GPUs."""
        waits = []
        for p in self.pods("online", f"app=online-{node}"):
            status = p.get("status") or {}
            created = parse_timestamp(p["metadata"].get("creationTimestamp"))
            started = parse_timestamp(status.get("startTime"))
            if status.get("phase") == "Running" and created is not None and started is not None:
                waits.append(started - created)
        return waits

    def lane_phase(self, lane: Lane) -> float:
        """Seconds into the lane's current day of online load."""
        return lane.phase(reference=float(self.state.urls["reference"]), now=time.time(),
                          day=self.cluster.settings.day_seconds)

    def wait_lane_phase(self, lane: Lane, low: float, high: float, *, what: str = "") -> float:
        """Wait until the lane's day is between `low` and `high` seconds (at most a day); return the phase."""
        self.wait_for(f"{what or 'the lane'}: day phase {low:g}-{high:g}s",
                      lambda: low <= self.lane_phase(lane) < high,
                      timeout=self.cluster.settings.day_seconds + 10, interval=0.5)
        return self.lane_phase(lane)

    def running_online(self, node: str) -> int:
        """Online pods running on `node`."""
        return len([p for p in self.pods("online", f"app=online-{node}") if p["status"].get("phase") == "Running"])

    def scale_online(self, node: str, replicas: int) -> None:
        """Pin a node's online Deployment to `replicas` (marks it manual so the load driver leaves it alone)."""
        from offpeak_e2e.onlineload import MANUAL_ANNOTATION, NAMESPACE, deployment_name  # noqa: PLC0415

        d = deployment_name(node)
        self.kubectl("-n", NAMESPACE, "annotate", "deployment", d, f"{MANUAL_ANNOTATION}=manual", "--overwrite")
        self.kubectl("-n", NAMESPACE, "scale", "deployment", d, f"--replicas={replicas}")


# Beyond the eviction grace period an online pod waits for the evictor to notice (1-2 s), the stopped pod to be
# removed and the default scheduler's next attempt; pod timestamps are whole seconds.
SCHEDULING_SLACK_S = 8


def timed(label: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator printing how long a scenario stage took."""
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def inner(*a: Any, **k: Any) -> Any:
            t = time.monotonic()
            try:
                return fn(*a, **k)
            finally:
                print(f"[e2e] {label}: {time.monotonic() - t:.1f}s", flush=True)
        return inner
    return wrap


def own_cluster(settings: ClusterSettings, what: str) -> Iterator[E2ECluster]:
    """The body of a scenario module's own cluster fixture (`yield from own_cluster(settings, "packing")`): a cluster
    that did not start fails the test with the reason; a started one is always torn down."""
    import pytest  # noqa: PLC0415 - only test fixtures call this; the demo imports this module without pytest

    try:
        cluster = E2ECluster.start(settings, echo=lambda m: print(m, flush=True))
    except StartError as e:
        pytest.fail(f"the {what} cluster did not start: {e}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


def with_nodes(settings: ClusterSettings, nodes: int) -> ClusterSettings:
    return replace(settings, control_plane=replace(settings.control_plane, nodes=nodes))


def trainingjob_manifest(
    name: str, *, sim_seconds: float, gpu_types: Iterable[str] = ("A100-SXM4-40GB", "H100-SXM5-80GB"),
    torchvision: str | None = None, steps: int = 200, batch_size: int = 32,
    estimated_seconds: float | None = None, workers: int = 1, extra_spec: dict[str, Any] | None = None,
    lane: Lane | None = None,
) -> dict[str, Any]:
    """A TrainingJob whose fake training pod (kwok) finishes `sim_seconds` after it starts running, on the nodes of
    `lane` when given. Without a `torchvision` model (extracting one costs a torch import) the operator predicts
    from `estimated_seconds`."""
    spec: dict[str, Any] = {
        "image": "registry.local/offpeak-e2e/train:1",
        "command": ["python", "train.py"],
        "batchSize": batch_size,
        "steps": steps,
        "workers": workers,
        "gpuTypes": list(gpu_types),
        "podAnnotations": {"offpeak.io/sim-runtime": f"{max(1000, round(sim_seconds * 1000))}ms"},
    }
    if torchvision:
        spec["modelSource"] = {"torchvision": torchvision}
    if estimated_seconds is not None:
        spec["estimatedSeconds"] = estimated_seconds
    spec.update(extra_spec or {})
    if lane is not None:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **lane.node_selector}
    return {"apiVersion": "offpeak.io/v1alpha1", "kind": "TrainingJob", "metadata": {"name": name}, "spec": spec}


def offline_template(*, gpus: int, annotations: dict[str, str], container: str = "train",
                     image: str = "registry.local/offpeak-e2e/train:1", requests: dict[str, str] | None = None,
                     restart_policy: str | None = "Never", lane: Lane | None = None) -> dict[str, Any]:
    """A pod template that opts in to offpeak (label `offpeak.io/offline`, offpeak's scheduler) with one container of
    `gpus` GPUs; `annotations` say what it trains and how long kwok runs it (`offpeak.io/sim-runtime`)."""
    resources: dict[str, Any] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if requests:
        resources["requests"] = dict(requests)
    spec: dict[str, Any] = {"schedulerName": "offpeak-scheduler",
                            "containers": [{"name": container, "image": image, "resources": resources}]}
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    if lane is not None:
        spec["nodeSelector"] = dict(lane.node_selector)
    return {"metadata": {"labels": {"offpeak.io/offline": "true"}, "annotations": dict(annotations)}, "spec": spec}


def offline_job_manifest(name: str, *, template: dict[str, Any], labels: dict[str, str] | None = None,
                         backoff_limit: int = 2) -> dict[str, Any]:
    """A batch/v1 Job created suspended (as offpeak's opt-in asks) around an `offline_template`."""
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
            "spec": {"suspend": True, "backoffLimit": backoff_limit, "template": template}}


def mlp_graph(*, width: int, batch: int = 64, family: str = "e2e-mlp") -> ModelGraph:
    """A plain MLP model graph built without torch (a width no other test uses gives a graph hash of its own)."""
    ops = [Op(id=0, type="input", output_shapes=[[batch, width]])]
    for _ in range(6):
        ops.append(Op(id=len(ops), type="linear", inputs=[len(ops) - 1], input_shapes=[[batch, width]],
                      output_shapes=[[batch, width]], flops=2.0 * batch * width * width,
                      bytes_read=4 * (batch * width + width * width), bytes_written=4 * batch * width,
                      params=width * width + width))
        ops.append(Op(id=len(ops), type="relu", inputs=[len(ops) - 1], input_shapes=[[batch, width]],
                      output_shapes=[[batch, width]], flops=float(batch * width), bytes_read=4 * batch * width,
                      bytes_written=4 * batch * width))
    return ModelGraph(framework="synthetic", model_name=f"{family}-{width}", batch_size=batch, ops=ops,
                      model_family=family)


def graph_configmap(name: str, namespace: str, graph: ModelGraph) -> dict[str, Any]:
    """The ConfigMap a TrainingJob's `modelSource.graphConfigMap` names (key graph.json.gz)."""
    data = base64.b64encode(gzip.compress(json.dumps(graph.to_dict()).encode())).decode()
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "binaryData": {"graph.json.gz": data}}
