"""ONNX operator types -> `OpType`, and forward FLOPs from shapes (pure: no onnx import).

FLOPs follow the PyTorch path's convention: only matmul-class work (Conv, Gemm, MatMul, recurrent cells) is counted,
multiply-add = 2 FLOPs; element-wise and normalisation ops are described by their bytes.
"""

from __future__ import annotations

from math import prod
from typing import Any

from offpeak_graph.schema import OpType

_ONNX_TYPES: dict[str, OpType] = {
    "Gemm": OpType.LINEAR,
    "MatMul": OpType.MATMUL,
    "BatchNormalization": OpType.BATCHNORM,
    "LayerNormalization": OpType.LAYERNORM,
    "GroupNormalization": OpType.GROUPNORM,
    "RMSNormalization": OpType.RMSNORM,
    "SimplifiedLayerNormalization": OpType.RMSNORM,
    "Softmax": OpType.SOFTMAX,
    "LogSoftmax": OpType.SOFTMAX,
    "Attention": OpType.SDPA,
    "Relu": OpType.RELU,
    "LeakyRelu": OpType.RELU,
    "Clip": OpType.RELU,
    "Gelu": OpType.GELU,
    "FastGelu": OpType.GELU,
    "Silu": OpType.SILU,
    "Swish": OpType.SILU,
    "Tanh": OpType.TANH,
    "Sigmoid": OpType.SIGMOID,
    "MaxPool": OpType.MAXPOOL,
    "GlobalMaxPool": OpType.MAXPOOL,
    "AveragePool": OpType.AVGPOOL,
    "GlobalAveragePool": OpType.ADAPTIVE_AVGPOOL,
    "Add": OpType.ADD,
    "Sum": OpType.ADD,
    "Mul": OpType.MUL,
    "Sub": OpType.SUB,
    "Div": OpType.DIV,
    "Pow": OpType.POW,
    "Dropout": OpType.DROPOUT,
    "LSTM": OpType.LSTM,
    "GRU": OpType.GRU,
    "RNN": OpType.RNN,
    "Concat": OpType.CONCAT,
    "Reshape": OpType.RESHAPE,
    "Flatten": OpType.RESHAPE,
    "Transpose": OpType.RESHAPE,
    "Squeeze": OpType.RESHAPE,
    "Unsqueeze": OpType.RESHAPE,
    "Identity": OpType.RESHAPE,
    "Expand": OpType.RESHAPE,
    "Slice": OpType.RESHAPE,
    "Split": OpType.RESHAPE,
    "Pad": OpType.RESHAPE,
    "Tile": OpType.RESHAPE,
    "ReduceMean": OpType.REDUCE,
    "ReduceSum": OpType.REDUCE,
    "ReduceMax": OpType.REDUCE,
    "ReduceMin": OpType.REDUCE,
    "ReduceL2": OpType.REDUCE,
    "ArgMax": OpType.REDUCE,
    "CumSum": OpType.REDUCE,
    "TopK": OpType.REDUCE,
    "SoftmaxCrossEntropyLoss": OpType.LOSS,
    "NegativeLogLikelihoodLoss": OpType.LOSS,
    "Gather": OpType.INDEX,
    "GatherElements": OpType.INDEX,
    "GatherND": OpType.INDEX,
    "ScatterND": OpType.INDEX,
    "ScatterElements": OpType.INDEX,
    "NonZero": OpType.INDEX,
    "ConstantOfShape": OpType.FILL,
    "Range": OpType.FILL,
    "Shape": OpType.FILL,
    "Size": OpType.FILL,
    "EyeLike": OpType.FILL,
}
_ELEMENTWISE: frozenset[str] = frozenset({
    "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Erf", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Max",
    "Min", "Where", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor", "Cast",
    "CastLike", "Mod", "IsNaN", "IsInf", "HardSigmoid", "HardSwish", "Softplus", "Elu", "Selu", "PRelu", "Mish",
    "Trilu", "Mean", "Einsum",
})  # fmt: skip

SKIPPED: frozenset[str] = frozenset({"Constant"})  # data, not operators

# ONNX attribute names -> the names the PyTorch path uses.
ATTR_NAMES: dict[str, str] = {"kernel_shape": "kernel", "strides": "stride", "pads": "padding",
                              "dilations": "dilation", "group": "groups"}  # fmt: skip


def onnx_op_type(op_type: str, *, kernel_rank: int | None = None, weight_is_param: bool = False) -> OpType:
    """Normalised type; Conv by kernel rank; MatMul with a constant weight is a linear layer; Gather on a
    constant table is an embedding lookup."""
    if op_type == "Conv":
        return {1: OpType.CONV1D, 3: OpType.CONV3D}.get(kernel_rank or 2, OpType.CONV2D)
    if op_type == "ConvTranspose":
        return OpType.CONV_TRANSPOSE2D
    if op_type == "MatMul" and weight_is_param:
        return OpType.LINEAR
    if op_type == "Gather" and weight_is_param:
        return OpType.EMBEDDING
    if op_type in _ONNX_TYPES:
        return _ONNX_TYPES[op_type]
    if op_type in _ELEMENTWISE:
        return OpType.ELEMENTWISE
    return OpType.OTHER


def _known(shape: list[int] | None) -> bool:
    return shape is not None and all(d >= 0 for d in shape)


def onnx_flops(op_type: str, *, inputs: list[list[int] | None], outputs: list[list[int] | None],
               attrs: dict[str, Any]) -> float:  # fmt: skip
    """Forward FLOPs of one ONNX node from its input/output shapes (0 when a needed shape is unknown)."""
    out = outputs[0] if outputs else None
    if op_type in ("Conv", "ConvTranspose"):
        x, w = (inputs + [None, None])[:2]
        if not (_known(x) and _known(w) and _known(out)):
            return 0.0
        assert x is not None and w is not None and out is not None
        if op_type == "Conv":  # weight: (Cout, Cin/groups, *k)
            return 2.0 * prod(out) * prod(w[1:])
        return 2.0 * prod(x) * prod(w[1:])  # ConvTranspose weight: (Cin, Cout/groups, *k): each input scatters
    if op_type == "Gemm":
        a, b = (inputs + [None, None])[:2]
        if not (_known(a) and _known(b)):
            return 0.0
        assert a is not None and b is not None
        m, k = (a[1], a[0]) if attrs.get("transA") else (a[0], a[1])
        n = b[0] if attrs.get("transB") else b[1]
        return 2.0 * m * n * k
    if op_type == "MatMul":
        a = inputs[0] if inputs else None
        if not (_known(a) and _known(out)) or a is None or out is None or not a:
            return 0.0
        return 2.0 * prod(out) * a[-1]
    if op_type in ("LSTM", "GRU", "RNN"):
        x, w, r = (inputs + [None, None, None])[:3]
        if not (_known(x) and _known(w) and _known(r)):
            return 0.0
        assert x is not None and w is not None and r is not None
        seq, batch = (x[1], x[0]) if attrs.get("layout") else (x[0], x[1])
        dirs, gates_hidden, in_size = w[0], w[1], w[2]
        hidden = r[2]
        return 2.0 * seq * batch * dirs * gates_hidden * (in_size + hidden)
    return 0.0
