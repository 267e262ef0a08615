"""A node's view for the decisions from a snapshot of what it depends on: its usage, its fitted forecast and its
latest samples, its pool's fit and usage. Pure (no lock, no I/O): the store takes the snapshot under its lock and
builds the view outside it, through the core's rule (`offpeak_core.rooms`), which the simulator runs too."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from offpeak_core.announcements import Announcement
from offpeak_core.forecast import DemandForecast, ForecastSettings, level_since
from offpeak_core.model import NodeView
from offpeak_core.rooms import node_room, room_view
from offpeak_core.windows import FreeProfile
from offpeak_extender.objects import NodeInfo
from offpeak_extender.pools import PooledViews, PoolFit


@dataclass(frozen=True)
class ViewInputs:
    """A snapshot of what one node's `NodeView` depends on."""

    info: NodeInfo
    online: int
    offline: int  # offline and other pods' GPUs
    used: int
    fitted: DemandForecast | None
    stale: bool
    key: tuple[int, int]  # (usage version, forecast version) the snapshot was taken at
    pool: PoolInputs | None = None  # a pooled node's: its windows come from its pool
    recent: tuple[np.ndarray, np.ndarray] | None = None  # its latest demand samples (`recent_samples`)

    def online_rose_at(self, settings: ForecastSettings) -> float | None:
        """When the node's online demand rose to what it is now, as its latest samples tell (None: not yet in
        them, or no samples): a rise the forecast missed closes the node for a while from then, not from every
        rebuild of its view (`forecast.apply_live`)."""
        if self.recent is None:
            return None
        return level_since(times=self.recent[0], online=self.recent[1], level=float(self.online),
                           tolerance=settings.live_tolerance)


@dataclass(frozen=True)
class PoolInputs:
    """A snapshot of what a pooled node's view takes from its pool."""

    fit: PoolFit
    online: int  # the pool's online GPUs now
    held: int  # its offline and other pods' GPUs now
    announced: tuple[Announcement, ...] = ()  # its online owners' announcements not yet over


def recent_samples(times: np.ndarray, online: np.ndarray, *, since: float) -> tuple[np.ndarray, np.ndarray]:
    """A demand series' samples after `since` (copies: the history arrays are not kept)."""
    t = np.asarray(times, dtype=float)
    keep = t > since
    return t[keep].copy(), np.asarray(online, dtype=float)[keep].copy()


def series_is_current(*, times: np.ndarray, online: np.ndarray, now: float, max_age_seconds: float) -> bool:
    """Whether a demand series has a finite sample no older than `max_age_seconds` (pure)."""
    t = np.asarray(times, dtype=float)
    finite = np.isfinite(t) & np.isfinite(np.asarray(online, dtype=float)) & (t <= now)
    return bool(finite.any()) and float(t[finite].max()) >= now - max_age_seconds


def build_view(inp: ViewInputs, *, now: float, settings: ForecastSettings, keep_ahead_seconds: float,
               pooled: PooledViews | None = None) -> NodeView:
    """One node's view for the decisions (pure; runs outside the store's lock): from its own forecast, or a pooled
    node's from its pool's (`pools.pooled_profile`)."""
    info = inp.info
    free_now = max(0, info.gpus_total - inp.used)
    if inp.pool is not None and not inp.stale:
        return (pooled or PooledViews()).view(
            inp.pool.fit, name=info.name, gpu_type=info.gpu_type, gpus_total=info.gpus_total, node_free=free_now,
            pool_online=inp.pool.online, pool_held=inp.pool.held, schedule=info.schedule, now=now, settings=settings,
            keep_ahead_seconds=keep_ahead_seconds, announced=inp.pool.announced)
    return room_view(name=info.name, gpu_type=info.gpu_type, gpus_total=info.gpus_total, gpus_free_now=free_now,
                     room=own_room(inp, now=now, settings=settings), held=inp.offline, now=now,
                     keep_ahead_seconds=keep_ahead_seconds)


def own_room(inp: ViewInputs, *, now: float, settings: ForecastSettings) -> FreeProfile | None:
    """`rooms.node_room` of a node outside any pool, from its snapshot (None: no forecast; a stale forecast is none,
    declared busy hours alone still are one)."""
    info = inp.info
    return node_room(fitted=None if inp.stale else inp.fitted, capacity=info.gpus_total, now=now, settings=settings,
                     live_online=float(inp.online), live_rose_at=inp.online_rose_at(settings), schedule=info.schedule)
