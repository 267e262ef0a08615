"""Scenario (#18): with `offpeak evictor --yield-at-checkpoints`, a checkpointing job whose idle window is forecast to
end is stopped before the end (a planned stop), before any online pod needs its GPUs: it has a checkpoint claim, so
it saves as it stops (SIGTERM, its 5-s gracePeriodSeconds) and is stopped just that long before the end, not at its
last periodic checkpoint; the operator requeues it with reason `Yielded` without counting the attempt, and it
finishes in a window on another node.

Its own cluster (`pytest-yield`), built like the short-windows scenario: two GPU nodes whose online load follows a
240 s "day" with 4 past days backfilled into Prometheus. The first node is idle for the first 120 s of each day,
the second from 110 s to 235 s. The job needs 130 s of GPU time, more than either window, checkpoints every 10 s,
and is admitted by the extender's expected-goodput rule. The evictor fits the nodes' forecasts itself and stops the
job when its next look (every 2 s) would leave it less than its save before 10 s ahead of its window's forecast
end.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from offpeak_e2e.daywindows import (
    attempt_pods, checkpoint_volume, checkpointed_job, day_cluster, day_phase, wait_for_evidence_and_first_window,
)  # fmt: skip
from offpeak_e2e.harness import SCHEDULING_SLACK_S, E2ECluster
from offpeak_e2e.nodes import plan_nodes

DAY = 240.0
TYPES = ("A100-SXM4-40GB", "H100-SXM5-80GB")
FIRST, SECOND = (spec.name for spec in plan_nodes(count=2, gpu_types=TYPES))
WINDOWS = {FIRST: (0, 120), SECOND: (110, 235)}  # idle seconds of each day
STEPS, STEP_SECONDS, GPUS, INTERVAL, MARGIN = 130, 1.0, 4, 10, 10
# what the fake training code reports when it is stopped: 50 steps done, all saved by the last checkpoint
REPORT = {"offpeak_progress": 1, "steps": 50, "attempt_steps": 50, "step_seconds": STEP_SECONDS,
          "startup_seconds": 1.0, "checkpoint_steps": 50}


@pytest.fixture(scope="module")
def yield_cluster() -> Iterator[E2ECluster]:
    yield from day_cluster("yield", windows=WINDOWS, day=DAY, gpu_types=TYPES, extra_env={
        "OFFPEAK_GOODPUT_MIN_EFFICIENCY": "0.5", "OFFPEAK_GOODPUT_STARTUP_SECONDS": "3",
        "OFFPEAK_GOODPUT_MIN_SAMPLES": "10", "OFFPEAK_YIELD_AT_CHECKPOINTS": "true",
        "OFFPEAK_YIELD_MARGIN_SECONDS": str(MARGIN)})


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_job_stops_at_its_checkpoint_before_its_window_ends_and_finishes_elsewhere(
        yield_cluster: E2ECluster) -> None:
    c = yield_cluster
    ns = c.new_namespace("yield")
    wait_for_evidence_and_first_window(c, day=DAY)
    t0 = time.time()

    pv = checkpoint_volume(c, ns)
    job = checkpointed_job("yielding", pv=pv, steps=STEPS, step_seconds=STEP_SECONDS, gpus=GPUS, interval=INTERVAL,
                           gpu_types=TYPES, report=REPORT, maxAttempts=1)
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))

    first = c.wait_phase(ns, "yielding", ["Running", "Failed"], timeout=45)["status"]
    assert first["phase"] == "Running" and first["node"] == FIRST, first
    pod_name = attempt_pods(c, ns, "yielding")[1]["metadata"]["name"]
    print(f"[e2e] attempt 1 on {FIRST} at +{time.time() - t0:.0f}s (day {day_phase(c, day=DAY):.0f}s)")

    def stopped() -> bool:
        status = c.trainingjob(ns, "yielding").get("status") or {}
        return int(status.get("plannedStops") or 0) >= 1 or status.get("phase") in ("Failed", "Succeeded")

    c.wait_for("a planned stop", stopped, timeout=DAY)
    stop_day = day_phase(c, day=DAY)
    status = c.trainingjob(ns, "yielding")["status"]
    assert status["plannedStops"] == 1, status
    print(f"[e2e] planned stop seen at day {stop_day:.0f}s: {status['message']}")
    end = WINDOWS[FIRST][1]
    assert stop_day < end + 5, (stop_day, end)  # before the window's end (the watch may lag a few seconds)
    events = json.loads(c.kubectl("-n", ns, "get", "events", "-o", "json").stdout)["items"]
    reasons = {(e.get("involvedObject", {}).get("name"), e.get("reason")) for e in events}
    # the evictor's Normal Event on the TrainingJob names the pod; the operator's says it was requeued
    yielded = [e for e in events if e.get("reason") == "OfflinePodYielded"]
    assert yielded and yielded[0]["type"] == "Normal" and pod_name in yielded[0]["message"], yielded
    assert "stopping to save" in yielded[0]["message"], yielded  # it saves as it stops (offpeak.io/save-on-stop)
    assert ("yielding", "Yielded") in reasons, sorted(reasons)

    # the online pods that come back at the window's end find their GPUs free: nobody waits for an eviction
    c.wait_for(f"8 online pods running on {FIRST}", lambda: len(c.online_waits(FIRST)) == 8, timeout=DAY)
    waits = sorted(c.online_waits(FIRST))
    print(f"[e2e] online pods' wait for a GPU after the planned stop: max {waits[-1]:.0f}s")
    assert waits[-1] <= SCHEDULING_SLACK_S, waits

    # maxAttempts is 1: only an attempt that does not count lets the job go on
    done = c.wait_phase(ns, "yielding", ["Succeeded", "Failed"], timeout=DAY)["status"]
    assert done["phase"] == "Succeeded", done
    assert done["attempts"] == 2 and done["node"] == SECOND, done
    print(f"[e2e] finished on {SECOND} after {time.time() - t0:.0f}s, {done['attempts']} attempts, 1 not counted")
    c.delete_namespace(ns)
    c.kubectl("delete", "pv", pv, "--wait=false", check=False)
