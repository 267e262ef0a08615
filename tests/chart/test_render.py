"""helm lint, helm template, and every rendered object against the Kubernetes schemas of a pinned version."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from support.chart import KUBE_VERSION, chart_dir, find, helm, render
from support import REPO

ROOT = REPO
CHART = chart_dir(ROOT)
CUSTOM_VALUES = Path(__file__).with_name("values-custom.yaml")

# Kinds whose schemas are not part of Kubernetes (Prometheus operator): checked by hand below.
CUSTOM_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule"),
                ("kopf.dev/v1", "ClusterKopfPeering"), ("kopf.dev/v1", "KopfPeering")}


@pytest.mark.parametrize("values", [[], [CUSTOM_VALUES]], ids=["default", "custom"])
def test_helm_lint_strict(helm_bin: Path, values: list[Path]) -> None:
    args = ["lint", "--strict", str(CHART), "--kube-version", KUBE_VERSION]
    for path in values:
        args += ["--values", str(path)]
    result = helm(*args)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_object_is_valid_for_the_pinned_kubernetes(objects: list[dict[str, Any]]) -> None:
    errors = []
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CUSTOM_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {e.message} at {list(e.path)}")
    assert errors == []


def test_validation_would_catch_a_broken_object(default_objects: list[dict[str, Any]]) -> None:
    (deployment,) = find(default_objects, "Deployment", "-operator")
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "nine"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBE_VERSION, strict=True)


def test_service_monitors_only_when_enabled(default_objects, custom_objects) -> None:
    assert find(default_objects, "ServiceMonitor") == []
    monitors = find(custom_objects, "ServiceMonitor")
    assert {m["metadata"]["name"] for m in monitors} == {
        f"gpu-harvest-{c}" for c in ("operator", "predictor", "extender", "evictor", "agent")
    }
    services = {s["metadata"]["name"]: s for s in find(custom_objects, "Service")}
    for monitor in monitors:
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        (endpoint,) = monitor["spec"]["endpoints"]
        service = services[monitor["metadata"]["name"]]
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert endpoint["port"] in {"metrics", "http-metrics"}  # never an API port (the predictor's `http`)
        selector = monitor["spec"]["selector"]["matchLabels"]
        assert selector.items() <= service["metadata"]["labels"].items()


def test_services_select_their_pods(objects: list[dict[str, Any]]) -> None:
    # a component's Services (the operator has two: metrics, and its status server) select its one workload
    workloads = {o["metadata"]["labels"]["app.kubernetes.io/component"]: o for o in objects
                 if o["kind"] in ("Deployment", "DaemonSet")}
    for service in find(objects, "Service"):
        workload = workloads[service["metadata"]["labels"]["app.kubernetes.io/component"]]
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= pod_labels.items()
        container_ports = {
            p["name"] for c in workload["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])
        }
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in container_ports, service["metadata"]["name"]


def test_disabled_components_render_nothing(helm_bin: Path) -> None:
    objects = render(
        CHART,
        set_values=[f"{c}.enabled=false" for c in ("operator", "predictor", "scheduler", "evictor", "agent")]
        + ["dashboard.enabled=false", "crds.install=false", "rbac.aggregateToDefaultRoles=false"],
        include_crds=False,
    )
    assert objects == []


def test_pdbs_only_for_replicated_components(default_objects, custom_objects) -> None:
    assert find(default_objects, "PodDisruptionBudget") == []
    assert {p["metadata"]["name"] for p in find(custom_objects, "PodDisruptionBudget")} == {
        "gpu-harvest-predictor",
        "gpu-harvest-scheduler",
    }


@pytest.mark.parametrize(
    "bad",
    [
        "image.tag=latest",
        "operator.replicas=-1",
        "scheduler.extender.httpTimeout=soon",
        "prometheusURL=prometheus:9090",
        "unknownKey=1",
        "scheduler.image.tag=latest",
    ],
)
def test_schema_rejects_bad_values(helm_bin: Path, bad: str) -> None:
    result = helm("template", "x", str(CHART), "--set", bad)
    assert result.returncode != 0
    assert "schema" in result.stderr


def test_predictor_volume_is_emptydir_or_pvc(default_objects, custom_objects) -> None:
    def data_volume(objects: list[dict[str, Any]]) -> dict[str, Any]:
        (deployment,) = find(objects, "Deployment", "-predictor")
        (volume,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "data"]
        return volume

    assert "emptyDir" in data_volume(default_objects)
    assert find(default_objects, "PersistentVolumeClaim") == []
    assert data_volume(custom_objects)["persistentVolumeClaim"]["claimName"] == "gpu-harvest-predictor"
    (deployment,) = find(custom_objects, "Deployment", "-predictor")
    assert "--model=/var/lib/offpeak/model.json.gz" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    (claim,) = find(custom_objects, "PersistentVolumeClaim")
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"


def test_dashboard_configmap_carries_the_committed_json(default_objects, custom_objects) -> None:
    committed = json.loads((CHART / "files" / "dashboard.json").read_text())
    (default,) = find(default_objects, "ConfigMap", "-dashboard")
    assert default["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(default["data"]["offpeak.json"]) == committed  # {{legend}} survived Helm untouched
    (custom,) = find(custom_objects, "ConfigMap", "-dashboard")
    assert custom["metadata"]["namespace"] == "monitoring"
    assert custom["metadata"]["annotations"] == {"grafana_folder": "offpeak"}


def test_component_commands_follow_the_contract(default_objects: list[dict[str, Any]]) -> None:
    def args(suffix: str, kind: str = "Deployment", container: int = 0) -> list[str]:
        (obj,) = find(default_objects, kind, suffix)
        return obj["spec"]["template"]["spec"]["containers"][container]["args"]

    assert args("-operator")[:1] == ["operator"]
    assert "--predictor-url=http://offpeak-predictor.offpeak-system.svc:8080" in args("-operator")
    assert "--metrics-port=9090" in args("-operator")
    assert args("-predictor")[:2] == ["predictor", "serve"]
    assert {"--port=8080", "--metrics-port=9092"} <= set(args("-predictor"))
    (scheduler,) = find(default_objects, "Deployment", "-scheduler")
    assert [c["name"] for c in scheduler["spec"]["template"]["spec"]["containers"]] == ["kube-scheduler"]
    assert args("-extender")[0] == "extender"
    assert {"--host=0.0.0.0", "--port=8888", "--metrics-port=8889", "--gang-timeout-seconds=60"} <= set(
        args("-extender"))
    assert args("-evictor")[0] == "evictor" and "--metrics-port=9091" in args("-evictor")
    assert args("-agent", kind="DaemonSet")[0] == "agent" and "--port=9400" in args("-agent", kind="DaemonSet")


TEMPLATED_CRDS = ("trainingjobs.offpeak.io", "onlinedemands.offpeak.io")


def test_each_crd_has_one_home_and_is_installed_once() -> None:
    """offpeak's CRDs live in the chart's files/crds/ (templates), kopf's in its crds/ (installed once); the
    repository's crds/ only links to them, so nothing is copied and no CRD is in both of the chart's places."""
    links = {p.name: p for p in (ROOT / "crds").iterdir()}
    assert set(links) == {f"{n}.yaml" for n in TEMPLATED_CRDS} | {"kopf-peering.yaml"}
    for name, link in links.items():
        assert link.is_symlink(), f"crds/{name} must link into the chart, not be a copy"
        target = link.resolve()
        assert target.parent in (CHART / "files" / "crds", CHART / "crds"), target
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == ["kopf-peering.yaml"]
    assert sorted(p.name for p in (CHART / "files" / "crds").iterdir()) == sorted(f"{n}.yaml" for n in TEMPLATED_CRDS)


def test_offpeak_crds_are_templates_that_helm_upgrades_and_uninstall_keeps(default_objects) -> None:
    rendered = {c["metadata"]["name"]: c for c in find(default_objects, "CustomResourceDefinition")}
    for name in TEMPLATED_CRDS:
        crd = rendered[name]
        source = yaml.safe_load((CHART / "files" / "crds" / f"{name}.yaml").read_text())
        assert crd["spec"] == source["spec"]  # the template changes nothing of the file's schema
        assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    off = render(CHART, set_values=["crds.install=false"], include_crds=False)
    assert find(off, "CustomResourceDefinition") == []


def test_crds_are_installed_by_the_chart(default_objects) -> None:
    # the kopf peering CRDs always (from crds/: inert until a peering object exists, and an existing copy from
    # another kopf operator is left alone)
    assert {c["metadata"]["name"] for c in find(default_objects, "CustomResourceDefinition")} == {
        "trainingjobs.offpeak.io", "onlinedemands.offpeak.io", "clusterkopfpeerings.kopf.dev",
        "kopfpeerings.kopf.dev"}


def test_every_offpeak_container_command_parses_with_the_real_cli(objects: list[dict[str, Any]]) -> None:
    """Flag drift between the chart and the components' argparse definitions fails here, not in a cluster."""
    from offpeak.cli import build_parser

    from support.chart import pod_specs

    parser = build_parser()
    checked = 0
    for name, spec in pod_specs(objects):
        for container in spec["containers"]:
            if "offpeak" not in container["image"]:
                continue
            args = container["args"]
            try:
                parsed = parser.parse_args(args)
            except SystemExit:
                pytest.fail(f"{name}/{container['name']}: `offpeak {' '.join(args)}` is rejected by the CLI")
            assert callable(getattr(parsed, "func", None)), args
            checked += 1
    collect = sum("-collect-" in name for name, _ in pod_specs(objects))  # a Job per GPU type in the custom values
    assert checked == 5 + collect


def test_agent_is_ready_only_with_nvml_and_scraped_anyway(default_objects: list[dict[str, Any]]) -> None:
    """Readiness means data (/readyz: NVML answers); the headless Service still lists a not-ready agent, so
    Prometheus scrapes its offpeak_agent_nvml_up 0."""
    (ds,) = [o for o in default_objects if o["kind"] == "DaemonSet" and o["metadata"]["name"].endswith("-agent")]
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    (svc,) = [o for o in default_objects if o["kind"] == "Service" and o["metadata"]["name"].endswith("-agent")]
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True


def test_planned_stops_give_the_evictor_the_extenders_forecast_options(helm_bin: Path) -> None:
    objects = render(CHART, set_values=["evictor.yieldAtCheckpoints=true", "scheduler.extender.seasonSeconds=600",
                                        "scheduler.extender.historyDays=3"], include_crds=False)

    def args(suffix: str) -> list[str]:
        (obj,) = find(objects, "Deployment", suffix)
        return obj["spec"]["template"]["spec"]["containers"][0]["args"]

    forecast = {a for a in args("-extender") if a.split("=")[0] in ("--refresh-seconds", "--history-days",
                                                                       "--season-seconds")}
    assert forecast == {"--refresh-seconds=60", "--history-days=3", "--season-seconds=600"}
    assert {"--yield-at-checkpoints", "--pressure-settle-seconds=60"} | forecast <= set(args("-evictor"))
    from offpeak.cli import build_parser

    parsed = build_parser().parse_args(args("-evictor"))
    assert parsed.yield_at_checkpoints and parsed.season_seconds == 600


def test_pool_windows_let_the_extender_and_a_yielding_evictor_read_announced_online_demand(helm_bin: Path) -> None:
    """With a pool label the extender (and the evictor, when it makes planned stops) reads OnlineDemand objects,
    and only then: its ClusterRole grants list/watch on them, and the evictor gets the pool options."""
    def rendered(*set_values: str) -> list[dict[str, Any]]:
        return render(CHART, set_values=list(set_values), include_crds=False)

    def reads_announcements(objects: list[dict[str, Any]], suffix: str) -> bool:
        (role,) = find(objects, "ClusterRole", suffix)
        return any("onlinedemands" in r.get("resources", ()) and set(r["verbs"]) == {"list", "watch"}
                   for r in role["rules"])

    def evictor_args(objects: list[dict[str, Any]]) -> list[str]:
        (obj,) = find(objects, "Deployment", "-evictor")
        return obj["spec"]["template"]["spec"]["containers"][0]["args"]

    off = rendered("evictor.yieldAtCheckpoints=true")
    assert not reads_announcements(off, "-extender") and not reads_announcements(off, "-evictor")
    pooled = rendered("scheduler.extender.poolLabel=pool.example.com/name")
    assert reads_announcements(pooled, "-extender") and not reads_announcements(pooled, "-evictor")
    assert not any(a.startswith("--pool-label") for a in evictor_args(pooled))
    both = rendered("scheduler.extender.poolLabel=pool.example.com/name", "evictor.yieldAtCheckpoints=true",
                    "scheduler.extender.poolLookBackSeconds=900", "scheduler.extender.poolCeilingNamespaces={chat}")
    assert reads_announcements(both, "-extender") and reads_announcements(both, "-evictor")
    assert {"--pool-label=pool.example.com/name", "--pool-look-back-seconds=900",
            "--pool-ceiling-namespaces=chat"} <= set(evictor_args(both))
