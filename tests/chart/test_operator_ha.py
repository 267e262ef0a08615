"""Operator HA: one replica runs kopf --standalone; more replicas peer through the `offpeak-operator` object."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from support.chart import KUBE_VERSION, chart_dir, find, render
from support import REPO
from offpeak_operator.handlers import PEERING_NAME

CHART = chart_dir(REPO)


@pytest.fixture(scope="module")
def ha_cluster_wide(helm_bin) -> list[dict[str, Any]]:
    return render(CHART, set_values=["operator.replicas=3"])


@pytest.fixture(scope="module")
def ha_namespaced(helm_bin) -> list[dict[str, Any]]:
    return render(CHART, set_values=["operator.replicas=2", "operator.watchNamespace=ml-team"], include_crds=False)


def _operator(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (deployment,) = find(objects, "Deployment", "-operator")
    return deployment


def _args(objects: list[dict[str, Any]]) -> list[str]:
    return _operator(objects)["spec"]["template"]["spec"]["containers"][0]["args"]


def _grants(objects: list[dict[str, Any]], kind: str, name: str) -> set[tuple[str, str, str, tuple[str, ...]]]:
    (role,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return {(g, r, v, tuple(rule.get("resourceNames", ()))) for rule in role["rules"] for g in rule["apiGroups"]
            for r in rule["resources"] for v in rule["verbs"]}


def test_single_replica_is_standalone_without_peering(default_objects) -> None:
    assert "--standalone" in _args(default_objects) and "--peering" not in _args(default_objects)
    assert _operator(default_objects)["spec"]["strategy"]["type"] == "Recreate"
    assert not [o for o in default_objects if o["apiVersion"] == "kopf.dev/v1"]
    assert not [p for p in find(default_objects, "PodDisruptionBudget") if p["metadata"]["name"].endswith("-operator")]
    for name in ("offpeak-operator", "offpeak-operator-cluster"):
        assert not {g for g in _grants(default_objects, "ClusterRole", name) if g[0] == "kopf.dev"}


def test_replicas_peer_cluster_wide(ha_cluster_wide) -> None:
    deployment = _operator(ha_cluster_wide)
    assert deployment["spec"]["replicas"] == 3
    args = _args(ha_cluster_wide)
    assert "--peering" in args and "--standalone" not in args and "--all-namespaces" in args
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["POD_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"  # the peer's identity
    (peering,) = [o for o in ha_cluster_wide if o["apiVersion"] == "kopf.dev/v1"]
    assert (peering["kind"], peering["metadata"]["name"]) == ("ClusterKopfPeering", PEERING_NAME)
    assert "namespace" not in peering["metadata"]
    peering_grants = {g for g in _grants(ha_cluster_wide, "ClusterRole", "offpeak-operator-cluster")
                      if g[0] == "kopf.dev"}
    assert peering_grants == {("kopf.dev", "clusterkopfpeerings", "list", ()),
                              ("kopf.dev", "clusterkopfpeerings", "watch", ()),
                              ("kopf.dev", "clusterkopfpeerings", "get", (PEERING_NAME,)),
                              ("kopf.dev", "clusterkopfpeerings", "patch", (PEERING_NAME,))}
    (pdb,) = [p for p in find(ha_cluster_wide, "PodDisruptionBudget") if p["metadata"]["name"] == "offpeak-operator"]
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["maxUnavailable"] == 1
    for obj in (deployment, pdb):
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)


def test_peering_crd_in_chart_defines_the_kinds_the_templates_use(ha_cluster_wide, ha_namespaced) -> None:
    crds = {c["spec"]["names"]["kind"]: c for c in find(ha_cluster_wide, "CustomResourceDefinition")}
    assert crds["ClusterKopfPeering"]["spec"]["scope"] == "Cluster"
    assert crds["KopfPeering"]["spec"]["scope"] == "Namespaced"
    for objects in (ha_cluster_wide, ha_namespaced):
        (peering,) = [o for o in objects if o["apiVersion"] == "kopf.dev/v1"]
        assert crds[peering["kind"]]["spec"]["group"] == "kopf.dev"


def test_replicas_peer_per_namespace_when_namespaced(ha_namespaced) -> None:
    args = _args(ha_namespaced)
    assert "--peering" in args and "--namespace=ml-team" in args
    (peering,) = [o for o in ha_namespaced if o["apiVersion"] == "kopf.dev/v1"]
    assert (peering["kind"], peering["metadata"]["name"], peering["metadata"]["namespace"]) == (
        "KopfPeering", PEERING_NAME, "ml-team")
    role_peering = {g for g in _grants(ha_namespaced, "Role", "offpeak-operator") if g[0] == "kopf.dev"}
    assert role_peering == {("kopf.dev", "kopfpeerings", "list", ()), ("kopf.dev", "kopfpeerings", "watch", ()),
                            ("kopf.dev", "kopfpeerings", "get", (PEERING_NAME,)),
                            ("kopf.dev", "kopfpeerings", "patch", (PEERING_NAME,))}
    assert not {g for g in _grants(ha_namespaced, "ClusterRole", "offpeak-operator-cluster") if g[0] == "kopf.dev"}
    assert [p["metadata"]["name"] for p in find(ha_namespaced, "PodDisruptionBudget")] == ["offpeak-operator"]


def test_peered_command_parses_with_the_real_cli(ha_cluster_wide) -> None:
    from offpeak.cli import build_parser

    parsed = build_parser().parse_args(_args(ha_cluster_wide))
    assert parsed.peering and not parsed.standalone
