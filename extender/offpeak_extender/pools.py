"""Pool windows in the extender: a node whose online pods may land on any node of its pool (a node label names the
pool) has windows from the pool's total online demand (`offpeak_core.poolrise`), not from its own history, and
never longer than the pool's online owners announced they leave (`offpeak_core.announcements`).

Online pods of a Deployment or an inference service spread over the nodes their selector allows, wherever there
is room; an offline pod on one of them is evicted only when the pool as a whole is full. A node's own demand
history is then mostly where pods happened to land, and offline pods themselves move it. The simulator measured
the difference on Helios (docs/simulator.md, "Pool windows"); this module is the same rule for the live cluster.

Pure functions over the store's snapshots, no I/O and no locks: the store calls `fit_pools` at each refresh (off
the request path) and `pooled_profile` when it builds a pooled node's view; the rule itself (the pool's forecast
under its announcements, a node's share of its room) is `offpeak_core.rooms`', which the simulator runs too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from offpeak_core.announcements import Announcement, announced_ceiling, announced_demand
from offpeak_core.forecast import ForecastSettings
from offpeak_core.model import NodeView
from offpeak_core.poolrise import PoolRise, fit_pool_rise, summed_on_grid
from offpeak_core.rooms import pool_online, pool_times, pooled_room, room_view
from offpeak_core.schedules import BusySchedule
from offpeak_core.windows import FreeProfile

log = logging.getLogger(__name__)

DEFAULT_LOOK_BACK_SECONDS = 6 * 3600.0  # the simulator's (`--pool-look-back-hours 6`)
MIN_SAMPLES = 12  # instants with a full look-back before a pool's rises are learnt from its history


@dataclass(frozen=True)
class PoolSettings:
    """Which node label names a node's pool, how far back a pool's recent peak is taken, and the namespaces whose
    OnlineDemand objects may state a pool's ceiling (`poolGpusAtMost`; none by default: a ceiling lengthens offline
    windows, so only the cluster operator says whom to believe)."""

    label: str
    look_back_seconds: float = DEFAULT_LOOK_BACK_SECONDS
    ceiling_namespaces: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.label:
            raise ValueError("the pool label must not be empty")
        if self.look_back_seconds <= 0:
            raise ValueError("the pool look-back must be > 0 seconds")


@dataclass(frozen=True)
class PoolFit:
    """A pool's fitted rises, its total online demand over the look-back before the fit, and its GPUs then."""

    rise: PoolRise
    recent: np.ndarray  # float [look-back steps]: the pool's total online demand per step
    capacity: int
    at: float  # when it was fitted: its steps are on the grid from here, as a node's forecast is


def pools_of(labels: Mapping[str, Mapping[str, str]], label: str) -> dict[str, tuple[str, ...]]:
    """Pool name -> its nodes (sorted), from each node's labels; nodes without `label` are in no pool."""
    pools: dict[str, list[str]] = {}
    for node, node_labels in labels.items():
        pool = node_labels.get(label)
        if pool:
            pools.setdefault(pool, []).append(node)
    return {pool: tuple(sorted(nodes)) for pool, nodes in pools.items()}


def fit_pools(
    history: Mapping[str, tuple[np.ndarray, np.ndarray]],
    pools: Mapping[str, tuple[str, ...]],
    capacity: Mapping[str, int],
    *,
    now: float,
    settings: ForecastSettings,
    look_back_seconds: float,
    is_current: Callable[[np.ndarray, np.ndarray], bool],
) -> dict[str, PoolFit]:
    """Each pool's rises, fitted on the sum of its nodes' series over the history.

    A pool is left out (its nodes keep their own windows) when one of its nodes has no current series (a sum
    without it would read as a quieter pool than it is), or when its history does not yet reach one look-back and
    a dozen steps beyond (nothing to learn rises from)."""
    step = settings.step_seconds
    look_back = max(1, int(round(look_back_seconds / step)))
    horizon = max(1, int(np.ceil(settings.horizon_seconds / step)))
    fits: dict[str, PoolFit] = {}
    for pool, nodes in pools.items():
        series = [history.get(n) for n in nodes]
        missing = [n for n, s in zip(nodes, series) if s is None or not is_current(*s)]
        if missing:
            log.info("pool %s: no current demand series for %s; its nodes keep their own windows", pool,
                     ", ".join(missing[:5]))
            continue
        have = [s for s in series if s is not None]
        first = min(float(np.nanmin(t)) for t, _ in have if np.size(t))
        start = max(now - settings.history_seconds, first)
        count = int((now - start) // step) + 1
        steps = summed_on_grid(have, start=start, step=step, count=count)
        cap = sum(capacity.get(n, 0) for n in nodes)
        rise = fit_pool_rise(steps, capacity=float(cap), horizon_steps=horizon, look_back_steps=look_back,
                             quantile=settings.quantile, min_samples=MIN_SAMPLES)
        if rise.samples < MIN_SAMPLES:
            continue
        fits[pool] = PoolFit(rise=rise, recent=steps[-look_back:], capacity=cap, at=now)
    return fits


def pooled_profile(fit: PoolFit, *, pool_online_now: float, pool_held: int, node_free: int, now: float,
                   settings: ForecastSettings, schedule: BusySchedule | None = None,
                   announced: tuple[Announcement, ...] = ()) -> FreeProfile:
    """A pooled node's free GPUs for more offline pods, per step of the fit's grid from the one holding `now`
    (`offpeak_core.rooms.pooled_room`: no more than `node_free`, nor than its pool's forecast free GPUs less every
    offline GPU held in the pool, `pool_held`), the forecast online demand being at least what the pool's online
    owners announced (`announced`) and at most the ceiling they stated, if any (`rooms.pool_online`)."""
    step = settings.step_seconds
    times = pool_times(fitted_at=fit.at, now=now, step_seconds=step, steps=fit.rise.rises.size)
    floor = ceiling = None
    if announced:
        floor, ceiling = announced_demand(announced, times, step), announced_ceiling(announced, times, step)
    online = pool_online(rise=fit.rise, recent=fit.recent, live=pool_online_now, floor=floor, ceiling=ceiling)
    return pooled_room(online=online, times=times, step_seconds=step, capacity=fit.capacity, held=pool_held,
                       node_free=node_free, day_seconds=settings.season_seconds, floor=floor, schedule=schedule)


class PooledViews:
    """Pooled nodes' views, built once per pool state and node: a pod event in a pool of N nodes changes all N
    views, and nodes with the same free GPUs now (and busy hours) have the same windows, so only their names
    differ. The entries of one pool state are found again by the views built with it in the same pass; the memo is
    emptied when it holds `max_entries` (older states are not asked for again). Safe to share between threads: a
    race builds a view twice."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._memo: dict[Hashable, tuple[PoolFit, NodeView]] = {}

    def view(self, fit: PoolFit, *, name: str, gpu_type: str, gpus_total: int, node_free: int, pool_online: int,
             pool_held: int, schedule: BusySchedule | None, now: float, settings: ForecastSettings,
             keep_ahead_seconds: float, announced: tuple[Announcement, ...] = ()) -> NodeView:
        key = (id(fit), pool_online, pool_held, node_free, schedule, now, keep_ahead_seconds, announced)
        hit = self._memo.get(key)
        if hit is not None and hit[0] is fit:  # (an id of a fit gone may be another's now)
            return replace(hit[1], name=name, gpu_type=gpu_type, gpus_total=gpus_total)
        prof = pooled_profile(fit, pool_online_now=float(pool_online), pool_held=pool_held, node_free=node_free,
                              now=now, settings=settings, schedule=schedule, announced=announced)
        view = room_view(name=name, gpu_type=gpu_type, gpus_total=gpus_total, gpus_free_now=node_free, room=prof,
                         held=0, now=now, keep_ahead_seconds=keep_ahead_seconds)
        if len(self._memo) >= self.max_entries:
            self._memo.clear()
        self._memo[key] = (fit, view)
        return view
