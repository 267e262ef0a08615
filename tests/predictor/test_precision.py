"""What a precision means (fp32 = PyTorch defaults, tf32, fp16/bf16 = AMP) and how the predictor prices it."""

import json
from pathlib import Path

import numpy as np
import pytest

from offpeak.errors import UserError
from offpeak_graph.options import ExtractOptions
from offpeak_graph.schema import PRECISIONS, validate_graph
from offpeak_predictor.features import make_op_table, roofline_times
from offpeak_predictor.gpus import resolve_gpu
from offpeak_predictor.graphfeatures import StepContext, summarise
from offpeak_predictor.loaders import OWN_GPUS, load_measured_steps
from offpeak_predictor.openapi import openapi_document
from offpeak_predictor.predict import PredictOptions, Predictor

from .conftest import mlp_graph


def test_every_reader_takes_tf32_from_the_one_list():
    assert PRECISIONS == ("fp32", "tf32", "fp16", "bf16")
    validate_graph(mlp_graph(precision="tf32"))
    PredictOptions(precision="tf32").validate()
    ExtractOptions(batch_size=1, precision="tf32")
    with pytest.raises(UserError):
        PredictOptions(precision="fp8").validate()
    doc = json.dumps(openapi_document(["T4"]))
    assert f'"enum": {json.dumps(sorted(PRECISIONS))}' in doc and "autocast" in doc  # (the wire lists them sorted)


def test_matmul_uses_tf32_only_when_asked_but_convolutions_use_it_by_default():
    a100, v100 = resolve_gpu("A100"), resolve_gpu("V100-SXM2-16GB")
    assert a100.peak_flops("fp32") == a100.fp32_tflops * 1e12
    assert a100.peak_flops("tf32") == a100.tf32_tflops * 1e12 > a100.peak_flops("fp32")
    assert a100.peak_flops("fp32", op_class="conv") == a100.peak_flops("tf32")  # cuDNN's TF32 default
    assert a100.peak_flops("bf16") == a100.bf16_tflops * 1e12
    assert v100.peak_flops("tf32") == v100.peak_flops("fp32")  # no TF32 units before Ampere
    big = make_op_table(op_class=["gemm", "conv", "elementwise"], flops=[1e12, 1e12, 1e9], bytes_=[1e6, 1e6, 1e9],
                        out_numel=[1e6] * 3, lead_dim=[64] * 3, dtype_bytes=[4] * 3)  # fmt: skip
    fp32, _ = roofline_times(big, a100, "fp32")
    tf32, _ = roofline_times(big, a100, "tf32")
    assert tf32[0] < fp32[0] and tf32[1] == fp32[1] and tf32[2] == fp32[2]


def test_tf32_prices_a_compute_bound_training_step_faster_than_fp32(tiny_model):
    summary, gpu = summarise(mlp_graph(batch=512, width=4096, layers=8)), resolve_gpu("A100")
    fp32 = tiny_model.op_seconds(summary, gpu, "fp32").sum()
    tf32 = tiny_model.op_seconds(summary, gpu, "tf32").sum()
    assert tf32 < fp32
    out = Predictor(tiny_model).predict(mlp_graph(), ["A100"], PredictOptions(precision="tf32"))
    assert out[0]["precision"] == "tf32" and out[0]["step_seconds_p90"] >= out[0]["step_seconds"] > 0
    assert StepContext(precision="tf32").precision == "tf32"


def test_tf32_changes_only_the_gemms_a_conv_or_vector_op_costs_what_it_costs_in_fp32(tiny_model):
    from offpeak_predictor.features import op_feature_matrix

    table = make_op_table(op_class=["gemm", "conv", "norm"], flops=[1e12, 1e12, 1e8], bytes_=[1e7, 1e7, 1e8],
                          out_numel=[1e6] * 3, lead_dim=[64] * 3, dtype_bytes=[4] * 3)  # fmt: skip
    a100 = resolve_gpu("A100")
    fp32, tf32 = op_feature_matrix(table, a100, "fp32"), op_feature_matrix(table, a100, "tf32")
    assert np.array_equal(fp32[1:], tf32[1:]) and not np.array_equal(fp32[0], tf32[0])
    priced = {p: tiny_model._price_ops(table, a100, p) for p in ("fp32", "tf32")}
    assert priced["tf32"][0] < priced["fp32"][0] and np.array_equal(priced["tf32"][1:], priced["fp32"][1:])


def test_h100_loaders_read_our_own_rows(tmp_path):
    folder = tmp_path / "offpeak-h100"
    folder.mkdir()
    rows = [
        {"kind": "vision", "model": "resnet34", "batch_size": 16, "seq_len": None, "mode": "train", "precision": "bf16",
         "optimizer": "sgd", "torch": "2.11.0+cu130", "device": "NVIDIA H100 80GB HBM3", "step_s": 0.0136},
        {"kind": "text", "model": "gpt2_large_lm", "batch_size": 4, "seq_len": 1024, "mode": "inference",
         "precision": "fp16", "optimizer": "none", "torch": "2.11.0+cu130", "device": "NVIDIA H100 80GB HBM3",
         "step_s": 0.05},
    ]  # fmt: skip
    (folder / "h100_models.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    models = OWN_GPUS["H100"].model_rows(tmp_path)
    assert list(models["gpu"]) == ["H100-SXM5-80GB"] * 2 and list(models["graph_kind"]) == ["torchvision", "hf_config"]
    assert models["graph_ref"][1].endswith("hf_configs/gpt2_large_lm.json") and models["seq_len"][1] == 1024
    assert list(models["family"]) == ["resnet", "gpt2"] and models["software"][0] == "pytorch-2.11.0"
    (folder / "h100_ops.csv").write_text(
        "op,precision,bytes,c,flops,head_dim,heads,hw,k,m,n,numel,r,seq,stride,time_s\n"
        "gemm,tf32,,,8388608,,,,256,128,128,,,,,3.0e-05\n"
        "conv2d_fwd,fp32,,64,7398752256,,,56,64,,32,,3,,1,9.9e-04\n"  # TF32 off for cuDNN: no precision of ours
        "conv2d_fwd,tf32,,64,7398752256,,,56,64,,32,,3,,1,2.5e-04\n"
        "add,bf16,196608,,,,,,,,,65536,,,,2.0e-05\n"
        "sdpa_fwd,fp16,,,6442450944,64,12,,,,8,,,512,,1.0e-04\n")  # fmt: skip
    ops = OWN_GPUS["H100"].op_rows(tmp_path)
    assert list(ops["op_class"]) == ["gemm", "conv", "elementwise"]  # SDPA has no single-op class: left out
    assert list(ops["precision"]) == ["tf32", "fp32", "bf16"] and list(ops["dtype_bytes"]) == [4, 4, 2]
    assert ops["time_s"][1] == 2.5e-04  # the TF32 convolution, which is what fp32 runs by default
    assert ops["flops"][0] == 2 * 128 * 256 * 128 and ops["flops"][1] == pytest.approx(7398752256)  # same padding
    assert np.all(ops["mode"] == "fwd")


H200_FOLDER = Path(__file__).resolve().parents[2] / "reports" / "device" / "h200-2026-11-28"


def test_another_gpus_steps_read_like_ours_with_the_configs_beside_them():
    """The H200 steps in the repository (measured on a lent GPU, the format of our H100 rows): every row names the
    catalogue's H200 and every text model's config is a file beside them, so the bench predicts them without the
    shared data."""
    steps = load_measured_steps(H200_FOLDER / "h200_models.jsonl", source="h200")
    assert len(steps) == 98 and set(steps["gpu"]) == {"H200-SXM-141GB"} and set(steps["source"]) == {"h200"}
    text = steps[steps["graph_kind"] == "hf_config"]
    assert len(text) == 30 and all(Path(ref).parent == H200_FOLDER / "hf_configs" and Path(ref).is_file()
                                   for ref in text["graph_ref"])  # fmt: skip
    assert set(steps["precision"]) == {"fp32", "bf16", "fp16"} and (steps["time_s"] > 0).all()


def test_our_h200_rows_are_read_from_the_checkout_whatever_the_data_root(tmp_path):
    """The shipped model trains on every GPU we measured: the H200's committed steps and single ops load as our own
    rows even when the data root (here an empty folder) has no H200 folder."""
    h200 = OWN_GPUS["H200"]
    steps, ops = h200.model_rows(tmp_path), h200.op_rows(tmp_path)
    assert len(steps) == 98 and set(steps["source"]) == {"offpeak-h200"} and set(steps["gpu"]) == {"H200-SXM-141GB"}
    assert len(ops) > 500 and set(ops["source"]) == {"offpeak-h200-ops"} and set(ops["gpu"]) == {"H200-SXM-141GB"}
    assert {"gemm", "conv"} <= set(ops["op_class"]) and (ops["time_s"] > 0).all()


def test_without_our_rows_the_modern_checks_are_simply_absent(tmp_path, tiny_model, monkeypatch):
    from offpeak_predictor.evaluate import modern_op_report
    from offpeak_predictor.loaders import OwnGpu

    with pytest.raises(FileNotFoundError):
        OWN_GPUS["H100"].model_rows(tmp_path)
    report = modern_op_report(root=tmp_path, model=tiny_model)  # the H200's, read from the checkout
    assert report is not None and list(report["per_gpu"]) == ["H200-SXM-141GB"]
    monkeypatch.setitem(OWN_GPUS, "H200", OwnGpu(gpu="H200", folder=lambda root: root / "offpeak-h200", stem="h200"))
    assert modern_op_report(root=tmp_path, model=tiny_model) is None
