"""Scheduling and eviction decisions: pure, keyword-only, shared by the extender and the simulator.

Nothing here does I/O or reads a clock: callers pass `now` and views built from their own data (the extender from
its informer cache and forecasts, the simulator from traces).

Over 500 lines because filter, prioritize and the victim choice share their window and room arithmetic, node by
node and over columns (a test holds the two equal); gang plans, rooms, elastic, goodput and yield rules have
modules of their own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import NamedTuple, Protocol

import numpy as np

from offpeak_core.goodput import GoodputAdmission, certain_window_ok, min_window
from offpeak_core.humanize import duration
from offpeak_core.model import FilterResult, NodeView, OfflinePod, PodRequest, Prediction
from offpeak_core.nodearrays import NodeArrays

DEFAULT_MARGIN = 0.15

# Prioritize weights: finishing soonest matters most, then best fit of the window, then GPU bin-packing.
SPEED_WEIGHT = 0.40
FIT_WEIGHT = 0.35
PACK_WEIGHT = 0.25
MAX_SCORE = 10


def prediction_for(predicted: Mapping[str, Prediction], gpu_type: str) -> tuple[Prediction | None, bool]:
    """Return the prediction for `gpu_type` and whether it is exact.

    Matching is exact, then case-insensitive, then by dash-separated prefix (`A100` ~ `A100-SXM4-40GB`,
    but `A10` !~ `A100-SXM4-40GB`). With no match the
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
        if folded and k and (k.startswith(folded + "-") or folded.startswith(k + "-")):  # A10 is not A100
            return pred, True
    return max(predicted.values(), key=lambda p: p.p90), False


def window_left(*, node: NodeView, gpus: int, now: float) -> float:
    """Seconds from `now` during which `gpus` GPUs stay free of online work on `node` (inf: beyond the horizon)."""
    return window_left_certain(node=node, gpus=gpus, now=now)[0]


def window_left_certain(*, node: NodeView, gpus: int, now: float) -> tuple[float, bool]:
    """`window_left`, and whether the window measured to ends then for certain (`IdleWindow.end_certain`)."""
    if node.windows is not None:
        best = 0.0
        certain = False
        for w in node.windows:  # hot path: inlined IdleWindow.length
            if w.free_gpus >= gpus and w.start <= now:
                end = w.end
                if end is None:
                    return math.inf, False
                if end - now > best:
                    best, certain = end - now, w.end_certain
                elif end - now == best and best > 0:
                    certain = certain or w.end_certain
        return best, certain
    free = node.gpus_free_now if node.window_free_gpus is None else node.window_free_gpus
    if free < gpus:
        return 0.0, False
    if node.window_end is None:
        return math.inf, False
    return max(0.0, node.window_end - now), False


class _Assessment(NamedTuple):
    """One pod on one node: does it fit, and the numbers behind the answer (reasons are formatted on demand)."""

    fits: bool
    free_short: bool  # not enough GPUs free now
    pred: Prediction | None  # None: runtime-blind (no prediction, or stale node)
    exact: bool
    need: float
    left: float
    capped: bool = False  # need was capped at a few checkpoint intervals
    by_goodput: bool = False  # need was lowered to the shortest window with enough expected goodput
    no_memory: bool = False  # the GPU type cannot hold one step (predicted peak memory)
    announced: bool = False  # turned down: the window's end is certain and too soon for enough expected goodput
    uncut_need: float = 0.0  # need before the goodput rule lowered it (`_assess_arrays`' per-GPU-type assessments)
    uncut_capped: bool = False  # capped, before the goodput rule


_NOT_FREE = _Assessment(False, True, None, False, 0.0, 0.0)
_BLIND_FIT = _Assessment(True, False, None, False, 0.0, math.inf)


def _checkpoint_cap(pod: PodRequest, checkpoint_intervals: int) -> float:
    """Longest window a checkpointing pod needs under the checkpoint-aware rule (inf when the rule is off)."""
    interval = pod.checkpoint_interval_seconds
    if checkpoint_intervals > 0 and pod.checkpointing and interval is not None and interval > 0:
        return checkpoint_intervals * interval
    return math.inf


def _certain_ok(pod: PodRequest, pred: Prediction, goodput: GoodputAdmission, left: float) -> bool:
    """Whether a window known to close within `left` seconds is worth it for a checkpointing pod (goodput on)."""
    return certain_window_ok(survival=goodput.survival, left=left, runtime=pred.p90,
                             checkpoint_interval=pod.checkpoint_interval_seconds, settings=goodput.settings,
                             members=goodput.members)


def _goodput_need(pod: PodRequest, pred: Prediction, goodput: GoodputAdmission | None) -> float:
    """Shortest window with enough expected goodput for a checkpointing pod (inf: rule off or not checkpointing)."""
    interval = pod.checkpoint_interval_seconds
    if goodput is None or not pod.checkpointing or interval is None or interval <= 0:
        return math.inf
    need = min_window(survival=goodput.survival, runtime=pred.p90, checkpoint_interval=interval,
                      settings=goodput.settings, members=goodput.members)
    return max(need, 1.0)  # some window: GPUs free now and forecast free for a moment


def least_window(*, pod: PodRequest, p90: float, margin: float = DEFAULT_MARGIN, checkpoint_intervals: int = 0,
                 goodput: GoodputAdmission | None = None, certain_ends: bool = False) -> float:
    """The shortest window `filter_nodes` may take for `pod` whose p90 on a GPU type is `p90`: p90 x (1 + margin),
    capped by the checkpoint rule, or less by the goodput rule. A bound for callers that skip nodes before the
    filter (the simulator), not the decision: where a window may end for certain (`certain_ends`: announced demand,
    busy hours), the goodput rule may take one as short as a minute (`goodput.certain_window_ok`)."""
    need = min(p90 * (1.0 + margin), _checkpoint_cap(pod, checkpoint_intervals))
    g_need = _goodput_need(pod, Prediction(p90, p90), goodput)
    if g_need < need:
        return min(g_need, 60.0) if certain_ends else g_need
    return need


class _Assess(Protocol):
    """A node's assessment for a pod, of its own GPUs or of `gpus` (`fitting_workers` asks for k workers')."""

    def __call__(self, node: NodeView, gpus: int = ...) -> _Assessment: ...


def _assessor(
    pod: PodRequest, now: float, margin: float, checkpoint_intervals: int = 0,
    goodput: GoodputAdmission | None = None,
) -> _Assess:
    """Build the per-node check for one pod (of `pod.gpus`, or as many GPUs as asked: what a window needs does
    not depend on them); GPU-type lookups are memoised for the request (hot path)."""
    gpus = pod.gpus
    predicted = pod.predicted
    factor = 1.0 + margin
    cap = _checkpoint_cap(pod, checkpoint_intervals)
    by_type: dict[str, tuple[Prediction | None, bool]] = {}
    short: dict[str, float] = {}

    def assess(node: NodeView, gpus: int = gpus) -> _Assessment:
        if node.gpus_free_now < gpus:
            return _NOT_FREE
        if predicted is None:
            return _BLIND_FIT
        hit = by_type.get(node.gpu_type)
        if hit is None:
            hit = by_type[node.gpu_type] = prediction_for(predicted, node.gpu_type)
        pred, exact = hit
        if exact and pred is not None and pred.fits_memory is False:  # whatever the forecast says
            return _Assessment(False, False, pred, exact, 0.0, 0.0, no_memory=True)
        if pred is None or node.data_stale:
            return _BLIND_FIT
        need = pred.p90 * factor
        capped = need > cap
        if capped:
            need = cap
        g_need = short.get(node.gpu_type)
        if g_need is None:
            g_need = short[node.gpu_type] = _goodput_need(pod, pred, goodput)
        left, certain = window_left_certain(node=node, gpus=gpus, now=now)
        if g_need < need:
            if certain and left < need and goodput is not None:  # the window cannot outlast its end: judge that end
                if _certain_ok(pod, pred, goodput, left):
                    return _Assessment(True, False, pred, exact, min(g_need, left), left, by_goodput=True)
                return _Assessment(False, False, pred, exact, need, left, capped, announced=True)
            need, capped = g_need, False
            return _Assessment(left >= need, False, pred, exact, need, left, by_goodput=True)
        return _Assessment(left >= need, False, pred, exact, need, left, capped)

    return assess


def _reason(pod: PodRequest, node: NodeView, a: _Assessment, margin: float,
            longest: Mapping[tuple[str, bool], float]) -> str:
    """Why `node` does not take the pod; a window too short is worded with the longest such window of its GPU type
    (`longest`, apart for windows whose end is announced), so all those nodes share one reason."""
    if a.free_short:
        return _short_reason(pod.gpus, node.gpus_free_now, node.gpus_total)
    if a.no_memory and a.pred is not None:
        return _memory_reason(a.pred, node.gpu_type)
    left = longest.get((node.gpu_type, a.announced), a.left) if a.left > 0 else a.left
    return _window_reason(pod.gpus, left, a.need, _basis(a, node.gpu_type, margin))


def _short_of_window(a: _Assessment) -> bool:
    """Whether a failing node was turned down for its window alone, and has one (its reason then names the longest
    window of its GPU type)."""
    return not a.free_short and not a.no_memory and a.left > 0


# no "%" in any reason: kube-scheduler runs failure reasons through a printf-style formatter ("%!)(MISSING)")
def _short_reason(gpus: int, free: int, total: int) -> str:
    return f"needs {gpus} GPU(s), {free} of {total} free now"


def _memory_reason(pred: Prediction, gpu_type: str) -> str:
    need = f"~{pred.peak_memory_gib:.0f} GiB" if pred.peak_memory_gib is not None else "more memory"
    has = f" ({pred.gpu_memory_gib:.0f} GiB)" if pred.gpu_memory_gib is not None else ""
    return f"needs {need} of GPU memory: does not fit {gpu_type}{has}"


def _basis(a: _Assessment, gpu_type: str, margin: float) -> str:
    """What the window a pod needs was judged on: the same for every node of a GPU type."""
    factor = f"p90 x{1 + margin:g}"
    if a.capped:
        factor = f"{factor} capped at a few checkpoints"
    elif a.by_goodput:
        factor = f"{factor} lowered by expected goodput"
    if a.announced:
        factor = f"{factor}; the window's end is announced"
    return f"({factor}) on {gpu_type}" if a.exact else f"({factor}, slowest known GPU type)"


def _window_reason(gpus: int, longest: float, need: float, basis: str) -> str:
    """`longest`: the longest window among the nodes of one GPU type that are turned down for theirs. One reason
    per GPU type, not one per node and window length: kube-scheduler counts nodes by reason, so a user reads
    "812 window ends within 41m, ..." once instead of tens of reasons a minute apart."""
    if longest <= 0:
        return f"no idle window for {gpus} GPU(s) now, job needs ~{duration(need)} {basis}"
    return f"window ends within {duration(longest)}, job needs ~{duration(need)} {basis}"


@lru_cache(maxsize=4096)  # the next filters word mostly the same reasons again
def _window_words(gpus: int, whole_left: int, need: float, basis: str) -> str:
    """`_window_reason` for a window of `whole_left` seconds (its ceiling: all `duration` words of it)."""
    return _window_reason(gpus, whole_left, need, basis)


def filter_nodes(
    *,
    pod: PodRequest,
    nodes: Sequence[NodeView],
    now: float,
    margin: float = DEFAULT_MARGIN,
    checkpoint_intervals: int = 0,
    goodput: GoodputAdmission | None = None,
) -> FilterResult:
    """Keep nodes with the GPUs free now whose idle window outlasts the pod's p90 runtime × (1 + margin).

    Runtime-blind pods (`predicted is None`) and nodes with stale forecasts only need to fit now.
    Expected-goodput admission (off unless `goodput` is given): a checkpointing pod with a known
    `checkpoint_interval_seconds` only needs the shortest forecast window in which its expected useful work (saved
    at checkpoints, given how long such windows really lasted) is at least `min_efficiency` of the GPU time it
    holds (`offpeak_core.goodput.min_window`); a pod that cannot checkpoint still needs its whole run. A window
    whose end is known (`IdleWindow.end_certain`: announced demand, busy hours) is judged by that end instead
    (`offpeak_core.goodput.certain_window_ok`), since it cannot outlast it as forecast windows of its length did.
    Older, cruder rule (off by default): with `checkpoint_intervals=k > 0` the need is capped at k × interval.
    """
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    passed: list[str] = []
    failing: list[tuple[NodeView, _Assessment]] = []
    longest: dict[tuple[str, bool], float] = {}  # per GPU type (and announced end), of the nodes turned down for it
    assess = _assessor(pod, now, margin, checkpoint_intervals, goodput)
    for node in nodes:
        a = assess(node)
        if a.fits:
            passed.append(node.name)
            continue
        failing.append((node, a))
        if _short_of_window(a) and a.left > longest.get((node.gpu_type, a.announced), 0.0):
            longest[node.gpu_type, a.announced] = a.left
    failed = {node.name: _reason(pod, node, a, margin, longest) for node, a in failing}
    return FilterResult(passed=tuple(passed), failed=failed)


def fitting_workers(*, pod: PodRequest, nodes: Sequence[NodeView], most: Sequence[int], now: float,
                    margin: float = DEFAULT_MARGIN, checkpoint_intervals: int = 0,
                    goodput: GoodputAdmission | None = None) -> list[int]:
    """For each node, the most workers like `pod`, up to `most[i]`, that fit on it as one pod of their GPUs
    together (k x `pod.gpus`): `filter_nodes`' own assessment, asked for k = 1, 2, ... until it fails (more GPUs never
    fit better); 0 where not even one fits."""
    assess = _assessor(pod, now, margin, checkpoint_intervals, goodput)
    out = []
    for node, top in zip(nodes, most):
        k = 0
        while k < top:
            a = assess(node, (k + 1) * pod.gpus)
            if not a.fits:
                break
            if a.pred is None:  # judged on GPUs free now alone (runtime-blind, or a stale forecast): so are more
                k = min(top, node.gpus_free_now // pod.gpus) if pod.gpus > 0 else top
                break
            k += 1
        out.append(k)
    return out


def fitting_workers_arrays(*, pod: PodRequest, nodes: NodeArrays, most: np.ndarray, now: float,
                           margin: float = DEFAULT_MARGIN, checkpoint_intervals: int = 0,
                           goodput: GoodputAdmission | None = None) -> np.ndarray:
    """`fitting_workers` over columns: the same count for every node (a test holds them equal)."""
    got = np.zeros(len(nodes), dtype=np.int64)
    most = np.asarray(most)
    alive = most > 0
    top = int(most.max(initial=0))
    if top <= 0:
        return got
    by_type = None if pod.predicted is None else _type_assessments(pod, nodes.type_names, margin,
                                                                    checkpoint_intervals, goodput)
    columns = None if by_type is None else _type_columns(by_type, nodes)  # the same for every k: made once
    if pod.gpus > 0:
        ks = np.arange(1, top + 1)
        left = None
        if columns is not None:
            lefts, certain = zip(*(nodes.window_left_certain(gpus=int(k) * pod.gpus, now=now) for k in ks))
            left = np.stack(lefts)
            if goodput is not None and any(c.any() for c in certain):
                left = None  # windows judged by their certain end, node by node: k by k below
        if columns is None or left is not None:  # every k at once: the count of k from 1 up that fit
            fit = _fits(nodes.free_now[None, :], (ks * pod.gpus)[:, None], columns, left) & (most >= ks[:, None])
            counted: np.ndarray = np.cumprod(fit, axis=0).sum(axis=0).astype(np.int64)
            return counted
    k = 0
    while alive.any():
        k += 1
        alive &= _assess_arrays(pod, nodes, now, margin, checkpoint_intervals, goodput, gpus=k * pod.gpus,
                                by_type=by_type, columns=columns).fits & (most >= k)
        got[alive] = k
        if pod.gpus <= 0:
            got[alive] = np.asarray(most)[alive]
            break
    return got


class _ArrayAssessment(NamedTuple):
    """`_assessor` for every node of a `NodeArrays` at once: per-node columns, and per-GPU-type assessments
    (`by_type[code]`, need and left not filled in) that a reason or a score needs."""

    fits: np.ndarray
    free_short: np.ndarray
    timed: np.ndarray  # fits and judged on its window (not runtime-blind)
    need: np.ndarray
    left: np.ndarray
    by_type: list[_Assessment]
    announced: np.ndarray  # turned down for a window whose end is certain (`_Assessment.announced`)


def _type_assessments(pod: PodRequest, type_names: Sequence[str], margin: float, checkpoint_intervals: int,
                      goodput: GoodputAdmission | None) -> list[_Assessment]:
    """One assessment per GPU type, as `_assessor` memoises them (need and left of a timed type come per node):
    they do not depend on the GPUs asked for."""
    assert pod.predicted is not None
    cap = _checkpoint_cap(pod, checkpoint_intervals)
    by_type: list[_Assessment] = []
    for name in type_names:
        pred, exact = prediction_for(pod.predicted, name)
        if exact and pred is not None and pred.fits_memory is False:
            by_type.append(_Assessment(False, False, pred, exact, 0.0, 0.0, no_memory=True))
            continue
        if pred is None:
            by_type.append(_Assessment(False, False, None, exact, 0.0, 0.0))
            continue
        type_need = pred.p90 * (1.0 + margin)
        capped = type_need > cap
        if capped:
            type_need = cap
        g_need = _goodput_need(pod, pred, goodput)
        by_goodput = g_need < type_need
        by_type.append(_Assessment(False, False, pred, exact, g_need if by_goodput else type_need, 0.0,
                                   capped and not by_goodput, by_goodput, uncut_need=type_need, uncut_capped=capped))
    return by_type


class _TypeColumns(NamedTuple):
    """`_type_assessments` spread over the nodes of a `NodeArrays` (per node, by its GPU type)."""

    no_memory: np.ndarray
    blind: np.ndarray  # judged on GPUs free now alone: no prediction for its type, or a stale forecast
    need: np.ndarray
    full: np.ndarray  # need before the goodput rule lowered it
    lowered: np.ndarray  # the goodput rule lowered the need


def _type_columns(by_type: list[_Assessment], nodes: NodeArrays) -> _TypeColumns:
    """Per node, what its GPU type's assessment says (what does not depend on the GPUs asked)."""
    code = nodes.type_code
    no_memory = np.asarray([t.no_memory for t in by_type], dtype=bool)[code]
    blind = (np.asarray([t.pred is None for t in by_type], dtype=bool)[code] | nodes.stale) & ~no_memory
    return _TypeColumns(no_memory, blind, np.asarray([t.need for t in by_type], dtype=float)[code],
                        np.asarray([t.uncut_need for t in by_type], dtype=float)[code],
                        np.asarray([t.by_goodput for t in by_type], dtype=bool)[code])


def _fits(free_now: np.ndarray, gpus: int | np.ndarray, columns: _TypeColumns | None,
          left: np.ndarray | None) -> np.ndarray:
    """Whether each node takes `gpus` (broadcast: several counts at once, `left` one row per count): enough free
    now and, judged on its window (`columns`; None: runtime-blind), one left long enough (before any window whose end
    is certain is judged by that end)."""
    ok = free_now >= gpus
    if columns is None:
        return ok
    assert left is not None
    fits: np.ndarray = ok & ~columns.no_memory & (columns.blind | (left >= columns.need))
    return fits


def _assess_arrays(pod: PodRequest, nodes: NodeArrays, now: float, margin: float, checkpoint_intervals: int,
                   goodput: GoodputAdmission | None, *, gpus: int | None = None,
                   by_type: list[_Assessment] | None = None, columns: _TypeColumns | None = None
                   ) -> _ArrayAssessment:
    """The same answers as `_assessor`, node for node (a test holds them equal), as array operations. `gpus`: as
    many GPUs asked instead of the pod's; `by_type`: `_type_assessments`, and `columns`: `_type_columns` of them,
    when the caller has them (asking for several GPU counts)."""
    gpus = pod.gpus if gpus is None else gpus
    n = len(nodes)
    free_short = nodes.free_now < gpus
    if pod.predicted is None:
        zeros = np.zeros(n)
        nowhere = np.zeros(n, dtype=bool)
        return _ArrayAssessment(~free_short, free_short, nowhere, zeros, np.full(n, math.inf),
                                [_BLIND_FIT] * len(nodes.type_names), nowhere)
    if by_type is None:
        by_type = _type_assessments(pod, nodes.type_names, margin, checkpoint_intervals, goodput)
    if columns is None:
        columns = _type_columns(by_type, nodes)
    code = nodes.type_code
    no_memory, blind, need = columns.no_memory, columns.blind, columns.need
    left, certain = nodes.window_left_certain(gpus=gpus, now=now)
    timed = ~free_short & ~no_memory & ~blind
    fits = _fits(nodes.free_now, gpus, columns, left)
    announced = np.zeros(n, dtype=bool)
    if goodput is not None and certain.any():
        full, lowered = columns.full, columns.lowered
        judged = np.flatnonzero(timed & certain & lowered & (left > 0) & (left < full))
        if judged.size:  # windows that cannot outlast their end: judged on that end (`_assessor`), node by node
            need, fits = need.copy(), fits.copy()
            for i, c, lf in zip(judged.tolist(), code[judged].tolist(), left[judged].tolist()):
                pred = by_type[c].pred
                assert pred is not None
                if _certain_ok(pod, pred, goodput, lf):
                    fits[i], need[i] = True, min(need[i], lf)
                else:
                    fits[i], need[i], announced[i] = False, full[i], True
    left = np.where(blind, math.inf, left)
    need = np.where(blind, 0.0, need)
    return _ArrayAssessment(fits, free_short, timed & fits, need, left, by_type, announced)


def _reasons_of(pod: PodRequest, a: _ArrayAssessment, nodes: NodeArrays, rows: np.ndarray, lefts: np.ndarray,
                margin: float) -> list[str]:
    """`_reason` of each node in `rows` (nodes that do not pass), out of the arrays, given the window each reason
    names (`lefts`: a group's longest); what a GPU type's nodes share is worded once per type."""
    bases: dict[tuple[int, bool], str] = {}
    out: list[str] = []
    for short, code, free, total, need, left, announced in zip(
            a.free_short[rows].tolist(), nodes.type_code[rows].tolist(), nodes.free_now[rows].tolist(),
            nodes.total[rows].tolist(), a.need[rows].tolist(), lefts.tolist(), a.announced[rows].tolist()):
        t = a.by_type[code]
        if short:
            out.append(_short_reason(pod.gpus, free, total))
        elif t.no_memory and t.pred is not None:
            out.append(_memory_reason(t.pred, nodes.type_names[code]))
        else:  # judged on its window: a timed GPU type (runtime-blind nodes pass when they fit now)
            basis = bases.get((code, announced))
            if basis is None:
                judged = t._replace(capped=t.uncut_capped, by_goodput=False, announced=True) if announced else t
                basis = bases[code, announced] = _basis(judged, nodes.type_names[code], margin)
            out.append(_window_words(pod.gpus, math.ceil(left), need, basis) if math.isfinite(left)
                       else _window_reason(pod.gpus, left, need, basis))
    return out


def filter_arrays(
    *,
    pod: PodRequest,
    nodes: NodeArrays,
    now: float,
    margin: float = DEFAULT_MARGIN,
    checkpoint_intervals: int = 0,
    goodput: GoodputAdmission | None = None,
) -> FilterResult:
    """`filter_nodes` over columns: the same nodes pass, with the same reasons for those that do not."""
    c = filter_columns(pod=pod, nodes=nodes, now=now, margin=margin, checkpoint_intervals=checkpoint_intervals,
                       goodput=goodput)
    failed = dict(zip(nodes.names[c.failing].tolist(), map(c.reasons.__getitem__, c.reason_of.tolist())))
    return FilterResult(passed=tuple(nodes.names[c.fits].tolist()), failed=failed)


class FilterColumns(NamedTuple):
    """`filter_arrays`' answer as columns, in the nodes' order: whether each node passes, and for those that do not
    (`failing`, their positions) the index of their reason in `reasons` (`reason_of`): many nodes, few reasons."""

    fits: np.ndarray
    failing: np.ndarray
    reason_of: np.ndarray
    reasons: list[str]


def filter_columns(
    *,
    pod: PodRequest,
    nodes: NodeArrays,
    now: float,
    margin: float = DEFAULT_MARGIN,
    checkpoint_intervals: int = 0,
    goodput: GoodputAdmission | None = None,
) -> FilterColumns:
    """`filter_arrays` without a dict per node (the extender's hot path: its reply is joined from these columns)."""
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    a = _assess_arrays(pod, nodes, now, margin, checkpoint_intervals, goodput)
    failing = np.flatnonzero(~a.fits)
    if not failing.size:
        return FilterColumns(a.fits, failing, np.zeros(0, dtype=np.int64), [])
    first, group, longest = _reason_groups(a, nodes, failing)
    # one reason per group, worded for its first node and its longest window (the others differ from it in nothing
    # else the reason says)
    return FilterColumns(a.fits, failing, group, _reasons_of(pod, a, nodes, failing[first], longest, margin))


def _reason_groups(a: _ArrayAssessment, nodes: NodeArrays, failing: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group the `failing` nodes by what their reason says: GPUs free now and in all (nodes short of GPUs), else GPU
    type and whether a window is left at all. Returns each group's first node (a position in `failing`), each
    failing node's group and each group's longest window, so reasons are worded once per group instead of once per
    node.

    One integer key per node, sorted once (a radix sort while the keys span less than 2**16, as they do for real
    clusters); where the numbers are too large to pack into a key exactly (no real node), the fields are sorted
    together instead, to the same groups.
    """
    short = a.free_short[failing]
    code = nodes.type_code[failing]
    free, total = nodes.free_now[failing], nodes.total[failing]
    left = a.left[failing]
    windowed = (left > 0).astype(float) + a.announced[failing]  # 2: a window whose end is announced
    windowed[short | np.asarray([t.no_memory for t in a.by_type], dtype=bool)[code]] = 0.0  # reasons without a window
    key = _packed_key(short, code, windowed, free, total)
    if key is None:
        keys = (np.where(short, -1.0, code), np.where(short, free, windowed), np.where(short, total, 0.0))
        order = np.lexsort(keys[::-1])  # stable: within a group, nodes stay in request order
        starts = np.zeros(order.size, dtype=bool)
        starts[0] = True
        for k in keys:
            ordered = k[order]
            starts[1:] |= ordered[1:] != ordered[:-1]
    else:
        low = int(key.min())
        if int(key.max()) - low < 2**16:
            key = (key - low).astype(np.uint16)
        order = np.argsort(key, kind="stable")  # stable: a group's first node is its first in request order
        ordered_key = key[order]
        starts = np.empty(order.size, dtype=bool)
        starts[0] = True
        np.not_equal(ordered_key[1:], ordered_key[:-1], out=starts[1:])
    group = np.empty(order.size, dtype=np.int64)
    group[order] = np.cumsum(starts) - 1
    longest = np.maximum.reduceat(left[order], np.flatnonzero(starts))
    return order[starts], group, longest


_KEY_LIMIT = 2.0**62  # packed keys stay below this in magnitude: exact in int64, and in the float64 they are made in


def _packed_key(short: np.ndarray, code: np.ndarray, windowed: np.ndarray, free: np.ndarray, total: np.ndarray
                ) -> np.ndarray | None:
    """Each node's group as one int64: GPU type and whether a window is left, and its end announced (>= 0), or free
    and total GPUs (< 0, nodes short of GPUs); None when a field is too large to pack exactly."""
    key = code.astype(np.int64) * 3 + windowed.astype(np.int64)
    if short.any():
        lo_f, lo_t = int(free[short].min()), int(total[short].min())
        span_t = int(total[short].max()) - lo_t + 1
        if (int(free[short].max()) - lo_f + 1) * span_t >= _KEY_LIMIT:
            return None
        key[short] = -1 - ((free[short] - lo_f) * span_t + (total[short] - lo_t))
    return key


def prioritize_arrays(
    *,
    pod: PodRequest,
    nodes: NodeArrays,
    now: float,
    margin: float = DEFAULT_MARGIN,
    checkpoint_intervals: int = 0,
    goodput: GoodputAdmission | None = None,
) -> dict[str, int]:
    """`prioritize_nodes` over columns: the same score for every node."""
    scores = score_arrays(pod=pod, nodes=nodes, now=now, margin=margin, checkpoint_intervals=checkpoint_intervals,
                          goodput=goodput)
    return dict(zip(nodes.names.tolist(), scores.tolist()))


def score_arrays(
    *,
    pod: PodRequest,
    nodes: NodeArrays,
    now: float,
    margin: float = DEFAULT_MARGIN,
    checkpoint_intervals: int = 0,
    goodput: GoodputAdmission | None = None,
) -> np.ndarray:
    """`prioritize_arrays`' scores (0..10) as a column in the nodes' order: what the extender encodes without a
    dict per request."""
    a = _assess_arrays(pod, nodes, now, margin, checkpoint_intervals, goodput)
    free = nodes.free_now
    with np.errstate(divide="ignore", invalid="ignore"):
        pack = np.where(free <= 0, 0.0, np.minimum(1.0, pod.gpus / np.where(free <= 0, 1, free)))
        total = pack  # runtime-blind fits are scored by bin-packing alone
        if a.timed.any():
            p50 = np.asarray([t.pred.p50 if t.pred is not None else math.inf for t in a.by_type])[nodes.type_code]
            fastest = p50[a.timed].min()
            speed = np.where(p50 <= 0, 1.0, fastest / p50)
            fit = np.where(np.isinf(a.left) | (a.left <= 0), 0.0, np.minimum(1.0, a.need / a.left))
            timed_total = SPEED_WEIGHT * speed + FIT_WEIGHT * fit + PACK_WEIGHT * pack
            total = np.where(a.timed, timed_total, pack)
    scores = np.clip(np.round(total * MAX_SCORE), 1, MAX_SCORE).astype(np.int64)
    return np.where(a.fits, scores, 0)


def _pack_score(pod: PodRequest, node: NodeView) -> float:
    """1.0 when the pod takes every free GPU (no fragment left), smaller as it leaves more behind."""
    if node.gpus_free_now <= 0:
        return 0.0
    return min(1.0, pod.gpus / node.gpus_free_now)


def prioritize_nodes(
    *,
    pod: PodRequest,
    nodes: Sequence[NodeView],
    now: float,
    margin: float = DEFAULT_MARGIN,
    checkpoint_intervals: int = 0,
    goodput: GoodputAdmission | None = None,
) -> dict[str, int]:
    """Score nodes 0..10: fastest GPU type for the job, tightest window that still fits, fullest node.

    Nodes that cannot take the pod score 0; nodes that can score at least 1. Runtime-blind pods and stale nodes
    are scored by bin-packing alone.
    """
    scores: dict[str, int] = {}
    timed: list[tuple[NodeView, _Assessment]] = []
    assess = _assessor(pod, now, margin, checkpoint_intervals, goodput)
    for node in nodes:
        a = assess(node)
        if not a.fits:
            scores[node.name] = 0
        elif a.pred is None:
            scores[node.name] = _scale(_pack_score(pod, node))
        else:
            timed.append((node, a))
    if timed:
        fastest = min(a.pred.p50 for _, a in timed if a.pred is not None)
        for node, a in timed:
            assert a.pred is not None
            speed = 1.0 if a.pred.p50 <= 0 else fastest / a.pred.p50
            fit = 0.0 if math.isinf(a.left) or a.left <= 0 else min(1.0, a.need / a.left)
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
