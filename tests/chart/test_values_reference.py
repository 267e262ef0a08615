"""docs/helm.md stays the reference of the chart's values: every value in values.yaml is named there."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from support import REPO
from support.chart import chart_dir

CHART = chart_dir(REPO)
# maps and lists taken as one value (their keys are the user's: node labels, resources, ...)
WHOLE = {"resources", "nodeSelector", "tolerations", "affinity", "podSecurityContext", "containerSecurityContext",
         "image", "tagByMinor", "labels", "annotations", "additionalLabels", "alertLabels", "commonLabels",
         "podAnnotations", "podLabels", "prometheusFrom", "gpus", "extraEnv", "extraArgs", "persistence", "auth",
         "feedback", "refit", "leaderElection", "kueueAdmissionCheck"}
# what the reference says once for every component ("Every component ... takes: ...")
COMPONENTS = {"operator", "predictor", "scheduler.extender", "evictor", "agent"}
PER_COMPONENT = {"enabled", "image", "podAnnotations", "podLabels", "resources", "extraArgs", "extraEnv",
                 "nodeSelector", "tolerations", "affinity", "priorityClassName"}


def leaves(values: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and key not in WHOLE:
            yield from leaves(value, path + ".")
        else:
            yield path


def test_every_value_is_in_the_reference() -> None:
    doc = (REPO / "docs" / "helm.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = []
    for path in leaves(values):
        owner, _, last = path.rpartition(".")
        if owner in COMPONENTS and last in PER_COMPONENT:
            continue
        if f"`{path}`" not in doc:
            missing.append(path)
    assert missing == [], f"docs/helm.md, \"Values reference\", does not name: {', '.join(missing)}"


def test_the_check_sees_a_value_left_out() -> None:
    assert "operator.kueue.enabled" in set(leaves(yaml.safe_load((CHART / "values.yaml").read_text())))
    assert list(leaves({"a": {"b": 1, "resources": {"x": 1}}})) == ["a.b", "a.resources"]
