"""spec.template, checkpoints and the rendezvous: what the operator makes of a real team's training pod."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from optestkit import job_body

from offpeak_operator import podspecs, podtemplate
from offpeak_operator.jobspec import SpecError, parse_spec, validate

K8S = "1.32"
REMAINING = {"A100-SXM4-40GB": {"p50": 100.0, "p90": 120.0}}
TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "vision"}, "annotations": {"owner": "ada"}},
    "spec": {
        "imagePullSecrets": [{"name": "regcred"}],
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
        "serviceAccountName": "trainer",
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "imagenet"}},
                    {"name": "token", "secret": {"secretName": "hf-token"}}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["batch"]}]}]}}},
        "containers": [
            {"name": "trainer", "image": "example/train:2", "command": ["torchrun", "train.py"],
             "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}],
             "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
             "resources": {"requests": {"cpu": "8", "memory": "32Gi"}}},
        ],
    },
}


def spec_of(**fields: Any):
    body = job_body(**fields)
    body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}  # None: leave the field out
    return body, parse_spec(body["spec"])


def pod_of(body: dict, spec, *, worker: int = 0) -> dict:
    pod = podspecs.training_pod(body, spec, attempt=1, worker=worker, gpu_types=("A100-SXM4-40GB",),
                                remaining=REMAINING, completed_steps=0)
    kubernetes_validate.validate(pod, K8S, strict=True)
    return pod


def env_of(pod: dict, container: int = 0) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][container]["env"]}


def test_a_template_keeps_everything_the_user_wrote_and_adds_the_operators_parts() -> None:
    body, spec = spec_of(image=None, template=TEMPLATE)
    assert validate(spec, job_name="train-1", resolve_gpu=None) == []
    assert spec.image == "example/train:2" and "HF_TOKEN" in {e["name"] for e in spec.env}
    pod = pod_of(body, spec)
    meta, ps = pod["metadata"], pod["spec"]
    assert meta["labels"]["team"] == "vision" and meta["labels"]["offpeak.io/workload"] == "offline"
    assert meta["annotations"]["owner"] == "ada" and "offpeak.io/predicted-job-seconds" in meta["annotations"]
    assert meta["annotations"]["offpeak.io/train-container"] == "trainer"  # the operator reads its report there
    assert ps["imagePullSecrets"] == [{"name": "regcred"}] and ps["securityContext"]["runAsUser"] == 1000
    assert [v["name"] for v in ps["volumes"]] == ["data", "token"] and ps["serviceAccountName"] == "trainer"
    assert ps["schedulerName"] == "offpeak-scheduler" and ps["restartPolicy"] == "Never"
    (c,) = ps["containers"]
    assert c["name"] == "trainer" and c["volumeMounts"][0]["mountPath"] == "/data"
    assert c["resources"]["requests"] == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"}
    env = env_of(pod)
    assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}
    assert env["OFFPEAK_TRAININGJOB"] == "train-1"
    # the user's node term AND ours (each of our ORed terms gains the user's expressions)
    terms = ps["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert len(terms) == 2 and all(t["matchExpressions"][0]["key"] == "pool" for t in terms)
    assert {t["matchExpressions"][1]["key"] for t in terms} == {"offpeak.io/gpu-type", "nvidia.com/gpu.product"}
    assert TEMPLATE["spec"]["containers"][0].get("resources") == {"requests": {"cpu": "8", "memory": "32Gi"}}


def test_the_analysis_pod_can_pull_the_templates_private_image() -> None:
    from offpeak_operator.settings import AnalysisSettings
    _, spec = spec_of(image=None, template=TEMPLATE, modelSource={"entrypoint": "m:f"}, inputShape=[3, 8, 8])
    pod = podspecs.analysis_pod(job_body(), spec, AnalysisSettings())
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["spec"]["initContainers"][1]["image"] == "example/train:2"


@pytest.mark.parametrize(("change", "words"), [
    (lambda t: t["spec"].update(schedulerName="default-scheduler"), "schedulerName must be 'offpeak-scheduler'"),
    (lambda t: t["spec"].update(restartPolicy="OnFailure"), "restartPolicy must be 'Never'"),
    (lambda t: t["spec"].update(nodeName="gpu-1"), "nodeName must be unset"),
    (lambda t: t["spec"]["containers"][0].update(resources={"limits": {"nvidia.com/gpu": "8"}}),
     "must not set nvidia.com/gpu; use spec.gpusPerWorker"),
    (lambda t: t["spec"]["containers"][0]["env"].append({"name": "MASTER_ADDR", "value": "x"}),
     "env must not set MASTER_ADDR"),
    (lambda t: t["metadata"]["labels"].update({"offpeak.io/attempt": "9"}), "must not set offpeak.io/attempt"),
    (lambda t: t["spec"]["containers"].append({"name": "sidecar", "image": "s"}), "name the training one 'train'"),
    (lambda t: t["spec"]["containers"][0]["env"].append({"name": "KUBEFLOW_TRAINER_SERVER_URL", "value": "x"}),
     "env must not set KUBEFLOW_TRAINER_SERVER_URL"),
    (lambda t: t["metadata"]["annotations"].update({"offpeak.io/status-token": "t"}),
     "must not set offpeak.io/status-token"),
    (lambda t: t["spec"]["volumes"].append({"name": "offpeak-status", "emptyDir": {}}),
     "must not name a volume 'offpeak-status'"),
    (lambda t: t["spec"]["containers"][0]["volumeMounts"].append({"name": "data",
                                                                  "mountPath": "/var/run/secrets/offpeak.io/status"}),
     "mounts something else at /var/run/secrets/offpeak.io/status"),
])
def test_a_template_that_sets_what_the_operator_owns_is_refused_with_the_field(change, words: str) -> None:
    import copy
    template = copy.deepcopy(TEMPLATE)
    change(template)
    _, spec = spec_of(image=None, template=template)
    (problem,) = validate(spec, job_name="train-1", resolve_gpu=None)
    assert problem.reason == "TemplateConflict" and words in problem.message, problem.message


def test_short_form_pod_fields_beside_a_template_are_refused() -> None:
    _, spec = spec_of(template=TEMPLATE, image="example/other:1", command=["python", "x.py"])
    (problem,) = validate(spec, job_name="train-1", resolve_gpu=None)
    assert "spec.command belong(s) in spec.template" in problem.message
    assert "differs from the training container's image" in problem.message


def test_a_sidecar_template_names_its_training_container_train() -> None:
    import copy
    template = copy.deepcopy(TEMPLATE)
    template["spec"]["containers"][0]["name"] = "train"
    template["spec"]["containers"].append({"name": "logger", "image": "example/log:1"})
    body, spec = spec_of(image=None, template=template)
    pod = pod_of(body, spec)
    train, logger = pod["spec"]["containers"]
    assert "nvidia.com/gpu" in train["resources"]["limits"] and "resources" not in logger
    assert "offpeak.io/train-container" not in pod["metadata"]["annotations"]


def test_workers_get_a_torchrun_rendezvous_and_stable_hostnames() -> None:
    body, spec = spec_of(workers=2, gpusPerWorker=4)
    pods = [pod_of(body, spec, worker=w) for w in (0, 1)]
    master = "train-1-w0.train-1-workers.ns.svc"
    for w, pod in enumerate(pods):
        env = env_of(pod)
        assert (env["MASTER_ADDR"], env["MASTER_PORT"], env["PET_MASTER_ADDR"]) == (master, "29500", master)
        assert (env["WORLD_SIZE"], env["RANK"], env["NODE_RANK"], env["LOCAL_WORLD_SIZE"]) == (
            "8", str(4 * w), str(w), "4")
        assert (env["PET_NNODES"], env["PET_NPROC_PER_NODE"], env["PET_NODE_RANK"]) == ("2", "4", str(w))
        assert pod["spec"]["hostname"] == f"train-1-w{w}" and pod["spec"]["subdomain"] == "train-1-workers"
        assert pod["metadata"]["annotations"]["offpeak.io/gang-size"] == "2"
    service = podspecs.worker_service(body)
    kubernetes_validate.validate(service, K8S, strict=True)
    assert service["metadata"]["name"] == "train-1-workers" and service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"offpeak.io/trainingjob": "train-1", "offpeak.io/role": "training"}
    single = pod_of(*spec_of())
    assert "hostname" not in single["spec"] and "offpeak.io/gang-size" not in single["metadata"]["annotations"]
    assert env_of(single)["WORLD_SIZE"] == "1" and env_of(single)["MASTER_ADDR"] == "127.0.0.1"


def test_an_elastic_job_gets_torchruns_elastic_rendezvous_and_the_min_size_annotation() -> None:
    body, spec = spec_of(workers=4, minWorkers=2, gpusPerWorker=2, checkpointing=True)
    assert spec.elastic and validate(spec, job_name="train-1", resolve_gpu=None) == []
    for w in (0, 3):
        pod = pod_of(body, spec, worker=w)
        env = env_of(pod)
        assert (env["PET_NNODES"], env["PET_RDZV_BACKEND"], env["PET_NPROC_PER_NODE"]) == ("2:4", "c10d", "2")
        assert env["PET_RDZV_ENDPOINT"] == "train-1-w0.train-1-workers.ns.svc:29500"
        assert env["PET_RDZV_ID"] == "train-1-1" and env["OFFPEAK_MIN_WORKERS"] == "2"
        assert int(env["PET_MAX_RESTARTS"]) >= 1  # the workers left restart narrower when one is evicted
        # how many run is known only at the rendezvous: no fixed world size or rank to contradict torchrun's
        assert not {"WORLD_SIZE", "RANK", "NODE_RANK", "PET_NODE_RANK"} & set(env)
        annotations = pod["metadata"]["annotations"]
        assert (annotations["offpeak.io/gang-size"], annotations["offpeak.io/gang-min-size"]) == ("4", "2")
    rigid = pod_of(*spec_of(workers=4, minWorkers=4, checkpointing=True))  # minWorkers = workers: not elastic
    assert "offpeak.io/gang-min-size" not in rigid["metadata"]["annotations"] and env_of(rigid)["WORLD_SIZE"] == "4"
    # checkpointing without a checkpoint claim: no save-on-SIGTERM contract, planned stops wait for a checkpoint
    assert "offpeak.io/save-on-stop-seconds" not in rigid["metadata"]["annotations"]


@pytest.mark.parametrize(("fields", "says"), [
    ({"workers": 4, "minWorkers": 5, "checkpointing": True}, "between 1 and spec.workers (4), got 5"),
    ({"workers": 4, "minWorkers": 2}, "needs checkpointing"),
])
def test_an_elastic_width_the_job_cannot_run_at_is_refused(fields: dict, says: str) -> None:
    _, spec = spec_of(**fields)
    (problem,) = validate(spec, job_name="train-1", resolve_gpu=None)
    assert problem.reason == "InvalidSpec" and says in problem.message


def test_the_elastic_annotation_is_the_operators_own() -> None:
    _, spec = spec_of(podAnnotations={"offpeak.io/gang-min-size": "1"})
    (problem,) = validate(spec, job_name="train-1", resolve_gpu=None)
    assert "offpeak.io/gang-min-size" in problem.message


def test_a_multi_worker_job_name_must_be_able_to_name_its_service() -> None:
    _, spec = spec_of(workers=2)
    assert [p.reason for p in validate(spec, job_name="7b-run", resolve_gpu=None)] == ["InvalidSpec"]
    assert validate(spec, job_name="b7-run", resolve_gpu=None) == []


CLAIM = {"spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "50Gi"}}}}


def test_a_checkpoint_claim_is_mounted_by_every_attempt_with_time_to_save() -> None:
    body, spec = spec_of(checkpoint={"claimTemplate": CLAIM, "path": "/ckpt", "intervalSeconds": 300,
                                     "gracePeriodSeconds": 90})
    assert spec.checkpointing and validate(spec, job_name="train-1", resolve_gpu=None) == []
    pod = pod_of(body, spec)
    (c,) = pod["spec"]["containers"]
    assert {"name": "offpeak-checkpoint", "mountPath": "/ckpt"} in c["volumeMounts"]
    assert {"name": "offpeak-checkpoint", "persistentVolumeClaim": {"claimName": "train-1-checkpoint"}} in \
        pod["spec"]["volumes"]
    assert pod["spec"]["terminationGracePeriodSeconds"] == 90
    assert env_of(pod)["OFFPEAK_CHECKPOINT_DIR"] == "/ckpt"
    assert env_of(pod)["OFFPEAK_CHECKPOINT_INTERVAL_SECONDS"] == "300"
    assert pod["metadata"]["annotations"]["offpeak.io/checkpoint-interval-seconds"] == "300"
    assert pod["metadata"]["annotations"]["offpeak.io/checkpointing"] == "true"
    # the contract says it saves on SIGTERM within its grace period: the evictor's planned stops count on that
    assert pod["metadata"]["annotations"]["offpeak.io/save-on-stop-seconds"] == "90"
    claim = podspecs.checkpoint_claim(body, spec)
    kubernetes_validate.validate(claim, K8S, strict=True)
    assert claim["metadata"]["name"] == "train-1-checkpoint" and claim["spec"] == CLAIM["spec"]
    assert claim["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"  # deleted with the job
    body, spec = spec_of(checkpoint={"claimName": "team-ckpt"})
    assert podspecs.checkpoint_claim(body, spec) is None
    assert pod_of(body, spec)["spec"]["volumes"][-1]["persistentVolumeClaim"] == {"claimName": "team-ckpt"}
    assert pod_of(body, spec)["metadata"]["annotations"]["offpeak.io/save-on-stop-seconds"] == "60"  # the default


@pytest.mark.parametrize(("checkpoint", "words"), [
    ({}, "exactly one of claimName"),
    ({"claimName": "a", "claimTemplate": CLAIM}, "exactly one of claimName"),
    ({"claimName": "a", "path": "ckpt"}, "absolute path"),
    ({"claimName": "a", "intervalSeconds": 0}, "intervalSeconds must be a number > 0"),
])
def test_a_bad_checkpoint_says_which_field(checkpoint: dict, words: str) -> None:
    with pytest.raises(SpecError, match=words):
        spec_of(checkpoint=checkpoint)


def test_node_terms_are_anded_with_the_users() -> None:
    ours = [{"matchExpressions": [{"key": "a", "operator": "Exists"}]},
            {"matchExpressions": [{"key": "b", "operator": "Exists"}]}]
    assert podtemplate.merge_node_terms([], ours) == ours
    user = [{"matchExpressions": [{"key": "u", "operator": "Exists"}], "matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    merged = podtemplate.merge_node_terms(user, ours)
    assert [[e["key"] for e in t["matchExpressions"]] for t in merged] == [["u", "a"], ["u", "b"]]
    assert all(t["matchFields"] == user[0]["matchFields"] for t in merged)
