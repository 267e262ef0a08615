"""TrainingJobs and OnlineDemands for people: ClusterRoles that Kubernetes' built-in `admin`, `edit` and `view` roles
aggregate (their aggregationRule selects these labels), so a namespace's editors can submit TrainingJobs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from support import REPO
from support.chart import chart_dir, find, render

CHART = chart_dir(REPO)
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"
RESOURCES = ("trainingjobs", "onlinedemands")


def allowed(role: dict[str, Any], resource: str, verb: str) -> bool:
    return any("offpeak.io" in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
               for r in role["rules"])


def roles(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["metadata"]["name"].rsplit("-", 1)[-1]: r for r in find(objects, "ClusterRole")
            if any(k.startswith(AGGREGATE) for k in r["metadata"]["labels"])}


def test_editors_may_submit_and_viewers_may_read(default_objects: list[dict[str, Any]]) -> None:
    user = roles(default_objects)
    assert set(user) == {"edit", "view"}
    edit, view = user["edit"], user["view"]
    assert {k for k, v in edit["metadata"]["labels"].items() if k.startswith(AGGREGATE) and v == "true"} == {
        AGGREGATE + "edit", AGGREGATE + "admin"}
    assert {k for k, v in view["metadata"]["labels"].items() if k.startswith(AGGREGATE) and v == "true"} == {
        AGGREGATE + "view", AGGREGATE + "edit", AGGREGATE + "admin"}
    for resource in RESOURCES:
        for verb in ("create", "update", "patch", "delete", "deletecollection", "get", "list", "watch"):
            assert allowed(edit, resource, verb), (resource, verb)
        assert allowed(view, resource, "list") and not allowed(view, resource, "create")
        # status is the operator's to write, nobody else's
        for role in (edit, view):
            assert not any(allowed(role, f"{resource}/status", v) for v in ("update", "patch", "create"))


def test_user_roles_can_be_left_out(helm_bin: Path) -> None:
    objects = render(CHART, set_values=["rbac.aggregateToDefaultRoles=false"], include_crds=False)
    assert roles(objects) == {}
