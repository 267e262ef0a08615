"""The local cluster runs offpeak's services as charts/offpeak renders them (offpeak_e2e.chartrun): each component's
process spec comes from its Deployment, with only the documented local differences, and the e2e values carry every
setting the lanes relied on environment variables for."""

from __future__ import annotations

import argparse
import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from offpeak.cli import build_parser
from offpeak.cliargs import EnvDefault, env_value
from offpeak_e2e import chartrun, lanes
from support.tools import ToolMissing, find_helm

ROOT = Path("/run/pods")


def _render(tmp: Path, overlay: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        helm = find_helm()
    except ToolMissing as e:
        pytest.fail(str(e))
    path = tmp / "overlay.json"
    path.write_text(json.dumps(overlay))
    return chartrun.parse(chartrun.render(helm, values=[chartrun.VALUES_FILE, path]))


def _shared_overlay() -> dict[str, Any]:
    s = lanes.shared_settings("t")
    return chartrun.cluster_values(
        services=s.services, addons=s.addons, day_seconds=s.day_seconds, eviction_grace_s=s.eviction_grace_s,
        analysis_timeout_s=s.analysis_timeout_s, operator_namespaces=s.operator_namespaces,
        prometheus_url="http://127.0.0.1:19090", extra_env=s.extra_env)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The shared e2e cluster's rendering (one helm run for the module)."""
    return _render(tmp_path_factory.mktemp("chart"), _shared_overlay())


def _ports(objects: list[dict[str, Any]]) -> dict[str, int]:
    return {key: 20000 + i for i, key in enumerate(chartrun.declared_ports(objects, chartrun.COMPONENTS))}


def _specs(objects: list[dict[str, Any]]) -> dict[str, chartrun.ProcessSpec]:
    ports = _ports(objects)
    return {c: chartrun.process_spec(objects, c, ports=ports, volume_root=ROOT) for c in chartrun.COMPONENTS}


def _command(argv: tuple[str, ...]) -> tuple[argparse.ArgumentParser, dict[str, Any]]:
    """The (sub)parser of a command line and what it parses to, with no OFFPEAK_* variable set."""
    parser: argparse.ArgumentParser = build_parser()
    for token in argv:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001
        if not subparsers or token not in subparsers[0].choices:
            break
        parser = subparsers[0].choices[token]
    return parser, vars(build_parser().parse_args(list(argv)))


def test_the_e2e_values_give_by_flags_every_setting_the_lanes_environment_gives(
        shared: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """lanes.SHARED_ENV (handed to the chart as every component's extraEnv) is redundant: for each variable a
    component reads, its rendered command line already sets the value the variable would give."""
    for key in [k for k in os.environ if k.startswith("OFFPEAK_")]:
        monkeypatch.delenv(key)
    read: set[str] = set()
    for component, spec in _specs(shared).items():
        assert {k: spec.env[k] for k in lanes.SHARED_ENV} == dict(lanes.SHARED_ENV), component  # extraEnv got through
        parser, parsed = _command(spec.argv)
        for action in parser._actions:  # noqa: SLF001
            if isinstance(action.default, EnvDefault) and action.default.name in lanes.SHARED_ENV:
                read.add(action.default.name)
                wanted = env_value(action, action.default, lanes.SHARED_ENV)
                assert parsed[action.dest] == wanted, (component, action.option_strings, parsed[action.dest], wanted)
    assert read == set(lanes.SHARED_ENV)  # each variable is read by some component, so each was checked


def test_the_check_above_sees_a_setting_only_the_environment_gives(shared: list[dict[str, Any]],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("OFFPEAK_")]:
        monkeypatch.delenv(key)
    argv = tuple(a for a in _specs(shared)["extender"].argv if not a.startswith("--goodput-min-samples="))
    parser, parsed = _command(argv)
    (action,) = [a for a in parser._actions if "--goodput-min-samples" in a.option_strings]  # noqa: SLF001
    assert parsed[action.dest] != env_value(action, action.default, lanes.SHARED_ENV)


def test_local_differences_are_ports_addresses_service_urls_and_mounts(shared: list[dict[str, Any]]) -> None:
    ports = _ports(shared)
    specs = _specs(shared)
    operator, predictor, extender = specs["operator"], specs["predictor"], specs["extender"]
    assert f"--predictor-url=http://127.0.0.1:{ports['predictor/http']}" in operator.argv
    assert "--host=127.0.0.1" in predictor.argv and f"--port={ports['predictor/http']}" in predictor.argv
    assert f"--metrics-port={ports['predictor/http-metrics']}" in predictor.argv
    assert f"--db={ROOT}/predictor/data/samples.sqlite" in predictor.argv
    assert predictor.env["HOME"] == f"{ROOT}/predictor/tmp" and predictor.env["POD_NAMESPACE"] == chartrun.NAMESPACE
    assert extender.env["OFFPEAK_PROMETHEUS_URL"] == "http://127.0.0.1:19090"  # prometheusURL, as given
    assert extender.ready_url == f"http://127.0.0.1:{ports['extender/http-metrics']}/readyz"  # its readiness probe
    assert chartrun.service_url(shared, "extender", ports=ports) == f"http://127.0.0.1:{ports['extender/http']}"
    assert chartrun.service_url(shared, "operator", ports=ports) == f"http://127.0.0.1:{ports['operator/metrics']}"
    # the operator's status server: its own port, its Service's URL made local, the chart's certificate (which the
    # e2e values make for 127.0.0.1 too, so pods verify that URL) and token key mounted
    status = ports["operator/status"]
    assert {f"--status-port={status}", f"--status-url=https://127.0.0.1:{status}",
            f"--status-tls-dir={ROOT}/operator/status", f"--status-key-file={ROOT}/operator/status/key"} <= set(
        operator.argv)
    cert = x509.load_pem_x509_certificate(operator.files[f"{ROOT}/operator/status/tls.crt"][0])
    alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "127.0.0.1" in {str(ip) for ip in alt.get_values_for_type(x509.IPAddress)}
    assert {f"{ROOT}/operator/status/{k}" for k in ("tls.key", "ca.crt", "key")} <= set(operator.files)
    # one Secret mounted into both: the same token file contents, its defaultMode
    (op_token,) = [v for k, v in operator.files.items() if k.endswith("/predictor-token/token")]
    (pr_token,) = [v for k, v in predictor.files.items() if k.endswith("/predictor-token/token")]
    assert op_token == pr_token and op_token[1] == 0o440 and len(op_token[0]) == 48
    assert f"--predictor-token-file={ROOT}/operator/predictor-token/token" in operator.argv
    # credentials: a ServiceAccount token where the pod mounts one, none for the predictor
    assert (operator.service_account, extender.service_account, predictor.service_account) == (
        "offpeak-operator", "offpeak-extender", None)
    assert chartrun.scrape_targets(shared, ports=ports) == {
        "offpeak-predictor": f"127.0.0.1:{ports['predictor/http-metrics']}",
        "offpeak-extender": f"127.0.0.1:{ports['extender/http-metrics']}",
        "offpeak-evictor": f"127.0.0.1:{ports['evictor/metrics']}",
        "offpeak-operator": f"127.0.0.1:{ports['operator/metrics']}"}


def test_the_operator_leaves_the_own_operator_namespaces_alone_with_rbac_to_see_namespaces(
        shared: list[dict[str, Any]]) -> None:
    assert f"--namespace=!{lanes.OWN_OPERATOR_PREFIX}*" in _specs(shared)["operator"].argv
    (cluster_role,) = [o for o in shared if o["kind"] == "ClusterRole"
                       and o["metadata"]["name"] == "offpeak-operator-cluster"]
    assert {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]} in cluster_role["rules"]


def test_identity_objects_are_the_rbac_and_what_the_processes_mount(shared: list[dict[str, Any]]) -> None:
    objects = chartrun.identity_objects(shared, _specs(shared).values())
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert {("ServiceAccount", "offpeak-operator"), ("ClusterRole", "offpeak-edit"), ("ClusterRole", "offpeak-view"),
            ("ClusterRoleBinding", "offpeak-extender"), ("Secret", "offpeak-predictor-token")} <= kinds
    assert not {k for k in kinds if k[0] in ("Deployment", "Service", "NetworkPolicy", "ConfigMap")}


def test_cluster_values_follow_the_settings() -> None:
    values = chartrun.cluster_values(services=("predictor", "operator"), addons=(), day_seconds=600,
                                     eviction_grace_s=7, analysis_timeout_s=30, operator_namespaces=(),
                                     prometheus_url="", extra_env={})
    assert values["scheduler"]["enabled"] is False and values["evictor"]["enabled"] is False
    assert values["scheduler"]["extender"]["stepSeconds"] == 6.25
    assert values["operator"]["kueue"] == {"enabled": False} and values["operator"]["pytorchJobs"] is False
    assert values["scheduler"]["extender"]["kueueAdmissionCheck"] == {"enabled": False}
    assert values["operator"]["watchNamespace"] == "" and values["operator"]["excludeNamespaces"] == []
    with pytest.raises(chartrun.ChartRunError, match="one namespace"):
        chartrun.cluster_values(services=(), addons=(), day_seconds=600, eviction_grace_s=7, analysis_timeout_s=30,
                                operator_namespaces=("a", "!b"), prometheus_url="", extra_env={})
    with pytest.raises(chartrun.ChartRunError, match="whole seconds"):
        chartrun.cluster_values(services=(), addons=(), day_seconds=240.5, eviction_grace_s=7,
                                analysis_timeout_s=30, operator_namespaces=(), prometheus_url="", extra_env={})


def _pod(container: dict[str, Any], *, volumes: list[dict[str, Any]] = (), **spec: Any) -> list[dict[str, Any]]:
    dep = {"kind": "Deployment", "metadata": {"name": "x-op", "namespace": "ns",
                                              "labels": {chartrun.COMPONENT_LABEL: "operator"}},
           "spec": {"template": {"spec": {"containers": [container], "volumes": list(volumes), **spec}}}}
    return [dep]


def test_env_value_from_and_var_references_resolve_as_kubernetes_does() -> None:
    secret = {"kind": "Secret", "metadata": {"name": "s", "namespace": "ns"},
              "data": {"k": base64.b64encode(b"hush").decode()}}
    container = {"name": "c", "args": ["operator", "--id=$(POD)", "--cost=$$(POD)"],
                 "ports": [{"name": "m", "containerPort": 9}], "env": [
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        {"name": "GONE", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k", "optional": True}}}]}
    objects = [*_pod(container, automountServiceAccountToken=False), secret]
    spec = chartrun.process_spec(objects, "operator", ports={"operator/m": 30000}, volume_root=ROOT)
    assert spec.env == {"POD": "x-op-local", "NS": "ns", "S": "hush"}
    assert spec.argv == ("operator", "--id=x-op-local", "--cost=$(POD)")
    assert spec.service_account is None and spec.ready_url == "http://127.0.0.1:30000/"


def test_what_a_local_process_cannot_have_is_refused_by_name() -> None:
    container = {"name": "c", "args": ["operator"], "ports": [{"name": "m", "containerPort": 9}],
                 "volumeMounts": [{"name": "v", "mountPath": "/etc/v"}]}
    ports = {"operator/m": 30000}
    missing = _pod(container, volumes=[{"name": "v", "secret": {"secretName": "nowhere"}}])
    with pytest.raises(chartrun.ChartRunError, match="Secret ns/nowhere"):
        chartrun.process_spec(missing, "operator", ports=ports, volume_root=ROOT)
    host = _pod(container, volumes=[{"name": "v", "hostPath": {"path": "/"}}])
    with pytest.raises(chartrun.ChartRunError, match="volume v"):
        chartrun.process_spec(host, "operator", ports=ports, volume_root=ROOT)
    other = _pod({**container, "command": ["python"], "volumeMounts": []})
    with pytest.raises(chartrun.ChartRunError, match="not the image's"):
        chartrun.process_spec(other, "operator", ports=ports, volume_root=ROOT)
