"""How much of a pool's real room its forecast vouches for, and how much of what it vouches for was not there.

The simulator's Helios runs (docs/simulator.md, "Pool windows") take minutes a seed and mix the forecast with every
other rule; this scores the pool forecast alone, in seconds, on the Helios VCs' own series (each VC a pool of its
GPUs, `earth_vc_running_gpu_num.csv`), so a forecaster change can be judged before a simulator run.

For every VC and every 10-minute instant of the scored days, and for windows of 1, 4, 12 and 24 hours: the room the
forecast promises for that long (the VC's GPUs less the forecast's peak over the window, `offpeak_core.poolrise` as
the simulator and the extender run it: refitted at each day's start on `--history-days` of history) against the room
there really was (the VC's GPUs less its true peak). Columns, summed over VCs and instants:

- *vouched*: promised room that was there, in % of the room a perfect forecast would promise;
- *over*: promised room that was not there, in % of the promised room (what an offline pod placed on it loses);
- *instants over*: instants whose promise was too high, in % of all.

Usage: `.venv/bin/python bench/pool_forecast.py [--history-days 7] [--from-day 7] [--days 3] [--quantile 0.9]
[--look-back-hours 6]` (the data root from `$OFFPEAK_SHARED_DATA`, else `../shared/data`). Days are counted as the
simulator counts them: from the trace's first, after `offpeak_core.traces.helios` drops its outage day.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from offpeak_core.datapaths import trace_dir
from offpeak_core.poolrise import fit_pool_rise, pool_free, step_maxima
from offpeak_core.traces import helios

STEP_MINUTES = 5  # the forecaster's step (ForecastSettings.step_seconds)
STEPS_PER_DAY = 1440 // STEP_MINUTES
HORIZON_STEPS = STEPS_PER_DAY  # 24 h
WINDOW_HOURS = (1, 4, 12, 24)
EVERY_STEPS = 2  # score every 10 minutes


def score(steps: np.ndarray, capacity: np.ndarray, *, history_days: int, from_day: int, days: int, quantile: float,
          look_back_steps: int) -> dict[int, np.ndarray]:
    """Per window length in hours: [perfect room, promised room, vouched room, over-promised room, instants over,
    instants], summed over VCs and scored instants. `steps`: [VCs, steps] online GPUs per 5-minute step."""
    out = {h: np.zeros(6) for h in WINDOW_HOURS}
    for day in range(from_day, from_day + days):
        lo, hi = (day - history_days) * STEPS_PER_DAY, day * STEPS_PER_DAY
        last = min(hi + STEPS_PER_DAY, steps.shape[1] - HORIZON_STEPS)  # every scored window has its true future
        for v in range(steps.shape[0]):
            x, cap = steps[v], int(capacity[v])
            rise = fit_pool_rise(x[lo:hi], capacity=float(cap), horizon_steps=HORIZON_STEPS,
                                 look_back_steps=look_back_steps, quantile=quantile)
            for t in range(hi, last, EVERY_STEPS):
                free = pool_free(rise.forecast(recent=x[t - look_back_steps : t], live=float(x[t])), cap)
                for h in WINDOW_HOURS:
                    d = h * 60 // STEP_MINUTES
                    promised = float(free[:d].min())
                    true = float(pool_free(x[t : t + d].max(keepdims=True), cap)[0])
                    out[h] += (true, promised, min(promised, true), max(0.0, promised - true), promised > true, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history-days", type=int, default=7, help="days each day's fit reads (default 7, the simulator's)")
    parser.add_argument("--from-day", type=int, default=7, help="first scored day of the trace (default 7)")
    parser.add_argument("--days", type=int, default=3, help="scored days (default 3, as the simulator's runs)")
    parser.add_argument("--quantile", type=float, default=0.9, help="the rises' quantile (default 0.9)")
    parser.add_argument("--look-back-hours", type=float, default=6.0, help="the recent peak's span (default 6)")
    args = parser.parse_args(argv)
    if args.from_day < args.history_days:
        parser.error("--from-day must be at least --history-days (the first day needs its history)")
    running, total = helios.read_vc_gpus(trace_dir("helios-earth-vc-2020-05"))
    capacity = total.mean(axis=0).round().to_numpy(dtype=np.int64)
    keep = capacity > 0
    series = np.clip(running.to_numpy(dtype=float)[:, keep], 0, capacity[keep]).T
    steps = np.array([step_maxima(s, STEP_MINUTES) for s in series])
    if args.from_day + args.days > steps.shape[1] // STEPS_PER_DAY:
        parser.error(f"the trace has {steps.shape[1] // STEPS_PER_DAY} days")
    look_back = max(1, round(args.look_back_hours * 60 / STEP_MINUTES))
    out = score(steps, capacity[keep], history_days=args.history_days, from_day=args.from_day, days=args.days,
                quantile=args.quantile, look_back_steps=look_back)
    print(f"Helios VCs: {int(keep.sum())}, history {args.history_days} d, days {args.from_day}..{args.from_day + args.days - 1}"
          f", p{round(args.quantile * 100)} rises over a {args.look_back_hours:g}-h peak")
    print("| window | vouched (% of perfect) | over (% of promised) | instants over (%) |")
    print("|---|---|---|---|")
    for h, (true, promised, vouched, over, n_over, n) in out.items():
        print(f"| {h} h | {100 * vouched / true:.1f} | {100 * over / max(promised, 1.0):.1f} | {100 * n_over / n:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
