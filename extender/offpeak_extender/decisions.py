"""Scheduling and eviction decisions: pure, keyword-only, shared by the extender and the simulator.

Nothing here does I/O or reads a clock: callers pass `now` and views built from their own data (the extender from
its informer cache and forecasts, the simulator from traces).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from offpeak_extender.humanize import duration
from offpeak_extender.model import FilterResult, NodeView, OfflinePod, PodRequest, Prediction

DEFAULT_MARGIN = 0.15

# Prioritize weights: finishing soonest matters most, then best fit of the window, then GPU bin-packing.
SPEED_WEIGHT = 0.40
FIT_WEIGHT = 0.35
PACK_WEIGHT = 0.25
MAX_SCORE = 10


def prediction_for(predicted: Mapping[str, Prediction], gpu_type: str) -> tuple[Prediction | None, bool]:
    """Return the prediction for `gpu_type` and whether it is exact.

    Matching is exact, then case-insensitive, then by prefix (`A100` ~ `A100-SXM4-40GB`). With no match the
    slowest known prediction is used (conservative, flagged inexact) so an unknown GPU type cannot admit a job
    that would not fit anywhere else.
    """
    if not predicted:
        return None, False
    if gpu_type in predicted:
        return predicted[gpu_type], True
    folded = gpu_type.casefold()
    for key, pred in predicted.items():
        if key.casefold() == folded:
            return pred, True
    for key, pred in predicted.items():
        k = key.casefold()
        if folded and (k.startswith(folded) or folded.startswith(k)):
            return pred, True
    return max(predicted.values(), key=lambda p: p.p90), False


def window_left(*, node: NodeView, gpus: int, now: float) -> float:
    """Seconds from `now` during which `gpus` GPUs stay free of online work on `node` (inf: beyond the horizon)."""
    if node.windows:
        best = 0.0
        for w in node.windows:
            if w.free_gpus >= gpus and w.start <= now and (w.end is None or w.end > now):
                best = max(best, w.length(now))
        return best
    free = node.gpus_free_now if node.window_free_gpus is None else node.window_free_gpus
    if free < gpus:
        return 0.0
    if node.window_end is None:
        return math.inf
    return max(0.0, node.window_end - now)


def _fits_now(pod: PodRequest, node: NodeView) -> str | None:
    if node.gpus_free_now < pod.gpus:
        return f"needs {pod.gpus} GPU(s), {node.gpus_free_now} of {node.gpus_total} free now"
    return None


def _window_reason(*, pod: PodRequest, node: NodeView, now: float, margin: float) -> str | None:
    """Reason the pod's predicted runtime does not fit the node's idle window, or None when it fits."""
    if pod.predicted is None or node.data_stale:
        return None
    pred, exact = prediction_for(pod.predicted, node.gpu_type)
    if pred is None:
        return None
    need = pred.p90 * (1.0 + margin)
    left = window_left(node=node, gpus=pod.gpus, now=now)
    if left >= need:
        return None
    basis = f"(p90+{margin:.0%}) on {node.gpu_type}" if exact else f"(p90+{margin:.0%}, slowest known GPU type)"
    if left <= 0:
        return f"no idle window for {pod.gpus} GPU(s) now, job needs ~{duration(need)} {basis}"
    return f"window ends in {duration(left)}, job needs ~{duration(need)} {basis}"


def filter_nodes(
    *, pod: PodRequest, nodes: Sequence[NodeView], now: float, margin: float = DEFAULT_MARGIN
) -> FilterResult:
    """Keep nodes with the GPUs free now whose idle window outlasts the pod's p90 runtime × (1 + margin).

    Runtime-blind pods (`predicted is None`) and nodes with stale forecasts only need to fit now.
    """
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    passed: list[str] = []
    failed: dict[str, str] = {}
    for node in nodes:
        reason = _fits_now(pod, node) or _window_reason(pod=pod, node=node, now=now, margin=margin)
        if reason is None:
            passed.append(node.name)
        else:
            failed[node.name] = reason
    return FilterResult(passed=tuple(passed), failed=failed)


def _pack_score(pod: PodRequest, node: NodeView) -> float:
    """1.0 when the pod takes every free GPU (no fragment left), smaller as it leaves more behind."""
    if node.gpus_free_now <= 0:
        return 0.0
    return min(1.0, pod.gpus / node.gpus_free_now)


def prioritize_nodes(
    *, pod: PodRequest, nodes: Sequence[NodeView], now: float, margin: float = DEFAULT_MARGIN
) -> dict[str, int]:
    """Score nodes 0..10: fastest GPU type for the job, tightest window that still fits, fullest node.

    Nodes that cannot take the pod score 0; nodes that can score at least 1. Runtime-blind pods and stale nodes
    are scored by bin-packing alone.
    """
    scores: dict[str, int] = {}
    timed: list[tuple[NodeView, Prediction, float]] = []
    for node in nodes:
        if _fits_now(pod, node) is not None or _window_reason(pod=pod, node=node, now=now, margin=margin):
            scores[node.name] = 0
            continue
        pred = None
        if pod.predicted is not None and not node.data_stale:
            pred, _ = prediction_for(pod.predicted, node.gpu_type)
        if pred is None:
            scores[node.name] = _scale(_pack_score(pod, node))
        else:
            timed.append((node, pred, window_left(node=node, gpus=pod.gpus, now=now)))
    if timed:
        fastest = min(p.p50 for _, p, _ in timed)
        for node, pred, left in timed:
            speed = 1.0 if pred.p50 <= 0 else fastest / pred.p50
            need = pred.p90 * (1.0 + margin)
            fit = 0.0 if math.isinf(left) or left <= 0 else min(1.0, need / left)
            total = SPEED_WEIGHT * speed + FIT_WEIGHT * fit + PACK_WEIGHT * _pack_score(pod, node)
            scores[node.name] = _scale(total)
    return scores


def _scale(x: float) -> int:
    return max(1, min(MAX_SCORE, round(x * MAX_SCORE)))


def _victim_order(pod: OfflinePod) -> tuple[bool, float, int, str]:
    return (not pod.checkpointing, pod.work_at_risk_seconds, -pod.gpus, pod.key)


def choose_victims(
    *, node: NodeView, online_gpus_needed: int, offline_pods: Sequence[OfflinePod]
) -> list[OfflinePod]:
    """Pick the offline pods to evict so online work can have `online_gpus_needed` more GPUs on `node`.

    GPUs already free on the node count first. Preference: checkpointing pods, then the least work at risk
    (GPU-seconds since the last checkpoint, or since start). Victims that turn out unnecessary are dropped
    again, most expensive first. If the offline pods cannot free enough, all of them are returned (best effort;
    the caller compares the GPU sum with its need).
    """
    shortfall = online_gpus_needed - max(0, node.gpus_free_now)
    if shortfall <= 0:
        return []
    candidates = sorted((p for p in offline_pods if p.gpus > 0), key=_victim_order)
    chosen: list[OfflinePod] = []
    freed = 0
    for pod in candidates:
        if freed >= shortfall:
            break
        chosen.append(pod)
        freed += pod.gpus
    if freed < shortfall:
        return chosen
    for pod in sorted(chosen, key=_victim_order, reverse=True):
        if freed - pod.gpus >= shortfall:
            chosen.remove(pod)
            freed -= pod.gpus
    return chosen
