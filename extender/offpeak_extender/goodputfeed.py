"""Expected-goodput admission in the live extender: a window ledger fed from the store, and the admission the
decisions take (issue #18; the simulator learns the same table from its trace).

Off unless `--goodput-min-efficiency` is given. Until a forecast class has `min_samples` observed windows it
admits nothing by goodput, so a fresh extender decides exactly as without it.
"""

from __future__ import annotations

import logging
import math
import threading

import numpy as np

from offpeak_core.forecast import ForecastSettings
from offpeak_core.goodput import DEFAULT_CLASS_EDGES, GoodputAdmission, GoodputSettings
from offpeak_core.windowledger import LedgerSettings, WindowLedger
from offpeak_extender.store import ClusterStore

log = logging.getLogger(__name__)


DAY_SECONDS = 86400.0


def ledger_settings(forecast: ForecastSettings) -> LedgerSettings:
    """A ledger on the forecaster's clock: bins of one step, a note every 3 steps, followed for a quarter of a day
    (a compressed test day scales all three)."""
    return LedgerSettings(note_seconds=3 * forecast.step_seconds, bin_seconds=forecast.step_seconds,
                          horizon_seconds=max(forecast.step_seconds, forecast.season_seconds / 4))


def class_edges(forecast: ForecastSettings) -> tuple[float, ...]:
    """The goodput classes (minutes of a real day) on the forecaster's day."""
    return tuple(e * forecast.season_seconds / DAY_SECONDS for e in DEFAULT_CLASS_EDGES)


class GoodputFeed:
    """`tick` (the refresher's sample step) observes and notes windows; `admission` is what a request uses."""

    def __init__(self, *, store: ClusterStore, settings: GoodputSettings, ledger: LedgerSettings | None = None
                 ) -> None:
        self.store = store
        self.settings = settings
        self.ledger = WindowLedger(ledger or ledger_settings(store.settings), class_edges(store.settings))
        self.rebuild_seconds = self.ledger.s.note_seconds  # a new table as often as new windows are noted
        self._lock = threading.Lock()
        self._built_at = -math.inf
        self._admissions: dict[int, GoodputAdmission] = {}

    def tick(self, now: float | None = None) -> None:
        """Close the windows online work took back, note new ones, and rebuild the table when it is due."""
        t = self.store.clock() if now is None else now
        usage = self.store.online_snapshot()
        arrays, _ = self.store.node_arrays(list(usage), now=t)
        names = [v.name for v in arrays.views]
        capacity = np.array([usage[n][0] for n in names], dtype=np.int64)
        online = np.array([usage[n][1] for n in names], dtype=np.int64)
        judged = np.array([usage[n][2] for n in names], dtype=np.int64)  # a pooled node's: by its pool's room
        trusted = ~arrays.stale  # a stale node's "window" is fits-now only: nothing the forecast said
        levels = range(1, int(capacity.max(initial=0)) + 1)
        left: dict[int, np.ndarray] = {}
        for lv in levels:  # a window known to end (announced) is judged by that end, not by the table: not noted
            lv_left, certain = arrays.window_left_certain(gpus=lv, now=t)
            left[lv] = np.where(trusted & ~certain, lv_left, 0.0)
        with self._lock:
            self.ledger.observe(now=t, names=names, capacity=capacity, online=judged)
            self.ledger.note(now=t, names=names, capacity=capacity, online=np.maximum(online, judged),
                             left_by_level=left)
            if t - self._built_at >= self.rebuild_seconds:
                self._built_at = t
                survival = self.ledger.survival(now=t)
                self._admissions = {1: GoodputAdmission(survival, self.settings, 1)}
                log.debug("window survival rebuilt: %d observed, %d open", self.ledger.observed(), len(self.ledger))

    def admission(self, members: int = 1) -> GoodputAdmission | None:
        """The admission for a job of `members` pods, or None before the first table."""
        admissions = self._admissions  # swapped whole by `tick`: no lock on the request path
        one = admissions.get(1)
        if one is None:
            return None
        got = admissions.get(members)
        if got is None:
            got = admissions[members] = GoodputAdmission(one.survival, self.settings, members)
        return got

    def counts(self) -> tuple[int, int]:
        """(windows observed to their end or the horizon, windows still open)."""
        with self._lock:
            return self.ledger.observed(), len(self.ledger)
