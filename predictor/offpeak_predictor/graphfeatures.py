"""Model-graph features: the graph's ops as an `OpTable`, and graph-level (MDOT-style) summary features.

Pure functions of a `ModelGraph` (hardware independent) plus, in `step_features`, one GPU's roofline view.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from offpeak_graph.schema import ModelGraph
from offpeak_predictor.features import (
    BACKWARD_FACTOR, FREE, OP_CLASSES, DistinctOps, OpTable, distinct_ops, make_op_table, op_class,
)
from offpeak_predictor.gpus import GPU_FEATURES, GpuSpec
from offpeak_predictor.stepops import step_ops

_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4, "bool": 1}
_PRECISION_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}
# The least traffic an optimizer step can make per fp32 parameter (one fused kernel reads the parameter, its gradient
# and states and writes the parameter and states): the roofline baseline's lower bound.
OPTIMIZER_BYTES_PER_PARAM = {"none": 0.0, "sgd": 20.0, "sgd-nomomentum": 12.0, "adam": 32.0, "adamw": 32.0}
# What the optimizers people run really move per fp32 parameter. PyTorch's default (foreach, and the per-tensor loop
# before it) makes one pass over the tensors per arithmetic step: SGD with momentum = mul_ + add_ on the buffer and
# add_ into the parameter (8 + 12 + 12 bytes; without momentum only the last); Adam = lerp_, mul_, addcmul_, sqrt,
# div_, add_, addcdiv_ (72 bytes); AdamW adds the decoupled weight decay's mul_ on the parameter (80). TensorFlow's
# training ops are fused kernels.
PYTORCH_OPTIMIZER_BYTES = {"none": 0.0, "sgd": 32.0, "sgd-nomomentum": 12.0, "adam": 72.0, "adamw": 80.0}
GRAD_SCALER_BYTES_PER_PARAM = 8.0  # fp16 AMP: GradScaler unscales (reads and writes) every gradient once
# Eager frameworks pay a host-side cost per launched kernel, whatever the GPU: a step can never be faster than
# launching its kernels (forward op, ~2 backward kernels per op, optimizer kernels per parameter tensor).
HOST_SECONDS_PER_OP = 8e-6
HOST_SECONDS_PER_PARAM_OP = 2e-5


@dataclass(slots=True)
class GraphSummary:
    """A graph reduced to what the predictor needs; cached per content hash (`key`)."""

    key: str
    ops: OpTable  # non-free ops only
    params: float
    batch_size: int
    seq_len: int
    precision: str
    mode: str
    optimizer: str
    n_ops_total: int
    param_ops: int  # ops owning parameters (their tensors get optimizer kernels)
    flops_third: tuple[float, float, float]  # share of forward FLOPs in the first/middle/last third of the graph
    class_index: np.ndarray  # position of each op's class in OP_CLASSES
    backward_factor: np.ndarray  # BACKWARD_FACTOR per op
    flop_share: tuple[float, ...]  # share of forward FLOPs per class (OP_CLASSES order)
    distinct: DistinctOps  # `ops` with each repeated op once, for pricing on any GPU


def summarise(graph: ModelGraph, *, key: str | None = None, as_traced: bool = False) -> GraphSummary:
    """Reduce a graph to the ops a step runs (`stepops.step_ops`: attention as the fused kernel a GPU runs, the
    loss on the logits); `as_traced` keeps the traced forward as it is (ablations). `key` defaults to the graph's
    content hash."""
    classes, flops, nbytes, out_numel, lead, dtb = [], [], [], [], [], []
    default_bytes = _PRECISION_BYTES.get(graph.precision, 4)
    for op in graph.ops if as_traced else step_ops(graph):
        cls = op_class(str(op.type))
        if cls == FREE:
            continue
        shape = op.output_shapes[0] if op.output_shapes else []
        numel = float(math.prod(shape)) if shape else 1.0
        size = _DTYPE_BYTES.get(op.dtype, default_bytes)
        moved = float(op.bytes_read + op.bytes_written)
        if moved <= 0:
            moved = 2.0 * numel * size
        classes.append(cls)
        flops.append(float(op.flops))
        nbytes.append(moved)
        out_numel.append(numel)
        lead.append(float(shape[0]) if shape else 1.0)
        dtb.append(size)
    table = make_op_table(op_class=classes, flops=flops, bytes_=nbytes, out_numel=out_numel, lead_dim=lead,
                          dtype_bytes=dtb)  # fmt: skip
    total = float(table.flops.sum()) or 1.0
    class_index = np.array([OP_CLASSES.index(c) for c in table.op_class], dtype=np.int64)
    flop_share = np.bincount(class_index, weights=table.flops, minlength=len(OP_CLASSES)) / total
    thirds = np.array_split(table.flops, 3) if len(table) >= 3 else [table.flops, np.zeros(0), np.zeros(0)]
    return GraphSummary(
        key=key or graph.content_hash(), ops=table, params=float(graph.total_params), batch_size=int(graph.batch_size),
        seq_len=int(graph.seq_len or 0), precision=graph.precision, mode=graph.mode, optimizer=graph.optimizer,
        n_ops_total=len(graph.ops), param_ops=sum(1 for op in graph.ops if op.params > 0), flops_third=tuple(float(t.sum()) / total for t in thirds),  # type: ignore[arg-type]
        class_index=class_index, backward_factor=np.array([BACKWARD_FACTOR[c] for c in classes]),
        flop_share=tuple(float(x) for x in flop_share), distinct=distinct_ops(table),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class StepContext:
    """How a step runs, beyond the graph: overrides of the graph's own mode/optimizer/precision."""

    mode: str = "train"  # train | inference
    optimizer: str = "adam"  # sgd | adam | adamw | none
    precision: str = "fp32"
    num_gpus: int = 1
    framework: str = "pytorch"  # pytorch | tensorflow | torch7 | pytorch-ngc (benchmark rows only)
    # the software era the step is timed with, for its interval only (`intervals.software_era`): `pt2` (PyTorch 2 or
    # later, what a cluster's jobs run) or `` (benchmark rows of older software)
    era: str = "pt2"


def step_composition(
    *, summary: GraphSummary, op_seconds: np.ndarray, gpu: GpuSpec, ctx: StepContext
) -> tuple[float, np.ndarray]:
    """Analytic step time from predicted forward op times: forward + backward + optimizer + all-reduce,
    floored by the host time needed to launch every kernel (eager execution overlaps host and GPU).

    Returns (seconds, per-class seconds). Backward costs `BACKWARD_FACTOR` x forward per class.
    """
    train = ctx.mode == "train"
    per_op = op_seconds * (1.0 + summary.backward_factor) if train else op_seconds
    per_class = np.bincount(summary.class_index, weights=per_op, minlength=len(OP_CLASSES))
    total = float(per_op.sum())
    if train:
        total += summary.params * optimizer_bytes_per_param(ctx) / gpu.bandwidth_bytes
        if ctx.num_gpus > 1:  # ring all-reduce of fp32 gradients over an assumed 50 GB/s link
            total += 2.0 * (ctx.num_gpus - 1) / ctx.num_gpus * summary.params * 4.0 / 50e9
    return max(total, host_seconds(summary, ctx)), per_class


def optimizer_bytes_per_param(ctx: StepContext) -> float:
    """Bytes an optimizer step moves per parameter, as the step's framework implements the optimizer."""
    if ctx.mode != "train" or ctx.optimizer == "none":
        return 0.0
    if ctx.framework == "tensorflow":
        return OPTIMIZER_BYTES_PER_PARAM.get(ctx.optimizer, 32.0)
    scaler = GRAD_SCALER_BYTES_PER_PARAM if ctx.precision == "fp16" else 0.0
    return PYTORCH_OPTIMIZER_BYTES.get(ctx.optimizer, PYTORCH_OPTIMIZER_BYTES["adamw"]) + scaler


def host_seconds(summary: GraphSummary, ctx: StepContext) -> float:
    """Time to launch one step's kernels from the host."""
    if ctx.framework in ("tensorflow",):
        return 0.0  # graph mode: launches are not on the Python critical path
    train = ctx.mode == "train"
    seconds = len(summary.ops) * HOST_SECONDS_PER_OP * (3 if train else 1)
    if train and ctx.optimizer != "none":
        seconds += summary.param_ops * HOST_SECONDS_PER_PARAM_OP
    return seconds


STEP_FEATURES: tuple[str, ...] = (
    "log_base_step", "log_flops", "log_params", "log_ops", "log_batch", "log_seq", "train", "opt_sgd", "opt_adam",
    "half", "log_gpus", "fw_tf", "fw_torch7", "fw_ngc", "log_host_ratio",
    *(f"time_share_{c}" for c in OP_CLASSES), *(f"flop_share_{c}" for c in OP_CLASSES),
    "flops_first_third", "flops_last_third", *GPU_FEATURES,
)  # fmt: skip


def step_features(
    *, summary: GraphSummary, base_step: float, per_class: np.ndarray, gpu: GpuSpec, ctx: StepContext
) -> list[float]:
    """Graph-level features for the model-level correction (order: STEP_FEATURES)."""
    total_flops = float(summary.ops.flops.sum()) or 1.0
    flop_share = list(summary.flop_share)
    time_share = (per_class / max(per_class.sum(), 1e-12)).tolist()
    n_ops = len(summary.ops)
    train = ctx.mode == "train"
    return [
        math.log(base_step), math.log1p(total_flops), math.log1p(summary.params), math.log1p(n_ops),
        math.log(max(summary.batch_size, 1)), math.log1p(summary.seq_len), float(train),
        float(train and ctx.optimizer == "sgd"), float(train and ctx.optimizer in ("adam", "adamw")),
        float(ctx.precision in ("fp16", "bf16")), math.log(max(ctx.num_gpus, 1)),
        float(ctx.framework == "tensorflow"), float(ctx.framework == "torch7"), float(ctx.framework == "pytorch-ngc"),
        math.log(max(host_seconds(summary, ctx), 1e-6) / base_step),
        *time_share, *flop_share, summary.flops_third[0], summary.flops_third[2],
        # No whole-step row is tf32: the step-level correction sees it as the fp32 step it learned from; the TF32
        # matmul speed-up comes from the op level (base_step, time shares).
        *gpu.feature_vector("fp32" if ctx.precision == "tf32" else ctx.precision),
    ]  # fmt: skip
