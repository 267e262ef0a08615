"""The shared end-to-end cluster, cut into lanes: each scenario runs on nodes of its own, so scenarios run at the
same time on one control plane without seeing each other's online load, history, pools or cordons.

A lane is a few fake GPU nodes labelled `e2e.offpeak.io/lane=<lane>`, with their own online-load plan over the
compressed day. A scenario confines its pods to its lane with a node selector (`Lane.node_selector`); Kueue's
flavor, a pool label value and every node a test cordons or surges are the lane's own. The cluster runs every
offpeak feature the scenarios need at once (pool windows, planned stops, expected-goodput admission, Kueue's
admission check, PyTorchJobs): each only acts where a scenario opts in (a pool label on its nodes, a checkpoint
interval, a queue name, a PyTorchJob), so the lanes do not disturb each other.

Pure: settings and manifests only; `conftest.py` starts the cluster and attaches every test worker to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from offpeak_e2e.cluster import ClusterSettings
from offpeak_e2e.controlplane import ControlPlaneSettings
from offpeak_e2e.nodes import NodeSpec

LANE_LABEL = "e2e.offpeak.io/lane"
DAY = 240.0  # one compressed day of online load, in seconds
ONLINE_GPUS = 8  # a node's online work outside its idle window: all its GPUs
POOL_LABEL = "example.com/inference-pool"
# namespaces whose TrainingJobs a test's own operator handles (in-process, or a process it kills): the cluster's
# operator leaves them alone
OWN_OPERATOR_PREFIX = "own-"

# an analysis pod never ends under kwok: the operator gives up on it this soon and predicts without a graph
ANALYSIS_TIMEOUT_S = 15

A100, H100, L4, V100 = "A100-SXM4-40GB", "H100-SXM5-80GB", "L4", "V100-SXM2-16GB"


@dataclass(frozen=True)
class Lane:
    """Nodes reserved for one scenario group.

    `idle`: per node, the stretch [start, end) of each day (seconds) when the node has no online work; outside it
    the node is full of online work. None: no online work at all unless a test scales a node's online Deployment
    (`E2ECluster.scale_online`).
    """

    name: str
    gpu_types: tuple[str, ...]
    idle: tuple[tuple[int, int], ...] | None = None
    offset: int = 0  # the lane's day starts this many seconds after the cluster's (so it begins where it is needed)

    @property
    def node_selector(self) -> dict[str, str]:
        return {LANE_LABEL: self.name}

    def specs(self) -> list[NodeSpec]:
        """One node per entry of `gpu_types`, named `<lane>-<type>-<n>` (n counts the lane's nodes of that type)."""
        labels = ((LANE_LABEL, self.name),)
        return [NodeSpec(name=f"{self.name}-{t.lower()}-{self.gpu_types[:i].count(t)}", gpu_type=t, labels=labels)
                for i, t in enumerate(self.gpu_types)]

    @property
    def nodes(self) -> list[str]:
        return [s.name for s in self.specs()]

    def nodes_of_type(self, gpu_type: str) -> list[str]:
        """The lane's nodes of that GPU type, in order."""
        return [spec.name for spec in self.specs() if spec.gpu_type == gpu_type]

    def node_of_type(self, gpu_type: str) -> str:
        """The lane's first node of that GPU type."""
        for name in self.nodes_of_type(gpu_type):
            return name
        raise KeyError(f"lane {self.name} has no {gpu_type} node")

    def plan(self, *, day: float = DAY) -> dict[str, list[int]]:
        """Online GPUs per second of the day for each of the lane's nodes."""
        if self.idle is None:
            return {node: [0] for node in self.nodes}
        if len(self.idle) != len(self.gpu_types):
            raise ValueError(f"lane {self.name}: one idle stretch per node")
        seconds = int(day)
        return {node: [0 if start <= (t - self.offset) % seconds < end else ONLINE_GPUS for t in range(seconds)]
                for node, (start, end) in zip(self.nodes, self.idle)}

    def phase(self, *, reference: float, now: float, day: float = DAY) -> float:
        """Seconds into the lane's current day at wall time `now` (`reference`: when the cluster's day began)."""
        return (now - reference - self.offset) % day


# The lanes of the shared cluster (docs/e2e.md says which scenario runs where). The cluster's day begins once
# offpeak's services are up, and the scenarios start about 10-40 s later, in parallel. A lane whose scenario needs a
# given time of its day has its day shifted (`offset`) so that time comes then, instead of up to a day later.
BASIC = Lane("basic", (A100, H100, L4, V100))
SURGE = Lane("surge", (V100, V100))
ELASTIC = Lane("elastic", (V100, L4))
JOBS = Lane("jobs", (A100, H100, V100, V100))
DASHBOARD = Lane("dash", (A100, L4))
FEEDBACK = Lane("feedback", (A100,))
OWN_OPERATOR = Lane("ownop", (A100, H100, L4))
# planned stops: the first node idle for the first half of the day, the second for the second
YIELD = Lane("yield", (A100, H100), idle=((0, 120), (110, 235)), offset=25)
# pool windows: each node full for half the day, the pair's total a steady 8 of 16 GPUs
POOLS = Lane("pools", (A100, A100), idle=((120, 240), (0, 120)), offset=18)
ANNOUNCE = Lane("announce", (A100, A100), idle=((0, 240), (0, 240)))
# Kueue: every GPU busy for the first 70 s of each day, idle for the rest
KUEUE = Lane("kueue", (A100, H100), idle=((70, 240), (70, 240)), offset=5)
KINDS = Lane("kinds", (A100, H100))
LOAD = Lane("load", (A100, H100, L4, V100))
LIVE = Lane("live", (A100, H100))
CHART = Lane("chart", (A100, H100))

SHARED_LANES: tuple[Lane, ...] = (BASIC, SURGE, ELASTIC, JOBS, DASHBOARD, FEEDBACK, OWN_OPERATOR, YIELD, POOLS,
                                  ANNOUNCE, KUEUE, KINDS, LOAD, LIVE, CHART)

# Every feature a lane opts in to, on for the whole cluster (each acts only where a scenario asks for it).
SHARED_ENV: Mapping[str, str] = {
    # expected-goodput admission of checkpointing jobs into short windows (trusted after 10 observed windows,
    # a compressed day's worth), and the fake training code's short start
    "OFFPEAK_GOODPUT_MIN_EFFICIENCY": "0.5", "OFFPEAK_GOODPUT_STARTUP_SECONDS": "3",
    "OFFPEAK_GOODPUT_MIN_SAMPLES": "10",
    # planned stops before a window's forecast end
    "OFFPEAK_YIELD_AT_CHECKPOINTS": "true", "OFFPEAK_YIELD_MARGIN_SECONDS": "10",
    # pool windows for nodes that carry the pool label
    "OFFPEAK_POOL_LABEL": POOL_LABEL,
    # Kueue's admission check for queued Jobs, and PyTorchJobs
    "OFFPEAK_KUEUE_ADMISSION_CHECK": "offpeak.io/window-fit", "OFFPEAK_KUEUE_INTERVAL_SECONDS": "1",
    "OFFPEAK_PYTORCH_JOBS": "true",
}


def shared_settings(name: str, lanes: tuple[Lane, ...] = SHARED_LANES) -> ClusterSettings:
    """The shared cluster: every lane's nodes and online plan, a 240 s day with 4 past days in Prometheus, Kueue
    and training-operator beside offpeak, and offpeak's operator leaving the own-operator namespaces alone."""
    specs = tuple(s for lane in lanes for s in lane.specs())
    plan = {node: series for lane in lanes for node, series in lane.plan().items()}
    return ClusterSettings(
        control_plane=ControlPlaneSettings(name=name, node_specs=specs, build_missing=False, start_timeout_s=180,
                                           retry_unschedulable_s=5),
        day_seconds=DAY, online_load=True, online_start_minute=0, history_days=4, online_plan=plan,
        extra_env=dict(SHARED_ENV), addons=("kueue", "training-operator"),
        operator_namespaces=(f"!{OWN_OPERATOR_PREFIX}*",), analysis_timeout_s=ANALYSIS_TIMEOUT_S,
    )


def confined(manifest: dict[str, Any], lane: Lane) -> dict[str, Any]:
    """A TrainingJob confined to the lane's nodes (its `spec.nodeSelector`)."""
    spec = manifest["spec"]
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **lane.node_selector}
    return manifest


def confined_template(template: dict[str, Any], lane: Lane) -> dict[str, Any]:
    """A pod template (or a Pod) confined to the lane's nodes."""
    spec = template["spec"]
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **lane.node_selector}
    return template


# Lane files that take longest first (by their measured wall time, docs/e2e.md), so parallel test processes start
# them at once and the short ones fill in after; the lanes whose day is shifted to the cluster's start (kueue,
# yield) are among the first six. A file's tests stay together and in order: the sort is stable.
FILE_ORDER = ("test_kueue", "test_demo", "test_announced_demand", "test_elastic", "test_job_kinds",
             "test_planned_stops", "test_pool_windows", "test_lifecycle", "test_chart_install", "test_real_jobs",
             "test_faults", "test_surge", "test_feedback", "test_dashboard", "test_live_pace",
             "test_load_smoke", "test_operator_peering", "test_helm_install")
