"""The plan of one step's memory: for every op of a graph, the bytes of its output in the dtype it computes in,
which allocation holds it (in-place ops write into their input's), what it makes and keeps inside (masks, copies,
attention probabilities), and what autocast casts for it. Pure; `memory.py` replays the step over this plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from offpeak_graph.schema import ModelGraph, Op, OpType
from offpeak_predictor.memory_rules import (
    FP32,
    HALF,
    LOWER_PRECISION,
    SaveRule,
    amp_bytes,
    computes_fp32,
    element_bytes,
    gqa_heads,
    is_float,
    is_inplace,
    keeps_result,
    save_rule,
    weight_numel,
)


@dataclass(frozen=True, slots=True)
class StepPlan:
    """Per-op facts of one step at one batch size and precision (indexed by op id)."""

    ops: list[Op]
    storage: list[int]  # op id -> id of the op whose allocation holds its output (itself unless in-place)
    out_bytes: list[int]  # bytes of each op's outputs (batch-scaled), in the dtype it computes in
    elem_bytes: list[int]  # bytes per element of each op's output
    floats: list[bool]  # the output is a floating-point tensor
    readers: dict[int, int]  # storage -> number of ops that read it in the forward pass
    held: set[int]  # storages alive until the forward pass ends: model inputs and outputs
    amp: bool
    logits: int | None  # the op whose output the loss reads
    requires_grad: list[bool]
    extra_bytes: list[int]  # tensors made inside the op and kept for backward (masks, indices, copies...)
    scratch_forward: list[int]  # temporaries alive only while the op runs forward
    scratch_backward: list[int]  # ... and backward
    keep_inputs: dict[int, list[int]]  # ops whose kept inputs are not their graph inputs (fused attention)
    rules: list[SaveRule]  # what each op keeps for backward
    weights: list[int]  # elements of the weights each op multiplies by (tied weights at every use)
    weight_copies: list[int]  # bytes of autocast's half copy of those weights (0 in fp32 or for other ops)
    reads: list[set[int]]  # storages each op reads in the forward pass


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def build_plan(graph: ModelGraph, *, amp: bool, scale: float) -> StepPlan:
    """The plan of `graph` under autocast (`amp`) or fp32, its activations scaled by `scale` (batch ratio).
    Raises ValueError when op ids are not their positions (the schema's topological order)."""
    ops = graph.ops
    n = len(ops)
    if any(op.id != i or any(not 0 <= p < i for p in op.inputs) for i, op in enumerate(ops)):
        raise ValueError("model graph ops must have ids 0..n-1 in topological order, each reading earlier ops")

    def elements(shape: list[int]) -> float:
        """Elements of one tensor at the requested batch: a tensor with a dimension that is a multiple of the
        graph's batch carries the batch (`[B, S, H]`, `[B*S, H]`, `[S, B, H]`, `[3, S, B, H]`...)."""
        batch = max(graph.batch_size, 1)
        carries = any(int(d) > 0 and int(d) % batch == 0 for d in shape)
        return _numel(shape) * scale if carries and scale != 1 else float(_numel(shape))

    floats = [is_float(op.dtype) for op in ops]
    elem, out_bytes, numel = [0] * n, [0] * n, [0.0] * n
    storage = list(range(n))
    consumers: dict[int, list[int]] = {}
    for op in ops:
        for p in set(op.inputs):
            consumers.setdefault(p, []).append(op.id)
    for op in ops:
        if not floats[op.id]:
            elem[op.id] = element_bytes(op.dtype)
        elif not amp:
            elem[op.id] = FP32
        else:
            ins = [elem[p] for p in op.inputs if floats[p]]
            elem[op.id] = amp_bytes(op, ins, has_buffer_input=_reads_buffer(op))
        numel[op.id] = sum(elements(s) for s in op.output_shapes)
        out_bytes[op.id] = round(numel[op.id] * elem[op.id])
    keep_inputs = fuse_decomposed_attention(ops, consumers, out_bytes)
    for op in ops:
        if is_inplace(op) and op.inputs:
            same = [p for p in op.inputs if out_bytes[p] == out_bytes[op.id]]
            if same:
                storage[op.id] = storage[max(same)]
        elif _is_free_layout_copy(op, ops, batch=graph.batch_size, amp=amp):
            storage[op.id] = storage[op.inputs[0]]
    rules = [save_rule(op) for op in ops]
    weights = [weight_numel(op) for op in ops]
    requires = [False] * n
    for op in ops:
        requires[op.id] = floats[op.id] and op.type != OpType.INPUT and (
            op.params > 0 or weights[op.id] > 0 or any(requires[p] for p in op.inputs)
        )
    extra, scratch_fwd, scratch_bwd = [0] * n, [0] * n, [0] * n
    for op in ops:
        rule = rules[op.id]
        in_elem = max((elem[p] for p in op.inputs if floats[p]), default=elem[op.id])
        extra[op.id] = round(rule.extra_tensors * out_bytes[op.id] + rule.extra_input_tensors * numel[op.id] * in_elem
                             + rule.extra_bytes_per_element * numel[op.id])  # fmt: skip
        if storage[op.id] != op.id and rule.inputs == "all" and not keeps_result(op):
            extra[op.id] += out_bytes[op.id]  # in place, but the gradient needs the input: autograd copies it
        heads = gqa_heads(op)
        if heads is not None and not amp:  # fp32 grouped-query attention: no fused kernel, the math path
            q, k = op.input_shapes[0], op.input_shapes[1]
            # it keeps the [batch, heads, seq, seq] probabilities; the scores before softmax are a temporary, and
            # backward needs two more of that size (the H100's Mistral/Qwen2 fp32 rows fit this within 0.5 %)
            probs = FP32 * elements([*q[:-1], k[-2]])
            extra[op.id] += round(probs)
            scratch_fwd[op.id], scratch_bwd[op.id] = round(probs), round(2 * probs)
    reads = [{storage[p] for p in (*op.inputs, *keep_inputs.get(op.id, ()))} for op in ops]
    readers: dict[int, int] = {}
    for op_reads in reads:
        for s in op_reads:
            readers[s] = readers.get(s, 0) + 1
    held = {storage[op.id] for op in ops if op.type == OpType.INPUT or not consumers.get(op.id)}
    logits = next((op.id for op in reversed(ops) if floats[op.id] and not consumers.get(op.id)
                   and op.type != OpType.INPUT), None)  # fmt: skip
    return StepPlan(ops=ops, storage=storage, out_bytes=out_bytes, elem_bytes=elem, floats=floats, readers=readers,
                 held=held, amp=amp, logits=logits, requires_grad=requires, extra_bytes=extra,
                 scratch_forward=scratch_fwd, scratch_backward=scratch_bwd, keep_inputs=keep_inputs, rules=rules,
                 weights=weights, weight_copies=[HALF * w if amp and op.type in LOWER_PRECISION else 0
                                                 for op, w in zip(ops, weights, strict=True)],
                 reads=reads)  # fmt: skip


def _is_free_layout_copy(op: Op, ops: list[Op], *, batch: int, amp: bool) -> bool:
    """Whether the `transpose(1, 2).reshape(...)` after a fused attention, traced as a copy (the meta kernel returns
    [batch, heads, seq, dim] contiguous), is a view on a GPU. The flash and memory-efficient kernels lay their
    output out like the query, which is [batch, seq, heads, dim] when it comes from a linear layer (and from
    rotary embeddings applied to one): then going back to [batch, seq, hidden] is free. It is a real copy when the
    query was concatenated (partial rotary: GPT-NeoX, Phi), when attention ran the math path (fp32 grouped-query),
    and for `nn.MultiheadAttention`, which works sequence-first."""
    if op.type != OpType.RESHAPE or op.framework_type != "aten.clone" or len(set(op.inputs)) != 1:
        return False
    attention = ops[op.inputs[0]]
    if attention.type != OpType.SDPA or not op.output_shapes or not op.output_shapes[0]:
        return False
    if int(op.output_shapes[0][0]) != batch or (gqa_heads(attention) is not None and not amp):
        return False
    return bool(attention.inputs) and all(ops[p].type != OpType.CONCAT for p in attention.inputs)


def fuse_decomposed_attention(ops: list[Op], consumers: dict[int, list[int]], out_bytes: list[int],
                              members: dict[int, set[int]] | None = None) -> dict[int, list[int]]:  # fmt: skip
    """Attention traced as its math decomposition (`torch.nn.MultiheadAttention` calls the fused kernel through
    a path the tracer sees op by op: casts to fp32 for half inputs, scale, `q @ k^T`, `_safe_softmax`, `@ v`) runs
    as one fused kernel on a GPU, which never materialises the scores: zero the decomposition's intermediates and
    let the last matmul keep what the fused kernel keeps (q, k, v and the output).
    Returns {last matmul: the inputs it keeps}; `members`, when given, receives {last matmul: the ops it absorbs}
    (the step-time pricing, `stepops.py`, prices each attention as one op)."""
    keep: dict[int, list[int]] = {}
    matmuls = (OpType.BMM, OpType.MATMUL)

    def is_cast(i: int) -> bool:
        return ops[i].framework_type == "aten._to_copy" and len(set(ops[i].inputs)) == 1

    for op in ops:
        if op.framework_type != "aten._safe_softmax":
            continue
        fused = {op.id}
        frontier, scores = list(op.inputs), None
        while frontier:  # back through a mask addition to the q @ k^T product
            p = frontier.pop()
            if ops[p].type in matmuls and ops[p].params == 0:
                scores = p
            elif ops[p].type == OpType.ADD and len(fused) < 4:
                fused.add(p)
                frontier.extend(ops[p].inputs)
        after: list[int] = []
        readers = list(consumers.get(op.id, []))
        while readers:  # forward through casts of the probabilities to the `@ v` product
            c = readers.pop()
            if is_cast(c):
                fused.add(c)
                readers.extend(consumers.get(c, []))
            else:
                after.append(c)
        if scores is None or len(after) != 1 or ops[after[0]].type not in matmuls:
            continue  # something else reads the probabilities (need_weights=True): keep the ops as traced
        fused.add(scores)
        for p in ops[scores].inputs:  # the scaling of q and k
            if ops[p].type == OpType.MUL and ops[p].params == 0 and len(set(ops[p].inputs)) == 1:
                fused.add(p)
        sources: set[int] = set()
        for p in {q for f in (*fused, after[0]) for q in ops[f].inputs} - fused:
            while is_cast(p):  # q, k, v up-cast for the math path
                fused.add(p)
                p = ops[p].inputs[0]
            sources.add(p)
        for f in fused:
            out_bytes[f] = 0
        keep[after[0]] = sorted(sources - fused)
        if members is not None:
            members[after[0]] = fused
    return keep


def _reads_buffer(op: Op) -> bool:
    """Whether an op reads a tensor no op produced and that is no parameter: a buffer (a bias such as BART's
    `final_logits_bias`, a mask), fp32 under autocast. Seen as more multi-element input shapes than producers."""
    if op.type in LOWER_PRECISION:
        return False
    sized = [s for s in op.input_shapes if _numel(s) > 1]
    return len(sized) > len(set(op.inputs))


def cast_bytes(plan: StepPlan, op: Op, p: int) -> int:
    """Bytes of the copy autocast makes of input `p` for `op` (0 when it reads `p` as it is)."""
    if not plan.amp or not plan.floats[p]:
        return 0
    numel = plan.out_bytes[p] // max(plan.elem_bytes[p], 1)
    if op.type in LOWER_PRECISION and plan.elem_bytes[p] == FP32:
        return HALF * numel
    if computes_fp32(op) and plan.elem_bytes[p] == HALF:
        return FP32 * numel
    return 0
