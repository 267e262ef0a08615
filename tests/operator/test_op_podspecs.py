"""Builders produce objects the Kubernetes schema accepts and that carry offpeak's contract fields."""

from __future__ import annotations

import base64
import json

import kubernetes_validate
import pytest
from offpeak_graph.schema import ModelGraph
from optestkit import job_body

from offpeak_operator import podspecs
from offpeak_operator.graphstore import encode_graph
from offpeak_operator.jobspec import parse_spec
from offpeak_operator.livereports import pod_parts
from offpeak_operator.settings import AnalysisSettings

K8S = "1.32"
REMAINING = {"A100-SXM4-40GB": {"p50": 100.0, "p90": 120.0}, "T4": {"p50": 400.0, "p90": 500.0}}


def valid(obj: dict) -> None:
    kubernetes_validate.validate(obj, K8S, strict=True)


def training(**spec) -> dict:
    body = job_body(**spec)
    return podspecs.training_pod(body, parse_spec(body["spec"]), attempt=2, worker=1,
                                 gpu_types=("A100-SXM4-40GB", "T4"), remaining=REMAINING, completed_steps=250)


def test_training_pod_carries_the_contract() -> None:
    pod = training(checkpointing=True, gpusPerWorker=2, podAnnotations={"offpeak.io/sim-runtime": "30s"},
                   resources={"requests": {"cpu": "2"}, "limits": {"memory": "8Gi"}}, command=["python", "t.py"])
    valid(pod)
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"] == "train-1-a2-w1"
    assert meta["labels"]["offpeak.io/workload"] == "offline" and meta["labels"]["offpeak.io/trainingjob"] == "train-1"
    assert json.loads(meta["annotations"]["offpeak.io/predicted-job-seconds"]) == REMAINING
    assert meta["annotations"]["offpeak.io/checkpointing"] == "true"
    assert meta["annotations"]["offpeak.io/sim-runtime"] == "30s"  # user's podAnnotations copied
    assert meta["ownerReferences"][0] == {"apiVersion": "offpeak.io/v1alpha1", "kind": "TrainingJob",
                                          "name": "train-1", "uid": "uid-123", "controller": True,
                                          "blockOwnerDeletion": True}
    assert spec["schedulerName"] == "offpeak-scheduler" and spec["restartPolicy"] == "Never"
    c = spec["containers"][0]
    assert c["resources"]["requests"] == {"cpu": "2", "nvidia.com/gpu": "2"}
    assert c["resources"]["limits"] == {"memory": "8Gi", "nvidia.com/gpu": "2"}
    assert {"name": "OFFPEAK_COMPLETED_STEPS", "value": "250"} in c["env"]
    # offpeak.progress writes where the kubelet picks up the termination message the operator reads back
    assert {"name": "OFFPEAK_PROGRESS_FILE", "value": "/dev/termination-log"} in c["env"]
    assert c["terminationMessagePath"] == "/dev/termination-log"
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    override, gfd = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]  # ORed: the override label, or GPU feature discovery's product on an unlabelled node
    assert override["matchExpressions"] == [{"key": "offpeak.io/gpu-type", "operator": "In",
                                             "values": ["A100-SXM4-40GB", "T4"]}]
    assert gfd["matchExpressions"] == [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-40GB", "Tesla-T4"]},
        {"key": "offpeak.io/gpu-type", "operator": "DoesNotExist"}]


def test_training_pod_gets_no_api_token_but_the_status_channel() -> None:
    body = job_body()
    status = pod_parts(url="https://op:8443/p", token="tok", ca_pem="PEM")
    pod = podspecs.training_pod(body, parse_spec(body["spec"]), attempt=2, worker=0, gpu_types=("T4",),
                                remaining=REMAINING, completed_steps=0, status=status)
    valid(pod)
    spec, (train,) = pod["spec"], pod["spec"]["containers"]
    assert spec["automountServiceAccountToken"] is False
    assert status.volume in spec["volumes"] and status.mount in train["volumeMounts"]
    assert {e["name"]: e["value"] for e in train["env"]}["KUBEFLOW_TRAINER_SERVER_URL"] == "https://op:8443/p"
    assert pod["metadata"]["annotations"]["offpeak.io/status-token"] == "tok"
    plain = training()  # without the channel: no status parts, still no token
    assert plain["spec"]["automountServiceAccountToken"] is False and "volumes" not in plain["spec"]


def test_a_pod_that_names_its_service_account_keeps_its_token() -> None:
    assert "automountServiceAccountToken" not in training(serviceAccountName="trainer")["spec"]
    template = {"spec": {"automountServiceAccountToken": True, "containers": [{"name": "train"}]}}
    assert training(template=template)["spec"]["automountServiceAccountToken"] is True


def test_user_tolerations_and_selectors_are_added() -> None:
    pod = training(tolerations=[{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
                   nodeSelector={"pool": "gpu"}, serviceAccountName="trainer", priorityClassName="low")
    valid(pod)
    assert {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]
    assert pod["spec"]["nodeSelector"] == {"pool": "gpu"} and pod["spec"]["serviceAccountName"] == "trainer"


def test_analysis_pod_runs_extractor_in_users_image_cpu_only() -> None:
    body = job_body(modelSource={"entrypoint": "pkg.model:build"}, seqLen=128, precision="bf16",
                    env=[{"name": "HF_HUB_OFFLINE", "value": "1"}])
    settings = AnalysisSettings(image="offpeak:test", timeout_seconds=120)
    pod = podspecs.analysis_pod(body, parse_spec(body["spec"]), settings)
    valid(pod)
    spec = pod["spec"]
    assert pod["metadata"]["name"] == "train-1-analysis" and spec["activeDeadlineSeconds"] == 120
    assert spec["automountServiceAccountToken"] is False and spec["restartPolicy"] == "Never"
    bundle, extract = spec["initContainers"]
    assert bundle["image"] == "offpeak:test" and extract["image"] == "example/train:1"
    assert extract["command"][:3] == ["python", "/offpeak/offpeak.pyz", "extract"]
    args = extract["command"][3:]
    assert args[args.index("--entrypoint") + 1] == "pkg.model:build"
    assert args[args.index("--seq-len") + 1] == "128" and args[args.index("--out") + 1] == "/graph/graph.json.gz"
    assert {"name": "CUDA_VISIBLE_DEVICES", "value": ""} in extract["env"]
    assert extract["terminationMessagePolicy"] == "FallbackToLogsOnError"  # its one-line error reaches the status
    assert "nvidia.com/gpu" not in json.dumps(spec)
    assert extract["resources"]["limits"] == {"cpu": "2", "memory": "6Gi"}
    assert spec["containers"][0]["command"][:3] == ["python", "-m", "offpeak_operator.emit"]


RESTRICTED = {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


@pytest.mark.parametrize("source,flag,value", [
    ({"torchvision": "resnet50"}, "--torchvision", "resnet50"),
    ({"hfConfig": "gpt2-large"}, "--hf-config", "gpt2-large"),  # a built-in preset, by name
    ({"hfConfigMap": {"name": "my-llm", "key": "cfg.json"}}, "--hf-config", "/hf/my-llm/config.json"),
])
def test_builtin_sources_are_extracted_in_the_extract_image_by_a_restricted_pod(source, flag, value) -> None:
    body = job_body(modelSource=source, seqLen=128, env=[{"name": "SECRET", "value": "x"}],
                    imagePullSecrets=[{"name": "team-registry"}])
    settings = AnalysisSettings(image="offpeak:1", extract_image="offpeak:1-extract", timeout_seconds=120)
    pod = podspecs.analysis_pod(body, parse_spec(body["spec"]), settings)
    valid(pod)
    spec = pod["spec"]
    assert pod["metadata"]["name"] == "train-1-analysis" and spec["activeDeadlineSeconds"] == 120
    (extract,) = spec["initContainers"]  # no bundle step: the extract image has offpeak itself
    (emit,) = spec["containers"]
    assert extract["name"] == "extract" and extract["image"] == emit["image"] == "offpeak:1-extract"
    assert extract["command"][:3] == ["offpeak", "extract", flag] and extract["command"][3] == value
    args = extract["command"]
    assert args[args.index("--seq-len") + 1] == "128" and args[args.index("--out") + 1] == "/graph/graph.json.gz"
    assert extract["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert extract["workingDir"] == "/tmp" and {"name": "HOME", "value": "/tmp"} in extract["env"]
    assert {"name": "CUDA_VISIBLE_DEVICES", "value": ""} in extract["env"]
    assert {"name": "SECRET", "value": "x"} not in extract["env"]  # the user's environment is for the user's image
    assert emit["command"][:3] == ["python", "-m", "offpeak_operator.emit"]
    # nothing of the user's runs in it, so it passes PodSecurity "restricted" in the job's namespace
    assert spec["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert extract["securityContext"] == emit["securityContext"] == RESTRICTED
    assert "imagePullSecrets" not in spec and spec["automountServiceAccountToken"] is False
    assert "nvidia.com/gpu" not in json.dumps(spec)
    mounts = {m["name"]: m["mountPath"] for m in extract["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert mounts["tmp"] == "/tmp" and mounts["graph"] == "/graph" and set(mounts) <= set(volumes)
    if "hfConfigMap" in source:  # the job's own ConfigMap, at a folder that names the model
        assert mounts["hf-config"] == "/hf"
        assert volumes["hf-config"]["configMap"] == {"name": "my-llm",
                                                     "items": [{"key": "cfg.json", "path": "my-llm/config.json"}]}
    else:
        assert "hf-config" not in volumes


def test_graph_configmap_fits_and_round_trips(graph: ModelGraph) -> None:
    enc = encode_graph(graph)
    cm = podspecs.graph_configmap(job_body(), enc, source="torchvision")
    valid(cm)
    assert cm["metadata"]["name"] == "train-1-graph"
    assert cm["metadata"]["annotations"]["offpeak.io/graph-hash"] == graph.content_hash()
    assert base64.b64decode(cm["binaryData"]["graph.json.gz"]) == enc.data
    assert len(json.dumps(cm)) < 1024 * 1024


@pytest.mark.parametrize("source,flag", [({"torchvision": "resnet18"}, "--torchvision"),
                                         ({"hfConfig": "gpt2"}, "--hf-config")])
def test_extract_args_per_source(source: dict, flag: str) -> None:
    args = podspecs.extract_args(parse_spec(job_body(modelSource=source)["spec"]), out="/tmp/g.json.gz")
    assert args[:2] == ["extract", flag] and "--batch-size" in args


def test_extract_args_carry_the_input_shape() -> None:
    spec = parse_spec(job_body(modelSource={"entrypoint": "m:f"}, inputShape=[3, 64, 64])["spec"])
    args = podspecs.extract_args(spec, out="/g")
    assert args[args.index("--input-shape") + 1] == "3,64,64"
