"""Forecast state in the store: each node's fitted forecast and latest samples, when it was fitted, whether the
last refresh failed; and the in-memory history used without Prometheus.

`fit_history` is the refresher's half of the forecast (`fit_seasonal` + `forecast_demand`), pure and run outside the
store's lock; `ForecastState` keeps what it gave. Not thread-safe: the store holds its lock around every call.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from offpeak_core.forecast import DemandForecast, ForecastSettings, fit_seasonal, forecast_demand
from offpeak_extender.views import recent_samples, series_is_current

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fitted:
    """What one refresh gave: per node its fitted forecast and its latest samples (`recent_samples`)."""

    forecasts: dict[str, DemandForecast] = field(default_factory=dict)
    recent: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)


def fit_history(history: Mapping[str, tuple[np.ndarray, np.ndarray]], *, now: float, settings: ForecastSettings,
                max_age_seconds: float) -> Fitted:
    """Fit the seasonal model of every node whose series is current (one that stopped reporting is unknown: stale,
    fits-now; not idle), its forecast from `now`, and its samples of the last two holds (`apply_live`'s rise)."""
    out = Fitted()
    ended: list[str] = []
    for name, (times, online) in history.items():
        if not series_is_current(times=times, online=online, now=now, max_age_seconds=max_age_seconds):
            ended.append(name)
            continue
        model = fit_seasonal(times=times, online=online, now=now, settings=settings)
        if model.n_samples:
            out.forecasts[name] = forecast_demand(model=model, start=now)
            out.recent[name] = recent_samples(times, online, since=now - 2 * settings.hold_seconds)
    if ended:
        log.info("%d node(s) without recent demand samples, treated as stale: %s", len(ended),
                 ", ".join(sorted(ended)[:10]))
    return out


class ForecastState:
    """The forecasts of the last refresh, its time and failure, a version bumped whenever they change."""

    def __init__(self, settings: ForecastSettings, *, stale_after_seconds: float) -> None:
        self.settings = settings
        self.stale_after_seconds = stale_after_seconds
        self.fitted = Fitted()
        self.at: float | None = None
        self.error: str | None = None
        self.version = 0
        self._samples: dict[str, deque[tuple[float, float]]] = {}
        self._max_samples = int(settings.history_seconds / settings.step_seconds) + 1

    def stale(self, now: float) -> bool:
        """Forecasts are missing, failed to refresh, or older than `stale_after_seconds`."""
        return self.error is not None or self.at is None or now - self.at > self.stale_after_seconds

    def publish(self, fitted: Fitted, at: float) -> None:
        self.fitted = fitted
        self.at = at
        self.error = None
        self.version += 1

    def failed(self, error: str) -> None:
        self.error = error
        self.version += 1

    def record(self, online: Iterable[tuple[str, int]], at: float) -> None:
        """Append each node's online GPUs now to the in-memory history (used without Prometheus)."""
        for name, gpus in online:
            self._samples.setdefault(name, deque(maxlen=self._max_samples)).append((at, float(gpus)))

    def samples(self) -> dict[str, list[tuple[float, float]]]:
        return {n: list(q) for n, q in self._samples.items()}
