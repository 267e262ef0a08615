"""Walk-forward evaluation of the idle-window forecaster on real traces: how often is a forecast window cut short,
and by how much?

At each evaluation time t the forecaster sees only data before t, forecasts the node's free GPUs, and for each
GPU level k reads off the forecast window end (first step with fewer than k free). The truth is the first minute
after t with fewer than k GPUs actually free. Only forecast windows of at least 30 minutes count (shorter ones
admit no real job). A window is *cut short* when the truth ends before the forecast; a job sized to fill the
window (runtime = window / (1 + margin)) is *hit* when the truth ends before that job would. `missed_free_ratio`
is the share of usable (>= 30 min) true windows that the forecast did not offer: the price of caution.

    python tools/evaluate_windows.py --out reports/windows/

Data: the data root of `offpeak_core.datapaths` (`$OFFPEAK_SHARED_DATA`, `<repo>/../shared/data`, or the sample).
- Helios Earth (`traces/helios-earth-vc-2020-05`): 16 virtual clusters, GPUs allocated per minute, 24 days (23 once
  the replay's outage day is dropped, `offpeak_core.traces.helios`).
  Demand = running GPUs, capacity = VC GPUs.
- Alibaba GenAI serving (`traces/alibaba-genai-serving-v2026`): per-pod GPU utilisation for ~23 h. Pods are grouped
  by id into 8-GPU "nodes"; a GPU is online-busy by offpeak's one rule (`offpeak_core.traces.alibaba`: duty cycle
  >= 10 %, held 5 minutes either side; until this version: >= 10 %, no hold). With less than
  one day of history the seasonal bins are empty, so this exercises the forecaster's fallback (overall quantile).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from offpeak_core.datapaths import data_root
from offpeak_core.decisions import DEFAULT_MARGIN
from offpeak_core.traces import alibaba, helios
from offpeak_core.forecast import ForecastSettings, apply_live, fit_seasonal, forecast_demand

MINUTE = 60.0
DAY = 86400.0


@dataclass(frozen=True)
class Series:
    """One node's online demand over time (regular minutes; NaN = missing) and its capacity."""

    name: str
    times: np.ndarray
    online: np.ndarray
    capacity: np.ndarray


@dataclass(frozen=True)
class Forecaster:
    name: str
    quantile: float = 0.9
    live: bool = False
    persistence: bool = False  # naive baseline: what is free now stays free


@dataclass
class LevelStats:
    windows: int = 0
    cut_short: int = 0
    job_hit: int = 0
    shortfall_minutes: list[float] = field(default_factory=list)
    forecast_minutes: list[float] = field(default_factory=list)
    actual_minutes: list[float] = field(default_factory=list)
    no_window_but_free: int = 0

    def summary(self) -> dict[str, float | int | None]:
        sf = np.array(self.shortfall_minutes) if self.shortfall_minutes else np.array([np.nan])
        fm = np.array(self.forecast_minutes) if self.forecast_minutes else np.array([np.nan])
        am = np.array(self.actual_minutes) if self.actual_minutes else np.array([np.nan])

        def q(a: np.ndarray, p: float) -> float | None:
            v = float(np.nanquantile(a, p)) if np.isfinite(a).any() else float("nan")
            return None if math.isnan(v) else round(v, 1)

        return {
            "windows": self.windows,
            "cut_short_ratio": round(self.cut_short / self.windows, 4) if self.windows else None,
            "job_hit_ratio": round(self.job_hit / self.windows, 4) if self.windows else None,
            "shortfall_minutes_p50": q(sf, 0.5),
            "shortfall_minutes_p90": q(sf, 0.9),
            "forecast_window_minutes_p50": q(fm, 0.5),
            "actual_window_minutes_p50": q(am, 0.5),
            "missed_free_ratio": round(self.no_window_but_free / (self.windows + self.no_window_but_free), 4)
            if (self.windows + self.no_window_but_free) else None,
        }


def actual_end(*, free: np.ndarray, times: np.ndarray, i: int, k: int, horizon_end: float) -> float | None:
    """Time of the first sample at/after index i with fewer than k free; None if none before the horizon."""
    stop = int(np.searchsorted(times, horizon_end))
    below = np.flatnonzero(free[i:stop] < k)
    return float(times[i + below[0]]) if below.size else None


def forecast_end(*, free_fc: np.ndarray, fc_times: np.ndarray, k: int, step: float) -> float | None:
    below = np.flatnonzero(free_fc < k)
    return float(fc_times[below[0]]) if below.size else None


def resample_max(times: np.ndarray, values: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Max per `step` bin (NaN-aware; all-NaN bins stay NaN): cautious demand at the forecaster's resolution."""
    b = np.floor(times / step).astype(np.int64)
    uniq, inv = np.unique(b, return_inverse=True)
    out = np.full(uniq.size, -np.inf)
    np.fmax.at(out, inv, np.where(np.isfinite(values), values, -np.inf))
    out[np.isinf(out)] = np.nan
    return uniq * step, out


def evaluate_series(
    *, series: Series, forecasters: list[Forecaster], settings: ForecastSettings, levels: list[int],
    eval_every: float, warmup: float, margin: float, min_window: float = 1800.0,
) -> dict[str, dict[int, LevelStats]]:
    stats = {f.name: {k: LevelStats() for k in levels} for f in forecasters}
    t_all, on_all, cap_all = series.times, series.online, series.capacity
    hist_t, hist_v = resample_max(t_all, on_all, settings.step_seconds)
    free_actual = np.where(np.isfinite(on_all), cap_all - on_all, cap_all)  # missing online sample: nothing online
    start = t_all[0] + warmup
    for t in np.arange(start, t_all[-1] - eval_every, eval_every):
        i = int(np.searchsorted(t_all, t))
        if i >= t_all.size:
            break
        cap = int(cap_all[i])
        horizon_end = min(t + settings.horizon_seconds, float(t_all[-1]))
        live = float(on_all[i]) if np.isfinite(on_all[i]) else None
        past = hist_t + settings.step_seconds <= t
        model = fit_seasonal(times=hist_t[past], online=hist_v[past], now=t, settings=settings)
        for f in forecasters:
            if f.persistence:
                fc_times = np.array([t, horizon_end])
                online = np.array([live if live is not None else cap, live if live is not None else cap])
            else:
                s = settings if f.quantile == settings.quantile else _with_quantile(settings, f.quantile)
                m = model if s is settings else fit_seasonal(times=hist_t[past], online=hist_v[past], now=t,
                                                             settings=s)
                fc = forecast_demand(model=m, start=t)
                if f.live:
                    fc = apply_live(forecast=fc, live_online=live, now=t, settings=s, capacity=cap)
                fc_times, online = fc.times, fc.online
            keep = fc_times < horizon_end
            online_int = np.where(np.isfinite(online[keep]), np.ceil(online[keep] - 1e-9), cap)
            free_fc = cap - online_int
            for k in levels:
                if k > cap:
                    continue
                st = stats[f.name][k]
                if free_actual[i] < k:
                    continue  # nothing to place now: not a window in truth either
                a_end = actual_end(free=free_actual, times=t_all, i=i, k=k, horizon_end=horizon_end)
                a_end = horizon_end if a_end is None else a_end
                f_end = None
                if free_fc.size and free_fc[0] >= k:
                    f_end = forecast_end(free_fc=free_fc, fc_times=fc_times[keep], k=k, step=settings.step_seconds)
                    f_end = horizon_end if f_end is None else f_end
                if f_end is None or f_end - t < min_window:
                    if a_end - t >= min_window:
                        st.no_window_but_free += 1  # a usable window in truth that the forecast did not offer
                    continue
                st.windows += 1
                st.forecast_minutes.append((f_end - t) / MINUTE)
                st.actual_minutes.append((a_end - t) / MINUTE)
                if a_end < f_end:
                    st.cut_short += 1
                    st.shortfall_minutes.append((f_end - a_end) / MINUTE)
                if a_end < t + (f_end - t) / (1.0 + margin):
                    st.job_hit += 1
    return stats


def _with_quantile(s: ForecastSettings, q: float) -> ForecastSettings:
    d = asdict(s)
    d["quantile"] = q
    return ForecastSettings(**d)


# -- trace loaders -------------------------------------------------------------------------------------------------
def load_helios(data: Path) -> Iterator[Series]:
    folder = data / "traces" / helios.TRACE
    running, total = helios.read_vc_gpus(folder)
    # Local wall clock (UTC+8 presumably); treated as the cluster's own clock, which is what seasonality needs.
    times = running.index.to_numpy().astype("datetime64[s]").astype(np.int64).astype(float)
    for vc in running.columns:
        cap = total[vc].to_numpy(dtype=float)
        if np.nanmax(cap) <= 0:
            continue
        yield Series(f"helios/{vc}", times, running[vc].to_numpy(dtype=float), cap)


def load_alibaba(data: Path, *, gpus_per_node: int = 8) -> Iterator[Series]:
    """Pods grouped by id into `gpus_per_node`-GPU "nodes"; a GPU is online-busy by offpeak's one busy rule."""
    df = alibaba.read_duty_cycle(data / "traces" / alibaba.TRACE / alibaba.FILE)
    duty = alibaba.duty_matrix(df)
    busy = alibaba.busy_matrix(duty)
    present = np.isfinite(duty.to_numpy())
    times = (float(df["timestamp_anon"].min()) // MINUTE + duty.index.to_numpy()).astype(float) * MINUTE
    for n, first in enumerate(range(0, duty.shape[1] - gpus_per_node + 1, gpus_per_node)):
        cols = slice(first, first + gpus_per_node)
        load = busy[:, cols].sum(axis=1).astype(float)
        load[~present[:, cols].any(axis=1)] = np.nan  # the whole node unobserved: missing data
        yield Series(f"alibaba-genai/node{n:02d}", times, load, np.full(times.size, float(gpus_per_node)))


# -- report -------------------------------------------------------------------------------------------------------
def run_dataset(
    *, name: str, series: list[Series], forecasters: list[Forecaster], settings: ForecastSettings,
    levels: list[int], eval_every: float, warmup: float, margin: float, min_window: float = 1800.0,
) -> tuple[dict[str, object], dict[str, dict[int, LevelStats]]]:
    merged = {f.name: {k: LevelStats() for k in levels} for f in forecasters}
    for s in series:
        st = evaluate_series(series=s, forecasters=forecasters, settings=settings, levels=levels,
                             eval_every=eval_every, warmup=warmup, margin=margin, min_window=min_window)
        for fname, by_k in st.items():
            for k, ls in by_k.items():
                m = merged[fname][k]
                m.windows += ls.windows
                m.cut_short += ls.cut_short
                m.job_hit += ls.job_hit
                m.no_window_but_free += ls.no_window_but_free
                m.shortfall_minutes += ls.shortfall_minutes
                m.forecast_minutes += ls.forecast_minutes
                m.actual_minutes += ls.actual_minutes
    result: dict[str, object] = {
        "dataset": name,
        "nodes": len(series),
        "settings": {**asdict(settings), "eval_every_seconds": eval_every, "warmup_seconds": warmup,
                     "margin": margin, "levels_gpus": levels, "min_window_seconds": min_window},
        "forecasters": {f.name: {str(k): merged[f.name][k].summary() for k in levels} for f in forecasters},
    }
    return result, merged


def plot(path: Path, title: str, merged: dict[str, dict[int, LevelStats]], level: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for fname, by_k in merged.items():
        ls = by_k[level]
        if ls.shortfall_minutes:
            sf = np.sort(ls.shortfall_minutes)
            # fraction of all forecast windows cut short by more than x minutes
            frac = 1.0 - np.arange(sf.size) / sf.size
            axes[0].step(sf, frac * ls.cut_short / max(ls.windows, 1), where="post", label=fname)
        if ls.forecast_minutes:
            axes[1].scatter(ls.forecast_minutes, ls.actual_minutes, s=4, alpha=0.3, label=fname)
    axes[0].set_xscale("symlog", linthresh=10)
    axes[0].set_xlabel("window cut short by more than (minutes)")
    axes[0].set_ylabel("fraction of forecast windows")
    axes[0].set_title(f"{title}: cut-short windows ({level} GPU(s))")
    axes[0].legend(fontsize=8)
    axes[1].set_xlabel("forecast window (minutes)")
    axes[1].set_ylabel("actual window (minutes)")
    lim = max([1.0] + [max(b[level].forecast_minutes + b[level].actual_minutes or [1.0]) for b in merged.values()])
    axes[1].plot([0, lim], [0, lim], "k--", lw=0.8)
    axes[1].set_title("forecast vs actual window length")
    axes[1].legend(fontsize=8, markerscale=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m offpeak_extender.evaluate_windows", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("reports/windows"))
    ap.add_argument("--data", type=Path, default=None, help="shared data dir (default $OFFPEAK_SHARED_DATA)")
    ap.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    ap.add_argument("--quick", action="store_true", help="fewer evaluation points (smoke test)")
    args = ap.parse_args(argv)
    data = args.data or data_root()
    if not (data / "traces").is_dir():
        print(f"error: no traces under {data} (set OFFPEAK_SHARED_DATA)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    forecasters = [
        Forecaster("persistence (fits-now)", persistence=True),
        Forecaster("seasonal p50", quantile=0.5),
        Forecaster("seasonal p75", quantile=0.75),
        Forecaster("seasonal p90", quantile=0.9),
        Forecaster("seasonal p97", quantile=0.97),
        Forecaster("seasonal p90 + live", quantile=0.9, live=True),
    ]
    started = time.time()
    datasets: list[dict[str, object]] = []
    report: dict[str, object] = {"generated_by": "python -m offpeak_extender.evaluate_windows", "datasets": datasets}
    every = 4 if args.quick else 1

    helios = list(load_helios(data))
    hs = ForecastSettings(season_seconds=DAY, step_seconds=300.0, horizon_seconds=DAY, history_seconds=14 * DAY,
                          quantile=0.9, min_samples=3)
    res, merged = run_dataset(name="helios-earth-vc-2020-05 (May 1-24, 16 VCs)", series=helios,
                              forecasters=forecasters, settings=hs, levels=[1, 8, 32], eval_every=3600.0 * every,
                              warmup=7 * DAY, margin=args.margin)
    datasets.append(res)
    plot(args.out / "helios_cut_short.png", "Helios Earth VCs", merged, level=8)

    ali = list(load_alibaba(data))
    as_ = ForecastSettings(season_seconds=DAY, step_seconds=300.0, horizon_seconds=6 * 3600.0,
                           history_seconds=DAY, quantile=0.9, min_samples=3)
    res, merged = run_dataset(name="alibaba-genai-serving-v2026 (23 h, 8-GPU groups of pods)", series=ali,
                              forecasters=forecasters, settings=as_, levels=[1, 2, 4], eval_every=900.0 * every,
                              warmup=6 * 3600.0, margin=args.margin)
    datasets.append(res)
    plot(args.out / "alibaba_cut_short.png", "Alibaba GenAI serving", merged, level=2)

    report["seconds"] = round(time.time() - started, 1)
    (args.out / "windows_eval.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
