"""The operator's status server in the chart: a Service, a Secret (certificate for the Service's names, its CA, the
token key), the flags and mount that hand them to the operator, and a switch that turns it all off."""

from __future__ import annotations

import base64
from typing import Any

from cryptography import x509

from support.chart import find, render

from .conftest import CHART


def _operator(objects: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, Any]]:
    (deployment,) = find(objects, "Deployment", "-operator")
    pod = deployment["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    return {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if "=" in a}, pod


def test_the_status_server_is_served_at_its_services_name_with_a_certificate_for_it(default_objects) -> None:
    flags, pod = _operator(default_objects)
    (service,) = find(default_objects, "Service", "-operator-status")
    name, ns = service["metadata"]["name"], service["metadata"]["namespace"]
    assert flags["--status-url"] == f"https://{name}.{ns}.svc:8443" and flags["--status-port"] == "8443"
    assert service["spec"]["ports"] == [{"name": "status", "port": 8443, "targetPort": "status", "protocol": "TCP"}]
    assert {"name": "status", "containerPort": 8443, "protocol": "TCP"} in pod["containers"][0]["ports"]
    (secret,) = find(default_objects, "Secret", "-operator-status")
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert set(data) == {"tls.crt", "tls.key", "ca.crt", "key"} and len(data["key"]) >= 16
    cert, ca = x509.load_pem_x509_certificate(data["tls.crt"]), x509.load_pem_x509_certificate(data["ca.crt"])
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)
    assert f"{name}.{ns}.svc" in names
    (volume,) = [v for v in pod["volumes"] if v["name"] == "status"]
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "status"]
    assert flags["--status-tls-dir"] == mount["mountPath"] and flags["--status-key-file"] == mount["mountPath"] + "/key"


def test_an_existing_secret_is_used_and_port_0_turns_it_all_off(helm_bin) -> None:
    objects = render(CHART, set_values=["operator.status.existingSecret=my-status"], include_crds=False)
    assert not find(objects, "Secret", "-operator-status") and find(objects, "Service", "-operator-status")
    _, pod = _operator(objects)
    assert [v["secret"]["secretName"] for v in pod["volumes"] if v["name"] == "status"] == ["my-status"]

    off = render(CHART, set_values=["operator.status.port=0"], include_crds=False)
    flags, pod = _operator(off)
    assert flags["--status-port"] == "0" and "--status-url" not in flags
    assert not find(off, "Service", "-operator-status") and not find(off, "Secret", "-operator-status")
    assert all(v["name"] != "status" for v in pod["volumes"])
    (policy,) = [p for p in find(off, "NetworkPolicy") if p["metadata"]["name"].endswith("-operator")]
    assert len(policy["spec"]["ingress"]) == 1  # Prometheus on the metrics port only


def test_more_names_and_addresses_go_into_the_certificate_the_chart_makes(helm_bin) -> None:
    objects = render(CHART, set_values=["operator.status.certHosts={127.0.0.1,status.example.com,fd00::1}"],
                     include_crds=False)
    (secret,) = find(objects, "Secret", "-operator-status")
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "status.example.com" in names.get_values_for_type(x509.DNSName)
    assert {str(ip) for ip in names.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "fd00::1"}
