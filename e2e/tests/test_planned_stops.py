"""Lane `yield`: a checkpointing job that no idle window fits whole runs in two short windows on two nodes.

The lane's first node is idle for the first 120 s of each 240 s day, the second from 110 s to 235 s (online work
fills each node outside its window; 4 past days are in Prometheus, so the forecasters know it). The job needs 130 s
of GPU time (p90 ~195 s), more than either window, and checkpoints every 10 s on a claim:

- expected-goodput admission (`--goodput-min-efficiency`, learnt live from the windows the extender has followed)
  starts it in the first node's window anyway, where the strict rule would wait for a window that never comes;
- before that window's forecast end the evictor stops it (a planned stop, `--yield-at-checkpoints`): it saves as it
  stops (SIGTERM, its 5-s gracePeriodSeconds), so it goes just that long before the end, not at its last periodic
  checkpoint, and the online pods that come back find their GPUs free;
- the operator requeues it with reason `Yielded` without counting the attempt (maxAttempts is 1), and it resumes on
  the second node from the checkpoint it reported, running only the steps it had left, within the same day.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from offpeak_core.timeparse import parse_timestamp
from offpeak_e2e.daywindows import attempt_pods, checkpoint_volume, checkpointed_job, wait_for_evidence
from offpeak_e2e.harness import SCHEDULING_SLACK_S, E2ECluster
from offpeak_e2e.lanes import A100, H100, SHARED_ENV, YIELD


LANE = YIELD
TYPES = (A100, H100)
FIRST, SECOND = LANE.nodes
assert LANE.idle is not None
WINDOWS = dict(zip(LANE.nodes, LANE.idle))  # idle seconds of each day
STEPS, STEP_SECONDS, GPUS, INTERVAL = 130, 1.0, 4, 10
# what the fake training code reports when it is stopped: 50 steps done, all saved by the checkpoint it made
REPORT = {"offpeak_progress": 1, "steps": 50, "attempt_steps": 50, "step_seconds": STEP_SECONDS,
          "startup_seconds": 1.0, "checkpoint_steps": 50}


def _env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env") or []}


def test_a_checkpointing_job_stops_before_its_window_ends_and_finishes_in_a_second_window(
        e2e_cluster: E2ECluster, e2e_namespace: str) -> None:
    c, ns = e2e_cluster, e2e_namespace
    wait_for_evidence(c, windows=int(SHARED_ENV["OFFPEAK_GOODPUT_MIN_SAMPLES"]))
    # early in the first node's window, once the forecast has seen it open (its steps lag the plan's edge), while
    # the forecast still gives it >= 80 s: the goodput rule lowers the job's need to a forecast class's lower edge
    # (80 s here, once that class has evidence), and a need above what is left waits for a window that never comes
    submitted_at = c.wait_lane_phase(LANE, 8, 20, what="the first node's window open")
    t0 = time.time()

    pv = checkpoint_volume(c, ns)
    job = checkpointed_job("yielding", pv=pv, steps=STEPS, step_seconds=STEP_SECONDS, gpus=GPUS, interval=INTERVAL,
                           gpu_types=TYPES, report=REPORT, lane=LANE, maxAttempts=1)
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))

    # a pod that reaches the scheduler late in the window (the operator slowed by a loaded machine) finds less left
    # than it needs and waits: the scheduler tries it again within ~35 s, so it starts early in the next day's window
    first = c.wait_phase(ns, "yielding", ["Running", "Failed"], timeout=c.cluster.settings.day_seconds + 45)["status"]
    assert first["phase"] == "Running" and first["node"] == FIRST, first
    started = time.time()
    pod = attempt_pods(c, ns, "yielding")[1]
    p90 = json.loads(pod["metadata"]["annotations"]["offpeak.io/predicted-job-seconds"])[TYPES[0]]["p90"]
    longest = max(end - start for start, end in WINDOWS.values())
    assert p90 > longest, (p90, longest)  # no window on any node fits the whole job: it would wait for ever
    print(f"[e2e] attempt 1 on {FIRST} at +{time.time() - t0:.0f}s (submitted at day {submitted_at:.0f}s, now "
          f"{c.lane_phase(LANE):.0f}s), p90 {p90:.0f}s")

    def stopped() -> bool:
        status = c.trainingjob(ns, "yielding").get("status") or {}
        return int(status.get("plannedStops") or 0) >= 1 or status.get("phase") in ("Failed", "Succeeded")

    c.wait_for("a planned stop", stopped, timeout=c.cluster.settings.day_seconds)
    stop_day = c.lane_phase(LANE)
    status = c.trainingjob(ns, "yielding")["status"]
    assert status.get("plannedStops") == 1, status  # (else the status says what happened: an eviction, a failure)
    print(f"[e2e] planned stop seen at day {stop_day:.0f}s: {status['message']}")
    assert stop_day < WINDOWS[FIRST][1] + 5, stop_day  # before the window's end (the watch may lag a few seconds)
    events = json.loads(c.kubectl("-n", ns, "get", "events", "-o", "json").stdout)["items"]
    reasons = {(e.get("involvedObject", {}).get("name"), e.get("reason")) for e in events}
    # the evictor's Normal Event on the TrainingJob names the pod; the operator's says it was requeued
    yielded = [e for e in events if e.get("reason") == "OfflinePodYielded"]
    assert yielded and yielded[0]["type"] == "Normal" and pod["metadata"]["name"] in yielded[0]["message"], yielded
    assert "stopping to save" in yielded[0]["message"], yielded  # it saves as it stops (offpeak.io/save-on-stop)
    assert ("yielding", "Yielded") in reasons, sorted(reasons)
    assert not [e for e in events if e.get("reason") == "OfflinePodEvicted"], events

    # the online pods that come back at the window's end find their GPUs free: nobody waits for an eviction
    c.wait_for(f"8 online pods running on {FIRST}", lambda: len(c.online_waits(FIRST)) == 8,
               timeout=c.cluster.settings.day_seconds)
    waits = sorted(c.online_waits(FIRST))
    print(f"[e2e] online pods' wait for a GPU after the planned stop: max {waits[-1]:.0f}s")
    assert waits[-1] <= SCHEDULING_SLACK_S, waits

    # maxAttempts is 1: only attempts that do not count (planned stops) let the job go on, from the checkpoint it
    # reported. (Right at the second window's edge the evictor's forecast may stop an attempt again before the
    # extender's has seen the window open: another planned stop, not counted either.)
    c.wait_for("the job to resume", lambda: int(
        (c.trainingjob(ns, "yielding").get("status") or {}).get("attempts") or 0) >= 2, timeout=120)
    done = c.wait_phase(ns, "yielding", ["Succeeded", "Failed"], timeout=c.cluster.settings.day_seconds)["status"]
    assert done["phase"] == "Succeeded", done
    assert done["node"] == SECOND and done["attempts"] == done["plannedStops"] + 1, done
    pods = attempt_pods(c, ns, "yielding")
    last = pods[max(pods)]  # (the stopped attempts' pods are gone once they reported)
    resumed_after = int(_env(last)["OFFPEAK_COMPLETED_STEPS"])
    assert resumed_after >= REPORT["checkpoint_steps"], resumed_after  # from its reports, not from scratch
    ran = last["status"]["containerStatuses"][0]["state"]["terminated"]
    seconds = parse_timestamp(ran["finishedAt"]) - parse_timestamp(ran["startedAt"])
    left = (STEPS - resumed_after) * STEP_SECONDS
    assert left - 2 <= seconds <= left + 8, (seconds, left, ran)  # only the steps it had left
    total = time.time() - started
    print(f"[e2e] finished on {SECOND} {total:.0f}s after it started, {done['attempts']} attempts, "
          f"{done['plannedStops']} not counted (the last ran {seconds:.0f}s)")
    assert total < c.cluster.settings.day_seconds  # both windows of one day, not a window of a later day
    c.kubectl("delete", "pv", pv, "--wait=false", check=False)
