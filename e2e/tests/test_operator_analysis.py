"""The analysis pod on the real API server, for a TrainingJob and for a labelled batch/v1 Job. kwok never runs
containers, so the pod never finishes: this proves the server accepts the pod as built, and that a hung analysis
times out into a stated fallback, not a stall."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from test_operator_lifecycle import RunningOperator, _apply, _condition, _job, operator_service_paused  # noqa: F401

from offpeak_e2e.harness import E2ECluster, offline_job_manifest, offline_template
from offpeak_operator.settings import AnalysisSettings


@pytest.fixture
def short_analysis_operator(e2e_cluster: E2ECluster, e2e_namespace: str,
                            operator_service_paused: None) -> Iterator[RunningOperator]:  # noqa: F811
    running = RunningOperator(e2e_cluster, e2e_namespace,
                              analysis=AnalysisSettings(image="offpeak:e2e", timeout_seconds=10, grace_seconds=2))
    running.start()
    try:
        yield running
    finally:
        running.stop()


def test_hung_analysis_pod_times_out_into_a_fallback(e2e_cluster: E2ECluster, e2e_namespace: str,
                                                     short_analysis_operator: RunningOperator) -> None:
    ns = e2e_namespace
    _apply(e2e_cluster, ns, _job("user-model", sim_seconds=3, estimatedSeconds=120, inputShape=[3, 64, 64],
                                 modelSource={"entrypoint": "mypkg.model:build"}))
    e2e_cluster.wait_for("the analysis pod", lambda: bool(e2e_cluster.pods(ns, "offpeak.io/role=analysis")),
                         timeout=60)
    (pod,) = e2e_cluster.pods(ns, "offpeak.io/role=analysis")
    spec = pod["spec"]
    assert pod["metadata"]["name"] == "user-model-analysis" and spec["activeDeadlineSeconds"] == 10
    assert [c["name"] for c in spec["initContainers"]] == ["bundle", "extract"]
    assert spec["initContainers"][1]["image"] == "registry.local/offpeak-e2e/train:1"
    assert "--entrypoint" in spec["initContainers"][1]["command"]
    assert spec["initContainers"][1]["terminationMessagePolicy"] == "FallbackToLogsOnError"  # exit message kept
    assert "nvidia.com/gpu" not in str(spec)
    assert e2e_cluster.phase(ns, "user-model") == "Analyzing"

    done = e2e_cluster.wait_phase(ns, "user-model", ["Succeeded", "Failed"], timeout=120)["status"]
    assert done["phase"] == "Succeeded", done
    graph = _condition(done, "GraphReady")
    assert graph["status"] == "False" and graph["reason"] == "AnalysisTimeout", graph
    assert done["prediction"]["source"] == "user-estimate"
    e2e_cluster.wait_for("the hung analysis pod removed",
                         lambda: not [p for p in e2e_cluster.pods(ns, "offpeak.io/role=analysis")
                                      if not p["metadata"].get("deletionTimestamp")], timeout=30)


def test_a_labelled_jobs_entry_point_is_analysed_in_its_own_image_and_a_hung_analysis_falls_back(
        e2e_cluster: E2ECluster, e2e_namespace: str, short_analysis_operator: RunningOperator) -> None:
    ns = e2e_namespace
    template = offline_template(gpus=1, image="registry.local/team/ddp-train:7", annotations={
        "offpeak.io/model-source": "entrypoint:team.models:build", "offpeak.io/input-shape": "3,64,64",
        "offpeak.io/batch-size": "16", "offpeak.io/steps": "100", "offpeak.io/estimated-seconds": "120",
        "offpeak.io/gpu-types": "A100", "offpeak.io/sim-runtime": "2000ms"})
    _apply(e2e_cluster, ns, offline_job_manifest("entry", template=template))

    def state() -> str:
        return str(e2e_cluster.get("job", "-n", ns, "entry")["metadata"].get("annotations", {})
                   .get("offpeak.io/state", ""))

    e2e_cluster.wait_for("the Job's analysis pod", lambda: bool(e2e_cluster.pods(ns, "offpeak.io/role=analysis")),
                         timeout=60)
    (pod,) = e2e_cluster.pods(ns, "offpeak.io/role=analysis")
    uid = e2e_cluster.get("job", "-n", ns, "entry")["metadata"]["uid"]
    assert pod["metadata"]["name"] == "job-entry-analysis"
    assert pod["metadata"]["labels"]["offpeak.io/workload-name"] == "entry"
    assert pod["spec"]["initContainers"][1]["image"] == "registry.local/team/ddp-train:7"
    assert "team.models:build" in pod["spec"]["initContainers"][1]["command"]
    assert state().startswith("Analyzing:") and e2e_cluster.get("job", "-n", ns, "entry")["spec"]["suspend"] is True
    # the Job controller leaves the pod alone: it keeps its (non-controller) owner reference, and is not counted
    time.sleep(3)
    still = e2e_cluster.get("pod", "-n", ns, "job-entry-analysis")
    assert still["metadata"]["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "entry",
                                                    "uid": uid}]
    assert not (e2e_cluster.get("job", "-n", ns, "entry").get("status") or {}).get("active")

    e2e_cluster.wait_for("the hung analysis ended into a prediction", lambda: state().startswith("Predicted"),
                         timeout=90)
    assert "(no graph after 10s of analysis)" in state(), state()
    assert e2e_cluster.get("job", "-n", ns, "entry")["spec"]["suspend"] is False
    e2e_cluster.wait_for("the hung analysis pod removed",
                         lambda: not [p for p in e2e_cluster.pods(ns, "offpeak.io/role=analysis")
                                      if not p["metadata"].get("deletionTimestamp")], timeout=30)
