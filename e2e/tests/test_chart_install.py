"""Lane `chart`: offpeak as a cluster operator installs it from charts/offpeak, and as its users meet it.

The shared cluster runs offpeak's predictor, extender, evictor and operator as the chart renders them
(`offpeak_e2e.chartrun`, docs/e2e.md): each process has its Deployment's arguments, environment and mounted
Secret, and a token of its own ServiceAccount bound by the chart's RBAC; the chart's aggregated user roles are
installed with them. On that cluster:

* the README's TrainingJob (examples/trainingjobs/resnet50-torchvision.yaml, confined to the lane), submitted by a
  user bound only to the namespace's `edit` role, is extracted (the e2e values extract in the operator, which has
  torch: `analysis.extractIn: operator`), predicted and run to Succeeded; that user cannot write its status, and a
  `view` user can read it but not create one;
* a release of the previous chart (0.1.0, from git history) with a TrainingJob running is upgraded to this chart
  as docs/helm.md says (`--reset-then-reuse-values`; the shared CRDs, which belong to no release, are left alone):
  the job's pods keep running, the upgraded release's operator takes the job over and it ends Succeeded. Its
  operator runs as that release renders it (old, then new) in an `own-` namespace the cluster's operator leaves
  alone. With the chart's default `analysis.extractIn: pod`, a torchvision model gets an analysis pod running the
  extract image, which never ends under kwok, so the job falls back to its estimate after the deadline;
* TrainingJobs queued in Kueue (`kueue.x-k8s.io/queue-name`) start only within their ClusterQueue's quota and once
  offpeak's admission check finds a window: the lane's GPUs are first taken by online work.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from offpeak_core.timeparse import parse_timestamp
from offpeak_e2e import chartrun
from offpeak_e2e.controlplane import repo_root, wait_started
from offpeak_e2e.harness import E2ECluster, trainingjob_manifest
from offpeak_e2e.lanes import A100, CHART, H100, ONLINE_GPUS
from support.tools import ToolMissing, find_helm

REPO = repo_root()
README_JOB = REPO / "examples" / "trainingjobs" / "resnet50-torchvision.yaml"
# The last commit with chart 0.1.0, the previous release (the next one, 01f7f5a, made it 0.2.0).
PREVIOUS_CHART = "7690f6893c22b37de663cb12f9c8d24ec09459be"


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def _training_pods(c: E2ECluster, ns: str, job: str) -> list[dict[str, Any]]:
    return c.pods(ns, f"offpeak.io/trainingjob={job},offpeak.io/workload=offline")


def _helm(c: E2ECluster, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    try:
        helm = find_helm()
    except ToolMissing as e:
        pytest.fail(str(e), pytrace=False)
    return subprocess.run([str(helm), "--kubeconfig", str(c.kubeconfig), *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_offpeak_runs_as_the_chart_renders_it_under_its_own_service_accounts(e2e_cluster: E2ECluster) -> None:
    """Each service's process has the chart's flags and environment and nothing of the test's, and talks to the
    API server as its ServiceAccount (so the chart's RBAC is what it may do)."""
    c = e2e_cluster
    for component in chartrun.COMPONENTS:
        proc = c.cluster.sup.get(component)
        assert proc is not None, component
        environ = dict(item.split("=", 1) for item in
                       Path(f"/proc/{proc.pid}/environ").read_bytes().decode().split("\0") if "=" in item)
        assert environ["POD_NAMESPACE"] == chartrun.NAMESPACE and environ["HOME"].endswith(f"/{component}/tmp")
        assert not {k for k in environ if k.startswith("PYTEST") or k == "OFFPEAK_PORT_BAND"}, environ
        kubeconfig = environ.get("KUBECONFIG")
        if component == "predictor":
            assert kubeconfig is None  # automountServiceAccountToken: false
            continue
        who = json.loads(c.kubectl("--kubeconfig", kubeconfig, "auth", "whoami", "-o", "json").stdout)
        assert who["status"]["userInfo"]["username"] == f"system:serviceaccount:{chartrun.NAMESPACE}:" \
                                                        f"offpeak-{component}", who
        denied = c.kubectl("--kubeconfig", kubeconfig, "get", "secrets", "-n", chartrun.NAMESPACE, check=False)
        assert denied.returncode != 0 and "forbidden" in denied.stderr, denied.stderr
    cmdline = Path(f"/proc/{c.cluster.sup.get('extender').pid}/cmdline").read_bytes().decode().split("\0")
    assert "--season-seconds=240" in cmdline and "--kueue-admission-check=offpeak.io/window-fit" in cmdline


def _readme_job() -> dict[str, Any]:
    job = yaml.safe_load(README_JOB.read_text())
    spec = job["spec"]
    assert A100 in spec["gpuTypes"]  # the lane has one; the others stay as the README has them
    spec["nodeSelector"] = dict(CHART.node_selector)
    spec["podAnnotations"] = {"offpeak.io/sim-runtime": "10s"}  # how long kwok "trains"
    return job


def test_the_readme_trainingjob_of_an_edit_user_is_extracted_predicted_and_succeeds(e2e_cluster: E2ECluster,
                                                                                    e2e_namespace: str) -> None:
    c, ns = e2e_cluster, e2e_namespace
    c.kubectl("-n", ns, "create", "rolebinding", "alice-edit", "--clusterrole=edit", "--user=alice")
    c.kubectl("-n", ns, "create", "rolebinding", "bob-view", "--clusterrole=view", "--user=bob")
    job = _readme_job()
    name = job["metadata"]["name"]
    refused = c.kubectl("--as=bob", "-n", ns, "create", "-f", "-", stdin=json.dumps(job), check=False)
    assert refused.returncode != 0 and "forbidden" in refused.stderr, refused.stderr
    t0 = time.monotonic()
    c.kubectl("--as=alice", "-n", ns, "create", "-f", "-", stdin=json.dumps(job))
    seen = c.kubectl("--as=bob", "-n", ns, "get", "trainingjob", name, "-o", "json")
    assert json.loads(seen.stdout)["spec"]["modelSource"] == {"torchvision": "resnet50"}
    forged = c.kubectl("--as=alice", "-n", ns, "patch", "trainingjob", name, "--subresource=status", "--type=merge",
                       "-p", '{"status": {"phase": "Succeeded"}}', check=False)
    assert forged.returncode != 0 and "forbidden" in forged.stderr, forged.stderr

    done = c.wait_phase(ns, name, ["Succeeded", "Failed"], timeout=420)
    print(f"[e2e] README job submitted -> {done['status']['phase']}: {time.monotonic() - t0:.0f}s", flush=True)
    status = done["status"]
    assert status["phase"] == "Succeeded", status
    conditions = _conditions(done)
    assert conditions["GraphReady"]["status"] == "True", conditions["GraphReady"]
    assert status["graph"]["hash"] and status["prediction"]["source"] == "predictor", status
    assert {g["gpuType"] for g in status["prediction"]["gpus"]} >= {A100}
    (pod,) = _training_pods(c, ns, name)
    assert pod["spec"]["nodeName"] == CHART.node_of_type(A100), pod["spec"].get("nodeName")
    assert status.get("actualSeconds", 0) > 0 and status.get("attempts") == 1, status


# -- upgrade from the previous chart ------------------------------------------------------------------------------
def _previous_chart(dest: Path) -> Path:
    """charts/offpeak as it was at the previous release, from git history."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", PREVIOUS_CHART, "charts/offpeak"],
                             capture_output=True, timeout=60, check=False)
    assert archive.returncode == 0, (f"git history lacks {PREVIOUS_CHART} (chart 0.1.0): "
                                     f"{archive.stderr.decode(errors='replace')}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True, timeout=60)
    chart = dest / "charts" / "offpeak"
    assert yaml.safe_load((chart / "Chart.yaml").read_text())["version"] == "0.1.0"
    return chart


class ReleaseOperator:
    """The operator of a Helm release, run as that release renders it (`helm get manifest`), in this process's
    supervisor (the cluster stops it if the test cannot)."""

    def __init__(self, c: E2ECluster, *, release: str, ns: str, extra: list[dict[str, Any]], root: Path) -> None:
        self.c, self.release, self.ns, self.extra, self.root = c, release, ns, extra, root
        self.name = f"chart-{ns}-operator"

    def start(self, label: str) -> list[str]:
        from offpeak_e2e import procs  # noqa: PLC0415
        from offpeak_e2e.cluster import offpeak_argv  # noqa: PLC0415

        manifest = _helm(self.c, "get", "manifest", self.release, "-n", self.ns)
        assert manifest.returncode == 0, manifest.stderr
        objects = [*chartrun.parse(manifest.stdout), *self.extra]
        ports = {key: procs.free_port() for key in chartrun.declared_ports(objects, ["operator"])}
        spec = chartrun.process_spec(objects, "operator", ports=ports, volume_root=self.root / label)
        env = chartrun.materialise(spec, admin_kubeconfig=self.c.kubeconfig, server=self.c.state.apiserver,
                                   ca_file=Path(self.c.state.run_dir) / "pki" / "ca.crt",
                                   kubeconfig_path=self.root / label / "kubeconfig")
        sup = self.c.cluster.sup
        sup.start(self.name, [*offpeak_argv(), *spec.argv], wrapper=chartrun.clean_env_wrapper(env))
        wait_started(sup, self.name, f"the {label} release's operator", lambda: _ok(spec.ready_url), timeout=90)
        return list(spec.argv)

    def stop(self) -> None:
        self.c.cluster.sup.stop(self.name)


def _ok(url: str) -> bool:
    from offpeak_e2e import kube  # noqa: PLC0415

    return kube.http_ok(url)


def _shared_token_secret(c: E2ECluster, name: str) -> dict[str, Any]:
    """The shared predictor's token, as a Secret of the release (predictor.auth.existingSecret)."""
    shared = c.get("secret", "-n", chartrun.NAMESPACE, "offpeak-predictor-token")
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "Opaque",
            "data": {"token": shared["data"]["token"]}}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_upgrade_from_the_previous_chart_keeps_a_running_job(e2e_cluster: E2ECluster, tmp_path: Path) -> None:
    c = e2e_cluster
    ns = c.new_namespace("own-upg")  # the cluster's operator leaves own-* to this test's
    release = "upg"
    try:
        _upgrade_scenario(c, ns, release, tmp_path)
    finally:
        c.cluster.sup.stop(f"chart-{ns}-operator")
        _helm(c, "uninstall", release, "-n", ns, "--wait", "--timeout", "2m")
        c.delete_namespace(ns)


def _upgrade_scenario(c: E2ECluster, ns: str, release: str, tmp: Path) -> None:
    secret = _shared_token_secret(c, "upg-predictor-token")
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(secret))
    # a release that watches its own namespace, posts to the cluster's predictor, and runs its agent on the lane only
    values = {"prometheusURL": c.state.urls["prometheus"],
              "operator": {"watchNamespace": ns, "predictorURL": c.state.urls["predictor"],
                           "analysisTimeoutSeconds": 15},
              "predictor": {"enabled": False, "auth": {"existingSecret": secret["metadata"]["name"]}},
              "agent": {"nodeSelector": dict(CHART.node_selector)}}
    values_file = tmp / "values.json"
    values_file.write_text(json.dumps(values))
    previous = _previous_chart(tmp)
    installed = _helm(c, "install", release, str(previous), "-n", ns, "-f", str(values_file), "--skip-crds",
                      "--wait", "--timeout", "3m")
    assert installed.returncode == 0, installed.stderr
    crd_before = c.get("crd", "trainingjobs.offpeak.io")["metadata"]
    operator = ReleaseOperator(c, release=release, ns=ns, extra=[{**secret, "metadata": {
        "name": secret["metadata"]["name"], "namespace": ns}}], root=tmp / "operator")
    old_args = operator.start("old")
    assert "--resync-seconds" not in " ".join(old_args)  # 0.1.0's command line

    job = trainingjob_manifest("steady", sim_seconds=60, estimated_seconds=70, gpu_types=(A100, H100), lane=CHART)
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(job))
    c.wait_phase(ns, "steady", ["Running"], timeout=120)
    running = {p["metadata"]["uid"] for p in _training_pods(c, ns, "steady")}
    assert running, "no training pod"
    t0 = time.monotonic()

    # --reuse-values keeps 0.1.0's defaults too, so 0.2.0's new values are missing (docs/helm.md, "Upgrade")
    reused = _helm(c, "upgrade", release, str(chartrun.CHART_DIR), "-n", ns, "--reuse-values")
    assert reused.returncode != 0 and "tagByMinor" in reused.stderr, reused.stderr
    upgraded = _helm(c, "upgrade", release, str(chartrun.CHART_DIR), "-n", ns, "--reset-then-reuse-values",
                     "--wait", "--timeout", "3m")
    assert upgraded.returncode == 0, upgraded.stderr
    print(f"[e2e] helm upgrade 0.1.0 -> this chart: {time.monotonic() - t0:.0f}s", flush=True)
    # the shared CRDs belong to no release: left as they are, and the notes say so
    assert "WARNING: CRD trainingjobs.offpeak.io exists but belongs to no release" in upgraded.stdout
    crd_after = c.get("crd", "trainingjobs.offpeak.io")["metadata"]
    assert crd_after["generation"] == crd_before["generation"]
    assert "meta.helm.sh/release-name" not in (crd_after.get("annotations") or {})
    (deployment,) = [d for d in c.get("deployments", "-n", ns)["items"]
                     if d["metadata"]["name"] == f"{release}-offpeak-operator"]
    assert "--resync-seconds=5" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {p["metadata"]["uid"] for p in _training_pods(c, ns, "steady")} == running
    assert c.phase(ns, "steady") == "Running"

    operator.stop()
    new_args = operator.start("new")
    extract = next(a.split("=", 1)[1] for a in new_args if a.startswith("--extract-image="))
    # the chart's default extraction: an analysis pod running the extract image
    graphless = trainingjob_manifest("graphless", sim_seconds=3, estimated_seconds=30, torchvision="resnet18",
                                     gpu_types=(A100, H100), lane=CHART)
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(graphless))

    # looked for at once: the operator deletes it at its deadline (analysisTimeoutSeconds)
    c.wait_for("the analysis pod", lambda: bool(c.pods(ns, "offpeak.io/role=analysis")), timeout=60)
    (analysis,) = c.pods(ns, "offpeak.io/role=analysis")
    assert [x["image"] for x in analysis["spec"]["initContainers"]] == [extract], analysis["spec"]
    assert extract == "ghcr.io/offpeak/offpeak:0.1.0-extract"  # analysis.image's default

    done = c.wait_phase(ns, "steady", ["Succeeded", "Failed"], timeout=180)
    print(f"[e2e] the upgraded release's operator finished the job {time.monotonic() - t0:.0f}s after the upgrade "
          "began", flush=True)
    assert done["status"]["phase"] == "Succeeded" and done["status"].get("attempts") == 1, done["status"]
    assert {p["metadata"]["uid"] for p in _training_pods(c, ns, "steady")} == running  # the same pods ran it out
    fallback = c.wait_phase(ns, "graphless", ["Succeeded", "Failed"], timeout=120)
    graph = _conditions(fallback)["GraphReady"]
    assert graph["status"] == "False" and graph["reason"] == "AnalysisTimeout", graph
    assert fallback["status"]["phase"] == "Succeeded", fallback["status"]
    assert fallback["status"]["prediction"]["source"] == "user-estimate"


# -- Kueue ----------------------------------------------------------------------------------------------------------
FLAVOR, CLUSTER_QUEUE, QUEUE, CHECK = "chart-gpus", "chart-offline", "chart-team", "chart-window"


def _kueue_objects(ns: str) -> list[dict[str, Any]]:
    quota = [{"name": r, "nominalQuota": q} for r, q in (("cpu", "100"), ("memory", "1Ti"), ("nvidia.com/gpu", "1"))]
    api = "kueue.x-k8s.io/v1beta1"
    return [
        {"apiVersion": api, "kind": "AdmissionCheck", "metadata": {"name": CHECK},
         "spec": {"controllerName": "offpeak.io/window-fit"}},
        {"apiVersion": api, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR},
         "spec": {"nodeLabels": dict(CHART.node_selector)}},
        {"apiVersion": api, "kind": "ClusterQueue", "metadata": {"name": CLUSTER_QUEUE},
         "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                  "admissionChecks": [CHECK], "resourceGroups": [
                      {"coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                       "flavors": [{"name": FLAVOR, "resources": quota}]}]}},
        {"apiVersion": api, "kind": "LocalQueue", "metadata": {"name": QUEUE, "namespace": ns},
         "spec": {"clusterQueue": CLUSTER_QUEUE}},
    ]


def _workload(c: E2ECluster, ns: str, job: str) -> dict[str, Any] | None:
    items = c.get("workloads.kueue.x-k8s.io", "-n", ns, "-l", f"offpeak.io/trainingjob={job}")["items"]
    return items[0] if items else None


def _check(workload: dict[str, Any] | None) -> dict[str, Any]:
    for check in ((workload or {}).get("status") or {}).get("admissionChecks") or ():
        if check["name"] == CHECK:
            return dict(check)
    return {}


def _condition_time(workload: dict[str, Any] | None, kind: str) -> float | None:
    """When a Workload's condition last turned True (whole seconds, the API server's clock)."""
    cond = _conditions(workload or {}).get(kind) or {}
    return parse_timestamp(cond.get("lastTransitionTime")) if cond.get("status") == "True" else None


def _started(c: E2ECluster, ns: str, job: str) -> float:
    (pod,) = _training_pods(c, ns, job)
    assert pod["spec"]["nodeName"] in CHART.nodes, pod["spec"].get("nodeName")
    assert pod["spec"]["nodeSelector"][next(iter(CHART.node_selector))] == CHART.name  # the flavor's node labels
    return float(parse_timestamp(pod["status"]["startTime"]))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kueue_queued_trainingjobs_start_within_quota_and_a_window(e2e_cluster: E2ECluster,
                                                                   e2e_namespace: str) -> None:
    c, ns = e2e_cluster, e2e_namespace
    try:
        _kueue_scenario(c, ns)
    finally:
        for node in CHART.nodes:
            c.scale_online(node, 0)
        for kind, name in (("clusterqueue", CLUSTER_QUEUE), ("resourceflavor", FLAVOR), ("admissioncheck", CHECK)):
            c.kubectl("delete", f"{kind}.kueue.x-k8s.io", name, "--wait=false", check=False)


def _kueue_scenario(c: E2ECluster, ns: str) -> None:
    c.apply(_kueue_objects(ns))
    c.wait_for("offpeak to mark its AdmissionCheck Active", lambda: any(
        cond["type"] == "Active" and cond["status"] == "True"
        for cond in (c.get("admissionchecks.kueue.x-k8s.io", CHECK).get("status") or {}).get("conditions") or ()),
        timeout=30)
    for node in CHART.nodes:  # online work takes every GPU of the lane: no window now
        c.scale_online(node, ONLINE_GPUS)
    c.wait_for("the lane full of online work", lambda: all(c.running_online(n) == ONLINE_GPUS for n in CHART.nodes),
               timeout=90)

    def queued(name: str) -> dict[str, Any]:
        job = trainingjob_manifest(name, sim_seconds=8, estimated_seconds=20, gpu_types=(A100, H100))
        job["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": QUEUE}  # no node selector: the flavor places it
        return job

    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(queued("first")))
    c.wait_for("the first job's Workload to reserve the quota", lambda: _condition_time(
        _workload(c, ns, "first"), "QuotaReserved") is not None, timeout=60)
    c.kubectl("-n", ns, "apply", "-f", "-", stdin=json.dumps(queued("second")))
    c.wait_for("offpeak's check Pending for the first", lambda: _check(_workload(c, ns, "first")).get("state")
               == "Pending" and bool(_check(_workload(c, ns, "first")).get("message")), timeout=60)
    c.wait_for("the second's Workload", lambda: _workload(c, ns, "second") is not None, timeout=60)
    time.sleep(3)  # a few of Kueue's and the operator's rounds: neither job may start
    pending = _check(_workload(c, ns, "first"))
    assert pending["message"].startswith("no forecast idle window fits now"), pending
    first = c.trainingjob(ns, "first")["status"]
    assert first["phase"] == "Predicted" and first.get("reason") == "QueuedInKueue", first
    assert "waiting for its admission checks" in _conditions({"status": first})["Suspended"]["message"], first
    second = c.trainingjob(ns, "second")["status"]
    assert "waiting for quota" in _conditions({"status": second})["Suspended"]["message"], second
    assert not _training_pods(c, ns, "first") and not _training_pods(c, ns, "second")

    released = time.time()
    for node in CHART.nodes:  # the window opens
        c.scale_online(node, 0)
    c.wait_phase(ns, "first", ["Running", "Succeeded"], timeout=120)
    assert _started(c, ns, "first") >= int(released), "started before the window opened"
    assert _check(_workload(c, ns, "first"))["state"] == "Ready"
    assert not _training_pods(c, ns, "second")  # one GPU of quota, held by the first
    done = c.wait_phase(ns, "first", ["Succeeded", "Failed"], timeout=120)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    c.wait_for("the first's Workload Finished", lambda: _condition_time(_workload(c, ns, "first"), "Finished")
               is not None, timeout=60)
    finished = _condition_time(_workload(c, ns, "first"), "Finished")
    last = c.wait_phase(ns, "second", ["Succeeded", "Failed"], timeout=180)
    assert last["status"]["phase"] == "Succeeded", last["status"]
    reserved = _condition_time(_workload(c, ns, "second"), "QuotaReserved")
    assert finished is not None and reserved is not None and reserved >= finished, (finished, reserved)
    assert _started(c, ns, "second") >= finished, "the second started before the first gave its quota back"
    print(f"[e2e] Kueue: first ran after the window opened, second after the first's quota came back "
          f"({time.time() - released:.0f}s)", flush=True)
