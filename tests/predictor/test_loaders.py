"""Loaders on the real shared data (small slices where the files are big)."""

import numpy as np
import pandas as pd
import pytest

from offpeak_predictor import loaders as L
from offpeak_predictor.gpus import known_gpus

ROOT = L.runtime_dir()


def _check(df: pd.DataFrame, columns: tuple[str, ...]) -> None:
    assert list(df.columns) == list(columns)
    assert len(df) > 0
    assert (df["time_s"] > 0).all() and np.isfinite(df["time_s"]).all()
    assert set(df["gpu"]) <= set(known_gpus())
    assert not df["gpu"].str.startswith("H100").any()


def test_neusight_ops_slice_has_every_class_with_consistent_costs():
    df = L.load_neusight_ops(ROOT, max_rows_per_file=200)
    _check(df, L.OP_COLUMNS)
    assert set(df["op_class"]) == {"gemm", "conv", "elementwise", "norm", "softmax"}
    assert (df["mode"] == "fwd").all() and (df["precision"] == "fp32").all()
    gemm = df[df["op_class"] == "gemm"]
    assert (gemm["flops"] >= 2 * gemm["out_numel"]).all()  # at least one MAC per output
    # Times are seconds: NeuSight kernels take microseconds to tens of milliseconds.
    assert df["time_s"].median() < 0.01


def test_justus_layers_have_forward_and_training_rows():
    df = L.load_justus_layers(ROOT, max_rows=2000)
    _check(df, L.OP_COLUMNS)
    assert set(df["mode"]) == {"fwd", "train"}
    assert set(df["op_class"]) == {"conv", "gemm"}


def test_deepbench_keeps_fp32_and_fp16_gpu_rows_only():
    df = L.load_deepbench(ROOT)
    _check(df, L.OP_COLUMNS)
    assert set(df["precision"]) == {"fp32", "fp16"}
    assert (df.loc[df["precision"] == "fp16", "dtype_bytes"] == 2).all()


@pytest.mark.parametrize("name", sorted(L.MODEL_LOADERS))
def test_model_level_loaders(name):
    df = L.MODEL_LOADERS[name](ROOT)
    _check(df, L.MODEL_COLUMNS)
    assert set(df["mode"]) <= {"train", "inference"}
    assert (df["batch_size"] >= 1).all()
    assert not df["family"].isin(["densenet", "mnasnet"]).any()
    args = L.graph_args_of(df.iloc[0])
    assert args["batch_size"] == int(df.iloc[0]["batch_size"])
    assert ("torchvision" in args) != ("hf_config" in args)


def test_ryujaehun_step_time_matches_the_readme_example():
    df = L.load_ryujaehun(ROOT)
    r50 = df[(df["model_name"] == "resnet50") & (df["gpu"] == "RTX-2080Ti") & (df["precision"] == "fp32")
             & (df["mode"] == "train") & (df["num_gpus"] == 1)]  # fmt: skip
    # README: repeated runs of resnet50 fp32 train on a 2080 Ti have medians of 46.5-55.9 ms.
    assert 0.04 < r50["time_s"].median() < 0.06


def test_ryujaehun_keeps_only_single_gpu_rows_because_its_multi_gpu_rows_are_data_parallel(tmp_path):
    raw = pd.read_csv(ROOT / "ryujaehun_pytorch_gpu_benchmark" / "summary_by_config.csv")
    single = raw[(raw["num_gpus"] == 1) & raw["precision"].isin(["float", "half"])].head(20)
    parallel = single.assign(num_gpus=2, global_batch_size=single["global_batch_size"] * 2, median=single["median"] * 3)
    (tmp_path / "ryujaehun_pytorch_gpu_benchmark").mkdir()
    pd.concat([single, parallel]).to_csv(tmp_path / "ryujaehun_pytorch_gpu_benchmark" / "summary_by_config.csv")
    df = L.load_ryujaehun(tmp_path)
    assert len(single) == 20 and len(df) == 20 and (df["num_gpus"] == 1).all()


def test_gpu_names_from_lambda_machine_tags():
    assert L._gpu_from_machine("7742-1xA100-SXM4-40GB_TF2_3") == "A100-SXM4-40GB"
    assert L._gpu_from_machine("i7-9750H-GeForce_RTX_2070_with_Max-Q_Design_XLA_TF1_15") == "RTX-2070-MaxQ"
    assert L._gpu_from_machine("Gold_6230-Quadro_RTX_8000_NVLink_trt_TF1_15") == "Quadro-RTX-8000"
