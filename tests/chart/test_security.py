"""Pod security, resources, probes and least-privilege RBAC of everything the chart runs."""

from __future__ import annotations

from typing import Any

from support.chart import find, pod_specs, render, scheduler_config

from .conftest import CHART

import yaml

WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "*"}


def test_pods_run_non_root_with_seccomp(objects: list[dict[str, Any]]) -> None:
    specs = dict(pod_specs(objects))
    collect = sum("-collect-" in name for name in specs)  # the custom values add a collect Job per GPU type
    assert len(specs) == 6 + collect  # operator, predictor, scheduler, extender, evictor, agent (+ collect Jobs)
    for name, spec in specs.items():
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True, name
        assert pod["runAsUser"] != 0, name
        assert pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert not spec.get("hostNetwork"), name
        assert not spec.get("hostIPC"), name


def test_containers_are_locked_down_and_sized(objects: list[dict[str, Any]]) -> None:
    for name, spec in pod_specs(objects):
        for container in spec.get("initContainers", []) + spec["containers"]:
            where = f"{name}/{container['name']}"
            ctx = container["securityContext"]
            assert ctx["readOnlyRootFilesystem"] is True, where
            assert ctx["allowPrivilegeEscalation"] is False, where
            assert ctx.get("privileged", False) is False, where
            assert ctx["capabilities"]["drop"] == ["ALL"], where
            assert "add" not in ctx["capabilities"], where
            assert {"cpu", "memory"} <= container["resources"]["requests"].keys(), where
            assert {"cpu", "memory"} <= container["resources"]["limits"].keys(), where
            if not name.startswith("Job/"):  # a Job runs to completion: nothing to probe
                assert "livenessProbe" in container and "readinessProbe" in container, where
            assert not container["image"].endswith(":latest"), where


def test_no_host_paths_and_only_the_agent_shares_host_pid(default_objects: list[dict[str, Any]]) -> None:
    for name, spec in pod_specs(default_objects):
        assert all("hostPath" not in v for v in spec.get("volumes", [])), name
        assert spec.get("hostPID", False) == name.startswith("DaemonSet/"), name


def test_agent_gets_gpus_through_the_nvidia_runtime_not_a_gpu_request(custom_objects) -> None:
    (daemonset,) = find(custom_objects, "DaemonSet")
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["nodeSelector"] == {"offpeak.io/gpu": "true"}
    assert spec["hostPID"] is False  # values-custom turns it off
    (container,) = spec["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert "nvidia.com/gpu" not in container["resources"]["limits"]


def _rules(objects: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    (role,) = [o for o in objects if o["kind"] in ("ClusterRole", "Role") and o["metadata"]["name"] == name]
    return role["rules"]


def _grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def test_no_wildcards_and_no_secrets_anywhere(objects: list[dict[str, Any]]) -> None:
    for role in (o for o in objects if o["kind"] in ("ClusterRole", "Role")):
        for group, resource, verb in _grants(role["rules"]):
            assert "*" not in (group, resource, verb), role["metadata"]["name"]
            assert resource != "secrets", role["metadata"]["name"]


def test_evictor_rbac_is_exactly_what_it_needs(default_objects) -> None:
    # extender/offpeak_extender/kube.py (Informer: list+watch nodes and pods) and evictor.py (KubeEvictionActions)
    assert _grants(_rules(default_objects, "offpeak-evictor")) == {
        ("", "pods", "list"), ("", "pods", "watch"), ("", "pods", "patch"),
        ("", "pods/eviction", "create"),
        ("", "nodes", "list"), ("", "nodes", "watch"),
        ("", "events", "create"),
        ("offpeak.io", "trainingjobs", "get"),
    }


def test_agent_rbac_is_only_listing_pods(default_objects) -> None:
    # agent/offpeak_agent/pods.py: list_pod_for_all_namespaces(field_selector=spec.nodeName=...)
    grants = _grants(_rules(default_objects, "offpeak-agent"))
    assert {v for _, _, v in grants} & WRITE_VERBS == set()
    assert grants == {("", "pods", "list")}


# operator/offpeak_operator/kube.py plus kopf's own watches (TrainingJobs, labelled pods) and progress annotations
OPERATOR_NAMESPACED = {
    ("offpeak.io", "trainingjobs", "get"), ("offpeak.io", "trainingjobs", "list"),
    ("offpeak.io", "trainingjobs", "watch"), ("offpeak.io", "trainingjobs", "patch"),
    ("offpeak.io", "trainingjobs/status", "patch"),
    ("", "pods", "list"), ("", "pods", "watch"), ("", "pods", "create"), ("", "pods", "delete"),
    ("", "pods", "patch"),  # a real prediction replaces a fallback in the waiting pods' annotation
    ("", "pods", "get"),  # a labelled Job's analysis pod, read by name (workload_reconciler)
    ("", "pods/log", "get"),
    ("", "configmaps", "get"), ("", "configmaps", "create"),
    ("", "configmaps", "update"),  # a workload analysed again for another entry point replaces its graph
    ("", "services", "create"),  # a multi-worker job's headless rendezvous Service
    ("", "persistentvolumeclaims", "create"),  # spec.checkpoint.claimTemplate
    # opted-in batch/v1 Jobs: watched, their template annotated and unsuspended
    ("batch", "jobs", "get"), ("batch", "jobs", "list"), ("batch", "jobs", "watch"), ("batch", "jobs", "patch"),
    ("", "events", "create"),
}
# nodes get: a running job's GPU type is its node's offpeak.io/gpu-type label; kopf watches CRDs
OPERATOR_CLUSTER = {
    ("", "nodes", "get"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "watch"),
}


def _bound_to(objects: list[dict[str, Any]], role_kind: str, role_name: str, sa: str) -> bool:
    return any(
        b["kind"] in ("ClusterRoleBinding", "RoleBinding") and b["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name}
        and any(s["kind"] == "ServiceAccount" and s["name"] == sa for s in b["subjects"])
        for b in objects
    )


def test_operator_rbac_is_exactly_what_it_calls_cluster_wide(default_objects) -> None:
    assert _grants(_rules(default_objects, "offpeak-operator")) == OPERATOR_NAMESPACED
    assert _grants(_rules(default_objects, "offpeak-operator-cluster")) == OPERATOR_CLUSTER
    assert _bound_to(default_objects, "ClusterRole", "offpeak-operator", "offpeak-operator")
    assert _bound_to(default_objects, "ClusterRole", "offpeak-operator-cluster", "offpeak-operator")


def test_pytorchjobs_add_their_rbac_and_flag_only_when_turned_on(helm_bin) -> None:
    from offpeak.cli import build_parser  # noqa: PLC0415

    objects = render(CHART, set_values=["operator.pytorchJobs=true"], include_crds=False)
    pytorch = {("kubeflow.org", "pytorchjobs", v) for v in ("get", "list", "watch", "patch")}
    assert _grants(_rules(objects, "offpeak-operator")) == OPERATOR_NAMESPACED | pytorch
    (deployment,) = find(objects, "Deployment", "-operator")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert build_parser().parse_args(args).pytorch_jobs is True  # the real CLI reads the flag
    (default,) = find(render(CHART, include_crds=False), "Deployment", "-operator")
    args = default["spec"]["template"]["spec"]["containers"][0]["args"]
    assert build_parser().parse_args(args).pytorch_jobs is False


def test_kueue_adds_its_workload_rbac_and_flag_only_when_turned_on(helm_bin) -> None:
    """A queued TrainingJob's Workload: created and read, its status patched (Finished, quota given back); the
    ResourceFlavors of its admission read (cluster-scoped); its pods annotated when Kueue evicts it (pods patch)."""
    from offpeak.cli import build_parser  # noqa: PLC0415

    objects = render(CHART, set_values=["operator.kueue.enabled=true"], include_crds=False)
    workloads = {("kueue.x-k8s.io", "workloads", "get"), ("kueue.x-k8s.io", "workloads", "create"),
                 ("kueue.x-k8s.io", "workloads/status", "patch")}
    assert _grants(_rules(objects, "offpeak-operator")) == OPERATOR_NAMESPACED | workloads
    assert ("", "pods", "patch") in OPERATOR_NAMESPACED
    assert _grants(_rules(objects, "offpeak-operator-cluster")) == OPERATOR_CLUSTER | {
        ("kueue.x-k8s.io", "resourceflavors", "get")}
    (deployment,) = find(objects, "Deployment", "-operator")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert build_parser().parse_args(args).kueue is True
    (default,) = find(render(CHART, include_crds=False), "Deployment", "-operator")
    assert build_parser().parse_args(default["spec"]["template"]["spec"]["containers"][0]["args"]).kueue is False


def test_operator_rbac_is_namespaced_when_asked_but_still_reads_nodes(custom_objects) -> None:
    (role,) = [o for o in custom_objects if o["kind"] == "Role" and o["metadata"]["name"] == "gpu-harvest-operator"]
    assert role["metadata"]["namespace"] == "ml-team"
    assert _grants(role["rules"]) == OPERATOR_NAMESPACED
    assert not [o for o in custom_objects if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-operator")]
    # a namespaced kopf also lists/watches namespaces (which of its namespaces exist)
    assert _grants(_rules(custom_objects, "gpu-harvest-operator-cluster")) == OPERATOR_CLUSTER | {
        ("", "namespaces", "list"), ("", "namespaces", "watch")}
    assert _bound_to(custom_objects, "ClusterRole", "gpu-harvest-operator-cluster", "gpu-harvest-operator")
    (deployment,) = find(custom_objects, "Deployment", "-operator")
    assert "--namespace=ml-team" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]


def test_scheduler_bindings_and_own_lease(default_objects) -> None:
    bindings = {
        (b["kind"], b["metadata"].get("namespace"), b["roleRef"]["name"])
        for b in default_objects
        if b["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and any(s["name"] == "offpeak-scheduler" for s in b["subjects"])
    }
    assert ("ClusterRoleBinding", None, "system:kube-scheduler") in bindings
    assert ("ClusterRoleBinding", None, "system:volume-scheduler") in bindings
    assert ("RoleBinding", "kube-system", "extension-apiserver-authentication-reader") in bindings
    lease_rules = _rules(default_objects, "offpeak-scheduler-lease")
    named = [r for r in lease_rules if r.get("resourceNames")]
    assert named and named[0]["resourceNames"] == ["offpeak-scheduler"]
    # nothing else: the extender's role is bound to the extender's own ServiceAccount (test_extender_pod.py)
    assert bindings == {
        ("ClusterRoleBinding", None, "system:kube-scheduler"),
        ("ClusterRoleBinding", None, "system:volume-scheduler"),
        ("RoleBinding", "kube-system", "extension-apiserver-authentication-reader"),
        ("RoleBinding", "offpeak-system", "offpeak-scheduler-lease"),
    }


def test_predictor_has_no_api_access(default_objects) -> None:
    (deployment,) = find(default_objects, "Deployment", "-predictor")
    assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert not [o for o in default_objects if o["kind"] in ("ClusterRole", "Role") and "predictor" in o["metadata"]["name"]]


def test_scheduler_config_calls_the_extender_service(objects) -> None:
    config = yaml.safe_load(scheduler_config(objects))
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    (profile,) = config["profiles"]
    (extender,) = config["extenders"]
    # the extender's own Service, in the release namespace (default: offpeak/offpeak-system; custom: gpu-harvest/gpu)
    (service,) = find(objects, "Service", "-extender")
    namespace = service["metadata"]["namespace"]
    assert extender["urlPrefix"] == f"http://{service['metadata']['name']}.{namespace}.svc:8888"
    assert {"name": "http", "port": 8888, "targetPort": "http", "protocol": "TCP"} in service["spec"]["ports"]
    # gangs: every feasible node is offered to the extender, not a sample (docs/extender.md, "Gang placement")
    assert config["percentageOfNodesToScore"] == 100
    assert (extender["filterVerb"], extender["prioritizeVerb"]) == ("filter", "prioritize")
    assert extender["nodeCacheCapable"] is True and extender["ignorable"] is True
    assert extender["managedResources"] == [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]
    assert extender["weight"] > 0
    election = config["leaderElection"]
    assert election["leaderElect"] is True
    assert election["resourceName"] == profile["schedulerName"]  # both "offpeak-scheduler" / "harvest-scheduler"
    assert election["resourceName"] != "kube-scheduler"


def test_scheduler_restarts_when_its_config_changes(helm_bin) -> None:
    from support.chart import chart_dir, render
    from support import REPO

    def checksum(weight: int) -> str:
        (deployment,) = find(
            render(chart_dir(REPO), set_values=[f"scheduler.extender.weight={weight}"], include_crds=False),
            "Deployment",
            "-scheduler",
        )
        return deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    assert checksum(5) != checksum(6)
