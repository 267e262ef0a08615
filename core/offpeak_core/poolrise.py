"""A pool's online demand ahead: its recent peak, plus how far it has risen above such a peak before.

Online pods of a pool (the nodes one online service may run on) go to any of its nodes with room, so an offline
pod there is evicted only when the pool as a whole is full: what matters is the pool's total online demand, not
where it sits now. A pool's total is a smoother series than any node's, but it need not repeat daily or weekly
(a training cluster's occupancy does not). So this forecast asks only the pool's own past: at every instant s of
its history, how far the demand rose in the next k steps above its peak of the `look_back` steps before s. The
`quantile` of those rises, for every k, added to the peak now, is the demand the pool stays below for k steps
with that probability, as far as its history tells. A rise may be negative (a pool that seldom returns to its
peak soon); the forecast is never below the demand now, and never falls with k (a later step's rise is over a
longer span), so the pool's windows shrink with the time a job needs.

The rises are over every instant, whatever the pool's state then. Counting only instants as quiet as now, or the
quarter nearest to now's peak, was tried in the simulator and not kept (docs/simulator.md, "Pool windows").

A pooled node's room then comes from two bounds (`pooled_free`): the GPUs it has free of online pods now (where
the pool's next online pod lands is not known, so the node's own share is not forecast), and the pool's free GPUs
less the offline GPUs held on its other nodes: every offline pod in a pool shrinks the windows of all its nodes.

Pure numpy, no I/O: the simulator and the extender fit it on a pool's summed per-node series (`summed_on_grid`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


@dataclass(frozen=True)
class PoolRise:
    """Rises above the recent peak a pool's demand stayed within, per step ahead (`rises[k-1]`: k steps)."""

    rises: np.ndarray  # float [horizon steps], non-decreasing
    look_back_steps: int
    samples: int  # instants of history the rises are over (0: too little history, every rise is the capacity)

    def forecast(self, *, recent: np.ndarray, live: float) -> np.ndarray:
        """Online demand per step ahead: the peak of `recent` (the last `look_back_steps` step maxima) and `live`,
        plus each step's rise, never below `live`."""
        peak = max(float(np.max(recent)) if recent.size else live, live)
        return np.maximum(peak + self.rises, live)


def step_maxima(online: np.ndarray, per_step: int) -> np.ndarray:
    """Maxima of consecutive blocks of `per_step` samples (a last, partial block included)."""
    x = np.asarray(online, dtype=float)
    if per_step <= 1 or x.size == 0:
        return x
    pad = (-x.size) % per_step
    if pad:
        x = np.concatenate([x, np.full(pad, -np.inf)])
    return np.asarray(x.reshape(-1, per_step).max(axis=1))


def fit_pool_rise(
    steps: np.ndarray, *, capacity: float, horizon_steps: int, look_back_steps: int, quantile: float = 0.9,
    min_samples: int = 12,
) -> PoolRise:
    """Fit rises from a pool's history of step maxima `steps` (oldest first).

    A step ahead that fewer than `min_samples` instants of the history reach (with a full look-back before them)
    has nothing to go on: its rise is the pool's capacity (no window reaches it), as unknown demand counts as busy
    elsewhere.
    """
    if horizon_steps < 1 or look_back_steps < 1 or not 0.0 < quantile <= 1.0:
        raise ValueError("horizon_steps and look_back_steps must be >= 1 and quantile within (0, 1]")
    x = np.asarray(steps, dtype=float)
    starts = max(0, x.size - look_back_steps)  # instants with a full look-back and at least one step after them
    rises = np.full(horizon_steps, float(capacity))
    if starts:
        peak = sliding_window_view(x, look_back_steps).max(axis=1)[:starts]  # peak[i]: up to s = i + L - 1
        ahead = np.full(starts, -np.inf)
        for k in range(1, horizon_steps + 1):
            n = starts - (k - 1)  # instants with k steps after them in the history
            if n < min_samples:
                break
            ahead[:n] = np.maximum(ahead[:n], x[look_back_steps - 1 + k : look_back_steps - 1 + k + n])
            rises[k - 1] = float(np.quantile(ahead[:n] - peak[:n], quantile))
    return PoolRise(np.maximum.accumulate(rises), look_back_steps, int(starts))


def pool_free(online: np.ndarray, capacity: int) -> np.ndarray:
    """GPUs of a pool's `capacity` left by forecast online demand per step (part of a GPU counts as a GPU)."""
    return np.asarray(np.clip(capacity - np.ceil(np.asarray(online, dtype=float) - 1e-9), 0, capacity), dtype=np.int64)


def pooled_free(pool_free: np.ndarray, *, held: np.ndarray | int, node_free: np.ndarray | int) -> np.ndarray:
    """GPUs a pooled node is forecast to have per step: no more than `node_free` (what it has free now), nor than
    its pool's free GPUs (`pool_free`) less `held`, the GPUs offline pods hold in the pool that `node_free` does not
    already leave out (all of them when it is the node's room for one more pod; those on the pool's other nodes
    when it is its room for offline pods, its own included). Broadcasts: one node (`[steps]`, scalars) or many
    (`[nodes, steps]`, `[nodes, 1]`)."""
    return np.asarray(np.clip(np.minimum(node_free, pool_free - held), 0, None))


def pool_judged_online(gpus: np.ndarray | int, pool_room: np.ndarray | int) -> np.ndarray:
    """Online GPUs a pooled node's windows are judged by: all its `gpus` but those its pool has free of online pods
    (`pool_room`), so its window of L GPUs closes when the pool has fewer than L free (an offline pod of L GPUs there
    would be evicted then), whatever lands on the node itself."""
    return np.asarray(np.clip(np.asarray(gpus) - pool_room, 0, gpus))


def summed_on_grid(series: list[tuple[np.ndarray, np.ndarray]], *, start: float, step: float, count: int
                   ) -> np.ndarray:
    """The sum of per-node series (times, values) on the grid `start + i * step`, `count` points: each series'
    samples go to their nearest grid point (the last one wins), a point a series has no sample for holds its
    value before (as a range query's look-back does), and 0 before its first sample."""
    total = np.zeros(count)
    for times, values in series:
        t, v = np.asarray(times, dtype=float), np.asarray(values, dtype=float)
        ok = np.isfinite(t) & np.isfinite(v)
        idx = np.rint((t[ok] - start) / step).astype(np.int64)
        keep = (idx >= 0) & (idx < count)
        grid = np.full(count, np.nan)
        grid[idx[keep]] = v[ok][keep]
        seen = np.where(np.isfinite(grid), np.arange(count), -1)
        last = np.maximum.accumulate(seen)
        total += np.where(last >= 0, grid[np.maximum(last, 0)], 0.0)
    return total
