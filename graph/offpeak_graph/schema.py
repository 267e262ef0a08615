"""In-memory model graph and its JSON form (documented in docs/model-graph.md).

This is the contract between the extractor (writes it), the predictor (reads it) and the operator (moves it
around in a ConfigMap). Keep it plain data: no torch imports here.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

SCHEMA_VERSION = "offpeak.io/model-graph/v1"


class OpType(StrEnum):
    """Normalised operator types. Framework-specific names map onto these; the rest are OTHER."""

    CONV1D = "conv1d"
    CONV2D = "conv2d"
    CONV3D = "conv3d"
    CONV_TRANSPOSE2D = "conv_transpose2d"
    LINEAR = "linear"
    MATMUL = "matmul"
    BMM = "bmm"
    BATCHNORM = "batchnorm"
    LAYERNORM = "layernorm"
    GROUPNORM = "groupnorm"
    RMSNORM = "rmsnorm"
    EMBEDDING = "embedding"
    SOFTMAX = "softmax"
    SDPA = "sdpa"  # scaled-dot-product attention
    RELU = "relu"
    GELU = "gelu"
    SILU = "silu"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    MAXPOOL = "maxpool"
    AVGPOOL = "avgpool"
    ADAPTIVE_AVGPOOL = "adaptive_avgpool"
    ADD = "add"
    MUL = "mul"
    SUB = "sub"
    DIV = "div"
    POW = "pow"
    DROPOUT = "dropout"
    LSTM = "lstm"
    GRU = "gru"
    RNN = "rnn"
    CONCAT = "concat"
    RESHAPE = "reshape"  # view/reshape/flatten/permute/transpose/contiguous: data movement only
    REDUCE = "reduce"  # mean/sum/max over dims
    LOSS = "loss"
    ELEMENTWISE = "elementwise"  # other known pointwise maths: exp, rsqrt, where, masked_fill, clamp, casts...
    FILL = "fill"  # zeros/ones/full/arange: writes memory without reading an input
    INDEX = "index"  # gather/index_select/scatter/index: data-dependent memory access
    INPUT = "input"
    OTHER = "other"


@dataclass(slots=True)
class Op:
    """One operator, in topological order. `flops` are forward FLOPs (multiply-add = 2 FLOPs)."""

    id: int
    type: str  # an OpType value
    name: str = ""  # module path or node name in the source framework
    framework_type: str = ""  # the framework's own op name (kept always; essential for OTHER)
    attrs: dict[str, Any] = field(default_factory=dict)
    inputs: list[int] = field(default_factory=list)  # ids of producer ops
    input_shapes: list[list[int]] = field(default_factory=list)
    output_shapes: list[list[int]] = field(default_factory=list)
    dtype: str = "float32"
    flops: float = 0.0
    bytes_read: int = 0
    bytes_written: int = 0
    params: int = 0


@dataclass(slots=True)
class ModelGraph:
    """A whole model at one batch size/precision. Graph-level totals are derived from `ops`."""

    framework: str  # "pytorch" | "onnx" | "synthetic"
    model_name: str
    batch_size: int
    ops: list[Op]
    seq_len: int | None = None
    input_shape: list[int] | None = None  # per-sample input shape, e.g. [3, 224, 224]
    precision: str = "fp32"  # one of PRECISIONS (what each means: see there)
    mode: str = "train"  # train | inference
    optimizer: str = "adam"  # sgd | adam | adamw | none
    extraction: str = ""  # which path produced it: "fx-meta", "hooks", "onnx", ...
    model_family: str = ""  # e.g. "resnet", "bert", "gpt2": used for grouped evaluation
    schema: str = SCHEMA_VERSION

    @property
    def total_params(self) -> int:
        return sum(op.params for op in self.ops)

    @property
    def total_flops_forward(self) -> float:
        return float(sum(op.flops for op in self.ops))

    @property
    def unknown_ops(self) -> dict[str, int]:
        """Framework op names that normalised to OTHER, with their counts."""
        return dict(Counter(op.framework_type for op in self.ops if op.type == OpType.OTHER))

    def content_hash(self) -> str:
        """Stable hash of the graph's content (not of its name), so equal models share predictions."""
        body = json.dumps(_ops_to_columns(self.ops), sort_keys=True, separators=(",", ":"))
        head = f"{self.batch_size}|{self.seq_len}|{self.precision}|{self.mode}|{self.optimizer}"
        return "sha256:" + hashlib.sha256((head + body).encode()).hexdigest()

    def summary(self) -> dict[str, Any]:
        return {
            "model": self.model_name,
            "framework": self.framework,
            "extraction": self.extraction,
            "ops": len(self.ops),
            "flops_forward": self.total_flops_forward,
            "params": self.total_params,
            "batch_size": self.batch_size,
            "seq_len": self.seq_len,
            "precision": self.precision,
            "unknown_ops": self.unknown_ops,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON form: graph header plus ops stored column-wise (compact: one key per column, not per op)."""
        return {
            "schema": self.schema,
            "framework": self.framework,
            "model_name": self.model_name,
            "model_family": self.model_family,
            "batch_size": self.batch_size,
            "seq_len": self.seq_len,
            "input_shape": self.input_shape,
            "precision": self.precision,
            "mode": self.mode,
            "optimizer": self.optimizer,
            "extraction": self.extraction,
            "total_params": self.total_params,
            "total_flops_forward": self.total_flops_forward,
            "content_hash": self.content_hash(),
            "unknown_ops": self.unknown_ops,
            "ops": _ops_to_columns(self.ops),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelGraph:
        schema = data.get("schema")
        if schema != SCHEMA_VERSION:
            raise ValueError(f"unsupported model-graph schema {schema!r}; expected {SCHEMA_VERSION!r}")
        return cls(
            framework=data["framework"],
            model_name=data.get("model_name", ""),
            model_family=data.get("model_family", ""),
            batch_size=int(data["batch_size"]),
            seq_len=data.get("seq_len"),
            input_shape=data.get("input_shape"),
            precision=data.get("precision", "fp32"),
            mode=data.get("mode", "train"),
            optimizer=data.get("optimizer", "adam"),
            extraction=data.get("extraction", ""),
            ops=_ops_from_columns(data["ops"]),
        )


_OP_COLUMNS: tuple[str, ...] = (
    "id", "type", "name", "framework_type", "attrs", "inputs", "input_shapes", "output_shapes",
    "dtype", "flops", "bytes_read", "bytes_written", "params",
)  # fmt: skip


def _ops_to_columns(ops: list[Op]) -> dict[str, list[Any]]:
    return {col: [getattr(op, col) for op in ops] for col in _OP_COLUMNS}


def _ops_from_columns(columns: dict[str, list[Any]]) -> list[Op]:
    missing = [c for c in ("id", "type") if c not in columns]
    if missing:
        raise ValueError(f"model graph ops lack required columns: {', '.join(missing)}")
    n = len(columns["id"])
    present = [c for c in _OP_COLUMNS if c in columns]
    for col in present:
        if len(columns[col]) != n:
            raise ValueError(f"model graph column {col!r} has {len(columns[col])} entries, expected {n}")
    return [Op(**{col: columns[col][i] for col in present}) for i in range(n)]


def save_graph(graph: ModelGraph, path: str | Path) -> None:
    """Write JSON; a path ending in .gz is gzip-compressed."""
    text = json.dumps(graph.to_dict(), separators=(",", ":"))
    path = Path(path)
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        path.write_text(text)


def load_graph(path: str | Path) -> ModelGraph:
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return ModelGraph.from_dict(json.loads(raw))


# --- validation: one check of a graph's numbers and enums, used by every reader (HTTP, CLI, samples, operator) ---

MODES = ("train", "inference")
# How a step runs its numbers (the training loop's setting, the way people train with PyTorch):
#   fp32: fp32 weights and math with PyTorch's defaults: TF32 off for matmul, on for cuDNN convolutions
#   tf32: fp32 weights, TF32 tensor cores for matmul too (torch.backends.cuda.matmul.allow_tf32 = True)
#   fp16: automatic mixed precision (torch.autocast fp16, fp32 master weights, GradScaler)
#   bf16: automatic mixed precision (torch.autocast bf16, fp32 master weights, no scaler)
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
PRECISION_HELP = ("fp32: fp32 with PyTorch's defaults (TF32 off for matmul, on for cuDNN convolutions); "
                  "tf32: fp32 weights, TF32 tensor cores for matmul too; fp16 / bf16: automatic mixed precision "
                  "(autocast, fp32 master weights; GradScaler for fp16)")
OPTIMIZERS = ("sgd", "sgd-nomomentum", "adam", "adamw", "rmsprop", "adagrad", "none")  # those the memory model knows
MAX_OPS = 200_000
MAX_BATCH_SIZE = 1 << 24
MAX_NUMBER = 1e30  # far above any real FLOP/byte count, far below float overflow when summed
MAX_DIM = 1 << 40


class GraphError(ValueError):
    """A model graph that is not usable; the message names the field."""


def _check_number(value: Any, field_name: str, *, integer: bool = False, maximum: float = MAX_NUMBER) -> None:
    kind = type(value)
    if (kind is int or (kind is float and not integer)) and 0 <= value <= maximum:
        return  # the common case, fast (NaN fails the comparison)
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        raise GraphError(f"{field_name} must be {'an integer' if integer else 'a number'} (got {value!r})")
    if not math.isfinite(value) or value < 0 or value > maximum:
        raise GraphError(f"{field_name} must be a finite number in [0, {maximum:g}] (got {value!r})")


def _check_shapes(shapes: Any, field_name: str) -> None:
    if not isinstance(shapes, list):
        raise GraphError(f"{field_name} must be a list of shapes")
    for shape in shapes:
        if not isinstance(shape, list):
            raise GraphError(f"{field_name} must be a list of integer lists")
        for dim in shape:
            _check_number(dim, field_name, integer=True, maximum=MAX_DIM)


def _check_choice(value: Any, field_name: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise GraphError(f"{field_name} must be one of {', '.join(allowed)} (got {value!r})")


def validate_graph(graph: ModelGraph, *, max_ops: int = MAX_OPS) -> ModelGraph:
    """Check that a graph's numbers are finite and non-negative, its enums known and its size sane; the graph,
    or GraphError naming the first bad field (`ops.flops[3]`)."""
    _check_choice(graph.mode, "mode", MODES)
    _check_choice(graph.precision, "precision", PRECISIONS)
    _check_choice(graph.optimizer, "optimizer", OPTIMIZERS)
    for name in ("framework", "model_name", "extraction", "model_family"):
        if not isinstance(getattr(graph, name), str):
            raise GraphError(f"{name} must be a string")
    if isinstance(graph.batch_size, bool) or not isinstance(graph.batch_size, int) or not (
            1 <= graph.batch_size <= MAX_BATCH_SIZE):  # fmt: skip
        raise GraphError(f"batch_size must be an integer in [1, {MAX_BATCH_SIZE}] (got {graph.batch_size!r})")
    if graph.seq_len is not None:
        _check_number(graph.seq_len, "seq_len", integer=True, maximum=MAX_DIM)
    if graph.input_shape is not None:
        _check_shapes([graph.input_shape], "input_shape")
    if not graph.ops:
        raise GraphError("ops must not be empty")
    if len(graph.ops) > max_ops:
        raise GraphError(f"ops has {len(graph.ops)} entries; at most {max_ops}")
    for i, op in enumerate(graph.ops):
        _check_op(op, i)
    if not math.isfinite(graph.total_flops_forward) or graph.total_flops_forward > MAX_NUMBER:
        raise GraphError("ops.flops sum to more than a finite total")
    return graph


def _check_op(op: Op, i: int) -> None:
    if isinstance(op.id, bool) or not isinstance(op.id, int):
        raise GraphError(f"ops.id[{i}] must be an integer")
    for name in ("type", "name", "framework_type", "dtype"):
        if not isinstance(getattr(op, name), str):
            raise GraphError(f"ops.{name}[{i}] must be a string")
    if not isinstance(op.attrs, dict) or not all(isinstance(k, str) for k in op.attrs):
        raise GraphError(f"ops.attrs[{i}] must be an object")
    if not isinstance(op.inputs, list) or not all(
            isinstance(j, int) and not isinstance(j, bool) for j in op.inputs):  # fmt: skip
        raise GraphError(f"ops.inputs[{i}] must be a list of op ids (integers)")
    _check_number(op.flops, f"ops.flops[{i}]")
    for name in ("bytes_read", "bytes_written", "params"):
        _check_number(getattr(op, name), f"ops.{name}[{i}]")
    _check_shapes(op.input_shapes, f"ops.input_shapes[{i}]")
    _check_shapes(op.output_shapes, f"ops.output_shapes[{i}]")
