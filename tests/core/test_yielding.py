"""Planned stops at a checkpoint before the forecast window ends (`offpeak_core.yielding`)."""

from __future__ import annotations

import pytest

from offpeak_core.yielding import (
    CHECKPOINT_INTERVAL_ANNOTATION,
    SAVE_ON_STOP_ANNOTATION,
    YieldSettings,
    checkpoint_interval,
    last_checkpoint,
    save_on_stop_seconds,
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


def test_a_pod_that_saves_on_stop_runs_until_its_save_must_begin() -> None:
    # 10-min checkpoints, window ending at 25 min, a 60-s save and the 60-s margin: it stops at 23 min, keeping
    # everything, where a periodic-only pod stops at its 20-min checkpoint
    kw = dict(started_at=0.0, interval=10 * MIN, window_end=25 * MIN, save_seconds=60.0)
    assert not should_yield(now=20 * MIN, **kw)
    assert not should_yield(now=22.9 * MIN, **kw)
    assert should_yield(now=23 * MIN + 1, **kw)
    # a caller that looks once a minute stops it on the look before that, not after
    assert should_yield(now=22.5 * MIN, settings=YieldSettings(at_checkpoint_seconds=MIN), **kw)
    assert not should_yield(now=21.5 * MIN, settings=YieldSettings(at_checkpoint_seconds=MIN), **kw)


def test_a_saving_pod_stops_also_before_its_first_checkpoint_and_not_when_it_finishes_in_time() -> None:
    kw = dict(started_at=0.0, interval=30 * MIN, save_seconds=60.0)
    assert should_yield(now=10 * MIN, window_end=11.5 * MIN, **kw)  # no periodic checkpoint yet: it saves anyway
    assert not should_yield(now=10 * MIN, window_end=11.5 * MIN, finish_by=10.4 * MIN, **kw)
    assert not should_yield(now=10 * MIN, window_end=None, **kw)
    # saving on stop is part of the checkpoint contract: a pod that cannot checkpoint still never yields
    assert not should_yield(now=10 * MIN, started_at=0.0, interval=None, window_end=12 * MIN, save_seconds=60.0)


def test_save_time_from_the_annotations() -> None:
    assert save_on_stop_seconds({SAVE_ON_STOP_ANNOTATION: "60"}) == 60.0
    for bad in ("", "x", "0", "-1", "nan", "inf"):
        assert save_on_stop_seconds({SAVE_ON_STOP_ANNOTATION: bad}) is None
    assert save_on_stop_seconds({CHECKPOINT_INTERVAL_ANNOTATION: "600"}) is None
