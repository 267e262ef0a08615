"""Loaders: every public runtime dataset under shared/data/runtime into one normalised table.

Each loader returns a DataFrame with the columns of `OP_COLUMNS` (single kernels) or `MODEL_COLUMNS` (whole
training/inference steps). Times are seconds; GPUs are canonical catalogue names (rows on devices not in the
catalogue, e.g. CPUs and phones, are dropped). No public row is an H100's: the shared data has them removed; our
own H100 and H200 measurements (`OWN_GPUS`) are the only rows of those GPUs.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import pandas as pd

from offpeak_core.datapaths import runtime_dir
from offpeak_predictor.features import DTYPE_BYTES, conv2d_cost, gemm_cost
from offpeak_predictor.gpus import find_gpu

log = logging.getLogger(__name__)

OP_COLUMNS: tuple[str, ...] = (
    "source", "gpu", "precision", "mode", "op_class", "flops", "bytes", "out_numel", "lead_dim", "dtype_bytes",
    "time_s", "time_std", "software",
)  # fmt: skip
MODEL_COLUMNS: tuple[str, ...] = (
    "source", "gpu", "precision", "mode", "optimizer", "model_name", "family", "graph_kind", "graph_ref",
    "batch_size", "seq_len", "input_shape", "num_gpus", "time_s", "time_std", "software",
)  # fmt: skip




def _canonical(names: pd.Series) -> pd.Series:
    lookup = {raw: (spec.name if (spec := find_gpu(str(raw))) else None) for raw in names.unique()}
    return names.map(lookup)


def _finish(df: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    df = df[df["gpu"].notna() & np.isfinite(df["time_s"]) & (df["time_s"] > 0)]
    for col in columns:
        if col not in df:
            df[col] = np.nan
    return df.loc[:, list(columns)].reset_index(drop=True)


# ------------------------------------------------------------------------------------------- op level


_NEUSIGHT_ELEMENTWISE = {
    "add": ("elementwise", 3, 1), "mul": ("elementwise", 3, 1), "div": ("elementwise", 3, 1),
    "pow": ("elementwise", 3, 1), "addu": ("elementwise", 2, 1), "mulu": ("elementwise", 2, 1),
    "divu": ("elementwise", 2, 1), "powu": ("elementwise", 2, 1), "relu": ("elementwise", 2, 1),
    "gelu": ("elementwise", 2, 8), "tanh": ("elementwise", 2, 4), "softmax": ("softmax", 2, 5),
    "ln": ("norm", 2, 8),
}  # op -> (class, tensors moved, flops per element)  # fmt: skip


def _neusight_ops(raw: pd.DataFrame, source: str) -> pd.DataFrame:
    out = []
    lat = raw["Latency"] if "Latency" in raw else raw["Latency (ms)"]
    raw = raw.assign(time_s=lat.astype(float) / 1e3)
    for name, part in raw.groupby("OPName"):
        name = str(name)
        b = part["B"].astype(float)
        if name in ("bmm", "linear"):
            m, n, k = part["M"].astype(float), part["N"].astype(float), part["K"].astype(float)
            if name == "bmm":
                flops, bytes_ = gemm_cost(batch=b, m=m, k_in=n, n_out=k, dtype_bytes=4)
            else:
                flops, bytes_ = gemm_cost(batch=1, m=b * m, k_in=n, n_out=k, dtype_bytes=4)
            frame = pd.DataFrame(
                {"op_class": "gemm", "flops": flops, "bytes": bytes_, "out_numel": b * m * k, "lead_dim": b}
            )
        elif name == "conv":
            flops, bytes_, out_numel = conv2d_cost(
                batch=b, c_in=part["Input_Channel"].astype(float), c_out=part["Output_Channel"].astype(float),
                kernel=part["Kernel_Szie"].astype(float), size=part["Input_Size"].astype(float),
                stride=part["Stride"].astype(float), padding=part["Padding"].astype(float), dtype_bytes=4,
            )  # fmt: skip
            frame = pd.DataFrame(
                {"op_class": "conv", "flops": flops, "bytes": bytes_, "out_numel": out_numel, "lead_dim": b}
            )
        elif name in _NEUSIGHT_ELEMENTWISE:
            cls, tensors, fpe = _NEUSIGHT_ELEMENTWISE[name]
            numel = b * part["H"].astype(float)
            frame = pd.DataFrame(
                {"op_class": cls, "flops": fpe * numel, "bytes": 4.0 * tensors * numel, "out_numel": numel,
                 "lead_dim": b}
            )  # fmt: skip
        else:
            continue
        frame["gpu"] = _canonical(part["Device"]).to_numpy()
        frame["time_s"] = part["time_s"].to_numpy()
        out.append(frame)
    df = pd.concat(out, ignore_index=True)
    df = df.assign(source=source, precision="fp32", mode="fwd", dtype_bytes=4, time_std=np.nan,
                   software="pytorch-2.1")  # fmt: skip
    return _finish(df, OP_COLUMNS)


def load_neusight_ops(root: Path, *, max_rows_per_file: int | None = None) -> pd.DataFrame:
    """NeuSight single-op forward latencies (NVIDIA train + test splits, AMD)."""
    files = sorted((root / "neusight" / "op_train_nvidia").glob("*.csv.gz"))
    files += sorted((root / "neusight" / "op_test_nvidia").glob("*.csv.gz"))
    files += sorted((root / "neusight" / "op_amd").glob("*.csv.gz"))
    frames = []
    for path in files:
        raw = pd.read_csv(path, nrows=max_rows_per_file, usecols=_neusight_usecols(path))
        frames.append(_neusight_ops(raw, "neusight-op"))
    return pd.concat(frames, ignore_index=True)


def _neusight_usecols(path: Path) -> Callable[[str], bool]:
    wanted = {"OPName", "Latency", "Latency (ms)", "Device", "B", "M", "N", "K", "H", "Input_Channel",
              "Output_Channel", "Kernel_Szie", "Input_Size", "Stride", "Padding"}  # fmt: skip
    return lambda col: col in wanted


def load_justus_layers(root: Path, *, max_rows: int | None = None) -> pd.DataFrame:
    """Justus et al. 2018 single conv / dense layers (TF1). optimizer 0 = forward only, else a training step."""
    base = root / "justus2018"
    conv = pd.read_csv(base / "convolution_layer_benchmarks.csv.gz", nrows=max_rows)
    size = conv["matsize"].astype(float)
    k = conv["kernelsize"].astype(float)
    pad = np.where(conv["padding"] == 1, (k - 1) / 2.0, 0.0)
    flops, bytes_, out_numel = conv2d_cost(
        batch=conv["batchsize"].astype(float), c_in=conv["channels_in"].astype(float),
        c_out=conv["channels_out"].astype(float), kernel=k, size=size, stride=conv["strides"].astype(float),
        padding=pad, dtype_bytes=4,
    )  # fmt: skip
    conv_df = pd.DataFrame(
        {"op_class": "conv", "flops": flops, "bytes": bytes_, "out_numel": out_numel,
         "lead_dim": conv["batchsize"], "gpu": _canonical(conv["gpu_name"]),
         "mode": np.where(conv["optimizer"] == 0, "fwd", "train"),
         "time_s": conv["timeUsed_median"] / 1e3, "time_std": conv["timeUsed_std"] / 1e3}
    )  # fmt: skip
    dense = pd.read_csv(base / "dense_layer_benchmarks.csv.gz", nrows=max_rows)
    flops, bytes_ = gemm_cost(batch=1, m=dense["batchsize"].astype(float), k_in=dense["dim_input"].astype(float),
                              n_out=dense["dim_output"].astype(float), dtype_bytes=4)  # fmt: skip
    dense_df = pd.DataFrame(
        {"op_class": "gemm", "flops": flops, "bytes": bytes_, "out_numel": dense["batchsize"] * dense["dim_output"],
         "lead_dim": dense["batchsize"], "gpu": _canonical(dense["gpu_name"]),
         "mode": np.where(dense["optimizer"] == 0, "fwd", "train"),
         "time_s": dense["timeUsed_median"] / 1e3, "time_std": dense["timeUsed_std"] / 1e3}
    )  # fmt: skip
    df = pd.concat([conv_df, dense_df], ignore_index=True)
    df = df.assign(source="justus2018", precision="fp32", dtype_bytes=4, software="tensorflow-1")
    return _finish(df, OP_COLUMNS)


def _deepbench_precision(text: pd.Series) -> pd.Series:
    t = text.fillna("").str.lower()
    return pd.Series(np.where(t.str.startswith("float"), "fp32", np.where(t.str.startswith("16 bit"), "fp16", "")),
                     index=text.index)  # fmt: skip


def load_deepbench(root: Path) -> pd.DataFrame:
    """DeepBench GEMM and conv kernels (training results; FP32 and FP16 sheets)."""
    base = root / "deepbench"
    gemm = pd.read_csv(base / "gemm.csv")
    gemm = gemm[gemm["file"].str.contains("train")]
    prec = _deepbench_precision(gemm["precision"])
    nbytes = prec.map(DTYPE_BYTES).fillna(4)
    m, n, k = gemm["M"].astype(float), gemm["N"].astype(float), gemm["K"].astype(float)
    flops, bytes_ = gemm_cost(batch=1, m=m, k_in=k, n_out=n, dtype_bytes=nbytes)  # type: ignore[arg-type]
    gemm_df = pd.DataFrame(
        {"op_class": "gemm", "flops": flops, "bytes": bytes_, "out_numel": m * n, "lead_dim": m,
         "gpu": _canonical(gemm["device"]), "precision": prec, "dtype_bytes": nbytes,
         "time_s": gemm["time_ms"] / 1e3, "mode": "fwd"}
    )  # fmt: skip
    conv = pd.read_csv(base / "conv.csv")
    conv = conv[conv["file"].str.contains("train")]
    prec = _deepbench_precision(conv["precision"])
    nbytes = prec.map(DTYPE_BYTES).fillna(4)
    b, c, kk = conv["N"].astype(float), conv["C"].astype(float), conv["K"].astype(float)
    h, w = conv["H"].astype(float), conv["W"].astype(float)
    r, s = conv["R"].astype(float), conv["S"].astype(float)
    p = np.floor((h + 2 * conv["pad_h"] - r) / conv["stride_v"]) + 1
    q = np.floor((w + 2 * conv["pad_w"] - s) / conv["stride_h"]) + 1
    out_numel = b * kk * p * q
    flops = 2.0 * out_numel * c * r * s
    bytes_ = nbytes * (b * c * h * w + kk * c * r * s + out_numel)
    conv_df = pd.DataFrame(
        {"op_class": "conv", "flops": flops, "bytes": bytes_, "out_numel": out_numel, "lead_dim": b,
         "gpu": _canonical(conv["device"]), "precision": prec, "dtype_bytes": nbytes,
         "time_s": conv["time_fwd_ms"] / 1e3, "mode": "fwd"}
    )  # fmt: skip
    df = pd.concat([gemm_df, conv_df], ignore_index=True)
    df = df[df["precision"] != ""]
    df = df.assign(source="deepbench", time_std=np.nan, software="cudnn-deepbench")
    return _finish(df, OP_COLUMNS)


# ------------------------------------------------------------------------------------------- model level


def _family(model: str) -> str:
    """Model family used for grouped evaluation: resnet50 -> resnet, vgg16_bn -> vgg, gpt3_xl -> gpt3."""
    name = model.lower()
    for fam in ("wide_resnet", "resnext", "shufflenet", "squeezenet", "mobilenet", "efficientnet", "regnet",
                "inception", "googlenet", "densenet", "mnasnet", "alexnet", "resnet", "vgg", "bert", "gpt2",
                "gpt3", "opt"):  # fmt: skip
        if name.startswith(fam):
            return fam
    return re.sub(r"[^a-z].*$", "", name) or name


def load_ryujaehun(root: Path) -> pd.DataFrame:
    """Whole-model torchvision steps (batch 12, SGD), fp32 and fp16, on one GPU only.

    The multi-GPU rows time `nn.DataParallel`: one process scatters each batch from GPU 0 and gathers it back, up to
    3x a single GPU's step at the same per-GPU batch. offpeak's multi-GPU jobs run one process per GPU (torchrun,
    DDP), so those rows measure a parallelism we never run; kept, they outnumbered the same models' single-GPU rows
    3 to 1 and pulled single-GPU predictions up by about a third.
    """
    raw = pd.read_csv(root / "ryujaehun_pytorch_gpu_benchmark" / "summary_by_config.csv")
    raw = raw[raw["precision"].isin(["float", "half"]) & (raw["num_gpus"] == 1)]
    df = pd.DataFrame(
        {"gpu": _canonical(raw["gpu"]), "precision": raw["precision"].map({"float": "fp32", "half": "fp16"}),
         "mode": raw["mode"], "optimizer": np.where(raw["mode"] == "train", "sgd", "none"),
         "model_name": raw["model"], "family": raw["model"].map(_family), "graph_kind": "torchvision",
         "graph_ref": raw["model"], "batch_size": (raw["global_batch_size"] // raw["num_gpus"]).astype(int),
         "input_shape": "[3, 224, 224]", "num_gpus": raw["num_gpus"], "time_s": raw["median"] / 1e3,
         "time_std": raw["std"] / 1e3}
    )  # fmt: skip
    df = df.assign(source="ryujaehun", seq_len=np.nan, software="pytorch-1.x")
    return _finish(df, MODEL_COLUMNS)


_TF_MODELS = {"resnet50": ("resnet50", 224), "resnet152": ("resnet152", 224), "vgg16": ("vgg16", 224),
              "alexnet": ("alexnet", 224), "inception3": ("inception_v3", 299)}  # fmt: skip


def _gpu_from_machine(machine: str) -> str | None:
    start = re.search(r"(GeForce|Quadro|Tesla|RTX|A100|Radeon|V100|\d+x[A-Z])", machine)
    text = machine[start.start():] if start else machine  # drop the CPU tag
    text = re.sub(r"^(LambdaCloud_|\d+x)", "", text)
    text = re.sub(r"_(XLA|NVLink|trt\w*|TF\w*|HP16|LambdaCloud|PCIEGen\w*|10bit).*$", "", text)
    text = re.sub(r"^(\d+x)", "", text).replace("_with_Max-Q_Design", " Max-Q").replace("_", " ")
    spec = find_gpu(text)
    return spec.name if spec else None


def load_lambda_tf(root: Path) -> pd.DataFrame:
    """tf_cnn_benchmarks throughput logs (TensorFlow, synthetic data, no XLA), median over runs."""
    raw = pd.read_csv(root / "lambda_tf_cnn_benchmarks" / "tf_cnn_benchmarks_runs.csv")
    raw = raw[(raw["data"] == "syn") & (~raw["xla"].astype(bool)) & raw["model"].isin(list(_TF_MODELS))]
    raw = raw.assign(gpu=raw["machine"].map(_gpu_from_machine))
    keys = ["gpu", "precision", "num_gpus", "mode", "model", "batch_size_per_gpu"]
    agg = raw.groupby(keys, as_index=False)["step_time_ms"].agg(["median", "std"]).reset_index()
    tv = agg["model"].map(lambda m: _TF_MODELS[m][0])
    size = agg["model"].map(lambda m: _TF_MODELS[m][1])
    df = pd.DataFrame(
        {"gpu": agg["gpu"], "precision": agg["precision"], "mode": agg["mode"],
         "optimizer": np.where(agg["mode"] == "train", "sgd", "none"), "model_name": tv, "family": tv.map(_family),
         "graph_kind": "torchvision", "graph_ref": tv, "batch_size": agg["batch_size_per_gpu"].astype(int),
         "input_shape": size.map(lambda s: f"[3, {s}, {s}]"), "num_gpus": agg["num_gpus"],
         "time_s": agg["median"] / 1e3, "time_std": agg["std"] / 1e3}
    )  # fmt: skip
    df = df.assign(source="lambda-tf", seq_len=np.nan, software="tensorflow")
    return _finish(df, MODEL_COLUMNS)


def load_lambda_pytorch(root: Path) -> pd.DataFrame:
    """Lambda NGC PyTorch training throughput: resnet50 and BERT-SQuAD columns (1 GPU), v1 and v2 tables."""
    base = root / "lambda_pytorch_benchmark"
    models = {"resnet50": ("torchvision", "resnet50", None, "sgd"),
              "bert_large_squad": ("hf_config", "bert-large-uncased", 384, "adam"),
              "bert_base_squad": ("hf_config", "bert-base-uncased", 384, "adam")}  # fmt: skip
    rows = []
    for prec in ("fp32", "fp16"):
        thr = pd.read_csv(base / f"pytorch-train-throughput-{prec}.csv")
        bs = pd.read_csv(base / f"pytorch-train-bs-{prec}.csv")
        for i, row in thr.iterrows():
            if row["num_gpu"] != 1:
                continue
            for col, (kind, ref, seq, opt) in models.items():
                rate, batch = row.get(col), cast(float, bs.at[i, col]) if col in bs else np.nan  # a number or NaN
                if pd.notna(rate) and pd.notna(batch) and rate > 0:
                    rows.append((row["name_gpu"], prec, col, kind, ref, seq, opt, int(batch), batch / rate))
        v2 = pd.read_csv(base / f"pytorch-train-throughput-v2-{prec}.csv")
        v2bs = pd.read_csv(base / "v2_batch_sizes_from_config.csv")
        for _, row in v2.iterrows():
            match = re.search(r"_1x(H200|GH200|B200)_(\d+)GB", str(row["config"]))
            if not match or pd.isna(row.get("resnet50")):
                continue
            want = "FP32" if prec == "fp32" else "AMP"
            sel = v2bs[(v2bs["gpu_memory_class"] == f"{match.group(2)}GB") & (v2bs["model"] == "resnet50")
                       & (v2bs["precision"] == want)]  # fmt: skip
            if len(sel) and pd.notna(sel["batch_size_per_gpu"].iloc[0]):
                batch = int(sel["batch_size_per_gpu"].iloc[0])
                rows.append((match.group(1), prec, "resnet50", "torchvision", "resnet50", None, "sgd", batch,
                             batch / float(row["resnet50"])))  # fmt: skip
    raw = pd.DataFrame(rows, columns=["name", "precision", "model", "kind", "ref", "seq", "opt", "batch", "t"])
    df = pd.DataFrame(
        {"gpu": _canonical(raw["name"]), "precision": raw["precision"], "mode": "train", "optimizer": raw["opt"],
         "model_name": raw["model"], "family": raw["model"].map(_family), "graph_kind": raw["kind"],
         "graph_ref": raw["ref"], "batch_size": raw["batch"], "seq_len": raw["seq"],
         "input_shape": raw["kind"].map({"torchvision": "[3, 224, 224]"}), "num_gpus": 1,
         "time_s": raw["t"], "time_std": np.nan}
    )  # fmt: skip
    df = df.assign(source="lambda-pytorch", software="pytorch-ngc")
    return _finish(df, MODEL_COLUMNS)


def load_neusight_models(root: Path) -> pd.DataFrame:
    """NeuSight end-to-end transformer latencies (single GPU, eager, FP32; train = fwd+bwd, no optimizer)."""
    base = root / "neusight" / "model_level"
    raw = pd.read_csv(base / "model_latency_labels.csv")
    raw = raw[raw["option"].isna() & ~raw["model"].isin(["switchxl4", "switch4"])]
    configs = root / "neusight" / "model_configs"
    df = pd.DataFrame(
        {"gpu": _canonical(raw["device"]), "precision": "fp32",
         "mode": raw["mode"].map({"train": "train", "inf": "inference"}), "optimizer": "none",
         "model_name": raw["model"], "family": raw["model"].map(_family), "graph_kind": "hf_config",
         "graph_ref": raw["model"].map(lambda m: str(configs / f"{m}.json")), "batch_size": raw["batch"].astype(int),
         "seq_len": raw["seqlen"], "input_shape": None, "num_gpus": 1, "time_s": raw["e2e_latency_ms"] / 1e3,
         "time_std": np.nan}
    )  # fmt: skip
    df = df.assign(source="neusight-model", software="pytorch-2.1")
    return _finish(df, MODEL_COLUMNS)


def load_justus_vgg16(root: Path) -> pd.DataFrame:
    """Whole VGG-16 on V100 (TF1), forward-only and SGD/Adam training steps, batch 1..64."""
    rows = []
    for kind, mode, opt in (("FW", "inference", "none"), ("sgd", "train", "sgd"), ("adam", "train", "adam")):
        raw = pd.read_csv(root / "justus2018" / "vgg16_v100" / f"benchmark_VGG16_V100_{kind}_20181022.csv",
                          skipinitialspace=True)
        for _, row in raw.iterrows():
            rows.append((mode, opt, int(row["batchsize"]), float(row["time per batch (ms)"]) / 1e3))
    raw = pd.DataFrame(rows, columns=["mode", "optimizer", "batch", "t"])
    df = pd.DataFrame(
        {"gpu": "V100-SXM2-16GB", "precision": "fp32", "mode": raw["mode"], "optimizer": raw["optimizer"],
         "model_name": "vgg16", "family": "vgg", "graph_kind": "torchvision", "graph_ref": "vgg16",
         "batch_size": raw["batch"], "input_shape": "[3, 224, 224]", "num_gpus": 1, "time_s": raw["t"]}
    )  # fmt: skip
    df = df.assign(source="justus2018-vgg16", seq_len=np.nan, time_std=np.nan, software="tensorflow-1")
    return _finish(df, MODEL_COLUMNS)


_T7_MODELS = {"alexnet": "alexnet", "vgg16": "vgg16", "vgg19": "vgg19", "googlenet-v1": "googlenet",
              "resnet-18": "resnet18", "resnet-34": "resnet34", "resnet-50": "resnet50", "resnet-101": "resnet101",
              "resnet-152": "resnet152"}  # fmt: skip


def load_jcjohnson(root: Path) -> pd.DataFrame:
    """Torch7 forward+backward (no optimizer) at batch 16 on 2016-17 GPUs, cuDNN runs only."""
    raw = pd.read_csv(root / "jcjohnson_cnn_benchmarks" / "torch7_cnn_fwd_bwd_times.csv")
    raw = raw[raw["use_cudnn"].astype(str).str.lower().isin(["true", "1"]) & raw["model"].isin(list(_T7_MODELS))]
    tv = raw["model"].map(_T7_MODELS)
    df = pd.DataFrame(
        {"gpu": _canonical(raw["gpu_name"].astype(str)), "precision": "fp32", "mode": "train", "optimizer": "none",
         "model_name": tv, "family": tv.map(_family), "graph_kind": "torchvision", "graph_ref": tv,
         "batch_size": raw["batch_size"].astype(int), "input_shape": "[3, 224, 224]", "num_gpus": 1,
         "time_s": raw["total_ms_median"] / 1e3}
    )  # fmt: skip
    df = df.assign(source="jcjohnson-torch7", seq_len=np.nan, time_std=np.nan, software="torch7")
    return _finish(df, MODEL_COLUMNS)


def load_measured_steps(path: Path, *, source: str) -> pd.DataFrame:
    """Whole steps in `measure_models.py`'s format (one JSON object per configuration, the GPU named by its CUDA
    device name), as model rows. The text models' configs are read from `hf_configs/` beside the file, so a folder
    of another GPU's measurements (e.g. `reports/device/h200-2026-11-28`) is read the same way as ours on the H100."""
    raw = pd.read_json(path, lines=True)
    vision = raw["kind"] == "vision"
    configs = path.parent / "hf_configs"
    df = pd.DataFrame(
        {"gpu": _canonical(raw["device"].astype(str)), "precision": raw["precision"], "mode": raw["mode"],
         "optimizer": raw["optimizer"], "model_name": raw["model"], "family": raw["model"].map(_family),
         "graph_kind": np.where(vision, "torchvision", "hf_config"),
         "graph_ref": np.where(vision, raw["model"], [str(configs / f"{m}.json") for m in raw["model"]]),
         "batch_size": raw["batch_size"].astype(int), "seq_len": raw["seq_len"],
         "input_shape": vision.map({True: "[3, 224, 224]", False: None}), "num_gpus": 1, "time_s": raw["step_s"],
         "time_std": np.nan, "software": "pytorch-" + raw["torch"].astype(str).str.split("+").str[0]}
    )  # fmt: skip
    return _finish(df.assign(source=source), MODEL_COLUMNS)


_MEASURED_VECTOR_OPS = {"add": "elementwise", "gelu": "elementwise", "softmax": "softmax", "layernorm_fwd": "norm"}


def load_measured_ops(path: Path, *, source: str, gpu: str) -> pd.DataFrame:
    """Single ops in `measure_ops.py`'s format (forward only: GEMM, conv2d with same padding and vector ops; fp32
    with TF32 off, tf32, and plain fp16/bf16 tensors) on the GPU type `gpu`, as op rows.

    measure_ops.py turned TF32 off for cuDNN too in its fp32 rows, which no precision of ours means (fp32 keeps
    PyTorch's default, TF32 convolutions): a convolution's tf32 row is what our fp32 (and tf32) runs, so it is
    kept as fp32 and its TF32-off row is left out."""
    raw = pd.read_csv(path)
    is_conv = raw["op"] == "conv2d_fwd"
    raw = raw[~(is_conv & (raw["precision"] == "fp32"))].copy()
    raw.loc[(raw["op"] == "conv2d_fwd") & (raw["precision"] == "tf32"), "precision"] = "fp32"
    size = raw["precision"].map(DTYPE_BYTES).astype(float)
    frames = []
    gemm = raw["op"] == "gemm"
    flops, bytes_ = gemm_cost(batch=1, m=raw["m"], k_in=raw["k"], n_out=raw["n"], dtype_bytes=size)
    frames.append(pd.DataFrame({"op_class": "gemm", "flops": flops, "bytes": bytes_, "out_numel": raw["m"] * raw["n"],
                                "lead_dim": raw["m"]})[gemm])  # fmt: skip
    conv = raw["op"] == "conv2d_fwd"
    flops, bytes_, out_numel = conv2d_cost(batch=raw["n"], c_in=raw["c"], c_out=raw["k"], kernel=raw["r"],
                                           size=raw["hw"], stride=raw["stride"], padding=raw["r"] // 2,
                                           dtype_bytes=size)  # fmt: skip
    frames.append(pd.DataFrame({"op_class": "conv", "flops": flops, "bytes": bytes_, "out_numel": out_numel,
                                "lead_dim": raw["n"]})[conv])  # fmt: skip
    vector = raw["op"].isin(list(_MEASURED_VECTOR_OPS))
    frames.append(pd.DataFrame({"op_class": raw["op"].map(_MEASURED_VECTOR_OPS), "flops": raw["numel"],
                                "bytes": raw["bytes"], "out_numel": raw["numel"], "lead_dim": 1.0})[vector])  # fmt: skip
    df = pd.concat(frames).sort_index()
    spec = find_gpu(gpu)
    if spec is None:
        raise ValueError(f"{path}: GPU type {gpu!r} is not in the catalogue")
    df = df.assign(source=source, gpu=spec.name, precision=raw["precision"],
                   mode="fwd", dtype_bytes=size, time_s=raw["time_s"], time_std=np.nan, software="pytorch-2.11")  # fmt: skip
    return _finish(df, OP_COLUMNS)


def load_present(loaders: Mapping[str, Callable[[Path], pd.DataFrame]], root: Path) -> list[pd.DataFrame]:
    """The frames of those `loaders` whose files are under `root` (the others are logged and skipped: the
    repository's sample data has no hold-out rows)."""
    frames = []
    for name, loader in loaders.items():
        try:
            frames.append(loader(root))
        except FileNotFoundError:
            log.info("no %s rows under %s", name, root)
    return frames


@dataclass(frozen=True)
class OwnGpu:
    """One GPU type measured by our own scripts (`runtime/offpeak-h100/measure_models.py` and `measure_ops.py`):
    real whole steps with today's PyTorch, and single ops. The shipped model trains on every one of them; the
    evaluation leaves each out in turn (`offpeak eval-predictor`'s modern slices)."""

    gpu: str  # catalogue name (prefix) of the GPU type
    folder: Callable[[Path], Path]  # where its files are, given the runtime data root
    stem: str  # file names: <stem>_models.jsonl, <stem>_ops.csv

    @property
    def source(self) -> str:
        return f"offpeak-{self.stem}"

    @property
    def ops_source(self) -> str:
        return f"offpeak-{self.stem}-ops"

    def steps_file(self, root: Path) -> Path:
        return self.folder(root) / f"{self.stem}_models.jsonl"

    def ops_file(self, root: Path) -> Path:
        return self.folder(root) / f"{self.stem}_ops.csv"

    def model_rows(self, root: Path) -> pd.DataFrame:
        return load_measured_steps(self.steps_file(root), source=self.source)

    def op_rows(self, root: Path) -> pd.DataFrame:
        return load_measured_ops(self.ops_file(root), source=self.ops_source, gpu=self.gpu)


def _device_report(name: str) -> Path:
    """A measurement folder committed under `reports/device/` of a source checkout (absent from a wheel)."""
    return Path(__file__).resolve().parents[2] / "reports" / "device" / name


# Our own measurements, by GPU type. The H100's are part of the shared data; the H200's were measured on a GPU
# lent to a development session and are committed with their provenance (their README), so they are read from the
# checkout whatever data root is in use.
OWN_GPUS: dict[str, OwnGpu] = {
    "H100": OwnGpu(gpu="H100", folder=lambda root: root / "offpeak-h100", stem="h100"),
    "H200": OwnGpu(gpu="H200", folder=lambda root: _device_report("h200-2026-11-28"), stem="h200"),
}


def own_sources() -> set[str]:
    """The `source` of every row of ours (`OWN_GPUS`): whole steps and single ops."""
    return {name for own in OWN_GPUS.values() for name in (own.source, own.ops_source)}


OP_LOADERS: dict[str, Callable[[Path], pd.DataFrame]] = {
    "neusight-op": load_neusight_ops,
    "justus2018": load_justus_layers,
    "deepbench": load_deepbench,
}
MODEL_LOADERS: dict[str, Callable[[Path], pd.DataFrame]] = {
    "ryujaehun": load_ryujaehun,
    "lambda-tf": load_lambda_tf,
    "lambda-pytorch": load_lambda_pytorch,
    "neusight-model": load_neusight_models,
    "justus2018-vgg16": load_justus_vgg16,
    "jcjohnson-torch7": load_jcjohnson,
}


def load_all(root: Path | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(op rows, model rows) from every dataset."""
    root = root or runtime_dir()
    ops = pd.concat([fn(root) for fn in OP_LOADERS.values()], ignore_index=True)
    models = pd.concat([fn(root) for fn in MODEL_LOADERS.values()], ignore_index=True)
    return ops, models


def graph_args_of(row: pd.Series) -> dict[str, object]:
    """`extract_graph` keyword arguments for one model-level row."""
    args: dict[str, object] = {
        "batch_size": int(row["batch_size"]), "precision": str(row["precision"]),
        "mode": "train" if row["mode"] == "train" else "inference", "optimizer": str(row["optimizer"]),
    }  # fmt: skip
    if row["graph_kind"] == "graph_file":
        return {"graph_file": str(row["graph_ref"])}
    if row["graph_kind"] == "torchvision":
        args["torchvision"] = row["graph_ref"]
        if isinstance(row["input_shape"], str):
            args["input_shape"] = json.loads(row["input_shape"])
    else:
        args["hf_config"] = row["graph_ref"]
        if pd.notna(row["seq_len"]):
            args["seq_len"] = int(row["seq_len"])
    return args
