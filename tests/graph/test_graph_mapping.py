"""Pure lookup tables: ATen/ONNX names and module classes -> normalised op types, FLOP formulas from shapes."""

from __future__ import annotations

import pytest

from offpeak_graph.aten_ops import aten_op_type, base_name, bytes_read_of, family_from_name, module_op_type
from offpeak_graph.hf_presets import preset
from offpeak_graph.onnx_ops import onnx_flops, onnx_op_type
from offpeak_graph.options import ExtractOptions, parse_shape
from offpeak_graph.schema import OpType
from offpeak.errors import UserError


@pytest.mark.parametrize(
    ("name", "expected"),
    [("aten.relu_.default", "relu"), ("aten.add.Tensor", "add"), ("_softmax", "_softmax"), ("addmm", "addmm")],
)
def test_base_name_strips_namespace_overload_and_inplace_suffix(name, expected):
    assert base_name(name) == expected


def test_aten_types_cover_matmuls_convs_norms_and_keep_unknowns_as_other():
    assert aten_op_type("aten.addmm.default") == OpType.LINEAR
    assert aten_op_type("aten.bmm.default") == OpType.BMM
    assert aten_op_type("aten.convolution.default", spatial_dims=1) == OpType.CONV1D
    assert aten_op_type("aten.convolution.default", spatial_dims=3) == OpType.CONV3D
    assert aten_op_type("aten.native_layer_norm.default") == OpType.LAYERNORM
    assert aten_op_type("aten.rsqrt.default") == OpType.ELEMENTWISE
    assert aten_op_type("aten.special_bessel_j0.default") == OpType.OTHER


def test_module_types_prefer_class_then_name_hint_then_dominant_inner_op():
    assert module_op_type("Conv1D", []) == OpType.LINEAR  # transformers' GPT-2 Conv1D is a linear layer
    assert module_op_type("LlamaRMSNorm", [OpType.POW, OpType.REDUCE, OpType.MUL]) == OpType.RMSNORM
    assert module_op_type("NewGELUActivation", [OpType.MUL, OpType.TANH]) == OpType.GELU
    assert module_op_type("MyProjection", [OpType.RESHAPE, OpType.LINEAR]) == OpType.LINEAR
    assert module_op_type("Mixer", [OpType.LINEAR, OpType.SOFTMAX]) is None  # a mix stays separate ops
    assert module_op_type("GELUMLP", [OpType.LINEAR, OpType.GELU, OpType.LINEAR]) is None  # no hint for heavy ones
    assert module_op_type("Odd", [OpType.OTHER]) is None  # unknown ops keep their ATen names


@pytest.mark.parametrize(
    ("name", "family"),
    [("resnet50", "resnet"), ("vgg16_bn", "vgg"), ("wide_resnet50_2", "wide_resnet"), ("mobilenet_v3_large",
     "mobilenet"), ("efficientnet_b0", "efficientnet"), ("TinyCNN", "tinycnn")],
)  # fmt: skip
def test_family_strips_depth_and_variant(name, family):
    assert family_from_name(name) == family


def test_presets_accept_benchmark_spellings():
    assert preset("gpt2_large")["n_embd"] == 1280
    assert preset("GPT2-Large") == preset("gpt2-large")
    assert preset("opt_13")["hidden_size"] == 2048
    assert preset("gpt2_med")["n_layer"] == 24
    assert preset("bert_large")["num_hidden_layers"] == 24
    assert preset("bert_large_squad")["architectures"] == ["BertForQuestionAnswering"]
    assert preset("no-such-model") is None
    a = preset("gpt2")
    a["n_layer"] = 1
    assert preset("gpt2")["n_layer"] == 12  # callers get copies


def test_onnx_types_and_flops():
    assert onnx_op_type("Conv", kernel_rank=2) == OpType.CONV2D
    assert onnx_op_type("MatMul", weight_is_param=True) == OpType.LINEAR
    assert onnx_op_type("MatMul") == OpType.MATMUL
    assert onnx_op_type("Gather", weight_is_param=True) == OpType.EMBEDDING
    assert onnx_op_type("MyCustomOp") == OpType.OTHER
    # conv 3->8, 3x3, out 8x8x8 at batch 2: 2 * out elements * Cin/groups * k*k
    conv = onnx_flops("Conv", inputs=[[2, 3, 8, 8], [8, 3, 3, 3]], outputs=[[2, 8, 8, 8]], attrs={})
    assert conv == 2 * (2 * 8 * 8 * 8) * 3 * 9
    assert onnx_flops("Gemm", inputs=[[4, 16], [10, 16]], outputs=[[4, 10]], attrs={"transB": 1}) == 2 * 4 * 16 * 10
    assert onnx_flops("MatMul", inputs=[[2, 5, 7], [7, 3]], outputs=[[2, 5, 3]], attrs={}) == 2 * 2 * 5 * 3 * 7
    lstm = onnx_flops("LSTM", inputs=[[20, 4, 16], [1, 128, 16], [1, 128, 32]], outputs=[None], attrs={})
    assert lstm == 2 * 20 * 4 * 128 * (16 + 32)
    assert onnx_flops("MatMul", inputs=[[-1, 5], [5, 3]], outputs=[[-1, 3]], attrs={}) == 0.0  # unknown dim


def test_options_validate_with_clear_messages():
    assert parse_shape("3,224,224") == (3, 224, 224)
    assert parse_shape("3x32x32") == (3, 32, 32)
    assert parse_shape(None) is None
    for bad in ("a,b", "3,0,4", ","):
        with pytest.raises(UserError, match="input shape"):
            parse_shape(bad)
    with pytest.raises(UserError, match="batch size"):
        ExtractOptions(batch_size=0)
    with pytest.raises(UserError, match="precision"):
        ExtractOptions(batch_size=1, precision="fp8")


def test_bytes_read_counts_gathered_rows_for_embeddings_only():
    reads = [(1000, False), (10_000_000, True)]  # indices, table
    assert bytes_read_of(OpType.EMBEDDING, reads, written=4096) == 1000 + 4096
    assert bytes_read_of(OpType.LINEAR, reads, written=4096) == 10_001_000
    assert bytes_read_of("embedding", [(8, False), (100, True)], written=4096) == 8 + 100  # tiny table: all of it
