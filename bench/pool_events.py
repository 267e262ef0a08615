"""What pool windows cost the extender's informer: a pod event in a pool of N nodes rebuilds all N views.

One store per case, N nodes of 8 GPUs with a week of noisy online history on 5-minute steps, all in one pool
(`--pool-label`) or in none; then pod events (an offline pod started, one node after the other, as the informer
applies them) and a refit. Prints ms per pod event and per refit, pools on against pools off in the same run (the
ratio is the figure to read on a noisy machine). Pooled nodes with the same free GPUs share their windows
(`offpeak_extender.pools.PooledViews`), so the cost grows with N but stays small.

    .venv/bin/python bench/pool_events.py [--nodes 10 100 500] [--events 40]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from offpeak_core.forecast import ForecastSettings
from offpeak_extender.pools import PoolSettings
from offpeak_extender.store import ClusterStore

LABEL = "bench.offpeak.io/pool"
SETTINGS = ForecastSettings(step_seconds=300.0, history_seconds=7 * 86400.0)
NOW = 1_000_000 * 300.0


def node(name: str) -> dict:
    return {"metadata": {"name": name, "labels": {"offpeak.io/gpu-type": "A100-SXM4-40GB", LABEL: "web"}},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}}}


def pod(name: str, on: str) -> dict:
    return {"metadata": {"name": name, "namespace": "ml", "uid": name, "labels": {"offpeak.io/workload": "offline"}},
            "spec": {"nodeName": on, "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running", "startTime": "2026-11-25T04:00:00Z"}}


def history(n: int, rng: np.random.Generator) -> dict:
    t = np.arange(NOW - SETTINGS.history_seconds, NOW, SETTINGS.step_seconds)
    return {f"n{i}": (t, rng.integers(0, 8, t.size).astype(float)) for i in range(n)}


def case(n: int, events: int, pools: PoolSettings | None) -> tuple[float, float]:
    """(ms per pod event, ms per refit) for `n` nodes."""
    rng = np.random.default_rng(0)
    store = ClusterStore(settings=SETTINGS, clock=lambda: NOW, stale_after_seconds=180.0, pools=pools)
    store.replace_all(nodes=[node(f"n{i}") for i in range(n)], pods=[])
    store.set_history(history(n, rng), now=NOW)
    started = time.perf_counter()
    for j in range(events):
        store.upsert_pod(pod(f"p{j}", f"n{j % n}"))
    per_event = (time.perf_counter() - started) / events
    refit_history = history(n, rng)
    started = time.perf_counter()
    store.set_history(refit_history, now=NOW)
    return per_event * 1e3, (time.perf_counter() - started) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[10, 100, 500])
    ap.add_argument("--events", type=int, default=40)
    args = ap.parse_args()
    print(f"{'nodes':>6} | {'event off':>9} | {'event on':>9} | {'ratio':>6} | {'refit off':>9} | {'refit on':>9}")
    for n in args.nodes:
        off = case(n, args.events, None)
        on = case(n, args.events, PoolSettings(label=LABEL))
        print(f"{n:6d} | {off[0]:7.2f}ms | {on[0]:7.2f}ms | {on[0] / off[0]:5.1f}x | {off[1]:7.0f}ms | {on[1]:7.0f}ms",
              flush=True)


if __name__ == "__main__":
    main()
