"""Prometheus history parsing/chunking, the refresher's fallbacks, and store behaviour around forecasts."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from offpeak_core.forecast import ForecastSettings
from offpeak_core.windows import current_window
from offpeak_extender.history import HistoryError, LocalHistory, PrometheusHistory, Refresher, parse_matrix
from offpeak_extender.metrics import ExtenderMetrics
from offpeak_extender.store import ClusterStore, series_is_current

from .k8s_objects import gpu_node, gpu_pod

DAY = 600.0
S = ForecastSettings(season_seconds=DAY, step_seconds=10.0, horizon_seconds=DAY, history_seconds=3 * DAY)
NOW = 100 * DAY


def matrix(series: dict[str, list[tuple[float, str]]]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"node": n}, "values": [[t, v] for t, v in vals]} for n, vals in series.items()]}}


def test_parse_matrix_and_errors() -> None:
    got = parse_matrix(matrix({"a": [(1.0, "2"), (2.0, "NaN")], "b": []}))
    assert list(got) == ["a"]
    assert got["a"][0].tolist() == [1.0, 2.0] and np.isnan(got["a"][1][1])
    with pytest.raises(HistoryError, match="query failed"):
        parse_matrix({"status": "error", "error": "bad query"})
    with pytest.raises(HistoryError, match="matrix"):
        parse_matrix({"status": "success", "data": {"resultType": "vector", "result": []}})


def test_prometheus_range_is_chunked_under_points_limit() -> None:
    calls: list[dict[str, str]] = []

    class Fake(PrometheusHistory):
        def _get(self, params: dict[str, str]) -> Any:
            calls.append(params)
            start, end = float(params["start"]), float(params["end"])
            return matrix({"a": [(start, "1"), (end, "1")]})

    h = Fake("http://prom:9090").fetch(start=0.0, end=25_000.0, step=1.0)
    assert len(calls) == 3 and all(float(c["end"]) - float(c["start"]) <= 10_000 for c in calls)
    assert h["a"][0].size == 6
    assert calls[0]["query"] == "max by (node) (offpeak_node_online_gpus)"


def test_unreachable_prometheus_is_a_history_error() -> None:
    with pytest.raises(HistoryError, match="unreachable"):
        PrometheusHistory("http://127.0.0.1:9", timeout_seconds=0.5).fetch(start=0, end=10, step=5)


class FailingSource:
    def fetch(self, *, start: float, end: float, step: float) -> Any:
        raise HistoryError("Prometheus at http://prom down")


def store_with_nodes(clock: list[float]) -> ClusterStore:
    store = ClusterStore(settings=S, clock=lambda: clock[0], stale_after_seconds=30.0)
    store.replace_all(nodes=[gpu_node("a", gpus=4), gpu_node("sched", gpus=4, busy_hours="daily 12:00-18:00")],
                      pods=[gpu_pod("web-0", gpus=2, node="a", workload="online")])
    return store


def test_refresher_failure_marks_stale_and_gauge() -> None:
    clock = [NOW]
    store = store_with_nodes(clock)
    reg = CollectorRegistry()
    r = Refresher(store=store, source=FailingSource(), metrics=ExtenderMetrics.create(reg))
    r.refresh_once()
    assert store.data_stale()
    assert reg.get_sample_value("offpeak_extender_data_stale") == 1.0
    views, _ = store.views(["a", "sched"])
    a, sched = views
    assert a.data_stale  # no history: fits-now
    assert not sched.data_stale  # declared busy hours are a forecast on their own
    assert sched.window_end == pytest.approx(NOW + 0.5 * DAY)


def test_local_history_samples_feed_forecast_and_prometheus_gaps_fall_back() -> None:
    clock = [NOW]
    store = store_with_nodes(clock)
    for i in range(5):
        store.record_local_sample(now=NOW - 50 + 10 * i)

    class PromOnlySched:
        def fetch(self, *, start: float, end: float, step: float) -> Any:
            return {"sched": (np.array([NOW - 20.0]), np.array([0.0]))}

    Refresher(store=store, source=PromOnlySched(), metrics=None).refresh_once()
    assert not store.data_stale()
    (a,), _ = store.views(["a"])
    assert not a.data_stale and a.gpus_free_now == 2  # from local samples: 2 online GPUs all along
    assert a.window_end is None and a.window_free_gpus == 2
    assert LocalHistory(store).fetch(start=0, end=NOW, step=10)["a"][1].tolist() == [2.0] * 5
    clock[0] = NOW + 31  # older than stale_after_seconds
    (a,), _ = store.views(["a"])
    assert a.data_stale


def test_store_tracks_pods_across_updates_and_phases() -> None:
    clock = [NOW]
    store = store_with_nodes(clock)
    assert store.usage("a") == (2, 0, 0)
    train = gpu_pod("resnet-0", gpus=1, node="a")
    store.upsert_pod(train)
    assert store.usage("a") == (2, 1, 0) and store.free_gpus("a") == 1
    done = gpu_pod("resnet-0", gpus=1, node="a", phase="Succeeded")
    store.upsert_pod(done)
    assert store.usage("a") == (2, 0, 0)
    store.delete_pod(done)
    store.delete_pod(gpu_pod("web-0", gpus=2, node="a", workload="online"))
    assert store.usage("a") == (0, 0, 0) and store.free_gpus("a") == 4


def test_bad_busy_hours_annotation_is_ignored_not_fatal() -> None:
    store = ClusterStore(settings=S, clock=lambda: NOW)
    store.replace_all(nodes=[gpu_node("x", busy_hours="weekdays 9-5")], pods=[])
    info = store.node("x")
    assert info is not None and info.schedule is None and "bad busy-hours rule" in (info.schedule_error or "")


def test_refresher_thread_samples_once_per_step_and_refreshes() -> None:
    import time as _time

    store = ClusterStore(settings=ForecastSettings(season_seconds=60.0, step_seconds=0.2, horizon_seconds=60.0,
                                                   history_seconds=600.0), stale_after_seconds=30.0)
    store.replace_all(nodes=[gpu_node("a", gpus=4)], pods=[gpu_pod("web-0", gpus=1, node="a", workload="online")])
    r = Refresher(store=store, source=LocalHistory(store), metrics=None, refresh_seconds=0.3)
    r.start()
    _time.sleep(1.1)
    r.stop()
    assert r.thread is not None
    r.thread.join(timeout=2)
    samples = store.local_history()["a"][0]
    assert 4 <= samples.size <= 7  # ~1.1 s / 0.2 s, not one per loop iteration
    assert not store.data_stale()


def test_relist_keeps_views_of_unchanged_nodes() -> None:
    clock = [NOW]
    store = store_with_nodes(clock)
    store.set_history({"a": (np.array([NOW - 20.0]), np.array([2.0]))}, now=NOW)
    (before_a, before_s), _ = store.views(["a", "sched"])
    store.replace_all(nodes=[gpu_node("a", gpus=4), gpu_node("sched", gpus=4, busy_hours="daily 12:00-18:00")],
                      pods=[gpu_pod("web-0", gpus=2, node="a", workload="online"),
                            gpu_pod("train-0", gpus=1, node="sched")])
    (after_a, after_s), _ = store.views(["a", "sched"])
    assert after_a is before_a  # same usage, same node: the cached view is reused
    assert after_s is not before_s and after_s.gpus_free_now == 3
    store.upsert_node(gpu_node("a", gpus=4))  # heartbeat-like update, nothing changed
    assert store.views(["a"])[0][0] is before_a


def test_a_series_that_ended_makes_its_node_stale_not_idle() -> None:
    clock = [NOW]
    store = store_with_nodes(clock)
    t = np.arange(NOW - 2 * DAY, NOW, 10.0)
    ended = t < NOW - 100  # the agent stopped reporting 100 s ago (> stale_after 30 s + one 10 s step)
    nan_tail = np.where(t < NOW - 100, 2.0, np.nan)  # or reported NaN since
    store.set_history({"a": (t[ended], np.full(ended.sum(), 2.0)), "sched": (t, nan_tail)}, now=NOW)
    assert not store.data_stale()
    (a, sched), _ = store.views(["a", "sched"])
    assert a.data_stale and a.windows is None
    assert not sched.data_stale  # busy hours still forecast it, but not from the dead series
    store.set_history({"a": (t, np.full(t.size, 2.0))}, now=NOW)  # reporting again (last point one step ago)
    (a,), _ = store.views(["a"])
    assert not a.data_stale
    assert series_is_current(times=t, online=np.full(t.size, 2.0), now=NOW, max_age_seconds=10.0)
    assert not series_is_current(times=t, online=nan_tail, now=NOW, max_age_seconds=40.0)
    assert not series_is_current(times=np.array([]), online=np.array([]), now=NOW, max_age_seconds=40.0)


def test_requests_during_a_refit_keep_using_the_old_views(monkeypatch: pytest.MonkeyPatch) -> None:
    import offpeak_extender.store as store_module

    clock = [NOW]
    store = store_with_nodes(clock)
    store.set_history({"a": (np.array([NOW - 20.0]), np.array([2.0]))}, now=NOW)
    (old,), _ = store.views(["a"])
    real = store_module.build_view
    mid_refit: list[Any] = []
    builds = [0]

    def spy(inp: Any, **kwargs: Any) -> Any:
        builds[0] += 1
        if builds[0] == 1:
            mid_refit.append(store.views(["a"])[0][0])  # a request arriving while the refit builds views
        return real(inp, **kwargs)

    monkeypatch.setattr(store_module, "build_view", spy)
    store.set_history({"a": (np.array([NOW - 20.0]), np.array([1.0]))}, now=NOW)
    assert mid_refit[0] is old  # served from the old views, not rebuilt on the request path
    assert builds[0] == 2  # one per node, all in the refit
    (new,), _ = store.views(["a"])
    assert new is not old and new != old  # the new forecast, published with all views at once


def test_an_online_rise_the_forecast_missed_closes_the_node_for_one_hold_not_until_history_learns_it() -> None:
    """Online demand stepping up at a time of day the history never saw it is a surprise: the node is full for
    `hold_seconds` from the rise, as the node's samples tell it. After that the new level is online work that
    stopped growing, and the GPUs it leaves are a window again (before, every rebuild re-anchored the hold, and the
    node stayed closed until a whole season of history had seen the level)."""
    clock = [NOW]
    by_day = replace(S, weekly=False, history_seconds=10 * DAY)  # ten days before today said "no online work"
    store = ClusterStore(settings=by_day, clock=lambda: clock[0], stale_after_seconds=1e9)
    store.replace_all(nodes=[gpu_node("a", gpus=8)], pods=[])
    rose = NOW

    def refresh() -> None:  # the node's samples every second: no online work ever, then 4 GPUs from `rose` on
        t = np.arange(NOW - 10 * DAY, clock[0], 1.0)
        store.set_history({"a": (t, np.where(t >= rose, 4.0, 0.0))}, now=clock[0])

    def window(gpus: int) -> float:
        (view,) = store.views(["a"])[0]
        best = current_window(windows=view.windows or (), now=clock[0], gpus=gpus)
        return 0.0 if best is None else best.length(clock[0])

    refresh()
    for i in range(4):
        store.upsert_pod(gpu_pod(f"web-{i}", gpus=1, node="a", workload="online"))  # 4 online GPUs, all at once
    assert window(1) == 0.0  # a surprise: no new offline work on the node for now
    clock[0] += S.hold_seconds / 2
    refresh()
    assert window(1) == 0.0  # still within the hold from the rise
    clock[0] += S.hold_seconds
    refresh()  # the seasonal forecast still expects no online work now: the level is above it, but settled
    assert window(4) > S.hold_seconds and window(5) == 0.0  # the 4 GPUs online work leaves are free again
    store.upsert_pod(gpu_pod("web-4", gpus=1, node="a", workload="online"))  # a further rise is a new surprise
    assert window(1) == 0.0
    refresh()  # (its samples do not show it yet)
    assert window(1) == 0.0
