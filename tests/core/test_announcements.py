"""Announced online demand (`offpeak_core.announcements`): OnlineDemand objects to a per-step floor."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest

from offpeak_core.announcements import (
    Announcement,
    AnnouncementError,
    announced_ceiling,
    announced_demand,
    announcement_from_object,
    by_pool,
)

T0 = datetime(2026, 11, 28, 4, 0, tzinfo=timezone.utc).timestamp()


def demand(name: str = "d", **spec: object) -> dict:
    base = {"pool": "serving", "gpus": 16, "start": "2026-11-28T04:00:00Z", "end": "2026-11-28T05:00:00+00:00"}
    base.update(spec)
    return {"metadata": {"namespace": "online", "name": name}, "spec": base}


def test_an_object_becomes_an_announcement_with_unix_times() -> None:
    a = announcement_from_object(demand())
    assert a == Announcement("online/d", "serving", 16, T0, T0 + 3600)


@pytest.mark.parametrize(("spec", "says"), [
    (dict(pool=""), "spec.pool is required"),
    (dict(gpus=0), "spec.gpus must be a whole number >= 1"),
    (dict(gpus=True), "spec.gpus must be a whole number >= 1"),
    (dict(gpus="4"), "spec.gpus must be a whole number >= 1"),
    (dict(start=None), "spec.start is required"),
    (dict(start="tomorrow"), "spec.start 'tomorrow' is not an RFC 3339 time"),
    (dict(end="2026-11-28T05:00:00"), "spec.end '2026-11-28T05:00:00' has no time zone"),
    (dict(end="2026-11-28T04:00:00Z"), "spec.end must be after spec.start"),
    (dict(poolGpusAtMost=8), "spec.poolGpusAtMost must be a whole number >= spec.gpus (16)"),
    (dict(poolGpusAtMost="32"), "spec.poolGpusAtMost must be a whole number >= spec.gpus (16)"),
])
def test_an_unusable_object_is_refused_with_its_name_and_the_field(spec: dict, says: str) -> None:
    with pytest.raises(AnnouncementError, match="online/d: ") as e:
        announcement_from_object(demand(**spec))
    assert says in str(e.value)


def test_announced_demand_sums_the_announcements_in_force_at_any_moment_of_each_step() -> None:
    a = Announcement("a", "p", 10, T0, T0 + 3600)
    b = Announcement("b", "p", 4, T0 + 1800, T0 + 1900)  # inside one 5-min step: that step counts it whole
    times = T0 - 600 + 300 * np.arange(16)
    got = announced_demand([a, b], times, 300.0)
    assert got.tolist() == [0, 0, 10, 10, 10, 10, 10, 10, 14, 10, 10, 10, 10, 10, 0, 0]
    assert announced_demand([], times, 300.0).tolist() == [0] * 16


def test_a_stated_pool_ceiling_is_kept_and_bounds_only_the_steps_it_covers_whole() -> None:
    a = announcement_from_object(demand(poolGpusAtMost=20))
    assert a.pool_gpus_at_most == 20 and announcement_from_object(demand()).pool_gpus_at_most is None
    tight = Announcement("t", "p", 2, T0 + 900, T0 + 1750, pool_gpus_at_most=6)  # ends inside the step from 1500
    times = T0 + 300 * np.arange(8)
    got = announced_ceiling([a, tight, Announcement("floor-only", "p", 30, T0, T0 + 3600)], times, 300.0)
    assert got.tolist() == [20, 20, 20, 6, 6, 20, 20, 20]
    assert np.isinf(announced_ceiling([], times, 300.0)).all()


def test_by_pool_drops_what_is_over_and_orders_each_pool_the_same_way_whatever_it_came_in() -> None:
    over = Announcement("over", "p", 1, T0 - 7200, T0)
    late = Announcement("late", "p", 2, T0 + 600, T0 + 900)
    soon = Announcement("soon", "p", 3, T0 + 60, T0 + 900)
    other = Announcement("other", "q", 1, T0, T0 + 60)
    assert by_pool([over, late, soon, other], now=T0) == {"p": (soon, late), "q": (other,)}
    assert by_pool([other, soon, late], now=T0) == by_pool([late, soon, other], now=T0)
