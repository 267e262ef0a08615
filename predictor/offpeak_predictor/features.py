"""Per-operator cost features, computed with numpy for a whole graph at once.

Pure functions: no I/O, no models. The same features describe a benchmark row (one measured kernel) and an op of
a model graph, so a regressor trained on kernels can price a graph's ops on any GPU in the catalogue.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, get_args

import numpy as np
import numpy.typing as npt

from offpeak_predictor.gpus import GPU_FEATURES, GpuSpec
from offpeak_predictor.wire import OpClass

# Operator classes the op-level models distinguish (named by the wire, where collected op rows carry them). "free"
# ops (views, inputs) cost nothing.
OP_CLASSES: tuple[str, ...] = get_args(OpClass)
FREE = "free"

_CLASS_OF_TYPE: dict[str, str] = {
    **dict.fromkeys(("linear", "matmul", "bmm", "sdpa", "lstm", "gru", "rnn"), "gemm"),
    **dict.fromkeys(("conv1d", "conv2d", "conv3d", "conv_transpose2d"), "conv"),
    **dict.fromkeys(("batchnorm", "layernorm", "groupnorm", "rmsnorm"), "norm"),
    "softmax": "softmax",
    **dict.fromkeys(
        ("relu", "gelu", "silu", "tanh", "sigmoid", "add", "mul", "sub", "div", "pow", "dropout"), "elementwise"
    ),
    **dict.fromkeys(
        ("maxpool", "avgpool", "adaptive_avgpool", "concat", "reduce", "embedding", "loss", "other"), "memory"
    ),
    **dict.fromkeys(("reshape", "input"), FREE),
}

# Backward pass cost relative to forward, per class (grad wrt input + grad wrt weights for gemm/conv).
BACKWARD_FACTOR: dict[str, float] = {
    "gemm": 2.0, "conv": 2.0, "norm": 2.0, "softmax": 1.5, "elementwise": 1.5, "memory": 1.0, FREE: 0.0,
}  # fmt: skip

DTYPE_BYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp64": 8}

# A kernel launch never takes less than a few microseconds, whatever the GPU.
LAUNCH_FLOOR_S = 3e-6

OP_FEATURES: tuple[str, ...] = (
    *(f"cls_{c}" for c in OP_CLASSES),
    "log_flops", "log_bytes", "log_intensity", "log_t_compute", "log_t_memory", "log_t_base",
    "log_out_numel", "log_reduce_len", "log_lead_dim", "dtype_bytes",
)  # fmt: skip
ALL_OP_FEATURES: tuple[str, ...] = (*OP_FEATURES, *GPU_FEATURES)


def op_class(op_type: str) -> str:
    """Class of a normalised `OpType` value; unknown types are priced as memory-bound ops."""
    return _CLASS_OF_TYPE.get(op_type, "memory")


@dataclass(slots=True)
class OpTable:
    """Column arrays describing N ops (hardware independent)."""

    op_class: np.ndarray  # str, one of OP_CLASSES or FREE
    flops: np.ndarray  # forward FLOPs
    bytes: np.ndarray  # bytes moved by the forward kernel
    out_numel: np.ndarray
    reduce_len: np.ndarray  # MACs per output element (gemm/conv), 1 otherwise
    lead_dim: np.ndarray  # first output dimension (batch-like)
    dtype_bytes: np.ndarray

    def __len__(self) -> int:
        return len(self.flops)


def make_op_table(
    *,
    op_class: Sequence[str] | npt.NDArray[Any],
    flops: Sequence[float] | npt.NDArray[Any],
    bytes_: Sequence[float] | npt.NDArray[Any],
    out_numel: Sequence[float] | npt.NDArray[Any],
    lead_dim: Sequence[float] | npt.NDArray[Any],
    dtype_bytes: Sequence[float] | npt.NDArray[Any],
) -> OpTable:
    flops_a = np.asarray(flops, dtype=np.float64)
    out_a = np.maximum(np.asarray(out_numel, dtype=np.float64), 1.0)
    cls = np.asarray(op_class, dtype=object)
    mac = np.isin(cls, ("gemm", "conv"))
    reduce_len = np.where(mac, np.maximum(flops_a / (2.0 * out_a), 1.0), 1.0)
    return OpTable(
        op_class=cls,
        flops=flops_a,
        bytes=np.maximum(np.asarray(bytes_, dtype=np.float64), 1.0),
        out_numel=out_a,
        reduce_len=reduce_len,
        lead_dim=np.maximum(np.asarray(lead_dim, dtype=np.float64), 1.0),
        dtype_bytes=np.asarray(dtype_bytes, dtype=np.float64),
    )


@dataclass(frozen=True, slots=True)
class DistinctOps:
    """An op table's distinct ops (a repeated block once) and, for every op, its row among them.

    Hardware independent, so a graph summary works it out once (`graphfeatures.summarise`) and every GPU type it is
    priced on reuses it: sorting a 1,000-op table for its duplicates cost as much as pricing the distinct ops."""

    table: OpTable
    inverse: np.ndarray  # int [ops]: row of `table` that each op is priced by


_CLASS_CODE = {c: i for i, c in enumerate(OP_CLASSES)}


def distinct_ops(table: OpTable) -> DistinctOps:
    """Ops that every op price depends on alike (class, FLOPs, bytes, output size, batch-like dimension, dtype; the
    reduction length follows from them) are one row."""
    if not len(table):
        return DistinctOps(table, np.zeros(0, dtype=np.int64))
    codes = np.array([_CLASS_CODE.get(c, -1) for c in table.op_class], dtype=np.float64)
    keys = np.column_stack([codes, table.flops, table.bytes, table.out_numel, table.lead_dim, table.dtype_bytes])
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    sub = OpTable(op_class=table.op_class[first], flops=table.flops[first], bytes=table.bytes[first],
                  out_numel=table.out_numel[first], reduce_len=table.reduce_len[first],
                  lead_dim=table.lead_dim[first], dtype_bytes=table.dtype_bytes[first])  # fmt: skip
    return DistinctOps(sub, inverse.reshape(-1))


def roofline_times(table: OpTable, gpu: GpuSpec, precision: str) -> tuple[np.ndarray, np.ndarray]:
    """(compute seconds, memory seconds) of each op at the GPU's peak rates.

    gemm/conv use the units their precision runs on (`GpuSpec.peak_flops`: fp32 convolutions use TF32, fp32 matmul
    does not); other ops run on the plain FP32 units.
    """
    peak_vec = gpu.fp32_tflops * 1e12 * (2.0 if precision in ("fp16", "bf16") else 1.0)
    peak = np.where(table.op_class == "gemm", gpu.peak_flops(precision, op_class="gemm"), peak_vec)
    peak = np.where(table.op_class == "conv", gpu.peak_flops(precision, op_class="conv"), peak)
    return table.flops / peak, table.bytes / gpu.bandwidth_bytes


def base_times(table: OpTable, gpu: GpuSpec, precision: str) -> np.ndarray:
    """Roofline time plus launch floor: the reference every op model predicts a log-ratio against."""
    t_c, t_m = roofline_times(table, gpu, precision)
    return np.maximum(t_c, t_m) + LAUNCH_FLOOR_S


def op_feature_matrix(table: OpTable, gpu: GpuSpec, precision: str) -> np.ndarray:
    """Feature matrix (N x len(ALL_OP_FEATURES)) for the ops on one GPU at one precision."""
    n = len(table)
    t_c, t_m = roofline_times(table, gpu, precision)
    base = np.maximum(t_c, t_m) + LAUNCH_FLOOR_S
    onehot = np.stack([(table.op_class == c).astype(np.float64) for c in OP_CLASSES], axis=1)
    cols = np.column_stack(
        [
            np.log1p(table.flops),
            np.log(table.bytes),
            np.log1p(table.flops) - np.log(table.bytes),
            np.log(t_c + 1e-12),
            np.log(t_m + 1e-12),
            np.log(base),
            np.log(table.out_numel),
            np.log(table.reduce_len),
            np.log(table.lead_dim),
            table.dtype_bytes,
        ]
    )
    hw = np.tile(np.asarray(gpu.feature_vector(precision)), (n, 1))
    if precision == "tf32":  # tf32 differs from fp32 only in its GEMMs: every other op is described as in fp32
        not_gemm = table.op_class != "gemm"
        hw[not_gemm] = np.asarray(gpu.feature_vector("fp32"))
    return np.hstack([onehot, cols, hw])


# ---- analytic costs of the benchmark kernels (same conventions as the graph schema: MAC = 2 FLOPs) ----


def gemm_cost(*, batch: Any, m: Any, k_in: Any, n_out: Any, dtype_bytes: Any) -> tuple[Any, Any]:
    """(FLOPs, bytes) of `batch` independent (m x k_in) @ (k_in x n_out) products."""
    flops = 2.0 * batch * m * k_in * n_out
    bytes_ = dtype_bytes * batch * (m * k_in + k_in * n_out + m * n_out)
    return flops, bytes_


def conv2d_cost(
    *, batch: Any, c_in: Any, c_out: Any, kernel: Any, size: Any, stride: Any, padding: Any, dtype_bytes: Any,
    groups: Any = 1,
) -> tuple[Any, Any, Any]:  # fmt: skip
    """(FLOPs, bytes, output elements) of a square 2-D convolution; scalars or numpy/pandas columns. With `groups`
    (a depthwise convolution: groups = c_in) each output reads c_in / groups input channels, as the graph counts it."""
    out = np.maximum(np.floor((np.asarray(size) + 2 * np.asarray(padding) - kernel) / stride) + 1, 1)
    out_numel = batch * c_out * out * out
    per_group = c_in / groups
    flops = 2.0 * out_numel * per_group * kernel * kernel
    bytes_ = dtype_bytes * (batch * c_in * size * size + c_out * per_group * kernel * kernel + out_numel)
    return flops, bytes_, out_numel
