"""The CRD is well-formed, and the example TrainingJobs satisfy both its schema and the operator's checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from offpeak_operator.gpus import load_resolver
from offpeak_operator.jobspec import parse_spec, validate
from offpeak_operator.statemachine import Phase

ROOT = Path(__file__).resolve().parents[2]
CRD = yaml.safe_load((ROOT / "crds" / "trainingjobs.offpeak.io.yaml").read_text())
EXAMPLES = sorted((ROOT / "examples" / "trainingjobs").glob("*.yaml"))


def _jsonschema(node: Any) -> Any:
    """OpenAPI v3 structural schema -> JSON Schema (drop Kubernetes extensions, keep the rest)."""
    if isinstance(node, dict):
        out = {k: _jsonschema(v) for k, v in node.items() if not k.startswith("x-kubernetes")}
        if node.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
        return out
    if isinstance(node, list):
        return [_jsonschema(v) for v in node]
    return node


VERSION = CRD["spec"]["versions"][0]
SCHEMA = _jsonschema(VERSION["schema"]["openAPIV3Schema"])


def test_crd_identity() -> None:
    spec = CRD["spec"]
    assert CRD["metadata"]["name"] == "trainingjobs.offpeak.io"
    assert spec["scope"] == "Namespaced" and spec["names"]["shortNames"] == ["tj"]
    assert VERSION["name"] == "v1alpha1" and VERSION["subresources"] == {"status": {}}
    columns = [c["name"] for c in VERSION["additionalPrinterColumns"]]
    assert columns[:8] == ["Phase", "Reason", "GPUs", "Predicted", "Actual", "ETA", "Node", "Age"]
    by_name = {c["name"]: c for c in VERSION["additionalPrinterColumns"]}
    assert by_name["Predicted"]["jsonPath"] == ".status.predicted" and by_name["Predicted"]["type"] == "string"
    assert by_name["ETA"]["jsonPath"] == ".status.eta" and by_name["ETA"]["type"] == "string"


def test_status_phase_enum_matches_the_state_machine() -> None:
    phases = VERSION["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["phase"]["enum"]
    assert set(phases) == {p.value for p in Phase}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_are_valid(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    jsonschema.validate(doc, SCHEMA)
    spec = parse_spec(doc["spec"])
    assert validate(spec, job_name=doc["metadata"]["name"], resolve_gpu=load_resolver()) == []


@pytest.mark.parametrize("bad", [
    {"batchSize": 0}, {"precision": "fp8"}, {"workers": 0}, {"gpuTypes": []},
    {"modelSource": {"entrypoint": "no colon"}}, {"modelSource": {"torchvision": "a", "hfConfig": "b"}},
])
def test_schema_rejects_bad_specs(bad: dict) -> None:
    doc = {"apiVersion": "offpeak.io/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "x"},
           "spec": {"image": "i", "batchSize": 8, "steps": 10, "gpuTypes": ["T4"], **bad}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)


def _undeclared(value: Any, schema: dict[str, Any], path: str = "status") -> list[str]:
    """Keys the API server would prune: present in `value` but not declared in the structural `schema`."""
    if isinstance(value, dict) and "properties" in schema:
        out = []
        for key, sub in value.items():
            if key not in schema["properties"]:
                out.append(f"{path}.{key}")
            else:
                out += _undeclared(sub, schema["properties"][key], f"{path}.{key}")
        return out
    if isinstance(value, list) and "items" in schema:
        return [p for item in value for p in _undeclared(item, schema["items"], f"{path}[]")]
    return []


def test_measurement_and_correction_status_fields_are_declared_so_they_are_not_pruned() -> None:
    from datetime import timedelta

    from offpeak.progress import Progress
    from optestkit import NOW, job_body

    from offpeak_operator import statemachine as sm
    from offpeak_operator.predictions import GpuPrediction, Prediction
    from offpeak_operator.settings import OperatorSettings

    prediction = Prediction(source="predictor", steps=1000, model_version="m", graph_hash="sha256:x", gpus=(
        GpuPrediction(gpu_type="T4", step_seconds=0.5, step_seconds_p90=0.8, job_seconds=560, job_seconds_p90=900,
                      correction_samples=2, correction_factor=1.3),))
    view = sm.PodView("train-1-a1-w0", phase="Succeeded", node="n1", gpu_type="T4", started_at=NOW,
                      finished_at=NOW + timedelta(seconds=700),
                      progress=Progress(steps=1000, attempt_steps=1000, step_seconds=0.6, startup_seconds=100))
    status = {"phase": "Running", "attempts": 1, "completedSteps": 0, "prediction": prediction.to_status()}
    d = sm.decide(job_name="train-1", spec=parse_spec(job_body()["spec"]), problems=[], status=status,
                  observed=sm.Observed(training_pods={view.name: view}), now=NOW, settings=OperatorSettings())
    written = {**status, **d.status, "sampleReported": True, "sampleStatus": "accepted"}
    assert "measurements" in written and written["prediction"]["gpus"][0]["correctionSamples"] == 2
    schema = VERSION["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert _undeclared(written, schema) == []
    jsonschema.validate({"status": written}, {"type": "object", "properties": {"status": _jsonschema(schema)}})


def test_planned_stop_and_elastic_status_fields_are_declared_so_they_are_not_pruned() -> None:
    """A requeue after a planned stop writes status.plannedStops, an elastic job runningWorkers and narrowedAttempt:
    pruned, a planned stop would count against maxAttempts after all (the e2e scenario found it)."""
    from datetime import timedelta

    from optestkit import NOW, job_body

    from offpeak_operator import statemachine as sm
    from offpeak_operator.settings import OperatorSettings

    schema = VERSION["schema"]["openAPIV3Schema"]["properties"]["status"]
    spec = parse_spec(job_body(checkpointing=True, workers=2, minWorkers=1)["spec"])
    status = {"phase": "Running", "attempts": 1, "completedSteps": 0}
    stopped = sm.PodView("train-1-a1-w0", phase="Failed", reason="Evicted", eviction_reason="window-ending",
                         planned_stop=True, node="n1", gpu_type="T4", started_at=NOW,
                         finished_at=NOW + timedelta(seconds=60))
    waiting = sm.PodView("train-1-a1-w1")
    running = sm.PodView("train-1-a1-w0", phase="Running", node="n1", gpu_type="T4", started_at=NOW)
    written: dict[str, Any] = {}
    for pods in ((stopped, waiting), (running, waiting)):
        d = sm.decide(job_name="train-1", spec=spec, problems=[], status=status, now=NOW + timedelta(seconds=90),
                      observed=sm.Observed(training_pods={p.name: p for p in pods}), settings=OperatorSettings())
        written.update(d.status)
    assert {"plannedStops", "runningWorkers", "narrowedAttempt"} <= set(written), written
    assert written["plannedStops"] == 1
    assert _undeclared(written, schema) == []


def test_the_crd_precisions_are_the_graph_schemas() -> None:
    """One list of precisions (offpeak_graph.schema.PRECISIONS): the CRD may not offer one the predictor refuses."""
    from offpeak_graph.schema import PRECISIONS

    precision = VERSION["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["precision"]
    assert precision["enum"] == list(PRECISIONS) and "tf32" in precision["enum"]


def test_suspend_is_a_boolean_the_operator_reads() -> None:
    doc = yaml.safe_load(EXAMPLES[0].read_text())
    doc["spec"]["suspend"] = True
    jsonschema.validate(doc, SCHEMA)
    assert parse_spec(doc["spec"]).suspend is True
    assert parse_spec(yaml.safe_load(EXAMPLES[0].read_text())["spec"]).suspend is False
    doc["spec"]["suspend"] = "yes"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, SCHEMA)
