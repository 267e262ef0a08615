"""Map PyTorch ATen operator names and nn.Module classes onto normalised `OpType`s.

Pure lookup tables (no torch import) so they can be unit-tested and read at a glance. Names are overload-packet
names without the `aten.` prefix (`addmm`, `convolution`, `relu_`); a trailing `_` (in-place) is ignored.
"""

from __future__ import annotations

import re

from offpeak_graph.schema import OpType

# ATen ops that allocate without writing: transparent, like views (no kernel runs).
ALLOC_OPS: frozenset[str] = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})

_ATEN_TYPES: dict[str, OpType] = {
    "convolution": OpType.CONV2D,  # refined by spatial rank in `aten_op_type`
    "_convolution": OpType.CONV2D,
    "addmm": OpType.LINEAR,
    "mm": OpType.MATMUL,
    "matmul": OpType.MATMUL,
    "bmm": OpType.BMM,
    "baddbmm": OpType.BMM,
    "linear": OpType.LINEAR,
    "native_batch_norm": OpType.BATCHNORM,
    "_native_batch_norm_legit": OpType.BATCHNORM,
    "_native_batch_norm_legit_no_training": OpType.BATCHNORM,
    "_native_batch_norm_legit_functional": OpType.BATCHNORM,
    "batch_norm": OpType.BATCHNORM,
    "native_layer_norm": OpType.LAYERNORM,
    "layer_norm": OpType.LAYERNORM,
    "native_group_norm": OpType.GROUPNORM,
    "group_norm": OpType.GROUPNORM,
    "_fused_rms_norm": OpType.RMSNORM,
    "rms_norm": OpType.RMSNORM,
    "embedding": OpType.EMBEDDING,
    "_softmax": OpType.SOFTMAX,
    "softmax": OpType.SOFTMAX,
    "_safe_softmax": OpType.SOFTMAX,
    "_log_softmax": OpType.SOFTMAX,
    "log_softmax": OpType.SOFTMAX,
    "relu": OpType.RELU,
    "hardtanh": OpType.RELU,  # ReLU6
    "leaky_relu": OpType.RELU,
    "gelu": OpType.GELU,
    "silu": OpType.SILU,
    "tanh": OpType.TANH,
    "sigmoid": OpType.SIGMOID,
    "max_pool2d_with_indices": OpType.MAXPOOL,
    "max_pool2d": OpType.MAXPOOL,
    "max_pool1d": OpType.MAXPOOL,
    "max_pool3d_with_indices": OpType.MAXPOOL,
    "avg_pool2d": OpType.AVGPOOL,
    "avg_pool1d": OpType.AVGPOOL,
    "avg_pool3d": OpType.AVGPOOL,
    "_adaptive_avg_pool2d": OpType.ADAPTIVE_AVGPOOL,
    "adaptive_avg_pool2d": OpType.ADAPTIVE_AVGPOOL,
    "adaptive_avg_pool1d": OpType.ADAPTIVE_AVGPOOL,
    "_adaptive_avg_pool3d": OpType.ADAPTIVE_AVGPOOL,
    "add": OpType.ADD,
    "mul": OpType.MUL,
    "sub": OpType.SUB,
    "rsub": OpType.SUB,
    "div": OpType.DIV,
    "pow": OpType.POW,
    "native_dropout": OpType.DROPOUT,
    "dropout": OpType.DROPOUT,
    "bernoulli": OpType.DROPOUT,
    "lstm": OpType.LSTM,
    "gru": OpType.GRU,
    "rnn_tanh": OpType.RNN,
    "rnn_relu": OpType.RNN,
    "cat": OpType.CONCAT,
    "stack": OpType.CONCAT,
    "clone": OpType.RESHAPE,
    "contiguous": OpType.RESHAPE,
    "_unsafe_view": OpType.RESHAPE,
    "copy": OpType.RESHAPE,
    "constant_pad_nd": OpType.RESHAPE,
    "roll": OpType.RESHAPE,
    "flip": OpType.RESHAPE,
    "repeat": OpType.RESHAPE,
    "pixel_shuffle": OpType.RESHAPE,
    "channel_shuffle": OpType.RESHAPE,
    "mean": OpType.REDUCE,
    "sum": OpType.REDUCE,
    "amax": OpType.REDUCE,
    "amin": OpType.REDUCE,
    "max": OpType.REDUCE,
    "min": OpType.REDUCE,
    "var": OpType.REDUCE,
    "var_mean": OpType.REDUCE,
    "std": OpType.REDUCE,
    "norm": OpType.REDUCE,
    "linalg_vector_norm": OpType.REDUCE,
    "argmax": OpType.REDUCE,
    "cumsum": OpType.REDUCE,
    "topk": OpType.REDUCE,
    "nll_loss_forward": OpType.LOSS,
    "nll_loss": OpType.LOSS,
    "mse_loss": OpType.LOSS,
    "binary_cross_entropy": OpType.LOSS,
    "binary_cross_entropy_with_logits": OpType.LOSS,
    "zeros": OpType.FILL,
    "zeros_like": OpType.FILL,
    "ones": OpType.FILL,
    "ones_like": OpType.FILL,
    "full": OpType.FILL,
    "full_like": OpType.FILL,
    "new_zeros": OpType.FILL,
    "new_ones": OpType.FILL,
    "new_full": OpType.FILL,
    "fill": OpType.FILL,
    "zero": OpType.FILL,
    "arange": OpType.FILL,
    "scalar_tensor": OpType.FILL,
    "lift_fresh_copy": OpType.FILL,
    "tril": OpType.ELEMENTWISE,
    "triu": OpType.ELEMENTWISE,
    "index_select": OpType.INDEX,
    "index": OpType.INDEX,
    "gather": OpType.INDEX,
    "scatter": OpType.INDEX,
    "scatter_add": OpType.INDEX,
    "index_put": OpType.INDEX,
    "index_add": OpType.INDEX,
    "masked_select": OpType.INDEX,
    "nonzero": OpType.INDEX,
    "embedding_dense_backward": OpType.INDEX,
}

_ELEMENTWISE: frozenset[str] = frozenset({
    "exp", "exp2", "expm1", "log", "log1p", "log2", "sqrt", "rsqrt", "neg", "abs", "reciprocal", "sign", "sin",
    "cos", "erf", "erfinv", "floor", "ceil", "round", "trunc", "clamp", "clamp_min", "clamp_max", "clip",
    "maximum", "minimum", "where", "masked_fill", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
    "logical_or", "logical_not", "bitwise_and", "bitwise_or", "bitwise_not", "bitwise_xor", "_to_copy", "to",
    "type_as", "lerp", "addcmul", "addcdiv", "fmod", "remainder", "floor_divide", "isnan", "isinf", "hardswish",
    "hardsigmoid", "softplus", "elu", "mish", "glu", "threshold", "sgn", "square", "atan", "atan2", "tan",
    "any", "all", "_log_softmax_backward_data", "rand", "randn", "rand_like", "randn_like", "randint",
    "normal", "uniform", "logit", "sigmoid_backward", "prelu", "_prelu_kernel", "logsumexp",
})  # fmt: skip

# nn.Module class name -> type, for modules collapsed into one op (their ATen ops are summed).
MODULE_TYPES: dict[str, OpType] = {
    "Conv1d": OpType.CONV1D,
    "Conv2d": OpType.CONV2D,
    "Conv3d": OpType.CONV3D,
    "ConvTranspose2d": OpType.CONV_TRANSPOSE2D,
    "Linear": OpType.LINEAR,
    "NonDynamicallyQuantizableLinear": OpType.LINEAR,
    "LazyLinear": OpType.LINEAR,
    "Conv1D": OpType.LINEAR,  # transformers.pytorch_utils.Conv1D (GPT-2) is a linear layer, not a convolution
    "BatchNorm1d": OpType.BATCHNORM,
    "BatchNorm2d": OpType.BATCHNORM,
    "BatchNorm3d": OpType.BATCHNORM,
    "SyncBatchNorm": OpType.BATCHNORM,
    "FrozenBatchNorm2d": OpType.BATCHNORM,
    "LayerNorm": OpType.LAYERNORM,
    "GroupNorm": OpType.GROUPNORM,
    "RMSNorm": OpType.RMSNORM,
    "Embedding": OpType.EMBEDDING,
    "Softmax": OpType.SOFTMAX,
    "LogSoftmax": OpType.SOFTMAX,
    "ReLU": OpType.RELU,
    "ReLU6": OpType.RELU,
    "LeakyReLU": OpType.RELU,
    "GELU": OpType.GELU,
    "SiLU": OpType.SILU,
    "Tanh": OpType.TANH,
    "Sigmoid": OpType.SIGMOID,
    "MaxPool1d": OpType.MAXPOOL,
    "MaxPool2d": OpType.MAXPOOL,
    "MaxPool3d": OpType.MAXPOOL,
    "AvgPool1d": OpType.AVGPOOL,
    "AvgPool2d": OpType.AVGPOOL,
    "AvgPool3d": OpType.AVGPOOL,
    "AdaptiveAvgPool1d": OpType.ADAPTIVE_AVGPOOL,
    "AdaptiveAvgPool2d": OpType.ADAPTIVE_AVGPOOL,
    "AdaptiveAvgPool3d": OpType.ADAPTIVE_AVGPOOL,
    "Dropout": OpType.DROPOUT,
    "Dropout1d": OpType.DROPOUT,
    "Dropout2d": OpType.DROPOUT,
    "Dropout3d": OpType.DROPOUT,
    "LSTM": OpType.LSTM,
    "GRU": OpType.GRU,
    "RNN": OpType.RNN,
    "Flatten": OpType.RESHAPE,
    "Unflatten": OpType.RESHAPE,
    "CrossEntropyLoss": OpType.LOSS,
    "MSELoss": OpType.LOSS,
    "NLLLoss": OpType.LOSS,
    "BCEWithLogitsLoss": OpType.LOSS,
}

# Class-name fragments of user/library activation and norm modules (checked lowercase, in order).
_MODULE_NAME_HINTS: tuple[tuple[str, OpType], ...] = (
    ("rmsnorm", OpType.RMSNORM),
    ("layernorm", OpType.LAYERNORM),
    ("groupnorm", OpType.GROUPNORM),
    ("batchnorm", OpType.BATCHNORM),
    ("gelu", OpType.GELU),
    ("silu", OpType.SILU),
    ("swish", OpType.SILU),
    ("relu", OpType.RELU),
    ("softmax", OpType.SOFTMAX),
    ("dropout", OpType.DROPOUT),
    ("droppath", OpType.DROPOUT),
    ("stochasticdepth", OpType.DROPOUT),
    ("embedding", OpType.EMBEDDING),
)

# Ops whose type says little about cost; a module is not named after them if anything better ran.
_WEAK_TYPES: frozenset[OpType] = frozenset({OpType.RESHAPE, OpType.FILL, OpType.OTHER, OpType.ELEMENTWISE})
# Matmul-class ops: a module running one of these is not named by a class-name hint ("GELUMLP" is no GELU).
_HEAVY_TYPES: frozenset[OpType] = frozenset({
    OpType.CONV1D, OpType.CONV2D, OpType.CONV3D, OpType.CONV_TRANSPOSE2D, OpType.LINEAR, OpType.MATMUL, OpType.BMM,
    OpType.SDPA, OpType.LSTM, OpType.GRU, OpType.RNN,
})  # fmt: skip


def base_name(name: str) -> str:
    """Overload-packet name without namespace and in-place suffix: `aten.relu_.default` -> `relu`."""
    if name.startswith("aten."):
        name = name[5:]
    name = name.split(".")[0]
    if name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return name


def aten_op_type(name: str, *, spatial_dims: int | None = None) -> OpType:
    """Normalised type of one ATen op; `spatial_dims` (1, 2, 3) refines convolutions."""
    base = base_name(name)
    if base in ("convolution", "_convolution") and spatial_dims is not None:
        return {1: OpType.CONV1D, 3: OpType.CONV3D}.get(spatial_dims, OpType.CONV2D)
    if base in _ATEN_TYPES:
        return _ATEN_TYPES[base]
    if base in _ELEMENTWISE:
        return OpType.ELEMENTWISE
    return OpType.OTHER


def module_op_type(class_name: str, inner_types: list[OpType]) -> OpType | None:
    """Type of a leaf-module call whose ops are merged into one: its class, else a class-name hint (light modules
    only), else the one meaningful op type it ran. None when the ops are a mix: they should stay separate."""
    if class_name in MODULE_TYPES:
        return MODULE_TYPES[class_name]
    if not any(t in _HEAVY_TYPES for t in inner_types):
        lowered = class_name.lower()
        for fragment, op_type in _MODULE_NAME_HINTS:
            if fragment in lowered:
                return op_type
    strong = set(inner_types) - _WEAK_TYPES
    if len(strong) == 1:
        return strong.pop()
    if not strong and len(set(inner_types)) == 1 and inner_types[0] != OpType.OTHER:
        return inner_types[0]
    return None


def bytes_read_of(op_type: OpType | str, reads: list[tuple[int, bool]], *, written: int) -> int:
    """Bytes an op reads, from (bytes, is a parameter) per distinct input tensor. An embedding lookup reads only
    the rows it gathers (about its output), not the whole table."""
    if op_type == OpType.EMBEDDING:
        table = sum(n for n, is_param in reads if is_param)
        return sum(n for n, is_param in reads if not is_param) + min(table, written)
    return sum(n for n, _ in reads)


def family_from_name(name: str) -> str:
    """Model family from a constructor name: resnet50 -> resnet, vgg16_bn -> vgg, wide_resnet50_2 -> wide_resnet."""
    lowered = name.lower()
    for prefix in ("wide_resnet", "ssdlite", "fasterrcnn", "maskrcnn", "retinanet", "keypointrcnn"):
        if lowered.startswith(prefix):
            return prefix
    match = re.match(r"[a-z]+", lowered)
    return match.group(0) if match else lowered
