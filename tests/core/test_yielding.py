"""Planned stops at a checkpoint before the forecast window ends (`offpeak_core.yielding`)."""

from __future__ import annotations

import pytest

from offpeak_core.yielding import (
    CHECKPOINT_INTERVAL_ANNOTATION,
    YieldSettings,
    checkpoint_interval,
    last_checkpoint,
    should_yield,
)

MIN = 60.0


def test_yields_at_the_last_checkpoint_before_the_window_ends() -> None:
    # 10-min checkpoints, window forecast to end 25 min after the start: the 20-min checkpoint is the last one
    end = 25 * MIN
    assert not should_yield(now=10 * MIN, started_at=0.0, interval=10 * MIN, window_end=end)
    assert should_yield(now=20 * MIN, started_at=0.0, interval=10 * MIN, window_end=end)


def test_only_at_a_checkpoint() -> None:
    kw = dict(started_at=0.0, interval=10 * MIN, window_end=25 * MIN)
    assert not should_yield(now=21 * MIN, **kw)  # past the checkpoint: stopping now would lose a minute of work
    assert should_yield(now=21 * MIN, settings=YieldSettings(at_checkpoint_seconds=90.0), **kw)
    assert not should_yield(now=5 * MIN, **kw)  # no checkpoint yet


def test_margin_before_the_window_end() -> None:
    # the next checkpoint at 30 min lands 30 s before a window end at 30.5 min: inside the 60-s margin, so stop
    assert should_yield(now=20 * MIN, started_at=0.0, interval=10 * MIN, window_end=30.5 * MIN)
    assert not should_yield(now=20 * MIN, started_at=0.0, interval=10 * MIN, window_end=31 * MIN)
    assert not should_yield(now=20 * MIN, started_at=0.0, interval=10 * MIN, window_end=30.5 * MIN,
                            settings=YieldSettings(margin_seconds=0.0))


def test_a_pod_that_cannot_checkpoint_never_yields() -> None:
    for interval in (None, 0.0, -5.0, float("inf")):
        assert not should_yield(now=20 * MIN, started_at=0.0, interval=interval, window_end=21 * MIN)


def test_open_window_and_expected_finish() -> None:
    assert not should_yield(now=20 * MIN, started_at=0.0, interval=10 * MIN, window_end=None)
    # expected to finish at 24 min, inside a window ending at 26 min: runs on
    assert not should_yield(now=20 * MIN, started_at=0.0, interval=10 * MIN, window_end=26 * MIN, finish_by=24 * MIN)
    assert should_yield(now=20 * MIN, started_at=0.0, interval=10 * MIN, window_end=26 * MIN, finish_by=40 * MIN)
    # already past its expected finish at 15 min: the prediction was short and no longer holds it back
    assert should_yield(now=20 * MIN, started_at=0.0, interval=10 * MIN, window_end=26 * MIN, finish_by=15 * MIN)


def test_startup_shifts_the_checkpoints() -> None:
    assert last_checkpoint(now=10 * MIN, started_at=0.0, interval=10 * MIN, startup_seconds=MIN) is None
    assert last_checkpoint(now=21 * MIN, started_at=0.0, interval=10 * MIN, startup_seconds=MIN) == 21 * MIN
    assert not should_yield(now=20 * MIN, started_at=0.0, interval=10 * MIN, window_end=25 * MIN, startup_seconds=MIN)
    assert should_yield(now=21 * MIN, started_at=0.0, interval=10 * MIN, window_end=25 * MIN, startup_seconds=MIN)


def test_a_window_already_over_by_the_forecast_stops_at_the_next_checkpoint() -> None:
    assert should_yield(now=10 * MIN, started_at=0.0, interval=10 * MIN, window_end=5 * MIN)


def test_interval_from_the_annotations() -> None:
    assert checkpoint_interval({CHECKPOINT_INTERVAL_ANNOTATION: "600"}) == 600.0
    assert checkpoint_interval({CHECKPOINT_INTERVAL_ANNOTATION: "1.8e3"}) == 1800.0
    for bad in ("", "x", "0", "-1", "nan", "inf"):
        assert checkpoint_interval({CHECKPOINT_INTERVAL_ANNOTATION: bad}) is None
    assert checkpoint_interval({}) is None


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError):
        YieldSettings(margin_seconds=-1.0)
