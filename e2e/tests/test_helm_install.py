"""`helm install` of charts/offpeak into the real local control plane: every object is accepted by a real
kube-apiserver (RBAC bindings to the bootstrap roles, the CRD, PDB-free defaults), every Deployment becomes
available and the node agent DaemonSet runs on every fake GPU node (kwok marks pods Running; images are not
pulled), NOTES tell the user what to do next, and uninstall removes it. The chart's NetworkPolicies are accepted
by the API server here; this cluster has no network plugin, so nothing enforces them (tests/chart evaluates what
they admit)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from support.chart import chart_dir
from support import REPO
from support.tools import ToolMissing, find_helm
from offpeak_e2e.harness import E2ECluster


CHART = chart_dir(REPO)


def _helm(cluster: E2ECluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    try:
        helm = find_helm()
    except ToolMissing as e:
        pytest.fail(str(e), pytrace=False)
    return subprocess.run(
        [str(helm), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True, text=True, timeout=timeout, check=False,
    )


def _available(cluster: E2ECluster, ns: str) -> tuple[bool, dict[str, Any]]:
    deployments = cluster.get("deployments", "-n", ns)["items"]
    daemonsets = cluster.get("daemonsets", "-n", ns)["items"]
    state = {
        **{d["metadata"]["name"]: (d["status"].get("availableReplicas", 0), d["spec"]["replicas"]) for d in deployments},
        **{d["metadata"]["name"]: (d["status"].get("numberAvailable", 0), d["status"].get("desiredNumberScheduled", 0))
           for d in daemonsets},
    }
    ready = bool(deployments) and all(have == want and want > 0 for have, want in state.values())
    return ready, state


def test_helm_install_all_components_available(e2e_cluster: E2ECluster, e2e_namespace: str, tmp_path: Path) -> None:
    ns = e2e_namespace
    release = f"h-{ns}"[:20]
    values = tmp_path / "values.yaml"
    # Prometheus of the local cluster, so the extender would read real history; everything else default.
    values.write_text(json.dumps({"prometheusURL": e2e_cluster.state.urls["prometheus"]}))
    t0 = time.monotonic()
    installed = _helm(e2e_cluster, "install", release, str(CHART), "--namespace", ns, "--values", str(values),
                      "--wait", "--timeout", "4m")
    print(f"[e2e] helm install --wait: {time.monotonic() - t0:.1f}s")
    try:
        assert installed.returncode == 0, installed.stderr
        assert "kubectl apply -f trainingjob.yaml" in installed.stdout  # NOTES rendered for the user
        assert "offpeak-scheduler" in installed.stdout

        ready, state = _available(e2e_cluster, ns)
        assert ready, state
        names = set(state)
        for component in ("operator", "predictor", "scheduler", "extender", "evictor", "agent"):
            assert f"{release}-offpeak-{component}" in names, names
        (scheduler,) = [d for d in e2e_cluster.get("deployments", "-n", ns)["items"]
                        if d["metadata"]["name"] == f"{release}-offpeak-scheduler"]
        assert [c["name"] for c in scheduler["spec"]["template"]["spec"]["containers"]] == ["kube-scheduler"]
        policies = e2e_cluster.get("networkpolicies", "-n", ns)["items"]
        assert {p["metadata"]["name"] for p in policies} == {
            f"{release}-offpeak-{c}" for c in ("extender", "predictor", "operator", "evictor", "agent")}
        service = e2e_cluster.get("service", "-n", ns, f"{release}-offpeak-extender")
        assert {(p["name"], p["port"]) for p in service["spec"]["ports"]} == {("http", 8888), ("http-metrics", 8889)}
        config = e2e_cluster.get("configmap", "-n", ns, f"{release}-offpeak-scheduler-config")
        assert f"urlPrefix: http://{release}-offpeak-extender.{ns}.svc:8888" in config["data"]["config.yaml"]
        (agent,) = e2e_cluster.get("daemonsets", "-n", ns)["items"]
        assert agent["status"]["desiredNumberScheduled"] == len(e2e_cluster.nodes)  # one per fake GPU node

        crd = e2e_cluster.get("crd", "trainingjobs.offpeak.io")
        assert crd["spec"]["group"] == "offpeak.io"
        dashboard = e2e_cluster.get("configmap", "-n", ns, f"{release}-offpeak-dashboard")
        assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert json.loads(dashboard["data"]["offpeak.json"])["uid"] == "offpeak-overview"

        # RBAC really grants what the components need (the API server's authorizer answers, not our YAML).
        # `kubectl auth can-i VERB TYPE/NAME` names an object; subresources go in --subresource.
        def can(sa: str, verb: str, resource: str, *extra: str) -> bool:
            out = e2e_cluster.kubectl("auth", "can-i", verb, resource, *extra,
                                      f"--as=system:serviceaccount:{ns}:{release}-offpeak-{sa}", check=False)
            return out.stdout.strip() == "yes"

        assert can("evictor", "create", "pods", "--subresource=eviction", "-A")
        assert not can("evictor", "delete", "pods", "-A")
        assert can("agent", "list", "pods", "-A") and not can("agent", "patch", "pods", "-A")
        assert can("operator", "patch", "trainingjobs.offpeak.io", "--subresource=status", "-A")
        assert not can("operator", "get", "secrets", "-A")
        assert can("scheduler", "create", "pods", "--subresource=binding", "-A")  # through system:kube-scheduler
        assert can("scheduler", "update", "leases/offpeak-scheduler", "-n", ns)
        # (system:kube-scheduler itself grants the stock "kube-scheduler" lease; nothing else is granted)
        assert not can("scheduler", "update", "leases/some-other-controller", "-n", ns)
        assert can("scheduler", "get", "configmaps/extension-apiserver-authentication", "-n", "kube-system")
        assert not can("predictor", "list", "pods", "-n", ns)
        # the extender's own ServiceAccount: list/watch nodes and pods, nothing of the scheduler's
        assert can("extender", "list", "pods", "-A") and can("extender", "watch", "nodes")
        assert not can("extender", "get", "pods", "-A") and not can("extender", "patch", "pods", "-A")
        assert not can("extender", "create", "pods", "--subresource=binding", "-A")
        assert not can("extender", "update", "leases/offpeak-scheduler", "-n", ns)
        assert not can("extender", "get", "configmaps/extension-apiserver-authentication", "-n", "kube-system")
    finally:
        removed = _helm(e2e_cluster, "uninstall", release, "--namespace", ns, "--wait", "--timeout", "2m")
        assert removed.returncode == 0, removed.stderr
    leftovers = e2e_cluster.get("clusterrolebindings", "-l", f"app.kubernetes.io/instance={release}")["items"]
    assert leftovers == []


def test_chart_passes_the_restricted_pod_security_standard(e2e_cluster: E2ECluster, e2e_namespace: str) -> None:
    """The API server's PodSecurity admission, enforcing "restricted", admits every offpeak pod (the node agent is
    left out: its hostPID is documented as the one exception)."""
    ns = e2e_namespace
    release = f"r-{ns}"[:20]
    e2e_cluster.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted",
                        "pod-security.kubernetes.io/enforce-version=latest", "--overwrite")
    installed = _helm(e2e_cluster, "install", release, str(CHART), "--namespace", ns, "--set", "agent.enabled=false",
                      "--wait", "--timeout", "3m")
    try:
        assert installed.returncode == 0, installed.stderr
        assert "violate PodSecurity" not in installed.stderr
        ready, state = _available(e2e_cluster, ns)
        assert ready, state
        assert len(state) == 5  # operator, predictor, scheduler, extender, evictor
        events = e2e_cluster.get("events", "-n", ns)["items"]
        assert not [e for e in events if "forbidden" in e.get("message", "") and "PodSecurity" in e["message"]]
    finally:
        _helm(e2e_cluster, "uninstall", release, "--namespace", ns, "--wait", "--timeout", "2m")


def test_restricted_namespace_rejects_the_agent_as_documented(e2e_cluster: E2ECluster, e2e_namespace: str) -> None:
    """Proves the check above can fail: the agent's hostPID is refused under "restricted"."""
    ns = e2e_namespace
    release = f"a-{ns}"[:20]
    e2e_cluster.kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted", "--overwrite")
    only_agent = [f"{c}.enabled=false" for c in ("operator", "predictor", "scheduler", "evictor", "dashboard")]
    installed = _helm(e2e_cluster, "install", release, str(CHART), "--namespace", ns,
                      *[a for item in only_agent for a in ("--set", item)])
    try:
        assert installed.returncode == 0, installed.stderr
        def refused() -> bool:
            events = e2e_cluster.get("events", "-n", ns)["items"]
            return any("hostPID" in e.get("message", "") for e in events)
        e2e_cluster.wait_for("the agent's pods are refused for hostPID", refused, timeout=60)
        (daemonset,) = e2e_cluster.get("daemonsets", "-n", ns)["items"]
        assert daemonset["status"].get("numberAvailable", 0) == 0
    finally:
        _helm(e2e_cluster, "uninstall", release, "--namespace", ns, "--wait", "--timeout", "2m")
