"""Idle-window math: from forecast online demand to a free-GPU profile, idle windows and a `NodeView`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from offpeak_core.forecast import DemandForecast
from offpeak_core.model import IdleWindow, NodeView
from offpeak_core.schedules import BusySchedule


@dataclass(frozen=True)
class FreeProfile:
    """Forecast GPUs free for offline work at each step (`times[i]` for `step_seconds`).

    `bound` (optional): the most GPUs that can be free at each step whatever the forecast, from online use known in
    advance (announced demand, declared busy hours); a window that ends where `bound` leaves too few GPUs ends there
    for certain (`IdleWindow.end_certain`). None: nothing is known in advance.
    """

    times: np.ndarray
    free: np.ndarray  # int GPUs
    confidence: np.ndarray
    step_seconds: float
    bound: np.ndarray | None = None  # int GPUs, as `free`


def free_profile(*, forecast: DemandForecast, capacity: int, offline_now: int = 0) -> FreeProfile:
    """Free GPUs = capacity - ceil(online demand) - GPUs offline pods hold now; unknown demand counts as busy."""
    online = np.where(np.isfinite(forecast.online), np.ceil(forecast.online - 1e-9), capacity)
    free = np.clip(capacity - online - offline_now, 0, capacity).astype(int)
    return FreeProfile(forecast.times, free, forecast.confidence, forecast.step_seconds)


def with_busy_hours(profile: FreeProfile, *, schedule: BusySchedule | None, most_free: int,
                    day_seconds: float) -> FreeProfile:
    """The profile with a node's declared busy hours taken out: no GPU free in any step they touch, and since the
    hours are known in advance they end windows for certain (`bound` 0 in them; elsewhere the profile's `bound`,
    else `most_free`, the most GPUs that can be free for offline work whatever the forecast). No schedule: the
    profile as it is."""
    if schedule is None:
        return profile
    busy = schedule.step_mask(profile.times, step_seconds=profile.step_seconds, day_seconds=day_seconds)
    free = np.where(busy, 0, profile.free).astype(int)
    bound = np.full(free.size, most_free, dtype=int) if profile.bound is None else np.asarray(profile.bound).copy()
    bound[busy] = 0
    return replace(profile, free=free, bound=bound)


def profile_window(profile: FreeProfile, *, held: int, now: float) -> tuple[float | None, bool]:
    """`room_window` of a profile whose `free` counts the GPUs offline pods may hold (theirs included): when the
    `held` GPUs stop fitting, and whether that end is known (the profile's `bound`)."""
    return room_window(times=profile.times, room=profile.free, step_seconds=profile.step_seconds, held=held, now=now,
                       bound=profile.bound)


def room_window(*, times: np.ndarray, room: np.ndarray, step_seconds: float, held: int, now: float,
                bound: np.ndarray | None = None) -> tuple[float | None, bool]:
    """When `room`, the GPUs offline pods may hold per step (theirs included), first falls below `held`: the end of
    the window those pods run in (`max(now, that step's start)`), and whether that end is known (`bound`, as
    `FreeProfile.bound`, leaves fewer than `held` at that step: announced demand or busy hours, not a forecast).
    (None, False) when that never happens within the steps, when nothing is held, or when no step is left from
    `now` on."""
    if held <= 0:
        return None, False
    times = np.asarray(times, dtype=float)
    ahead = times + step_seconds > now  # steps not over yet
    short = ahead & (np.asarray(room) < held)
    if not short.any():
        return None, False
    i = int(np.argmax(short))
    return max(now, float(times[i])), bool(bound is not None and bound[i] < held)


def less_held(profile: FreeProfile, held: int) -> FreeProfile:
    """The profile with `held` more GPUs taken at every step (a node's offline pods): its free GPUs and its `bound`
    less `held`, never below 0."""
    if held <= 0:
        return profile
    bound = None if profile.bound is None else np.clip(np.asarray(profile.bound) - held, 0, None)
    return replace(profile, free=np.clip(np.asarray(profile.free) - held, 0, None), bound=bound)


@dataclass(frozen=True)
class LevelWindows:
    """A profile's maximal windows at every free-GPU level, nesting not yet resolved: `windows(held)` is
    `idle_windows(profile=less_held(profile, held))` for any `held` without recounting them (a node's windows are
    asked for with many counts of offline GPUs held; `idle_windows` itself is `windows(0)`).

    Each entry: (level, start, end or None, least free GPUs over the span, least confidence, the bound at the step
    that ends it: inf when there is none)."""

    entries: tuple[tuple[int, float, float | None, int, float, float], ...]
    _memo: dict[int, tuple[IdleWindow, ...]] = field(default_factory=dict, compare=False, repr=False)

    def windows(self, held: int = 0) -> tuple[IdleWindow, ...]:
        """The nested windows of the profile less `held` GPUs: every level above `held`, a span kept once, at its
        lowest level (whose free GPUs and certainty it carries), best first (by start, then most GPUs)."""
        hit = self._memo.get(held)
        if hit is None:
            hit = self._memo[held] = tuple(self._windows(held))
        return hit

    def _windows(self, held: int) -> list[IdleWindow]:
        found: dict[tuple[float, float | None], IdleWindow] = {}
        for level, start, end, least, confidence, bound in self.entries:
            if level <= held or (start, end) in found:
                continue  # a higher level with the same span: its least free GPUs are already recorded
            # certain when the bound (less held) leaves fewer than the level (less held): bound < level
            found[start, end] = IdleWindow(start, end, least - held, confidence, bound < level)
        return sorted(found.values(), key=lambda w: (w.start, -w.free_gpus))


def level_windows(*, profile: FreeProfile, open_ended: bool = True, starting_by: float = math.inf) -> LevelWindows:
    """Every level's maximal windows of `profile` (see `LevelWindows`, `idle_windows`), levels ascending; only those
    that start by `starting_by` (a view lists no later ones)."""
    free = np.asarray(profile.free)
    if free.size == 0 or int(free.max()) <= 0:
        return LevelWindows(())
    top = int(free.max())
    ok = np.zeros((top, free.size + 2), dtype=np.int8)
    ok[:, 1:-1] = free[None, :] >= np.arange(1, top + 1)[:, None]
    rows, edges = np.nonzero(np.diff(ok, axis=1))  # per level, its windows' first and one-past-last steps
    starts, stops, levels = edges[0::2], edges[1::2], rows[0::2] + 1
    if math.isfinite(starting_by):
        early = np.asarray(profile.times, dtype=float)[starts] <= starting_by
        starts, stops, levels = starts[early], stops[early], levels[early]
    times = np.asarray(profile.times, dtype=float).tolist()
    step = float(profile.step_seconds)
    horizon_end = times[-1] + step
    free_l = free.tolist()
    conf_l = np.asarray(profile.confidence, dtype=float).tolist()
    bound_l = None if profile.bound is None else np.asarray(profile.bound).tolist()
    entries = []
    for level, a, b in zip(levels.tolist(), starts.tolist(), stops.tolist()):
        end_t = times[b - 1] + step
        end = None if (open_ended and end_t >= horizon_end) else end_t
        after = bound_l[b] if bound_l is not None and b < len(free_l) else math.inf
        entries.append((level, times[a], end, min(free_l[a:b]), min(conf_l[a:b]), after))
    return LevelWindows(tuple(entries))


def idle_windows(*, profile: FreeProfile, open_ended: bool = True) -> list[IdleWindow]:
    """Maximal windows for every free-GPU level, nested (a 1-GPU window contains the 2-GPU windows within it).

    Each window's `free_gpus` is the minimum over its span and its confidence the lowest step confidence.
    A window that reaches the end of the horizon is open-ended (`end=None`) when `open_ended` is set. A window ends
    for certain (`end_certain`) when the profile's `bound` at the step that ends it is below the window's level
    (judged at the lowest level with that span: the cautious answer for a pod of more GPUs).
    """
    return list(level_windows(profile=profile, open_ended=open_ended).windows())


def current_window(*, windows: Sequence[IdleWindow], now: float, gpus: int = 1) -> IdleWindow | None:
    """The longest window containing `now` that has at least `gpus` free."""
    best: IdleWindow | None = None
    for w in windows:
        if w.free_gpus >= gpus and w.start <= now and (w.end is None or w.end > now):
            if best is None or w.length(now) > best.length(now):
                best = w
    return best


def node_view(
    *,
    name: str,
    gpu_type: str,
    gpus_total: int,
    gpus_free_now: int,
    profile: FreeProfile | None,
    now: float,
    data_stale: bool = False,
    min_confidence: float = 0.0,
    keep_ahead_seconds: float | None = None,
    held: int = 0,
    levels: LevelWindows | None = None,
) -> NodeView:
    """Build the decisions' view of a node; no usable profile (or confidence below the floor) marks it stale.

    With `keep_ahead_seconds`, only windows that have begun by `now + keep_ahead_seconds` are kept (the view is
    rebuilt before then), which keeps the request path's per-node work small. `held`: GPUs of the profile already
    taken (the node's offline pods): its windows are those of `less_held(profile, held)`; `levels`: the profile's
    `level_windows`, when the caller keeps them.
    """
    if profile is None or profile.free.size == 0:
        return NodeView(name, gpu_type, gpus_total, gpus_free_now, None, None, True, None, 0.0)
    if levels is None:
        levels = level_windows(profile=profile, starting_by=math.inf if keep_ahead_seconds is None
                               else now + keep_ahead_seconds)
    found = levels.windows(held)
    windows = tuple(
        w for w in found
        if (keep_ahead_seconds is None or w.start <= now + keep_ahead_seconds) and (w.end is None or w.end > now)
    )
    conf_now = float(profile.confidence[0])
    stale = data_stale or conf_now <= 0.0 or conf_now < min_confidence
    cur = current_window(windows=windows, now=now)
    return NodeView(
        name=name,
        gpu_type=gpu_type,
        gpus_total=gpus_total,
        gpus_free_now=gpus_free_now,
        window_end=cur.end if cur else now,
        window_free_gpus=cur.free_gpus if cur else 0,
        data_stale=stale,
        windows=windows,
        confidence=conf_now,
    )
