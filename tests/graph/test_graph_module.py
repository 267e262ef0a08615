"""`extract_module`: the graph of a module already in memory, by the same tracing as `extract_graph`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from offpeak.errors import UserError
from offpeak_graph.extract import EXTRACTION_CPU, EXTRACTION_META, extract_graph, extract_module
from offpeak_graph.schema import OpType

REPO = Path(__file__).resolve().parents[2]


def _tiny_cnn() -> nn.Module:
    """The repository's example model (conv-bn-relu-pool, conv-bn-relu-avgpool, linear), built in memory."""
    from offpeak_graph.torch_models import load_entrypoint

    torch.manual_seed(0)
    return load_entrypoint("examples.models.tiny_cnn:build", [str(REPO)])()


def _conv_flops(batch: int, c_in: int, c_out: int, size: int, kernel: int = 3) -> int:
    return 2 * batch * c_out * size * size * c_in * kernel * kernel  # multiply-add = 2 FLOPs, 'same' padding


def test_small_cnn_flops_and_params_are_analytic():
    graph = extract_module(_tiny_cnn(), batch_size=8, input_shape=(3, 32, 32), model_name="tiny", model_family="cnn")
    b, w = 8, 16
    convs = [op for op in graph.ops if op.type == OpType.CONV2D]
    assert [op.flops for op in convs] == [_conv_flops(b, 3, w, 32), _conv_flops(b, w, 2 * w, 16)]
    (fc,) = [op for op in graph.ops if op.type == OpType.LINEAR]
    assert fc.flops == 2 * b * 2 * w * 10
    assert graph.total_flops_forward == sum(op.flops for op in [*convs, fc])
    conv_params = (3 * 9 * w + w) + (w * 9 * 2 * w + 2 * w)
    bn_params = 2 * w + 2 * 2 * w
    assert graph.total_params == conv_params + bn_params + (2 * w * 10 + 10)
    assert graph.extraction == EXTRACTION_META
    assert (graph.model_name, graph.model_family) == ("tiny", "cnn")
    assert (graph.batch_size, graph.input_shape) == (8, [3, 32, 32])


def test_same_graph_as_extract_graph_from_an_entry_point():
    kwargs = {"batch_size": 4, "input_shape": (3, 32, 32), "precision": "fp16", "mode": "train", "optimizer": "sgd"}
    from_module = extract_module(_tiny_cnn(), **kwargs)
    from_entrypoint = extract_graph(entrypoint="examples.models.tiny_cnn:build", python_path=[str(REPO)], **kwargs)
    assert from_module.content_hash() == from_entrypoint.content_hash()
    assert from_module.ops == from_entrypoint.ops  # dataclass equality: every field of every op
    assert from_module.model_name == "TinyCNN" and from_module.model_family == from_entrypoint.model_family
    assert from_module.ops[1].dtype == "float16"


def test_callers_module_is_left_as_it_was():
    model = _tiny_cnn().eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    extract_module(model, batch_size=2, input_shape="3,32,32", precision="bf16", mode="train")
    after = model.state_dict()
    assert all(t.device.type == "cpu" for t in after.values())
    assert all(torch.equal(before[k], after[k]) and before[k].dtype == after[k].dtype for k in before)
    assert not model.training
    model(torch.randn(1, 3, 32, 32))  # still a working model with real weights


def test_token_input_module():
    model = nn.Sequential(nn.Embedding(100, 16), nn.Linear(16, 100))
    graph = extract_module(model, batch_size=2, seq_len=5)
    assert [op.type for op in graph.ops] == ["input", "embedding", "linear"]
    assert graph.ops[0].output_shapes == [[2, 5]] and graph.seq_len == 5
    assert graph.total_flops_forward == 2 * 2 * 5 * 16 * 100


class _DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.norm = nn.BatchNorm1d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.a(x))
        return h * 2 if h.mean().item() > 1e9 else h


def test_module_that_cannot_run_on_meta_is_traced_on_a_cpu_copy():
    model = _DataDependent()
    stats = model.norm.running_mean.clone()
    graph = extract_module(model, batch_size=4, input_shape=(8,))
    assert graph.extraction == EXTRACTION_CPU
    assert graph.total_flops_forward == 2 * 4 * 8 * 8
    assert graph.total_params == (8 * 8 + 8) + 2 * 8
    assert torch.equal(model.norm.running_mean, stats)  # the train-mode forward updated only the copy's statistics


def test_bad_input_is_a_user_error():
    with pytest.raises(UserError, match="input shape .* or a sequence length"):
        extract_module(nn.Linear(4, 2), batch_size=1)
    with pytest.raises(UserError, match="nn.Module"):
        extract_module({"model": 1}, batch_size=1, input_shape=(4,))
    with pytest.raises(UserError, match="failed on batch 1"):
        extract_module(nn.Linear(4, 2), batch_size=1, input_shape=(5,))
