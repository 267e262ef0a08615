"""The re-fit CronJob: asks the predictor to re-fit through its authenticated endpoint, locked down like every pod.

The chart is rendered from a copy; REFIT_SCHEMA is only added to that copy's schema when the real one lacks it
(it has it since the block was wired in, so the real schema is what is tested).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.chart import find, render

from .conftest import CHART

REFIT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "The periodic re-fit of the runtime model (a CronJob asking the predictor).",
    "properties": {
        "enabled": {"type": "boolean", "description": "Run the re-fit CronJob."},
        "schedule": {"type": "string", "minLength": 1, "description": "Cron schedule of the re-fit."},
        "timeZone": {"type": "string", "description": "Time zone of the schedule (empty: the controller's)."},
        "timeoutSeconds": {"type": "integer", "minimum": 60, "description": "How long one re-fit may take."},
        "minSamples": {"type": "integer", "minimum": 1, "description": "Usable samples a re-fit needs."},
        "keep": {"type": "integer", "minimum": 2, "description": "Model versions the store keeps."},
        "resources": {"type": "object", "description": "Resources of the CronJob's pod."},
        "nodeSelector": {"type": "object"},
        "tolerations": {"type": "array"},
        "affinity": {"type": "object"},
        "priorityClassName": {"type": "string"},
    },
    "additionalProperties": False,
}
TOKEN_DIR = "/var/run/secrets/offpeak/predictor-token"


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("chart") / "offpeak"
    shutil.copytree(CHART, copy)
    schema_path = copy / "values.schema.json"
    schema = json.loads(schema_path.read_text())
    schema["properties"]["predictor"]["properties"].setdefault("refit", REFIT_SCHEMA)
    schema_path.write_text(json.dumps(schema))
    return copy


def _render(chart: Path, tmp_path: Path, values: dict[str, Any], **kwargs: Any) -> list[dict[str, Any]]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return render(chart, values=[path], **kwargs)


def test_the_cronjob_posts_to_the_predictor_with_the_shared_token(helm_bin, chart, tmp_path) -> None:
    objects = _render(chart, tmp_path, {"predictor": {"refit": {"enabled": True, "schedule": "5 4 * * 0"}}})
    (cron,) = find(objects, "CronJob", "-predictor-refit")
    assert cron["spec"]["schedule"] == "5 4 * * 0" and cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]
    assert pod["metadata"]["labels"]["offpeak.io/predictor-client"] == "true"  # admitted by the NetworkPolicy
    spec = pod["spec"]
    (container,) = spec["containers"]
    (service,) = find(objects, "Service", "-predictor")
    url = f"http://{service['metadata']['name']}.offpeak-system.svc:{service['spec']['ports'][0]['port']}"
    assert container["args"] == ["predictor", "refit", f"--url={url}", f"--token-file={TOKEN_DIR}/token",
                                 "--timeout=900"]  # fmt: skip
    (secret,) = find(objects, "Secret", "-predictor-token")
    (volume,) = [v for v in spec["volumes"] if v["name"] == "predictor-token"]
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    assert {"name": "predictor-token", "mountPath": TOKEN_DIR, "readOnly": True} in container["volumeMounts"]
    # no claim: the samples' volume stays the predictor's alone
    assert all("persistentVolumeClaim" not in v for v in spec["volumes"])
    assert spec["automountServiceAccountToken"] is False and spec["restartPolicy"] == "Never"
    assert cron["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] == 900 + 120


def test_the_cronjob_pod_is_locked_down(helm_bin, chart, tmp_path) -> None:
    objects = _render(chart, tmp_path, {"predictor": {"refit": {"enabled": True}}})
    (cron,) = find(objects, "CronJob")
    spec = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = spec["containers"]
    ctx = container["securityContext"]
    assert ctx["readOnlyRootFilesystem"] is True and ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert {"cpu", "memory"} <= container["resources"]["requests"].keys() <= {"cpu", "memory"}
    assert {"cpu", "memory"} <= container["resources"]["limits"].keys()
    assert cron["spec"]["schedule"] == "17 3 * * *"  # the default: daily
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_no_cronjob_unless_enabled_and_the_predictor_runs(helm_bin, chart, tmp_path) -> None:
    assert find(_render(chart, tmp_path, {"predictor": {"refit": {"enabled": False}}}), "CronJob") == []
    off = {"predictor": {"enabled": False, "refit": {"enabled": True}}}
    assert find(_render(chart, tmp_path, off), "CronJob") == []


def test_an_external_predictor_url_and_token_secret_are_followed(helm_bin, chart, tmp_path) -> None:
    values = {"operator": {"predictorURL": "http://predictor.elsewhere:8080"},
              "predictor": {"auth": {"existingSecret": "team-token"}, "refit": {"enabled": True}}}
    (cron,) = find(_render(chart, tmp_path, values), "CronJob")
    spec = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert "--url=http://predictor.elsewhere:8080" in spec["containers"][0]["args"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "predictor-token"]
    assert volume["secret"]["secretName"] == "team-token"


def test_bad_refit_values_are_refused_by_the_schema(helm_bin, chart, tmp_path) -> None:
    with pytest.raises(RuntimeError, match="schema"):
        _render(chart, tmp_path, {"predictor": {"refit": {"enabled": True, "shedule": "0 3 * * *"}}})
