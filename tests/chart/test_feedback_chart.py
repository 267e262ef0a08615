"""The chart wires the feedback loop: one shared token Secret mounted into operator and predictor, the flags that
read it, the sample-retention values, and the DB on a PersistentVolumeClaim when asked."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from support.chart import find, render

from .conftest import CHART

TOKEN_DIR = "/var/run/secrets/offpeak/predictor-token"


def _container(objects: list[dict[str, Any]], suffix: str) -> tuple[dict[str, Any], dict[str, Any]]:
    (deploy,) = find(objects, "Deployment", suffix)
    spec = deploy["spec"]["template"]["spec"]
    return spec, spec["containers"][0]


def _token_volume(spec: dict[str, Any]) -> dict[str, Any]:
    (volume,) = [v for v in spec["volumes"] if v["name"] == "predictor-token"]
    return volume


def test_one_generated_secret_is_mounted_read_only_into_operator_and_predictor(default_objects) -> None:
    (secret,) = find(default_objects, "Secret", "-predictor-token")
    token = base64.b64decode(secret["data"]["token"]).decode()
    assert len(token) == 48 and token.isalnum()
    for suffix, flag in (("-predictor", "--token-file"), ("-operator", "--predictor-token-file")):
        spec, container = _container(default_objects, suffix)
        assert f"{flag}={TOKEN_DIR}/token" in container["args"], suffix
        assert _token_volume(spec)["secret"]["secretName"] == secret["metadata"]["name"], suffix
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "predictor-token"]
        assert mount == {"name": "predictor-token", "mountPath": TOKEN_DIR, "readOnly": True}, suffix


def test_a_given_token_or_existing_secret_is_used(helm_bin) -> None:
    given = render(CHART, set_values=["predictor.auth.token=my-shared-token"])
    (secret,) = find(given, "Secret", "-predictor-token")
    assert base64.b64decode(secret["data"]["token"]).decode() == "my-shared-token"
    existing = render(CHART, set_values=["predictor.auth.existingSecret=team-token"])
    assert find(existing, "Secret", "-predictor-token") == []
    for suffix in ("-predictor", "-operator"):
        spec, _ = _container(existing, suffix)
        assert _token_volume(spec)["secret"]["secretName"] == "team-token"


def test_sample_retention_and_prior_strength_reach_the_predictor(helm_bin, tmp_path) -> None:
    values = tmp_path / "values.yaml"  # a file, not --set: helm's --set reads 2.5 as a string
    values.write_text("predictor:\n  feedback:\n    maxSamples: 500\n    priorStrength: 2.5\n    maxSampleMiB: 64\n")
    objects = render(CHART, values=[values])
    _, container = _container(objects, "-predictor")
    assert "--max-samples=500" in container["args"] and "--prior-strength=2.5" in container["args"]
    assert "--max-sample-mib=64" in container["args"]
    _, default = _container(render(CHART), "-predictor")
    assert "--max-samples=10000" in default["args"] and "--prior-strength=0.5" in default["args"]
    assert "--max-sample-mib=512" in default["args"]


def test_without_persistence_the_sample_db_is_on_a_size_limited_empty_dir(helm_bin) -> None:
    for given, limit in (([], "2Gi"), (["predictor.persistence.emptyDirSizeLimit=500Mi"], "500Mi")):
        spec, _ = _container(render(CHART, set_values=given), "-predictor")
        (data,) = [v for v in spec["volumes"] if v["name"] == "data"]
        assert data == {"name": "data", "emptyDir": {"sizeLimit": limit}}


def test_the_sample_db_lives_on_a_claim_when_persistence_is_on(helm_bin) -> None:
    objects = render(CHART, set_values=["predictor.persistence.enabled=true", "predictor.persistence.size=5Gi"])
    (claim,) = find(objects, "PersistentVolumeClaim", "-predictor")
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"  # samples outlive an uninstall
    spec, container = _container(objects, "-predictor")
    (data,) = [v for v in spec["volumes"] if v["name"] == "data"]
    assert data["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert "--db=/var/lib/offpeak/samples.sqlite" in container["args"]
    assert {"name": "data", "mountPath": "/var/lib/offpeak"} in container["volumeMounts"]


@pytest.mark.parametrize("bad", ["predictor.feedback.maxSamples=0", "predictor.feedback.priorStrength=0",
                                 "predictor.auth.tokn=x", "predictor.feedback.maxSampleMiB=0",
                                 "predictor.persistence.emptyDirSizeLimit=lots"])
def test_bad_feedback_values_are_refused_by_the_schema(helm_bin, bad: str) -> None:
    with pytest.raises(RuntimeError, match="schema"):
        render(CHART, set_values=[bad])
