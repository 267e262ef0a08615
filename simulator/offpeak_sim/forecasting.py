"""Idle windows per node, the way the extender sees them, refreshed periodically and shared by every policy.

Mode `seasonal`: the extender's forecaster (`offpeak_core.forecast`) fitted on each node's online history
(refit every `refit_seconds`, like a background refresher), with the live demand overlaid at every refresh.
These are `forecast_node`'s two halves, as the extender runs them: the fit when history is refreshed, and
`forecast_now` (the extender's request-time half) at every refresh; a test checks that they agree with
`forecast_node` whenever the fit is fresh.
Mode `exact`: the true future demand (max per forecast step), i.e. a perfect forecaster; used to separate
forecast error from runtime-prediction error, and by tests.

Between refreshes, a node whose online demand changed gets its forecast brought to the minute with the new live
demand (`live_updates`), as the extender's store rebuilds a node's view whenever its online pods change (the pod
informer), so a surprise (online work back before the forecast said) closes that node's windows at once instead of
up to `refresh_seconds` later.

Windows are computed for the online demand alone (no offline pods) and shifted per policy by the GPUs that
policy's offline pods hold on the node, which is what `free_profile(offline_now=...)` would give.

The feed also learns how long its windows really last (`survival`, for expected-goodput admission): at every
refresh, for every node and every free-GPU level free right now, it notes the forecast's seconds left and, from
the demand that follows, when the GPUs were really taken back. A window counts only as far as the simulated
clock has seen it: windows still open are right-censored at their age (Kaplan-Meier), so nothing from the
future leaks into a decision. The table is rebuilt every `survival_seconds`.

With pod-placed online demand each policy's cluster has its own per-node demand (where online pods go depends on
where its offline pods are), so each policy gets its own feed (`fork`) over its own demand array, which the engine
fills minute by minute: that feed reads no minute after now, and learns when a window closed only once the clock
has passed it (`causal`); `exact` needs the future and so the pinned model.

Pool windows (`pool_windows`, pod-placed online demand only): an online pod goes to any node of its pool with room,
so an offline pod is evicted only when its whole pool is full. A pooled node's windows then end when the pool's
total online demand, forecast by `offpeak_core.poolrise` (its recent peak plus the rises its history shows), leaves
less room than the pool's offline pods hold, and never hold more GPUs than the node has free now. The survival
table learns a pooled node's windows the same way: noted from the pool forecast, and closed at level L when the
pool's online demand leaves it fewer than L GPUs (when an offline pod of L GPUs there would have been evicted),
whatever the node's own online pods.

Why over ~500 lines: one feed per run keeps four tables that move together at every refresh (node forecasts, pool
forecasts, the survival table, the pruning bounds); the rules it applies are the core's (`offpeak_core.rooms`,
`forecast`, `poolrise`), what stays here is the bookkeeping of when each is made again.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import Literal

import numpy as np

from offpeak_core.forecast import (
    DemandForecast, ForecastSettings, SeasonalModel, fit_seasonal, forecast_demand, forecast_now, level_since,
)
from offpeak_core.goodput import DEFAULT_CLASS_EDGES, WindowSurvival, add_observations
from offpeak_core.idleruns import IdleRuns, OpenRunAges
from offpeak_core.model import NodeView
from offpeak_core.poolrise import PoolRise, fit_pool_rise, pool_free, pool_judged_online, pooled_free, step_maxima
from offpeak_core.rooms import node_room, pool_online, pool_times, pooled_room, room_view
from offpeak_core.windows import FreeProfile, LevelWindows, level_windows

from offpeak_sim.scenario import Scenario


@dataclass(frozen=True)
class FeedSettings:
    """How the simulated extender forecasts, and how often it refreshes.

    The rules between these fields (pool windows need pod-placed demand, announcements the rise forecast, ...) are
    checked where settings come from, `offpeak_sim.scenariofile`, not again here."""

    mode: Literal["seasonal", "exact"] = "seasonal"
    refresh_seconds: float = 600.0
    refit_seconds: float = 86400.0
    forecast: ForecastSettings = ForecastSettings()
    survival_seconds: float = 3600.0  # how often the window-survival table is rebuilt
    survival_bin_seconds: float = 300.0
    survival_horizon_seconds: float = 86400.0  # windows followed this long count as outlasting it
    live_updates: bool = True  # seasonal: re-forecast a node when its online demand changes (as the extender does)
    # pod-placed online demand: windows end when the node's pool is forecast full (offpeak_core.poolrise: the
    # pool's peak of the last `pool_look_back_seconds` plus its `forecast.quantile` rise), not the node
    pool_windows: bool = False
    pool_look_back_seconds: float = 6 * 3600.0
    # with pool windows: "rise" (the extender's forecast above) or "exact", the pool's true future online total
    # (the trace's per-pool count, which no policy changes): the ceiling a perfect pool forecaster would reach
    pool_forecast: Literal["rise", "exact"] = "rise"
    # with the rise forecast: the pool's true online total is known this long ahead (online owners announcing their
    # scale-ups; 0: not at all). Beyond it the rises start from the known peak. What lead time yielding needs.
    pool_lead_seconds: float = 0.0
    # with the rise forecast: online owners announce what they will need this long ahead (0: not at all), and the
    # pool's true online total within it is a floor under the forecast, never lowering it (what the extender's
    # announced demand does, `offpeak_core.announcements`); beyond it the rises are as without.
    pool_announce_seconds: float = 0.0
    # with announcements: they also cap the pool's forecast within them (an OnlineDemand's `poolGpusAtMost`: the pool's
    # online side says it will hold no more), so with both per step the forecast within the lead is the true total
    pool_announce_ceiling: bool = False
    # with an announced ceiling: how coarse it is (0: per forecast step, the true total itself). The most is stated
    # once per clock-aligned span of this length, as a scaler's replica limit is: the span's busiest minute caps every
    # step of it
    pool_ceiling_block_seconds: float = 0.0
    # with announcements: the floor stated once per clock-aligned span of this length too (0: per forecast step), as
    # the span's busiest minute: a replica plan that holds the span's peak for all of it, so a window closes at the
    # start of the span a rise falls in, not at the rise
    pool_floor_block_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.refit_seconds <= 0:  # not a scenario field: only code sets it
            raise ValueError(f"refit_seconds must be > 0, got {self.refit_seconds}")


def future_step_maxima(series: np.ndarray, m0: int, *, steps: int, per: int) -> np.ndarray:
    """[rows, steps]: each row's maximum over every forecast step of `per` minutes from minute `m0` (the true future,
    for the exact forecasts); past the series' end its last minute repeats."""
    need = steps * per
    block = series[:, m0 : m0 + need]
    if block.shape[1] < need:
        block = np.concatenate([block, np.repeat(series[:, -1:], need - block.shape[1], axis=1)], axis=1)
    return block.reshape(series.shape[0], steps, per).max(axis=2)


class WindowFeed:
    """Current forecast per node: a free-GPU matrix for quick bounds, and idle windows on demand (cached)."""

    def __init__(self, scenario: Scenario, settings: FeedSettings, demand: np.ndarray | None = None) -> None:
        self.sc = scenario
        self.s = settings
        # causal: `demand` is filled as the run goes (a policy's own pod-placed online demand), so nothing after now
        self.causal = demand is not None
        if self.causal and settings.mode == "exact":
            raise ValueError("the exact forecast needs the future demand: use the pinned online model")
        self.demand: np.ndarray = scenario.demand if demand is None else demand
        self.step = settings.forecast.step_seconds
        self.steps = max(1, int(np.ceil(settings.forecast.horizon_seconds / self.step)))
        self.refreshed_at = -np.inf
        self.refresh_index = -1
        self._fitted_at = -np.inf
        # each node's fitted forecast on the last refresh's grid (`forecast_demand` of its model, from the refresh):
        # a live update between refreshes only brings its idle runs' ages to the minute
        self._models: list[SeasonalModel] = []
        self._fitted: list[DemandForecast] = []
        self.free = np.zeros((scenario.fleet.size, self.steps), dtype=np.int64)
        self.times = np.zeros(self.steps)
        self.stale = np.zeros(scenario.fleet.size, dtype=bool)
        # seasonal: each node's room for offline pods as the extender's store builds it (`rooms.node_room`, from the
        # step holding the minute it was forecast at), and its windows per level (kept until it is forecast again)
        self._rooms: dict[int, FreeProfile] = {}
        self._levels: dict[int, LevelWindows] = {}
        self._views: dict[tuple[int, int, int, int], NodeView] = {}  # this minute's views, by node, forecast, GPUs
        self._views_at = math.nan
        self._runs_key: tuple[float, int] = (math.nan, -1)  # `left_bounds`' counts, for this minute and forecast
        self._runs = np.zeros((0, 0), dtype=np.int64)
        minutes = np.arange(self.demand.shape[1])
        self._minute_times = minutes * 60.0
        bins = int(np.ceil(settings.survival_horizon_seconds / settings.survival_bin_seconds))
        self._closed = np.zeros((len(DEFAULT_CLASS_EDGES), bins + 1), dtype=np.int64)
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (start, class-left, closes at)
        # causal: windows still open when last looked at, as (node, level, start, class-left), looked at until
        self._open = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0))
        self._looked_to = -1  # the last minute of demand the open windows were checked against
        self._survival_at = -np.inf
        self.survival: WindowSurvival | None = None
        self.survival_version = 0
        self._live = np.full(scenario.fleet.size, -1, dtype=np.int64)  # online GPUs each node was forecast with
        # the ages of the nodes' open idle runs, counted as the clock goes (the fits' ages are as of the fit)
        self._run_ages = OpenRunAges(self.demand, thresholds=int(scenario.fleet.gpus.max()) + 1)
        self.updates = 0  # node forecasts brought up to date between refreshes (live_updates)
        pools = scenario.online_pods.pools if scenario.online_pods is not None else None
        # pool windows: the pools, the policy's offline GPUs per node (the engine's array, `watch_offline`), each
        # pool's fitted rises and its free GPUs per step of the refresh's grid (before offline pods)
        self.pools = pools if settings.pool_windows and self.causal and settings.mode == "seasonal" else None
        self.offline: np.ndarray | None = None
        self.pool_of = np.full(scenario.fleet.size, -1, dtype=np.int64)
        self._pool_rises: list[PoolRise] = []
        if self.pools is not None:
            for p, nodes in enumerate(self.pools.nodes):
                self.pool_of[nodes] = p
        self._pooled = np.flatnonzero(self.pool_of >= 0)
        self._no_pools = np.full(scenario.fleet.size, -1, dtype=np.int64)
        # bumped whenever a node's forecast (or its pool's) is made again: what the views kept are built from
        self.version = np.zeros(scenario.fleet.size, dtype=np.int64)
        n_pools = 0 if self.pools is None else len(self.pools.nodes)
        # each pool's true online GPUs per minute of the trace (what the exact forecast, the lead and the announcements
        # read), computed once: they are read for every pool at every re-forecast
        self._pool_gpus = (np.zeros((0, 0), dtype=np.int64) if self.pools is None else
                           self.pools.pods.astype(np.int64) * self.pools.pod_gpus.astype(np.int64)[:, None])
        self.pool_cap = np.bincount(self.pool_of[self._pooled], weights=scenario.fleet.gpus[self._pooled],
                                    minlength=n_pools).astype(np.int64)
        self.pool_free = np.zeros((n_pools, self.steps), dtype=np.int64)
        # with announcements: each pool's most free GPUs per step whatever the forecast (None: nothing announced),
        # so windows that announced demand ends are known to end there (`FreeProfile.bound`)
        self.pool_bound = np.zeros((n_pools, self.steps), dtype=np.int64) if settings.pool_announce_seconds else None
        # each pool's forecast online GPUs (and announced floor) per step from the one holding the minute it was made
        # at, and those steps' times: what the views are built from (`rooms.pooled_room`, as in the extender)
        self._pool_online: dict[int, tuple[np.ndarray, np.ndarray | None, np.ndarray]] = {}
        self._pool_live = np.full(n_pools, -1, dtype=np.int64)

    def fork(self, demand: np.ndarray) -> WindowFeed:
        """A fresh feed with these settings over another demand array (a policy's own, filled as the run goes)."""
        return WindowFeed(self.sc, self.s, demand)

    def watch_offline(self, used: np.ndarray) -> None:
        """Read the policy's offline GPUs per node from `used` (updated in place): pool windows depend on them."""
        self.offline = used

    def pool_keys(self) -> np.ndarray:
        """What each pooled node's windows depend on beyond the node itself: its pool's offline GPUs (-1: no pool,
        or pool windows off)."""
        if self.offline is None or not self._pool_rises or not self._pooled.size:
            return self._no_pools
        held = np.bincount(self.pool_of[self._pooled], weights=self.offline[self._pooled],
                           minlength=len(self.pool_cap)).astype(np.int64)
        return np.where(self.pool_of >= 0, held[np.maximum(self.pool_of, 0)], -1)

    def update_live(self, now: float) -> np.ndarray:
        """Re-forecast (seasonal mode) the nodes whose online demand changed since their last forecast; return them.

        The forecast stays on the refresh's step grid (`times`), so bounds and windows keep one clock; steps already
        past repeat the current one."""
        if self.s.mode != "seasonal" or not self.s.live_updates or not self._fitted:
            return np.zeros(0, dtype=np.int64)
        changed = np.flatnonzero(self.demand[:, int(now // 60)] != self._live)
        for n in changed:
            self._forecast_node(int(n), now)
        self.updates += int(changed.size)
        if self.pools is not None and self._pool_rises:
            m = int(now // 60)
            # announcements reach the extender the moment they are made (its informer watches them): with them on,
            # every pool's forecast moves on each minute, its announced lead with it
            announcing = self.pool_bound is not None
            for p, nodes in enumerate(self.pools.nodes):
                if announcing or int(self.demand[nodes, m].sum()) != self._pool_live[p]:
                    self._forecast_pool(p, now)
        return changed

    def maybe_refresh(self, now: float) -> bool:
        """Refresh when `refresh_seconds` have passed; return True when it did."""
        if now - self.refreshed_at < self.s.refresh_seconds:
            self.update_live(now)
            return False
        self.refreshed_at = now
        self.refresh_index += 1
        self._levels.clear()
        self.times = now + np.arange(self.steps, dtype=np.float64) * self.step
        if self.s.mode == "exact":
            self._exact(now)
        else:
            self._seasonal(now)
        self._observe(now)
        if now - self._survival_at >= self.s.survival_seconds:
            self._survival_at = now
            self._rebuild_survival(now)
        return True

    def _observe(self, now: float) -> None:
        """Note every (node, free-GPU level) free now: the forecast's seconds left and when it really closed."""
        if self.causal:
            self._observe_causal(now)
            return
        sc = self.sc
        m0 = int(now // 60)
        horizon = int(self.s.survival_horizon_seconds // 60)
        future = self.demand[:, m0 : m0 + horizon + 1].astype(np.int64)
        if future.shape[1] == 0:
            return
        peak = np.maximum.accumulate(future, axis=1)  # online GPUs held at some point since now
        cap = sc.fleet.gpus.astype(np.int64)
        low = np.minimum.accumulate(self.free, axis=1)  # forecast free GPUs, lowest so far
        starts, lefts, closes = [], [], []
        for level in range(1, int(cap.max()) + 1):
            ok_now = cap - future[:, 0] >= level
            if not ok_now.any():
                continue
            run = (low >= level).sum(axis=1)
            left = np.where(run >= self.steps, np.inf, run * self.step)
            taken = peak > (cap - level)[:, None]
            first = np.where(taken.any(axis=1), taken.argmax(axis=1), -1)
            followed = future.shape[1] - 1  # minutes of demand there is to look at (less at the end of the trace)
            close = np.where(first >= 0, now + first * 60.0, np.where(followed >= horizon, np.inf, np.nan))
            keep = ok_now & ~np.isnan(close)
            starts.append(np.full(int(keep.sum()), now))
            lefts.append(left[keep])
            closes.append(close[keep])
        if starts:
            self._pending.append((np.concatenate(starts), np.concatenate(lefts), np.concatenate(closes)))

    def _observe_causal(self, now: float) -> None:
        """`_observe` without the future: note the windows free now; `_close_causal` finds when they closed."""
        m0 = int(now // 60)
        cap = self.sc.fleet.gpus.astype(np.int64)
        own = self.demand[:, m0].astype(np.int64)
        free_now = cap - np.maximum(own, self._judged(np.arange(cap.size), m0, m0 + 1)[:, 0])
        free = self.free
        bound = None  # what announced demand leaves: a window it ends is judged by that end, not noted in the table
        if self._pool_rises and self._pooled.size:  # pooled nodes: the pool's forecast, before offline pods
            free = free.copy()
            free[self._pooled] = self._pooled_free(self._pooled, now, offline=False)
            if self.pool_bound is not None:
                bound = np.full(free.shape, np.iinfo(np.int64).max, dtype=np.int64)
                bound[self._pooled] = self._pooled_free(self._pooled, now, offline=False, bound=True)
        low = np.minimum.accumulate(free, axis=1)
        nodes, levels, lefts = [], [], []
        for level in range(1, int(cap.max()) + 1):
            ok_now = np.flatnonzero(free_now >= level)
            run = (low[ok_now] >= level).sum(axis=1)
            if bound is not None:
                ends = run < self.steps
                certain = np.zeros(ok_now.size, dtype=bool)
                certain[ends] = bound[ok_now[ends], run[ends]] < level
                ok_now, run = ok_now[~certain], run[~certain]
            nodes.append(ok_now)
            levels.append(np.full(ok_now.size, level))
            lefts.append(np.where(run >= self.steps, np.inf, run * self.step))
        n, lv, st, lf = self._open
        self._open = (np.concatenate([n, *nodes]), np.concatenate([lv, *levels]),
                      np.concatenate([st, np.full(sum(x.size for x in nodes), now)]), np.concatenate([lf, *lefts]))

    def _close_causal(self, now: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Check the open windows against the demand seen since the last look; return the (start, class-left,
        closes at) of those now known (closed, or followed for the whole horizon: closes at inf) and keep the rest."""
        node, level, start, left = self._open
        m_now = int(now // 60)
        horizon = int(self.s.survival_horizon_seconds // 60)
        a = max(self._looked_to + 1, 0)
        close = np.full(node.size, np.nan)
        if node.size and m_now >= a:
            cols = np.arange(a, m_now + 1)
            cap = self.sc.fleet.gpus.astype(np.int64)
            seen = self._judged(node, a, m_now + 1)  # [windows, minutes since the last look]
            m_start = (start // 60).astype(np.int64)
            valid = (cols[None, :] > m_start[:, None]) & (cols[None, :] <= m_start[:, None] + horizon)
            taken = valid & (seen > (cap[node] - level)[:, None])
            hit = taken.any(axis=1)
            close[hit] = cols[taken[hit].argmax(axis=1)] * 60.0
        self._looked_to = m_now
        outlasted = np.isnan(close) & (start + self.s.survival_horizon_seconds <= now)
        close[outlasted] = np.inf
        known = ~np.isnan(close)
        self._open = (node[~known], level[~known], start[~known], left[~known])
        return start[known], left[known], close[known]

    def _judged(self, nodes: np.ndarray, a: int, b: int) -> np.ndarray:
        """Online GPUs the windows of `nodes` are judged by over minutes a..b-1 (int [nodes, minutes]): a node's own;
        a pooled node's, with pool windows on, all its GPUs but those its pool has free of online pods (so its
        level-L window closes when the pool has fewer than L GPUs free)."""
        seen = self.demand[nodes, a:b].astype(np.int64)
        p = self.pool_of[nodes]
        pooled = p >= 0
        if not self._pool_rises or not pooled.any():
            return seen
        assert self.pools is not None
        totals = np.stack([self.demand[members, a:b].sum(axis=0, dtype=np.int64) for members in self.pools.nodes])
        cap = self.sc.fleet.gpus[nodes][pooled].astype(np.int64)[:, None]
        seen[pooled] = pool_judged_online(cap, self.pool_cap[p[pooled]][:, None] - totals[p[pooled]])
        return seen

    def _rebuild_survival(self, now: float) -> None:
        """Move windows seen closing (or outlasting the horizon) into the table; the rest are censored at their age."""
        if self.causal:
            start, left, close = self._close_causal(now)
            self._pending = [(start, left, close), (self._open[2], self._open[3], np.full(self._open[2].size, np.nan))]
        b = self.s.survival_bin_seconds
        h = self.s.survival_horizon_seconds
        open_at = np.zeros_like(self._closed)
        still: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for start, left, close in self._pending:
            known = (close <= now) | (start + h <= now)
            if known.any():
                lasted = np.minimum(close[known], start[known] + h) - start[known]
                add_observations(self._closed, edges=DEFAULT_CLASS_EDGES, bin_seconds=b, forecast_left=left[known],
                                 lasted=lasted, outlasted=lasted >= h)
            rest = ~known
            if rest.any():
                still.append((start[rest], left[rest], close[rest]))
                add_observations(open_at, edges=DEFAULT_CLASS_EDGES, bin_seconds=b, forecast_left=left[rest],
                                 lasted=now - start[rest], outlasted=np.zeros(int(rest.sum()), dtype=bool))
        self._pending = still
        self.survival = WindowSurvival(DEFAULT_CLASS_EDGES, b, self._closed.copy(), open_at)
        self.survival_version += 1

    def _exact(self, now: float) -> None:
        self.version += 1
        per = max(1, int(round(self.step / 60.0)))
        online = future_step_maxima(self.demand, int(now // 60), steps=self.steps, per=per)
        self.free = np.clip(self.sc.fleet.gpus[:, None] - online, 0, None).astype(np.int64)
        self.stale[:] = False

    def _seasonal(self, now: float) -> None:
        fs = self.s.forecast
        m_now = int(now // 60)
        if now - self._fitted_at >= self.s.refit_seconds:
            self._fitted_at = now
            lo = max(0, int((now - fs.history_seconds) // 60))
            # up to now, the current minute included, as the extender's history (a range query ends at now)
            t = self._minute_times[lo : m_now + 1]
            self._models = [
                fit_seasonal(times=t, online=self.demand[n, lo : m_now + 1].astype(float), now=now, settings=fs)
                for n in range(self.sc.fleet.size)
            ]
            if self.pools is not None:
                self._fit_pools(now)
        self._fitted = [forecast_demand(model=model, start=now) for model in self._models]
        for n in range(len(self._fitted)):
            self._forecast_node(n, now)
        for p in range(len(self._pool_rises)):
            self._forecast_pool(p, now)

    def _fit_pools(self, now: float) -> None:
        """Fit each pool's rises on its total online demand over the history (step maxima; the current minute is
        the last step's, as the extender's history has a point at now)."""
        assert self.pools is not None
        per = max(1, int(round(self.step / 60.0)))
        m = int(now // 60)
        lo = max(0, int((now - self.s.forecast.history_seconds) // 60))
        look_back = max(1, int(round(self.s.pool_look_back_seconds / self.step)))
        self._pool_rises = [
            fit_pool_rise(step_maxima(self.demand[nodes, lo : m + 1].sum(axis=0), per), capacity=float(self.pool_cap[p]),
                          horizon_steps=self.steps, look_back_steps=look_back, quantile=self.s.forecast.quantile)
            for p, nodes in enumerate(self.pools.nodes)
        ]

    def _forecast_pool(self, p: int, now: float) -> None:
        """Pool p's free GPUs (before offline pods) per step of the last refresh's grid, from `now` on."""
        assert self.pools is not None
        nodes = self.pools.nodes[p]
        m = int(now // 60)
        rise = self._pool_rises[p]
        per = max(1, int(round(self.step / 60.0)))
        live = int(self.demand[nodes, m].sum())
        past = min(self.steps - 1, int(max(0.0, now - self.refreshed_at) // self.step))
        floor = None
        if self.s.pool_forecast == "exact":
            online = self._pool_future(p, m, per)
        else:
            # the pool's demand over its last look-back steps, now's included (the extender's last look-back points)
            recent = self.demand[nodes, max(0, m - (rise.look_back_steps - 1) * per) : m + 1].sum(axis=0).astype(float)
            lead = min(self.steps, int(round(self.s.pool_lead_seconds / self.step)))
            known = self._pool_future(p, m, per, steps=lead) if lead else np.zeros(0)
            ceiling = None
            announced = min(self.steps, int(round(self.s.pool_announce_seconds / self.step)))
            if announced and self.pool_bound is not None:
                floor = np.zeros(self.steps)
                floor[:announced] = self._pool_announced(p, m, per, steps=announced,
                                                         block_seconds=self.s.pool_floor_block_seconds)
                if self.s.pool_announce_ceiling:  # announced as the most too
                    ceiling = np.full(self.steps, np.inf)
                    ceiling[:announced] = self._pool_announced(p, m, per, steps=announced,
                                                               block_seconds=self.s.pool_ceiling_block_seconds)
            online = pool_online(rise=rise, recent=np.concatenate([recent, known]), live=float(live), floor=floor,
                                 ceiling=ceiling)
            online[:lead] = known  # (a lead and announcements are not asked for together)
        times = pool_times(fitted_at=self.refreshed_at, now=now, step_seconds=self.step, steps=online.size)
        self._pool_online[p] = (online, floor, times)
        self.version[nodes] += 1
        if floor is not None and self.pool_bound is not None:  # the bounds' matrix: on the refresh's grid
            self.pool_bound[p] = pool_free(np.concatenate([np.repeat(floor[:1], past), floor[: self.steps - past]]),
                                           int(self.pool_cap[p]))
        grid = np.concatenate([np.repeat(online[:1], past), online[: self.steps - past]])
        self.pool_free[p] = pool_free(grid, int(self.pool_cap[p]))
        self._pool_live[p] = live

    def _pool_announced(self, p: int, m: int, per: int, *, steps: int, block_seconds: float) -> np.ndarray:
        """Pool p's announced online GPUs per forecast step from minute m on, for `steps` steps: the true total per
        step (`block_seconds` 0), or each clock-aligned block's busiest minute over all of it (a step that touches two
        blocks takes the higher)."""
        block = int(block_seconds // 60)
        if not block:
            return self._pool_future(p, m, per, steps=steps)
        first = (m // block) * block
        blocks = -(-(m + steps * per - first) // block)
        most = future_step_maxima(self._pool_gpus[p : p + 1], first, steps=blocks, per=block)[0]
        minutes = np.repeat(most, block)[m - first : m - first + steps * per]
        return minutes.reshape(steps, per).max(axis=1).astype(float)

    def _pool_future(self, p: int, m: int, per: int, *, steps: int | None = None) -> np.ndarray:
        """Pool p's true online GPUs from minute m on, max per forecast step, for `steps` steps (all of the
        horizon's by default: `pool_forecast` "exact"); past the trace's end, its last minute repeats."""
        return future_step_maxima(self._pool_gpus[p : p + 1], m, steps=steps or self.steps, per=per)[0].astype(float)

    def _pooled_free(self, nodes: np.ndarray, now: float, *, offline: bool = True, bound: bool = False
                     ) -> np.ndarray:
        """[nodes, steps]: GPUs of each pooled node forecast free beyond its own offline pods' (what `self.free` is
        for a node alone): no more than it has free now, nor than its pool has beyond the pool's offline GPUs
        (`offline` False: online demand alone, as the survival table notes windows). `bound`: the most it can have
        free whatever the forecast, by the announced demand alone (needs `pool_bound`)."""
        p = self.pool_of[nodes]
        table = self.pool_free if not bound else self.pool_bound
        assert table is not None, "a bound needs announcements"
        own = self.sc.fleet.gpus[nodes].astype(np.int64) - self.demand[nodes, int(now // 60)].astype(np.int64)
        if not offline:
            return pooled_free(table[p], held=0, node_free=own[:, None])
        assert self.offline is not None, "pool windows need the policy's offline GPUs (watch_offline)"
        pooled = self._pooled
        held = np.bincount(self.pool_of[pooled], weights=self.offline[pooled], minlength=len(self.pool_cap))
        elsewhere = held[p].astype(np.int64) - self.offline[nodes]
        return pooled_free(table[p], held=elsewhere[:, None], node_free=own[:, None])

    def _forecast_node(self, n: int, now: float) -> None:
        """Node n's free profile at `now` (live demand overlaid), on the step grid of the last refresh."""
        fs = self.s.forecast
        live = int(self.demand[n, int(now // 60)])
        cap = int(self.sc.fleet.gpus[n])
        fitted = self._fitted[n]
        if fitted.runs is not None:  # (built directly: `dataclasses.replace` costs more than the rest, per node)
            fitted = DemandForecast(fitted.times, fitted.online, fitted.confidence, fitted.step_seconds,
                                    self._aged(n, fitted.runs, now))
        room = node_room(fitted=fitted, capacity=cap, now=now, settings=fs, live_online=float(live),
                         live_rose_at=self._rose_at(n, now))
        assert room is not None  # a fitted forecast always gives one
        self._rooms[n] = room
        self._levels.pop(n, None)
        self.version[n] += 1
        past = self.steps - room.free.size  # steps of the refresh's grid already wholly past
        self.free[n] = np.concatenate([np.repeat(room.free[:1], past), room.free]) if past else room.free
        self.stale[n] = float(room.confidence[0]) <= 0.0
        self._live[n] = live

    def _rose_at(self, n: int, now: float) -> float | None:
        """When node n's online demand rose to what it is at `now`, from its minutes of the last two holds (the
        extender's store reads a node's latest samples the same way): a surprise holds from then (`apply_live`)."""
        fs = self.s.forecast
        m = int(now // 60)
        lo = max(0, m - int(math.ceil(2 * fs.hold_seconds / 60.0)))
        return level_since(times=self._minute_times[lo : m + 1], online=self.demand[n, lo : m + 1],
                           level=float(self.demand[n, m]), tolerance=fs.live_tolerance)

    def _aged(self, n: int, runs: IdleRuns, now: float) -> IdleRuns:
        """The node's idle runs as fitted (daily), with the ages of its open runs brought to `now`: what a fit at
        `now` would give, but for runs completed since the fit (the extender refits every minute anyway)."""
        m = int(now // 60)
        lo = max(0, int((now - self.s.forecast.history_seconds) // 60))
        age = self._run_ages.ages(n, m=m, lo=lo, thresholds=len(runs.age))
        return IdleRuns(at=float(self._minute_times[m - 1]) if m > 0 else now, lengths=runs.lengths, age=age)

    def room(self, node: int, now: float) -> FreeProfile | None:
        """The GPUs the node's offline pods may hold per step, theirs included, as the extender's `held_window` judges
        a running pod's window: from its online forecast alone (`rooms.node_room`), or for a pooled node its room in
        the pool (its pool's forecast less the offline GPUs on the pool's other nodes). None: stale."""
        if self.stale[node]:
            return None
        if self.pool_of[node] >= 0 and self._pool_rises:
            assert self.offline is not None, "pool windows need the policy's offline GPUs (watch_offline)"
            own = int(self.sc.fleet.gpus[node]) - int(self.demand[node, int(now // 60)])
            return self._pooled_room(node, now, held=self._pool_held(node) - int(self.offline[node]), node_free=own)
        if self.s.mode == "exact":
            return FreeProfile(self.times, self.free[node], np.ones(self.steps), self.step)
        return self._rooms[node]

    def view(self, node: int, *, offline_gpus: int, free_now: int, now: float) -> NodeView:
        """The node as the extender's filter sees it, its offline pods holding `offline_gpus` and `free_now` GPUs free
        (`rooms.room_view`: the windows of its room less what they hold; a pooled node's, of its room in the pool
        with every offline GPU of the pool held), listing the windows that open before the next refresh."""
        if self.pool_of[node] < 0 or not self._pool_rises:
            # a view is its forecast's, `now`'s and these GPUs' alone: policies holding the same share it
            if now != self._views_at:
                self._views_at = now
                self._views.clear()
            key = (node, int(self.version[node]), offline_gpus, free_now)
            kept = self._views.get(key)
            if kept is None:
                kept = self._views[key] = self._node_view(node, offline_gpus=offline_gpus, free_now=free_now, now=now)
            return kept
        if not self.stale[node]:  # a pooled node's: its pool's offline GPUs too
            fl = self.sc.fleet
            name, gpu_type, total = fl.names[node], fl.gpu_types[node], int(fl.gpus[node])
            node_free = total - int(self.demand[node, int(now // 60)]) - offline_gpus
            pooled = self._pooled_room(node, now, held=self._pool_held(node), node_free=node_free)
            return room_view(name=name, gpu_type=gpu_type, gpus_total=total, gpus_free_now=free_now, room=pooled,
                             held=0, now=now, keep_ahead_seconds=self._keep_ahead(now))
        return self._node_view(node, offline_gpus=offline_gpus, free_now=free_now, now=now)

    def _node_view(self, node: int, *, offline_gpus: int, free_now: int, now: float) -> NodeView:
        """The view from the node's own room (`view`'s, unkept)."""
        fl = self.sc.fleet
        name, gpu_type, total = fl.names[node], fl.gpu_types[node], int(fl.gpus[node])
        room = self.room(node, now)
        levels = None
        if room is not None:
            levels = self._levels.get(node)
            if levels is None:
                # until the next refresh: a view lists no window starting later (`_keep_ahead`)
                levels = self._levels[node] = level_windows(profile=room, starting_by=self._keep_ahead(now) + now)
        return room_view(name=name, gpu_type=gpu_type, gpus_total=total, gpus_free_now=free_now, room=room,
                         held=offline_gpus, now=now, keep_ahead_seconds=self._keep_ahead(now), levels=levels)

    def _keep_ahead(self, now: float) -> float:
        """How far ahead of `now` a view lists windows: up to the next refresh, which builds every view again (a
        view lasts until its node's forecast, offline or free GPUs change, as the extender's store keeps them)."""
        return max(0.0, self.refreshed_at + self.s.refresh_seconds - now)

    def _pool_held(self, node: int) -> int:
        """The offline GPUs held on every node of `node`'s pool (the policy's, `watch_offline`)."""
        assert self.offline is not None and self.pools is not None
        return int(self.offline[self.pools.nodes[int(self.pool_of[node])]].sum())

    def _pooled_room(self, node: int, now: float, *, held: int, node_free: int) -> FreeProfile:
        """`rooms.pooled_room` of a pooled node from its pool's last forecast: no more than `node_free`, nor than
        the pool's forecast room less `held` offline GPUs."""
        p = int(self.pool_of[node])
        online, floor, times = self._pool_online[p]
        return pooled_room(online=online, times=times, step_seconds=self.step, capacity=int(self.pool_cap[p]),
                           held=held, node_free=node_free, day_seconds=self.s.forecast.season_seconds, floor=floor)

    def left_bounds(self, *, now: float, offline: np.ndarray, levels: int) -> np.ndarray:
        """`left_upper_bound` for `offline + w` GPUs, every w in 0..levels at once: [levels + 1, nodes]."""
        c = int(max(0, (now - self.refreshed_at) // self.step))
        free = self.free
        if self._pool_rises and self._pooled.size:  # a pooled node's room depends on the policy's offline GPUs
            free = free.copy()
            free[self._pooled] = self._pooled_free(self._pooled, now)
            runs = self._runs_at_least(free, c)
        else:  # the forecast's alone: counted once a minute for every policy sharing the feed
            key = (now, int(self.version.sum()))
            if key != self._runs_key:
                self._runs_key, self._runs = key, self._runs_at_least(free, c)
            runs = self._runs
        span = free.shape[1] - c
        top = runs.shape[1] - 1  # no step has more GPUs free: none as many
        out = np.empty((levels + 1, free.shape[0]))
        rows = np.arange(free.shape[0])
        for w in range(levels + 1):
            run = runs[rows, np.minimum(offline + w, top)]
            end = self.refreshed_at + (c + run) * self.step
            out[w] = np.where(run >= span, np.inf, end - now + self.step)
        out[:, self.stale] = np.inf
        return out

    @staticmethod
    def _runs_at_least(free: np.ndarray, c: int) -> np.ndarray:
        """[nodes, most free + 2]: per node and GPU count k, the steps from step c on that keep k GPUs free throughout
        (the last column, one more than any step has, is 0)."""
        low = np.minimum.accumulate(free[:, c:], axis=1)  # (free GPUs are never below 0)
        width = int(low.max(initial=0)) + 2
        # how many steps have each level as their low, per node; then, from the top, how many have at least it
        at = np.bincount((low + np.arange(low.shape[0])[:, None] * width).ravel(), minlength=low.shape[0] * width)
        return np.cumsum(at.reshape(low.shape[0], width)[:, ::-1], axis=1)[:, ::-1]

    def left_upper_bound(self, *, now: float, gpus_needed: np.ndarray) -> np.ndarray:
        """Per node, an upper bound on seconds from `now` that `gpus_needed[n]` GPUs stay forecast free (inf: open).

        Only used to skip nodes and jobs that cannot pass `filter_nodes`; one step of slack keeps it a bound.
        """
        c = int(max(0, (now - self.refreshed_at) // self.step))
        ok = self.free[:, c:] >= gpus_needed[:, None]
        run = np.where(ok.all(axis=1), -1, np.argmin(ok, axis=1))
        end = self.refreshed_at + (c + run) * self.step
        left = np.where(run < 0, np.inf, end - now + self.step)
        left[self.stale] = np.inf
        return left
