"""Planned stops as the evictor plans them (`evictions.plan_yields`) and the window end they are judged against
(`windows.held_window_end`): pure, no cluster."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from offpeak_core.evictions import REASON_YIELD, plan_yields
from offpeak_core.forecast import DemandForecast
from offpeak_core.model import OfflinePod
from offpeak_core.schedules import parse_busy_hours
from offpeak_core.windows import FreeProfile, free_profile, profile_window, room_window, with_busy_hours
from offpeak_core.yielding import YieldSettings

NOW = 10_000.0


def forecast(online: list[float], step: float = 300.0, start: float = NOW) -> DemandForecast:
    times = start + step * np.arange(len(online))
    return DemandForecast(times, np.array(online, dtype=float), np.ones(len(online)), step)


def held_window_end(*, forecast: DemandForecast, capacity: int, held: int, now: float) -> float | None:
    """When the pods holding `held` GPUs stop fitting beside the forecast online demand, as the evictor asks."""
    return profile_window(free_profile(forecast=forecast, capacity=capacity), held=held, now=now)[0]


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


def test_busy_hours_take_the_gpus_and_end_a_held_window_for_certain() -> None:
    day = 86_400.0
    start = 11 * 3600.0  # 11:00 on day 0 (a Thursday); busy daily 12:00-13:00
    fc = forecast([1, 1, 1, 1, 1, 1], step=1800.0, start=start)  # 11:00 .. 13:30 in half hours, 8 GPUs
    room = free_profile(forecast=fc, capacity=8)
    assert profile_window(room, held=4, now=start) == (None, False)  # the forecast alone never ends it
    assert with_busy_hours(room, schedule=None, most_free=8, day_seconds=day) is room  # no busy hours declared
    busy = with_busy_hours(room, schedule=parse_busy_hours("daily 12:00-13:00"), most_free=8, day_seconds=day)
    assert list(busy.free) == [7, 7, 0, 0, 7, 7] and list(busy.bound) == [8, 8, 0, 0, 8, 8]
    assert profile_window(busy, held=4, now=start) == (start + 3600.0, True)  # ends at 12:00, known in advance
    # a bound already there (announced demand) is kept outside the busy hours
    announced = FreeProfile(room.times, room.free, room.confidence, room.step_seconds, np.array([8, 2, 8, 8, 8, 8]))
    both = with_busy_hours(announced, schedule=parse_busy_hours("daily 12:00-13:00"), most_free=8, day_seconds=day)
    assert list(both.bound) == [8, 2, 0, 0, 8, 8]
    assert profile_window(both, held=4, now=start) == (start + 3600.0, True)  # the room, not the bound, ends it


def test_busy_hours_that_begin_inside_a_step_end_the_window_at_that_steps_start_not_after_they_began() -> None:
    day = 86_400.0
    start = 11 * 3600.0 + 150.0  # steps start at now, 11:02:30 here; busy daily 11:10-11:20
    room = free_profile(forecast=forecast([0, 0, 0, 0, 0, 0], step=300.0, start=start), capacity=8)
    busy = with_busy_hours(room, schedule=parse_busy_hours("daily 11:10-11:20"), most_free=8, day_seconds=day)
    # 11:02:30, 11:07:30 (busy from 11:10), 11:12:30, 11:17:30 (busy until 11:20), 11:22:30, 11:27:30
    assert list(busy.free) == [8, 0, 0, 0, 8, 8] and list(busy.bound) == [8, 0, 0, 0, 8, 8]
    end, known = profile_window(busy, held=4, now=start)
    assert known and end == start + 300.0 and end <= 11 * 3600.0 + 600.0  # before 11:10, not at 11:12:30


def test_a_busy_stretch_shorter_than_a_step_and_inside_it_still_counts() -> None:
    sched = parse_busy_hours("daily 11:06-11:07")
    times = 11 * 3600.0 + np.array([0.0, 300.0, 600.0])
    assert list(sched.mask(times)) == [False, False, False]  # no step starts in it
    assert list(sched.step_mask(times, step_seconds=300.0)) == [False, True, False]
    # on a compressed day (600 s) the rules keep their shape: 11:06-11:07 is 277.5-277.9 s in
    assert list(sched.step_mask(np.array([270.0, 274.5, 280.0]), step_seconds=4.0, day_seconds=600.0)) == [
        False, True, False]


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


def test_a_reported_checkpoint_sets_when_a_pod_is_at_one_and_what_it_loses() -> None:
    # By its start the pod is 5 minutes past a checkpoint (it would lose them); its live report says it saved just
    # now (slow start-up moved its checkpoints), so it stops here, losing nothing.
    reported = replace(pod("slow-start", interval=600, elapsed=60 + 1500), last_checkpoint_at=NOW - 10)
    # And the other way: its start says it is at a checkpoint, its report says the last was 4 minutes ago.
    behind = replace(pod("behind", interval=600, elapsed=60 + 1200), last_checkpoint_at=NOW - 240)
    looks = YieldSettings(at_checkpoint_seconds=30.0)  # the evictor looks every 30 s
    plan = plan_yields(node="n1", offline_pods=[reported, behind], window_end=NOW + 500, now=NOW,
                       startup_seconds=60, settings=looks)
    assert plan is not None and [v.name for v in plan.victims] == ["slow-start"]
    assert plan.victims[0].seconds_since_checkpoint == pytest.approx(10.0)
    # the next reported checkpoint (NOW - 10 + 600) lands inside a longer window: it runs on
    assert plan_yields(node="n1", offline_pods=[reported], window_end=NOW + 700, now=NOW, startup_seconds=60,
                       settings=looks) is None
