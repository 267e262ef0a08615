"""A node's room for offline pods and its view for the decisions: from its own forecast, or from its pool's.

One rule, two callers: the extender builds every `NodeView` here from its store's snapshots, and the simulator from
its traces, so the windows the decisions see are the same for the same inputs (`tests/parity` holds them so).

- `node_room`: the GPUs offline pods may hold on a node per forecast step, theirs included: the fitted forecast
  brought to `now` (`forecast_now`: live demand, the hold from when a rise the forecast missed began, the node's own
  idle runs), less its declared busy hours.
- A pooled node (online pods may land on any node of its pool, `offpeak_core.poolrise`): `pool_online` is the pool's
  online demand ahead (its recent peak plus its rises, at most an announced ceiling, at least an announced floor),
  `pooled_room` a node's share of the room that leaves (no more than it has free now, nor than the pool has beyond
  the offline GPUs held in it), less its declared busy hours; what announcements and busy hours leave whatever the
  forecast is the profile's `bound`, so windows they end are known to end there.
- `room_view`: the decisions' view of a node from its room less the GPUs its offline pods hold.

Pure: numpy only, no clock, no I/O.
"""

from __future__ import annotations

import numpy as np

from offpeak_core.forecast import DemandForecast, ForecastSettings, forecast_now
from offpeak_core.model import NodeView
from offpeak_core.poolrise import PoolRise, pool_free, pooled_free
from offpeak_core.schedules import BusySchedule
from offpeak_core.windows import FreeProfile, LevelWindows, free_profile, node_view, with_busy_hours


def node_room(*, fitted: DemandForecast | None, capacity: int, now: float, settings: ForecastSettings,
              live_online: float | None, live_rose_at: float | None = None,
              schedule: BusySchedule | None = None) -> FreeProfile | None:
    """GPUs of a node offline pods may hold per step from the one holding `now` (theirs included), from its fitted
    forecast (None: none, or stale) and its declared busy hours; None when neither gives a forecast."""
    fc = forecast_now(fitted=fitted, capacity=capacity, now=now, settings=settings, live_online=live_online,
                      schedule=schedule, live_rose_at=live_rose_at)
    if fc is None:
        return None
    return with_busy_hours(free_profile(forecast=fc, capacity=capacity), schedule=schedule, most_free=capacity,
                           day_seconds=settings.season_seconds)


def pool_times(*, fitted_at: float, now: float, step_seconds: float, steps: int) -> np.ndarray:
    """The times of a pool forecast's `steps` steps from the one holding `now`, on the grid from `fitted_at` (as a
    node's forecast is)."""
    first = max(0, int((now - fitted_at) // step_seconds))
    return fitted_at + (first + np.arange(steps)) * step_seconds


def pool_online(*, rise: PoolRise, recent: np.ndarray, live: float, floor: np.ndarray | None = None,
                ceiling: np.ndarray | None = None) -> np.ndarray:
    """A pool's online GPUs per step ahead: its recent peak and `live` plus its rises (`PoolRise.forecast`), no
    more than an announced `ceiling` and no less than an announced `floor` (a floor wins over a lower ceiling:
    what is announced as needed is needed)."""
    online = rise.forecast(recent=recent, live=live)
    if ceiling is not None:
        online = np.minimum(online, ceiling)
    if floor is not None:
        online = np.maximum(online, floor)
    return online


def pooled_room(*, online: np.ndarray, times: np.ndarray, step_seconds: float, capacity: int, held: int,
                node_free: int, day_seconds: float, floor: np.ndarray | None = None,
                schedule: BusySchedule | None = None) -> FreeProfile:
    """A pooled node's GPUs for offline pods per step: no more than `node_free`, nor than its pool's `capacity` less
    its forecast `online` demand and the `held` offline GPUs `node_free` does not already leave out
    (`poolrise.pooled_free`), none in its declared busy hours. With an announced `floor`, what it alone leaves is
    the profile's `bound`."""
    bound = None
    if floor is not None:
        bound = pooled_free(pool_free(floor, capacity), held=held, node_free=node_free).astype(int)
    free = pooled_free(pool_free(online, capacity), held=held, node_free=node_free).astype(int)
    return with_busy_hours(FreeProfile(times, free, np.ones(free.size), step_seconds, bound), schedule=schedule,
                           most_free=node_free, day_seconds=day_seconds)


def room_view(*, name: str, gpu_type: str, gpus_total: int, gpus_free_now: int, room: FreeProfile | None, held: int,
              now: float, keep_ahead_seconds: float | None, levels: LevelWindows | None = None) -> NodeView:
    """The decisions' view of a node whose `room` (None: no forecast, stale) its offline pods hold `held` GPUs of:
    its windows are the room's less `held` (`levels`: the room's `level_windows`, when the caller keeps them)."""
    return node_view(name=name, gpu_type=gpu_type, gpus_total=gpus_total, gpus_free_now=gpus_free_now, profile=room,
                     now=now, data_stale=False, keep_ahead_seconds=keep_ahead_seconds, held=held, levels=levels)
