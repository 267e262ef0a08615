"""Eviction planning: which offline pods to evict, on which node, for which online demand. Pure.

Two triggers: an online pod that cannot be scheduled because offline pods hold the GPUs on the nodes it may run
on, and measured online demand on a node (from the node agent) outgrowing what the node has left.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from offpeak_core.decisions import choose_victims
from offpeak_core.humanize import duration
from offpeak_core.model import NodeView, OfflinePod
from offpeak_core.yielding import YieldSettings, last_checkpoint, should_yield

REASON_PENDING = "online-pod-pending"
REASON_PRESSURE = "online-demand-rising"
REASON_YIELD = "window-ending"  # a planned stop at a checkpoint (`offpeak_core.yielding`): nothing is lost
# Set ("true") beside `offpeak.io/eviction-reason` on a pod stopped by a planned stop, so the operator requeues the
# job without counting the attempt against `maxAttempts` (a stop at a checkpoint is not a failure).
PLANNED_STOP_ANNOTATION = "offpeak.io/planned-stop"
# Every reason a plan can carry (offpeak_evictions_total{reason}, the offpeak.io/eviction-reason annotation's cause).
EVICTION_REASONS = (REASON_PENDING, REASON_PRESSURE, REASON_YIELD)


@dataclass(frozen=True)
class NodeState:
    """A node as eviction planning sees it; `releasing_gpus` are held by pods already being evicted/deleted."""

    view: NodeView
    offline_pods: tuple[OfflinePod, ...]
    releasing_gpus: int = 0


@dataclass(frozen=True)
class EvictionPlan:
    node: str
    victims: tuple[OfflinePod, ...]
    reason: str  # low-cardinality kind, used as the metric label
    message: str  # human text for the pod annotation and the TrainingJob event

    @property
    def gpu_seconds_lost(self) -> float:
        return sum(v.work_at_risk_seconds for v in self.victims)


def plan_for_pending(
    *, pod_key: str, gpus: int, candidates: Sequence[str], nodes: Mapping[str, NodeState]
) -> EvictionPlan | None:
    """Evict on the candidate node that loses the least work, unless a candidate already has (or soon has) room.

    Returns None when nothing needs evicting or no candidate can make room even by evicting all its offline pods.
    """
    best: tuple[float, int, str, list[OfflinePod]] | None = None
    for name in candidates:
        state = nodes.get(name)
        if state is None or state.view.gpus_total < gpus:
            continue
        free = state.view.gpus_free_now + state.releasing_gpus
        if free >= gpus:
            return None  # room exists or is on its way: the scheduler will place it
        node = NodeView(name, state.view.gpu_type, state.view.gpus_total, free)
        victims = choose_victims(node=node, online_gpus_needed=gpus, offline_pods=state.offline_pods)
        if free + sum(v.gpus for v in victims) < gpus:
            continue
        cost = sum(v.work_at_risk_seconds for v in victims)
        key = (cost, len(victims), name, victims)
        if best is None or key[:3] < best[:3]:
            best = key
    if best is None:
        return None
    _, _, name, victims = best
    msg = f"evicted from {name} to make room for online pod {pod_key} ({gpus} GPU(s))"
    return EvictionPlan(node=name, victims=tuple(victims), reason=REASON_PENDING, message=msg)


def plan_for_pressure(
    *, state: NodeState, measured_online: float, requested_online: int, other_gpus: int = 0,
    settle_seconds: float = 0.0,
) -> EvictionPlan | None:
    """Evict when measured online GPU use exceeds what the node has left after offline and other pods.

    Online processes can outgrow their pods' requests (shared GPUs, MPS, bursts); when
    max(measured, requested) + offline + other exceeds the node's GPUs, offline work yields.

    A measurement lags the pods (agent sampling, scrape interval): right after online pods leave a node it still
    shows their use, and an offline pod placed into the GPUs they freed would be evicted by that old figure.
    Offline pods that started less than `settle_seconds` ago therefore neither count against the measurement
    nor are its victims; online pods that need GPUs evict through `plan_for_pending`, which reads the pods.
    """
    view = state.view
    online = max(float(requested_online), measured_online)
    settled = tuple(p for p in state.offline_pods if p.elapsed_seconds >= settle_seconds)
    offline = sum(p.gpus for p in settled)
    over = int(-(-(online + offline + other_gpus - view.gpus_total) // 1))  # ceil
    if over <= 0:
        return None
    node = NodeView(view.name, view.gpu_type, view.gpus_total, 0)
    victims = choose_victims(node=node, online_gpus_needed=over, offline_pods=settled)
    if not victims:
        return None
    msg = (f"online GPU demand on {view.name} rose to {online:g} of {view.gpus_total} GPUs; "
           f"evicting to free {over} GPU(s)")
    return EvictionPlan(node=view.name, victims=tuple(victims), reason=REASON_PRESSURE, message=msg)


def plan_yields(
    *, node: str, offline_pods: Sequence[OfflinePod], window_end: float | None, now: float,
    startup_seconds: float = 0.0, settings: YieldSettings = YieldSettings(), end_known: bool = False,
) -> EvictionPlan | None:
    """Stop, at a checkpoint, the offline pods on `node` whose next checkpoint would come after the forecast end of
    the window they run in (`window_end`: when online demand is forecast to need their GPUs; None: not within the
    forecast). A planned stop loses no work and is over before online work returns, where an eviction then would
    lose the work since the checkpoint and make an online pod wait (`offpeak_core.yielding`). `end_known`: the end
    is announced demand or declared busy hours, not a forecast (the message says which)."""
    if window_end is None:
        return None
    victims: list[OfflinePod] = []
    for p in offline_pods:
        started, interval, startup = now - p.elapsed_seconds, p.checkpoint_interval_seconds, startup_seconds
        if p.last_checkpoint_at is not None and interval is not None:
            # its checkpoints fall every interval from the one it reported (a grid that starts one interval before)
            started, startup = p.last_checkpoint_at - interval, 0.0
        if not p.checkpointing or not should_yield(now=now, started_at=started, interval=interval,
                                                   window_end=window_end, startup_seconds=startup,
                                                   finish_by=p.finish_by, save_seconds=p.save_on_stop_seconds,
                                                   settings=settings):
            continue
        if p.save_on_stop_seconds is not None:  # it saves as it stops: nothing to lose
            victims.append(replace(p, seconds_since_checkpoint=0.0))
            continue
        last = last_checkpoint(now=now, started_at=started, interval=interval, startup_seconds=startup)
        if last is not None:  # what it loses: nothing past its checkpoint
            victims.append(replace(p, seconds_since_checkpoint=now - last))
    if not victims:
        return None
    why = "is scheduled (announced demand or busy hours) to need" if end_known else "is forecast to need"
    when = f"online work {why} the GPUs on {node} in {duration(max(0.0, window_end - now))}"
    if all(v.save_on_stop_seconds is not None for v in victims):
        msg = f"stopping to save: {when}; the job saves its checkpoint as it stops, no work is lost, it is requeued"
    else:
        msg = f"stopping at a checkpoint: {when}, before the next checkpoint; no work is lost, the job is requeued"
    return EvictionPlan(node=node, victims=tuple(victims), reason=REASON_YIELD, message=msg)
