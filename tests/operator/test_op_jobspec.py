from __future__ import annotations

import pytest
from optestkit import job_body

from offpeak_operator.gpus import load_resolver
from offpeak_operator.jobspec import SpecError, canonical_gpu_types, parse_spec, validate


def _resolver(name: str) -> str:
    known = {"a100": "A100-SXM4-40GB", "a100-sxm4-40gb": "A100-SXM4-40GB", "t4": "T4"}
    try:
        return known[name.lower()]
    except KeyError:
        raise LookupError(name) from None


def test_defaults_follow_the_crd() -> None:
    spec = parse_spec(job_body()["spec"])
    assert (spec.precision, spec.optimizer, spec.workers, spec.gpus_per_worker) == ("fp32", "adam", 1, 1)
    assert spec.preemptible is True and spec.checkpointing is False and spec.max_attempts == 3
    assert spec.model_source.kind == "none"
    assert spec.total_steps == 1000


def test_epochs_give_steps_from_the_global_batch() -> None:
    raw = job_body(steps=None, epochs=3, datasetSize=1000, batchSize=32, workers=2)["spec"]
    raw.pop("steps")
    spec = parse_spec(raw)
    assert spec.total_steps == 3 * 16  # ceil(1000 / 64) = 16
    assert spec.total_gpus == 2


@pytest.mark.parametrize("source,kind,value", [
    ({"entrypoint": "pkg.model:build"}, "entrypoint", "pkg.model:build"),
    ({"torchvision": "resnet50"}, "torchvision", "resnet50"),
    ({"hfConfig": "bert-base-uncased"}, "hfConfig", "bert-base-uncased"),
    ({"graphConfigMap": {"name": "g"}}, "graphConfigMap", "g"),
])
def test_model_sources(source: dict, kind: str, value: str) -> None:
    spec = parse_spec(job_body(modelSource=source)["spec"])
    assert (spec.model_source.kind, spec.model_source.value) == (kind, value)
    assert spec.model_source.in_process == (kind in ("torchvision", "hfConfig"))


def test_two_model_sources_are_refused() -> None:
    with pytest.raises(SpecError, match="one source"):
        parse_spec(job_body(modelSource={"torchvision": "resnet18", "hfConfig": "gpt2"})["spec"])


def test_wrong_types_name_the_field() -> None:
    with pytest.raises(SpecError, match="spec.batchSize"):
        parse_spec(job_body(batchSize="big")["spec"])


def test_startup_seconds_is_optional_and_non_negative() -> None:
    assert parse_spec(job_body()["spec"]).startup_seconds is None
    assert parse_spec(job_body(startupSeconds=0)["spec"]).startup_seconds == 0.0
    assert parse_spec(job_body(startupSeconds=12.5)["spec"]).startup_seconds == 12.5
    for bad in (-1, "60", True):
        with pytest.raises(SpecError, match="spec.startupSeconds"):
            parse_spec(job_body(startupSeconds=bad)["spec"])


def test_valid_spec_has_no_problems() -> None:
    assert validate(parse_spec(job_body()["spec"]), job_name="ok", resolve_gpu=_resolver) == []


def test_unknown_gpu_type_is_reported_by_name() -> None:
    spec = parse_spec(job_body(gpuTypes=["A100", "Z9000"])["spec"])
    problems = validate(spec, job_name="j", resolve_gpu=_resolver)
    assert [p.reason for p in problems] == ["UnknownGPUType"]
    assert "Z9000" in problems[0].message and "A100" not in problems[0].message.split(":")[1]


def test_gpu_types_are_not_checked_without_a_catalogue() -> None:
    spec = parse_spec(job_body(gpuTypes=["Z9000"])["spec"])
    assert validate(spec, job_name="j", resolve_gpu=None) == []


def test_many_problems_reported_at_once() -> None:
    spec = parse_spec(job_body(epochs=2, resources={"limits": {"nvidia.com/gpu": 1}},
                               podAnnotations={"offpeak.io/predicted-job-seconds": "{}"},
                               modelSource={"entrypoint": "not an entrypoint"})["spec"])
    reasons = [p.reason for p in validate(spec, job_name="x" * 60, resolve_gpu=_resolver)]
    assert reasons.count("InvalidSpec") == 3  # steps+epochs, GPU in resources, reserved annotation
    assert "NameTooLong" in reasons and "InvalidModelSource" in reasons


def test_canonical_names_deduplicate_aliases() -> None:
    assert canonical_gpu_types(("A100", "a100-sxm4-40gb", "T4"), _resolver) == ("A100-SXM4-40GB", "T4")


def test_real_catalogue_resolver_when_installed() -> None:
    resolve = load_resolver()
    assert resolve is not None  # offpeak_predictor ships in this repo
    assert resolve("T4") == "T4"
    with pytest.raises(LookupError):
        resolve("no-such-gpu-9000")


def test_entrypoint_needs_an_input_shape_or_seq_len() -> None:
    spec = parse_spec(job_body(modelSource={"entrypoint": "pkg.m:build"})["spec"])
    assert [p.reason for p in validate(spec, job_name="j", resolve_gpu=None)] == ["InvalidModelSource"]
    spec = parse_spec(job_body(modelSource={"entrypoint": "pkg.m:build"}, inputShape=[3, 32, 32])["spec"])
    assert spec.input_shape == (3, 32, 32) and validate(spec, job_name="j", resolve_gpu=None) == []
    with pytest.raises(SpecError, match="inputShape"):
        parse_spec(job_body(inputShape=[3, 0])["spec"])
