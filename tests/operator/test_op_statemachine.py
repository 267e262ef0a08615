"""The TrainingJob state machine, phase by phase, on plain data."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from optestkit import NOW, job_body

import pytest
from offpeak.progress import Progress
from offpeak_core.livepace import LIVE_PROGRESS_ANNOTATION, LiveProgress

from offpeak_operator import statemachine as sm
from offpeak_operator.jobspec import Problem, parse_spec
from offpeak_operator.livereports import timestamp
from offpeak_operator.predictions import FallbackSettings, GpuPrediction, Prediction
from offpeak_operator.settings import AnalysisSettings, OperatorSettings, RequeueSettings

SETTINGS = OperatorSettings(analysis=AnalysisSettings(timeout_seconds=300), requeue=RequeueSettings(base_seconds=10))
PREDICTION = Prediction(source="predictor", steps=1000, model_version="m1", gpus=(
    GpuPrediction(gpu_type="A100-SXM4-40GB", step_seconds=0.1, step_seconds_p90=0.2, job_seconds=100.0,
                  job_seconds_p90=200.0),
    GpuPrediction(gpu_type="T4", step_seconds=0.5, step_seconds_p90=1.0, job_seconds=500.0, job_seconds_p90=1000.0),
))


def decide(status: dict[str, Any], *, spec: dict[str, Any] | None = None, observed: sm.Observed | None = None,
           now=NOW, problems=(), settings: OperatorSettings = SETTINGS) -> sm.Decision:
    body = job_body(**(spec or {}))
    return sm.decide(job_name="train-1", spec=parse_spec(body["spec"]), problems=list(problems), status=status,
                     observed=observed or sm.Observed(), now=now, settings=settings)


def kinds(decision: sm.Decision) -> list[str]:
    return [type(a).__name__ for a in decision.actions]


def cond(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == type_)


def waiting(**extra: Any) -> dict[str, Any]:
    return {"phase": "Waiting", "attempts": 1, "completedSteps": 0, "prediction": PREDICTION.to_status(), **extra}


def pods(*views: sm.PodView) -> sm.Observed:
    return sm.Observed(training_pods={v.name: v for v in views})


# ---- Pending ---------------------------------------------------------------------------------------------


def test_invalid_spec_fails_with_condition_and_event_and_creates_nothing() -> None:
    d = decide({}, problems=[Problem("UnknownGPUType", "unknown GPU type(s) in spec.gpuTypes: Z9")])
    assert d.phase == "Failed"
    assert cond(d.status, "Valid") == {**cond(d.status, "Valid"), "status": "False", "reason": "UnknownGPUType"}
    assert kinds(d) == ["EmitEvent"] and d.actions[0].type == "Warning"


def test_entrypoint_source_starts_an_analysis_pod() -> None:
    d = decide({}, spec={"modelSource": {"entrypoint": "m:f"}})
    assert d.phase == "Analyzing" and "CreateAnalysisPod" in kinds(d)
    assert d.status["gpus"] == 1 and d.status["totalSteps"] == 1000 and d.status["attempts"] == 0
    assert cond(d.status, "Valid")["status"] == "True"


def test_in_process_and_configmap_sources_need_no_pod() -> None:
    assert "ExtractInProcess" in kinds(decide({}, spec={"modelSource": {"torchvision": "resnet18"}}))
    assert "LoadUserGraph" in kinds(decide({}, spec={"modelSource": {"graphConfigMap": {"name": "g"}}}))


# The chart's operator: torchvision/HF graphs come from an analysis pod running the extract image.
EXTRACT_POD = OperatorSettings(analysis=AnalysisSettings(timeout_seconds=300, extract_image="offpeak:1-extract"))


@pytest.mark.parametrize("source", [{"torchvision": "resnet50"}, {"hfConfig": "gpt2"},
                                    {"hfConfigMap": {"name": "my-config"}}])
def test_with_an_extract_image_builtin_sources_are_extracted_in_an_analysis_pod(source: dict) -> None:
    d = decide({}, spec={"modelSource": source}, settings=EXTRACT_POD)
    assert d.phase == "Analyzing" and kinds(d) == ["EmitEvent", "CreateAnalysisPod"]
    assert "in an analysis pod (offpeak:1-extract)" in d.status["message"]
    analyzing = {**ANALYZING, "analysisStartTime": d.status["analysisStartTime"]}
    assert kinds(decide(analyzing, spec={"modelSource": source}, settings=EXTRACT_POD)) == ["CreateAnalysisPod"]
    done = sm.Observed(analysis_pod=sm.PodView("a", phase="Succeeded"))
    assert kinds(decide(analyzing, spec={"modelSource": source}, observed=done, settings=EXTRACT_POD)) == [
        "CollectGraph"]
    # without one, the operator extracts them itself, in every phase
    assert kinds(decide(analyzing, spec={"modelSource": source})) == ["ExtractInProcess"]


def test_an_extract_image_changes_nothing_for_entry_points_and_graph_configmaps() -> None:
    assert "CreateAnalysisPod" in kinds(decide({}, spec=ENTRY, settings=EXTRACT_POD))
    assert "LoadUserGraph" in kinds(decide({}, spec={"modelSource": {"graphConfigMap": {"name": "g"}}},
                                           settings=EXTRACT_POD))
    assert "Predict" in kinds(decide({}, settings=EXTRACT_POD))


def test_no_model_source_goes_straight_to_prediction_and_says_why() -> None:
    d = decide({})
    assert "Predict" in kinds(d)
    assert cond(d.status, "GraphReady")["reason"] == "NoModelSource"


# ---- Analyzing -------------------------------------------------------------------------------------------

ANALYZING = {"phase": "Analyzing", "analysisStartTime": "2026-11-21T06:00:00Z", "attempts": 0, "conditions": []}
ENTRY = {"modelSource": {"entrypoint": "m:f"}}


def test_waits_for_a_running_analysis_pod() -> None:
    d = decide(ANALYZING, spec=ENTRY, observed=sm.Observed(analysis_pod=sm.PodView("a", phase="Running")),
               now=NOW + timedelta(seconds=60))
    assert d.actions == [] and d.status == {}


def test_recreates_a_vanished_analysis_pod_by_the_same_name() -> None:
    assert kinds(decide(ANALYZING, spec=ENTRY)) == ["CreateAnalysisPod"]


def test_collects_graph_when_analysis_pod_succeeded() -> None:
    d = decide(ANALYZING, spec=ENTRY, observed=sm.Observed(analysis_pod=sm.PodView("a", phase="Succeeded")))
    assert kinds(d) == ["CollectGraph"]


def test_failed_analysis_falls_back_to_prediction_without_graph() -> None:
    d = decide(ANALYZING, spec=ENTRY,
               observed=sm.Observed(analysis_pod=sm.PodView("a", phase="Failed", reason="Error")))
    assert cond(d.status, "GraphReady")["reason"] == "AnalysisFailed"
    assert kinds(d) == ["EmitEvent", "Predict"]


def test_analysis_deadline_is_enforced_even_if_the_pod_hangs() -> None:
    late = NOW + timedelta(seconds=300 + SETTINGS.analysis.grace_seconds + 1)
    d = decide(ANALYZING, spec=ENTRY, observed=sm.Observed(analysis_pod=sm.PodView("a", phase="Pending")), now=late)
    assert cond(d.status, "GraphReady")["reason"] == "AnalysisTimeout"
    assert kinds(d) == ["DeleteAnalysisPod", "EmitEvent", "Predict"]


def test_graph_decided_either_way_leads_to_predict() -> None:
    for ok in ("True", "False"):
        status = {**ANALYZING, "conditions": [{"type": "GraphReady", "status": ok}]}
        assert kinds(decide(status, spec=ENTRY)) == ["Predict"]


# ---- Predicted -> Waiting -> Running -> Succeeded ------------------------------------------------------


def test_predicted_launches_attempt_one_with_deterministic_names() -> None:
    d = decide({"phase": "Predicted", "attempts": 0, "prediction": PREDICTION.to_status()}, spec={"workers": 2})
    assert d.phase == "Waiting" and d.status["attempts"] == 1
    assert d.status["pods"] == ["train-1-a1-w0", "train-1-a1-w1"]
    assert d.actions == [sm.CreateTrainingPods(attempt=1, completed_steps=0)]


def test_pending_pods_keep_waiting() -> None:
    d = decide(waiting(), observed=pods(sm.PodView("train-1-a1-w0", phase="Pending")))
    assert d.status == {} and d.actions == []


def test_running_records_node_gpu_type_start_and_prediction_for_that_gpu() -> None:
    view = sm.PodView("train-1-a1-w0", phase="Running", node="n1", gpu_type="T4", started_at=NOW)
    d = decide(waiting(), observed=pods(view), now=NOW + timedelta(seconds=5))
    assert d.phase == "Running"
    assert (d.status["node"], d.status["gpuType"], d.status["startTime"]) == ("n1", "T4", "2026-11-21T06:00:00Z")
    assert d.status["predictedSeconds"] == 500.0
    assert decide({**waiting(), **d.status}, observed=pods(view)).status == {}  # idempotent once Running


def test_success_measures_actual_time_and_reports() -> None:
    view = sm.PodView("train-1-a1-w0", phase="Succeeded", node="n1", gpu_type="T4", started_at=NOW,
                      finished_at=NOW + timedelta(seconds=450))
    d = decide(waiting(phase="Running"), observed=pods(view), now=NOW + timedelta(seconds=460))
    assert d.phase == "Succeeded" and d.status["actualSeconds"] == 450.0
    # no start-up in this prediction (500 s = 1000 x 0.5 s): the whole wall time is steps
    assert d.status["actualStepSeconds"] == 0.45
    assert sm.ReportSample(gpu_type="T4", step_seconds=0.45, job_seconds=450.0, steps=1000,
                           startup_seconds=0.0) in d.actions
    (m,) = d.status["measurements"]
    assert m == {"attempt": 1, "gpuType": "T4", "source": "wall", "steps": 1000, "stepSeconds": 0.45,
                 "wallSeconds": 450.0, "startupSeconds": 0.0, "predictedStepSeconds": 0.5, "error": -0.1}
    assert "-10% against the prediction" in d.status["message"]
    assert sm.RecordOutcome(gpu_type="T4", predicted_seconds=500.0, actual_seconds=450.0) in d.actions


def test_success_after_a_steady_pace_records_the_first_pace_eta_for_the_drift() -> None:
    view = sm.PodView("train-1-a1-w0", phase="Succeeded", node="n1", gpu_type="T4", started_at=NOW,
                      finished_at=NOW + timedelta(seconds=450))
    first = NOW + timedelta(seconds=440)
    status = waiting(phase="Running") | {"livePace": {"attempt": 1, "firstFinishTime": sm.rfc3339(first)}}
    d = decide(status, observed=pods(view), now=NOW + timedelta(seconds=460))
    assert sm.RecordOutcome(gpu_type="T4", predicted_seconds=500.0, actual_seconds=450.0,
                            pace_eta_seconds=440.0) in d.actions
    earlier = status | {"livePace": {"attempt": 0, "firstFinishTime": sm.rfc3339(first)}}  # another attempt's pace
    d = decide(earlier, observed=pods(view), now=NOW + timedelta(seconds=460))
    assert sm.RecordOutcome(gpu_type="T4", predicted_seconds=500.0, actual_seconds=450.0) in d.actions


def test_success_with_a_progress_report_measures_the_training_loop_only() -> None:
    report = Progress(steps=1000, attempt_steps=1000, step_seconds=0.7, startup_seconds=120.0)
    view = sm.PodView("train-1-a1-w0", phase="Succeeded", node="n1", gpu_type="T4", started_at=NOW,
                      finished_at=NOW + timedelta(seconds=820), progress=report)
    d = decide(waiting(phase="Running"), observed=pods(view), now=NOW + timedelta(seconds=830))
    assert d.status["actualStepSeconds"] == 0.7 and d.status["actualSeconds"] == 820.0
    (m,) = d.status["measurements"]
    assert m["source"] == "progress" and m["error"] == pytest.approx(0.4) and m["startupSeconds"] == 120.0
    assert sm.ReportSample(gpu_type="T4", step_seconds=0.7, job_seconds=820.0, steps=1000,
                           startup_seconds=120.0) in d.actions


def test_success_without_a_report_takes_the_declared_start_up_off_the_wall_time() -> None:
    view = sm.PodView("train-1-a1-w0", phase="Succeeded", node="n1", gpu_type="T4", started_at=NOW,
                      finished_at=NOW + timedelta(seconds=650))
    d = decide(waiting(phase="Running"), spec={"startupSeconds": 50}, observed=pods(view))
    assert d.status["actualStepSeconds"] == 0.6 and d.status["measurements"][0]["startupSeconds"] == 50.0


def test_success_shorter_than_its_start_up_reports_no_sample() -> None:
    view = sm.PodView("train-1-a1-w0", phase="Succeeded", node="n1", gpu_type="T4", started_at=NOW,
                      finished_at=NOW + timedelta(seconds=30))
    d = decide(waiting(phase="Running"), spec={"startupSeconds": 60}, observed=pods(view))
    assert d.phase == "Succeeded" and "actualStepSeconds" not in d.status and "measurements" not in d.status
    assert not any(isinstance(a, sm.ReportSample) for a in d.actions)


def test_terminal_phases_do_nothing() -> None:
    for phase in ("Succeeded", "Failed"):
        assert decide({"phase": phase}).actions == []


def test_multi_worker_job_succeeds_only_when_all_workers_do() -> None:
    done = sm.PodView("train-1-a1-w0", phase="Succeeded", started_at=NOW, finished_at=NOW)
    busy = sm.PodView("train-1-a1-w1", phase="Running", node="n2", started_at=NOW)
    d = decide(waiting(phase="Running", node="n2"), spec={"workers": 2}, observed=pods(done, busy))
    assert d.phase != "Succeeded"


ELASTIC = {"workers": 4, "minWorkers": 2, "checkpointing": True}


def elastic_pods(*phases: str, start_gap: float = 0.0, finish: float | None = None) -> sm.Observed:
    """Workers 0.. of attempt 1 in the given phases; worker i started `i * start_gap` s after NOW."""
    views = []
    for w, phase in enumerate(phases):
        started = None if phase == "Pending" else NOW + timedelta(seconds=w * start_gap)
        ended = NOW + timedelta(seconds=finish) if phase == "Succeeded" and finish is not None else None
        views.append(sm.PodView(f"train-1-a1-w{w}", phase=phase, node=f"n{w}" if started else "", gpu_type="T4",
                                started_at=started, finished_at=ended))
    return pods(*views)


def test_an_elastic_job_runs_on_its_minimum_while_the_other_workers_wait() -> None:
    d = decide(waiting(), spec=ELASTIC, observed=elastic_pods("Running", "Running", "Pending", "Pending"))
    assert d.phase == "Running" and d.status["runningWorkers"] == 2
    assert "2 of 4 workers" in d.status["message"]
    assert d.status["predictedSeconds"] == 1000.0  # 500 s on T4 at 4 workers, the same samples on 2
    again = decide({**waiting(), **d.status}, spec=ELASTIC,
                   observed=elastic_pods("Running", "Running", "Pending", "Pending"))
    assert again.status == {}
    grown = decide({**waiting(), **d.status}, spec=ELASTIC,
                   observed=elastic_pods("Running", "Running", "Running", "Pending"))
    assert grown.status["runningWorkers"] == 3 and grown.status["predictedSeconds"] == pytest.approx(500 * 4 / 3)


def test_an_elastic_job_below_its_minimum_is_not_running_yet() -> None:
    d = decide(waiting(), spec=ELASTIC, observed=elastic_pods("Running", "Pending", "Pending", "Pending"))
    assert d.phase is None and d.actions == []
    rigid = decide(waiting(), spec={"workers": 4}, observed=elastic_pods("Running", "Running", "Pending", "Pending"))
    assert rigid.phase is None


def test_an_elastic_job_succeeds_with_the_workers_that_ran_and_deletes_the_ones_that_waited() -> None:
    d = decide(waiting(phase="Running"), spec=ELASTIC, now=NOW + timedelta(seconds=1010),
               observed=elastic_pods("Succeeded", "Succeeded", "Pending", "Pending", finish=1000))
    assert d.phase == "Succeeded" and d.status["actualSeconds"] == 1000.0
    assert sm.DeletePods(("train-1-a1-w2", "train-1-a1-w3")) in d.actions
    # it ran on 2 of 4 workers: its time is not the full-width one the prediction is for
    assert not any(isinstance(a, sm.ReportSample | sm.RecordOutcome) for a in d.actions)
    assert "not compared with the full-width prediction" in d.status["message"]


def test_an_elastic_job_on_all_its_workers_from_the_start_is_measured_as_any_job() -> None:
    d = decide(waiting(phase="Running"), spec=ELASTIC, now=NOW + timedelta(seconds=460),
               observed=elastic_pods("Succeeded", "Succeeded", "Succeeded", "Succeeded", start_gap=5, finish=450))
    assert d.phase == "Succeeded"
    assert any(isinstance(a, sm.RecordOutcome) for a in d.actions)
    assert not any(isinstance(a, sm.DeletePods) for a in d.actions)


def test_a_worker_that_joined_late_makes_the_attempt_narrowed() -> None:
    d = decide(waiting(phase="Running"), spec=ELASTIC, now=NOW + timedelta(seconds=2000),
               observed=elastic_pods("Succeeded", "Succeeded", "Succeeded", "Succeeded", start_gap=400,
                                     finish=1900))
    assert d.phase == "Succeeded" and not any(isinstance(a, sm.RecordOutcome) for a in d.actions)


def test_an_attempt_seen_running_narrow_is_not_measured_even_when_the_joiner_came_soon() -> None:
    narrow = decide(waiting(), spec=ELASTIC, observed=elastic_pods("Running", "Running", "Pending", "Pending"))
    assert narrow.status["narrowedAttempt"] == 1
    d = decide({**waiting(), **narrow.status}, spec=ELASTIC, now=NOW + timedelta(seconds=500),
               observed=elastic_pods("Succeeded", "Succeeded", "Succeeded", "Succeeded", start_gap=10, finish=450))
    assert d.phase == "Succeeded" and not any(isinstance(a, sm.RecordOutcome) for a in d.actions)
    wide = decide(waiting(), spec=ELASTIC, observed=elastic_pods("Running", "Running", "Running", "Running"))
    assert "narrowedAttempt" not in wide.status


def test_an_elastic_job_waits_for_the_rest_of_its_group_to_finish() -> None:
    d = decide(waiting(phase="Running"), spec=ELASTIC, now=NOW + timedelta(seconds=1001),
               observed=elastic_pods("Succeeded", "Running", "Pending", "Pending", finish=1000))
    assert d.phase is None and d.actions == []


def test_an_evicted_elastic_worker_requeues_the_attempt_as_for_any_gang() -> None:
    observed = elastic_pods("Running", "Running", "Pending", "Pending")
    evicted = sm.PodView("train-1-a1-w1", phase="Failed", reason="Evicted", node="n1", gpu_type="T4",
                         started_at=NOW, finished_at=NOW + timedelta(seconds=300))
    observed = pods(*[v for v in observed.training_pods.values() if v.name != evicted.name], evicted)
    d = decide(waiting(phase="Running"), spec=ELASTIC, observed=observed, now=NOW + timedelta(seconds=400))
    assert d.phase == "Requeued"
    (delete,) = [a for a in d.actions if isinstance(a, sm.DeletePods)]
    assert set(delete.pod_names) == {"train-1-a1-w0", "train-1-a1-w2", "train-1-a1-w3"}


def _with(observed: sm.Observed, *views: sm.PodView | str) -> sm.Observed:
    """`observed` with some workers replaced (a view) or gone (a name)."""
    out = dict(observed.training_pods)
    for v in views:
        if isinstance(v, str):
            del out[v]
        else:
            out[v.name] = v
    return sm.Observed(training_pods=out)


KUBELET_EVICTED = sm.PodView("train-1-a1-w2", phase="Failed", reason="Evicted", node="n2", gpu_type="T4",
                             started_at=NOW, finished_at=NOW + timedelta(seconds=300))


def test_an_elastic_attempt_that_loses_a_worker_goes_on_narrower_and_the_worker_rejoins() -> None:
    """4 workers, at least 2: worker 2 of 3 running is evicted; 0 and 1 go on, worker 2's pod is made again."""
    running = elastic_pods("Running", "Running", "Running", "Pending")
    was = decide(waiting(), spec=ELASTIC, observed=running)
    later = NOW + timedelta(seconds=400)
    d = decide({**waiting(), **was.status}, spec=ELASTIC, observed=_with(running, KUBELET_EVICTED), now=later)
    assert d.phase is None and d.status["reason"] == "Narrowed" and d.status["narrowedAttempt"] == 1
    assert "worker 2 was evicted (Evicted); going on with 2 of 4 workers" in d.status["message"]
    assert sm.DeletePods(("train-1-a1-w2",)) in d.actions  # the kubelet's Failed pod holds the name
    assert not any(isinstance(a, sm.CreateTrainingPods | sm.RecordRequeue) for a in d.actions)
    assert [a.reason for a in d.actions if isinstance(a, sm.EmitEvent)] == ["Narrowed"]
    status = {**waiting(), **was.status, **d.status}
    gone = decide(status, spec=ELASTIC, observed=_with(running, "train-1-a1-w2"), now=later)
    assert gone.actions == [sm.CreateTrainingPods(attempt=1, completed_steps=0)] and gone.status == {}  # said once
    back = decide(status, spec=ELASTIC, observed=_with(running, sm.PodView("train-1-a1-w2")), now=later)
    assert back.phase == "Running" and back.status["runningWorkers"] == 2
    assert "2 of 4 workers" in back.status["message"]


def test_a_worker_the_evictor_marked_saves_its_checkpoint_before_the_attempt_narrows() -> None:
    running = elastic_pods("Running", "Running", "Running", "Pending")
    marked = sm.PodView("train-1-a1-w2", phase="Running", node="n2", gpu_type="T4", started_at=NOW,
                        eviction_reason="online pods need its GPUs")
    d = decide(waiting(phase="Running"), spec=ELASTIC, observed=_with(running, marked))
    assert d.actions == [sm.DeletePods(("train-1-a1-w2",))] and d.status == {}
    leaving = sm.PodView("train-1-a1-w2", phase="Running", node="n2", gpu_type="T4", started_at=NOW, deleting=True,
                         eviction_reason="online pods need its GPUs", deletion_deadline=NOW + timedelta(seconds=30))
    assert decide(waiting(phase="Running"), spec=ELASTIC, observed=_with(running, leaving)).actions == []
    gone = decide(waiting(phase="Running"), spec=ELASTIC, observed=_with(running, "train-1-a1-w2"),
                  now=NOW + timedelta(seconds=60))
    assert sm.CreateTrainingPods(attempt=1, completed_steps=0) in gone.actions
    assert "worker 2 is gone; going on with 2 of 4 workers" in gone.status["message"]


@pytest.mark.parametrize("case", ["worker 0 lost", "too few left", "another failed", "rigid gang"])
def test_an_attempt_that_cannot_go_on_narrower_is_requeued(case: str) -> None:
    spec = {"workers": 4, "checkpointing": True} if case == "rigid gang" else ELASTIC
    running = elastic_pods("Running", "Running", "Running", "Running" if case == "rigid gang" else "Pending")
    lost = [KUBELET_EVICTED]
    if case == "worker 0 lost":
        lost.append(sm.PodView("train-1-a1-w0", phase="Failed", reason="Evicted", node="n0", gpu_type="T4",
                               started_at=NOW, finished_at=NOW + timedelta(seconds=300)))
    if case == "too few left":
        lost.append(sm.PodView("train-1-a1-w1", phase="Failed", reason="Evicted", node="n1", gpu_type="T4",
                               started_at=NOW, finished_at=NOW + timedelta(seconds=300)))
    if case == "another failed":
        lost.append(sm.PodView("train-1-a1-w1", phase="Failed", reason="Error", node="n1", gpu_type="T4",
                               started_at=NOW, finished_at=NOW + timedelta(seconds=300)))
    d = decide(waiting(phase="Running"), spec=spec, observed=_with(running, *lost), now=NOW + timedelta(seconds=400))
    assert d.phase == "Requeued" and "narrowedAttempt" not in d.status


def test_an_evicted_narrow_attempt_without_a_report_is_credited_at_its_narrow_width() -> None:
    """1,000 steps predicted at 200 s p90 on 4 workers: 100 s on 2 of them did at most a quarter, not a half."""
    observed = elastic_pods("Running", "Running", "Pending", "Pending")
    views = {**observed.training_pods}
    views["train-1-a1-w1"] = sm.PodView("train-1-a1-w1", phase="Failed", reason="Evicted", node="n1",
                                        gpu_type="A100-SXM4-40GB", started_at=NOW,
                                        finished_at=NOW + timedelta(seconds=100))
    views["train-1-a1-w0"] = sm.PodView("train-1-a1-w0", phase="Failed", reason="Evicted", node="n0",
                                        gpu_type="A100-SXM4-40GB", started_at=NOW,
                                        finished_at=NOW + timedelta(seconds=100))
    d = decide(waiting(phase="Running", narrowedAttempt=1), spec=ELASTIC, observed=pods(*views.values()),
               now=NOW + timedelta(seconds=100))
    assert d.phase == "Requeued" and d.status["completedSteps"] == 250
    rigid = decide(waiting(phase="Running"), spec={"workers": 4, "checkpointing": True},
                   observed=pods(*views.values()), now=NOW + timedelta(seconds=100))
    assert rigid.status["completedSteps"] == 500


# ---- eviction, failure, requeue ----------------------------------------------------------------------


def test_a_marked_checkpointing_pod_is_deleted_first_so_it_can_save_before_the_requeue() -> None:
    marked = sm.PodView("train-1-a1-w0", phase="Running", node="n1", gpu_type="T4", started_at=NOW,
                        eviction_reason="online-load")
    d = decide(waiting(phase="Running"), spec={"checkpointing": True}, observed=pods(marked),
               now=NOW + timedelta(seconds=100))
    assert d == sm.Decision(actions=[sm.DeletePods(("train-1-a1-w0",))])
    # without checkpoints there is nothing to save: requeue at once (and delete it)
    d = decide(waiting(phase="Running"), observed=pods(marked), now=NOW + timedelta(seconds=100))
    assert d.phase == "Requeued" and sm.DeletePods(("train-1-a1-w0",)) in d.actions


def test_eviction_requeues_with_backoff_and_keeps_progress_when_checkpointing() -> None:
    # the pod was deleted and ended without a report: credit what its predicted step time says it did
    view = sm.PodView("train-1-a1-w0", phase="Running", node="n1", gpu_type="T4", started_at=NOW,
                      eviction_reason="online-load", deleting=True, terminated=True)
    d = decide(waiting(phase="Running"), spec={"checkpointing": True}, observed=pods(view),
               now=NOW + timedelta(seconds=100))
    assert d.phase == "Requeued"
    assert d.status["completedSteps"] == 100  # 100 s at the p90 step time of 1 s on T4
    assert d.status["nextAttemptTime"] == "2026-11-21T06:01:50Z"  # now + 10 s
    assert sm.RecordRequeue("Evicted") in d.actions


def test_eviction_resumes_from_the_checkpoint_the_job_reported_and_learns_its_step_time() -> None:
    report = Progress(steps=640, attempt_steps=640, step_seconds=0.5, startup_seconds=20.0, checkpoint_steps=600)
    view = sm.PodView("train-1-a1-w0", phase="Failed", reason="Evicted", node="n1", gpu_type="T4", started_at=NOW,
                      finished_at=NOW + timedelta(seconds=340), progress=report)
    d = decide(waiting(phase="Running"), spec={"checkpointing": True}, observed=pods(view),
               now=NOW + timedelta(seconds=345))
    assert d.phase == "Requeued" and d.status["completedSteps"] == 600  # not the p90-time estimate (340)
    assert d.status["measurements"][0]["source"] == "progress"
    assert sm.ReportSample(gpu_type="T4", step_seconds=0.5, job_seconds=340.0, steps=640,
                           startup_seconds=20.0) in d.actions
    without = decide(waiting(phase="Running"), spec={"checkpointing": False}, observed=pods(view),
                     now=NOW + timedelta(seconds=345))
    assert without.status["completedSteps"] == 0


def test_eviction_without_checkpointing_restarts_from_zero() -> None:
    view = sm.PodView("train-1-a1-w0", phase="Failed", reason="Evicted", started_at=NOW)
    d = decide(waiting(phase="Running"), observed=pods(view), now=NOW + timedelta(seconds=100))
    assert d.phase == "Requeued" and d.status["completedSteps"] == 0


def test_deleted_pod_counts_as_eviction() -> None:
    d = decide(waiting(), observed=pods())
    assert d.phase == "Requeued" and "disappeared" in d.status["message"]


def test_failed_pod_requeues_until_max_attempts_then_fails() -> None:
    failed = sm.PodView("train-1-a3-w0", phase="Failed", reason="Error")
    d = decide(waiting(attempts=3), observed=pods(failed))
    assert d.phase == "Failed"
    assert cond(d.status, "Finished")["reason"] == "MaxAttemptsReached"
    failed = sm.PodView("train-1-a1-w0", phase="Failed", reason="Error")
    assert decide(waiting(), observed=pods(failed)).phase == "Requeued"


def test_a_planned_stop_requeues_from_its_checkpoint_without_using_up_an_attempt() -> None:
    """The evictor stopped the pod at a checkpoint before its window ended (offpeak.io/planned-stop): the job is
    requeued like after an eviction, but the attempt does not count against maxAttempts, and people are told so."""
    report = Progress(steps=640, attempt_steps=640, step_seconds=0.5, startup_seconds=20.0, checkpoint_steps=600)
    stopped = sm.PodView("train-1-a3-w0", phase="Failed", reason="Evicted", node="n1", gpu_type="T4", started_at=NOW,
                         finished_at=NOW + timedelta(seconds=340), progress=report,
                         eviction_reason="stopping at a checkpoint", planned_stop=True)
    d = decide(waiting(phase="Running", attempts=3), spec={"checkpointing": True}, observed=pods(stopped),
               now=NOW + timedelta(seconds=345))
    assert d.phase == "Requeued" and d.status["reason"] == "Yielded" and d.status["completedSteps"] == 600
    assert d.status["plannedStops"] == 1 and "attempt 3/3" in d.status["message"]
    assert "1 planned stop(s) not counted" in d.status["message"]
    assert sm.RecordRequeue("Yielded") in d.actions
    assert any(isinstance(a, sm.EmitEvent) and a.type == "Normal" and a.reason == "Yielded" for a in d.actions)
    # the next launch names attempt 4 but counts 3; an eviction then ends the job as before
    launched = decide({**waiting(attempts=3), **d.status}, spec={"checkpointing": True},
                      now=NOW + timedelta(seconds=400))
    assert launched.status["attempts"] == 4 and launched.status["message"].startswith("attempt 3/3")
    evicted = sm.PodView("train-1-a4-w0", phase="Failed", reason="Evicted", started_at=NOW)
    d = decide(waiting(phase="Running", attempts=4, plannedStops=1), spec={"checkpointing": True},
               observed=pods(evicted), now=NOW + timedelta(seconds=500))
    assert d.phase == "Failed" and cond(d.status, "Finished")["reason"] == "MaxAttemptsReached"
    # the same stop without the planned-stop mark is an eviction that uses up the third attempt
    unmarked = sm.PodView("train-1-a3-w0", phase="Failed", reason="Evicted", started_at=NOW,
                          eviction_reason="stopping at a checkpoint")
    assert decide(waiting(phase="Running", attempts=3), spec={"checkpointing": True}, observed=pods(unmarked),
                  now=NOW + timedelta(seconds=345)).phase == "Failed"


def test_backoff_doubles_per_attempt() -> None:
    view = sm.PodView("train-1-a2-w0", phase="Failed", reason="Evicted")
    d = decide(waiting(attempts=2), observed=pods(view))
    assert d.status["nextAttemptTime"] == "2026-11-21T06:00:20Z"


def test_requeued_waits_for_backoff_then_launches_the_next_attempt_with_remaining_work() -> None:
    status = waiting(phase="Requeued", nextAttemptTime="2026-11-21T06:00:30Z", completedSteps=400)
    assert decide(status, now=NOW + timedelta(seconds=10)).actions == []
    d = decide(status, now=NOW + timedelta(seconds=31))
    assert d.phase == "Waiting" and d.status["attempts"] == 2 and d.status["nextAttemptTime"] is None
    assert d.actions == [sm.CreateTrainingPods(attempt=2, completed_steps=400)]


def test_old_attempt_pods_do_not_confuse_the_current_attempt() -> None:
    old = sm.PodView("train-1-a1-w0", phase="Failed", reason="Evicted")
    new = sm.PodView("train-1-a2-w0", phase="Running", node="n1", gpu_type="T4", started_at=NOW)
    d = decide(waiting(attempts=2), observed=pods(old, new))
    assert d.phase == "Running"


def test_prediction_status_marks_fallbacks() -> None:
    fb = Prediction(source="user-estimate", steps=1000, gpus=(GpuPrediction("T4", 1, 1.5, 1000, 1500),))
    out = sm.prediction_status(status={"completedSteps": 0}, prediction=fb, reason="PredictorUnavailable",
                               message="predictor down", now=NOW)
    assert out["phase"] == "Predicted" and out["predictedSeconds"] == 1000
    assert cond(out, "Predicted")["status"] == "False" and cond(out, "Predicted")["reason"] == "PredictorUnavailable"
    assert FallbackSettings().p90_factor > 1


def test_progress_credit_uses_whole_job_time_not_step_time() -> None:
    """A predictor whose job time is mostly start-up (tiny steps) must not credit the whole job after seconds."""
    startup_heavy = Prediction(source="predictor", steps=1000, gpus=(
        GpuPrediction(gpu_type="T4", step_seconds=0.001, step_seconds_p90=0.002, job_seconds=61.0,
                      job_seconds_p90=100.0),))
    view = sm.PodView("train-1-a1-w0", phase="Running", gpu_type="T4", started_at=NOW, eviction_reason="online",
                      deleting=True, terminated=True)
    status = waiting(phase="Running", prediction=startup_heavy.to_status(), completedSteps=500)
    d = decide(status, spec={"checkpointing": True}, observed=pods(view), now=NOW + timedelta(seconds=10))
    # 500 steps left, p90 budget for them 50 s, 10 s done -> 100 more steps
    assert d.status["completedSteps"] == 600


# ---- Analyzing: the user's model source is invalid (extractor exit 2) vs any other failure ------------------


def test_extractor_exit_status_is_what_classifies_a_failure() -> None:
    assert sm.graph_failure_reason(exit_code=2, default="ExtractionFailed") == "InvalidModelSource"
    for code in (None, 1, 137, 139):
        assert sm.graph_failure_reason(exit_code=code, default="ExtractionFailed") == "ExtractionFailed"


def test_invalid_entrypoint_fails_the_job_and_creates_no_training_pod() -> None:
    line = "offpeak extract: error: cannot import entry point module 'nosuchmod'"
    for phase in ("Failed", "Pending"):  # the init container has ended; the pod phase may lag behind
        pod = sm.PodView("a", phase=phase, reason="", extract_exit_code=2, extract_message=line)
        d = decide(ANALYZING, spec=ENTRY, observed=sm.Observed(analysis_pod=pod))
        assert d.phase == "Failed" and d.status["finishTime"]
        graph, finished = cond(d.status, "GraphReady"), cond(d.status, "Finished")
        assert graph["status"] == "False" and graph["reason"] == "InvalidModelSource" and graph["message"] == line
        assert finished["status"] == "True" and finished["reason"] == "InvalidModelSource"
        assert cond(d.status, "Failed")["status"] == "True"
        assert not any(c["type"] == "Succeeded" for c in d.status["conditions"])
        assert kinds(d) == ["EmitEvent"]  # no Predict, no training pods
        assert d.actions[0].type == "Warning" and d.actions[0].reason == "InvalidModelSource"
        assert line in d.actions[0].message and line in d.status["message"]


def test_other_extractor_failures_fall_back_and_say_the_exit_status() -> None:
    for code, reason in ((1, "Error"), (137, "OOMKilled")):
        pod = sm.PodView("a", phase="Failed", reason=reason, extract_exit_code=code, extract_message="Traceback")
        d = decide(ANALYZING, spec=ENTRY, observed=sm.Observed(analysis_pod=pod))
        assert d.phase is None  # still Analyzing -> Predicted by the Predict action, never Failed
        graph = cond(d.status, "GraphReady")
        assert graph["reason"] == "AnalysisFailed" and f"exited {code}" in graph["message"]
        assert kinds(d) == ["EmitEvent", "Predict"]


def test_in_process_invalid_source_condition_fails_the_job() -> None:
    torchvision = {"modelSource": {"torchvision": "no_such_model"}}
    graph = {"type": "GraphReady", "status": "False", "reason": "InvalidModelSource",
             "message": "offpeak extract: error: unknown torchvision model 'no_such_model'",
             "lastTransitionTime": "2026-11-21T06:00:00Z"}
    d = decide({**ANALYZING, "conditions": [graph]}, spec=torchvision)
    assert d.phase == "Failed" and cond(d.status, "Finished")["reason"] == "InvalidModelSource"
    assert kinds(d) == ["EmitEvent"] and "no_such_model" in d.actions[0].message
    other = {**graph, "reason": "ExtractionFailed", "message": "extraction of x ran past 180s"}
    d = decide({**ANALYZING, "conditions": [other]}, spec=torchvision)
    assert d.phase is None and kinds(d) == ["Predict"]


# ---- status by the API conventions -----------------------------------------------------------------------


def _types_true(status: dict[str, Any]) -> set[str]:
    return {c["type"] for c in status["conditions"] if c["status"] == "True"}


def test_every_ending_sets_finished_and_its_outcome_true_so_kubectl_wait_returns() -> None:
    done = sm.PodView("train-1-a1-w0", phase="Succeeded", node="n1", gpu_type="T4", started_at=NOW,
                      finished_at=NOW + timedelta(seconds=10))
    ok = decide(waiting(phase="Running"), observed=pods(done), now=NOW + timedelta(seconds=11))
    assert {"Finished", "Succeeded"} <= _types_true(ok.status) and "Failed" not in _types_true(ok.status)
    assert ok.status["reason"] == "Succeeded"
    failed = sm.PodView("train-1-a3-w0", phase="Failed", reason="Error")
    out = decide(waiting(attempts=3), observed=pods(failed))
    assert {"Finished", "Failed"} <= _types_true(out.status) and "Succeeded" not in _types_true(out.status)
    assert cond(out.status, "Failed")["reason"] == out.status["reason"] == "MaxAttemptsReached"
    invalid = decide({}, problems=[Problem("UnknownGPUType", "unknown GPU type(s) in spec.gpuTypes: Z9")])
    assert {"Finished", "Failed"} <= _types_true(invalid.status)
    assert cond(invalid.status, "Finished")["reason"] == "UnknownGPUType"


def test_display_fields_give_human_units_and_nothing_once_they_agree() -> None:
    out = sm.display_fields({"predictedSeconds": 100.0}, {"predictedSeconds": 4331.52, "actualSeconds": 59.2})
    assert out == {"predicted": "1h13m", "actual": "1m"}
    assert sm.display_fields({"predictedSeconds": 4331.52, "predicted": "1h13m"}, {"phase": "Running"}) == {}
    assert sm.display_fields({"predicted": "5m"}, {"predictedSeconds": None}) == {"predicted": None}


def test_waiting_job_says_why_in_the_schedulers_words_once() -> None:
    said = "0/4 nodes are available: 4 window 12m is shorter than the 1h03m (p90) the job needs on L4."
    view = sm.PodView("train-1-a1-w0", phase="Pending", unschedulable=said)
    d = decide(waiting(), observed=pods(view))
    assert said in d.status["message"] and d.status["reason"] == "Unschedulable" and d.actions == []
    assert cond(d.status, "Scheduled") == {**cond(d.status, "Scheduled"), "status": "False",
                                           "reason": "Unschedulable"}
    assert decide({**waiting(), **d.status}, observed=pods(view)).status == {}  # nothing new: no write


def test_an_evicted_checkpointing_pod_is_waited_for_until_it_has_written_its_report() -> None:
    deadline = NOW + timedelta(seconds=60)
    saving = sm.PodView("train-1-a1-w0", phase="Running", node="n1", gpu_type="T4", started_at=NOW,
                        eviction_reason="online-load", deleting=True, deletion_deadline=deadline)
    ckpt = {"checkpointing": True}
    assert decide(waiting(phase="Running"), spec=ckpt, observed=pods(saving), now=NOW + timedelta(seconds=30)) \
        == sm.Decision()
    # without checkpoints there is nothing to wait for; past the grace period (and its slack) neither
    assert decide(waiting(phase="Running"), observed=pods(saving), now=NOW + timedelta(seconds=30)).phase == "Requeued"
    late = NOW + timedelta(seconds=60 + SETTINGS.requeue.termination_slack_seconds + 1)
    assert decide(waiting(phase="Running"), spec=ckpt, observed=pods(saving), now=late).phase == "Requeued"
    report = Progress(steps=640, attempt_steps=640, step_seconds=0.5, startup_seconds=20.0, checkpoint_steps=600)
    ended = sm.PodView("train-1-a1-w0", phase="Running", node="n1", gpu_type="T4", started_at=NOW,
                       eviction_reason="online-load", deleting=True, deletion_deadline=deadline, terminated=True,
                       progress=report)
    d = decide(waiting(phase="Running"), spec=ckpt, observed=pods(ended), now=NOW + timedelta(seconds=31))
    assert d.phase == "Requeued" and d.status["completedSteps"] == 600


# ---- spec.suspend and Kueue (offpeak_operator.admission) ---------------------------------------------------

PREDICTED = {"phase": "Predicted", "attempts": 0, "completedSteps": 0, "prediction": PREDICTION.to_status(),
             "conditions": []}
QUEUE = "team-gpus"


def queued(status: dict[str, Any], workload: Any, *, spec: dict[str, Any] | None = None,
           observed: sm.Observed | None = None, now=NOW) -> sm.Decision:
    body = job_body(**(spec or {}))
    seen = sm.Observed(training_pods=(observed or sm.Observed()).training_pods, workload=workload)
    return sm.decide(job_name="train-1", spec=parse_spec(body["spec"]), problems=[], status=status, observed=seen,
                     now=now, settings=SETTINGS, queue=QUEUE)


def wl(**kw: Any) -> Any:
    from offpeak_operator.admission import WorkloadView

    return WorkloadView(name="trainingjob-train-1-uid12", **kw)


def test_a_suspended_job_is_held_before_its_first_attempt_and_says_so_once() -> None:
    d = decide(PREDICTED, spec={"suspend": True})
    assert "CreateTrainingPods" not in kinds(d) and d.status["reason"] == "Suspended"
    assert cond(d.status, "Suspended")["status"] == "True" and "spec.suspend" in d.status["message"]
    assert kinds(d) == ["EmitEvent"]
    again = decide({**PREDICTED, **d.status}, spec={"suspend": True})
    assert again.status == {} and again.actions == []
    resumed = decide({**PREDICTED, **d.status})
    assert resumed.phase == "Waiting" and kinds(resumed) == ["CreateTrainingPods"]
    assert cond(resumed.status, "Suspended")["status"] == "False"


def test_suspending_a_running_job_stops_its_pods_and_requeues_it_without_counting() -> None:
    running = waiting(phase="Running", attemptStartTime="2026-11-21T05:50:00Z")
    live = pods(sm.PodView("train-1-a1-w0", phase="Running", node="n1", started_at=NOW - timedelta(minutes=10)))
    d = decide(running, spec={"suspend": True}, observed=live)
    assert d.actions == [sm.StopPods(("train-1-a1-w0",), "Suspended")] and d.status == {}
    stopped = pods(sm.PodView("train-1-a1-w0", phase="Running", node="n1", eviction_reason="Suspended",
                              started_at=NOW - timedelta(minutes=10)))
    requeued = decide(running, spec={"suspend": True}, observed=stopped)
    assert requeued.phase == "Requeued" and requeued.status["reason"] == "Suspended"
    assert requeued.status["plannedStops"] == 1 and requeued.status["nextAttemptTime"] == "2026-11-21T06:00:00Z"
    assert "DeletePods" in kinds(requeued) and "RecordRequeue" in kinds(requeued)
    held = decide({**running, **requeued.status}, spec={"suspend": True})
    assert kinds(held) == ["EmitEvent"] and held.status["reason"] == "Suspended"
    back = decide({**running, **requeued.status, **held.status})
    assert back.phase == "Waiting" and back.status["attempts"] == 2 and "attempt 1/3" in back.status["message"]


def test_a_queued_job_creates_its_workload_then_waits_for_kueue_then_runs_on_its_flavors() -> None:
    first = queued(PREDICTED, None)
    assert kinds(first) == ["CreateWorkload", "EmitEvent"] and first.status["reason"] == "QueuedInKueue"
    waiting_for_quota = queued({**PREDICTED, **first.status}, wl())
    assert "CreateTrainingPods" not in kinds(waiting_for_quota) and "waiting for quota" in waiting_for_quota.status[
        "message"]
    admitted = queued(PREDICTED, wl(quota_reserved=True, admitted=True, node_selector={"pool": "a100"},
                                    tolerations=({"key": "pool", "operator": "Exists"},)))
    (create,) = [a for a in admitted.actions if isinstance(a, sm.CreateTrainingPods)]
    assert create.placement.node_selector == {"pool": "a100"}
    assert create.placement.tolerations == ({"key": "pool", "operator": "Exists"},)
    # a job in no queue is placed as before
    (plain,) = [a for a in decide(PREDICTED).actions if isinstance(a, sm.CreateTrainingPods)]
    assert plain.placement == sm.admission.Placement()


def test_kueue_evicting_a_running_job_stops_it_then_gives_the_quota_back() -> None:
    running = waiting(phase="Running", attemptStartTime="2026-11-21T05:50:00Z")
    evicted = wl(quota_reserved=True, admitted=True, evicted=True, evicted_reason="Preempted")
    live = pods(sm.PodView("train-1-a1-w0", phase="Running", node="n1", started_at=NOW - timedelta(minutes=10)))
    assert queued(running, evicted, observed=live).actions == [sm.StopPods(("train-1-a1-w0",), "EvictedByKueue")]
    stopped = pods(sm.PodView("train-1-a1-w0", phase="Failed", reason="Evicted", eviction_reason="EvictedByKueue",
                              started_at=NOW - timedelta(minutes=10), finished_at=NOW))
    requeued = queued(running, evicted, observed=stopped)
    assert requeued.phase == "Requeued" and requeued.status["plannedStops"] == 1
    release = queued({**running, **requeued.status}, evicted)
    assert "ReleaseWorkload" in kinds(release) and "CreateTrainingPods" not in kinds(release)
    assert release.status["reason"] == "EvictedByKueue"
    pending = queued({**running, **requeued.status, **release.status}, wl())
    assert "CreateTrainingPods" not in kinds(pending) and pending.status["reason"] == "QueuedInKueue"


def test_an_ended_queued_job_finishes_its_workload_once() -> None:
    done = {"phase": "Succeeded", "message": "succeeded in 10m"}
    d = queued(done, wl(quota_reserved=True, admitted=True))
    assert d.actions == [sm.FinishWorkload(succeeded=True, message="succeeded in 10m")]
    assert queued(done, wl(finished=True)).actions == []
    failed = queued({"phase": "Failed", "message": "no attempts left"}, wl(quota_reserved=True))
    assert failed.actions == [sm.FinishWorkload(succeeded=False, message="no attempts left")]


def test_a_running_attempts_steady_pace_is_written_on_its_running_pods() -> None:
    report = {"attempt": 1, "receivedAt": timestamp(NOW - timedelta(seconds=5)), "steps": 101, "stepSeconds": 0.3,
              "attemptSteps": 101, "checkpointSteps": 50}
    running = waiting(phase="Running", node="n1", attemptStartTime="2026-11-21T05:50:00Z", liveReport=report)
    observed = pods(sm.PodView("train-1-a1-w0", phase="Running", node="n1", gpu_type="A100-SXM4-40GB",
                               started_at=NOW - timedelta(minutes=10)))
    d = decide(running, observed=observed)
    (annotate,) = [a for a in d.actions if isinstance(a, sm.AnnotatePods)]
    assert annotate.pod_names == ("train-1-a1-w0",)
    live = LiveProgress.decode(annotate.annotations[LIVE_PROGRESS_ANNOTATION])
    assert (live.steps, live.step_seconds, live.checkpoint_step, live.total_steps) == (101, 0.3, 50, 1000)
    again = decide({**running, **d.status}, observed=observed)  # the same report read again: nothing to write
    assert not any(isinstance(a, sm.AnnotatePods) for a in again.actions)
