"""Demo jobs: runtimes come from real measurements."""

from __future__ import annotations

import pytest

from offpeak_e2e import demojobs


def test_measured_step_times_are_real_a100_figures() -> None:
    steps = demojobs.measured_step_seconds()
    assert {"resnet18", "resnet50", "vgg16"} <= set(steps)
    assert 0.005 < steps["resnet18"] < steps["resnet50"] < steps["resnet152"] < 1.0  # deeper is slower


def test_plan_jobs_spreads_runtimes_within_bounds() -> None:
    jobs = demojobs.plan_jobs(count=12, step_seconds={"a": 0.02, "b": 0.1}, min_seconds=20, max_seconds=150)
    assert len({j.name for j in jobs}) == 12
    for j in jobs:
        assert 19 <= j.sim_seconds <= 151
        assert j.steps >= 1
    assert demojobs.plan_jobs(count=3, step_seconds={"a": 0.02}) == demojobs.plan_jobs(
        count=3, step_seconds={"a": 0.02})  # deterministic
    with pytest.raises(ValueError):
        demojobs.plan_jobs(count=1, step_seconds={})


def test_manifest_carries_the_measured_runtime() -> None:
    job = demojobs.DemoJob(name="demo-00-resnet18", model="resnet18", steps=1000, step_seconds=0.016)
    m = demojobs.manifest(job)
    assert m["kind"] == "TrainingJob"
    assert m["spec"]["modelSource"] == {"torchvision": "resnet18"}
    assert m["spec"]["gpuTypes"] == ["A100-SXM4-40GB"] and m["spec"]["batchSize"] == 12
    assert m["spec"]["podAnnotations"]["offpeak.io/sim-runtime"] == "16000ms"


def test_manifest_says_the_fake_pods_have_no_startup() -> None:
    job = demojobs.DemoJob(name="demo-00-resnet18", model="resnet18", steps=1000, step_seconds=0.016)
    assert demojobs.manifest(job)["spec"]["startupSeconds"] == 0
