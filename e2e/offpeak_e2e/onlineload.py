"""Online inference load for the local cluster: one Deployment per fake GPU node, its replica count replaying a
real serving trace with the day compressed, plus the node-agent metrics the extender's forecaster reads.

Run as a process by `offpeak cluster up`:
``python -m offpeak_e2e.onlineload --kubeconfig K --port P --day-seconds 600 --nodes n1,n2 ...``

Metrics (docs/contracts.md), one series per node: ``offpeak_node_gpus{node}`` (the node's GPU capacity) and
``offpeak_node_online_gpus{node}`` (GPUs the node's online Deployment wants now, i.e. its replica count; a fake
node has no NVML, so the demand the trace asks for stands in for "GPUs in use by online processes").

A Deployment annotated ``offpeak.io/load-driver: manual`` is left alone (tests scale it by hand to make a surge).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily

from offpeak_e2e import traceshape

NAMESPACE = "online"
GPU_RESOURCE = "nvidia.com/gpu"
MANUAL_ANNOTATION = "offpeak.io/load-driver"
log = logging.getLogger("offpeak_e2e.onlineload")


def deployment_name(node: str) -> str:
    return f"online-{node}"


def online_deployment(*, node: str, replicas: int) -> dict[str, Any]:
    """The inference Deployment pinned to `node`; each replica holds one GPU."""
    labels = {"app": deployment_name(node), "offpeak.io/workload": "online"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment_name(node), "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": deployment_name(node)}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "100%"}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "priorityClassName": "offpeak-online",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "inference",
                        "image": "registry.local/genai-serving:trace",
                        "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
                    }],
                },
            },
        },
    }


def base_objects() -> list[dict[str, Any]]:
    """The namespace and the high PriorityClass online pods run at (so they may preempt offline pods)."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "offpeak-online"},
            "value": 1000000, "globalDefault": False, "preemptionPolicy": "Never",
            "description": "online inference (offpeak e2e): queued first, but frees GPUs via offpeak's evictor",
        },
    ]


@dataclass
class Snapshot:
    """Latest per-node figures served on /metrics (lock-protected)."""

    gpus: dict[str, int] = field(default_factory=dict)
    online: dict[str, int] = field(default_factory=dict)
    offline: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def update(self, *, gpus: dict[str, int], online: dict[str, int], offline: dict[str, int]) -> None:
        with self.lock:
            self.gpus, self.online, self.offline = dict(gpus), dict(online), dict(offline)


class NodeMetricsCollector:
    """Prometheus collector over a Snapshot (no API call at scrape time)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterable[GaugeMetricFamily]:
        with self.snapshot.lock:
            gpus, online = dict(self.snapshot.gpus), dict(self.snapshot.online)
            offline = dict(self.snapshot.offline)
        g = GaugeMetricFamily("offpeak_node_gpus", "GPUs on the node.", labels=["node"])
        o = GaugeMetricFamily("offpeak_node_online_gpus", "GPUs wanted by online workloads.", labels=["node"])
        b = GaugeMetricFamily("offpeak_node_offline_gpus", "GPUs held by running offline pods.", labels=["node"])
        for node in sorted(gpus):
            g.add_metric([node], gpus[node])
            o.add_metric([node], online.get(node, 0))
            b.add_metric([node], offline.get(node, 0))
        yield g
        yield o
        yield b


def offline_gpus_by_node(pods: Iterable[Any]) -> dict[str, int]:
    """GPUs requested by running offline pods per node: what the real agent sees as GPUs with an offline process."""
    held: dict[str, int] = {}
    for pod in pods:
        if pod.status is None or pod.status.phase != "Running" or not pod.spec.node_name:
            continue
        gpus = 0
        for c in pod.spec.containers or []:
            requests = (c.resources.requests or {}) if c.resources else {}
            gpus += int(requests.get(GPU_RESOURCE, 0))
        held[pod.spec.node_name] = held.get(pod.spec.node_name, 0) + gpus
    return held


@dataclass(frozen=True)
class LoadSettings:
    nodes: tuple[str, ...]
    gpus: int = 8
    day_seconds: float = 600.0
    interval_s: float = 2.0
    bin_minutes: int = 30
    start_minute: int = 0  # trace minute shown at start (e.g. start in the quiet half of the day)
    reference_time: float = 0.0  # wall time at which trace minute 0 was shown (0: derive from start_minute)
    manual: bool = False  # only export metrics; never scale (tests drive the replicas themselves)
    plan_file: str = ""  # JSON {node: [online GPUs per slot of the day]} replayed instead of the trace


def plan(settings: LoadSettings, shape: traceshape.TraceShape) -> dict[str, list[int]]:
    """Per node, the online GPUs wanted at each trace minute."""
    return {
        node: traceshape.binned(
            traceshape.node_demand(shape, node_index=i, gpus=settings.gpus), bin_minutes=settings.bin_minutes
        ).tolist()
        for i, node in enumerate(settings.nodes)
    }


def demand_at(demand: dict[str, list[int]], node: str, *, t: float, reference: float, day_seconds: float) -> int:
    """Online GPUs wanted on `node` at wall time `t` when trace minute 0 was shown at `reference`."""
    series = demand[node]
    return series[traceshape.minute_at(elapsed_s=t - reference, day_seconds=day_seconds, minutes=len(series))]


def idle_window(demand: dict[str, list[int]], node: str, *, start: float, reference: float, day_seconds: float,
                gpus: int, need: int, step: float = 1.0) -> float:
    """Seconds from `start` until the replayed online demand on `node` leaves fewer than `need` GPUs free
    (at most one day): the idle window a job started at `start` actually had."""
    t = start
    while t < start + day_seconds:
        if demand_at(demand, node, t=t, reference=reference, day_seconds=day_seconds) + need > gpus:
            break
        t += step
    return t - start


def history_openmetrics(
    demand: dict[str, list[int]], *, gpus: int, reference: float, day_seconds: float, start: float, end: float,
    step: float, labels: dict[str, str],
) -> str:
    """The node metrics the replay would have produced over [start, end), as OpenMetrics text for
    ``promtool tsdb create-blocks-from openmetrics`` (so the forecaster has past "days" from the first minute)."""
    extra = "".join(f',{k}="{v}"' for k, v in sorted(labels.items()))
    times = []
    t = start
    while t < end:
        times.append(t)
        t += step
    lines = ["# HELP offpeak_node_gpus GPUs on the node.", "# TYPE offpeak_node_gpus gauge"]
    for node in sorted(demand):
        lines += [f'offpeak_node_gpus{{node="{node}"{extra}}} {gpus} {ts:.3f}' for ts in times]
    lines += ["# HELP offpeak_node_online_gpus GPUs wanted by online workloads.",
              "# TYPE offpeak_node_online_gpus gauge"]
    for node in sorted(demand):
        lines += [
            f'offpeak_node_online_gpus{{node="{node}"{extra}}} '
            f"{demand_at(demand, node, t=ts, reference=reference, day_seconds=day_seconds)} {ts:.3f}"
            for ts in times
        ]
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def load_plan(settings: LoadSettings) -> dict[str, list[int]]:
    """The per-node demand series: the real trace, or the plan file a scenario wrote (the day in equal slots)."""
    if settings.plan_file:
        demand = json.loads(Path(settings.plan_file).read_text())
        missing = [n for n in settings.nodes if not demand.get(n)]
        if missing:
            raise ValueError(f"plan {settings.plan_file} has no demand for {', '.join(missing)}")
        return {n: [int(v) for v in demand[n]] for n in settings.nodes}
    shape = traceshape.shape_from_duty_cycle(traceshape.load_duty_cycle())
    return plan(settings, shape)


def run(settings: LoadSettings, *, kubeconfig: str, port: int, stop: threading.Event) -> None:
    """Drive the Deployments and serve metrics until `stop` is set."""
    from kubernetes import client, config  # noqa: PLC0415 - only the process needs the client

    config.load_kube_config(config_file=kubeconfig)
    apps = client.AppsV1Api()
    core = client.CoreV1Api()
    demand = load_plan(settings)
    snapshot = Snapshot()
    registry = CollectorRegistry()
    registry.register(NodeMetricsCollector(snapshot))
    start_http_server(port, addr="127.0.0.1", registry=registry)
    reference = settings.reference_time or (
        time.time() - settings.start_minute / len(next(iter(demand.values()))) * settings.day_seconds
    )
    log.info("serving metrics on 127.0.0.1:%d for %d nodes", port, len(settings.nodes))
    while not stop.is_set():
        now = time.time()
        online: dict[str, int] = {}
        try:
            deployments = {d.metadata.name: d for d in apps.list_namespaced_deployment(NAMESPACE).items if d.metadata}
        except Exception as e:  # noqa: BLE001 - keep serving the last figures while the API is unreachable
            log.warning("cannot list deployments: %s", e)
            stop.wait(settings.interval_s)
            continue
        for node in settings.nodes:
            d = deployments.get(deployment_name(node))
            want = demand_at(demand, node, t=now, reference=reference, day_seconds=settings.day_seconds)
            if d is None:
                continue
            manual = ((d.metadata and d.metadata.annotations) or {}).get(MANUAL_ANNOTATION) == "manual"
            if manual or settings.manual or d.spec.replicas == want:
                online[node] = int(d.spec.replicas or 0)
                continue
            try:
                apps.patch_namespaced_deployment_scale(
                    deployment_name(node), NAMESPACE, {"spec": {"replicas": want}}
                )
                online[node] = want
            except Exception as e:  # noqa: BLE001
                log.warning("cannot scale %s: %s", deployment_name(node), e)
                online[node] = int(d.spec.replicas or 0)
        try:
            offline_pods = core.list_pod_for_all_namespaces(label_selector="offpeak.io/workload=offline").items
            offline = offline_gpus_by_node(offline_pods)
        except Exception as e:  # noqa: BLE001 - keep the last figures while the API is unreachable
            log.warning("cannot list offline pods: %s", e)
            offline = dict(snapshot.offline)
        snapshot.update(gpus={n: settings.gpus for n in settings.nodes}, online=online, offline=offline)
        stop.wait(settings.interval_s)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m offpeak_e2e.onlineload", description=__doc__)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--nodes", required=True, help="comma-separated node names")
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--day-seconds", type=float, default=600.0)
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--start-minute", type=int, default=0)
    p.add_argument("--reference-time", type=float, default=0.0, help="wall time of trace minute 0 (epoch s)")
    p.add_argument("--manual", action="store_true", help="do not scale; only export the replica counts")
    p.add_argument("--plan-file", default="", help="JSON {node: [online GPUs per slot]} instead of the trace")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    settings = LoadSettings(
        nodes=tuple(n for n in args.nodes.split(",") if n), gpus=args.gpus, day_seconds=args.day_seconds,
        interval_s=args.interval, start_minute=args.start_minute, manual=args.manual,
        reference_time=args.reference_time, plan_file=args.plan_file,
    )
    try:
        run(settings, kubeconfig=args.kubeconfig, port=args.port, stop=stop)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
