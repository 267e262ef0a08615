"""Forecast online GPU demand per node: seasonal quantiles, a live override and declared busy hours.

Seasonal: the history is binned by time-of-day × day-of-week (one "day" is `season_seconds`, configurable so tests
and the e2e demo can compress a day into minutes); each bin's high quantile (default p90) is the forecast demand.
Missing data is normal (agents restart, Prometheus drops scrapes): NaN samples are ignored, a day-of-week bin
with too few samples falls back to the same time of day on any weekday, then to the node's overall quantile,
and the confidence drops with each fallback. No history at all gives confidence 0 (callers treat it as stale).

Each fit also learns the node's idle runs (`offpeak_core.idleruns`): how long its windows really lasted, given
how long they had lasted already. At request time a window is forecast to end no later than `run_quantile` of the
node's past windows of the same age went on, which the time-of-day quantiles cannot say (a window that opened a
minute ago on a node where online work comes and goes is not a long window, whatever the hour).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from offpeak_core.idleruns import IdleRuns, cap_online, fit_idle_runs
from offpeak_core.schedules import EPOCH_WEEKDAY, BusySchedule

DAYS_PER_WEEK = 7
CONFIDENCE_WEEKDAY_BIN = 1.0
CONFIDENCE_TIME_OF_DAY = 0.7
CONFIDENCE_OVERALL = 0.4


@dataclass(frozen=True)
class ForecastSettings:
    """How demand is forecast. Seconds throughout."""

    season_seconds: float = 86400.0  # length of one "day"
    step_seconds: float = 300.0  # forecast and binning resolution
    horizon_seconds: float = 86400.0  # how far ahead windows are forecast
    history_seconds: float = 28 * 86400.0  # how much history the seasonal model uses
    quantile: float = 0.9  # demand quantile per bin (higher = more cautious windows)
    weekly: bool = True  # bin by day-of-week as well as time-of-day
    min_samples: int = 3  # samples a bin needs before it is trusted
    live_tolerance: float = 0.5  # GPUs above the forecast that count as "online demand rising now"
    live_hold_seconds: float | None = None  # how long a live surprise holds (default: season/24, one "hour")
    # A window lasts as long as this share of the node's own past windows of its age went on (None: off). 0.9 is
    # the same caution as `quantile`: nine in ten such windows lasted at least that long.
    run_quantile: float | None = 0.9
    min_runs: int = 10  # past windows that lasted beyond a window's age before their lengths are trusted

    def __post_init__(self) -> None:
        if self.season_seconds <= 0 or self.step_seconds <= 0 or self.horizon_seconds <= 0:
            raise ValueError("season_seconds, step_seconds and horizon_seconds must be > 0")
        if self.step_seconds > self.season_seconds:
            raise ValueError("step_seconds must not exceed season_seconds")
        if not 0.0 <= self.quantile <= 1.0:
            raise ValueError(f"quantile must be in [0, 1], got {self.quantile}")
        if self.run_quantile is not None and not 0.0 < self.run_quantile <= 1.0:
            raise ValueError(f"run_quantile must be in (0, 1] or None, got {self.run_quantile}")
        if self.min_runs < 1:
            raise ValueError(f"min_runs must be >= 1, got {self.min_runs}")

    @property
    def bins_per_day(self) -> int:
        return max(1, int(round(self.season_seconds / self.step_seconds)))

    @property
    def hold_seconds(self) -> float:
        return self.live_hold_seconds if self.live_hold_seconds is not None else self.season_seconds / 24.0


@dataclass(frozen=True)
class SeasonalModel:
    """Per-bin demand quantiles with sample counts; built by `fit_seasonal`."""

    settings: ForecastSettings
    week_q: np.ndarray  # (7 * bins_per_day,) demand quantile per day-of-week bin (NaN: no data)
    week_n: np.ndarray  # samples per day-of-week bin
    day_q: np.ndarray  # (bins_per_day,) pooled over weekdays
    day_n: np.ndarray
    overall_q: float  # NaN when there is no data at all
    n_samples: int
    runs: IdleRuns | None = None  # the node's idle runs (None: no samples, or `run_quantile` off)


@dataclass(frozen=True)
class DemandForecast:
    """Forecast online GPUs in use from `times[i]` for one step each, with a confidence per step."""

    times: np.ndarray
    online: np.ndarray
    confidence: np.ndarray
    step_seconds: float
    runs: IdleRuns | None = None  # the node's idle runs, as fitted (applied by `forecast_now`)


def _bins(times: np.ndarray, s: ForecastSettings) -> tuple[np.ndarray, np.ndarray]:
    """Return (time-of-day bin, day-of-week × time-of-day bin) for each time."""
    day_index = np.floor(times / s.season_seconds)
    tod = np.clip(((times - day_index * s.season_seconds) / s.step_seconds).astype(int), 0, s.bins_per_day - 1)
    weekday = ((day_index + EPOCH_WEEKDAY) % DAYS_PER_WEEK).astype(int) if s.weekly else np.zeros_like(tod)
    return tod, weekday * s.bins_per_day + tod


def _grouped_quantile(keys: np.ndarray, values: np.ndarray, n_keys: int, q: float) -> tuple[np.ndarray, np.ndarray]:
    """Quantile (lower, no interpolation) of `values` per integer key, vectorised; NaN for empty keys."""
    counts = np.bincount(keys, minlength=n_keys)
    out = np.full(n_keys, np.nan)
    if values.size == 0:
        return out, counts
    # one float argsort instead of lexsort: key + value squeezed into [0, 0.5) sorts by key, then value
    lo, span = float(values.min()), float(np.ptp(values)) or 1.0
    order = np.argsort(keys + (values - lo) / span * 0.5, kind="stable")
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    has = counts > 0
    idx = starts[has] + np.ceil(q * (counts[has] - 1)).astype(int)
    out[has] = values[order][idx]
    return out, counts


def fit_seasonal(*, times: np.ndarray, online: np.ndarray, now: float, settings: ForecastSettings) -> SeasonalModel:
    """Fit per-bin demand quantiles from samples in (now - history, now]; NaN and future samples are ignored."""
    t = np.asarray(times, dtype=float)
    v = np.asarray(online, dtype=float)
    if t.shape != v.shape:
        raise ValueError(f"times and online must have the same shape, got {t.shape} and {v.shape}")
    keep = np.isfinite(t) & np.isfinite(v) & (t <= now) & (t > now - settings.history_seconds)
    t, v = t[keep], np.maximum(v[keep], 0.0)
    bpd = settings.bins_per_day
    tod, week = _bins(t, settings)
    week_q, week_n = _grouped_quantile(week, v, DAYS_PER_WEEK * bpd, settings.quantile)
    day_q, day_n = _grouped_quantile(tod, v, bpd, settings.quantile)
    overall = float(np.quantile(v, settings.quantile, method="higher")) if v.size else float("nan")
    runs = None
    if settings.run_quantile is not None:
        runs = fit_idle_runs(times=times, online=online, now=now, history_seconds=settings.history_seconds,
                             max_gap_seconds=settings.step_seconds)
    return SeasonalModel(settings, week_q, week_n, day_q, day_n, overall, int(v.size), runs)


def forecast_demand(*, model: SeasonalModel, start: float) -> DemandForecast:
    """Forecast demand for each step of the horizon from `start`, with per-step confidence."""
    s = model.settings
    n = max(1, int(np.ceil(s.horizon_seconds / s.step_seconds)))
    times = start + np.arange(n) * s.step_seconds
    tod, week = _bins(times, s)
    online = np.full(n, np.nan)
    conf = np.zeros(n)
    use_week = model.week_n[week] >= s.min_samples
    online[use_week] = model.week_q[week][use_week]
    conf[use_week] = CONFIDENCE_WEEKDAY_BIN
    use_day = ~use_week & (model.day_n[tod] >= s.min_samples)
    online[use_day] = model.day_q[tod][use_day]
    conf[use_day] = CONFIDENCE_TIME_OF_DAY
    rest = ~use_week & ~use_day
    if np.isfinite(model.overall_q):
        online[rest] = model.overall_q
        conf[rest] = CONFIDENCE_OVERALL
    return DemandForecast(times=times, online=online, confidence=conf, step_seconds=s.step_seconds, runs=model.runs)


def apply_runs(
    *, forecast: DemandForecast, runs: IdleRuns | None, live_online: float | None, now: float,
    settings: ForecastSettings,
) -> DemandForecast:
    """End each window no later than the node's own past windows of its age say (`idleruns.cap_online`)."""
    if runs is None or settings.run_quantile is None or forecast.times.size == 0:
        return forecast
    online = cap_online(times=forecast.times, online=forecast.online, step_seconds=forecast.step_seconds, runs=runs,
                        live_online=live_online, now=now, quantile=settings.run_quantile, min_runs=settings.min_runs)
    return DemandForecast(forecast.times, online, forecast.confidence, forecast.step_seconds)


def apply_live(
    *,
    forecast: DemandForecast,
    live_online: float | None,
    now: float,
    settings: ForecastSettings,
    capacity: int | None = None,
    rose_at: float | None = None,
) -> DemandForecast:
    """Overlay what is known now: the current step is the live demand; online demand rising closes the window.

    When online demand now exceeds the forecast by more than `live_tolerance`, the forecast was wrong and online
    work is growing: for `hold_seconds` from when it rose (`rose_at`; unknown: from `now`) the node is treated as
    fully taken by online work (`capacity`), which closes its idle window (with no capacity given, the live level
    is held instead). Once that hold is over, a level that stays above the forecast is online work that has
    stopped growing: like online work the forecast expected, it is assumed to keep running for `hold_seconds`
    from now, and the GPUs it leaves are free again (else one rise at an hour the history never saw would close
    the node until a whole season of history had seen it too). The current step keeps the live value.
    """
    if live_online is None or not np.isfinite(live_online) or forecast.times.size == 0:
        return forecast
    online = forecast.online.copy()
    conf = forecast.confidence.copy()
    predicted_now = online[0]
    online[0] = live_online
    conf[0] = 1.0
    rising_until = (now if rose_at is None else min(now, rose_at)) + settings.hold_seconds
    if np.isfinite(predicted_now) and live_online > predicted_now + settings.live_tolerance and now < rising_until:
        rising = forecast.times < rising_until
        online[rising] = np.fmax(online[rising], live_online if capacity is None else float(capacity))
    hold = forecast.times < now + settings.hold_seconds  # online work already running keeps running a while
    online[hold] = np.fmax(online[hold], live_online)
    return DemandForecast(times=forecast.times, online=online, confidence=conf, step_seconds=forecast.step_seconds)


def level_since(*, times: np.ndarray, online: np.ndarray, level: float, tolerance: float) -> float | None:
    """When online demand last rose to `level` (less `tolerance`) and stayed there to the series' end: the time of
    that run's first sample, or the series' first when it never was below. None when the newest sample is below
    it (the level came after the series) or there is no sample: `apply_live`'s `rose_at`, from history."""
    t = np.asarray(times, dtype=float)
    v = np.asarray(online, dtype=float)
    keep = np.isfinite(t) & np.isfinite(v)
    t, v = t[keep], v[keep]
    if t.size == 0:
        return None
    below = np.flatnonzero(v < level - tolerance)
    if below.size == 0:
        return float(t[0])
    return None if below[-1] == t.size - 1 else float(t[below[-1] + 1])


def apply_schedule(
    *, forecast: DemandForecast, schedule: BusySchedule | None, capacity: int, settings: ForecastSettings
) -> DemandForecast:
    """Declared busy hours take every GPU of the node in every step they touch (confidence 1: the owner said so)."""
    if schedule is None:
        return forecast
    busy = schedule.step_mask(forecast.times, step_seconds=forecast.step_seconds, day_seconds=settings.season_seconds)
    online = forecast.online.copy()
    conf = forecast.confidence.copy()
    online[busy] = capacity
    conf[busy] = 1.0
    return DemandForecast(times=forecast.times, online=online, confidence=conf, step_seconds=forecast.step_seconds)


SCHEDULE_ONLY_CONFIDENCE = 0.4  # confidence of steps outside declared busy hours when no history backs them


def shifted_to(forecast: DemandForecast, now: float) -> DemandForecast:
    """Drop the forecast steps that lie wholly in the past, so step 0 contains `now`."""
    i = int(max(0.0, (now - float(forecast.times[0])) // forecast.step_seconds)) if forecast.times.size else 0
    if i <= 0:
        return forecast
    f = forecast
    return DemandForecast(f.times[i:], f.online[i:], f.confidence[i:], f.step_seconds)


def empty_forecast(now: float, settings: ForecastSettings) -> DemandForecast:
    """A horizon with nothing known (NaN demand, confidence 0)."""
    n = max(1, int(np.ceil(settings.horizon_seconds / settings.step_seconds)))
    return DemandForecast(now + np.arange(n) * settings.step_seconds, np.full(n, np.nan), np.zeros(n),
                          settings.step_seconds)


def forecast_now(
    *,
    fitted: DemandForecast | None,
    capacity: int,
    now: float,
    settings: ForecastSettings,
    live_online: float | None = None,
    schedule: BusySchedule | None = None,
    live_rose_at: float | None = None,
) -> DemandForecast | None:
    """The request-time half of `forecast_node`: a fitted forecast (refreshed in the background) brought to `now`,
    then the live override (`apply_live`; `live_rose_at`: when the live level last rose, if known), the node's own
    window lengths (`apply_runs`) and declared busy hours; clipped to capacity.

    Without a fitted forecast, declared busy hours alone are a forecast: steps outside them count as free with
    confidence 0.4. Without either, there is no forecast (None): the caller marks the node stale.
    """
    if fitted is None:
        if schedule is None:
            return None
        fitted = empty_forecast(now, settings)
    fc = shifted_to(fitted, now)
    fc = apply_live(forecast=fc, live_online=live_online, now=now, settings=settings, capacity=capacity,
                    rose_at=live_rose_at)
    fc = apply_runs(forecast=fc, runs=fitted.runs, live_online=live_online, now=now, settings=settings)
    fc = apply_schedule(forecast=fc, schedule=schedule, capacity=capacity, settings=settings)
    online, conf = fc.online, fc.confidence
    if schedule is not None:
        unknown = ~np.isfinite(online)
        online = np.where(unknown, 0.0, online)
        conf = np.where(unknown, SCHEDULE_ONLY_CONFIDENCE, conf)
    return DemandForecast(times=fc.times, online=np.clip(online, 0, capacity), confidence=conf,
                          step_seconds=fc.step_seconds)


def forecast_node(
    *,
    times: np.ndarray,
    online: np.ndarray,
    capacity: int,
    now: float,
    settings: ForecastSettings,
    live_online: float | None = None,
    schedule: BusySchedule | None = None,
) -> DemandForecast:
    """Seasonal forecast from history, then the live override, then declared busy hours; clipped to capacity.

    The two halves run at different times in the services: `fit_seasonal` + `forecast_demand` when history is
    refreshed, `forecast_now` per request (the extender) or per refresh (the simulator)."""
    fitted = forecast_demand(model=fit_seasonal(times=times, online=online, now=now, settings=settings), start=now)
    fc = forecast_now(fitted=fitted, capacity=capacity, now=now, settings=settings, live_online=live_online,
                      schedule=schedule)
    assert fc is not None  # a fitted forecast always gives one
    return fc
