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
    assert columns[:6] == ["Phase", "GPUs", "Predicted", "Actual", "Node", "Age"]


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
