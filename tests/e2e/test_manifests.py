"""Pure builders of the local cluster: kwok Stages, fake GPU nodes, scheduler configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from offpeak_core.gpuproducts import node_gpu_type
from offpeak_e2e import build, nodes, schedconfig, stages


def test_stages_cover_node_and_pod_lifecycle() -> None:
    names = [s["metadata"]["name"] for s in stages.stages()]
    assert names == ["node-initialize", "node-heartbeat", "pod-start", "offpeak-offline-complete",
                     "offpeak-offline-fail", "offpeak-offline-stop", "pod-delete-stopped", "pod-delete"]
    docs = list(yaml.safe_load_all(stages.stages_yaml()))
    assert all(d["kind"] == "Stage" and d["apiVersion"] == "kwok.x-k8s.io/v1alpha1" for d in docs)


def test_offline_completion_waits_exactly_the_sim_runtime_or_the_steps_left() -> None:
    complete = next(s for s in stages.stages() if s["metadata"]["name"] == "offpeak-offline-complete")
    delay = complete["spec"]["delay"]
    # kwok draws between delay and jitter; the same expression for both makes the delay exact
    assert delay["durationFrom"] == delay["jitterDurationFrom"] == {"jq": {"expression": stages.run_time_expression()}}
    expr = stages.run_time_expression()
    # sim-runtime unless the pod gives a step time; then the steps the operator says are left
    assert expr.startswith('if .metadata.annotations["offpeak.io/sim-step-ms"] == null then '
                           '.metadata.annotations["offpeak.io/sim-runtime"] else')
    assert expr.index('"OFFPEAK_TOTAL_STEPS"') < expr.index(" - ") < expr.index('"OFFPEAK_COMPLETED_STEPS"')
    keys = {e["key"]: e for e in complete["spec"]["selector"]["matchExpressions"]}
    assert keys['.metadata.labels["offpeak.io/workload"]']["values"] == ["offline"]
    assert "phase: Succeeded" in complete["spec"]["next"]["statusTemplate"]


def test_each_pod_matches_at_most_one_ending_and_one_deletion() -> None:
    """A fake training pod either succeeds or fails (sim-exit-code), and a deleted one that reports progress is
    stopped with its report before it is removed; no two stages may race for the same pod."""
    by_name = {s["metadata"]["name"]: {e["key"]: e for e in s["spec"]["selector"]["matchExpressions"]}
               for s in stages.stages()}
    exit_key = '.metadata.annotations["offpeak.io/sim-exit-code"]'
    progress_key = '.metadata.annotations["offpeak.io/sim-progress"]'
    assert by_name["offpeak-offline-complete"][exit_key]["operator"] == "DoesNotExist"
    assert by_name["offpeak-offline-fail"][exit_key]["operator"] == "Exists"
    assert by_name["pod-delete"][progress_key]["operator"] == "DoesNotExist"
    assert by_name["pod-delete-stopped"]['.status.phase']["operator"] == "NotIn"
    assert by_name["offpeak-offline-stop"]['.status.phase']["values"] == ["Running"]
    stop = next(s for s in stages.stages() if s["metadata"]["name"] == "offpeak-offline-stop")
    assert '"offpeak.io/sim-progress"' in stop["spec"]["next"]["statusTemplate"]


def test_plan_nodes_round_robin_over_gpu_types() -> None:
    specs = nodes.plan_nodes(count=5, gpu_types=("A100-SXM4-40GB", "L4"), gpus=8)
    assert [s.gpu_type for s in specs] == ["A100-SXM4-40GB", "L4", "A100-SXM4-40GB", "L4", "A100-SXM4-40GB"]
    assert len({s.name for s in specs}) == 5
    assert all(s.name == s.name.lower() for s in specs)
    with pytest.raises(ValueError):
        nodes.plan_nodes(count=0)


def test_node_manifest_is_a_kwok_gpu_node() -> None:
    m = nodes.node_manifest(nodes.NodeSpec(name="gpu-l4-0", gpu_type="L4", gpus=4))
    assert m["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    labels = m["metadata"]["labels"]
    # as GPU feature discovery labels a real node (nvidia-smi's name with dashes; memory in MiB), no offpeak label
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-L4" and labels["nvidia.com/gpu.memory"] == "22888"
    assert "offpeak.io/gpu-type" not in labels and node_gpu_type(labels) == "L4"
    h100 = nodes.node_manifest(nodes.NodeSpec(name="gpu-h100-0", gpu_type="H100-SXM5-80GB"))
    assert h100["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    odd = nodes.node_manifest(nodes.NodeSpec(name="gpu-mi-0", gpu_type="MI250-GCD"))  # no GFD name known here
    assert odd["metadata"]["labels"]["offpeak.io/gpu-type"] == "MI250-GCD"
    assert m["status"]["capacity"]["nvidia.com/gpu"] == "4"


def test_default_gpu_types_are_canonical_catalogue_names() -> None:
    from offpeak_predictor import gpus

    assert set(nodes.DEFAULT_GPU_TYPES) <= set(gpus.known_gpus())


def test_offpeak_scheduler_calls_the_extender(tmp_path: Path) -> None:
    cfg = schedconfig.offpeak_scheduler_config(kubeconfig=tmp_path / "kc", extender_url="http://127.0.0.1:9999/")
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["profiles"] == [{"schedulerName": "offpeak-scheduler"}]
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == "http://127.0.0.1:9999"
    assert (ext["filterVerb"], ext["prioritizeVerb"]) == ("filter", "prioritize")
    assert ext["ignorable"] is True and ext["nodeCacheCapable"] is True and ext["weight"] > 0
    assert ext["managedResources"] == [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]
    out = schedconfig.dump(cfg, tmp_path / "s.yaml")
    assert yaml.safe_load(out.read_text()) == cfg


def test_staging_replaces_use_published_versions() -> None:
    go_mod = (
        "module k8s.io/kubernetes\n\nreplace (\n"
        "\tk8s.io/api => ./staging/src/k8s.io/api\n"
        "\tk8s.io/client-go => ./staging/src/k8s.io/client-go\n"
        "\tgithub.com/x/y => github.com/x/y v1.0.0\n)\n"
    )
    assert build.staging_replaces(go_mod, staging_version="v0.32.13") == [
        "replace k8s.io/api => k8s.io/api v0.32.13",
        "replace k8s.io/client-go => k8s.io/client-go v0.32.13",
    ]


def test_binaries_live_in_the_versioned_cache(tmp_path: Path) -> None:
    paths = build.binaries(root=tmp_path)
    assert paths["kube-apiserver"] == tmp_path / "bin" / build.KUBERNETES_VERSION / "kube-apiserver"
    assert paths["helm"] == tmp_path / "bin" / build.HELM_VERSION / "helm"
    assert set(build.missing(root=tmp_path)) == set(paths)


def test_a_scenario_plan_replaces_the_trace_slot_by_slot(tmp_path: Path) -> None:
    from offpeak_e2e import onlineload

    plan = {"n1": [0] * 80 + [8] * 160, "n2": [8] * 240}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    settings = onlineload.LoadSettings(nodes=("n1", "n2"), day_seconds=240.0, plan_file=str(path))
    demand = onlineload.load_plan(settings)
    assert demand == plan
    # slot = second of the 240 s day, from the reference time, day after day
    assert [onlineload.demand_at(demand, "n1", t=t, reference=1000.0, day_seconds=240.0)
            for t in (1000.0, 1079.0, 1080.0, 1239.0, 1240.0 + 5)] == [0, 0, 8, 8, 0]
    assert onlineload.idle_window(demand, "n1", start=1000.0, reference=1000.0, day_seconds=240.0, gpus=8,
                                  need=4) == 80.0
    with pytest.raises(ValueError, match="no demand for n3"):
        onlineload.load_plan(onlineload.LoadSettings(nodes=("n1", "n3"), plan_file=str(path)))
