"""Expected-goodput admission: is a short idle window worth it for a checkpointing job?

A forecast window's length is one number; how long the GPUs really stay free is a distribution. `WindowSurvival`
is that distribution, learnt from experience: for windows the forecast gave a similar length (a *class*, by the
forecast's seconds left), the share that really stayed idle at least t seconds. `expected_goodput` turns it into
the expected useful work of a job (work saved at checkpoints, or the whole job when it finishes) against the
expected GPU time it holds; `min_window` gives the shortest forecast class where that ratio clears a threshold,
which the decisions use as the window a checkpointing job needs. Pure: numpy only, no clock, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

# Lower edges (seconds) of the forecast classes; the last class also takes open-ended windows (inf).
DEFAULT_CLASS_EDGES: tuple[float, ...] = tuple(
    m * 60.0 for m in (0, 10, 20, 30, 45, 60, 90, 120, 180, 240, 360, 480, 720, 960, 1440)
)


@dataclass(frozen=True)
class GoodputSettings:
    """When a checkpointing job may take a window shorter than its whole run.

    `min_efficiency`: expected useful work / expected GPU time held (the rest is lost at the eviction or spent
    starting) must reach this; 0.8 = lose at most a fifth of the GPU time in expectation.
    `startup_seconds`: time from start to the first step (image, restore from checkpoint); no work is saved in it.
    `min_samples`: a forecast class is trusted only after this many observed windows (else it admits nothing).
    """

    min_efficiency: float = 0.8
    startup_seconds: float = 60.0
    min_samples: int = 30

    def __post_init__(self) -> None:
        if not 0.0 < self.min_efficiency <= 1.0:
            raise ValueError(f"min_efficiency must be in (0, 1], got {self.min_efficiency}")
        if self.startup_seconds < 0 or self.min_samples < 1:
            raise ValueError("startup_seconds must be >= 0 and min_samples >= 1")


@dataclass(frozen=True, eq=False)
class WindowSurvival:
    """Observed idle-window lengths per forecast class (a Kaplan-Meier table).

    `closed[c, k]`: windows of class c seen closing after [k, k+1) × `bin_seconds`; the last column counts those
    that outlasted the observation horizon (`bins × bin_seconds`). `open_at[c, k]` (optional): windows still idle
    when last looked at, aged [k, k+1) bins (right-censored, so recent long windows are not left out). Read
    conservatively: a window closing in bin k counts as having lasted k bins; where fewer than `min_at_risk`
    windows were followed that far, survival is taken as 0 (no evidence, no admission).
    """

    edges: tuple[float, ...]
    bin_seconds: float
    closed: np.ndarray  # int [classes, bins + 1]
    open_at: np.ndarray | None = None  # int [classes, bins + 1]
    min_at_risk: int = 10
    _surv: np.ndarray = field(init=False, repr=False)
    _n: np.ndarray = field(init=False, repr=False)
    _memo: dict[tuple[float, ...], float] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        d = np.asarray(self.closed, dtype=float)
        if d.ndim != 2 or d.shape[0] != len(self.edges) or d.shape[1] < 2:
            raise ValueError("closed must be [len(edges), bins + 1]")
        if self.bin_seconds <= 0 or list(self.edges) != sorted(self.edges) or self.edges[0] != 0.0:
            raise ValueError("bin_seconds must be > 0 and edges ascending from 0")
        c = np.zeros_like(d) if self.open_at is None else np.asarray(self.open_at, dtype=float)
        if c.shape != d.shape:
            raise ValueError("open_at must have the shape of closed")
        bins = d.shape[1] - 1
        def rev(a: np.ndarray) -> np.ndarray:  # [c, k] = sum over j >= k
            return np.cumsum(a[:, ::-1], axis=1)[:, ::-1]

        # at risk of closing in bin j: known to have lasted >= j bins, or still open at an age beyond bin j
        at_risk = rev(d) + np.concatenate([rev(c)[:, 1:], np.zeros((d.shape[0], 1))], axis=1)
        hazard = np.divide(d[:, :bins], at_risk[:, :bins], out=np.ones_like(d[:, :bins]), where=at_risk[:, :bins] > 0)
        surv = np.concatenate([np.ones((d.shape[0], 1)), np.cumprod(1.0 - hazard, axis=1)], axis=1)
        surv[at_risk < self.min_at_risk] = 0.0  # not followed that far often enough
        surv = np.minimum.accumulate(surv, axis=1)
        object.__setattr__(self, "_surv", surv)
        object.__setattr__(self, "_n", d.sum(axis=1) + c.sum(axis=1))
        object.__setattr__(self, "_memo", {})

    @property
    def horizon_seconds(self) -> float:
        return float((self.closed.shape[1] - 1) * self.bin_seconds)

    def klass(self, left: float) -> int:
        """Forecast class of a window with `left` seconds to go (inf: open-ended)."""
        return max(0, int(np.searchsorted(self.edges, left, side="right")) - 1)

    def samples(self) -> np.ndarray:
        """Observed windows per class (closed or still open)."""
        return self._n

    def curve(self, t: np.ndarray) -> np.ndarray:
        """P(idle for at least t seconds) for every class: [classes, len(t)] (0 where a class has no evidence)."""
        k = np.minimum(np.ceil(np.asarray(t, dtype=float) / self.bin_seconds - 1e-9), self.closed.shape[1] - 1)
        return self._surv[:, np.maximum(k, 0).astype(int)]


def survival_from_observations(
    *,
    forecast_left: Sequence[float] | np.ndarray,
    lasted: Sequence[float] | np.ndarray,
    outlasted: Sequence[bool] | np.ndarray,
    edges: tuple[float, ...] = DEFAULT_CLASS_EDGES,
    bin_seconds: float = 300.0,
    horizon_seconds: float = 86400.0,
    min_at_risk: int = 10,
) -> WindowSurvival:
    """Build a survival table from observed windows: what the forecast said, how long they lasted, and whether
    they were still idle when observation stopped (`outlasted`, counted beyond the horizon)."""
    fl = np.asarray(forecast_left, dtype=float)
    la = np.asarray(lasted, dtype=float)
    out = np.asarray(outlasted, dtype=bool)
    bins = int(math.ceil(horizon_seconds / bin_seconds))
    counts = np.zeros((len(edges), bins + 1), dtype=np.int64)
    add_observations(counts, edges=edges, bin_seconds=bin_seconds, forecast_left=fl, lasted=la, outlasted=out)
    return WindowSurvival(edges, bin_seconds, counts, min_at_risk=min_at_risk)


def add_observations(
    counts: np.ndarray,
    *,
    edges: tuple[float, ...],
    bin_seconds: float,
    forecast_left: np.ndarray,
    lasted: np.ndarray,
    outlasted: np.ndarray,
) -> None:
    """Add observed windows to a `counts` table in place (for callers that accumulate over time)."""
    bins = counts.shape[1] - 1
    c = np.maximum(np.searchsorted(np.asarray(edges), forecast_left, side="right") - 1, 0)
    k = np.where(outlasted, bins, np.minimum(np.floor(np.maximum(lasted, 0.0) / bin_seconds), bins)).astype(int)
    np.add.at(counts, (c, k), 1)


@dataclass(frozen=True)
class Goodput:
    """Expected outcome of starting a job in a window of one forecast class (seconds, per GPU)."""

    useful: float  # work kept: saved at checkpoints, or the whole run when it finishes
    held: float  # GPU time held until it finishes or is evicted
    finish: float  # probability it finishes before the window closes

    @property
    def efficiency(self) -> float:
        return self.useful / self.held if self.held > 0 else 0.0


def _expected(
    *, runtime: float, interval: float, startup: float, members: int, sv: WindowSurvival, until: float = math.inf
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(useful, held, finish) for every forecast class at once; with `until`, the window is known to close then at
    the latest (survival cut to 0 from `until` on: what was not saved by then is lost)."""
    # checkpoints at startup + interval, + 2 intervals, ...; the last "checkpoint" is the end of the run
    if interval > 0 and math.isfinite(interval):
        n = int(math.ceil(runtime / interval))
        done = np.minimum(np.arange(1, n + 1) * interval, runtime)
    else:
        done = np.array([runtime])
    gain = np.diff(np.concatenate(([0.0], done)))
    s_ck = sv.curve(startup + done) ** members  # [classes, checkpoints]
    s_ck[:, startup + done > until] = 0.0
    useful = s_ck @ gain
    finish = s_ck[:, -1]
    # held = integral of the gang's survival from 0 to startup + runtime (step function, bin by bin)
    end = min(startup + runtime, until)
    b = sv.bin_seconds
    horizon = sv.horizon_seconds
    upto = min(end, horizon)
    nb = int(math.ceil(upto / b)) if upto > 0 else 0
    if nb:
        right = np.minimum(np.arange(1, nb + 1) * b, upto)
        widths = np.diff(np.concatenate(([0.0], right)))
        held = (sv.curve(right) ** members) @ widths
    else:
        held = np.zeros(len(sv.edges))
    if end > horizon:
        held = held + (sv.curve(np.array([end]))[:, 0] ** members) * (end - horizon)
    return useful, held, finish


def expected_goodput(
    *, survival: WindowSurvival, left: float, runtime: float, checkpoint_interval: float | None,
    startup_seconds: float = 0.0, members: int = 1,
) -> Goodput:
    """Expected useful work and GPU time held for a job of `runtime` seconds started in a window forecast to last
    `left` more seconds, checkpointing every `checkpoint_interval` (None: never), as a gang of `members` pods
    each in such a window (evicted when any member is; windows taken as independent)."""
    interval = checkpoint_interval if checkpoint_interval and checkpoint_interval > 0 else math.inf
    u, h, f = _expected(runtime=runtime, interval=interval, startup=startup_seconds,
                        members=max(1, members), sv=survival)
    c = survival.klass(left)
    return Goodput(float(u[c]), float(h[c]), float(f[c]))


def _quantise(seconds: float) -> float:
    """Round a runtime up to the next 5 % step (memo key; a longer runtime is the cautious side)."""
    if seconds <= 60.0:
        return 60.0
    return math.exp(math.ceil(math.log(seconds) / math.log(1.05)) * math.log(1.05))


def min_window(
    *, survival: WindowSurvival, runtime: float, checkpoint_interval: float | None, settings: GoodputSettings,
    members: int = 1,
) -> float:
    """Shortest forecast window (seconds left) in which a checkpointing job's expected goodput clears
    `settings.min_efficiency`: the lower edge of the first trusted class that does; inf when none does.

    Classes with fewer than `settings.min_samples` observations are not trusted. A job that does not checkpoint
    (`checkpoint_interval` None or 0) gets inf: it still needs a window for its whole run.
    """
    if not checkpoint_interval or checkpoint_interval <= 0 or runtime <= 0:
        return math.inf
    r = _quantise(runtime)
    key = (r, float(checkpoint_interval), settings.startup_seconds, members, settings.min_efficiency,
           settings.min_samples)
    hit = survival._memo.get(key)
    if hit is not None:
        return hit
    u, h, _ = _expected(runtime=r, interval=float(checkpoint_interval),
                        startup=settings.startup_seconds, members=max(1, members), sv=survival)
    ok = (survival.samples() >= settings.min_samples) & (u > 0) & (u >= settings.min_efficiency * h)
    idx = np.flatnonzero(ok)
    out = float(survival.edges[idx[0]]) if idx.size else math.inf
    survival._memo[key] = out
    return out


def certain_window_ok(
    *, survival: WindowSurvival, left: float, runtime: float, checkpoint_interval: float | None,
    settings: GoodputSettings, members: int = 1,
) -> bool:
    """Whether a checkpointing job's expected goodput clears `settings.min_efficiency` in a window known to close
    within `left` seconds (`IdleWindow.end_certain`): its forecast class's survival up to `left`, none after, so a
    window that often outlasted its forecast does not count as likely to outlast this one. Memoised on `left` in whole
    minutes (rounded down) and the runtime rounded up by `min_window`'s steps. An untrusted class, or a job that does
    not checkpoint, gets False.
    """
    if not checkpoint_interval or checkpoint_interval <= 0 or runtime <= 0 or left < 60.0:
        return False
    r = _quantise(runtime)
    until = math.floor(left / 60.0) * 60.0
    key = (r, float(checkpoint_interval), settings.startup_seconds, members, settings.min_efficiency,
           settings.min_samples, until)
    hit = survival._memo.get(key)
    if hit is not None:
        return bool(hit)
    c = survival.klass(until)
    ok = False
    if survival.samples()[c] >= settings.min_samples:
        u, h, _ = _expected(runtime=r, interval=float(checkpoint_interval), startup=settings.startup_seconds,
                            members=max(1, members), sv=survival, until=until)
        ok = bool(u[c] > 0 and u[c] >= settings.min_efficiency * h[c])
    survival._memo[key] = float(ok)
    return ok


@dataclass(frozen=True)
class GoodputAdmission:
    """What the decisions need to admit checkpointing pods by expected goodput: the survival table, the
    settings, and how many pods the job runs as (a gang is evicted when any member is)."""

    survival: WindowSurvival
    settings: GoodputSettings = GoodputSettings()
    members: int = 1
