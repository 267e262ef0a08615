"""ONNX extraction: shapes from onnx.shape_inference, batch pinned, initializers as params, unknown ops kept."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from offpeak.errors import UserError
from offpeak_graph.extract import extract_graph
from offpeak_graph.schema import OpType

REPO = Path(__file__).resolve().parents[2]


def _small_cnn(path: Path, *, batch: int | str = "N") -> Path:
    """x[N,3,8,8] -> Conv(8,3x3,pad 1) -> Relu -> GlobalAveragePool -> Reshape(N,8) -> Gemm(10) -> custom op."""
    import numpy as np

    inits = [
        numpy_helper.from_array(np.zeros((8, 3, 3, 3), np.float32), "conv.w"),
        numpy_helper.from_array(np.zeros(8, np.float32), "conv.b"),
        numpy_helper.from_array(np.zeros((10, 8), np.float32), "fc.w"),
        numpy_helper.from_array(np.zeros(10, np.float32), "fc.b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv.w", "conv.b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([-1, 8], np.int64))),
        helper.make_node("Reshape", ["p", "shape"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["y"], transB=1, name="fc"),
        helper.make_node("Mystery", ["y"], ["z"], domain="com.example", name="mystery"),
    ]
    graph = helper.make_graph(
        nodes, "smallcnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, 10])], initializer=inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    onnx.save(model, path)
    return path


def test_onnx_graph_has_shapes_flops_params_and_edges(tmp_path):
    graph = extract_graph(onnx=str(_small_cnn(tmp_path / "small.onnx")), batch_size=4)
    types = [op.type for op in graph.ops]
    assert types == ["input", "conv2d", "relu", "adaptive_avgpool", "reshape", "linear", "other"]
    conv, fc = graph.ops[1], graph.ops[5]
    assert conv.output_shapes == [[4, 8, 8, 8]] and conv.input_shapes == [[4, 3, 8, 8]]
    assert conv.attrs["kernel"] == [3, 3] and conv.attrs["padding"] == [1, 1, 1, 1]
    assert conv.flops == 2 * (4 * 8 * 8 * 8) * 3 * 9
    assert fc.flops == 2 * 4 * 8 * 10 and fc.attrs["in_features"] == 8 and fc.attrs["out_features"] == 10
    assert graph.total_params == 8 * 27 + 8 + 80 + 10
    assert graph.ops[4].input_shapes == [[4, 8, 1, 1]]  # the Constant shape operand is data, not an input
    assert [op.inputs for op in graph.ops[1:]] == [[0], [1], [2], [3], [4], [5]]
    assert graph.unknown_ops == {"com.example.Mystery": 1}
    assert graph.framework == "onnx" and graph.extraction == "onnx-shape-inference"
    assert graph.input_shape == [3, 8, 8] and graph.model_name == "small"


def test_onnx_fixed_batch_must_match(tmp_path):
    path = _small_cnn(tmp_path / "fixed.onnx", batch=1)
    assert extract_graph(onnx=str(path), batch_size=1).ops[1].output_shapes == [[1, 8, 8, 8]]
    with pytest.raises(UserError, match="fixed batch of 1"):
        extract_graph(onnx=str(path), batch_size=2)


def test_onnx_precision_and_sequence_axis_come_from_the_file(tmp_path):
    import numpy as np

    weight = numpy_helper.from_array(np.zeros((64, 32), np.float16), "proj.w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["h", "proj.w"], ["y"], name="proj")], "proj",
        [helper.make_tensor_value_info("h", TensorProto.FLOAT16, ["batch", "seq", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["batch", "seq", 32])], initializer=[weight],
    )  # fmt: skip
    path = tmp_path / "proj.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    extracted = extract_graph(onnx=str(path), batch_size=3, seq_len=128)
    proj = extracted.ops[1]
    assert extracted.precision == "fp16" and proj.dtype == "float16"
    assert proj.type == OpType.LINEAR and proj.attrs["in_features"] == 64 and proj.attrs["out_features"] == 32
    assert proj.output_shapes == [[3, 128, 32]]
    assert proj.flops == 2 * 3 * 128 * 64 * 32
    assert proj.bytes_read == 2 * (3 * 128 * 64 + 64 * 32) and proj.bytes_written == 2 * 3 * 128 * 32


def test_dynamic_reshapes_are_folded_so_flops_are_known(tmp_path):
    """x[b,s,64] -> reshape to [b, s, 4, 64/4] computed from Shape at run time -> transpose -> matmul with itself."""
    import numpy as np

    def const(name, values):
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(values, np.int64)))

    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        const("i0", [0]), const("i1", [1]), const("i2", [2]), const("heads", [4]),
        helper.make_node("Gather", ["shape", "i0"], ["b"]),
        helper.make_node("Gather", ["shape", "i1"], ["s"]),
        helper.make_node("Gather", ["shape", "i2"], ["d"]),
        helper.make_node("Div", ["d", "heads"], ["hd"]),  # data propagation alone does not see through Div
        helper.make_node("Concat", ["b", "s", "heads", "hd"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["split"]),
        helper.make_node("Transpose", ["split"], ["q"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["split"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="qk"),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "attn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 64])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 4, "seq", "seq"])],
    )  # fmt: skip
    path = tmp_path / "attn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    extracted = extract_graph(onnx=str(path), batch_size=2, seq_len=10)
    (qk,) = [op for op in extracted.ops if op.name == "qk"]
    assert qk.output_shapes == [[2, 4, 10, 10]]
    assert qk.flops == 2 * (2 * 4 * 10 * 10) * 16
    # the shape arithmetic is folded away: only real tensor ops remain
    assert [op.framework_type for op in extracted.ops] == ["input", "Reshape", "Transpose", "Transpose", "MatMul"]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the TorchScript exporter: fast and stable for this check
def test_torch_exported_onnx_agrees_with_the_torch_extractor(tmp_path, monkeypatch):
    import torch

    monkeypatch.chdir(REPO)
    from offpeak_graph.torch_models import load_entrypoint

    path = tmp_path / "tiny_cnn.onnx"
    model = load_entrypoint("examples.models.tiny_cnn:build", [])().eval()
    torch.onnx.export(model, (torch.randn(1, 3, 32, 32),), str(path), dynamo=False, input_names=["x"],
                      dynamic_axes={"x": {0: "batch"}})  # fmt: skip
    from_onnx = extract_graph(onnx=str(path), batch_size=8, mode="inference")
    from_torch = extract_graph(entrypoint="examples.models.tiny_cnn:build", batch_size=8, input_shape=(3, 32, 32),
                               mode="inference")  # fmt: skip
    assert from_onnx.total_flops_forward == from_torch.total_flops_forward
    bn_params = 2 * (16 + 32)  # the exporter folds eval-mode BatchNorm into the convolutions
    assert from_onnx.total_params == from_torch.total_params - bn_params
    assert from_onnx.unknown_ops == {}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore:Converting a tensor to a Python integer")  # the exporter's own tracer warning
def test_exported_transformer_with_dynamic_axes_has_the_torch_flops(tmp_path, monkeypatch):
    import torch

    monkeypatch.chdir(REPO)
    from offpeak_graph.torch_models import load_entrypoint

    path = tmp_path / "tiny_transformer.onnx"
    model = load_entrypoint("examples.models.tiny_transformer:build", [])().eval()
    torch.onnx.export(model, (torch.zeros(2, 16, dtype=torch.long),), str(path), dynamo=False, input_names=["ids"],
                      dynamic_axes={"ids": {0: "batch", 1: "seq"}}, opset_version=17)  # fmt: skip
    from_onnx = extract_graph(onnx=str(path), batch_size=4, seq_len=64, mode="inference")
    from_torch = extract_graph(entrypoint="examples.models.tiny_transformer:build", batch_size=4, seq_len=64,
                               mode="inference")  # fmt: skip
    assert from_onnx.total_flops_forward == from_torch.total_flops_forward
    assert all(d >= 0 for op in from_onnx.ops for shape in op.output_shapes for d in shape)
    assert sum(op.type == OpType.EMBEDDING for op in from_onnx.ops) == 2  # token and position lookups survive
