"""Eviction planning (pure) and one controller tick against a real store with fake Kubernetes actions."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from offpeak.cliargs import Parser
from offpeak_core.evictions import NodeState, plan_for_pending, plan_for_pressure
from offpeak_extender.evictor import Evictor, EvictorSettings
from offpeak_core.forecast import ForecastSettings
from offpeak_extender.metrics import EvictorMetrics
from offpeak_core.model import NodeView, OfflinePod
from offpeak_extender.store import ClusterStore

from .k8s_objects import gpu_node, gpu_pod

NOW = 1_795_000_000.0  # 2026-11-19, after the pods' start times


def state(name: str, free: int, pods: list[OfflinePod], total: int = 4, releasing: int = 0) -> NodeState:
    return NodeState(view=NodeView(name, "T4", total, free), offline_pods=tuple(pods), releasing_gpus=releasing)


def test_pending_picks_node_losing_least_work() -> None:
    nodes = {
        "a": state("a", 0, [OfflinePod("big-work", gpus=2, elapsed_seconds=5000, uid="1")]),
        "b": state("b", 1, [OfflinePod("little-work", gpus=1, elapsed_seconds=100, uid="2")]),
    }
    plan = plan_for_pending(pod_key="web/api-0", gpus=2, candidates=["a", "b"], nodes=nodes)
    assert plan is not None and plan.node == "b" and [v.name for v in plan.victims] == ["little-work"]
    assert "web/api-0" in plan.message and plan.gpu_seconds_lost == 100


def test_pending_no_eviction_when_room_exists_or_is_releasing() -> None:
    pods = [OfflinePod("x", gpus=2, elapsed_seconds=10, uid="1")]
    assert plan_for_pending(pod_key="p", gpus=2, candidates=["a", "b"],
                            nodes={"a": state("a", 0, pods), "b": state("b", 2, [])}) is None
    assert plan_for_pending(pod_key="p", gpus=2, candidates=["a"], nodes={"a": state("a", 0, pods, releasing=2)}) is None


def test_pending_impossible_returns_none() -> None:
    nodes = {"a": state("a", 0, [OfflinePod("x", gpus=1, uid="1")]), "tiny": state("tiny", 0, [], total=1)}
    assert plan_for_pending(pod_key="p", gpus=3, candidates=["a", "tiny"], nodes=nodes) is None


def test_pressure_evicts_when_measured_online_outgrows_node() -> None:
    s = state("a", 0, [OfflinePod("ck", gpus=1, checkpointing=True, elapsed_seconds=9e4, uid="1"),
                       OfflinePod("nock", gpus=1, elapsed_seconds=10, uid="2")])
    assert plan_for_pressure(state=s, measured_online=2.0, requested_online=2) is None
    plan = plan_for_pressure(state=s, measured_online=2.4, requested_online=2)
    assert plan is not None and [v.name for v in plan.victims] == ["ck"]
    assert "rose to 2.4 of 4" in plan.message


def test_a_measurement_does_not_evict_a_pod_placed_after_it_could_have_been_taken() -> None:
    """Online pods just left the node; the agent's last figure still shows their 4 GPUs. The offline pod placed
    into them 5 s ago is not evicted by it; one that has run past the settle period is."""
    young = state("a", 0, [OfflinePod("new", gpus=4, checkpointing=True, elapsed_seconds=5, uid="1")])
    assert plan_for_pressure(state=young, measured_online=4.0, requested_online=0, settle_seconds=60) is None
    plan = plan_for_pressure(state=young, measured_online=4.0, requested_online=0)  # no settle period: evicted
    assert plan is not None and [v.name for v in plan.victims] == ["new"]
    mixed = state("a", 0, [OfflinePod("old", gpus=2, elapsed_seconds=600, uid="1"),
                           OfflinePod("new", gpus=2, elapsed_seconds=5, uid="2")])
    plan = plan_for_pressure(state=mixed, measured_online=3.0, requested_online=0, settle_seconds=60)
    assert plan is not None and [v.name for v in plan.victims] == ["old"]  # 3 + 2 > 4: the settled pod's GPUs


class FakeActions:
    def __init__(self, fail: set[str] | None = None) -> None:
        self.calls: list[tuple[str, str, object]] = []
        self.fail = fail or set()

    def annotate(self, pod: OfflinePod, reason: str, planned: bool = False) -> None:
        self.calls.append(("annotate", pod.key, reason))
        if planned:
            self.calls.append(("planned-stop", pod.key, True))

    def event(self, pod: OfflinePod, plan: object) -> None:
        if "event" in self.fail:
            raise RuntimeError("403 events is forbidden")
        self.calls.append(("event", pod.key, pod.trainingjob))

    def evict(self, pod: OfflinePod, grace_seconds: int) -> None:
        if pod.name in self.fail:
            raise RuntimeError("429 disruption budget")
        self.calls.append(("evict", pod.key, grace_seconds))


def unschedulable(pod: dict) -> dict:
    pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    return pod


def make(actions: FakeActions, measured: dict[str, float] | None = None) -> tuple[Evictor, CollectorRegistry, ClusterStore]:
    store = ClusterStore(settings=ForecastSettings(), clock=lambda: NOW)
    online = unschedulable(gpu_pod("api-0", gpus=2, workload="online", phase="Pending", namespace="web"))
    online["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    store.replace_all(
        nodes=[gpu_node("n1", gpus=4), gpu_node("n2", gpus=4)],
        pods=[
            gpu_pod("resnet-0", gpus=2, node="n1", start="2026-11-18T00:00:00Z"),
            gpu_pod("bert-0", gpus=2, node="n1", checkpointing=True, start="2026-11-18T00:00:00Z"),
            gpu_pod("gpt-0", gpus=4, node="n2", start="2026-11-18T10:00:00Z"),
            online,
        ],
    )
    registry = CollectorRegistry()
    ev = Evictor(store=store, actions=actions, metrics=EvictorMetrics.create(registry),
                 settings=EvictorSettings(grace_seconds=15), clock=lambda: NOW,
                 measured_online=(lambda: measured) if measured is not None else None)
    return ev, registry, store


def test_tick_evicts_checkpointing_pod_on_pinned_node_and_counts() -> None:
    actions = FakeActions()
    ev, reg, store = make(actions)
    plans = ev.tick()
    assert [(p.node, [v.name for v in p.victims]) for p in plans] == [("n1", ["bert-0"])]
    assert [c[0] for c in actions.calls] == ["annotate", "event", "evict"]
    assert actions.calls[1] == ("event", "ml/bert-0", "bert")
    assert actions.calls[2] == ("evict", "ml/bert-0", 15)
    assert reg.get_sample_value("offpeak_evictions_total", {"reason": "online-pod-pending"}) == 1.0
    assert reg.get_sample_value("offpeak_evicted_gpu_seconds_lost_total") > 0
    # next tick: the victim is still running (watch lag) but counts as releasing -> no second eviction
    assert ev.tick() == []


def test_tick_failed_eviction_counted_and_retried() -> None:
    actions = FakeActions(fail={"bert-0"})
    ev, reg, store = make(actions)
    ev.tick()
    assert reg.get_sample_value("offpeak_eviction_failures_total", {"reason": "online-pod-pending"}) == 1.0
    assert len(ev.tick()) == 1  # not remembered as evicted: planned again


def test_tick_pressure_from_measured_online() -> None:
    actions = FakeActions()
    ev, reg, store = make(actions, measured={"n2": 1.0, "unknown-node": 3.0})
    plans = ev.tick()
    assert {p.reason for p in plans} == {"online-pod-pending", "online-demand-rising"}
    assert ("evict", "ml/gpt-0", 15) in actions.calls


def test_kube_actions_build_valid_api_objects() -> None:
    """Real kubernetes client models, API calls captured (no server): annotation, Event on TrainingJob, Eviction."""
    from kubernetes import client

    from offpeak_core.evictions import EvictionPlan
    from offpeak_extender.evictor import KubeEvictionActions

    api = client.ApiClient()
    actions = KubeEvictionActions(api)
    calls: dict[str, tuple] = {}
    actions.core.patch_namespaced_pod = lambda *a: calls.setdefault("patch", a)  # type: ignore[method-assign]
    actions.core.create_namespaced_event = lambda *a: calls.setdefault("event", a)  # type: ignore[method-assign]
    actions.core.create_namespaced_pod_eviction = lambda *a: calls.setdefault("evict", a)  # type: ignore[method-assign]
    actions.custom.get_namespaced_custom_object = (  # type: ignore[method-assign]
        lambda *a: {"metadata": {"uid": "tj-uid"}})
    pod = OfflinePod("bert-0", namespace="ml", gpus=2, trainingjob="bert", uid="p-uid")
    plan = EvictionPlan(node="n1", victims=(pod,), reason="online-pod-pending", message="make room for web/api-0")
    actions.annotate(pod, plan.message)
    actions.event(pod, plan)
    actions.evict(pod, 15)
    assert calls["patch"][:2] == ("bert-0", "ml")
    assert calls["patch"][2]["metadata"]["annotations"]["offpeak.io/eviction-reason"] == "make room for web/api-0"
    ns, event = calls["event"]
    wire = api.sanitize_for_serialization(event)
    assert ns == "ml" and wire["involvedObject"] == {
        "apiVersion": "offpeak.io/v1alpha1", "kind": "TrainingJob", "name": "bert", "namespace": "ml", "uid": "tj-uid"}
    assert wire["reason"] == "OfflinePodEvicted" and "bert-0" in wire["message"]
    name, ns, eviction = calls["evict"]
    wire = api.sanitize_for_serialization(eviction)
    assert (name, ns) == ("bert-0", "ml") and wire["deleteOptions"]["gracePeriodSeconds"] == 15


def test_event_failure_does_not_block_eviction() -> None:
    actions = FakeActions(fail={"event"})
    ev, reg, store = make(actions)
    ev.tick()
    assert [c[0] for c in actions.calls] == ["annotate", "evict"]
    assert reg.get_sample_value("offpeak_evictions_total", {"reason": "online-pod-pending"}) == 1.0


def _rfc3339(t: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _planned_stop_store(interval: float, started: float, *, save_on_stop: str | None = None,
                        now: float = NOW) -> ClusterStore:
    """Node n1 (4 GPUs) is declared busy from 12:00 UTC, 53 min after NOW (11:06:40); a checkpointing 2-GPU pod
    with `interval` s between checkpoints started at `started` runs there beside a pod that cannot checkpoint.
    `save_on_stop`: its offpeak.io/save-on-stop-seconds annotation."""
    store = ClusterStore(settings=ForecastSettings(), clock=lambda: now)
    ck = gpu_pod("ck-0", gpus=2, node="n1", checkpointing=True, start=_rfc3339(started),
                 predicted={"A100-SXM4-40GB": {"p50": 5e4, "p90": 6e4}})
    ck["metadata"]["annotations"]["offpeak.io/checkpoint-interval-seconds"] = str(interval)
    if save_on_stop is not None:
        ck["metadata"]["annotations"]["offpeak.io/save-on-stop-seconds"] = save_on_stop
    store.replace_all(nodes=[gpu_node("n1", gpus=4, busy_hours="daily 12:00-18:00")],
                      pods=[ck, gpu_pod("plain-0", gpus=1, node="n1", start=_rfc3339(NOW - 5000))])
    return store


def _yielding(store: ClusterStore, actions: FakeActions, on: bool = True,
              now: float = NOW) -> tuple[Evictor, CollectorRegistry]:
    registry = CollectorRegistry()
    return Evictor(store=store, actions=actions, metrics=EvictorMetrics.create(registry), clock=lambda: now,
                   settings=EvictorSettings(grace_seconds=15, yield_at_checkpoints=on)), registry


def test_a_pod_at_its_last_checkpoint_before_the_window_ends_is_stopped_and_loses_nothing() -> None:
    # 60 s start-up, then a checkpoint every hour: one was taken just now, the next (NOW + 3600) would come after
    # the busy hours begin (12:00 = NOW + 3200, inside the forecast's 5-min step from NOW + 3000, which they make
    # busy: the window ends at NOW + 3000), so it stops now rather than be evicted at 12:00 with ~53 min lost
    store = _planned_stop_store(interval=3600, started=NOW - 60 - 3600)
    assert store.held_window_end("n1", now=NOW) == NOW + 3000
    (ck,) = [p for p in store.offline_pods_on("n1", now=NOW) if p.name == "ck-0"]
    assert ck.checkpoint_interval_seconds == 3600 and ck.finish_by == NOW - 3660 + 6e4
    actions = FakeActions()
    ev, reg = _yielding(store, actions)
    plans = ev.tick()
    assert [(p.node, p.reason, [v.name for v in p.victims]) for p in plans] == [("n1", "window-ending", ["ck-0"])]
    assert "no work is lost" in plans[0].message and "in 50m" in plans[0].message
    assert "scheduled (announced demand or busy hours) to need" in plans[0].message  # the busy hours, not a forecast
    assert store.held_window("n1", now=NOW) == (NOW + 3000, True)
    (view,), _ = store.views(["n1"], now=NOW)
    ending = [w for w in view.windows or () if w.start <= NOW and w.end == NOW + 3000]
    assert ending and all(w.end_certain for w in ending)  # the goodput rule judges it by that end
    assert ("evict", "ml/ck-0", 15) in actions.calls and not any(c[1] == "ml/plain-0" for c in actions.calls)
    assert ("planned-stop", "ml/ck-0", True) in actions.calls  # so the operator does not count the attempt
    assert reg.get_sample_value("offpeak_evictions_total", {"reason": "window-ending"}) == 1.0
    assert reg.get_sample_value("offpeak_evicted_gpu_seconds_lost_total") < 1.0
    assert ev.tick() == []  # stopping: not planned twice


def test_a_pod_that_saves_on_stop_runs_until_its_save_must_begin_and_gets_the_time_for_it() -> None:
    # busy from 12:00 (NOW + 3200; the window ends at the start of the forecast's 5-min step that holds it); the
    # pod is half an hour past an hourly checkpoint and saves within 300 s when told to stop: not stopped 50 min
    # ahead (a periodic-only pod would wait for a checkpoint it cannot reach), but once the next look would leave it
    # less than its save before the window's end less the margin, with 300 s of grace, losing nothing
    started = NOW - 60 - 5400
    for now, stops in ((NOW, False), (NOW + 2640, True)):
        store = _planned_stop_store(3600, started, save_on_stop="300", now=now)
        end, known = store.held_window("n1", now=now)  # the start of the 5-min step (from `now`) holding 12:00
        assert known and NOW + 3200 - 300 < end <= NOW + 3200
        (ck,) = [p for p in store.offline_pods_on("n1", now=now) if p.name == "ck-0"]
        assert ck.save_on_stop_seconds == 300.0
        actions = FakeActions()
        plans = _yielding(store, actions, now=now)[0].tick()
        if not stops:
            assert plans == [] and actions.calls == []
            continue
        assert [(p.reason, [v.name for v in p.victims]) for p in plans] == [("window-ending", ["ck-0"])]
        assert plans[0].message.startswith("stopping to save:") and "no work is lost" in plans[0].message
        assert plans[0].gpu_seconds_lost == 0.0
        assert ("evict", "ml/ck-0", 300) in actions.calls  # its save time, not the evictor's 15 s
    # without the annotation the same pod, off its checkpoint, is not stopped at all
    store = _planned_stop_store(3600, started, now=NOW + 2640)
    assert _yielding(store, FakeActions(), now=NOW + 2640)[0].tick() == []


def test_no_planned_stop_off_a_checkpoint_when_the_next_one_fits_or_when_not_asked() -> None:
    for interval, started in ((3600, NOW - 60 - 3600 - 300),  # 5 min past its checkpoint: wait for the next
                              (1800, NOW - 60 - 1800)):  # its next one (NOW + 1800) comes before the busy hours
        actions = FakeActions()
        assert _yielding(_planned_stop_store(interval, started), actions)[0].tick() == [] and actions.calls == []
    actions = FakeActions()
    assert _yielding(_planned_stop_store(3600, NOW - 3660), actions, on=False)[0].tick() == []


def test_kube_actions_mark_a_planned_stop_for_the_operator() -> None:
    from kubernetes import client

    from offpeak_extender.evictor import KubeEvictionActions

    actions = KubeEvictionActions(client.ApiClient())
    patches: list[tuple] = []
    actions.core.patch_namespaced_pod = lambda *a: patches.append(a)  # type: ignore[method-assign]
    pod = OfflinePod("ck-0", namespace="ml", uid="u")
    actions.annotate(pod, "stopping at a checkpoint", planned=True)
    actions.annotate(pod, "make room")
    assert patches[0][2]["metadata"]["annotations"] == {"offpeak.io/eviction-reason": "stopping at a checkpoint",
                                                        "offpeak.io/planned-stop": "true"}
    assert patches[1][2]["metadata"]["annotations"] == {"offpeak.io/eviction-reason": "make room"}


def test_a_pod_started_later_does_not_make_an_earlier_one_stop() -> None:
    """Online work is forecast to take 2 of n1's 4 GPUs from 12:00 (53 min after NOW) every day: the pod that
    started first (2 GPUs) keeps its window; the one admitted later into the other 2 is the one whose window ends."""
    import numpy as np

    store = ClusterStore(settings=ForecastSettings(), clock=lambda: NOW)
    pods = []
    for name, started in (("early-0", NOW - 60 - 2 * 3600), ("late-0", NOW - 60 - 3600)):  # both at a checkpoint
        pod = gpu_pod(name, gpus=2, node="n1", checkpointing=True, start=_rfc3339(started))
        pod["metadata"]["annotations"]["offpeak.io/checkpoint-interval-seconds"] = "3600"
        pods.append(pod)
    store.replace_all(nodes=[gpu_node("n1", gpus=4)], pods=pods)
    t = np.arange(NOW - 14 * 86400, NOW, 300.0)
    hour = (t % 86400) / 3600
    store.set_history({"n1": (t, np.where((hour >= 12) & (hour < 18), 2.0, 0.0))}, now=NOW)
    assert store.held_window_end("n1", held=2, now=NOW) is None
    assert store.held_window_end("n1", held=4, now=NOW) == store.held_window_end("n1", now=NOW) is not None
    actions = FakeActions()
    plans = _yielding(store, actions)[0].tick()
    assert [[v.name for v in p.victims] for p in plans] == [["late-0"]]


def _parse(*argv: str):
    from offpeak_extender.cli import register

    parser = Parser()
    register(parser.add_subparsers())
    return parser.parse_args(list(argv))


def test_the_evictor_forecasts_with_the_extenders_options_for_planned_stops() -> None:
    from offpeak_extender.app import forecast_settings

    flags = ("--season-seconds", "240", "--step-seconds", "2.5", "--history-days", "4", "--quantile", "0.8")
    evictor = _parse("evictor", "--yield-at-checkpoints", "--yield-margin-seconds", "10", "--startup-seconds", "3",
                     *flags)
    extender = _parse("extender", *flags)
    assert forecast_settings(evictor) == forecast_settings(extender)
    assert forecast_settings(evictor).season_seconds == 240 and forecast_settings(evictor).step_seconds == 2.5
    assert (evictor.yield_margin_seconds, evictor.startup_seconds) == (10, 3)


def test_a_negative_yield_margin_is_refused() -> None:
    import pytest

    from offpeak.errors import UserError
    from offpeak_extender.cli import run_evictor

    with pytest.raises(UserError, match="--yield-margin-seconds must be >= 0"):
        run_evictor(_parse("evictor", "--yield-margin-seconds", "-1"))
