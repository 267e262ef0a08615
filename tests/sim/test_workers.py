"""Policies simulated in worker processes give the figures one process gives."""

from __future__ import annotations

import pytest

from offpeak_sim import engine, workers
from offpeak_sim.engine import EngineSettings
from offpeak_sim.forecasting import FeedSettings
from offpeak_sim.metrics import summarise
from offpeak_sim.policies import POLICIES

from .conftest import noisy_scenario


def _figures(runs):
    """Every metric but the decision latencies (the machine's), and each run's own arrays."""
    m = summarise(noisy_scenario(days=2, n_jobs=40, arrivals_days=1.0), runs)
    return ({name: {k: v for k, v in row.items() if "latency" not in k} for name, row in m.items()},
            {name: repr((r.finish.tolist(), r.t.occupancy.tolist(), r.placements)) for name, r in runs.items()})
    # (repr: NaN, a job not finished, equals itself only so)


def test_two_workers_give_what_one_gives() -> None:
    sc = noisy_scenario(days=2, n_jobs=40, arrivals_days=1.0)
    pols = [POLICIES[n] for n in ("backfill", "offpeak", "default", "oracle")]
    kw = dict(feed_settings=FeedSettings(), settings=EngineSettings(check_invariants=True))
    one = workers.simulate_policies(sc, pols, workers=1, **kw)
    seen: list[int] = []
    two = workers.simulate_policies(sc, pols, workers=2, progress=seen.append, **kw)
    assert list(two) == [p.name for p in pols]  # the order asked, whatever group ran a policy
    assert two["offpeak"].t.decisions > 0 and two["backfill"].t.evictions > 0  # they did run, and differ
    assert _figures(two) == _figures(one)
    assert seen and seen[-1] == sc.end_minute - sc.start_minute  # progress reached the end


def test_groups_balance_windowed_policies_and_keep_the_order() -> None:
    pols = [POLICIES[n] for n in ("default", "backfill", "user-estimate", "offpeak", "oracle")]
    parts = workers.groups(pols, 2)
    assert sorted(p.name for part in parts for p in part) == sorted(p.name for p in pols)
    weights = [sum(workers.WINDOWED_WEIGHT if p.windowed else 1 for p in part) for part in parts]
    assert max(weights) - min(weights) <= 1  # 8 of weight in two groups of 4
    assert all(part == sorted(part, key=pols.index) for part in parts)
    assert workers.groups(pols, 1) == [pols]
    assert len(workers.groups(pols[:2], 8)) == 2  # never more processes than policies


def test_an_error_in_a_worker_reaches_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    sc = noisy_scenario(days=2, n_jobs=10, arrivals_days=1.0)

    def broken(self, minute, now):
        raise RuntimeError(f"{self.p.name} broke at minute {minute}")
    monkeypatch.setattr(engine.PolicyRun, "schedule", broken)  # the workers fork with it
    with pytest.raises(RuntimeError, match="broke at minute"):
        workers.simulate_policies(sc, [POLICIES["backfill"], POLICIES["oracle"]], workers=2,
                                  feed_settings=FeedSettings(), settings=EngineSettings())
