"""The ops a step runs on the GPU, from the traced forward graph: what the step composition prices.

The extractor records one forward pass as PyTorch dispatches it on the meta device. Two things a real step runs
differ from that record (issue #14, `bench/predictor_ablation.py`):

* **Attention inside `nn.MultiheadAttention`** (torchvision's ViT, many user models) calls the fused attention
  kernel from within `F.multi_head_attention_forward`, where the tracer sees it only as its math decomposition
  (up-casts, `q @ k^T`, `_safe_softmax`, `@ v`), each piece priced as a kernel that materialises the
  [batch, heads, seq, seq] scores. A GPU runs one fused kernel: it is priced as one SDPA op (the memory plan
  already treats it so, `memory_plan.fuse_decomposed_attention`).
* **The loss.** A training step, and an evaluation loop, runs `F.cross_entropy(logits.float(), y)` on the model's
  output, which the forward graph ends before: the fp32 copy of half logits (autocast), log-softmax over the
  classes and the NLL, then their backward. Nothing for 1,000 classes; for a language model's vocabulary
  (GPT-2: 50,257 logits for every token) gigabytes of fp32 traffic a step.

Pure functions of a `ModelGraph`; the graph itself is left as extracted.
"""

from __future__ import annotations

import math
from dataclasses import replace

from offpeak_graph.schema import ModelGraph, Op, OpType
from offpeak_predictor.memory_plan import fuse_decomposed_attention
from offpeak_predictor.memory_rules import LOWER_PRECISION

_HALF = ("fp16", "bf16")


def step_ops(graph: ModelGraph) -> list[Op]:
    """The forward ops a step prices: decomposed attention fused, the cross-entropy on the logits appended."""
    return loss_ops(fused_attention_ops(graph.ops), graph.precision)


def fused_attention_ops(ops: list[Op]) -> list[Op]:
    """`ops` with each traced math decomposition of attention replaced by one SDPA op: the FLOPs of its two
    products, reading its q, k, v and writing the output (what the fused kernel does)."""
    consumers: dict[int, list[int]] = {}
    for op in ops:
        for p in set(op.inputs):
            consumers.setdefault(p, []).append(op.id)
    members: dict[int, set[int]] = {}
    keep = fuse_decomposed_attention(ops, consumers, [1] * len(ops), members)
    if not keep:
        return ops
    by_id = {op.id: op for op in ops}
    absorbed = set().union(*members.values())
    out: list[Op] = []
    for op in ops:
        if op.id in absorbed:
            continue
        if op.id in keep:
            sources = keep[op.id]
            op = replace(op, type=OpType.SDPA, framework_type="attention (fused on a GPU, traced as math)",
                         flops=op.flops + sum(by_id[m].flops for m in members[op.id]), inputs=sources,
                         bytes_read=sum(by_id[p].bytes_written for p in sources if p in by_id))  # fmt: skip
        out.append(op)
    return out


def logits_op(ops: list[Op]) -> Op | None:
    """The op whose output the loss reads: the last floating-point op that no op consumes."""
    consumed = {p for op in ops for p in op.inputs}
    for op in reversed(ops):
        if op.type != OpType.INPUT and op.id not in consumed and op.dtype.startswith(("float", "bfloat")):
            return op
    return None


def loss_ops(ops: list[Op], precision: str) -> list[Op]:
    """`ops` followed by `F.cross_entropy(logits.float(), y)` on the logits: an fp32 copy when autocast made them
    half, log-softmax (reads and writes fp32), and the NLL, priced as its backward's logits-sized gradient (the
    forward gathers one value a row). Backward factors of their classes cover the backward."""
    logits = logits_op(ops)
    if logits is None or not logits.output_shapes or not logits.output_shapes[0]:
        return ops
    shape = [int(d) for d in logits.output_shapes[0]]
    numel = math.prod(shape)
    out, nxt, src = list(ops), max(op.id for op in ops) + 1, logits.id
    if precision in _HALF and logits.type in LOWER_PRECISION:
        out.append(Op(id=nxt, type=OpType.ELEMENTWISE, name="loss", framework_type="aten._to_copy", inputs=[src],
                      output_shapes=[shape], dtype="float32", bytes_read=2 * numel, bytes_written=4 * numel))
        src, nxt = nxt, nxt + 1
    out.append(Op(id=nxt, type=OpType.SOFTMAX, name="loss", framework_type="aten._log_softmax", inputs=[src],
                  output_shapes=[shape], dtype="float32", bytes_read=4 * numel, bytes_written=4 * numel))
    out.append(Op(id=nxt + 1, type=OpType.LOSS, name="loss", framework_type="aten.nll_loss_forward", inputs=[nxt],
                  output_shapes=[shape], dtype="float32", bytes_read=0, bytes_written=2 * numel))
    return out
