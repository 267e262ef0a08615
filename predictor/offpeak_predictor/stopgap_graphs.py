"""Stop-gap model-graph recorder, used only while `offpeak_graph.extract.extract_graph` is not importable.

It records every ATen op of one forward pass on the meta device (no weights, no real compute) with a
TorchDispatchMode, and prices FLOPs with torch's own flop registry. The real extractor in `graph/` supersedes
it: `graphcache.extract` always prefers `offpeak_graph.extract`.
Imports torch lazily (callers import this module only when they need a graph).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from offpeak_graph.schema import ModelGraph, Op

_ATEN_TO_TYPE: dict[str, str] = {
    "convolution": "conv2d", "_convolution": "conv2d", "addmm": "linear", "mm": "linear", "linear": "linear",
    "bmm": "bmm", "baddbmm": "bmm", "matmul": "matmul",
    "_scaled_dot_product_efficient_attention": "sdpa", "_scaled_dot_product_flash_attention": "sdpa",
    "_scaled_dot_product_flash_attention_for_cpu": "sdpa", "scaled_dot_product_attention": "sdpa",
    "native_batch_norm": "batchnorm", "_native_batch_norm_legit": "batchnorm",
    "_native_batch_norm_legit_no_training": "batchnorm", "native_layer_norm": "layernorm",
    "native_group_norm": "groupnorm", "rms_norm": "rmsnorm", "_fused_rms_norm": "rmsnorm",
    "embedding": "embedding", "_softmax": "softmax", "softmax": "softmax", "_safe_softmax": "softmax", "_log_softmax": "softmax",
    "relu": "relu", "relu_": "relu", "gelu": "gelu", "silu": "silu", "silu_": "silu", "tanh": "tanh",
    "sigmoid": "sigmoid", "hardtanh": "relu", "hardtanh_": "relu", "add": "add", "add_": "add", "mul": "mul",
    "mul_": "mul", "sub": "sub", "rsub": "sub", "div": "div", "div_": "div", "pow": "pow",
    "native_dropout": "dropout", "dropout": "dropout", "bernoulli_": "dropout", "max_pool2d_with_indices": "maxpool",
    "max_pool2d": "maxpool", "avg_pool2d": "avgpool", "_adaptive_avg_pool2d": "adaptive_avgpool",
    "adaptive_avg_pool2d": "adaptive_avgpool", "mean": "reduce", "sum": "reduce", "amax": "reduce",
    "cat": "concat",
}  # fmt: skip
_VIEW_OPS = {
    "view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand", "slice", "select", "unsqueeze",
    "squeeze", "flatten", "detach", "alias", "split", "split_with_sizes", "chunk", "unbind", "as_strided",
    "clone", "contiguous", "_to_copy", "copy_", "lift_fresh", "empty", "zeros", "ones", "full", "arange",
    "new_empty", "new_zeros", "new_ones", "scalar_tensor", "empty_like", "zeros_like", "ones_like", "fill_",
    "masked_fill", "masked_fill_", "_assert_async", "_local_scalar_dense", "eq", "ne", "lt", "gt", "index",
    "item", "sym_size", "sym_stride", "is_nonzero", "any", "all", "where", "_unsafe_index", "triu", "tril",
    "full_like", "bitwise_not", "logical_not",
}  # fmt: skip
_DTYPE_NAME = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16"}
_DTYPE_OF_PRECISION = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def record_graph(
    *,
    torchvision: str | None = None,
    hf_config: str | None = None,
    batch_size: int,
    input_shape: list[int] | None = None,
    seq_len: int | None = None,
    precision: str = "fp32",
    mode: str = "train",
    optimizer: str = "adam",
) -> ModelGraph:
    """ModelGraph of a torchvision model or a HuggingFace config (path or hub-style name, config only)."""
    import torch

    dtype = getattr(torch, _DTYPE_OF_PRECISION[precision])
    with torch.device("meta"):
        if torchvision:
            import torchvision.models as tvm

            shape = input_shape or ([3, 299, 299] if torchvision == "inception_v3" else [3, 224, 224])
            kwargs: dict[str, Any] = {"weights": None}
            if torchvision in ("inception_v3", "googlenet"):
                kwargs["aux_logits"] = False
                kwargs["init_weights"] = False
            model = tvm.get_model(torchvision, **kwargs)
            inputs: tuple[Any, ...] = (torch.randn(batch_size, *shape, dtype=dtype),)
            name = torchvision
        elif hf_config:
            model, inputs, name, seq_len = _hf_model(hf_config, batch_size, seq_len)
            shape = None
        else:
            raise ValueError("record_graph needs torchvision= or hf_config=")
        model = model.to(dtype)
        model.train(mode == "train")

    with torch.no_grad():
        ops = _record_ops(model, inputs)
    graph = ModelGraph(
        framework="pytorch", model_name=name, batch_size=batch_size, ops=ops, seq_len=seq_len,
        input_shape=shape, precision=precision, mode=mode, optimizer=optimizer, extraction="predictor-stopgap-meta",
    )  # fmt: skip
    from offpeak_predictor.loaders import _family

    graph.model_family = _family(name)
    return graph


def record_module(model: Any, inputs: tuple[Any, ...], *, name: str, batch_size: int, precision: str = "fp32",
                  mode: str = "train", optimizer: str = "adam", input_shape: list[int] | None = None) -> ModelGraph:
    """ModelGraph of an in-memory module (used by `offpeak collect` for its sample models)."""
    import torch

    with torch.no_grad():
        ops = _record_ops(model, inputs)
    return ModelGraph(
        framework="pytorch", model_name=name, batch_size=batch_size, ops=ops, input_shape=input_shape,
        precision=precision, mode=mode, optimizer=optimizer, extraction="predictor-stopgap-dispatch",
        model_family="synthetic",
    )  # fmt: skip


def _record_ops(model: Any, inputs: tuple[Any, ...]) -> list[Op]:
    """Run one forward pass under a dispatch recorder; every ATen op becomes an `Op`."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    param_ids = {id(p): p.numel() for p in model.parameters()}
    ops: list[Op] = [Op(id=0, type="input", name="input")]
    producers: dict[int, int] = {}

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func._overloadpacket
            aten = packet.__name__
            if aten in _VIEW_OPS or aten.startswith("_to"):
                op_type = "reshape"
            else:
                op_type = _ATEN_TO_TYPE.get(aten, "other")
            tensors_in = [a for a in _flatten(args) if isinstance(a, torch.Tensor)]
            tensors_out = [o for o in _flatten(out) if isinstance(o, torch.Tensor)]
            if op_type == "conv2d" and tensors_in and tensors_in[1].dim() != 4:
                op_type = {3: "conv1d", 5: "conv3d"}.get(tensors_in[1].dim(), "conv2d")
            if packet in flop_registry:
                flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
            elif op_type in ("reshape", "embedding", "concat", "dropout"):
                flops = 0.0
            else:
                flops = float(sum(t.numel() for t in tensors_out[:1]))
            params = 0
            for t in tensors_in:
                params += param_ids.pop(id(t), 0)
            op_id = len(ops)
            ops.append(
                Op(
                    id=op_id, type=op_type, framework_type=f"aten.{aten}",
                    inputs=sorted({producers.get(id(t), 0) for t in tensors_in}),
                    input_shapes=[list(t.shape) for t in tensors_in],
                    output_shapes=[list(t.shape) for t in tensors_out],
                    dtype=_DTYPE_NAME.get(str(tensors_out[0].dtype), str(tensors_out[0].dtype)) if tensors_out
                    else "float32",
                    flops=flops,
                    bytes_read=0 if op_type == "reshape" else sum(t.numel() * t.element_size() for t in tensors_in),
                    bytes_written=0 if op_type == "reshape" else sum(
                        t.numel() * t.element_size() for t in tensors_out),
                    params=params,
                )
            )  # fmt: skip
            for t in tensors_out:
                producers[id(t)] = op_id
            return out

    with Recorder():
        model(*inputs)
    return ops


def _flatten(obj: Any) -> list[Any]:
    if isinstance(obj, (list, tuple)):
        return [x for item in obj for x in _flatten(item)]
    return [obj]


_HF_NAMES = {"gpt2-large": "gpt2_large", "bert-large-uncased": "bert_large"}


def _hf_model(ref: str, batch_size: int, seq_len: int | None) -> tuple[Any, tuple[Any, ...], str, int]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    path = Path(ref)
    if path.exists():
        data = json.loads(path.read_text())
        name = path.stem
    else:
        data = _builtin_hf_config(ref)
        name = ref
    model_type = data.get("model_type", "gpt2")
    config = AutoConfig.for_model(model_type, **{k: v for k, v in data.items() if k != "model_type"})
    config._attn_implementation = "sdpa"
    max_len = int(getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 512)
    seq = int(seq_len or min(max_len, 512))
    cls = AutoModelForMaskedLM if model_type == "bert" else AutoModelForCausalLM
    model = cls.from_config(config)
    ids = torch.zeros(batch_size, seq, dtype=torch.long)
    return model, (ids,), name, seq


def _builtin_hf_config(name: str) -> dict[str, Any]:
    """Configs of common public models by their hub names (no network): sizes from the published configs."""
    key = name.lower().removeprefix("openai-community/").removeprefix("google-bert/")
    table: dict[str, dict[str, Any]] = {
        "gpt2": {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12},
        "gpt2-medium": {"model_type": "gpt2", "n_embd": 1024, "n_layer": 24, "n_head": 16},
        "gpt2-large": {"model_type": "gpt2", "n_embd": 1280, "n_layer": 36, "n_head": 20},
        "gpt2-xl": {"model_type": "gpt2", "n_embd": 1600, "n_layer": 48, "n_head": 25},
        "bert-base-uncased": {"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12,
                              "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522},
        "bert-large-uncased": {"model_type": "bert", "hidden_size": 1024, "num_hidden_layers": 24,
                               "num_attention_heads": 16, "intermediate_size": 4096, "vocab_size": 30522},
    }  # fmt: skip
    if key not in table:
        raise ValueError(f"unknown HuggingFace config {name!r}: pass a config.json path")
    return table[key]


def graph_flops_check(graph: ModelGraph) -> float:
    """log10 of forward FLOPs (handy in logs)."""
    return math.log10(max(graph.total_flops_forward, 1.0))
