"""Scenario (#18): a checkpointing job finishes in two short idle windows on two nodes, where it would otherwise wait
for one long window that never comes.

Its own cluster (`pytest-windows`): two GPU nodes whose online load follows a plan of our own, a 240 s "day" with 4
past days backfilled into Prometheus, so the extender's forecaster knows it. The first node is idle for the first
80 s of each day, the second from 75 s to 160 s; the rest of the day each is full of online work. The job needs
100 s of GPU time (p90 150 s): no window on either node ever fits it whole. The extender runs with expected-goodput
admission on (`--goodput-min-efficiency`), the rule the simulator measured: it learns live how long the forecast's
windows really last, and admits a job that checkpoints every 10 s into a window shorter than its run when the work
it keeps is worth the GPU time it holds. The job starts in the first node's window, is evicted when online work
returns, reports its checkpoint, and resumes on the second node for the steps it has left; the online pods that
come back wait for its GPUs no longer than the eviction grace period and the scheduler's slack.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from offpeak_core.timeparse import parse_timestamp
from offpeak_e2e.daywindows import (
    attempt_pods, checkpoint_volume, checkpointed_job, day_cluster, wait_for_evidence_and_first_window,
)  # fmt: skip
from offpeak_e2e.harness import SCHEDULING_SLACK_S, E2ECluster
from offpeak_e2e.nodes import plan_nodes

DAY = 240.0
TYPES = ("A100-SXM4-40GB", "H100-SXM5-80GB")
FIRST, SECOND = (spec.name for spec in plan_nodes(count=2, gpu_types=TYPES))
WINDOWS = {FIRST: (0, 80), SECOND: (75, 160)}  # idle seconds of each day
STEPS, STEP_SECONDS, GPUS = 100, 1.0, 4
# what the fake training code reports when it is stopped: 50 steps done, all saved by the last checkpoint
REPORT = {"offpeak_progress": 1, "steps": 50, "attempt_steps": 50, "step_seconds": STEP_SECONDS,
          "startup_seconds": 1.0, "checkpoint_steps": 50}


@pytest.fixture(scope="module")
def windows_cluster() -> Iterator[E2ECluster]:
    yield from day_cluster("windows", windows=WINDOWS, day=DAY, gpu_types=TYPES, extra_env={
        "OFFPEAK_GOODPUT_MIN_EFFICIENCY": "0.5", "OFFPEAK_GOODPUT_STARTUP_SECONDS": "3",
        "OFFPEAK_GOODPUT_MIN_SAMPLES": "10"})


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_checkpointing_job_finishes_in_two_short_windows_on_two_nodes(windows_cluster: E2ECluster) -> None:
    c = windows_cluster
    ns = c.new_namespace("windows")
    longest = max(end - start for start, end in WINDOWS.values())
    wait_for_evidence_and_first_window(c, day=DAY)
    t0 = time.time()

    pv = checkpoint_volume(c, ns)
    job = checkpointed_job("short", pv=pv, steps=STEPS, step_seconds=STEP_SECONDS, gpus=GPUS, interval=10,
                           gpu_types=TYPES, report=REPORT)
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))

    first = c.wait_phase(ns, "short", ["Running", "Failed"], timeout=45)["status"]
    assert first["phase"] == "Running" and first["node"] == FIRST, first
    pod = attempt_pods(c, ns, "short")[1]
    p90 = json.loads(pod["metadata"]["annotations"]["offpeak.io/predicted-job-seconds"])[TYPES[0]]["p90"]
    assert p90 > longest, (p90, longest)  # no window on any node fits the whole job: it would wait for ever
    print(f"[e2e] attempt 1 on {FIRST} at +{time.time() - t0:.0f}s, p90 {p90:.0f}s, longest window {longest}s")

    def resumed() -> bool:
        status = c.trainingjob(ns, "short").get("status") or {}
        return status.get("phase") == "Running" and int(status.get("attempts") or 0) >= 2 or status.get("phase") \
            == "Failed"  # fmt: skip

    c.wait_for("the job to resume on the second node", resumed, timeout=DAY)
    second = c.trainingjob(ns, "short")["status"]
    assert second["node"] == SECOND and second["attempts"] == 2, second
    assert second["completedSteps"] == REPORT["checkpoint_steps"], second  # from its report
    print(f"[e2e] attempt 2 on {SECOND} at +{time.time() - t0:.0f}s, resuming after step {second['completedSteps']}")
    # the first node's online pods came back when its window ended; 4 of the 8 waited for the job's GPUs
    grace = c.cluster.settings.eviction_grace_s
    c.wait_for(f"8 online pods running on {FIRST}", lambda: len(c.online_waits(FIRST)) == 8, timeout=60)
    waits = sorted(c.online_waits(FIRST))
    print(f"[e2e] online pods' wait for a GPU: p50 {waits[4]:.0f}s, max {waits[-1]:.0f}s (eviction grace {grace}s)")
    assert waits[-1] <= grace + SCHEDULING_SLACK_S, waits

    done = c.wait_phase(ns, "short", ["Succeeded", "Failed"], timeout=DAY)["status"]
    assert done["phase"] == "Succeeded", done
    last = attempt_pods(c, ns, "short")[2]  # (the stopped first attempt's pod is gone once it reported)
    assert last["spec"]["nodeName"] == SECOND
    ran = last["status"]["containerStatuses"][0]["state"]["terminated"]
    seconds = parse_timestamp(ran["finishedAt"]) - parse_timestamp(ran["startedAt"])
    left = (STEPS - REPORT["checkpoint_steps"]) * STEP_SECONDS
    assert left - 2 <= seconds <= left + 8, (seconds, ran)  # only the steps it had left
    total = time.time() - t0
    print(f"[e2e] finished in two windows after {total:.0f}s (attempt 2 ran {seconds:.0f}s)")
    assert total < DAY  # both windows of one day, not a window of a later day
    c.delete_namespace(ns)
    c.kubectl("delete", "pv", pv, "--wait=false", check=False)
