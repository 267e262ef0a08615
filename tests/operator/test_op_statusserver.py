"""The status server over real HTTPS on a loopback port: a training pod's report reaches its job with no API
credentials in the pod, and every bad request is refused with its reason and counted."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from optestkit import NOW, job_body, small_graph
from prometheus_client import CollectorRegistry
from test_op_reconciler import graph_cm, make

from offpeak.progress import LiveReporter, Tracker
from offpeak_core.livepace import LIVE_PROGRESS_ANNOTATION, LiveProgress
from offpeak_operator import statustls
from offpeak_operator.livereports import STATUS_DIR, Claim, mint
from offpeak_operator.metrics import OperatorMetrics
from offpeak_operator.settings import StatusServerSettings
from offpeak_operator.statusserver import StatusChannel, StatusServer, Throttle, build_app

TLS = statustls.generate(hosts=["127.0.0.1", "localhost"])


class Jobs:
    """get_job / patch_job_status over a dict of TrainingJobs."""

    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.patches: list[dict[str, Any]] = []

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.jobs.get((namespace, name))

    def patch_job_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.patches.append(status)
        self.jobs[(namespace, name)].setdefault("status", {}).update(status)


class Served:
    def __init__(self, store: Any, *, interval: float = 0.0) -> None:
        self.metrics = OperatorMetrics(CollectorRegistry())
        self.channel = StatusChannel(key=b"s" * 32, tls=TLS, base_url="https://127.0.0.1:0")
        self.throttle = Throttle(interval)
        app = build_app(channel=self.channel, store=store, metrics=self.metrics, throttle=self.throttle,
                        clock=lambda: NOW)
        self.server = StatusServer(app, host="127.0.0.1", port=0, channel=self.channel)
        self.channel.base_url = f"https://127.0.0.1:{self.server.start()}"

    def count(self, outcome: str) -> float:
        return self.metrics.status_reports_total.labels(outcome=outcome)._value.get()


def post(url: str, body: bytes, *, token: str | None = None, cafile: str | None = None) -> tuple[int, dict]:
    context = ssl.create_default_context(cafile=cafile) if cafile else ssl.create_default_context(
        cadata=TLS.ca_pem)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:  # noqa: S310 - loopback
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_pods_report_reaches_its_job_with_no_api_credentials_in_the_pod(tmp_path: Path) -> None:
    rec, kube, pred, clock = make(job_body(modelSource={"graphConfigMap": {"name": "user-graph"}}))
    kube.configmaps["user-graph"] = graph_cm(small_graph())
    served = Served(kube)
    rec.ctx.status_channel = served.channel
    try:
        assert rec.reconcile("ns", "train-1") == "Waiting"
        pod = kube.pods["train-1-a1-w0"]
        spec = pod["spec"]
        # no API credentials: no service-account token, no projected token, no Secret
        assert spec["automountServiceAccountToken"] is False and "serviceAccountName" not in spec
        assert not any("projected" in v or "secret" in v for v in spec.get("volumes") or [])
        (train,) = spec["containers"]
        env = {e["name"]: e.get("value") for e in train["env"]}
        assert not any("valueFrom" in e for e in train["env"])
        url = env["KUBEFLOW_TRAINER_SERVER_URL"]
        assert url == served.channel.base_url + Claim(plural="trainingjobs", namespace="ns", name="train-1",
                                                      uid="uid-123", attempt=1).path
        # the token and CA come from the pod's own annotations, projected into files: play the kubelet
        (volume,) = [v for v in spec["volumes"] if "downwardAPI" in v]
        files = {}
        for item in volume["downwardAPI"]["items"]:
            key = item["fieldRef"]["fieldPath"].split("'")[1]
            files[item["path"]] = tmp_path / item["path"]
            files[item["path"]].write_text(pod["metadata"]["annotations"][key])
        assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == f"{STATUS_DIR}/token"

        kube.set_pod("train-1-a1-w0", "Running", node="n2")  # an A100, predicted at 0.1 s per step
        clock.now = NOW + timedelta(seconds=3)
        assert rec.reconcile("ns", "train-1") == "Running"

        # the training code reports through offpeak.progress, as it would in the pod
        live = LiveReporter(url=url, token_file=str(files["token"]), ca_file=str(files["ca.crt"]))
        seconds = [0.0]
        tracker = Tracker(path=str(tmp_path / "termination-log"), start_step=0, total_steps=1000, at_exit=False,
                          live=live, clock=lambda: seconds[0])
        for _ in range(101):
            seconds[0] += 0.7
            tracker.step()
        tracker.close()
        assert live.sent >= 1 and live.failed == 0
        report = kube.job["status"]["liveReport"]
        assert report["attempt"] == 1 and report["steps"] == 101 and report["stepSeconds"] == pytest.approx(0.7)
        assert served.count("accepted") >= 1

        clock.now = NOW + timedelta(seconds=80)
        rec.reconcile("ns", "train-1")
        status = kube.job["status"]
        assert status["livePace"]["stepSeconds"] == pytest.approx(0.7) and status["livePace"]["gpuType"] == (
            "A100-SXM4-40GB")
        assert status["etaSeconds"] == pytest.approx(899 * 0.7, abs=0.1) and status["eta"] == "11m"
        assert any(reason == "PaceDiffers" and "slower than predicted" in message
                   for _, reason, message in kube.events)
        (live_sample,) = pred.samples  # 100 steady steps: the predictor learns now
        assert live_sample["step_seconds"] == pytest.approx(0.7) and status["livePace"]["sampleId"] == 1
        # and the running pod carries the pace, for the extender and the evictor
        carried = LiveProgress.decode(kube.pods["train-1-a1-w0"]["metadata"]["annotations"][LIVE_PROGRESS_ANNOTATION])
        assert carried.step_seconds == pytest.approx(0.7) and carried.steps == 101 and carried.total_steps == 1000

        kube.set_pod("train-1-a1-w0", "Succeeded", node="n2", finish=NOW + timedelta(seconds=700))
        clock.now = NOW + timedelta(seconds=705)
        assert rec.reconcile("ns", "train-1") == "Succeeded"
        assert pred.samples[-1]["replaces"] == 1  # the final sample takes the live one's place
        assert "etaSeconds" not in kube.job["status"] and "eta" not in kube.job["status"]
    finally:
        served.server.stop()


@pytest.fixture
def jobs() -> Jobs:
    store = Jobs()
    store.jobs[("ns", "a")] = {"metadata": {"name": "a", "namespace": "ns", "uid": "u1"}, "status": {"attempts": 2}}
    return store


@pytest.fixture
def served(jobs: Jobs) -> Iterator[Served]:
    s = Served(jobs)
    yield s
    s.server.stop()


CLAIM = Claim(plural="trainingjobs", namespace="ns", name="a", uid="u1", attempt=2)
BODY = json.dumps({"trainerStatus": {"progressPercentage": 10, "metrics": [
    {"name": "current_step", "value": "100"}, {"name": "loss", "value": "0.5"}]}}).encode()


def _url(served: Served, claim: Claim = CLAIM) -> str:
    return served.channel.base_url + claim.path


def test_an_accepted_report_is_written_as_received(served: Served, jobs: Jobs) -> None:
    code, answer = post(_url(served), BODY, token=mint(served.channel.key, CLAIM))
    assert code == 200 and answer["status"] == "Success"
    assert jobs.patches == [{"liveReport": {"attempt": 2, "receivedAt": "2026-11-21T06:00:00.000Z",
                                            "progressPercentage": 10, "steps": 100,
                                            "metrics": [{"name": "loss", "value": "0.5"}]}}]


@pytest.mark.parametrize(("claim", "token_key", "code", "outcome", "words"), [
    (CLAIM, None, 401, "missing_token", "no bearer token"),
    (CLAIM, b"x" * 32, 403, "bad_token", "not made by this operator"),
    (Claim(plural="trainingjobs", namespace="ns", name="a", uid="u0", attempt=2), b"s" * 32, 403, "bad_token",
     "earlier trainingjobs ns/a"),
    (Claim(plural="trainingjobs", namespace="ns", name="a", uid="u1", attempt=1), b"s" * 32, 409, "stale_attempt",
     "attempt 1 of trainingjobs ns/a is over"),
    (Claim(plural="trainingjobs", namespace="ns", name="b", uid="u1", attempt=2), b"s" * 32, 404, "not_found",
     "no trainingjobs ns/b"),
])
def test_refused_reports_say_why_and_are_counted(served: Served, jobs: Jobs, claim: Claim, token_key: bytes | None,
                                                 code: int, outcome: str, words: str) -> None:
    token = mint(token_key, claim) if token_key else None
    got, answer = post(_url(served, claim), BODY, token=token)
    assert (got, answer["status"]) == (code, "Failure") and words in answer["message"], answer
    assert served.count(outcome) == 1 and not jobs.patches


def test_a_token_only_opens_its_own_url(served: Served, jobs: Jobs) -> None:
    other = Claim(plural="trainingjobs", namespace="ns", name="b", uid="u9", attempt=2)
    code, answer = post(_url(served, other), BODY, token=mint(served.channel.key, CLAIM))
    assert code == 403 and CLAIM.path in answer["message"] and not jobs.patches


@pytest.mark.parametrize(("body", "code", "outcome", "words"), [
    (json.dumps({"trainerStatus": {"progressPercentage": 200}}).encode(), 422, "invalid",
     "trainerStatus.progressPercentage"),
    (b"{" + b" " * (70 * 1024) + b"}", 413, "too_large", "larger than 65536 bytes"),
    (b"{}", 200, "empty", "nothing to record"),
])
def test_bodies_are_bounded_and_checked(served: Served, jobs: Jobs, body: bytes, code: int, outcome: str,
                                        words: str) -> None:
    got, answer = post(_url(served), body, token=mint(served.channel.key, CLAIM))
    assert got == code and words in answer["message"] and served.count(outcome) == 1 and not jobs.patches


def test_an_attempt_reporting_too_often_is_throttled(jobs: Jobs) -> None:
    served = Served(jobs, interval=60.0)
    try:
        token = mint(served.channel.key, CLAIM)
        assert post(_url(served), BODY, token=token)[0] == 200
        code, answer = post(_url(served), BODY, token=token)
        assert code == 429 and "one report per 60s" in answer["message"] and len(jobs.patches) == 1
    finally:
        served.server.stop()


def test_a_taken_port_fails_at_start_or_falls_back_to_a_free_one(served: Served, jobs: Jobs) -> None:
    taken = int(served.channel.base_url.rsplit(":", 1)[1])
    def app() -> Any:
        return build_app(channel=served.channel, store=jobs, metrics=served.metrics, throttle=Throttle(0))

    with pytest.raises(OSError):
        StatusServer(app(), host="127.0.0.1", port=taken, channel=served.channel).start()
    second = StatusServer(app(), host="127.0.0.1", port=taken, channel=served.channel)
    try:
        assert second.start(any_port_if_taken=True) not in (taken, 0)
    finally:
        second.stop()


def test_a_local_operator_keeps_what_it_made_so_its_pods_still_trust_it_after_a_restart(tmp_path: Path) -> None:
    settings = StatusServerSettings(tls_dir=str(tmp_path / "tls"), key_file=str(tmp_path / "tls" / "key"))
    first = StatusChannel.from_settings(settings)
    again = StatusChannel.from_settings(settings)
    assert (again.key, again.tls) == (first.key, first.tls) and len(first.key) >= 16
    assert oct((tmp_path / "tls" / "tls.key").stat().st_mode & 0o777) == "0o600"
    (tmp_path / "short").write_text("too short")
    with pytest.raises(ValueError, match="at least 16 bytes"):
        StatusChannel.from_settings(StatusServerSettings(key_file=str(tmp_path / "short")))
