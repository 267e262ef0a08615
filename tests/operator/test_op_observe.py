from __future__ import annotations

from datetime import UTC, datetime

from offpeak_operator.observe import observe, pod_view


def pod(name: str, role: str = "training", *, phase: str = "Running", node: str = "n1", **extra) -> dict:
    body = {"metadata": {"name": name, "labels": {"offpeak.io/role": role, "offpeak.io/trainingjob": "j"},
                         "annotations": extra.pop("annotations", {})},
            "spec": {"nodeName": node}, "status": {"phase": phase, **extra}}
    return body


def test_container_times_and_node_gpu_type() -> None:
    p = pod("j-a1-w0", phase="Succeeded", containerStatuses=[{"state": {"terminated": {
        "startedAt": "2026-11-21T06:00:00Z", "finishedAt": "2026-11-21T06:05:00Z"}}}])
    v = pod_view(p, node_gpu_types={"n1": "T4"})
    assert v.gpu_type == "T4" and v.phase == "Succeeded" and not v.evicted
    assert v.started_at == datetime(2026, 11, 21, 6, tzinfo=UTC)
    assert (v.finished_at - v.started_at).total_seconds() == 300


def test_start_falls_back_to_ready_condition_then_start_time() -> None:
    p = pod("x", conditions=[{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-21T06:00:07Z"}],
            startTime="2026-11-21T06:00:01Z")
    assert pod_view(p, node_gpu_types={}).started_at.second == 7
    p = pod("x", startTime="2026-11-21T06:00:01Z")
    assert pod_view(p, node_gpu_types={}).started_at.second == 1


def test_eviction_signals() -> None:
    assert pod_view(pod("a", phase="Failed", reason="Evicted"), node_gpu_types={}).evicted
    assert pod_view(pod("b", annotations={"offpeak.io/eviction-reason": "online"}), node_gpu_types={}).evicted
    deleting = pod("c")
    deleting["metadata"]["deletionTimestamp"] = "2026-11-21T06:00:00Z"
    assert pod_view(deleting, node_gpu_types={}).evicted
    assert not pod_view(pod("d", phase="Failed", reason="Error"), node_gpu_types={}).evicted
    stopped = pod_view(pod("e", annotations={"offpeak.io/eviction-reason": "window ends",
                                             "offpeak.io/planned-stop": "true"}), node_gpu_types={})
    assert stopped.evicted and stopped.planned_stop
    assert not pod_view(pod("f", annotations={"offpeak.io/eviction-reason": "online"}), node_gpu_types={}).planned_stop


def test_observe_splits_roles() -> None:
    obs = observe([pod("j-analysis", "analysis", phase="Succeeded"), pod("j-a1-w0"), pod("j-graph", "graph")],
                  node_gpu_types={})
    assert obs.analysis_pod.name == "j-analysis" and list(obs.training_pods) == ["j-a1-w0"]


def test_analysis_pod_extract_exit_status_and_last_log_line() -> None:
    terminated = {"exitCode": 2, "reason": "Error",
                  "message": "UserWarning: noise\noffpeak extract: error: unknown torchvision model 'x'\n\n"}
    body = pod("j-analysis", "analysis", phase="Failed", initContainerStatuses=[
        {"name": "bundle", "state": {"terminated": {"exitCode": 0}}},
        {"name": "extract", "state": {"terminated": terminated}}])
    view = pod_view(body, node_gpu_types={})
    assert view.extract_exit_code == 2
    assert view.extract_message == "offpeak extract: error: unknown torchvision model 'x'"
    running = pod("j-analysis", "analysis", phase="Pending", initContainerStatuses=[
        {"name": "extract", "state": {"running": {"startedAt": "2026-11-21T06:00:00Z"}}}])
    assert pod_view(running, node_gpu_types={}).extract_exit_code is None
    oom = pod("j-analysis", "analysis", phase="Failed", initContainerStatuses=[
        {"name": "extract", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}])
    assert pod_view(oom, node_gpu_types={}).extract_exit_code == 137


def test_training_pod_progress_report_from_the_termination_message() -> None:
    report = '{"offpeak_progress":1,"steps":900,"attempt_steps":500,"step_seconds":0.25,"checkpoint_steps":800}'
    done = pod("j-a2-w0", phase="Succeeded", containerStatuses=[
        {"name": "train", "state": {"terminated": {"exitCode": 0, "message": report}}}])
    progress = pod_view(done, node_gpu_types={}).progress
    assert progress is not None and (progress.steps, progress.step_seconds, progress.checkpoint_steps) == (900, 0.25, 800)
    restarted = pod("j-a2-w0", containerStatuses=[{"name": "train", "state": {"running": {}},
                                                   "lastState": {"terminated": {"message": report}}}])
    assert pod_view(restarted, node_gpu_types={}).progress == progress
    crashed = pod("j-a2-w0", phase="Failed", containerStatuses=[
        {"name": "train", "state": {"terminated": {"exitCode": 1, "message": "Traceback: boom"}}}])
    assert pod_view(crashed, node_gpu_types={}).progress is None  # a log tail is no report
    assert pod_view(pod("j-a2-w0"), node_gpu_types={}).progress is None


def test_a_pending_pod_carries_the_schedulers_reason_and_a_deleted_one_its_deadline() -> None:

    said = "0/2 nodes are available: 2 gang of 2 needs 2 nodes with a fitting window, 1 has one."
    pending = {"metadata": {"name": "p"}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": said}]}}
    assert pod_view(pending, node_gpu_types={}).unschedulable == said
    deleting = {"metadata": {"name": "p", "deletionTimestamp": "2026-11-21T06:01:00Z",
                             "annotations": {"offpeak.io/train-container": "trainer"}},
                "spec": {"nodeName": "n1"},
                "status": {"phase": "Running", "containerStatuses": [
                    {"name": "trainer", "state": {"terminated": {"exitCode": 143, "message": "x"}}}]}}
    view = pod_view(deleting, node_gpu_types={"n1": "T4"})
    assert view.deleting and view.deletion_deadline is not None and view.deletion_deadline.minute == 1
    assert view.terminated and not pod_view(pending, node_gpu_types={}).terminated
