"""Lane `announce`: announced online demand. An `OnlineDemand` object (crds/onlinedemands.offpeak.io.yaml) says the
online side will hold a pool's GPUs from a given time: the extender's pool forecast takes it as a floor at once, so
a pooled node's window ends at the announced start, and the evictor (`--yield-at-checkpoints`, with the same pool
label) stops a checkpointing job before it (the job saves as it stops), instead of the scale-up evicting it. The
API server refuses an announcement that ends before it starts, or states a pool ceiling below what it announces (the
CRD's validation rules).

The lane's two A100 nodes have no online work (4 past days of zeros in Prometheus), and are labelled into one pool
at the start: by the pool's history alone every window reaches
past the horizon. A 4-GPU job of 130 one-second steps that checkpoints every 10 s starts; then the whole pool (16
GPUs) is announced from 60 s later. The job is stopped before that (a planned stop: requeued as
`Yielded`, the attempt not counted against maxAttempts 1); its next attempt waits while the announcement stands,
and runs to the end once it is withdrawn.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest

from offpeak_e2e.daywindows import attempt_pods, checkpoint_volume, checkpointed_job, extender_window
from offpeak_e2e.harness import SCHEDULING_SLACK_S, E2ECluster
from offpeak_e2e.lanes import A100, ANNOUNCE, POOL_LABEL


TYPES = (A100,)
FIRST, SECOND = ANNOUNCE.nodes  # idle all day: no online work at all
POOL = "chat-announce"
STEPS, STEP_SECONDS, GPUS, INTERVAL = 130, 1.0, 4, 10
LEAD = 60.0  # the announcement's start, this long after it is made
REPORT = {"offpeak_progress": 1, "steps": 40, "attempt_steps": 40, "step_seconds": STEP_SECONDS,
          "startup_seconds": 1.0, "checkpoint_steps": 40}
RETRY_S = 35 + SCHEDULING_SLACK_S  # offpeak-scheduler's retry of a pod its extender turned down


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def announcement(name: str, *, start: float, end: float) -> dict:
    return {"apiVersion": "offpeak.io/v1alpha1", "kind": "OnlineDemand", "metadata": {"name": name},
            "spec": {"pool": POOL, "gpus": 16, "start": iso(start), "end": iso(end)}}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_announced_scale_up_stops_a_pooled_job_at_a_checkpoint_before_it(e2e_cluster: E2ECluster,
                                                                            e2e_namespace: str) -> None:
    c, ns = e2e_cluster, e2e_namespace
    c.kubectl("label", "node", FIRST, SECOND, f"{POOL_LABEL}={POOL}")
    c.wait_for("the extender to fit the pool", lambda: extender_window(c, FIRST, gpus=GPUS) == float("inf"),
               timeout=60, interval=0.5)

    # the API server refuses an announcement that ends before it starts, and says why
    now = time.time()
    bad = c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(announcement("backwards", start=now + 600,
                                                                                end=now + 60)), check=False)
    assert bad.returncode != 0 and "end must be after start" in bad.stderr, bad.stderr
    low = announcement("low-ceiling", start=now + 60, end=now + 600)
    low["spec"]["poolGpusAtMost"] = 8  # below the 16 it announces
    bad = c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(low), check=False)
    assert bad.returncode != 0 and "poolGpusAtMost must be at least gpus" in bad.stderr, bad.stderr

    pv = checkpoint_volume(c, ns)
    job = checkpointed_job("announced", pv=pv, steps=STEPS, step_seconds=STEP_SECONDS, gpus=GPUS,
                           interval=INTERVAL, gpu_types=TYPES, report=REPORT, lane=ANNOUNCE, maxAttempts=1)
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
    first = c.wait_phase(ns, "announced", ["Running", "Failed"], timeout=45)["status"]
    assert first["phase"] == "Running" and first["node"] in (FIRST, SECOND), first
    node, pod_name = first["node"], attempt_pods(c, ns, "announced")[1]["metadata"]["name"]

    made = time.time()
    start = made + LEAD
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(announcement("scale-up", start=start, end=made + 900)))
    seen = c.wait_for("the extender's window to end at the announced start",
                      lambda: extender_window(c, node, gpus=1) <= start - time.time() + 10, timeout=30, interval=0.5)
    print(f"[e2e] announcement seen by the extender after {seen:.1f}s; the window ends in "
          f"{extender_window(c, node, gpus=1):.0f}s")

    def stopped() -> bool:
        status = c.trainingjob(ns, "announced").get("status") or {}
        return int(status.get("plannedStops") or 0) >= 1 or status.get("phase") in ("Failed", "Succeeded")

    c.wait_for("a planned stop", stopped, timeout=LEAD + 30)
    at = time.time()
    status = c.trainingjob(ns, "announced")["status"]
    assert status["plannedStops"] == 1, status
    print(f"[e2e] planned stop seen {at - made:.0f}s after the announcement ({start - at:.0f}s before its start): "
          f"{status['message']}")
    assert at < start + 5, (at, start)  # before the announced start (the watch may lag a few seconds)
    events = json.loads(c.kubectl("-n", ns, "get", "events", "-o", "json").stdout)["items"]
    yielded = [e for e in events if e.get("reason") == "OfflinePodYielded"]
    assert yielded and pod_name in yielded[0]["message"], yielded
    assert not [e for e in events if e.get("reason") == "OfflinePodEvicted"], events

    # the next attempt waits while the whole pool is announced, and runs once the announcement is withdrawn
    c.wait_for("the next attempt's pod", lambda: set(attempt_pods(c, ns, "announced")) == {2},
               timeout=c.cluster.settings.eviction_grace_s + 2 * SCHEDULING_SLACK_S)
    time.sleep(SCHEDULING_SLACK_S)
    assert not attempt_pods(c, ns, "announced")[2]["spec"].get("nodeName")
    c.kubectl("-n", ns, "delete", "onlinedemand", "scale-up")
    done = c.wait_phase(ns, "announced", ["Succeeded", "Failed"], timeout=RETRY_S + STEPS + 30)["status"]
    assert done["phase"] == "Succeeded" and done["attempts"] == 2, done
    print(f"[e2e] finished after {time.time() - made:.0f}s from the announcement, 2 attempts, 1 not counted")
    c.kubectl("delete", "pv", pv, "--wait=false", check=False)
