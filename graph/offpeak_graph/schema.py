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
from typing import Any, Literal, get_args

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
            raise GraphError("schema", f"{_short(schema)} is not supported; expected {SCHEMA_VERSION!r}")
        try:
            batch_size = int(data["batch_size"])
        except (TypeError, ValueError, OverflowError) as e:
            raise GraphError("batch_size", f"must be an integer (got {_short(data['batch_size'])})") from e
        return cls(
            framework=data["framework"],
            model_name=data.get("model_name", ""),
            model_family=data.get("model_family", ""),
            batch_size=batch_size,
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
    if not isinstance(columns, dict):
        raise GraphError("ops", "must be an object of op columns (docs/model-graph.md)")
    missing = [c for c in ("id", "type") if c not in columns]
    if missing:
        raise GraphError(f"ops.{missing[0]}", f"is required (a column of every op; missing: {', '.join(missing)})")
    present = [c for c in _OP_COLUMNS if c in columns]
    for col in present:
        if not isinstance(columns[col], list):
            raise GraphError(f"ops.{col}", "must be a list (one entry per op)")
    n = len(columns["id"])
    for col in present:
        if len(columns[col]) != n:
            raise GraphError(f"ops.{col}", f"has {len(columns[col])} entries, expected {n} (one per op)")
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

Mode = Literal["train", "inference"]
# How a step runs its numbers (the training loop's setting, the way people train with PyTorch):
#   fp32: fp32 weights and math with PyTorch's defaults: TF32 off for matmul, on for cuDNN convolutions
#   tf32: fp32 weights, TF32 tensor cores for matmul too (torch.backends.cuda.matmul.allow_tf32 = True)
#   fp16: automatic mixed precision (torch.autocast fp16, fp32 master weights, GradScaler)
#   bf16: automatic mixed precision (torch.autocast bf16, fp32 master weights, no scaler)
Precision = Literal["fp32", "tf32", "fp16", "bf16"]
# those the memory model knows
GraphOptimizer = Literal["sgd", "sgd-nomomentum", "adam", "adamw", "rmsprop", "adagrad", "none"]
MODES: tuple[str, ...] = get_args(Mode)
PRECISIONS: tuple[str, ...] = get_args(Precision)
PRECISION_HELP = ("fp32: fp32 with PyTorch's defaults (TF32 off for matmul, on for cuDNN convolutions); "
                  "tf32: fp32 weights, TF32 tensor cores for matmul too; fp16 / bf16: automatic mixed precision "
                  "(autocast, fp32 master weights; GradScaler for fp16)")
OPTIMIZERS: tuple[str, ...] = get_args(GraphOptimizer)
MAX_OPS = 200_000
MAX_BATCH_SIZE = 1 << 24
MAX_NUMBER = 1e30  # far above any real FLOP/byte count, far below float overflow when summed
MAX_DIM = 1 << 40
MAX_RANK = 64  # dimensions of one tensor (PyTorch allows 64; real graphs have up to ~8)
MAX_NAME_CHARS = 256  # the graph's own names (model, family, framework, extraction): a sample stores its family


class GraphError(ValueError):
    """A model graph that is not usable: `field` names where (`ops.attrs[3].p`), `reason` says why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field} {reason}")
        self.field, self.reason = field, reason


def _check_number(value: Any, field_name: str, *, integer: bool = False, maximum: float = MAX_NUMBER) -> None:
    kind = type(value)
    if (kind is int or (kind is float and not integer)) and 0 <= value <= maximum:
        return  # the common case, fast (NaN fails the comparison)
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        raise GraphError(field_name, f"must be {'an integer' if integer else 'a number'} (got {_short(value)})")
    if not 0 <= value <= maximum:  # NaN too; an integer is compared exactly, never converted (it may not fit a float)
        raise GraphError(field_name, f"must be a finite number in [0, {maximum:g}] (got {_short(value)})")


def _short(value: Any) -> str:
    """A value as a message quotes it: at most 40 characters (a 4,000-digit integer is not echoed whole)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**40:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_shapes(shapes: Any, field_name: str) -> None:
    if not isinstance(shapes, list):
        raise GraphError(field_name, "must be a list of shapes")
    for shape in shapes:
        if not isinstance(shape, list):
            raise GraphError(field_name, "must be a list of integer lists")
        if len(shape) > MAX_RANK:
            raise GraphError(field_name, f"has a shape of {len(shape)} dimensions; at most {MAX_RANK}")
        numel = 1
        for dim in shape:
            _check_number(dim, field_name, integer=True, maximum=MAX_DIM)
            numel *= dim
        if numel > MAX_NUMBER:  # each dimension may be large, not their product: it is summed as a float
            raise GraphError(field_name, f"has a shape of more than {MAX_NUMBER:g} elements")


def _check_choice(value: Any, field_name: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise GraphError(field_name, f"must be one of {', '.join(allowed)} (got {_short(value)})")


def parse_graph(data: Any, *, max_ops: int = MAX_OPS) -> ModelGraph:
    """A graph from its JSON form (decoded), validated (`validate_graph`); GraphError naming the field for anything
    that is not a usable graph, whatever its shape (a reader from outside needs no other exception)."""
    if not isinstance(data, dict):
        raise GraphError("graph", "must be a model-graph JSON object")
    try:
        graph = ModelGraph.from_dict(data)
    except GraphError:
        raise
    except KeyError as e:
        raise GraphError(str(e.args[0]) if e.args else "graph", "is required") from e
    except (ValueError, TypeError, AttributeError, OverflowError) as e:
        raise GraphError("graph", f"is not a model graph: {str(e)[:200]}") from e
    return validate_graph(graph, max_ops=max_ops)


def validate_graph(graph: ModelGraph, *, max_ops: int = MAX_OPS) -> ModelGraph:
    """Check that a graph's numbers are finite and non-negative, its enums known, its op attributes typed and its
    size sane; the graph, or GraphError naming the first bad field (`ops.flops[3]`)."""
    _check_choice(graph.mode, "mode", MODES)
    _check_choice(graph.precision, "precision", PRECISIONS)
    _check_choice(graph.optimizer, "optimizer", OPTIMIZERS)
    for name in ("framework", "model_name", "extraction", "model_family"):
        if not isinstance(getattr(graph, name), str) or len(getattr(graph, name)) > MAX_NAME_CHARS:
            raise GraphError(name, f"must be a string of at most {MAX_NAME_CHARS} characters")
    if isinstance(graph.batch_size, bool) or not isinstance(graph.batch_size, int) or not (
            1 <= graph.batch_size <= MAX_BATCH_SIZE):  # fmt: skip
        raise GraphError("batch_size", f"must be an integer in [1, {MAX_BATCH_SIZE}] "
                                       f"(got {_short(graph.batch_size)})")
    if graph.seq_len is not None:
        _check_number(graph.seq_len, "seq_len", integer=True, maximum=MAX_DIM)
    if graph.input_shape is not None:
        _check_shapes([graph.input_shape], "input_shape")
    if not graph.ops:
        raise GraphError("ops", "must not be empty")
    if len(graph.ops) > max_ops:
        raise GraphError("ops", f"has {len(graph.ops)} entries; at most {max_ops}")
    for i, op in enumerate(graph.ops):
        _check_op(op, i)
    if not math.isfinite(graph.total_flops_forward) or graph.total_flops_forward > MAX_NUMBER:
        raise GraphError("ops.flops", "sum to more than a finite total")
    return graph


def _check_op(op: Op, i: int) -> None:
    if isinstance(op.id, bool) or not isinstance(op.id, int):
        raise GraphError(f"ops.id[{i}]", "must be an integer")
    for name in ("type", "name", "framework_type", "dtype"):
        if not isinstance(getattr(op, name), str):
            raise GraphError(f"ops.{name}[{i}]", "must be a string")
    if not isinstance(op.attrs, dict) or not all(isinstance(k, str) for k in op.attrs):
        raise GraphError(f"ops.attrs[{i}]", "must be an object")
    if not isinstance(op.inputs, list) or not all(
            isinstance(j, int) and not isinstance(j, bool) for j in op.inputs):  # fmt: skip
        raise GraphError(f"ops.inputs[{i}]", "must be a list of op ids (integers)")
    _check_number(op.flops, f"ops.flops[{i}]")
    for name in ("bytes_read", "bytes_written", "params"):
        _check_number(getattr(op, name), f"ops.{name}[{i}]")
    _check_shapes(op.input_shapes, f"ops.input_shapes[{i}]")
    _check_shapes(op.output_shapes, f"ops.output_shapes[{i}]")
    rules = ATTR_RULES.get(op.type)
    if rules is not None and op.attrs:
        _check_attrs(op.attrs, rules, i)


# --- op attributes: the keys the extractors write (docs/model-graph.md), typed per op kind. Keys not listed are
# kept as they are (a new extractor may add some); a listed key of the wrong type or range is refused, since the
# predictor reads them (a Dropout's `p`, a Linear's in/out features) and must never fail on them. Plain Python: the
# analysis pod runs this package from a zipapp, without compiled libraries.


@dataclass(frozen=True, slots=True)
class AttrRule:
    """What one attribute may hold: null, or a value of `kind` within [minimum, maximum]; with `many` a list of such
    values too, with `text` a string too."""

    kind: Literal["integer", "number", "boolean"]
    minimum: float | None = None
    maximum: float | None = None
    many: bool = False
    text: bool = False

    def problem(self, value: Any) -> str | None:
        """Why `value` breaks the rule, or None."""
        if value is None or (self.text and isinstance(value, str)) or self._fits(value):
            return None
        if self.many and isinstance(value, list) and all(self._fits(v) for v in value):
            return None
        return f"must be {self.describe()} (got {_short(value)})"

    def _fits(self, value: Any) -> bool:
        if self.kind == "boolean":
            return isinstance(value, bool)
        if isinstance(value, bool) or not isinstance(value, int if self.kind == "integer" else (int, float)):
            return False
        low = -math.inf if self.minimum is None else self.minimum
        high = math.inf if self.maximum is None else self.maximum
        return low <= value <= high  # NaN fails; an integer is compared exactly

    def describe(self) -> str:
        one = {"integer": "an integer", "number": "a number", "boolean": "true or false"}[self.kind]
        if self.minimum is not None and self.maximum is not None:
            low, high = (int(b) if self.kind == "integer" else b for b in (self.minimum, self.maximum))
            one += f" in [{low}, {high}]"
        return " or ".join([one] + (["a list of them"] if self.many else []) + (["a string"] if self.text else
                                                                                         []))  # fmt: skip

    def json_schema(self) -> dict[str, Any]:
        one: dict[str, Any] = {"type": self.kind}
        if self.minimum is not None:
            one.update(minimum=self.minimum, maximum=self.maximum)
        options = [one, *([{"type": "array", "items": one}] if self.many else []),
                   *([{"type": "string"}] if self.text else []), {"type": "null"}]  # fmt: skip
        return {"anyOf": options}


_SIZE = AttrRule("integer", 0, MAX_DIM)
_SIZES = AttrRule("integer", 0, MAX_DIM, many=True)  # one per spatial dimension, or one for all
_FLAG = AttrRule("boolean")
_FRACTION = AttrRule("number", 0.0, 1.0)
_INPLACE = {"inplace": _FLAG}
_MATMUL = {"m": _SIZE, "k": _SIZE, "n": _SIZE}  # (m x k) @ (k x n), as a stand-alone matmul or aten.addmm records it
_CONV = {**_INPLACE, "in_channels": _SIZE, "out_channels": _SIZE, "groups": AttrRule("integer", 1, MAX_DIM),
         "kernel": _SIZES, "stride": _SIZES, "dilation": _SIZES, "output_padding": _SIZES,
         "padding": AttrRule("integer", 0, MAX_DIM, many=True, text=True),  # "same" in graphs before padding_mode
         "transposed": _FLAG, "bias": _FLAG}  # fmt: skip
_NORM = {**_INPLACE, "num_features": _SIZE, "num_groups": _SIZE, "num_channels": _SIZE, "normalized_shape": _SIZES,
         "eps": _FRACTION}  # fmt: skip
_RECURRENT = {**_INPLACE, "input_size": _SIZE, "hidden_size": _SIZE, "num_layers": _SIZE, "proj_size": _SIZE,
              "bidirectional": _FLAG, "batch_first": _FLAG}  # fmt: skip
ATTR_RULES: dict[str, dict[str, AttrRule]] = {
    OpType.LINEAR: {**_INPLACE, **_MATMUL, "in_features": _SIZE, "out_features": _SIZE, "bias": _FLAG},
    OpType.DROPOUT: {**_INPLACE, "p": _FRACTION},
    **dict.fromkeys((OpType.CONV1D, OpType.CONV2D, OpType.CONV3D, OpType.CONV_TRANSPOSE2D), _CONV),
    **dict.fromkeys((OpType.BATCHNORM, OpType.LAYERNORM, OpType.GROUPNORM, OpType.RMSNORM), _NORM),
    OpType.EMBEDDING: {**_INPLACE, "num_embeddings": _SIZE, "embedding_dim": _SIZE},
    **dict.fromkeys((OpType.LSTM, OpType.GRU, OpType.RNN), _RECURRENT),
    OpType.SDPA: {**_INPLACE, "heads": _SIZE, "head_dim": _SIZE, "seq_q": _SIZE, "seq_k": _SIZE, "causal": _FLAG},
    OpType.MATMUL: {**_INPLACE, **_MATMUL}, OpType.BMM: {**_INPLACE, **_MATMUL},
    OpType.SOFTMAX: {**_INPLACE, "dim": AttrRule("integer", -MAX_RANK, MAX_RANK)},
}  # fmt: skip


def _check_attrs(attrs: dict[str, Any], rules: dict[str, AttrRule], i: int) -> None:
    """The attributes of op `i` against its kind's rules; GraphError naming the attribute (`ops.attrs[3].p`)."""
    for name, value in attrs.items():
        rule = rules.get(name)
        why = rule.problem(value) if rule is not None else None
        if why is not None:
            raise GraphError(f"ops.attrs[{i}].{name}", why)


def attrs_schema() -> dict[str, Any]:
    """JSON Schema of the typed op attributes, by op type (for the predictor's OpenAPI document)."""
    return {str(op_type): {"type": "object", "properties": {name: rule.json_schema() for name, rule in rules.items()}}
            for op_type, rules in ATTR_RULES.items()}  # fmt: skip
