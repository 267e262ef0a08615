"""How long a node's idle windows really last, from the node's own history: a survival curve of its idle runs.

The seasonal forecast says what online demand usually is at this time of day; it says nothing about how a window
that opened a few minutes ago tends to end. On a node where online work comes and goes every few minutes, a
window that just opened usually closes within minutes, whatever the time-of-day quantile says; a window that has
already lasted hours usually lasts hours more (idle periods have a decreasing hazard: the longer one has lasted,
the longer it tends to go on). Both are visible in the node's own history, so the forecaster learns them there
instead of from any constant:

- an *idle run* at threshold k is a maximal stretch of samples with online demand <= k (at least capacity - k GPUs
  free); a run is *complete* when the history shows both its start and its end;
- `remaining_seconds` is the conditional quantile: given that the current run has lasted `age`, how much longer
  did `quantile` of the node's past runs that reached that age go on (Kaplan-Meier without the censored current
  run, which only makes it more cautious);
- `cap_online` turns it into the forecast: after `now + remaining`, online demand is taken to be above k, which ends
  the forecast window for capacity - k GPUs there. Where the node has too few runs that lasted that long
  (`min_runs`), there is no evidence either way and the seasonal forecast stands.

Pure: numpy only, no clock, no I/O. `offpeak_core.forecast` learns an `IdleRuns` with every seasonal fit and
applies it at request time (`forecast_now`), so the extender and the simulator both use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class IdleRuns:
    """A node's idle runs, per online-demand threshold k = 0..len(lengths) - 1.

    `lengths[k]`: seconds of each complete run with online <= k, ascending. `age[k]`: seconds the run open at `at`
    (the last sample looked at) had lasted by then, counted from its first sample; -1 where online > k at `at`.
    Thresholds above the last one never closed in the history: no complete run, no evidence.
    """

    at: float
    lengths: tuple[np.ndarray, ...]
    age: np.ndarray


def _demand_levels(online: np.ndarray) -> np.ndarray:
    """Whole GPUs held by online work (a fraction holds a GPU), as `free_profile` counts them."""
    return np.asarray(np.ceil(np.maximum(online, 0.0) - 1e-9), dtype=np.int64)


def _clean(times: np.ndarray, online: np.ndarray, now: float, history_seconds: float) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(times, dtype=float)
    v = np.asarray(online, dtype=float)
    if t.shape != v.shape:
        raise ValueError(f"times and online must have the same shape, got {t.shape} and {v.shape}")
    keep = np.isfinite(t) & np.isfinite(v) & (t <= now) & (t > now - history_seconds)
    t, v = t[keep], v[keep]
    order = np.argsort(t, kind="stable")
    return t[order], _demand_levels(v[order])


def run_ages(*, times: np.ndarray, levels: np.ndarray, thresholds: int) -> np.ndarray:
    """Seconds the run open at the last sample had lasted, per threshold k < `thresholds` (-1: online > k there).

    `times` ascending and `levels` whole GPUs, as `fit_idle_runs` cleans them. A run open since the first sample
    counts from it (a lower bound: the cautious side, since older runs tend to last longer)."""
    out = np.full(thresholds, -1.0)
    if times.size == 0:
        return out
    last = float(times[-1])
    rev = levels[::-1]
    for k in range(thresholds):
        busy = rev > k
        if busy[0]:
            continue  # busy above k at the last sample: no run open
        i = int(busy.argmax()) if busy.any() else rev.size  # samples since the last busy one
        out[k] = last - float(times[rev.size - i])
    return out


class OpenRunAges:
    """`run_ages` of many per-minute series at once, kept up to date minute by minute instead of recounted.

    For each row (a node) and threshold k it keeps the last minute its level was above k, so the age of the run open
    at the last minute looked at is a subtraction: what `run_ages` gives over the minutes `lo..m-1` of the row (a
    test holds them equal), at a cost per minute that does not grow with the history. `levels` is read, never
    written; minutes before `m` must not change once looked at (a causal series is filled as the clock goes)."""

    def __init__(self, levels: np.ndarray, *, thresholds: int) -> None:
        self.levels = levels
        self.thresholds = thresholds
        self._last_above = np.full((levels.shape[0], thresholds), -1, dtype=np.int64)
        self._seen = 0  # minutes 0.._seen-1 are counted in _last_above

    def _advance(self, m: int) -> None:
        if m <= self._seen:
            return
        block = np.asarray(self.levels[:, self._seen : m], dtype=np.int64)
        width = block.shape[1]
        for k in range(self.thresholds):
            above = block > k
            has = above.any(axis=1)
            last = width - 1 - np.argmax(above[:, ::-1], axis=1)
            self._last_above[has, k] = self._seen + last[has]
        self._seen = m

    def ages(self, row: int, *, m: int, lo: int, thresholds: int, minute_seconds: float = 60.0) -> np.ndarray:
        """`run_ages` of row `row` over its minutes `lo..m-1` (sample i at i × `minute_seconds`), for thresholds
        0..`thresholds` - 1."""
        if m < self._seen or thresholds > self.thresholds:  # looked back in time: count afresh
            times = np.arange(lo, m) * minute_seconds
            return run_ages(times=times, levels=np.asarray(self.levels[row, lo:m], dtype=np.int64),
                            thresholds=thresholds)
        self._advance(m)
        out = np.full(thresholds, -1.0)
        if m <= lo:
            return out
        last = self._last_above[row, :thresholds]
        first_free = np.maximum(last + 1, lo)
        open_ = last < m - 1
        out[open_] = (m - 1 - first_free[open_]) * minute_seconds
        return out


def fit_idle_runs(
    *, times: np.ndarray, online: np.ndarray, now: float, history_seconds: float, max_gap_seconds: float
) -> IdleRuns | None:
    """Learn a node's idle runs from its demand samples in (now - history, now]; None without samples.

    A gap between samples longer than `max_gap_seconds` (a scrape missed, an agent down) breaks a run: a run
    that touches a gap or either end of the history is not complete (its length is unknown) and is left out.
    """
    t, lv = _clean(times, online, now, history_seconds)
    if t.size == 0:
        return None
    top = int(lv.max())
    gap_after = np.concatenate([np.diff(t) > max_gap_seconds, [True]])  # no sample follows within the gap
    gap_before = np.concatenate([[True], gap_after[:-1]])
    lengths: list[np.ndarray] = []
    for k in range(top):  # k >= top: online never went above k, no run ever closed
        free = lv <= k
        change = np.flatnonzero(np.diff(free.astype(np.int8)))
        starts = np.concatenate([[0], change + 1])
        ends = np.concatenate([change + 1, [free.size]])  # exclusive: the first sample after the run
        sel = free[starts] & (ends < free.size) & (starts > 0)
        s, e = starts[sel], ends[sel]
        # complete only when a busy sample comes right before and right after it, with no gap inside
        gaps = np.concatenate([[0], np.cumsum(gap_after)])
        ok = ~gap_before[s] & (gaps[e] == gaps[s])
        lengths.append(np.sort(t[e[ok]] - t[s[ok]]))
    ages = run_ages(times=t, levels=lv, thresholds=top + 1)
    return IdleRuns(at=float(t[-1]), lengths=tuple(lengths), age=ages)


def remaining_seconds(*, lengths: np.ndarray, age: float, quantile: float, min_runs: int) -> float:
    """Seconds a run that has lasted `age` goes on with probability `quantile`, from complete runs `lengths`
    (ascending): among the runs longer than `age`, the longest r such that `quantile` of them lasted age + r.
    inf when fewer than `min_runs` runs lasted beyond `age` (no evidence: the caller keeps its forecast)."""
    i0 = int(np.searchsorted(lengths, age, side="right"))
    n = lengths.size - i0
    if n < max(1, min_runs):
        return math.inf
    need = int(math.ceil(quantile * n - 1e-9))
    return max(0.0, float(lengths[lengths.size - max(1, need)]) - age)


def cap_online(
    *, times: np.ndarray, online: np.ndarray, step_seconds: float, runs: IdleRuns, live_online: float | None,
    now: float, quantile: float, min_runs: int,
) -> np.ndarray:
    """Forecast online demand, raised above k from where the node's own runs say a window at threshold k ends.

    For every threshold k the node is at or below now (by `live_online`, else as at the fit), the run's age now
    is its age at the fit plus the time since, or 0 when it opened after the fit (unknown: the youngest, most
    cautious guess). Steps reaching past `now + remaining_seconds` get online demand >= k + 1, so the window for
    capacity - k GPUs ends at or before then."""
    out = np.array(online, dtype=float, copy=True)
    if out.size == 0:
        return out
    # as `_demand_levels` counts it, for one number
    level_now = None if live_online is None or not math.isfinite(live_online) else math.ceil(
        max(float(live_online), 0.0) - 1e-9)
    ends = np.asarray(times, dtype=float) + step_seconds
    known = np.isfinite(out)  # unknown demand already counts as busy (raising known steps keeps them known)
    since_fit = max(0.0, now - runs.at)
    for k, lengths in enumerate(runs.lengths):
        fit_age = float(runs.age[k])
        if level_now is not None and level_now > k:
            continue  # busy above k now: no window at this threshold to cap
        if level_now is None and fit_age < 0:
            continue
        age = fit_age + since_fit if fit_age >= 0 else 0.0
        r = remaining_seconds(lengths=lengths, age=age, quantile=quantile, min_runs=min_runs)
        if math.isinf(r):
            continue
        late = (ends > now + r) & known
        out[late] = np.maximum(out[late], k + 1)
    return out
