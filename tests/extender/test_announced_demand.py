"""Announced online demand in the extender: OnlineDemand objects (crds/onlinedemands.offpeak.io.yaml) are a floor
under a pool's forecast online demand, so a pooled node's windows end at an announced scale-up, and stay there as
time passes (what a planned stop needs), and the informer keeps them current."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import jsonschema
import numpy as np
import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from offpeak_core.announcements import announcement_from_object
from offpeak_extender.kube import Informer
from offpeak_extender.store import ClusterStore

from support import REPO
from support.clock import Clock

from .k8s_objects import gpu_pod
from .test_pool_windows import NOW, POOLS, S, idle, pooled_node, pulsed

CRD = yaml.safe_load((REPO / "crds" / "onlinedemands.offpeak.io.yaml").read_text())
EXAMPLES = sorted((REPO / "examples" / "onlinedemands").glob("*.yaml"))


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def demand(name: str, *, pool: str = "web", gpus: int, start: float, end: float,
           at_most: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"pool": pool, "gpus": gpus, "start": iso(start), "end": iso(end)}
    if at_most is not None:
        spec["poolGpusAtMost"] = at_most
    return {"apiVersion": "offpeak.io/v1alpha1", "kind": "OnlineDemand",
            "metadata": {"namespace": "online", "name": name, "resourceVersion": "1"}, "spec": spec}


def quiet_store(clock: Clock) -> ClusterStore:
    """Pool `web` of w1 and w2 (16 GPUs) whose online demand has always been 0: by its history alone, every
    window of up to 16 GPUs stays open for the whole horizon."""
    store = ClusterStore(settings=S, clock=clock, stale_after_seconds=30.0, pools=POOLS)
    store.replace_all(nodes=[pooled_node("w1", "web"), pooled_node("w2", "web"), pooled_node("solo", None)],
                      pods=[])
    store.set_history({"w1": idle(end=clock()), "w2": idle(end=clock()), "solo": idle(end=clock())}, now=clock())
    return store


def end_for(store: ClusterStore, node: str, gpus: int) -> float | None:
    """When the node's window of `gpus` GPUs open now ends (None: not within the horizon)."""
    (view,), _ = store.views([node])
    fits = [w for w in view.windows or () if w.free_gpus >= gpus and w.start <= store.clock()]
    assert fits, f"no window of {gpus} GPUs open now on {node}"
    return None if any(w.end is None for w in fits) else max(w.end for w in fits if w.end is not None)


def test_an_announced_scale_up_ends_a_pooled_nodes_window_where_it_starts_and_that_end_stays_put() -> None:
    clock = Clock(NOW)
    store = quiet_store(clock)
    assert end_for(store, "w2", 8) is None
    store.upsert_announcement(demand("batch", gpus=12, start=NOW + 100, end=NOW + 200))
    end = end_for(store, "w2", 8)  # 12 of 16 announced leave 4: a window of 8 ends at the step before 100 s
    assert end is not None and NOW + 100 - S.step_seconds <= end <= NOW + 100
    assert end_for(store, "w2", 4) is None  # 4 GPUs stay free through it
    assert end_for(store, "solo", 8) is None  # a node in no pool is not in any pool's announcement
    clock.t += 20.0  # (within the forecast's 30 s of freshness)
    store.rebuild_views()
    assert end_for(store, "w2", 8) == end  # the end does not move on with now: a planned stop can meet it
    assert store.held_window_end("w2", held=8) == end  # what the evictor's planned stops ask
    assert store.held_window("w2", held=8) == (end, True)  # announced: its planned stop says so
    store.upsert_announcement(demand("other", gpus=3, start=NOW + 60, end=NOW + 300))  # in force together: 15
    assert end_for(store, "w2", 4) is not None
    store.delete_announcement(demand("batch", gpus=12, start=NOW + 100, end=NOW + 200))
    store.delete_announcement(demand("other", gpus=3, start=NOW + 60, end=NOW + 300))
    assert end_for(store, "w2", 8) is None  # at once, without a refresh


def test_a_window_an_announcement_ends_is_known_to_end_there() -> None:
    """The goodput rule must not take an announced end for a forecast one that may well be outlasted."""
    clock = Clock(NOW)
    store = quiet_store(clock)
    store.upsert_announcement(demand("batch", gpus=12, start=NOW + 100, end=NOW + 200))
    (view,), _ = store.views(["w2"])
    open_now = [w for w in view.windows or () if w.start <= NOW]
    assert {(w.free_gpus, w.end_certain) for w in open_now if w.end is not None} == {(8, True)}
    assert all(not w.end_certain for w in open_now if w.end is None)  # the 4 GPUs the announcement leaves
    store.delete_announcement(demand("batch", gpus=12, start=NOW + 100, end=NOW + 200))
    (view,), _ = store.views(["w2"])
    assert not any(w.end_certain for w in view.windows or ())


def test_an_announcement_never_lengthens_a_window_the_pools_history_shortens() -> None:
    """A floor: an announcement of less than the pool's forecast demand changes nothing."""
    clock = Clock(NOW)
    store = quiet_store(clock)
    store.upsert_pod(gpu_pod("web-0", gpus=10, node="w1", workload="online"))  # 10 online now: 6 left
    before = store.views(["w2"])[0][0].windows
    store.upsert_announcement(demand("small", gpus=2, start=NOW, end=NOW + 300))
    assert store.views(["w2"])[0][0].windows == before
    assert store.announced("web")[0].gpus == 2


def test_a_stated_ceiling_opens_the_room_the_pools_rises_would_take_while_it_covers_them() -> None:
    """Pool q's total rose from 0 to 16 of its 24 GPUs in a third of its idle stretches, so by its history alone a
    window for more than 4 GPUs on q2 (4 are held offline on q1) ends within 100 s. Its owner says the pool holds
    at most 8 online GPUs for the next 200 s: 8 GPUs of q2 stay free until then, no longer, and a ceiling above what
    the rises reach changes nothing. Only from a namespace the operator trusts (`--pool-ceiling-namespaces`)."""
    now = NOW - NOW % 300 + 290
    plan = {"name": "plan", "pool": "q", "gpus": 1, "start": now - 10, "end": now + 200}
    for trusted in (frozenset(), frozenset({"online"})):
        pools = replace(POOLS, ceiling_namespaces=trusted)
        store = ClusterStore(settings=S, clock=Clock(now), stale_after_seconds=30.0, pools=pools)
        store.replace_all(nodes=[pooled_node(n, "q") for n in ("q1", "q2", "q3")],
                          pods=[gpu_pod("train-0", gpus=4, node="q1")])
        busy = pulsed(period=300.0, on=50.0, end=now)
        store.set_history({"q1": busy, "q2": idle(end=now), "q3": busy}, now=now)
        before = store.views(["q2"])[0][0].windows
        end = end_for(store, "q2", 5)
        assert end is not None and end - now <= 100
        store.upsert_announcement(demand(**plan, at_most=8))
        if not trusted:  # a namespace the operator did not name: a floor only, the ceiling dropped
            assert store.announced("q")[0].pool_gpus_at_most is None
            assert store.views(["q2"])[0][0].windows == before
            continue
        end = end_for(store, "q2", 8)
        assert end is not None and now + 200 - S.step_seconds <= end <= now + 200
        store.upsert_announcement(demand(**plan, at_most=20))
        assert store.views(["q2"])[0][0].windows == before


def test_an_unusable_or_another_pools_announcement_changes_nothing_and_an_unusable_update_withdraws_it() -> None:
    clock = Clock(NOW)
    store = quiet_store(clock)
    store.upsert_announcement(demand("elsewhere", pool="batch", gpus=16, start=NOW, end=NOW + 300))
    bad = demand("bad", gpus=16, start=NOW, end=NOW + 300)
    bad["spec"]["end"] = "soon"
    store.upsert_announcement(bad)
    assert end_for(store, "w2", 8) is None and store.announced("web") == ()
    store.upsert_announcement(demand("batch", gpus=16, start=NOW + 100, end=NOW + 300))
    assert end_for(store, "w2", 8) is not None
    broken = demand("batch", gpus=16, start=NOW + 100, end=NOW + 300)
    broken["spec"]["gpus"] = 0
    store.upsert_announcement(broken)  # what it said before no longer stands
    assert end_for(store, "w2", 8) is None


def test_announcements_that_are_over_go_at_the_next_refresh() -> None:
    clock = Clock(NOW)
    store = quiet_store(clock)
    store.replace_announcements([demand("brief", gpus=16, start=NOW + 20, end=NOW + 40)])
    assert len(store.announced("web")) == 1
    clock.t += 60.0
    store.set_history({"w1": idle(end=clock()), "w2": idle(end=clock()), "solo": idle(end=clock())}, now=clock())
    assert store.announced("web") == () and end_for(store, "w2", 8) is None


def test_the_informer_lists_and_watches_onlinedemands_into_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock(NOW)
    store = quiet_store(clock)
    informer = Informer(api_client=client.ApiClient(), store=store, announcements=True)
    assert informer.kinds == ("nodes", "pods", "onlinedemands")
    listed = demand("listed", gpus=16, start=NOW + 100, end=NOW + 300)
    added = demand("added", gpus=1, start=NOW + 100, end=NOW + 300)
    calls: list[tuple[Any, ...]] = []

    class ScriptedWatch:
        def stream(self, func: Any, *args: Any, **kw: Any) -> Any:
            calls.append(args)
            yield {"type": "ADDED", "object": added}
            yield {"type": "DELETED", "object": listed}

        def stop(self) -> None:
            pass

    monkeypatch.setattr(watch, "Watch", ScriptedWatch)

    def lister(*args: Any, **kw: Any) -> dict[str, Any]:
        calls.append(args)
        return {"metadata": {"resourceVersion": "9"}, "items": [listed]}

    informer._list_and_watch("onlinedemands", lister, "offpeak.io", "v1alpha1", "onlinedemands")
    assert calls == [("offpeak.io", "v1alpha1", "onlinedemands")] * 2
    assert [a.name for a in store.announced("web")] == ["online/added"]


def test_without_the_crd_the_informer_says_so_once_and_looks_again_later(monkeypatch: pytest.MonkeyPatch,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    store = ClusterStore(settings=S, pools=POOLS)
    informer = Informer(api_client=client.ApiClient(), store=store, announcements=True,
                        missing_crd_retry_seconds=0.0)
    tries = []

    def missing(*args: Any, **kw: Any) -> Any:
        tries.append(args)
        if len(tries) == 3:
            informer.stop()
        raise ApiException(status=404, reason="Not Found")

    monkeypatch.setattr(informer, "_lister", lambda kind: (missing, ("offpeak.io", "v1alpha1", "onlinedemands")))
    informer._run("onlinedemands")
    assert len(tries) == 3
    assert sum("no OnlineDemand resource" in r.getMessage() for r in caplog.records) == 1


def test_the_informer_reads_onlinedemands_only_with_pool_windows() -> None:
    assert Informer(api_client=client.ApiClient(), store=ClusterStore(settings=S)).kinds == ("nodes", "pods")


def test_the_crd_schema_takes_the_examples_and_refuses_what_the_extender_could_not_use() -> None:
    (version,) = CRD["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    rules = [v["rule"] for v in spec["x-kubernetes-validations"]]
    assert rules == ["self.end > self.start", "!has(self.poolGpusAtMost) || self.poolGpusAtMost >= self.gpus"]
    plain = {k: v for k, v in schema.items()}
    plain["properties"] = {"spec": {k: v for k, v in spec.items() if not k.startswith("x-kubernetes")}}
    assert EXAMPLES
    for path in EXAMPLES:
        doc = yaml.safe_load(path.read_text())
        jsonschema.validate(doc, plain, format_checker=jsonschema.FormatChecker())
        assert announcement_from_object(doc).gpus >= 1
    good = demand("x", gpus=1, start=NOW, end=NOW + 60)
    for field, value in (("gpus", 0), ("pool", ""), ("start", None), ("poolGpusAtMost", 0)):
        bad = {**good, "spec": {**good["spec"], field: value}}
        if value is None:
            del bad["spec"][field]
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, plain)
    assert np.isfinite(announcement_from_object(good).end)
