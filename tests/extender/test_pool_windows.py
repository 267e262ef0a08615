"""Pool windows in the extender (`--pool-label`): a pooled node's windows come from its pool's total online demand
and every offline GPU held anywhere in the pool, and change at once when a pod anywhere in the pool does."""

from __future__ import annotations

import math

import time
from typing import Any

import numpy as np
import pytest

from offpeak.cliargs import Parser
from offpeak_core.forecast import ForecastSettings
from offpeak_core.nodearrays import NodeArrays
from offpeak_extender import history
from offpeak_extender.history import POOL_REFIT_GAP_SECONDS, Refresher
from offpeak_extender.pools import PoolSettings, fit_pools, pools_of
from offpeak_extender.store import ClusterStore

from support.clock import Clock

from .k8s_objects import gpu_node, gpu_pod
from .test_store_arrays import columns

DAY = 600.0
S = ForecastSettings(season_seconds=DAY, step_seconds=10.0, horizon_seconds=DAY, history_seconds=3 * DAY)
NOW = 100 * DAY
LABEL = "pool.example.com/name"
POOLS = PoolSettings(label=LABEL, look_back_seconds=150.0)


def pooled_node(name: str, pool: str | None, gpus: int = 8, gpu_type: str = "A100-SXM4-40GB",
                busy_hours: str | None = None) -> dict[str, Any]:
    node = gpu_node(name, gpus=gpus, gpu_type=gpu_type, busy_hours=busy_hours)
    if pool is not None:
        node["metadata"]["labels"][LABEL] = pool
    return node


def pulsed(period: float = 100.0, on: float = 50.0, level: float = 8.0, end: float = NOW) -> tuple[Any, Any]:
    """A node's series: `level` GPUs for `on` seconds of every `period`, idle the rest."""
    t = np.arange(end - 3 * DAY, end, S.step_seconds)
    return t, np.where(t % period < on, level, 0.0)


def idle(end: float = NOW) -> tuple[Any, Any]:
    t = np.arange(end - 3 * DAY, end, S.step_seconds)
    return t, np.zeros(t.size)


def make_store(pools: PoolSettings | None = POOLS, clock: Clock | None = None) -> ClusterStore:
    """p1 and p2 form the pool `web`; p1's online work comes and goes (8 GPUs half the time), p2 never had any:
    its own history says it is always idle, while the pool has room for 8 GPUs at its peak. `solo` is in no pool."""
    store = ClusterStore(settings=S, clock=clock or Clock(NOW), stale_after_seconds=30.0, pools=pools)
    store.replace_all(nodes=[pooled_node("p1", "web"), pooled_node("p2", "web"), pooled_node("solo", None)], pods=[])
    store.set_history({"p1": pulsed(), "p2": idle(), "solo": idle()}, now=NOW)
    return store


def most_free(store: ClusterStore, name: str) -> int:
    """The most GPUs any of the node's windows open now has."""
    (view,), _ = store.views([name])
    return max((w.free_gpus for w in view.windows or ()), default=0)


def test_a_pooled_nodes_room_is_its_pools_less_the_offline_gpus_held_anywhere_in_it() -> None:
    pooled, alone = make_store(), make_store(pools=None)
    assert most_free(pooled, "p2") == 8 and most_free(alone, "p2") == 8  # the pool's peak leaves 8 of its 16
    for store in (pooled, alone):
        store.upsert_pod(gpu_pod("train-0", gpus=4, node="p1"))  # p1 is idle now: an offline pod takes 4 there
    assert most_free(pooled, "p2") == 4  # when p1's online work returns it goes to p2: 4 GPUs are left there
    assert most_free(alone, "p2") == 8  # p2's own history sees nothing coming
    assert most_free(pooled, "solo") == most_free(alone, "solo") == 8  # a node in no pool keeps its own windows
    pooled.delete_pod(gpu_pod("train-0", gpus=4, node="p1"))
    assert most_free(pooled, "p2") == 8  # at once, without a refresh


def test_the_filter_refuses_a_pooled_node_whose_pool_will_not_leave_it_the_gpus() -> None:
    """The scheduler's /filter, as it is answered: a 6-GPU job of an hour does not fit p2 once 4 GPUs are offline
    on p1 (the pool's online work returns to 8 of 16), where p2's own history would let it in."""
    import json

    from prometheus_client import CollectorRegistry

    from offpeak_extender.metrics import ExtenderMetrics
    from offpeak_extender.service import DecisionSettings, ExtenderService

    job = gpu_pod("train-1", gpus=6, phase="Pending", predicted={"A100-SXM4-40GB": {"p50": 3000.0, "p90": 3600.0}})
    body = json.dumps({"Pod": job, "NodeNames": ["p2", "solo"]}).encode()
    replies = {}
    for pools in (POOLS, None):
        store = make_store(pools=pools)
        store.upsert_pod(gpu_pod("train-0", gpus=4, node="p1"))
        svc = ExtenderService(store=store, metrics=ExtenderMetrics.create(CollectorRegistry()),
                              settings=DecisionSettings())
        replies[pools is not None] = json.loads(svc.answer("filter", body))
    assert replies[True]["NodeNames"] == ["solo"] and "p2" in replies[True]["FailedNodes"], replies[True]
    assert replies[False]["NodeNames"] == ["p2", "solo"], replies[False]


def test_a_pooled_nodes_held_gpus_keep_their_window_while_the_pool_has_room_for_them() -> None:
    """The evictor's planned stops ask when a node's offline pods' window ends (`held_window_end`). In pool q (see
    below) q2 never had online work, so its own forecast never ends a window; by its pool, 4 GPUs held there stay
    open-ended (the pool never went above 16 of 24, with 4 more held on q1), while 8 end within the pool's rises."""
    now = NOW - NOW % 300 + 290
    clock = Clock(now)
    for pools in (POOLS, None):
        store = ClusterStore(settings=S, clock=clock, stale_after_seconds=30.0, pools=pools)
        store.replace_all(nodes=[pooled_node(n, "q") for n in ("q1", "q2", "q3")],
                          pods=[gpu_pod("train-0", gpus=4, node="q1"), gpu_pod("train-1", gpus=4, node="q2")])
        busy = pulsed(period=300.0, on=50.0, end=now)
        store.set_history({"q1": busy, "q2": idle(end=now), "q3": busy}, now=now)
        if pools is None:  # q2's own forecast: idle for ever
            assert store.held_window_end("q2") is None and store.held_window_end("q2", held=8) is None
            continue
        assert store.held_window_end("q2") is None  # its 4 GPUs: room in the pool whatever it does
        end = store.held_window_end("q2", held=8)
        assert end is not None and now <= end <= now + 100
        store.delete_pod(gpu_pod("train-0", gpus=4, node="q1"))  # nothing held elsewhere: 8 GPUs fit the pool
        assert store.held_window_end("q2", held=8) is None


def test_online_demand_above_the_pools_peak_shrinks_every_node_of_it_at_once() -> None:
    store = make_store()
    store.upsert_pod(gpu_pod("web-0", gpus=8, node="p1", workload="online"))  # the pool at its peak: no change
    assert most_free(store, "p2") == 8
    store.upsert_pod(gpu_pod("web-1", gpus=3, node="p2", workload="online"))  # above its peak: 11 of 16 now
    assert most_free(store, "p2") == 5


def test_a_pools_windows_end_where_its_history_rose_above_such_a_peak() -> None:
    """Pool q's total rose from 0 to 16 of its 24 GPUs within 100 s of a third of its instants whose last 150 s
    were idle. With 4 GPUs offline on q1, a window for more than 4 GPUs on q2 lasts no longer than that, though q2
    itself never had online work; 4 GPUs stay free whatever the rises (the pool never went above 16)."""
    now = NOW - NOW % 300 + 290  # 240 s into an idle stretch: the pool's recent peak is 0
    store = ClusterStore(settings=S, clock=Clock(now), stale_after_seconds=30.0, pools=POOLS)
    store.replace_all(nodes=[pooled_node(n, "q") for n in ("q1", "q2", "q3")],
                      pods=[gpu_pod("train-0", gpus=4, node="q1")])
    busy = pulsed(period=300.0, on=50.0, end=now)
    store.set_history({"q1": busy, "q2": idle(end=now), "q3": busy}, now=now)
    (view,), _ = store.views(["q2"])
    windows = view.windows or ()
    five = [w for w in windows if w.free_gpus >= 5]
    assert five and all(w.end is not None and w.end - now <= 100 for w in five), windows
    assert any(w.free_gpus == 4 and w.end is None for w in windows), windows


def test_a_pool_with_a_node_without_a_current_series_keeps_its_nodes_own_windows() -> None:
    store = make_store()
    store.upsert_pod(gpu_pod("train-0", gpus=4, node="p1"))
    t, v = pulsed()
    store.set_history({"p1": (t[:-100], v[:-100]), "p2": idle(), "solo": idle()}, now=NOW)  # p1's agent stopped
    assert most_free(store, "p2") == 8  # p2's own windows: the pool's sum without p1 would read too quiet


def test_a_node_that_leaves_its_pool_keeps_its_own_windows_and_the_pool_waits_for_the_next_refresh() -> None:
    store = make_store()
    store.upsert_pod(gpu_pod("train-0", gpus=4, node="p1"))
    assert most_free(store, "p2") == 4
    store.upsert_node(pooled_node("p1", None))  # relabelled: p1 leaves the pool
    assert most_free(store, "p2") == 8  # the pool's fit was of both nodes: p2's own windows until the next one
    store.set_history({"p1": pulsed(), "p2": idle(), "solo": idle()}, now=NOW)
    assert most_free(store, "p2") == 8  # a pool of p2 alone, never busy


def test_pools_are_fitted_only_on_enough_history() -> None:
    t, v = pulsed()
    short = {"p1": (t[-20:], v[-20:]), "p2": (t[-20:], np.zeros(20))}  # 200 s: less than 150 s + a dozen steps
    fits = fit_pools(short, {"web": ("p1", "p2")}, {"p1": 8, "p2": 8}, now=NOW, settings=S, look_back_seconds=150.0,
                     is_current=lambda times, online: True)
    assert fits == {}
    full = {"p1": (t, v), "p2": (t, np.zeros(t.size))}
    fit = fit_pools(full, {"web": ("p1", "p2")}, {"p1": 8, "p2": 8}, now=NOW, settings=S, look_back_seconds=150.0,
                    is_current=lambda times, online: True)["web"]
    assert fit.capacity == 16 and fit.recent.max() == 8 and fit.rise.rises[0] == 0.0


def test_nodes_with_the_same_room_share_windows_but_keep_their_own_names_and_types() -> None:
    store = ClusterStore(settings=S, clock=Clock(NOW), stale_after_seconds=30.0, pools=POOLS)
    store.replace_all(nodes=[pooled_node("p1", "web"), pooled_node("p2", "web", gpu_type="H100-SXM5-80GB")], pods=[])
    store.set_history({"p1": pulsed(), "p2": idle()}, now=NOW)
    one, two = store.views(["p1", "p2"])[0]
    assert (one.name, one.gpu_type, two.name, two.gpu_type) == ("p1", "A100-SXM4-40GB", "p2", "H100-SXM5-80GB")
    assert one.windows == two.windows


def test_a_pooled_nodes_goodput_windows_close_when_its_pool_fills_whatever_lands_on_it() -> None:
    """The goodput ledger notes p2's windows (8 GPUs free, the pool's forecast) and closes those of more GPUs than
    the pool has free of online pods, though no online pod lands on p2 itself; online pods on p1 close none of
    p1's windows while the pool has room (an offline pod there would not have been evicted)."""
    from offpeak_core.goodput import GoodputSettings
    from offpeak_extender.goodputfeed import GoodputFeed

    clock = Clock(NOW)
    store = make_store(clock=clock)
    feed = GoodputFeed(store=store, settings=GoodputSettings(min_efficiency=0.8, min_samples=20))
    feed.tick()  # a note every 3 steps (30 s): the ticks below, 10 s apart, note nothing new
    assert feed.ledger.open_on("p1") == feed.ledger.open_on("p2") == 8 and feed.counts()[0] == 0
    clock.t += 10.0
    store.upsert_pod(gpu_pod("web-0", gpus=8, node="p1", workload="online"))  # the pool at its peak: 8 of 16 free
    feed.tick()
    assert feed.ledger.open_on("p1") == feed.ledger.open_on("p2") == 8 and feed.counts()[0] == 0
    assert store.online_snapshot()["p1"] == (8, 8, 0)
    clock.t += 10.0
    store.upsert_pod(gpu_pod("web-1", gpus=3, node="p1", workload="online"))  # (the store does not check room)
    assert store.online_snapshot()["p2"] == (8, 0, 3)  # 5 of the pool's 16 GPUs free of online pods
    feed.tick()
    assert feed.ledger.open_on("p2") == feed.ledger.open_on("p1") == 5  # levels 6-8 closed on both, 1-5 open
    assert feed.counts()[0] == 6
    alone = make_store(pools=None)
    alone.upsert_pod(gpu_pod("web-1", gpus=11, node="p1", workload="online"))
    assert alone.online_snapshot()["p2"] == (8, 0, 0)  # without pool windows a node is judged by its own pods


def test_the_goodput_ledger_does_not_note_windows_whose_end_is_known() -> None:
    """A window busy hours (or an announcement) end is judged by that end; noted, it would teach the table that
    forecast windows of its length close on time."""
    from offpeak_core.goodput import GoodputSettings
    from offpeak_extender.goodputfeed import GoodputFeed

    store = make_store()
    store.upsert_node(pooled_node("p2", "web", busy_hours="daily 06:00-07:00"))
    feed = GoodputFeed(store=store, settings=GoodputSettings(min_efficiency=0.8, min_samples=20))
    feed.tick()
    assert feed.ledger.open_on("p2") == 0
    assert feed.ledger.open_on("p1") == 8  # its pool mate's windows end where the forecast says: noted


def test_declared_busy_hours_still_take_a_pooled_nodes_gpus() -> None:
    store = make_store()
    assert most_free(store, "p2") == 8
    store.upsert_node(pooled_node("p2", "web", busy_hours="daily 00:00-24:00"))
    assert most_free(store, "p2") == 0  # no window at all
    assert most_free(store, "p1") == 8  # its pool mate's room is the pool's


def test_a_pooled_nodes_window_that_declared_busy_hours_end_is_known_to_end_there() -> None:
    store = make_store()  # NOW is midnight of the test's short day: busy from a quarter of it
    store.upsert_node(pooled_node("p2", "web", busy_hours="daily 06:00-07:00"))
    (view,), _ = store.views(["p2"])
    first = min((w for w in view.windows or () if w.start <= NOW), key=lambda w: w.end or math.inf)
    assert first.end == NOW + DAY / 4 and first.end_certain
    assert not any(w.end_certain for w in make_store().views(["p2"])[0][0].windows or ())


def test_pools_of_groups_nodes_by_their_label_value() -> None:
    labels = {"a": {LABEL: "x"}, "b": {LABEL: "y"}, "c": {LABEL: "x"}, "d": {}, "e": {LABEL: ""}}
    assert pools_of(labels, LABEL) == {"x": ("a", "c"), "y": ("b",)}


def test_kept_columns_match_a_store_built_afresh_from_the_same_pods() -> None:
    """Random pod changes on pooled nodes and refreshes (each a step later): the columns the store serves equal
    those of a new store given the same pods and history; a pool mate's view not dropped with its pool's usage, or
    a pool's usage counted wrong, fails here."""
    rng = np.random.default_rng(3)
    clock = Clock(NOW)
    nodes = [pooled_node(f"n{i}", "web" if i < 4 else ("api" if i < 6 else None)) for i in range(7)]
    names = [n["metadata"]["name"] for n in nodes]
    store = ClusterStore(settings=S, clock=clock, stale_after_seconds=30.0, pools=POOLS)
    store.replace_all(nodes=nodes, pods=[])
    hist: dict[str, Any] = {n: pulsed(level=float(rng.integers(0, 5))) for n in names}
    fitted_at = NOW
    store.set_history(hist, now=NOW)
    pods: dict[str, dict[str, Any]] = {}
    lists = [names, names[::2], names[3:]]
    for step in range(200):
        kind = rng.choice(["pod", "pod", "unpod", "refit"])
        name = f"p{int(rng.integers(8))}"
        if kind == "pod":
            pod = gpu_pod(name, gpus=int(rng.integers(1, 4)), node=names[int(rng.integers(len(names)))],
                          workload=str(rng.choice(["online", "offline"])))
            if name in pods:
                store.delete_pod(pods[name])  # a pod does not move: it goes and another comes
            pods[name] = pod
            store.upsert_pod(pod)
        elif kind == "unpod" and name in pods:
            store.delete_pod(pods.pop(name))
        elif kind == "refit":
            clock.t += S.step_seconds
            hist = {n: pulsed(level=float(rng.integers(0, 5)), end=clock.t) for n in names}
            fitted_at = clock.t
            store.set_history(hist, now=clock.t)
        fresh = ClusterStore(settings=S, clock=clock, stale_after_seconds=30.0, pools=POOLS)
        fresh.replace_all(nodes=nodes, pods=list(pods.values()))
        fresh.set_history(hist, now=fitted_at)
        for asked in lists:
            arrays, _ = store.node_arrays(asked)
            views, _ = fresh.views(asked)
            assert columns(arrays, clock.t) == columns(NodeArrays.from_views(views), clock.t), (step, kind)


def config(*argv: str) -> Any:
    from offpeak_extender.app import ExtenderConfig
    from offpeak_extender.cli import register

    parser = Parser()
    register(parser.add_subparsers())
    return ExtenderConfig.from_args(parser.parse_args(["extender", *argv]))


def test_the_extender_takes_a_pool_label_and_a_look_back(monkeypatch: pytest.MonkeyPatch) -> None:
    assert config().pools is None
    assert config("--pool-label", LABEL, "--season-seconds", "600").pools == PoolSettings(LABEL, 150.0)
    assert config("--pool-label", LABEL, "--pool-look-back-seconds", "60").pools == PoolSettings(LABEL, 60.0)
    monkeypatch.setenv("OFFPEAK_POOL_LABEL", LABEL)
    assert config().pools == PoolSettings(LABEL, 6 * 3600.0)
    trusted = config("--pool-ceiling-namespaces", "chat, serving,").pools
    assert trusted is not None and trusted.ceiling_namespaces == {"chat", "serving"}


def test_the_evictor_takes_the_same_pool_options_for_its_planned_stops() -> None:
    """Planned stops on a pooled node must see the extender's windows: the pool's, announcements included."""
    from offpeak_extender.app import forecast_settings, pool_settings
    from offpeak_extender.cli import register

    parser = Parser()
    register(parser.add_subparsers())
    args = parser.parse_args(["evictor", "--yield-at-checkpoints", "--pool-label", LABEL, "--season-seconds", "600"])
    assert pool_settings(args, forecast_settings(args)) == PoolSettings(LABEL, 150.0)
    args = parser.parse_args(["evictor", "--yield-at-checkpoints", "--pool-label", LABEL, "--season-seconds", "600",
                              "--pool-ceiling-namespaces", "chat"])
    assert pool_settings(args, forecast_settings(args)) == PoolSettings(LABEL, 150.0, frozenset({"chat"}))
    args = parser.parse_args(["evictor"])
    assert pool_settings(args, forecast_settings(args)) is None


def test_a_look_back_of_zero_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from offpeak.cli import main

    assert main(["extender", "--pool-label", LABEL, "--pool-look-back-seconds", "0"]) == 2
    assert "--pool-look-back-seconds must be > 0" in capsys.readouterr().err


class CountingSource:
    """The pool's history as Prometheus would return it, counting the refits that asked for it."""

    def __init__(self) -> None:
        self.fetches = 0

    def fetch(self, *, start: float, end: float, step: float) -> dict[str, Any]:
        self.fetches += 1
        return {"p1": pulsed(), "p2": idle(), "solo": idle()}


def test_a_pool_change_asks_the_refresher_for_an_early_refit_and_a_refit_answers_it() -> None:
    store = make_store()
    refresher = Refresher(store=store, source=CountingSource(), metrics=None, refresh_seconds=60.0)
    refresher.refresh_once()
    assert not store.pools_changed.is_set()
    assert not refresher.refresh_due(now=100.0, next_refresh=150.0, last_refresh=50.0)  # nothing changed
    store.upsert_node(pooled_node("solo", "web"))  # solo joins the pool: its fit goes, its nodes use their own
    assert store.pools_changed.is_set() and most_free(store, "p2") == 8
    assert not refresher.refresh_due(now=100.0, next_refresh=150.0, last_refresh=100.0 - POOL_REFIT_GAP_SECONDS / 2)
    assert refresher.refresh_due(now=100.0, next_refresh=150.0, last_refresh=100.0 - POOL_REFIT_GAP_SECONDS)
    store.upsert_pod(gpu_pod("train-0", gpus=4, node="p1"))
    store.upsert_pod(gpu_pod("train-1", gpus=8, node="solo"))
    assert most_free(store, "p2") == 8  # p2's own windows, blind to the pool
    refresher.refresh_once()
    assert not store.pools_changed.is_set()
    assert most_free(store, "p2") == 4  # the pool of three is fitted: 24 GPUs less p1's 8 online and 12 offline
    store.upsert_pod(gpu_pod("web-0", gpus=1, node="p2", workload="online"))  # a pod moves no pool's nodes
    assert not store.pools_changed.is_set()


def test_the_refresher_refits_soon_after_a_node_joins_a_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history, "POOL_REFIT_GAP_SECONDS", 0.0)
    monkeypatch.setattr(history, "POOL_CHANGE_POLL_SECONDS", 0.05)
    store = make_store()
    store.synced = True
    source = CountingSource()
    refresher = Refresher(store=store, source=source, metrics=None, refresh_seconds=3600.0)
    refresher.start()
    try:
        deadline = time.monotonic() + 10
        while source.fetches < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        store.upsert_node(pooled_node("solo", "web"))
        while source.fetches < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert source.fetches == 2  # the second refit came for the pool, an hour before its period
    finally:
        refresher.stop()
