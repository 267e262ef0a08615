"""What the predictor's error costs: offpeak vs the oracle as the log-normal error sigma grows.

Perfect forecaster (`exact`) so that only runtime knowledge differs; 200 nodes, 3 days by default (about 40 s
per sigma on the dev machine). Prints one line per sigma: harvest relative to the oracle, evictions, lost
GPU-hours, mean and p95 JCT. The predictor's own evaluation (reports/predictor) reports rmse_log ~0.47.
Usage: `.venv/bin/python bench/sim_error_sweep.py [--scenario FILE] [--days D] [--nodes N] [--sigmas 0,0.25,0.8]`.
Each run is the scenario (default: the defaults) with these fields set, built and checked by
`offpeak_sim.scenariofile` as `offpeak simulate` builds it.
"""

from __future__ import annotations

import argparse
import time

from offpeak.errors import UserError
from offpeak_sim import scenariofile
from offpeak_sim.runner import run
from offpeak_sim.scenariofile import Override


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scenario", metavar="FILE", action="append", default=[], help="scenario file(s), layered")
    ap.add_argument("--days", type=float, default=3.0)
    ap.add_argument("--nodes", type=int, default=200)
    ap.add_argument("--sigmas", default="0,0.25,0.47,0.8,1.2")
    ap.add_argument("--forecast", default="exact", choices=("seasonal", "exact"))
    a = ap.parse_args()
    print(f"sim_error_sweep: {a.nodes} nodes, {a.days:g} days, forecast {a.forecast}")
    print(f"{'sigma':>6} {'p90 ratio':>9} {'harvest/oracle':>14} {'evictions':>9} {'oracle ev':>9} "
          f"{'lost GPU-h':>10} {'JCT mean h':>10} {'oracle':>7} {'JCT p95 h':>9} {'oracle':>7} {'s':>5}")
    for sigma in (float(x) for x in a.sigmas.split(",")):
        t0 = time.perf_counter()
        fields = [("workload.days", a.days, "--days"), ("cluster.nodes", a.nodes, "--nodes"),
                  ("forecast.mode", a.forecast, "--forecast"), ("predictor.sigma", sigma, "--sigmas"),
                  ("policies", ["offpeak", "oracle"], "(the sweep's)")]
        try:
            s = scenariofile.load(a.scenario, [Override(path, v, flag) for path, v, flag in fields]).settings
        except UserError as e:
            ap.error(str(e))
        out = run(scenario_settings=s.scenario, policies=list(s.policies), feed_settings=s.feed,
                  engine_settings=s.engine)
        o, r = out.metrics["offpeak"], out.metrics["oracle"]
        print(f"{sigma:6.2f} {out.scenario.p90_ratio:9.2f} {o['harvested_gpu_hours'] / r['harvested_gpu_hours']:14.3f} "
              f"{o['evictions']:9d} {r['evictions']:9d} {o['lost_gpu_seconds'] / 3600:10.0f} "
              f"{o['jct_mean_s'] / 3600:10.2f} {r['jct_mean_s'] / 3600:7.2f} {o['jct_p95_s'] / 3600:9.2f} "
              f"{r['jct_p95_s'] / 3600:7.2f} {time.perf_counter() - t0:5.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
