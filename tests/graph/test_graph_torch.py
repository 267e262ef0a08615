"""PyTorch extraction against published and analytic numbers, plus the graph's structure."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from offpeak_graph.extract import EXTRACTION_CPU, EXTRACTION_META, extract_graph
from offpeak_graph.schema import ModelGraph, OpType

REPO = Path(__file__).resolve().parents[2]


def _check_structure(graph: ModelGraph) -> None:
    assert [op.id for op in graph.ops] == list(range(len(graph.ops)))
    for op in graph.ops:
        assert all(0 <= i < op.id for i in op.inputs), f"op {op.id} has a non-topological input"
        if op.type != OpType.INPUT:
            assert op.output_shapes, f"op {op.id} ({op.framework_type}) has no output shape"
    consumed = {i for op in graph.ops for i in op.inputs}
    assert all(op.id in consumed for op in graph.ops if op.type == OpType.INPUT)


@pytest.fixture(scope="module")
def resnet50() -> ModelGraph:
    return extract_graph(torchvision="resnet50", batch_size=1)


@pytest.fixture(scope="module")
def vgg16() -> ModelGraph:
    return extract_graph(torchvision="vgg16", batch_size=1)


def test_resnet50_matches_published_flops_and_params(resnet50):
    assert resnet50.total_flops_forward == pytest.approx(8.18e9, rel=0.02)  # 4.09 GMACs
    assert resnet50.total_params == pytest.approx(25.557e6, rel=0.02)
    assert resnet50.total_params == 25_557_032  # torchvision's exact count: every parameter is attributed once
    assert resnet50.extraction == EXTRACTION_META
    assert resnet50.model_family == "resnet"
    assert resnet50.input_shape == [3, 224, 224]
    _check_structure(resnet50)


def test_resnet50_ops_carry_layer_attributes_and_residual_edges(resnet50):
    convs = [op for op in resnet50.ops if op.type == OpType.CONV2D]
    assert len(convs) == 53
    stem = convs[0]
    assert stem.attrs["kernel"] == [7, 7] and stem.attrs["stride"] == [2, 2] and stem.attrs["padding"] == [3, 3]
    assert stem.input_shapes == [[1, 3, 224, 224]] and stem.output_shapes == [[1, 64, 112, 112]]
    assert stem.flops == 2 * 64 * 112 * 112 * 3 * 7 * 7
    assert stem.params == 64 * 3 * 7 * 7
    assert stem.bytes_written == 64 * 112 * 112 * 4
    assert stem.bytes_read == (3 * 224 * 224 + 64 * 3 * 7 * 7) * 4
    adds = [op for op in resnet50.ops if op.type == OpType.ADD]
    assert len(adds) == 16 and all(len(op.inputs) == 2 for op in adds)
    fc = resnet50.ops[-1]
    assert fc.type == OpType.LINEAR and fc.attrs["in_features"] == 2048 and fc.attrs["out_features"] == 1000
    assert resnet50.ops[fc.inputs[0]].type == OpType.ADAPTIVE_AVGPOOL  # edge passes through the flatten view


def test_vgg16_matches_published_flops_and_params(vgg16):
    assert vgg16.total_flops_forward == pytest.approx(30.95e9, rel=0.02)  # 15.47 GMACs
    assert vgg16.total_params == pytest.approx(138.36e6, rel=0.02)
    assert vgg16.model_family == "vgg"
    _check_structure(vgg16)


def test_batch_precision_and_mode_change_the_graph(vgg16):
    half = extract_graph(torchvision="vgg16", batch_size=2, precision="fp16", mode="inference", optimizer="sgd")
    assert half.total_flops_forward == pytest.approx(2 * vgg16.total_flops_forward)
    conv, conv_half = vgg16.ops[1], half.ops[1]
    assert conv_half.dtype == "float16" and conv.dtype == "float32"
    assert conv_half.bytes_written == conv.bytes_written  # twice the samples at half the width
    assert sum(op.type == OpType.DROPOUT for op in vgg16.ops) == 2
    assert sum(op.type == OpType.DROPOUT for op in half.ops) == 0  # eval-mode dropout runs no kernel
    assert (half.precision, half.mode, half.optimizer) == ("fp16", "inference", "sgd")
    assert half.content_hash() != vgg16.content_hash()


def _gpt2_forward_flops(*, batch: int, seq: int, d: int, layers: int, vocab: int) -> float:
    tokens = batch * seq
    per_layer = 2 * tokens * 12 * d * d + 4 * batch * seq * seq * d  # qkv+proj+mlp, QK^T and AV (full square)
    return layers * per_layer + 2 * tokens * d * vocab  # + LM head (tied to the embedding)


def test_gpt2_flops_match_the_analytic_count_and_ops_are_named():
    graph = extract_graph(hf_config="gpt2", batch_size=2, seq_len=128)
    expected = _gpt2_forward_flops(batch=2, seq=128, d=768, layers=12, vocab=50257)
    assert graph.total_flops_forward == pytest.approx(expected, rel=1e-9)
    assert graph.total_params == 124_439_808
    assert graph.model_family == "gpt2" and graph.seq_len == 128
    sdpa = [op for op in graph.ops if op.type == OpType.SDPA]
    assert len(sdpa) == 12
    assert sdpa[0].attrs == {"heads": 12, "head_dim": 64, "seq_q": 128, "seq_k": 128, "causal": True}
    wte = next(op for op in graph.ops if op.name == "transformer.wte")
    assert wte.type == OpType.EMBEDDING and wte.params == 50257 * 768
    assert wte.bytes_written == 2 * 128 * 768 * 4
    assert wte.bytes_read == 2 * 128 * 8 + wte.bytes_written  # token ids + the gathered rows, not the table
    c_attn = next(op for op in graph.ops if op.name == "transformer.h.0.attn.c_attn")
    assert c_attn.type == OpType.LINEAR and c_attn.attrs["out_features"] == 3 * 768
    assert graph.unknown_ops == {}
    _check_structure(graph)


def test_bert_large_params_match_published():
    graph = extract_graph(hf_config="bert-large-uncased", batch_size=1, seq_len=128)
    assert graph.total_params == pytest.approx(335e6, rel=0.02)
    assert graph.model_family == "bert"
    _check_structure(graph)


@pytest.mark.slow
def test_gpt2_large_at_seq_1024_extracts_on_meta():
    graph = extract_graph(hf_config="gpt2-large", batch_size=1, seq_len=1024)
    assert graph.total_params == pytest.approx(774e6, rel=0.02)
    expected = _gpt2_forward_flops(batch=1, seq=1024, d=1280, layers=36, vocab=50257)
    assert graph.total_flops_forward == pytest.approx(expected, rel=1e-9)
    assert graph.extraction == EXTRACTION_META


def test_hf_config_file_in_the_benchmark_format(tmp_path):
    config = tmp_path / "gpt2_tiny.json"
    config.write_text(
        '{"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",'
        ' "n_ctx": 256, "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 256, "vocab_size": 1000,'
        ' "summary_type": "cls_index", "task_specific_params": {"text-generation": {"max_length": 50}},'
        ' "padded_vocab_size": 1000, "transformers_version": "4.25.0.dev0", "torch_dtype": "bfloat16"}'
    )
    graph = extract_graph(hf_config=str(config), batch_size=3, seq_len=32)
    assert graph.model_name == "gpt2_tiny"
    expected = _gpt2_forward_flops(batch=3, seq=32, d=64, layers=2, vocab=1000)
    assert graph.total_flops_forward == pytest.approx(expected, rel=1e-9)


def test_hand_written_transformer_entry_point_matches_analytic_flops(monkeypatch):
    monkeypatch.chdir(REPO)
    graph = extract_graph(entrypoint="examples.models.tiny_transformer:build", batch_size=4, seq_len=64)
    b, t, d, ffn, layers, vocab, heads = 4, 64, 64, 256, 2, 1000, 4
    per_block = 2 * b * t * (3 * d * d + d * d + 2 * d * ffn) + 2 * 2 * b * heads * t * t * (d // heads)
    assert graph.total_flops_forward == layers * per_block + 2 * b * t * d * vocab
    model = importlib.import_module("examples.models.tiny_transformer").build()  # importable: extract put cwd on path
    assert graph.total_params == sum(p.numel() for p in model.parameters())
    assert graph.extraction == EXTRACTION_META
    assert sum(op.type == OpType.SDPA for op in graph.ops) == layers
    assert graph.seq_len == 64
    _check_structure(graph)


def test_lstm_entry_point_matches_analytic_flops(monkeypatch):
    monkeypatch.chdir(REPO)
    graph = extract_graph(entrypoint="examples.models.tiny_lstm:build", batch_size=4, input_shape=(20, 16))
    batch, seq, features, hidden, classes = 4, 20, 16, 32, 5
    lstm = 2 * batch * seq * 4 * hidden * ((features + hidden) + (hidden + hidden))  # two layers
    assert graph.total_flops_forward == lstm + 2 * batch * hidden * classes
    (lstm_op,) = [op for op in graph.ops if op.type == OpType.LSTM]
    assert lstm_op.attrs["hidden_size"] == 32 and lstm_op.attrs["num_layers"] == 2
    assert lstm_op.params == 4 * hidden * (features + hidden + 2) + 4 * hidden * (2 * hidden + 2)
    assert lstm_op.output_shapes[0] == [4, 20, 32]


def test_tiny_cnn_entry_point_via_python_path(tmp_path):
    graph = extract_graph(entrypoint="models.tiny_cnn:build", python_path=[str(REPO / "examples")], batch_size=8,
                          input_shape="3,32,32")  # fmt: skip
    assert graph.input_shape == [3, 32, 32] and graph.batch_size == 8
    assert [op.type for op in graph.ops if op.type in (OpType.CONV2D, OpType.LINEAR)] == ["conv2d", "conv2d", "linear"]
    assert graph.model_family == "tinycnn"


def test_data_dependent_model_falls_back_to_cpu(entrypoint_dir):
    graph = extract_graph(entrypoint="offpeak_test_models:data_dependent", python_path=[str(entrypoint_dir)],
                          batch_size=2, input_shape=(8,))  # fmt: skip
    assert graph.extraction == EXTRACTION_CPU
    assert graph.total_flops_forward == 2 * (2 * 2 * 8 * 8)
    assert graph.total_params == 2 * (8 * 8 + 8)
    assert graph.unknown_ops == {}


def test_unknown_ops_are_kept_as_other_and_counted(entrypoint_dir):
    graph = extract_graph(entrypoint="offpeak_test_models:exotic", python_path=[str(entrypoint_dir)],
                          batch_size=2, input_shape=(8,))  # fmt: skip
    assert graph.unknown_ops == {"aten.special_bessel_j0": 1, "aten.cummax": 1}
    others = [op for op in graph.ops if op.type == OpType.OTHER]
    assert [op.output_shapes[0] for op in others] == [[2, 8], [2, 8]]
    assert others[1].inputs == [others[0].id]


def test_matmul_written_by_hand_is_grouped_with_exact_flops(entrypoint_dir):
    graph = extract_graph(entrypoint="offpeak_test_models:manual_attention", python_path=[str(entrypoint_dir)],
                          batch_size=2, input_shape=(10, 32))  # fmt: skip
    matmuls = [op for op in graph.ops if op.type == OpType.MATMUL]
    assert [op.framework_type for op in matmuls] == ["torch.matmul"] * 3  # `@` and torch.matmul alike
    b, t, d = 2, 10, 32
    assert [op.flops for op in matmuls] == [2 * b * t * d * 3 * d, 2 * b * t * t * d, 2 * b * t * t * d]
    assert matmuls[0].params == d * 3 * d  # a bare nn.Parameter is counted at its first reader
    assert sum(op.type == OpType.SOFTMAX for op in graph.ops) == 1
    assert graph.total_flops_forward == sum(op.flops for op in matmuls)


def test_constructors_that_compute_with_tensors_build_with_parameters_on_meta():
    graph = extract_graph(torchvision="regnet_y_400mf", batch_size=1)  # RegNet computes widths with tensors
    assert graph.total_flops_forward == pytest.approx(2 * 0.40e9, rel=0.02)  # 0.40 GMACs (torchvision docs)
    assert graph.total_params == pytest.approx(4.344e6, rel=0.02)
    assert graph.extraction == EXTRACTION_META


def test_compile_and_data_parallel_wrappers_are_unwrapped(entrypoint_dir):
    graph = extract_graph(entrypoint="offpeak_test_models:wrapped", python_path=[str(entrypoint_dir)],
                          batch_size=3, input_shape=(4,))  # fmt: skip
    assert [op.type for op in graph.ops] == ["input", "linear"]
    assert graph.ops[1].name == "" and graph.ops[1].framework_type == "Linear"
    assert graph.total_flops_forward == 2 * 3 * 4 * 2 and graph.total_params == 10


def test_extraction_is_deterministic_so_equal_models_share_a_hash(monkeypatch):
    monkeypatch.chdir(REPO)
    first = extract_graph(entrypoint="examples.models.tiny_transformer:build", batch_size=2, seq_len=16)
    second = extract_graph(entrypoint="examples.models.tiny_transformer:build", batch_size=2, seq_len=16)
    assert first.to_dict() == second.to_dict()
    longer = extract_graph(entrypoint="examples.models.tiny_transformer:build", batch_size=2, seq_len=32)
    assert longer.content_hash() != first.content_hash()


def test_entry_point_returning_a_transformers_model(entrypoint_dir):
    graph = extract_graph(entrypoint="offpeak_test_models:tiny_gpt2", python_path=[str(entrypoint_dir)],
                          batch_size=3, seq_len=32)  # fmt: skip
    assert graph.model_family == "gpt2"  # from the model's config, not its class name
    expected = _gpt2_forward_flops(batch=3, seq=32, d=64, layers=2, vocab=1000)
    assert graph.total_flops_forward == pytest.approx(expected, rel=1e-9)
    assert sum(op.type == OpType.SDPA for op in graph.ops) == 2


def test_tensors_created_without_a_device_stay_on_meta(entrypoint_dir):
    graph = extract_graph(entrypoint="offpeak_test_models:positions_without_device", python_path=[str(entrypoint_dir)],
                          batch_size=2, input_shape=(16, 8))  # fmt: skip
    assert graph.extraction == EXTRACTION_META
    assert [op.type for op in graph.ops] == ["input", "fill", "embedding", "add"]
