"""Benchmark: one simulated week on 200 nodes (1,600 GPUs), all five policies, default traces.

Target (issue 8): under 5 minutes wall-clock on the 2-core dev machine. Prints the load and simulate times,
the scheduling decisions made and their latency per policy. Usage: `.venv/bin/python bench/sim_week.py [--days D]
[--nodes N] [--forecast seasonal|exact]`.
"""

from __future__ import annotations

import argparse
import time

from offpeak_sim import paths
from offpeak_sim.forecasting import FeedSettings
from offpeak_sim.policies import DEFAULT_SET, POLICIES
from offpeak_sim.runner import run
from offpeak_sim.scenario import ScenarioSettings

TARGET_S = 300.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--forecast", default="seasonal", choices=("seasonal", "exact"))
    a = ap.parse_args()
    t0 = time.perf_counter()
    out = run(
        scenario_settings=ScenarioSettings(
            online_trace=paths.trace_dir(paths.DEFAULT_ONLINE_TRACE),
            jobs_trace=paths.trace_dir(paths.DEFAULT_JOBS_TRACE),
            nodes=a.nodes,
            days=a.days,
        ),
        policies=[POLICIES[n] for n in DEFAULT_SET],
        feed_settings=FeedSettings(mode=a.forecast),
    )
    wall = time.perf_counter() - t0
    print(f"sim_week: {a.nodes} nodes, {a.days:g} days, {len(out.scenario.jobs)} jobs, forecast {a.forecast}")
    print(f"  load {out.meta['timing_s']['load']:.1f} s, simulate {out.meta['timing_s']['simulate']:.1f} s, "
          f"total {wall:.1f} s (target {TARGET_S:.0f} s: {'ok' if wall < TARGET_S else 'OVER'})")
    for name, m in out.metrics.items():
        print(f"  {name:14s} decisions {m['decisions']:6d}  latency mean {m['decision_latency_mean_us'] or 0:8.0f} us"
              f"  p99 {m['decision_latency_p99_us'] or 0:8.0f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
