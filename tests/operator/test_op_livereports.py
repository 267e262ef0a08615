"""The live channel's contract, without HTTP: tokens, the report URL, what a pod gets, the report body."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from offpeak_operator import livereports as lr
from offpeak_operator.livereports import Claim, ReportError

KEY = b"k" * 32
CLAIM = Claim(plural="trainingjobs", namespace="ns", name="train-1", uid="uid-123", attempt=2)


def test_a_token_names_one_attempt_and_only_the_key_that_made_it_accepts_it() -> None:
    token = lr.mint(KEY, CLAIM)
    assert lr.verify(KEY, token) == CLAIM
    assert lr.mint(KEY, CLAIM) == token  # derived, not stored
    assert lr.verify(b"x" * 32, token) is None
    other = Claim(plural="trainingjobs", namespace="ns", name="train-1", uid="uid-123", attempt=3)
    assert lr.mint(KEY, other) != token


@pytest.mark.parametrize("token", ["", "v1", "v2.a.b", "v1.!!.??", "v1.a.b.c"])
def test_malformed_tokens_are_refused(token: str) -> None:
    assert lr.verify(KEY, token) is None


def test_a_token_whose_subject_was_changed_is_refused() -> None:
    version, _, mac = lr.mint(KEY, CLAIM).split(".")
    forged = Claim(plural="trainingjobs", namespace="ns", name="someone-else", uid="uid-9", attempt=1)
    subject = lr.mint(KEY, forged).split(".")[1]
    assert lr.verify(KEY, f"{version}.{subject}.{mac}") is None


def test_bearer_header() -> None:
    assert lr.bearer("Bearer abc") == "abc" and lr.bearer("bearer  abc ") == "abc"
    assert lr.bearer(None) is None and lr.bearer("Basic abc") is None and lr.bearer("Bearer ") is None


def test_the_path_of_an_attempt() -> None:
    assert CLAIM.path == "/apis/offpeak.io/v1alpha1/namespaces/ns/trainingjobs/train-1/attempts/2/status"


def test_a_pod_gets_the_url_and_files_for_its_token_and_ca_under_kubeflows_names() -> None:
    parts = lr.pod_parts(url="https://op:8443/x", token="tok", ca_pem="PEM")
    env = {e["name"]: e["value"] for e in parts.env}
    for prefix in ("KUBEFLOW_TRAINER_SERVER", "KUBEFLOW_TRAINER_STATUS"):
        assert env[f"{prefix}_URL"] == "https://op:8443/x"
        assert env[f"{prefix}_TOKEN"] == "/var/run/secrets/offpeak.io/status/token"
        assert env[f"{prefix}_CA_CERT"] == "/var/run/secrets/offpeak.io/status/ca.crt"
    assert parts.annotations == {"offpeak.io/status-token": "tok", "offpeak.io/status-ca": "PEM"}
    items = {i["path"]: i["fieldRef"]["fieldPath"] for i in parts.volume["downwardAPI"]["items"]}
    assert items == {"token": "metadata.annotations['offpeak.io/status-token']",
                     "ca.crt": "metadata.annotations['offpeak.io/status-ca']"}
    assert parts.mount == {"name": "offpeak-status", "mountPath": "/var/run/secrets/offpeak.io/status",
                           "readOnly": True}


def _body(**status: object) -> bytes:
    return json.dumps({"trainerStatus": status}).encode()


def test_the_hf_callbacks_report_is_read() -> None:
    got = lr.parse_body(_body(progressPercentage=42, estimatedRemainingSeconds=120, lastUpdatedTime="2026-01-01",
                              metrics=[{"name": "loss", "value": "0.25"}, {"name": "current_step", "value": "420"},
                                       {"name": "total_steps", "value": "1000"}]))
    assert got is not None
    assert (got.progress_percentage, got.estimated_remaining_seconds, got.steps, got.total_steps) == (
        42, 120, 420, 1000)
    assert got.metrics == (("loss", "0.25"),) and got.step_seconds is None


def test_offpeak_progress_reports_its_own_step_time() -> None:
    got = lr.parse_body(_body(metrics=[{"name": "current_step", "value": "450"},
                                       {"name": "step_seconds", "value": "0.31"},
                                       {"name": "attempt_steps", "value": 50},
                                       {"name": "checkpoint_step", "value": "400"},
                                       {"name": "startup_seconds", "value": "12.5"}]))
    assert got is not None
    assert (got.steps, got.step_seconds, got.attempt_steps, got.checkpoint_steps, got.startup_seconds) == (
        450, 0.31, 50, 400, 12.5)


def test_a_body_without_trainer_status_records_nothing() -> None:
    assert lr.parse_body(b"{}") is None and lr.parse_body(b"") is None


@pytest.mark.parametrize(("body", "field"), [
    (b"not json", "body"),
    (b"[1]", "body"),
    (_body(progressPercentage=101), "trainerStatus.progressPercentage"),
    (_body(progressPercentage=True), "trainerStatus.progressPercentage"),
    (_body(estimatedRemainingSeconds=-1), "trainerStatus.estimatedRemainingSeconds"),
    (_body(metrics="loss"), "trainerStatus.metrics"),
    (_body(metrics=[{"value": "1"}]), "trainerStatus.metrics[0].name"),
    (_body(metrics=[{"name": "loss", "value": None}]), "trainerStatus.metrics[0].value"),
    (_body(metrics=[{"name": "current_step", "value": "ten"}]), "trainerStatus.metrics[current_step]"),
    (_body(metrics=[{"name": "current_step", "value": "1.5"}]), "trainerStatus.metrics[current_step]"),
    (_body(metrics=[{"name": "step_seconds", "value": "nan"}]), "trainerStatus.metrics[step_seconds]"),
    (json.dumps({"trainerStatus": []}).encode(), "trainerStatus"),
    (b" " * (lr.MAX_BODY_BYTES + 1), "body"),
])
def test_a_bad_body_is_refused_naming_the_field(body: bytes, field: str) -> None:
    with pytest.raises(ReportError) as e:
        lr.parse_body(body)
    assert str(e.value).startswith(f"{field}:"), str(e.value)


def test_the_stored_report_and_the_paces_view_of_it() -> None:
    report = lr.parse_body(_body(progressPercentage=30, metrics=[{"name": "loss", "value": "1"}]))
    assert report is not None
    at = datetime(2026, 11, 21, 6, 0, 1, 250_000, tzinfo=UTC)
    stored = lr.to_status(report, attempt=2, received_at=at)
    assert stored == {"attempt": 2, "receivedAt": "2026-11-21T06:00:01.250Z", "progressPercentage": 30,
                      "metrics": [{"name": "loss", "value": "1"}]}
    core = lr.core_report(stored, received_at=at.timestamp(), total_steps=2000)
    assert core is not None and core.steps == 600 and core.step_seconds is None  # from the percentage
    assert lr.core_report({"attempt": 2}, received_at=0.0, total_steps=2000) is None
