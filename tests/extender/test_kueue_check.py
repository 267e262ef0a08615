"""Kueue admission check: the pure answers (kueuecheck) and one controller sweep against a real store and service."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from offpeak_core.kueue import flavor_node_labels
from offpeak_core.model import FilterResult, NodeView, PodRequest, Prediction
from offpeak_extender import kueuecheck
from offpeak_extender.kueuecontroller import KueueAdmissionCheck
from offpeak_extender.metrics import ExtenderMetrics
from offpeak_extender.service import DecisionSettings, ExtenderService

from support.clock import Clock

from .test_http import NOW, make_store

NOW_TEXT = "2026-11-23T22:00:00Z"


def admission_check(name: str, controller: str = kueuecheck.CONTROLLER_NAME, active: bool = False) -> dict[str, Any]:
    status = {"conditions": [{"type": "Active", "status": "True", "reason": "Active", "message": "",
                              "lastTransitionTime": NOW_TEXT}]} if active else {}
    return {"metadata": {"name": name, "generation": 1}, "spec": {"controllerName": controller}, "status": status}


def job(name: str, *, p90: float | None, offline: bool = True, gpus: int = 1, parallelism: int = 1,
        gpu_types: tuple[str, ...] = ()) -> dict[str, Any]:
    ann = {}
    if p90 is not None:
        ann["offpeak.io/predicted-job-seconds"] = json.dumps({"A100-SXM4-40GB": {"p50": p90 / 1.2, "p90": p90}})
    spec: dict[str, Any] = {"schedulerName": "offpeak-scheduler", "containers": [
        {"name": "main", "image": "train:1", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}
    if gpu_types:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "offpeak.io/gpu-type", "operator": "In", "values": list(gpu_types)}]}]}}}
    labels = {"offpeak.io/offline": "true"} if offline else {}
    return {"metadata": {"name": name, "namespace": "ml"},
            "spec": {"parallelism": parallelism, "suspend": True,
                     "template": {"metadata": {"labels": labels, "annotations": ann}, "spec": spec}}}


def workload(name: str, *, job_name: str | None, state: str = "Pending", reserved: bool = True,
             count: int = 1, check: str = "offpeak-window") -> dict[str, Any]:
    refs = [{"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": "u1"}] if job_name else []
    conditions = [{"type": "QuotaReserved", "status": "True" if reserved else "False"}]
    return {
        "metadata": {"name": name, "namespace": "ml", "ownerReferences": refs},
        "spec": {"podSets": [{"name": "main", "count": count, "template": {"metadata": {}, "spec": {}}}]},
        "status": {"conditions": conditions, "admissionChecks": [
            {"name": check, "state": state, "message": "", "lastTransitionTime": "2026-11-23T21:00:00Z"},
            {"name": "other-check", "state": "Pending", "message": "", "lastTransitionTime": NOW_TEXT}]},
    }


# --- the pure answers ---------------------------------------------------------------------------------------------


def test_only_checks_naming_offpeaks_controller_are_ours_and_marked_active_once() -> None:
    checks = [admission_check("offpeak-window"), admission_check("prov", controller="kueue.x-k8s.io/provisioning")]
    assert kueuecheck.our_checks(checks) == ["offpeak-window"]
    patch = kueuecheck.active_patch(checks[0], now=NOW_TEXT)
    assert patch is not None
    [cond] = patch["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("Active", "True", "Active")
    assert kueuecheck.active_patch(admission_check("x", active=True), now=NOW_TEXT) is None


def test_a_check_is_asked_only_after_quota_is_reserved_and_only_while_pending() -> None:
    ours = ["offpeak-window"]
    [pending] = kueuecheck.pending_checks(workload("w", job_name="j"), ours)
    assert (pending.workload, pending.check, pending.owner_job) == ("w", "offpeak-window", "j")
    assert kueuecheck.pending_checks(workload("w", job_name="j", reserved=False), ours) == []
    assert kueuecheck.pending_checks(workload("w", job_name="j", state="Ready"), ours) == []
    assert kueuecheck.pending_checks(workload("w", job_name="j"), []) == []


def view(name: str, free: int, gpu_type: str = "A100-SXM4-40GB") -> NodeView:
    return NodeView(name, gpu_type, 8, free, None, None, False)


def test_ready_needs_room_for_every_pod_on_nodes_of_the_allowed_types() -> None:
    pod = PodRequest("p", gpus=4, predicted={"A100-SXM4-40GB": Prediction(100.0, 120.0)})
    views = [view("a", 4), view("b", 8), view("h", 8, "H100-SXM5-80GB")]
    result = FilterResult(("a", "b", "h"), {})
    assert kueuecheck.decide(pod=pod, managed=True, count=3, result=result, views=views, allowed=None).state == "Ready"
    only_a100 = frozenset({"A100-SXM4-40GB"})
    partly = kueuecheck.decide(pod=pod, managed=True, count=4, result=result, views=views, allowed=only_a100)
    assert partly.state == "Pending" and "fit 3 of 4 pods" in partly.message


def test_pending_says_why_no_window_fits_and_waits_for_a_prediction() -> None:
    pod = PodRequest("p", gpus=1, predicted={"A100-SXM4-40GB": Prediction(100.0, 120.0)})
    short = "window ends within 1m, job needs ~3m"
    failed = FilterResult((), {"a": short, "h": "wrong type", "b": short, "c": "no idle window", "d": short,
                               "e": short, "f": short})
    verdict = kueuecheck.decide(pod=pod, managed=True, count=1, result=failed,
                                views=[view("a", 8), view("h", 8, "H100-SXM5-80GB")],
                                allowed=frozenset({"A100-SXM4-40GB"}))
    assert verdict.state == "Pending"
    # nodes that share a reason are named with it, a few of them: the H100 node is not of the allowed types
    assert verdict.message == ("no forecast idle window fits now: window ends within 1m, job needs ~3m "
                               "(a, b, d and 2 more); no idle window (c)")
    waiting = kueuecheck.decide(pod=pod, managed=False, count=1, result=failed, views=[], allowed=None)
    assert waiting.state == "Pending" and "prediction" in waiting.message


def test_the_transition_time_moves_only_with_the_state() -> None:
    [pending] = kueuecheck.pending_checks(workload("w", job_name="j"), ["offpeak-window"])
    still = kueuecheck.check_state_apply(pending, kueuecheck.Verdict("Pending", "why"), now=NOW_TEXT)
    [entry] = still["status"]["admissionChecks"]
    assert entry == {"name": "offpeak-window", "state": "Pending", "message": "why",
                     "lastTransitionTime": "2026-11-23T21:00:00Z"}
    ready = kueuecheck.check_state_apply(pending, kueuecheck.Verdict("Ready", "fits"), now=NOW_TEXT)
    assert ready["status"]["admissionChecks"][0]["lastTransitionTime"] == NOW_TEXT
    assert ready["metadata"] == {"name": "w", "namespace": "ml"} and ready["kind"] == "Workload"


def test_allowed_gpu_types_come_from_the_affinity_offpeak_writes() -> None:
    template = job("j", p90=10, gpu_types=("A100-SXM4-40GB", "H100-SXM5-80GB"))["spec"]["template"]
    assert kueuecheck.allowed_gpu_types(template) == {"A100-SXM4-40GB", "H100-SXM5-80GB"}
    assert kueuecheck.allowed_gpu_types(job("j", p90=10)["spec"]["template"]) is None


# --- one sweep against the extender's real store and filter --------------------------------------------------------


class FakeKueueApi:
    """CustomObjectsApi and BatchV1Api as the controller calls them, recording every write."""

    def __init__(self, checks: list[dict[str, Any]] | None, workloads: list[dict[str, Any]],
                 jobs: dict[str, dict[str, Any]], flavors: list[dict[str, Any]] | None = None) -> None:
        self.checks, self.workloads, self.jobs, self.flavors = checks, workloads, jobs, flavors or []
        self.applied: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        self.activated: list[str] = []
        self.listed: list[str] = []

    def list_cluster_custom_object(self, group: str, version: str, plural: str) -> dict[str, Any]:
        assert (group, version) == ("kueue.x-k8s.io", "v1beta1")
        self.listed.append(plural)
        if self.checks is None:
            raise ApiException(status=404, reason="Not Found")
        return {"items": {"admissionchecks": self.checks, "workloads": self.workloads,
                          "resourceflavors": self.flavors}[plural]}

    def patch_cluster_custom_object_status(self, group: str, version: str, plural: str, name: str,
                                           body: dict[str, Any]) -> None:
        assert plural == "admissionchecks"
        self.activated.append(name)

    def patch_namespaced_custom_object_status(self, group: str, version: str, namespace: str, plural: str,
                                              name: str, body: dict[str, Any], **kw: Any) -> None:
        assert plural == "workloads"
        self.applied.append((name, body, kw))

    def read_namespaced_job(self, name: str, namespace: str) -> dict[str, Any]:
        if name not in self.jobs:
            raise ApiException(status=404, reason="Not Found")
        return self.jobs[name]


def controller(api: FakeKueueApi, *, synced: bool = True) -> KueueAdmissionCheck:
    store = make_store(Clock(NOW))  # windows now: "short" 60 s, "long" 540 s (A100), "t4" 60 s
    if not synced:
        store.synced = False
    service = ExtenderService(store=store, metrics=ExtenderMetrics.create(CollectorRegistry()),
                              settings=DecisionSettings())
    c = KueueAdmissionCheck(api_client=client.ApiClient(), service=service, clock=lambda: 1_795_000_000.0)
    c.custom = api  # type: ignore[assignment]
    c.batch = api  # type: ignore[assignment]
    return c


def states(api: FakeKueueApi) -> dict[str, tuple[str, str]]:
    out = {}
    for name, body, kw in api.applied:
        assert kw == {"field_manager": "offpeak-window-fit", "force": True,
                      "_content_type": "application/apply-patch+yaml"}
        [entry] = body["status"]["admissionChecks"]
        out[name] = (entry["state"], entry["message"])
    return out


def test_a_sweep_admits_what_fits_a_window_now_and_keeps_the_rest_pending() -> None:
    jobs = {"fits": job("fits", p90=120), "too-long": job("too-long", p90=3000), "unpredicted": job("u", p90=None),
            "online": job("online", p90=None, offline=False)}
    wls = [workload(f"wl-{n}", job_name=n) for n in jobs] + [workload("wl-gone", job_name="gone"),
                                                              workload("wl-waiting", job_name="fits", reserved=False)]
    api = FakeKueueApi([admission_check("offpeak-window")], wls, jobs)
    counts = controller(api).sweep()
    assert api.activated == ["offpeak-window"]
    got = states(api)
    assert got["wl-fits"][0] == "Ready" and "long" in got["wl-fits"][1]
    assert got["wl-too-long"][0] == "Pending"
    assert got["wl-too-long"][1].startswith("no forecast idle window fits now: ")
    assert "window ends within 9m, job needs ~58m (p90 x1.15) on A100-SXM4-40GB (short, long)" in got["wl-too-long"][1]
    assert "window ends within 1m, job needs ~58m (p90 x1.15, slowest known GPU type) (t4)" in got["wl-too-long"][1]
    assert got["wl-unpredicted"] == ("Pending", kueuecheck.decide(
        pod=PodRequest("x"), managed=False, count=1, result=FilterResult(()), views=[], allowed=None).message)
    assert got["wl-online"][0] == "Ready" and "not offline work" in got["wl-online"][1]
    assert got["wl-gone"] == ("Pending", "its Job gone is gone")
    assert "wl-waiting" not in got  # no quota reserved yet: Kueue asks later
    assert counts == {"Ready": 2, "Pending": 3, "unchanged": 0}


def test_a_job_offpeak_cannot_predict_keeps_its_check_pending_with_the_operators_reason() -> None:
    bad = job("bad", p90=None)
    bad["metadata"]["annotations"] = {"offpeak.io/state": "Invalid: spec.gpuTypes must list at least one GPU type"}
    api = FakeKueueApi([admission_check("offpeak-window")], [workload("wl", job_name="bad")], {"bad": bad})
    controller(api).sweep()
    assert states(api)["wl"] == ("Pending", "offpeak cannot predict its Job: spec.gpuTypes must list at least one "
                                            "GPU type")


def test_an_unchanged_pending_verdict_is_not_written_again() -> None:
    jobs = {"too-long": job("too-long", p90=3000)}
    api = FakeKueueApi([admission_check("offpeak-window", active=True)], [workload("wl", job_name="too-long")], jobs)
    c = controller(api)
    c.sweep()
    [(_, body, _)] = api.applied
    api.workloads[0]["status"]["admissionChecks"][0]["message"] = body["status"]["admissionChecks"][0]["message"]
    assert c.sweep() == {"Ready": 0, "Pending": 0, "unchanged": 1}
    assert len(api.applied) == 1 and api.activated == []


def test_nothing_is_decided_before_the_caches_sync_or_without_kueue() -> None:
    api = FakeKueueApi([admission_check("offpeak-window")], [workload("wl", job_name="fits")],
                       {"fits": job("fits", p90=120)})
    assert controller(api, synced=False).sweep() == {"Ready": 0, "Pending": 0, "unchanged": 0}
    assert api.applied == [] and api.activated == []
    missing = FakeKueueApi(None, [], {})
    assert controller(missing).sweep() == {"Ready": 0, "Pending": 0, "unchanged": 0}


def test_a_pending_reason_that_changes_is_rewritten_at_most_every_rewrite_period() -> None:
    jobs = {"too-long": job("too-long", p90=3000)}
    api = FakeKueueApi([admission_check("offpeak-window", active=True)], [workload("wl", job_name="too-long")], jobs)
    c = controller(api)
    c.sweep()
    jobs["too-long"] = job("too-long", p90=4000)  # the reason changes (needs longer)
    assert c.sweep()["unchanged"] == 1 and len(api.applied) == 1  # written a moment ago: not yet
    c.rewrite_pending_seconds = 0.0
    assert c.sweep()["Pending"] == 1 and len(api.applied) == 2
    jobs["too-long"] = job("too-long", p90=120)  # now it fits: Ready goes out at once, whatever the period
    c.rewrite_pending_seconds = 3600.0
    assert c.sweep()["Ready"] == 1 and states(api)["wl"][0] == "Ready"


def test_a_pytorchjob_workload_is_judged_on_its_masters_template_for_all_its_replicas() -> None:
    master = job("m", p90=120)["spec"]["template"]
    ddp = {"metadata": {"name": "ddp", "namespace": "ml"}, "spec": {"pytorchReplicaSpecs": {
        "Master": {"replicas": 1, "template": master}, "Worker": {"replicas": 6, "template": master}}}}
    wl = workload("wl-ddp", job_name=None, count=1)
    wl["metadata"]["ownerReferences"] = [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "ddp"}]

    class WithPyTorchJobs(FakeKueueApi):
        def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                         name: str) -> dict[str, Any]:
            assert (group, version, plural) == ("kubeflow.org", "v1", "pytorchjobs")
            if name != "ddp":
                raise ApiException(status=404, reason="Not Found")
            return ddp

    api = WithPyTorchJobs([admission_check("offpeak-window")], [wl], {})
    controller(api).sweep()
    assert states(api)["wl-ddp"][0] == "Ready"  # 7 one-GPU pods: "long" has 7 free ("short", "t4": too short)
    ddp["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 8  # 9 pods: not room for all
    api.applied.clear()
    wl["status"]["admissionChecks"][0]["state"] = "Pending"
    controller(api).sweep()
    assert states(api)["wl-ddp"] == ("Pending", "windows fit 7 of 9 pods now; waiting for room for all of them")


@pytest.mark.parametrize("count,expect", [(1, "Ready"), (9, "Pending")])
def test_a_workload_of_many_pods_needs_places_for_all(count: int, expect: str) -> None:
    jobs = {"wide": job("wide", p90=120, parallelism=count)}
    api = FakeKueueApi([admission_check("offpeak-window")], [workload("wl", job_name="wide", count=count)], jobs)
    controller(api).sweep()
    assert states(api)["wl"][0] == expect  # "long" has 7 GPUs free now: room for 7 one-GPU pods


def flavored(wl: dict[str, Any], *flavors: str) -> dict[str, Any]:
    """The workload as Kueue leaves it after reserving quota in `flavors` (GPUs in the first, CPU in the rest)."""
    resources = ["nvidia.com/gpu", "cpu", "memory"]
    wl["status"]["admission"] = {"clusterQueue": "cq", "podSetAssignments": [
        {"name": "main", "count": 1, "flavors": dict(zip(resources, flavors))}]}
    return wl


def resource_flavor(name: str, **node_labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"nodeLabels": node_labels} if node_labels else {}}


def test_the_assigned_flavors_node_labels_say_which_nodes_are_judged() -> None:
    wl = flavored(workload("w", job_name="j"), "gpu-pool", "default", "default")
    assert kueuecheck.assigned_flavors(wl) == ("default", "gpu-pool")
    assert kueuecheck.assigned_flavors(workload("w", job_name="j")) == ()
    known = {"gpu-pool": resource_flavor("gpu-pool", pool="a100", zone="z1"), "default": resource_flavor("default")}
    assert flavor_node_labels(("default", "gpu-pool"), known) == {"pool": "a100", "zone": "z1"}
    pod = PodRequest("p", gpus=1, predicted={"A100-SXM4-40GB": Prediction(100.0, 120.0)})
    everywhere = FilterResult(("a", "b"), {})
    views = [view("a", 0), view("b", 8)]
    only_a = kueuecheck.decide(pod=pod, managed=True, count=1, result=FilterResult(("b",), {"a": "needs 1 GPU(s)"}),
                               views=views, allowed=None, flavor_nodes=frozenset({"a"}), flavors=("gpu-pool",))
    assert only_a == kueuecheck.Verdict("Pending", "no forecast idle window fits now: needs 1 GPU(s) (a)")
    none = kueuecheck.decide(pod=pod, managed=True, count=1, result=everywhere, views=views, allowed=None,
                             flavor_nodes=frozenset(), flavors=("gpu-pool",))
    assert none.state == "Pending" and "node labels of its ResourceFlavor(s) gpu-pool" in none.message


def test_a_sweep_judges_a_workload_on_the_nodes_of_the_flavor_kueue_assigned() -> None:
    jobs = {"fits": job("fits", p90=120)}  # fits "long" (540 s), not "short" (60 s)
    flavors = [resource_flavor("short-pool", **{"kubernetes.io/hostname": "short"}), resource_flavor("any"),
               resource_flavor("nowhere", pool="none")]
    wls = [flavored(workload("wl-short", job_name="fits"), "short-pool"),
           flavored(workload("wl-any", job_name="fits"), "any"),
           flavored(workload("wl-nowhere", job_name="fits"), "nowhere"),
           workload("wl-plain", job_name="fits")]
    api = FakeKueueApi([admission_check("offpeak-window", active=True)], wls, jobs, flavors)
    controller(api).sweep()
    got = states(api)
    assert got["wl-short"] == ("Pending", "no forecast idle window fits now: "
                                          "window ends within 1m, job needs ~3m (p90 x1.15) on A100-SXM4-40GB (short)")
    assert got["wl-any"][0] == got["wl-plain"][0] == "Ready"  # a flavor without node labels: every node
    assert got["wl-nowhere"][0] == "Pending" and "ResourceFlavor(s) nowhere" in got["wl-nowhere"][1]
    assert api.listed.count("resourceflavors") == 1  # once a sweep
    plain = FakeKueueApi([admission_check("offpeak-window", active=True)], [workload("wl", job_name="fits")], jobs)
    controller(plain).sweep()
    assert "resourceflavors" not in plain.listed  # no flavors assigned: not read at all
