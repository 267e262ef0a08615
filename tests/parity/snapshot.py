"""One cluster snapshot, fed to the extender (through its store, as its informers and history refresher would) and
to the simulator (as its engine holds a policy's cluster): the parity tests ask both the same questions.

The snapshot: six 8-GPU nodes, three in the pool `web` (A100) and three alone (one A100, two V100), each node's
online demand over four seasons of history repeating every season in 5-minute blocks (so a step's samples are one
value: the extender's history has a point per step, the simulator's trace one per minute), the pool's online owners
announcing what it will hold over the next 35 minutes, offline pods running on three nodes, and a pending pod and a
pending gang. Goodput admission is on, both sides reading one survival table. One node (solo-v2) has online work its
history never had at this time of day, risen 70 minutes ago: past the hour a missed rise closes a node for,
counted from the rise (`forecast.apply_live`'s `rose_at`), so its windows are open now on both sides only if both
count that hour from the rise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry

from offpeak_core.forecast import ForecastSettings
from offpeak_core.goodput import DEFAULT_CLASS_EDGES, GoodputAdmission, GoodputSettings, WindowSurvival
from offpeak_core.model import Prediction
from offpeak_core.timeparse import parse_timestamp
from offpeak_extender.evictor import Evictor, EvictorSettings
from offpeak_extender.metrics import EvictorMetrics, ExtenderMetrics
from offpeak_extender.pools import PoolSettings
from offpeak_extender.service import DecisionSettings, ExtenderService
from offpeak_extender.store import ClusterStore
from offpeak_sim.engine import PolicyRun
from offpeak_sim.estimates import default_profile
from offpeak_sim.fleet import Fleet
from offpeak_sim.forecasting import FeedSettings, WindowFeed
from offpeak_sim.jobs import JobStream
from offpeak_sim.onlinepods import OnlinePlacement, OnlinePools
from offpeak_sim.policies import POLICIES
from offpeak_sim.scenario import Scenario
from offpeak_sim.settings import EngineSettings

from support.clock import Clock

A100, V100 = "A100-SXM4-40GB", "V100-SXM2-16GB"
SEASON = 6 * 3600.0
STEP = 300.0
FORECAST = ForecastSettings(season_seconds=SEASON, step_seconds=STEP, horizon_seconds=SEASON,
                            history_seconds=30 * SEASON, weekly=False)
NOW = 4 * SEASON + 3600.0  # one hour into the fifth season, on a step
M = int(NOW // 60)
LABEL = "pool.example.com/name"
LOOK_BACK = 3600.0
ANNOUNCE = 35 * 60.0
CHECKPOINT = 1800.0
NAMES = ("web-0", "web-1", "web-2", "solo-a", "solo-v1", "solo-v2")
TYPES = (A100, A100, A100, A100, V100, V100)
POOL = (0, 1, 2)

# Online GPUs per node per block of a season (72 blocks of 5 minutes): (first block, last block + 1, GPUs)
PATTERN: tuple[tuple[tuple[int, int, int], ...], ...] = (
    ((0, 72, 2), (24, 30, 6)),  # web-0: 2 GPUs, 6 from 2:00 to 2:30
    ((0, 72, 1), (14, 16, 7), (20, 26, 5), (40, 44, 7)),  # web-1
    ((0, 72, 0), (14, 16, 8), (30, 36, 4)),  # web-2: the pool holds 17 of its 24 GPUs from 1:10 to 1:20
    ((0, 72, 0), (22, 40, 8)),  # solo-a: idle but 1:50-3:20
    ((0, 72, 3), (30, 72, 8)),  # solo-v1: 3 GPUs, all 8 from 2:30 to the season's end
    ((0, 72, 0), (16, 18, 2)),  # solo-v2: nearly idle, but for `RISE`
)
RISE = (5, M - 70, 2)  # (node, first minute, GPUs): online work on solo-v2 from 70 minutes ago on, never seen before


def demand() -> np.ndarray:
    """int [nodes, minutes]: the history, now and a season ahead (what the simulator's announcements read)."""
    minutes = M + int(SEASON // 60) + 1
    blocks = np.zeros((len(NAMES), 72), dtype=np.int64)
    for n, rules in enumerate(PATTERN):
        for a, b, g in rules:
            blocks[n, a:b] = g
    block_of_minute = (np.arange(minutes) % int(SEASON // 60)) // 5
    out = blocks[:, block_of_minute]
    node, first, gpus = RISE
    out[node, first:] += gpus
    return out


@dataclass(frozen=True)
class Running:
    """An offline pod running since `start` on `node` (`gpus` there); a gang's members share a job."""

    job: int
    node: int
    gpus: int
    start: float


RUNNING = (Running(0, 3, 4, NOW - 2500.0), Running(1, 3, 2, NOW - 600.0), Running(2, 0, 2, NOW - 4000.0),
           Running(3, 4, 1, NOW - 7000.0))
PENDING_POD = 4  # a job of 4 GPUs
PENDING_GANG = 5  # a job of 10 GPUs: no node takes it alone
JOB_GPUS = (4, 2, 2, 1, 4, 10)
PREDICTED = {A100: Prediction(2400.0, 3000.0), V100: Prediction(4800.0, 6000.0)}


def survival() -> WindowSurvival:
    """Windows of every forecast class: a third close within 40 minutes, the rest outlast the day."""
    bins = int(86400 // 300)
    closed = np.zeros((len(DEFAULT_CLASS_EDGES), bins + 1), dtype=np.int64)
    closed[:, 8] = 20
    closed[:, -1] = 40
    return WindowSurvival(DEFAULT_CLASS_EDGES, 300.0, closed)


def pool_totals() -> np.ndarray:
    return demand()[list(POOL)].sum(axis=0)


# ---- the extender --------------------------------------------------------------------------------------------

def _stamp(t: float) -> str:
    from datetime import datetime, timezone
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_object(n: int) -> dict[str, Any]:
    labels = {"offpeak.io/gpu-type": TYPES[n], "kubernetes.io/hostname": NAMES[n]}
    if n in POOL:
        labels[LABEL] = "web"
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": NAMES[n], "uid": f"uid-{NAMES[n]}", "labels": labels, "annotations": {}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "capacity": {"nvidia.com/gpu": "8"}}}


def pod_object(name: str, *, gpus: int, node: str | None, workload: str, start: float | None = None,
               job: str | None = None, gang: tuple[int, int] | None = None) -> dict[str, Any]:
    """A pod as the API serves it; an offline one checkpoints every `CHECKPOINT` and carries `PREDICTED`."""
    labels = {"offpeak.io/workload": workload}
    ann: dict[str, str] = {}
    if workload == "offline":
        labels["offpeak.io/trainingjob"] = job or name
        ann.update({"offpeak.io/checkpointing": "true", "offpeak.io/checkpoint-interval-seconds": str(CHECKPOINT),
                    "offpeak.io/predicted-job-seconds": json.dumps(
                        {t: {"p50": p.p50, "p90": p.p90} for t, p in PREDICTED.items()})})
    if gang is not None:
        labels.update({"offpeak.io/attempt": "0", "offpeak.io/worker": str(gang[0])})
        ann["offpeak.io/gang-size"] = str(gang[1])
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if node is not None:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": "Pending"} if node is None else {"phase": "Running",
                                                                         "startTime": _stamp(start or NOW)}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": labels, "annotations": ann},
            "spec": spec, "status": status}


def running_pods() -> list[dict[str, Any]]:
    d = demand()
    pods = [pod_object(f"web-pod-{n}-{k}", gpus=1, node=NAMES[n], workload="online")
            for n in range(len(NAMES)) for k in range(int(d[n, M]))]
    pods += [pod_object(f"job{r.job}-w0", gpus=r.gpus, node=NAMES[r.node], workload="offline", start=r.start,
                        job=f"job{r.job}") for r in RUNNING]
    return pods


def announcements() -> list[dict[str, Any]]:
    """The pool's online total per 5-minute step over the next 35 minutes, one OnlineDemand per step."""
    totals = pool_totals()
    objs = []
    for i in range(int(ANNOUNCE // STEP)):
        a = M + i * int(STEP // 60)
        gpus = int(totals[a : a + int(STEP // 60)].max())
        objs.append({"apiVersion": "offpeak.io/v1alpha1", "kind": "OnlineDemand",
                     "metadata": {"name": f"web-{i}", "namespace": "serving"},
                     "spec": {"pool": "web", "gpus": gpus, "start": _stamp(NOW + i * STEP),
                              "end": _stamp(NOW + (i + 1) * STEP)}})
    return objs


class _Goodput:
    """The extender's goodput feed, reading the snapshot's survival table (`GoodputFeed.admission`)."""

    def __init__(self, table: WindowSurvival) -> None:
        self.table = table

    def admission(self, members: int = 1) -> GoodputAdmission:
        return GoodputAdmission(self.table, GoodputSettings(), members)


@dataclass
class Extender:
    store: ClusterStore
    service: ExtenderService
    evictor: Evictor


def extender() -> Extender:
    """The snapshot in the extender: informer events into its store, the history refresher's series."""
    store = ClusterStore(settings=FORECAST, clock=Clock(NOW), stale_after_seconds=600.0,
                         pools=PoolSettings(label=LABEL, look_back_seconds=LOOK_BACK))
    store.replace_all(nodes=[node_object(n) for n in range(len(NAMES))], pods=running_pods())
    store.replace_announcements(announcements())
    d = demand()
    times = np.arange(0.0, NOW + 1.0, STEP)  # a range query's points, one per step up to now
    store.set_history({name: (times, d[n, (times // 60).astype(int)].astype(float)) for n, name in enumerate(NAMES)},
                      now=NOW)
    service = ExtenderService(store=store, metrics=ExtenderMetrics.create(CollectorRegistry()),
                              settings=DecisionSettings(), goodput=_Goodput(survival()))  # type: ignore[arg-type]
    evictor = Evictor(store=store, actions=None, metrics=EvictorMetrics.create(CollectorRegistry()),  # type: ignore
                      settings=EvictorSettings(), clock=Clock(NOW))
    return Extender(store, service, evictor)


# ---- the simulator -------------------------------------------------------------------------------------------

def scenario() -> Scenario:
    d = demand()
    fleet = Fleet(names=NAMES, gpu_types=TYPES, gpus=np.full(len(NAMES), 8, dtype=np.int64), types=(A100, V100))
    n_jobs = len(JOB_GPUS)
    jobs = JobStream(ids=np.array([f"job{j}" for j in range(n_jobs)]), arrival_s=np.full(n_jobs, NOW - 8000.0),
                     duration_s=np.full(n_jobs, 20000.0), gpus=np.array(JOB_GPUS, dtype=np.int64))
    pools = OnlinePools((np.array(POOL),), pool_totals()[None, :], np.ones(1, dtype=np.int64))
    placement = OnlinePlacement(pools, np.full(len(NAMES), 8, dtype=np.int64), d[:, M].copy(),
                                [np.random.default_rng(0)])
    return Scenario(fleet=fleet, demand=d.astype(np.int16), start_s=NOW - 8000.0, end_s=NOW + SEASON,
                    jobs=jobs, pred_ratio=np.ones((n_jobs, 2)), p90_ratio=1.25, user_est_ref_s=jobs.duration_s,
                    profile=default_profile(), online_pods=placement)


def simulator() -> PolicyRun:
    """The snapshot in the simulator: the offpeak policy's cluster with the running pods started, its own window
    feed refreshed now, the same survival table."""
    sc = scenario()
    feed = WindowFeed(sc, FeedSettings(forecast=FORECAST, pool_windows=True, pool_look_back_seconds=LOOK_BACK,
                                       pool_announce_seconds=ANNOUNCE))
    run = PolicyRun(POLICIES["offpeak"], sc, feed, EngineSettings(checkpoint_seconds=CHECKPOINT))
    for r in RUNNING:
        run._start(r.job, r.node, r.start)
    assert run.feed is not None
    run.feed.maybe_refresh(NOW)
    run.feed.survival = survival()
    run.feed.survival_version += 1
    return run


def free_now(run: PolicyRun) -> np.ndarray:
    return run.sc.fleet.gpus - run.demand[:, M] - run.used


def predictions() -> dict[str, Prediction]:
    return dict(PREDICTED)


__all__ = ["NAMES", "NOW", "M", "PENDING_GANG", "PENDING_POD", "extender", "simulator", "pod_object", "free_now",
           "predictions", "parse_timestamp"]
