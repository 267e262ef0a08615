"""The chart's NetworkPolicies, evaluated with NetworkPolicy semantics against the pods the chart renders: each
policy selects exactly its component's pods, and each port admits exactly the intended peers.

The evaluator below implements the ingress rules of networking.k8s.io/v1 for pod and namespace selectors (a pod
selected by no policy is open; a selected pod accepts what some rule of some selecting policy admits; a rule with
no `from` admits every source, no `ports` every port; a peer with both selectors needs both). Traffic from the
pod's own node (kubelet probes) is always allowed by Kubernetes and is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from support.chart import find, helm, render

from .conftest import CHART


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    labels: dict[str, str]
    namespace_labels: dict[str, str] = field(default_factory=dict)


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _peer_admits(peer: dict[str, Any], policy_ns: str, source: Pod) -> bool:
    if "ipBlock" in peer:
        return False  # no pod IPs here
    pods, namespaces = peer.get("podSelector"), peer.get("namespaceSelector")
    if namespaces is None and source.namespace != policy_ns:
        return False  # a podSelector alone means the policy's own namespace
    if namespaces is not None and not _selects(namespaces, source.namespace_labels):
        return False
    return pods is None or _selects(pods, source.labels)


def _policy_selects(policy: dict[str, Any], pod: Pod) -> bool:
    return policy["metadata"]["namespace"] == pod.namespace and _selects(policy["spec"]["podSelector"], pod.labels)


def admitted(policies: list[dict[str, Any]], target: Pod, port: int, source: Pod) -> bool:
    selecting = [p for p in policies if _policy_selects(p, target) and "Ingress" in p["spec"]["policyTypes"]]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get("ingress") or []:
            ports = rule.get("ports")
            if ports and not any(p.get("port") == port for p in ports):
                continue
            peers = rule.get("from")
            if not peers or any(_peer_admits(peer, policy["metadata"]["namespace"], source) for peer in peers):
                return True
    return False


def _workload_pods(objects: list[dict[str, Any]]) -> dict[str, tuple[Pod, list[int]]]:
    """component → (one of its pods, its container ports)."""
    out = {}
    for obj in objects:
        if obj["kind"] not in ("Deployment", "DaemonSet"):
            continue
        template = obj["spec"]["template"]
        labels = dict(template["metadata"]["labels"])
        ns = obj["metadata"]["namespace"]
        pod = Pod(obj["metadata"]["name"], ns, labels, {"kubernetes.io/metadata.name": ns})
        ports = [p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])]
        out[labels["app.kubernetes.io/component"]] = (pod, ports)
    return out


def _sources(objects: list[dict[str, Any]]) -> dict[str, Pod]:
    """The chart's own pods plus pods a cluster has around them."""
    workloads = _workload_pods(objects)
    ns = workloads["operator"][0].namespace
    monitoring = {"kubernetes.io/metadata.name": "monitoring"}
    other = {"kubernetes.io/metadata.name": "ml-team"}
    return {
        **{name: pod for name, (pod, _) in workloads.items()},
        "prometheus": Pod("prometheus-0", "monitoring", {"app.kubernetes.io/name": "prometheus"}, monitoring),
        "grafana": Pod("grafana", "monitoring", {"app.kubernetes.io/name": "grafana"}, monitoring),
        "collect-job": Pod("collect-x", ns, {"offpeak.io/predictor-client": "true", "job-name": "collect"},
                           {"kubernetes.io/metadata.name": ns}),
        "stranger": Pod("stranger", ns, {"app": "whatever"}, {"kubernetes.io/metadata.name": ns}),
        "training-pod": Pod("tj-0", "ml-team", {"offpeak.io/workload": "offline"}, other),
        # the predictor-client label only counts in the release namespace
        "foreign-client": Pod("c", "ml-team", {"offpeak.io/predictor-client": "true"}, other),
        # another release's scheduler must not reach this extender
        "other-scheduler": Pod("s", ns, {"app.kubernetes.io/name": "offpeak", "app.kubernetes.io/instance": "other",
                                         "app.kubernetes.io/component": "scheduler"},
                               {"kubernetes.io/metadata.name": ns}),
    }


def _flags(objects: list[dict[str, Any]], component: str) -> dict[str, str]:
    """--flag=value arguments of a component's container."""
    (deployment,) = find(objects, "Deployment", f"-{component}")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if "=" in a}


def _expected(objects: list[dict[str, Any]], scrapers: set[str]) -> dict[tuple[str, int], set[str]]:
    """(component, port) → the sources the chart means to admit there."""
    workloads = _workload_pods(objects)
    flag = {c: _flags(objects, c) for c in ("extender", "predictor")}
    ports = {c: p for c, (_, p) in workloads.items()}
    operator_metrics, operator_health, operator_status = ports["operator"]
    return {
        ("extender", int(flag["extender"]["--port"])): {"scheduler"},
        ("extender", int(flag["extender"]["--metrics-port"])): scrapers,
        # the API (/v1/predict, /v1/samples): no scraper; /metrics on its own port: nobody else
        ("predictor", int(flag["predictor"]["--port"])): {"operator", "collect-job"},
        ("predictor", int(flag["predictor"]["--metrics-port"])): scrapers,
        ("operator", operator_metrics): scrapers,
        ("operator", operator_health): set(),  # kubelet only (from the node, always allowed)
        ("operator", operator_status): {"training-pod"},  # live progress, from training pods of any namespace
        ("evictor", ports["evictor"][0]): scrapers,
        ("agent", ports["agent"][0]): scrapers,
    }


@pytest.mark.parametrize("which, scrapers", [("default", {"prometheus", "grafana"}), ("custom", {"prometheus"})])
def test_each_port_admits_exactly_the_intended_peers(request, which: str, scrapers: set[str]) -> None:
    objects = request.getfixturevalue(f"{which}_objects")
    policies = find(objects, "NetworkPolicy")
    workloads = _workload_pods(objects)
    sources = _sources(objects)
    expected = _expected(objects, scrapers)
    for component, (target, ports) in workloads.items():
        if component == "scheduler":
            continue  # the scheduler's own 10259 is not restricted (below)
        assert {(component, p) for p in ports} <= expected.keys(), (component, ports)
    got = {
        key: {name for name, src in sources.items() if admitted(policies, workloads[key[0]][0], key[1], src)}
        for key in expected
    }
    assert got == expected


def test_each_policy_selects_exactly_its_components_pods(objects: list[dict[str, Any]]) -> None:
    policies = find(objects, "NetworkPolicy")
    workloads = _workload_pods(objects)
    selected = {
        p["metadata"]["name"]: {c for c, (pod, _) in workloads.items() if _policy_selects(p, pod)} for p in policies
    }
    assert selected == {
        workloads[c][0].name: {c} for c in ("extender", "predictor", "operator", "evictor", "agent")
    }
    for policy in policies:
        assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress is not restricted
        for rule in policy["spec"]["ingress"]:
            assert rule.get("from") and rule.get("ports"), policy["metadata"]["name"]  # never "from anywhere"


def test_the_evaluator_can_say_no_and_yes(default_objects) -> None:
    """The matrix above is only worth something if the evaluator distinguishes; check it on hand-made cases."""
    workloads = _workload_pods(default_objects)
    sources = _sources(default_objects)
    extender, _ = workloads["extender"]
    open_rule = [{"metadata": {"namespace": extender.namespace}, "spec": {
        "podSelector": {"matchLabels": {"app.kubernetes.io/component": "extender"}},
        "policyTypes": ["Ingress"], "ingress": [{"ports": [{"port": 8888}]}]}}]
    assert admitted(open_rule, extender, 8888, sources["stranger"])
    assert not admitted(open_rule, extender, 8889, sources["stranger"])
    assert admitted([], extender, 8889, sources["stranger"])  # selected by nothing: open
    assert not admitted(find(default_objects, "NetworkPolicy"), extender, 8888, sources["stranger"])


def test_the_scheduler_pods_are_left_open(default_objects) -> None:
    """Documented limit: the scheduler's 10259 (its own TLS-authenticated health and metrics) has no policy."""
    workloads = _workload_pods(default_objects)
    scheduler, ports = workloads["scheduler"]
    assert ports == [10259]
    assert admitted(find(default_objects, "NetworkPolicy"), scheduler, 10259, _sources(default_objects)["stranger"])


def test_policies_follow_ports_and_can_be_switched_off(helm_bin) -> None:
    objects = render(CHART, set_values=["scheduler.extender.port=7000", "scheduler.extender.metricsPort=7001",
                                        "predictor.port=7002", "predictor.metricsPort=7003"], include_crds=False)
    policies = {p["metadata"]["name"]: p for p in find(objects, "NetworkPolicy")}
    assert [r["ports"][0]["port"] for r in policies["offpeak-extender"]["spec"]["ingress"]] == [7000, 7001]
    assert [r["ports"][0]["port"] for r in policies["offpeak-predictor"]["spec"]["ingress"]] == [7002, 7003]
    assert find(render(CHART, set_values=["networkPolicy.enabled=false"], include_crds=False), "NetworkPolicy") == []
    only = render(CHART, set_values=[f"{c}.enabled=false" for c in ("operator", "predictor", "evictor", "agent")],
                  include_crds=False)
    assert [p["metadata"]["name"] for p in find(only, "NetworkPolicy")] == ["offpeak-extender"]


def test_prometheus_from_takes_any_peer_list(helm_bin, tmp_path) -> None:
    values = tmp_path / "v.yaml"
    values.write_text(
        "networkPolicy:\n  prometheusFrom:\n"
        "    - namespaceSelector: {matchExpressions: [{key: team, operator: In, values: [obs]}]}\n"
        "    - ipBlock: {cidr: 10.0.0.0/8}\n"
    )
    objects = render(CHART, values=[values], include_crds=False)
    (policy,) = [p for p in find(objects, "NetworkPolicy") if p["metadata"]["name"] == "offpeak-evictor"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchExpressions": [
        {"key": "team", "operator": "In", "values": ["obs"]}]}}, {"ipBlock": {"cidr": "10.0.0.0/8"}}]


@pytest.mark.parametrize("bad", [
    "prometheusFrom: []",  # an empty `from` would admit every source
    "prometheusFrom: [{}]",  # an empty peer
    "prometheusFrom: [{namespace: monitoring}]",  # not a NetworkPolicyPeer field
    "prometheusFrom: [{namespaceSelector: {matchLabels: {a: 1}}}]",  # label values are strings
    "prometheusFrom: {namespaceSelector: {}}",  # a list, not one peer
    "enabled: yes-please",
])
def test_schema_refuses_bad_network_policy_values(helm_bin, tmp_path, bad: str) -> None:
    values = tmp_path / "v.yaml"
    values.write_text("networkPolicy:\n  " + bad + "\n")
    result = helm("template", "x", str(CHART), "--values", str(values))
    assert result.returncode != 0
    assert "schema" in result.stderr
