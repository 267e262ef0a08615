"""Expected-goodput admission: survival tables, expected useful work, the shortest worthwhile window."""

from __future__ import annotations

import math

import numpy as np
import pytest

from offpeak_core.decisions import filter_nodes
from offpeak_core.goodput import (
    GoodputAdmission,
    GoodputSettings,
    WindowSurvival,
    certain_window_ok,
    expected_goodput,
    min_window,
    survival_from_observations,
)
from offpeak_core.model import IdleWindow, NodeView, PodRequest, Prediction

H = 3600.0
NOW = 1_000_000.0
A100 = "A100-SXM4-40GB"


def _survival(left: float, lasted: list[float], outlasted: list[bool] | None = None, min_at_risk: int = 10):
    n = len(lasted)
    return survival_from_observations(forecast_left=[left] * n, lasted=lasted, outlasted=outlasted or [False] * n,
                                      min_at_risk=min_at_risk)


def _replay(lasted: list[float], *, runtime: float, interval: float, startup: float) -> tuple[float, float]:
    """Mean work kept and GPU time held over windows that lasted `lasted`: the work at the last checkpoint before
    each closed, or the whole run."""
    useful, held = [], []
    for t in lasted:
        if t >= startup + runtime:
            useful.append(runtime)
            held.append(startup + runtime)
        else:
            useful.append(math.floor(max(0.0, t - startup) / interval) * interval)
            held.append(t)
    return float(np.mean(useful)), float(np.mean(held))


def test_expected_work_equals_the_average_over_the_observed_windows() -> None:
    rng = np.random.default_rng(1)
    lasted = (rng.integers(0, 60, 500) * 300.0).tolist()  # bin-aligned, so the table loses nothing
    sv = _survival(H, lasted, min_at_risk=1)
    runtime, interval, startup = 3 * H, 1800.0, 600.0
    useful, held = _replay(lasted, runtime=runtime, interval=interval, startup=startup)
    g = expected_goodput(survival=sv, left=H, runtime=runtime, checkpoint_interval=interval, startup_seconds=startup)
    assert g.useful == pytest.approx(useful)
    assert g.held == pytest.approx(held)
    assert g.finish == pytest.approx(np.mean(np.array(lasted) >= startup + runtime))
    assert 0 < g.efficiency < 1


def test_a_checkpointing_job_may_take_a_window_shorter_than_its_run() -> None:
    sv = _survival(H, [2 * H] * 50)  # windows forecast at 1 h really last 2 h
    s = GoodputSettings(min_efficiency=0.8, startup_seconds=0.0)
    # 10 h job, checkpoints every 30 min: everything held is saved at the 2 h mark -> efficiency 1
    assert min_window(survival=sv, runtime=10 * H, checkpoint_interval=1800.0, settings=s) == 3600.0
    # checkpoints every 3 h: 2 h held, nothing saved
    assert min_window(survival=sv, runtime=10 * H, checkpoint_interval=3 * H, settings=s) == math.inf
    # no checkpoints at all: needs a window for the whole run, whatever the table says
    assert min_window(survival=sv, runtime=10 * H, checkpoint_interval=None, settings=s) == math.inf


def test_untrusted_classes_admit_nothing() -> None:
    sv = _survival(H, [2 * H] * 5, min_at_risk=1)
    s = GoodputSettings(startup_seconds=0.0, min_samples=30)
    assert min_window(survival=sv, runtime=10 * H, checkpoint_interval=1800.0, settings=s) == math.inf
    s5 = GoodputSettings(startup_seconds=0.0, min_samples=5)
    assert min_window(survival=sv, runtime=10 * H, checkpoint_interval=1800.0, settings=s5) == 3600.0


def test_a_gang_is_as_fragile_as_its_weakest_window() -> None:
    # half of the windows last 4 h, half close at once
    sv = _survival(H, [4 * H] * 40 + [0.0] * 40)
    s = GoodputSettings(min_efficiency=0.4, startup_seconds=0.0)
    one = expected_goodput(survival=sv, left=H, runtime=10 * H, checkpoint_interval=1800.0)
    two = expected_goodput(survival=sv, left=H, runtime=10 * H, checkpoint_interval=1800.0, members=2)
    assert one.useful == pytest.approx(0.5 * 4 * H)
    assert two.useful == pytest.approx(0.25 * 4 * H)
    assert min_window(survival=sv, runtime=10 * H, checkpoint_interval=1800.0, settings=s) == 3600.0
    assert min_window(survival=sv, runtime=10 * H, checkpoint_interval=1800.0, settings=s, members=3) == 3600.0
    with_startup = GoodputSettings(min_efficiency=0.99, startup_seconds=600.0)
    assert min_window(survival=sv, runtime=10 * H, checkpoint_interval=1800.0, settings=with_startup) == math.inf


def test_windows_that_outlast_the_horizon_count_as_survivors() -> None:
    sv = _survival(H, [0.0] * 10, outlasted=[True] * 10)
    g = expected_goodput(survival=sv, left=H, runtime=30 * H, checkpoint_interval=1800.0)
    assert g.finish == 1.0 and g.efficiency == pytest.approx(1.0)


def test_filter_admits_by_goodput_only_checkpointing_pods() -> None:
    sv = _survival(H, [3 * H] * 50)
    adm = GoodputAdmission(sv, GoodputSettings(startup_seconds=0.0))
    preds = {A100: Prediction(p50=8 * H, p90=10 * H)}
    ck = PodRequest("ck", gpus=2, predicted=preds, checkpointing=True, checkpoint_interval_seconds=1800.0)
    plain = PodRequest("plain", gpus=2, predicted=preds)
    nodes = [NodeView("hour", A100, 8, 4, window_end=NOW + 1.2 * H), NodeView("none", A100, 8, 4, window_end=NOW)]
    res = filter_nodes(pod=ck, nodes=nodes, now=NOW, goodput=adm)
    assert res.passed == ("hour",)
    assert "lowered by expected goodput" in res.failed["none"]
    assert filter_nodes(pod=ck, nodes=nodes, now=NOW).passed == ()  # rule off: needs 11.5 h
    assert filter_nodes(pod=plain, nodes=nodes, now=NOW, goodput=adm).passed == ()  # cannot checkpoint


def test_windows_still_open_are_counted_as_censored_not_dropped() -> None:
    rng = np.random.default_rng(2)
    b = 300.0
    lasted = np.floor(rng.exponential(3 * H, 4000) / b) * b
    age = np.floor(rng.uniform(0, 8 * H, 4000) / b) * b  # how long ago each window began, when we look
    known = lasted <= age
    bins = int(86400 / b)
    closed = np.zeros((1, bins + 1), dtype=np.int64)
    open_at = np.zeros((1, bins + 1), dtype=np.int64)
    np.add.at(closed, (0, (lasted[known] / b).astype(int)), 1)
    np.add.at(open_at, (0, (age[~known] / b).astype(int)), 1)
    km = WindowSurvival((0.0,), b, closed, open_at)
    naive = WindowSurvival((0.0,), b, closed)  # only the windows already seen closing: biased short
    t = np.array([H, 2 * H, 4 * H])
    truth = np.array([(lasted >= x).mean() for x in t])
    assert np.allclose(km.curve(t)[0], truth, atol=0.04)
    assert (naive.curve(t)[0] < truth - 0.1).all()
    assert km.curve(np.array([20 * H]))[0, 0] == 0.0  # nobody followed 20 h: no evidence, no survival


def _outlasting_short_windows() -> WindowSurvival:
    """Windows forecast to close within 20-45 minutes that really stayed idle for 3 hours (a pessimistic forecast)."""
    left = [25 * 60.0] * 50 + [35 * 60.0] * 50
    return survival_from_observations(forecast_left=left, lasted=[3 * H] * 100, outlasted=[False] * 100)


def test_a_window_known_to_close_is_judged_by_its_end_not_by_how_long_its_class_lasted() -> None:
    sv = _outlasting_short_windows()
    s = GoodputSettings(min_efficiency=0.8, startup_seconds=60.0)
    kw = {"survival": sv, "runtime": 10 * H, "checkpoint_interval": 1800.0, "settings": s}
    assert min_window(**kw) == 20 * 60.0  # such windows last 3 h: a 20-minute forecast is worth starting in
    # known to close at 25 min: the first checkpoint (61 min in) is never reached
    assert not certain_window_ok(left=25 * 60.0, **kw)
    # at 35 min: one checkpoint saved (30 min of 35 held)
    assert certain_window_ok(left=35 * 60.0, **kw)
    # at 44 min: the same checkpoint, 14 minutes lost after it: 30 of 44 is below 0.8
    assert not certain_window_ok(left=44 * 60.0, **kw)
    # a job that finishes within the window keeps all it did
    assert certain_window_ok(left=35 * 60.0, **{**kw, "runtime": 30 * 60.0})
    # no checkpoints: never by this rule; an untrusted class (45-60 min saw nothing): no
    assert not certain_window_ok(left=35 * 60.0, **{**kw, "checkpoint_interval": None})
    assert not certain_window_ok(left=50 * 60.0, **kw)


def test_expected_goodput_cut_at_a_known_end_replays_the_windows() -> None:
    """With the survival cut at `until`, expected work is what replaying each observed window, closed at
    min(its length, until), keeps."""
    from offpeak_core.goodput import _expected

    rng = np.random.default_rng(3)
    lasted = (rng.integers(0, 40, 400) * 300.0).tolist()
    sv = _survival(H, lasted, min_at_risk=1)
    runtime, interval, startup, until = 3 * H, 1800.0, 300.0, 5400.0
    useful, held = _replay(np.minimum(lasted, until).tolist(), runtime=runtime, interval=interval, startup=startup)
    u, h, _ = _expected(runtime=runtime, interval=interval, startup=startup, members=1, sv=sv, until=until)
    c = sv.klass(H)
    assert u[c] == pytest.approx(useful)
    assert h[c] == pytest.approx(held)


def test_filter_turns_down_a_window_whose_announced_end_comes_before_a_checkpoint() -> None:
    adm = GoodputAdmission(_outlasting_short_windows(), GoodputSettings(min_efficiency=0.8, startup_seconds=60.0))
    preds = {A100: Prediction(p50=8 * H, p90=10 * H)}
    ck = PodRequest("ck", gpus=2, predicted=preds, checkpointing=True, checkpoint_interval_seconds=1800.0)

    def node(name: str, minutes: float, certain: bool) -> NodeView:
        return NodeView(name, A100, 8, 4, None, None, False,
                        (IdleWindow(NOW - 60, NOW + minutes * 60, 4, end_certain=certain),))

    nodes = [node("forecast-25m", 25, False), node("announced-25m", 25, True), node("announced-35m", 35, True)]
    res = filter_nodes(pod=ck, nodes=nodes, now=NOW, goodput=adm)
    assert res.passed == ("forecast-25m", "announced-35m")
    assert "the window's end is announced" in res.failed["announced-25m"]
    assert "p90 x1.15;" in res.failed["announced-25m"]  # it needs its whole run there, not the lowered window
    # a job that finishes in the announced window needs no checkpoint
    short = PodRequest("short", gpus=2, predicted={A100: Prediction(p50=10 * 60, p90=20 * 60)}, checkpointing=True,
                       checkpoint_interval_seconds=1800.0)
    assert filter_nodes(pod=short, nodes=nodes, now=NOW, goodput=adm).passed == tuple(n.name for n in nodes)
