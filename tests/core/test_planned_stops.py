"""Planned stops as the evictor plans them (`evictions.plan_yields`) and the window end they are judged against
(`windows.held_window_end`): pure, no cluster."""

from __future__ import annotations

import numpy as np

from offpeak_core.evictions import REASON_YIELD, plan_yields
from offpeak_core.forecast import DemandForecast
from offpeak_core.model import OfflinePod
from offpeak_core.windows import held_window_end, room_window

NOW = 10_000.0


def forecast(online: list[float], step: float = 300.0, start: float = NOW) -> DemandForecast:
    times = start + step * np.arange(len(online))
    return DemandForecast(times, np.array(online, dtype=float), np.ones(len(online)), step)


def test_the_held_window_ends_when_online_demand_leaves_too_few_gpus_for_the_offline_pods() -> None:
    fc = forecast([1, 1, 2, 3, 5, 2])  # 8 GPUs; 4 held by offline pods: 8 - 5 < 4 at the fifth step
    assert held_window_end(forecast=fc, capacity=8, held=4, now=NOW) == NOW + 4 * 300
    assert held_window_end(forecast=fc, capacity=8, held=6, now=NOW) == NOW + 3 * 300  # more held, earlier
    assert held_window_end(forecast=fc, capacity=8, held=3, now=NOW) is None  # never within the horizon
    assert held_window_end(forecast=fc, capacity=8, held=0, now=NOW) is None  # nothing held
    unknown = forecast([1, float("nan"), 1])
    assert held_window_end(forecast=unknown, capacity=8, held=1, now=NOW) == NOW + 300  # unknown counts as busy
    # a step already under way counts from now; steps over are not looked at
    assert held_window_end(forecast=forecast([8, 1, 8]), capacity=8, held=1, now=NOW + 350) == NOW + 600


def test_a_held_window_end_is_known_where_the_bound_leaves_too_few_gpus_then() -> None:
    times = NOW + 300.0 * np.arange(4)
    room, bound = np.array([8, 8, 2, 8]), np.array([8, 8, 8, 0])
    assert room_window(times=times, room=room, step_seconds=300.0, held=4, now=NOW) == (NOW + 600, False)
    assert room_window(times=times, room=room, step_seconds=300.0, held=4, now=NOW, bound=bound) == (NOW + 600, False)
    # the room first falls short where the bound does: an announced (or busy-hours) end
    assert room_window(times=times, room=np.array([8, 8, 8, 0]), step_seconds=300.0, held=4, now=NOW,
                       bound=bound) == (NOW + 900, True)


def pod(name: str, *, interval: float | None, elapsed: float, checkpointing: bool = True,
        finish_by: float | None = None) -> OfflinePod:
    return OfflinePod(name, gpus=2, checkpointing=checkpointing, elapsed_seconds=elapsed, uid=name,
                      checkpoint_interval_seconds=interval, finish_by=finish_by)


def test_only_pods_at_a_checkpoint_whose_next_one_would_miss_the_window_stop() -> None:
    pods = [
        pod("due", interval=600, elapsed=60 + 1200),  # at its 2nd checkpoint; the next (NOW + 600) is too late
        pod("fits", interval=300, elapsed=60 + 900),  # at a checkpoint; the next (NOW + 300) is in time
        pod("between", interval=600, elapsed=60 + 1500),  # 5 min past a checkpoint: it would lose them
        pod("cannot", interval=600, elapsed=60 + 1200, checkpointing=False),
        pod("unknown", interval=None, elapsed=60 + 1200),
        pod("finishing", interval=600, elapsed=60 + 1200, finish_by=NOW + 200),  # done before the window ends
    ]
    plan = plan_yields(node="n1", offline_pods=pods, window_end=NOW + 500, now=NOW, startup_seconds=60)
    assert plan is not None and plan.reason == REASON_YIELD and plan.node == "n1"
    assert [v.name for v in plan.victims] == ["due"]
    assert plan.gpu_seconds_lost == 0.0  # stopped at its checkpoint
    assert "is forecast to need the GPUs on n1" in plan.message
    known = plan_yields(node="n1", offline_pods=pods, window_end=NOW + 500, now=NOW, startup_seconds=60,
                        end_known=True)
    assert known is not None and "is scheduled (announced demand or busy hours) to need" in known.message
    assert plan_yields(node="n1", offline_pods=pods, window_end=None, now=NOW, startup_seconds=60) is None
