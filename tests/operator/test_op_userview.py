"""What `offpeak jobs` and `offpeak explain` show, from plain TrainingJob, workload and pod objects."""

from __future__ import annotations

from datetime import timedelta

from optestkit import NOW

from offpeak_core.jobkinds import BATCH_JOB, PYTORCH_JOB
from offpeak_operator.explainview import explain_trainingjob, explain_workload, lines, record, scheduler_reasons
from offpeak_operator.userview import job_row, window_needed, workload_row

SAID = ("0/4 nodes are available: 1 gang of 2 worker(s) x 8 GPU(s) needs 2 place(s) in fitting windows; 1 found "
        "on 1 node(s), 1 window ends within 6s, job needs ~2m (p90 x1.15) on L4, 2 node(s) didn't match Pod's node "
        "affinity/selector. preemption: 0/4 nodes are available: 2 No preemption victims found for incoming pod.")


def job(**status) -> dict:
    return {
        "metadata": {"name": "vit", "namespace": "team", "creationTimestamp": "2026-11-21T05:00:00Z"},
        "spec": {"workers": 2, "gpusPerWorker": 8, "gpuTypes": ["H100", "A100"], "checkpoint": {"claimName": "c"}},
        "status": {"phase": "Waiting", "reason": "Unschedulable", "message": f"attempt 1/3: waiting: {SAID}",
                   "totalSteps": 1000, "completedSteps": 250, "attempts": 1, "prediction": {
                       "source": "predictor", "modelVersion": "m7", "steps": 1000, "gpus": [
                           {"gpuType": "H100-SXM5-80GB", "jobSeconds": 3600.0, "jobSecondsP90": 4000.0},
                           {"gpuType": "A100-SXM4-80GB", "jobSeconds": 7200.0, "jobSecondsP90": 8000.0,
                            "fitsMemory": False, "peakMemoryGiB": 90.5, "gpuMemoryGiB": 80.0}]},
                   "predictedSeconds": 2700.0, **status},
    }


def test_a_waiting_job_row_says_what_window_it_needs_and_why_in_human_units() -> None:
    row = job_row(job(), now=NOW)
    assert (row.phase, row.reason, row.gpus) == ("Waiting", "Unschedulable", "2x8 on H100, A100")
    assert row.predicted == "45m (p90 1h07m)"  # the remaining p50; p90 of the fastest type, whole job
    # 3/4 of the work left at the fastest type's p90 (4000 s) plus the 15 % margin: 3450 s
    assert window_needed(job()["status"]) == 3000.0 * 1.15
    assert row.needs == "58m x 8 GPU(s) on 2 node(s)"
    assert row.age == "1h" and "gang of 2" in row.why
    done = job_row(job(phase="Succeeded", reason="Succeeded", actualSeconds=3000.0, predictedSeconds=2500.0,
                       gpuType="H100-SXM5-80GB"), now=NOW)
    assert (done.actual, done.error, done.needs, done.why) == ("50m", "+20%", "", "")
    assert done.predicted == "42m"  # no p90 once it is over


def batch_job(*, state: str, suspend: bool, queue: str | None = None, **status) -> dict:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    return {
        "metadata": {"name": "nightly", "namespace": "team", "creationTimestamp": "2026-11-21T05:30:00Z",
                     "labels": labels, "annotations": {
                         "offpeak.io/state": state,
                         "offpeak.io/prediction": '{"A100-SXM4-40GB":{"p50":1200,"p90":1500},'
                                                  '"H100-SXM5-80GB":{"p50":600,"p90":900},"source":"predictor"}'}},
        "spec": {"suspend": suspend, "parallelism": 2, "template": {
            "metadata": {"labels": {"offpeak.io/offline": "true"},
                         "annotations": {"offpeak.io/gpu-types": "A100,H100"}},
            "spec": {"containers": [{"name": "train", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}},
        "status": status,
    }


def test_a_kueue_queued_job_row_shows_its_pending_check_and_the_window_it_needs() -> None:
    workload = {"status": {"admissionChecks": [
        {"name": "other", "state": "Ready", "message": "ok"},
        {"name": "offpeak-window", "state": "Pending", "message": "no forecast idle window fits now: n1: ..."}]}}
    row = workload_row(batch_job(state="Predicted: predicted 600s", suspend=True, queue="team-q"), now=NOW,
                        workload=workload)
    assert (row.name, row.phase, row.reason, row.gpus) == ("job/nightly", "Queued", "Kueue team-q", "2x4 on A100,H100")
    assert row.predicted == "10m (p90 15m)"  # the fastest type's p50 and p90
    assert row.needs == "18m x 4 GPU(s) for 2 pods"  # 900 s x 1.15 = 17m15s, rounded up
    assert row.why == "Kueue check offpeak-window Pending: no forecast idle window fits now: n1: ..."
    assert row.age == "30m"


def test_a_batch_job_row_follows_the_job_to_its_end_and_says_why_it_is_invalid() -> None:
    running = workload_row(batch_job(state="Predicted: ...", suspend=False, active=2), now=NOW)
    assert (running.phase, running.reason, running.why) == ("Running", "Predicted", "")
    done = workload_row(batch_job(state="Finished: the Job succeeded in 660s", suspend=False,
                                   startTime="2026-11-21T05:40:00Z", completionTime="2026-11-21T05:51:00Z",
                                   conditions=[{"type": "Complete", "status": "True"}]), now=NOW)
    assert (done.phase, done.actual, done.error, done.predicted, done.needs) == ("Succeeded", "11m", "+10%", "10m", "")
    invalid = workload_row(batch_job(state="Invalid: annotation offpeak.io/steps must be an integer", suspend=True),
                            now=NOW)
    assert (invalid.phase, invalid.why) == ("Invalid", "annotation offpeak.io/steps must be an integer")
    unpredicted = batch_job(state="Analyzing: extracting the model graph from m:build in analysis pod "
                                  "job-nightly-analysis", suspend=True)
    del unpredicted["metadata"]["annotations"]["offpeak.io/prediction"]  # not predicted yet
    analysing = workload_row(unpredicted, now=NOW)
    assert (analysing.phase, analysing.predicted, analysing.needs) == ("Analyzing", "", "")
    assert analysing.why.startswith("extracting the model graph from m:build")


def test_a_pytorchjob_row_counts_its_replicas_and_follows_its_own_status() -> None:
    def replica(n: int, ann: dict) -> dict:
        return {"replicas": n, "template": {"metadata": {"labels": {"offpeak.io/offline": "true"}, "annotations": ann},
                                            "spec": {"containers": [{"name": "pytorch", "resources": {
                                                "limits": {"nvidia.com/gpu": "2"}}}]}}}

    job = {"metadata": {"name": "ddp", "namespace": "team", "creationTimestamp": "2026-11-21T05:30:00Z",
                        "annotations": {"offpeak.io/state": "Predicted: predicted 600s",
                                        "offpeak.io/prediction": '{"H100-SXM5-80GB":{"p50":600,"p90":900},'
                                                                 '"source":"predictor"}'}},
           "spec": {"runPolicy": {"suspend": False},
                    "pytorchReplicaSpecs": {"Master": replica(1, {"offpeak.io/gpu-types": "H100"}),
                                            "Worker": replica(3, {})}},
           "status": {"replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 3}}}}
    row = workload_row(job, now=NOW, kind=PYTORCH_JOB)
    assert (row.name, row.phase, row.gpus, row.predicted) == ("pytorchjob/ddp", "Running", "4x2 on H100",
                                                              "10m (p90 15m)")
    job["status"] = {"replicaStatuses": {"Master": {}, "Worker": {}}}
    assert workload_row(job, now=NOW, kind=PYTORCH_JOB).needs == "18m x 2 GPU(s) for 4 pods"  # waiting again
    job["status"] = {"startTime": "2026-11-21T05:40:00Z", "completionTime": "2026-11-21T05:52:00Z",
                     "conditions": [{"type": "Succeeded", "status": "True"}]}
    done = workload_row(job, now=NOW, kind=PYTORCH_JOB)
    assert (done.phase, done.actual, done.error) == ("Succeeded", "12m", "+20%")


def test_the_schedulers_summary_splits_into_its_reasons_without_preemption() -> None:
    assert scheduler_reasons(SAID) == [
        "0/4 nodes are available",
        "1 gang of 2 worker(s) x 8 GPU(s) needs 2 place(s) in fitting windows; 1 found on 1 node(s)",
        "1 window ends within 6s, job needs ~2m (p90 x1.15) on L4",
        "2 node(s) didn't match Pod's node affinity/selector"]
    assert scheduler_reasons("something else") == ["something else"] and scheduler_reasons("") == []


def test_explain_lists_the_prediction_memory_verdict_window_and_pod_reasons() -> None:
    pod = {"metadata": {"name": "vit-a1-w0"}, "spec": {}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": SAID}]}}
    text = "\n".join(lines(explain_trainingjob(job(), [pod], now=NOW + timedelta(minutes=1))))
    assert "TrainingJob team/vit: Waiting (Unschedulable)" in text
    assert "H100-SXM5-80GB: 1h (p90 1h07m)" in text
    assert "A100-SXM4-80GB: 2h (p90 2h14m); needs ~90.5 GiB: does not fit (80.0 GiB)" in text
    assert "Needs an idle window of 58m" in text and "a checkpointing job may use shorter ones" in text
    assert "Pod vit-a1-w0: Pending" in text and "  1 gang of 2 worker(s)" in text



def test_explain_a_queued_batch_job_says_its_check_prediction_window_and_pods() -> None:
    workload = {"status": {"admissionChecks": [
        {"name": "offpeak-window", "state": "Pending", "message": "no forecast idle window fits now"}]}}
    pod = {"metadata": {"name": "nightly-x"}, "spec": {}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "message": SAID}]}}
    explained = explain_workload(batch_job(state="Predicted: predicted 600s", suspend=True, queue="team-q"), [pod],
                                 kind=BATCH_JOB, now=NOW, workload=workload)
    text = "\n".join(lines(explained))
    assert text.startswith("Job team/nightly: Queued (Kueue team-q)\n  predicted 600s\n  GPUs: 2x4 on A100,H100\n")
    assert "  Kueue check offpeak-window Pending: no forecast idle window fits now" in text
    assert "Prediction (predictor):\n  H100-SXM5-80GB: 10m (p90 15m)\n  A100-SXM4-40GB: 20m (p90 25m)" in text
    assert "Needs an idle window of 18m" in text and "Pod nightly-x: Pending\n  0/4 nodes are available" in text


def test_the_json_record_of_an_explanation_has_the_facts_as_numbers_and_stable_keys() -> None:
    done = record(explain_trainingjob(job(phase="Succeeded", reason="Succeeded", actualSeconds=3000.0), [], now=NOW))
    waiting = record(explain_trainingjob(job(), [], now=NOW))
    assert list(done) == list(waiting)  # the same keys whatever the phase
    assert (waiting["kind"], waiting["name"], waiting["needsWindowSeconds"]) == ("TrainingJob", "vit", 3000.0 * 1.15)
    assert waiting["prediction"]["gpus"][1] == {
        "gpuType": "A100-SXM4-80GB", "seconds": 7200.0, "p90Seconds": 8000.0, "fitsMemory": False,
        "peakMemoryGiB": 90.5, "gpuMemoryGiB": 80.0, "correctionSamples": None, "correctionFactor": None}
    assert (done["actualSeconds"], done["error"], done["needsWindowSeconds"]) == (3000.0, 3000.0 / 2700.0 - 1, None)
    queued = record(explain_workload(batch_job(state="Predicted: x", suspend=True), [], kind=BATCH_JOB, now=NOW))
    assert list(queued) == list(waiting) and (queued["kind"], queued["name"]) == ("Job", "nightly")
