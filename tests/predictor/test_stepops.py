"""What the step composition prices beyond the traced forward (`stepops.py`, issue #14): attention that
`nn.MultiheadAttention` runs fused, and the cross-entropy loss on the logits. Real graphs from
`tests/predictor/data/` (no torch)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from offpeak_graph.schema import ModelGraph, OpType, load_graph
from offpeak_predictor.graphfeatures import summarise
from offpeak_predictor.stepops import fused_attention_ops, logits_op, loss_ops, step_ops

DATA = Path(__file__).parent / "data"


def _graph(name: str) -> ModelGraph:
    return load_graph(str(DATA / f"{name}.json.gz"))


def test_multihead_attention_is_priced_as_one_fused_op_per_layer():
    graph = _graph("vit_b_32_b32_train")  # torchvision ViT-B/32: 12 nn.MultiheadAttention, traced as math
    assert sum(op.framework_type == "aten._safe_softmax" for op in graph.ops) == 12
    ops = fused_attention_ops(graph.ops)
    fused = [op for op in ops if op.type == OpType.SDPA]
    assert len(fused) == 12
    assert not any(op.framework_type in ("aten._safe_softmax", "aten.bmm") for op in ops)
    # the two products' FLOPs are kept: q @ k^T and @ v, 2 x (32 x 12 heads x 50 x 50 x 64) MACs each layer
    assert math.isclose(sum(op.flops for op in ops), graph.total_flops_forward)
    assert math.isclose(fused[0].flops, 2 * 2 * 32 * 12 * 50 * 50 * 64)
    # it reads q, k and v (the packed in-projection's output), not the [batch, heads, seq, seq] scores
    assert fused[0].bytes_read <= 3 * 32 * 50 * 768 * 4 and fused[0].bytes_written == 32 * 50 * 768 * 4
    assert len(ops) < len(graph.ops) - 12 * 3


def test_attention_already_fused_is_left_alone():
    graph = _graph("gpt2_large_lm_b1_train")  # HF GPT-2 calls F.scaled_dot_product_attention: one op each
    assert fused_attention_ops(graph.ops) == graph.ops


def test_loss_on_a_language_models_logits():
    graph = _graph("gpt2_large_lm_b1_train")
    assert logits_op(graph.ops) is graph.ops[-1]
    n = 1 * 1024 * 50257
    ops = loss_ops(graph.ops, "fp32")  # fp32: logits.float() is no copy
    assert [op.framework_type for op in ops[-2:]] == ["aten._log_softmax", "aten.nll_loss_forward"]
    assert ops[-2].bytes_read + ops[-2].bytes_written == 8 * n
    amp = loss_ops(graph.ops, "bf16")  # autocast: the linear's half logits are copied to fp32 first
    assert amp[-3].framework_type == "aten._to_copy" and amp[-3].bytes_read + amp[-3].bytes_written == 6 * n
    assert len(amp) == len(graph.ops) + 3


def test_summary_prices_the_step_ops_and_as_traced_keeps_the_forward():
    graph = _graph("vit_b_32_b32_train")
    shipped, traced = summarise(graph), summarise(graph, as_traced=True)
    assert shipped.key == traced.key == graph.content_hash()  # same graph, same caches
    assert len(shipped.ops) == len(summarise(replace(graph, ops=step_ops(graph)), as_traced=True).ops)
    assert int(np.sum(traced.ops.op_class == "softmax")) == 12  # the math path's softmax
    assert int(np.sum(shipped.ops.op_class == "softmax")) == 1  # the loss's log-softmax
    assert shipped.ops.bytes.sum() < 0.9 * traced.ops.bytes.sum()  # no scores (small at 50 tokens), no up-casts
    lm = _graph("gpt2_large_lm_b1_train")
    assert summarise(lm).ops.bytes.sum() - summarise(lm, as_traced=True).ops.bytes.sum() >= 10 * 1024 * 50257
