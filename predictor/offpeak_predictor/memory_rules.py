"""What one operator costs in GPU memory: its dtype under autocast, and what autograd keeps of it for backward.

Pure tables over `OpType` (plus a few `framework_type`s whose implementation is known to keep more), read from
PyTorch's own rules, not fitted: `tools/autograd/derivatives.yaml` says which tensors a backward formula needs
(`relu` keeps its result, `gelu` its input, `mul` each factor for the other's gradient, `max_pool2d` its input and
int64 indices...), and autocast's op lists say which ops compute in half precision (matmul-class ops) and which
are forced to fp32 (softmax, the norms, losses, `pow`). The memory simulation (`memory.py`) applies them op by op.
"""

from __future__ import annotations

from dataclasses import dataclass

from offpeak_graph.schema import Op, OpType

# Bytes per element of the dtypes a graph records (floats are re-derived from the precision, see `float_bytes`).
DTYPE_BYTES: dict[str, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
    "uint8": 1, "bool": 1,
}  # fmt: skip
FLOAT_DTYPES: frozenset[str] = frozenset({"float64", "float32", "float16", "bfloat16", ""})
AMP_PRECISIONS: frozenset[str] = frozenset({"fp16", "bf16"})
PRECISIONS: frozenset[str] = frozenset({"fp32", "tf32", "fp16", "bf16"})
FP32, HALF = 4, 2

# Autocast runs these in half precision: inputs are cast (a new tensor per op for activations, one cached copy
# per weight while autocast is on), the output is half.
LOWER_PRECISION: frozenset[str] = frozenset({
    OpType.CONV1D, OpType.CONV2D, OpType.CONV3D, OpType.CONV_TRANSPOSE2D, OpType.LINEAR, OpType.MATMUL, OpType.BMM,
    OpType.SDPA, OpType.LSTM, OpType.GRU, OpType.RNN,
})  # fmt: skip
# ... and these in fp32, whatever their inputs (half inputs are cast up): autocast's fp32 list.
FP32_ONLY: frozenset[str] = frozenset({
    OpType.SOFTMAX, OpType.LAYERNORM, OpType.GROUPNORM, OpType.RMSNORM, OpType.LOSS, OpType.POW,
})  # fmt: skip
# Ops that own weights (a tied weight is counted once in `params`, at its first use, yet every use casts it).
WEIGHTED: frozenset[str] = frozenset({
    OpType.CONV1D, OpType.CONV2D, OpType.CONV3D, OpType.CONV_TRANSPOSE2D, OpType.LINEAR, OpType.EMBEDDING,
    OpType.LSTM, OpType.GRU, OpType.RNN,
})  # fmt: skip


@dataclass(frozen=True, slots=True)
class SaveRule:
    """What autograd keeps of one op until its backward runs.

    inputs: "all" (every activation input, after autocast's cast), "partners" (an input is kept only when
    another input needs a gradient: `x * mask` keeps the mask, `x * y` keeps both), "masks" (only its integer or
    bool inputs: `where`, `masked_fill`), or "none".
    output: the op's own result is kept (relu, sigmoid, tanh, softmax, attention).
    extra_tensors: further output-sized tensors made inside a grouped module and kept, in the op's dtype;
    extra_input_tensors: the same in the input's dtype (tanh-GELU written out in Python keeps three).
    extra_bytes_per_element: small per-output-element side tensors (dropout's bool mask, max-pool's int64
    indices).
    amp_fp32: under autocast the module computes in fp32 because it calls an op of autocast's fp32 list
    (`pow` in the Python GELUs): half inputs are cast up and the result is fp32.
    """

    inputs: str = "none"
    output: bool = False
    extra_tensors: int = 0
    extra_input_tensors: int = 0
    extra_bytes_per_element: int = 0
    amp_fp32: bool = False


_NOTHING = SaveRule()
_INPUTS = SaveRule(inputs="all")
_OUTPUT = SaveRule(output=True)
_PARTNERS = SaveRule(inputs="partners")

_RULES: dict[str, SaveRule] = {
    # matmul-class: the activation input (the weight is a parameter, or its cached half copy under autocast)
    OpType.CONV1D: _INPUTS, OpType.CONV2D: _INPUTS, OpType.CONV3D: _INPUTS, OpType.CONV_TRANSPOSE2D: _INPUTS,
    OpType.LINEAR: _INPUTS, OpType.MATMUL: _PARTNERS, OpType.BMM: _PARTNERS,
    # fused attention (flash / memory-efficient): q, k, v, the output and a per-row logsumexp (O(seq), ignored)
    OpType.SDPA: SaveRule(inputs="all", output=True),
    # norms keep their input (and per-row statistics, small)
    OpType.BATCHNORM: _INPUTS, OpType.LAYERNORM: _INPUTS, OpType.GROUPNORM: _INPUTS, OpType.RMSNORM: _INPUTS,
    OpType.EMBEDDING: _INPUTS,  # the int64 indices
    OpType.SOFTMAX: _OUTPUT,
    OpType.RELU: _OUTPUT, OpType.SIGMOID: _OUTPUT, OpType.TANH: _OUTPUT,
    OpType.GELU: _INPUTS, OpType.SILU: _INPUTS, OpType.POW: _INPUTS,
    OpType.MAXPOOL: SaveRule(inputs="all", extra_bytes_per_element=8),
    OpType.AVGPOOL: _INPUTS, OpType.ADAPTIVE_AVGPOOL: _NOTHING,  # adaptive pooling only needs the input's shape
    OpType.ADD: _NOTHING, OpType.SUB: _NOTHING, OpType.MUL: _PARTNERS, OpType.DIV: _PARTNERS,
    OpType.DROPOUT: SaveRule(extra_bytes_per_element=1),
    OpType.LSTM: SaveRule(inputs="all", output=True, extra_tensors=4),  # cuDNN reserve space: the 4 gates
    OpType.GRU: SaveRule(inputs="all", output=True, extra_tensors=3),
    OpType.RNN: SaveRule(inputs="all", output=True, extra_tensors=1),
    OpType.CONCAT: _NOTHING, OpType.RESHAPE: _NOTHING, OpType.REDUCE: _NOTHING, OpType.FILL: _NOTHING,
    OpType.INDEX: _NOTHING, OpType.INPUT: _NOTHING,
    OpType.LOSS: _INPUTS, OpType.ELEMENTWISE: _INPUTS, OpType.OTHER: _INPUTS,
}  # fmt: skip

# Modules and ATen ops known by name, where the op type alone would mislead.
_BY_FRAMEWORK_TYPE: dict[str, SaveRule] = {
    # 0.5 * x * (1 + tanh(c * (x + 0.044715 * pow(x, 3)))): pow (fp32 under autocast) keeps x, tanh its fp32
    # result, the last mul both factors (0.5 * x in the input's dtype, 1 + tanh in fp32)
    "NewGELUActivation": SaveRule(inputs="all", extra_tensors=2, extra_input_tensors=1, amp_fp32=True),
    # 0.5 * x * (1 + tanh(x * c * (1 + 0.044715 * x * x))): six intermediates kept besides x
    "FastGELUActivation": SaveRule(inputs="all", extra_input_tensors=6),
    "QuickGELUActivation": SaveRule(inputs="all", extra_input_tensors=1),  # x * sigmoid(1.702 x)
    # torchvision's StochasticDepth: input * noise, noise is [batch, 1, 1, 1]: keeps only the (tiny) noise
    "StochasticDepth": _NOTHING,
    # ReLU6 is hardtanh, whose gradient reads its input (relu's reads its result)
    "ReLU6": _INPUTS, "Hardtanh": _INPUTS, "aten.hardtanh": _INPUTS, "aten.hardtanh_": _INPUTS,
    "aten.leaky_relu": _OUTPUT, "aten.leaky_relu_": _OUTPUT,
}
# Element-wise ATen ops (base names) whose gradient needs no input (negation, casts, rounding, comparisons...),
# or only the result, or only a mask; the rest keep their inputs.
_KEEP_NOTHING: frozenset[str] = frozenset({
    "neg", "_to_copy", "to", "type_as", "sign", "sgn", "floor", "ceil", "round", "trunc", "eq", "ne", "lt", "le",
    "gt", "ge", "logical_and", "logical_or", "logical_not", "bitwise_and", "bitwise_or", "bitwise_not",
    "bitwise_xor", "isnan", "isinf", "any", "all", "rand", "randn", "rand_like", "randn_like", "randint", "normal",
    "uniform", "floor_divide", "remainder", "fmod", "tril", "triu",
})  # fmt: skip
_KEEP_RESULT: frozenset[str] = frozenset({"exp", "exp2", "expm1", "sqrt", "rsqrt", "reciprocal", "elu"})
_KEEP_MASKS: frozenset[str] = frozenset({"where", "masked_fill"})
# T5's RMS norm (and its copies in other T5-derived models) is named a layer norm but written like LlamaRMSNorm.
for _name in ("T5LayerNorm", "MT5LayerNorm", "UMT5LayerNorm", "LongT5LayerNorm", "Pix2StructLayerNorm"):
    _BY_FRAMEWORK_TYPE[_name] = SaveRule(inputs="all", extra_tensors=1)
# RMSNorm fused by PyTorch keeps its input; the usual Python version (LlamaRMSNorm and its copies: x.float(),
# x * rsqrt(mean(x^2)), weight * that) also keeps the normalised fp32 tensor.
_FUSED_RMSNORM: frozenset[str] = frozenset({"RMSNorm", "F.rms_norm", "aten.rms_norm", "aten._fused_rms_norm"})


def save_rule(op: Op) -> SaveRule:
    """What autograd keeps of `op` in a training step (see `SaveRule`)."""
    known = _BY_FRAMEWORK_TYPE.get(op.framework_type)
    if known is not None:
        return known
    if op.type == OpType.RMSNORM and op.framework_type not in _FUSED_RMSNORM:
        return SaveRule(inputs="all", extra_tensors=1)
    if op.type == OpType.DROPOUT and float(op.attrs.get("p", 0.5) or 0.0) <= 0.0:
        return _NOTHING
    if op.type == OpType.ELEMENTWISE and op.framework_type.startswith("aten."):
        base = op.framework_type[5:].split(".")[0].rstrip("_")
        if base in _KEEP_NOTHING:
            return _NOTHING
        if base in _KEEP_RESULT:
            return _OUTPUT
        if base in _KEEP_MASKS:
            return SaveRule(inputs="masks")
    return _RULES.get(op.type, _INPUTS)


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def element_bytes(dtype: str) -> int:
    """Bytes of one element of a non-float dtype recorded in a graph (unknown: 4)."""
    return DTYPE_BYTES.get(dtype, 4)


def computes_fp32(op: Op) -> bool:
    """Autocast runs `op` in fp32 (its fp32 list, or a module built on one of its ops)."""
    return op.type in FP32_ONLY or save_rule(op).amp_fp32


def amp_bytes(op: Op, input_bytes: list[int], *, has_buffer_input: bool) -> int:
    """Bytes per element of a float op's output under autocast: half for matmul-class ops, fp32 for autocast's
    fp32 list and for embeddings (their weights are fp32); otherwise PyTorch's type promotion over the inputs
    (any fp32 input, including a buffer such as a bias or a mask, makes the result fp32)."""
    if op.type in LOWER_PRECISION:
        return HALF
    if computes_fp32(op) or op.type in (OpType.EMBEDDING, OpType.FILL, OpType.INPUT):
        return FP32
    if has_buffer_input or not input_bytes:
        return FP32
    return max(input_bytes)


def weight_numel(op: Op) -> int:
    """Elements of the weights `op` uses, counting a tied weight at every use (a language-model head that shares
    the embedding matrix has `params == 0` in the graph but still multiplies by, and casts, a whole matrix)."""
    if op.type == OpType.LINEAR:
        fin, fout = op.attrs.get("in_features"), op.attrs.get("out_features")
        if isinstance(fin, int) and isinstance(fout, int):
            return max(int(op.params), fin * fout)
    return int(op.params)


def is_inplace(op: Op) -> bool:
    """An op that writes into its input (`ReLU(inplace=True)`, `aten.relu_`, `x += y`): its result allocates
    nothing, it is the input's storage."""
    if op.attrs.get("inplace") is True:
        return True
    name = op.framework_type
    return name.startswith("aten.") and name.endswith("_") and not name.endswith("__")


def keeps_result(op: Op) -> bool:
    """Whether the op's gradient is computed from its result: then an in-place version keeps the (overwritten)
    storage itself; otherwise autograd keeps a copy of the input taken before it is overwritten."""
    rule = save_rule(op)
    return rule.output and rule.inputs == "none"


def gqa_heads(op: Op) -> tuple[int, int] | None:
    """(query heads, key/value heads) of an attention whose keys have fewer heads (grouped-query attention)."""
    if op.type != OpType.SDPA or len(op.input_shapes) < 2:
        return None
    q, k = op.input_shapes[0], op.input_shapes[1]
    if len(q) < 3 or len(k) < 3 or int(k[-3]) >= int(q[-3]):
        return None
    return int(q[-3]), int(k[-3])
