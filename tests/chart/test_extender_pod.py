"""The extender runs in its own pod under its own ServiceAccount, with exactly the RBAC its Informer calls
(extender/offpeak_extender/kube.py: list_node, list_pod_for_all_namespaces, a watch on each), probes on its
metrics port, a Service the scheduler's configuration points at, and the gang settings passed through."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from offpeak_core.goodput import DEFAULT_MIN_EFFICIENCY
from support.chart import find, helm, render, scheduler_config

from .conftest import CHART


def _bindings_of(objects: list[dict[str, Any]], sa: str) -> set[tuple[str, str]]:
    return {
        (b["roleRef"]["kind"], b["roleRef"]["name"])
        for b in objects
        if b["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and any(s["kind"] == "ServiceAccount" and s["name"] == sa for s in b["subjects"])
    }


def _grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def _extender(objects: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    (deployment,) = find(objects, "Deployment", "-extender")
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    return spec, container


def test_extender_has_its_own_service_account_with_only_list_watch(objects: list[dict[str, Any]]) -> None:
    spec, _ = _extender(objects)
    sa = spec["serviceAccountName"]
    (scheduler,) = find(objects, "Deployment", "-scheduler")
    scheduler_sa = scheduler["spec"]["template"]["spec"]["serviceAccountName"]
    assert sa.endswith("-extender") and sa != scheduler_sa
    assert [o["metadata"]["name"] for o in find(objects, "ServiceAccount", "-extender")] == [sa]
    assert _bindings_of(objects, sa) == {("ClusterRole", sa)}
    (role,) = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == sa]
    assert _grants(role) == {("", r, v) for r in ("nodes", "pods") for v in ("list", "watch")}
    # the scheduler's ServiceAccount no longer holds the extender's role, and no binding of that role names it
    assert ("ClusterRole", sa) not in _bindings_of(objects, scheduler_sa)
    holders = {s["name"] for b in objects if b["kind"] == "ClusterRoleBinding" and b["roleRef"]["name"] == sa
               for s in b["subjects"]}
    assert holders == {sa}
    assert not [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-scheduler-extender")]


def test_extender_listens_on_all_addresses_with_probes_on_the_metrics_port(objects) -> None:
    spec, container = _extender(objects)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    args = container["args"]
    assert args[0] == "extender"
    assert "--host=0.0.0.0" in args
    assert f"--port={ports['http']}" in args and f"--metrics-port={ports['http-metrics']}" in args
    assert ports["http"] != ports["http-metrics"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}
    (service,) = find(objects, "Service", "-extender")
    assert {(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        ("http", ports["http"], "http"), ("http-metrics", ports["http-metrics"], "http-metrics")}
    assert service["spec"]["sessionAffinity"] == "ClientIP"


def test_defaults_are_the_documented_layout(default_objects) -> None:
    _, container = _extender(default_objects)
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"http": 8888, "http-metrics": 8889}
    assert "--gang-timeout-seconds=60" in container["args"]
    (deployment,) = find(default_objects, "Deployment", "-extender")
    assert deployment["metadata"]["name"] == "offpeak-extender" and deployment["spec"]["replicas"] == 1


def test_extender_is_placed_like_the_scheduler(custom_objects) -> None:
    spec, container = _extender(custom_objects)
    (scheduler,) = find(custom_objects, "Deployment", "-scheduler")
    assert spec["tolerations"] == scheduler["spec"]["template"]["spec"]["tolerations"]
    assert "--gang-timeout-seconds=90" in container["args"] and "--metrics-port=9888" in container["args"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["OFFPEAK_PROMETHEUS_URL"] == "http://prometheus-operated.monitoring.svc:9090"


def test_gang_timeout_reaches_the_real_cli(helm_bin, tmp_path) -> None:
    from offpeak.cli import build_parser

    values = tmp_path / "v.yaml"  # a file: `--set` would pass 12.5 as a string
    values.write_text("scheduler: {extender: {gangTimeoutSeconds: 12.5}}\n")
    _, container = _extender(render(CHART, values=[values], include_crds=False))
    parsed = build_parser().parse_args(container["args"])
    assert parsed.gang_timeout_seconds == 12.5
    assert (parsed.host, parsed.port, parsed.metrics_port) == ("0.0.0.0", 8888, 8889)


def _extender_config(objects: list[dict[str, Any]]) -> Any:
    """The ExtenderConfig the real CLI makes of the rendered extender container's arguments."""
    from offpeak.cli import build_parser
    from offpeak_extender.app import ExtenderConfig

    _, container = _extender(objects)
    return ExtenderConfig.from_args(build_parser().parse_args(container["args"]))


def _rendered_with(tmp_path: Any, values_text: str) -> list[dict[str, Any]]:
    values = tmp_path / "v.yaml"
    values.write_text(values_text)
    return render(CHART, values=[values], include_crds=False)


def test_goodput_admission_is_on_at_the_simulators_default_and_a_value_reaches_the_real_cli(
        helm_bin, default_objects, tmp_path) -> None:
    default = _extender_config(default_objects).goodput
    assert default is not None and default.min_efficiency == DEFAULT_MIN_EFFICIENCY  # what the simulator runs
    assert _extender_config(_rendered_with(tmp_path, "scheduler: {extender: {goodputMinEfficiency: null}}\n")
                            ).goodput is None
    config = _extender_config(_rendered_with(tmp_path, "scheduler: {extender: {goodputMinEfficiency: 0.75}}\n"))
    assert config.goodput is not None and config.goodput.min_efficiency == 0.75
    with pytest.raises(Exception, match="goodputMinEfficiency"):
        _rendered_with(tmp_path, "scheduler: {extender: {goodputMinEfficiency: 1.5}}\n")


def test_pool_windows_are_off_by_default_and_the_label_reaches_the_real_cli(helm_bin, default_objects,
                                                                            tmp_path) -> None:
    assert _extender_config(default_objects).pools is None
    pools = _extender_config(_rendered_with(
        tmp_path, "scheduler: {extender: {poolLabel: example.com/inference-pool, poolLookBackSeconds: 7200}}\n")).pools
    assert pools is not None and (pools.label, pools.look_back_seconds) == ("example.com/inference-pool", 7200.0)
    assert pools.ceiling_namespaces == frozenset()
    pools = _extender_config(_rendered_with(tmp_path, "scheduler: {extender: {poolLabel: example.com/inference-pool, "
                                                      "poolCeilingNamespaces: [chat, serving]}}\n")).pools
    assert pools is not None and pools.ceiling_namespaces == {"chat", "serving"}
    with pytest.raises(Exception, match="poolCeilingNamespaces"):
        _rendered_with(tmp_path, "scheduler: {extender: {poolCeilingNamespaces: [Not_A_Namespace]}}\n")
    with pytest.raises(Exception, match="poolLabel"):
        _rendered_with(tmp_path, "scheduler: {extender: {poolLabel: 'not a label'}}\n")


def test_scheduler_config_follows_the_extender_service(helm_bin) -> None:
    objects = render(CHART, set_values=["scheduler.extender.port=7000"], release="team", namespace="gpu-sched",
                     include_crds=False)
    config = yaml.safe_load(scheduler_config(objects))
    (extender,) = config["extenders"]
    (service,) = find(objects, "Service", "-extender")
    assert service["metadata"]["name"] == "team-offpeak-extender"
    assert extender["urlPrefix"] == "http://team-offpeak-extender.gpu-sched.svc:7000"
    assert config["percentageOfNodesToScore"] == 100


def test_replicated_extender_gets_a_pdb(helm_bin) -> None:
    objects = render(CHART, set_values=["scheduler.extender.replicas=2"], include_crds=False)
    assert [p["metadata"]["name"] for p in find(objects, "PodDisruptionBudget")] == ["offpeak-extender"]


@pytest.mark.parametrize("good", ["scheduler.extender.gangTimeoutSeconds=30", "scheduler.extender.metricsPort=9000",
                                  "scheduler.extender.replicas=3", "networkPolicy.enabled=false"])
def test_schema_accepts_new_values(helm_bin, good: str) -> None:
    result = helm("template", "x", str(CHART), "--kube-version", "1.33.0", "--set", good)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("bad", [
    "scheduler.extender.gangTimeoutSeconds=0",
    "scheduler.extender.gangTimeoutSeconds=-5",
    "scheduler.extender.gangTimeoutSeconds=soon",
    "scheduler.extender.metricsPort=0",
    "scheduler.extender.metricsPort=70000",
    "scheduler.extender.replicas=0",
    "scheduler.extender.host=127.0.0.1",  # gone: the extender must listen on the pod IP for the scheduler
])
def test_schema_refuses_bad_extender_values(helm_bin, bad: str) -> None:
    result = helm("template", "x", str(CHART), "--kube-version", "1.33.0", "--set", bad)
    assert result.returncode != 0
    assert "schema" in result.stderr


def test_the_kueue_admission_check_is_off_by_default_and_on_brings_its_flags_and_only_its_rbac(
        helm_bin, default_objects, tmp_path) -> None:
    from offpeak.cli import build_parser
    from offpeak_extender.app import ExtenderConfig

    spec, container = _extender(default_objects)
    assert ExtenderConfig.from_args(build_parser().parse_args(container["args"])).kueue_check is None
    (role,) = [o for o in find(default_objects, "ClusterRole", "-extender")]
    assert not any(g == "kueue.x-k8s.io" for g, _, _ in _grants(role))
    values = tmp_path / "v.yaml"
    values.write_text("scheduler: {extender: {kueueAdmissionCheck: {enabled: true, controllerName: example.com/fit, "
                      "intervalSeconds: 2}}}\n")
    objects = render(CHART, values=[values], include_crds=False)
    _, container = _extender(objects)
    config = ExtenderConfig.from_args(build_parser().parse_args(container["args"]))
    assert (config.kueue_check, config.kueue_interval_seconds) == ("example.com/fit", 2.0)
    (role,) = [o for o in find(objects, "ClusterRole", "-extender")]
    kueue = {(r, v) for g, r, v in _grants(role) if g == "kueue.x-k8s.io"}
    assert kueue == {("admissionchecks", "list"), ("workloads", "list"), ("resourceflavors", "list"),
                     ("admissionchecks/status", "patch"), ("workloads/status", "patch")}
    assert ("batch", "jobs", "get") in _grants(role) and ("batch", "jobs", "patch") not in _grants(role)
    assert {(r, v) for g, r, v in _grants(role) if g == "kubeflow.org"} == {("pytorchjobs", "get")}
    values.write_text("scheduler: {extender: {kueueAdmissionCheck: {enabled: true, controllerName: ''}}}\n")
    with pytest.raises(Exception, match="controllerName"):
        render(CHART, values=[values], include_crds=False)
