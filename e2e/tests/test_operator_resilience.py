"""The real operator through eviction, an operator restart, and deletion of its TrainingJob."""

from __future__ import annotations

import json
import time

from test_operator_lifecycle import (RunningOperator, _apply, _job, kopf_operator,  # noqa: F401 - fixtures
                                     operator_service_paused)

from offpeak_e2e.harness import E2ECluster


def test_eviction_requeues_and_the_next_attempt_predicts_the_remaining_work(
        e2e_cluster: E2ECluster, e2e_namespace: str, kopf_operator: RunningOperator) -> None:  # noqa: F811
    ns = e2e_namespace
    # user estimate 600 s (p90 900 s) for 20000 steps: each running second credits ~22 steps. The pod would run
    # 30 s: long enough that a loaded machine cannot let it finish before the eviction below
    # on the H100 node: no other scenario puts online load there, so the forecast cannot shorten its window below
    # the second attempt's ~17 min (the A100 and L4 nodes carry the dashboard scenario's surge in their history,
    # which the seasonal forecast repeats every compressed day)
    _apply(e2e_cluster, ns, _job("evicted", sim_seconds=30, checkpointing=True, estimatedSeconds=600, steps=20000,
                                 modelSource=None, maxAttempts=3, gpuTypes=["H100-SXM5-80GB"]))
    e2e_cluster.wait_phase(ns, "evicted", ["Running"], timeout=120)
    time.sleep(3)  # let it make some progress
    first = e2e_cluster.get("pod", "evicted-a1-w0", "-n", ns)
    before = json.loads(first["metadata"]["annotations"]["offpeak.io/predicted-job-seconds"])
    # what the eviction controller does: mark, then delete. The operator deletes a marked checkpointing pod itself
    # (so it saves before the requeue), so the pod may be gone already when the second call comes
    e2e_cluster.kubectl("-n", ns, "annotate", "pod", "evicted-a1-w0", "offpeak.io/eviction-reason=online-load")
    e2e_cluster.kubectl("-n", ns, "delete", "pod", "evicted-a1-w0", "--wait=false", "--ignore-not-found")
    requeued = e2e_cluster.wait_phase(ns, "evicted", ["Requeued", "Waiting", "Running"], timeout=60)["status"]
    e2e_cluster.wait_for("attempt 2 pod", lambda: bool(e2e_cluster.pods(ns, "offpeak.io/attempt=2")), timeout=60)
    (second,) = e2e_cluster.pods(ns, "offpeak.io/trainingjob=evicted,offpeak.io/attempt=2")
    after = json.loads(second["metadata"]["annotations"]["offpeak.io/predicted-job-seconds"])
    assert all(after[t]["p50"] < before[t]["p50"] for t in before), (before, after)
    credited = requeued.get("completedSteps") or e2e_cluster.trainingjob(ns, "evicted")["status"]["completedSteps"]
    assert credited > 0
    done = e2e_cluster.wait_phase(ns, "evicted", ["Succeeded", "Failed"], timeout=120)["status"]
    assert done["phase"] == "Succeeded" and done["attempts"] == 2, done
    scheduled = [c for c in done["conditions"] if c["type"] == "Scheduled"][0]
    assert scheduled["status"] == "True", (requeued, done)
    assert kopf_operator.op.metrics.registry.get_sample_value("offpeak_job_requeues_total", {"reason": "Evicted"}) == 1


def test_restarted_operator_resumes_without_duplicates(e2e_cluster: E2ECluster, e2e_namespace: str,
                                                       kopf_operator: RunningOperator) -> None:  # noqa: F811
    ns = e2e_namespace
    _apply(e2e_cluster, ns, _job("restart", sim_seconds=8))
    e2e_cluster.wait_phase(ns, "restart", ["Waiting", "Running"], timeout=120)
    kopf_operator.stop()
    kopf_operator.start()
    done = e2e_cluster.wait_phase(ns, "restart", ["Succeeded", "Failed"], timeout=120)["status"]
    assert done["phase"] == "Succeeded" and done["attempts"] == 1, done
    names = sorted(p["metadata"]["name"] for p in e2e_cluster.pods(ns, "offpeak.io/trainingjob=restart"))
    assert names == ["restart-a1-w0"], names
    cms = e2e_cluster.get("configmaps", "-n", ns, "-l", "offpeak.io/trainingjob=restart")["items"]
    assert len(cms) <= 1


def test_deleting_the_job_removes_what_the_operator_made(e2e_cluster: E2ECluster, e2e_namespace: str,
                                                         kopf_operator: RunningOperator) -> None:  # noqa: F811
    ns = e2e_namespace
    _apply(e2e_cluster, ns, _job("gone", sim_seconds=120, workers=2))
    e2e_cluster.wait_for("two training pods",
                         lambda: len(e2e_cluster.pods(ns, "offpeak.io/trainingjob=gone")) == 2, timeout=120)
    kopf_operator.stop()  # deletion must not depend on the operator (no blocking finalizer)
    e2e_cluster.kubectl("-n", ns, "delete", "trainingjob", "gone", "--wait=true", timeout=60)
    e2e_cluster.wait_for("garbage collection of the job's pods",
                         lambda: e2e_cluster.pods(ns, "offpeak.io/trainingjob=gone") == [], timeout=90)
    kopf_operator.start()
