"""Live pace (lane `live`): a job whose real pace is 40 % slower than predicted reports its progress while it runs.
kwok runs no code, so the test plays the training code: it reads the status URL, token and CA from the running pod
(what its container gets: the env, and the pod's annotations a downward-API volume projects into files) and sends
reports with `offpeak.progress`'s own reporter. Before the job ends its status shows the measured pace and a
corrected ETA, an Event names the difference, and the next job of the same model is predicted within 10 % of the
measured pace. The running pod carries the measured pace for the extender and the evictor."""

from __future__ import annotations

import json
import math
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from offpeak.progress import LiveReporter, Progress
from offpeak_core.livepace import LIVE_PROGRESS_ANNOTATION, LiveProgress
from offpeak_e2e.harness import E2ECluster, graph_configmap, mlp_graph, trainingjob_manifest
from offpeak_e2e.lanes import A100, LIVE

SLOWER = 1.4  # the job's real pace: 40 % slower than predicted
TARGET_SECONDS = 120.0  # length of the first prediction (steps are chosen for it); the job runs 1.4x that


def _predicted_step(predictor: str, graph: dict[str, Any]) -> float:
    body = {"graph": graph, "gpus": [A100], "steps": 1, "num_gpus": 1, "startup_seconds": 0, "precision": "fp32",
            "optimizer": "adam"}
    request = urllib.request.Request(f"{predictor}/v1/predict", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - the local cluster's predictor
        return float(json.loads(response.read())["predictions"][0]["step_seconds"])


def _job(ns: str, name: str, *, steps: int, sim_seconds: float) -> dict[str, Any]:
    job = trainingjob_manifest(name, sim_seconds=sim_seconds, gpu_types=[A100], steps=steps, batch_size=64, lane=LIVE,
                               extra_spec={"modelSource": {"graphConfigMap": {"name": "live-graph"}},
                                           "startupSeconds": 0, "precision": "fp32", "optimizer": "adam"})
    job["metadata"]["namespace"] = ns
    return job


def test_a_running_jobs_pace_corrects_its_eta_and_the_next_prediction(e2e_cluster: E2ECluster, e2e_namespace: str,
                                                                      tmp_path: Path) -> None:
    c, ns = e2e_cluster, e2e_namespace
    graph = mlp_graph(width=1024 + 8 * (uuid.uuid4().int % 64), family=f"e2e-live-{uuid.uuid4().hex[:6]}")
    predicted = _predicted_step(c.state.urls["predictor"], graph.to_dict())  # a model no sample has corrected
    steps = max(100, math.ceil(TARGET_SECONDS / predicted))
    pace = SLOWER * predicted
    c.apply(graph_configmap("live-graph", ns, graph))
    c.apply(_job(ns, "live-first", steps=steps, sim_seconds=steps * pace))  # kwok ends the pod at the slow pace
    c.wait_phase(ns, "live-first", ["Running"], timeout=90)

    def status() -> dict[str, Any]:
        return dict(c.trainingjob(ns, "live-first").get("status") or {})

    # what the training container gets: the channel, and no API credentials
    pod = c.get("pod", "live-first-a1-w0", "-n", ns)
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert pod["spec"]["automountServiceAccountToken"] is False
    for file, annotation in (("token", "offpeak.io/status-token"), ("ca.crt", "offpeak.io/status-ca")):
        (tmp_path / file).write_text(pod["metadata"]["annotations"][annotation])
    live = LiveReporter(url=env["KUBEFLOW_TRAINER_SERVER_URL"], token_file=str(tmp_path / "token"),
                        ca_file=str(tmp_path / "ca.crt"))
    started = time.monotonic()

    def reporting(what: str, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Report as the training loop would (every 5 s) until the job's status shows `what`."""
        def reported_and_seen() -> bool:
            done = min(steps - 1, int((time.monotonic() - started) / pace))
            live.submit(Progress(steps=done, attempt_steps=done, step_seconds=pace, total_steps=steps))
            live.drain(timeout=10)  # a failed report is dropped, as in a pod (stderr says why); the next one goes
            return check(status())

        c.wait_for(what, reported_and_seen, timeout=60, interval=5)
        return status()

    first = reporting("the measured pace", lambda s: abs(s.get("livePace", {}).get("stepSeconds", 0) / pace - 1) < 0.01)
    measured, left = first["livePace"], steps - first["livePace"]["steps"]
    print(f"[e2e] live pace: predicted {predicted:.4g}s per step, measured {measured['stepSeconds']:.4g}s; ETA "
          f"{first.get('eta')}; {json.dumps(measured)}")
    assert measured["gpuType"] == A100 and abs(measured["error"] - (SLOWER - 1)) < 0.02
    assert abs(first["etaSeconds"] / (left * pace) - 1) < 0.05 and first["eta"]  # at the measured pace
    assert "ETA" in c.kubectl("get", "tj", "live-first", "-n", ns).stdout
    events = json.loads(c.kubectl("-n", ns, "get", "events", "--field-selector", "reason=PaceDiffers", "-o",
                                  "json").stdout)["items"]
    assert any("40% slower than predicted" in e["message"] for e in events), events

    # the pace goes onto the running pod, where the extender and the evictor time the rest of the attempt by it
    def carried() -> LiveProgress | None:
        text = c.get("pod", "live-first-a1-w0", "-n", ns)["metadata"].get("annotations", {}).get(
            LIVE_PROGRESS_ANNOTATION)
        return None if text is None else LiveProgress.decode(text)

    c.wait_for("the pod's live progress", lambda: carried() is not None, timeout=30)
    on_pod = carried()
    assert on_pod is not None and abs(on_pod.step_seconds / pace - 1) < 0.01 and on_pod.total_steps == steps

    # the predictor has learned the pace already: the next job of the model is predicted near it
    reporting("the live sample", lambda s: "live" in str(s.get("sampleStatus", "")))
    c.apply(_job(ns, "live-second", steps=steps, sim_seconds=1))
    second = c.wait_phase(ns, "live-second", ["Waiting", "Running", "Succeeded"], timeout=60)["status"]
    corrected = second["prediction"]["gpus"][0]["stepSeconds"]
    print(f"[e2e] live pace: next prediction {corrected:.4g}s per step ({corrected / measured['stepSeconds']:.3f}x the "
          f"measured pace), {time.monotonic() - started:.0f}s after the first report")
    assert abs(corrected / measured["stepSeconds"] - 1) < 0.10
    assert status()["phase"] == "Running"  # all of it before the first job ends
