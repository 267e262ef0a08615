"""Peak GPU memory of one training or inference step (what `torch.cuda.max_memory_allocated` reports), from the
model graph, the batch size, the precision and the optimizer.

Why a simulation and not a formula: the peak is the largest sum of what is alive at one moment, and what is alive
changes through the step. Weights and optimizer state live throughout; the forward pass piles up the tensors
autograd keeps for backward (which ones, and in which dtype, are PyTorch's rules: `memory_rules.py`); the loss on
a language model's vocabulary-sized logits briefly needs several fp32 copies of them; backward frees activations
while it fills the gradients; Adam's update needs one more parameter-sized temporary. So the step is replayed op
by op over the graph (topological order forward, reverse order backward), keeping a ledger of live tensors, and
the peak and its breakdown are read off that ledger. Nothing here is fitted to a model: the only fitted number is
the allocator's slack (`MemorySettings.slack`, 0.7 %), see docs/predictor.md, "Peak GPU memory".

Conventions (those of the H100 measurements): `fp32` is plain fp32; `fp16`/`bf16` are automatic mixed precision
(autocast, fp32 master weights, gradients and optimizer state); `torch.optim` optimizers with their default
multi-tensor (foreach) update; `zero_grad(set_to_none=True)`; a cross-entropy loss on the model's output.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from offpeak_graph.schema import ModelGraph, Op, OpType
from offpeak_predictor.memory_plan import StepPlan, build_plan, cast_bytes
from offpeak_predictor.memory_rules import AMP_PRECISIONS, FP32, PRECISIONS

GIB = 2**30

# Optimizer state per parameter, in fp32 tensors, and parameter-sized temporaries its update allocates.
# SGD with momentum keeps one buffer, Adam/AdamW two moments; the foreach Adam update builds sqrt(v) as a new
# list before dividing (`torch.optim.adam._multi_tensor_adam`); foreach SGD updates in place.
OPTIMIZER_STATES: dict[str, int] = {"none": 0, "sgd": 1, "sgd-nomomentum": 0, "adam": 2, "adamw": 2,
                                    "rmsprop": 1, "adagrad": 1}  # fmt: skip
OPTIMIZER_TEMPORARIES: dict[str, int] = {"none": 0, "sgd": 0, "sgd-nomomentum": 0, "adam": 1, "adamw": 1,
                                         "rmsprop": 1, "adagrad": 1}  # fmt: skip
MODES: frozenset[str] = frozenset({"train", "inference"})
USABLE_FRACTION = 0.95  # of a GPU's memory a step's peak may take (see `fits_gpu`)

CATEGORIES: tuple[str, ...] = ("weights", "amp_weight_copies", "gradients", "optimizer", "activations",
                               "transient")  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class MemorySettings:
    """What `max_memory_allocated` counts beyond the model's tensors.

    slack: fraction added to the peak of live tensor bytes, the one constant fitted to measurements (on the 96
    H100 rows; leave-one-model-out in docs/predictor.md). The caching allocator hands out whole cached blocks (a
    block less than 1 MiB bigger than asked for is not split), so it counts a little more than the tensors.
    fixed_bytes: allocated once per process whatever the model, not fitted: PyTorch's cuBLAS and cuBLASLt
    workspaces, 32 MiB each on Hopper (less on older GPUs, so this errs high there).
    """

    slack: float = 0.007
    fixed_bytes: int = 64 * 2**20


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryEstimate:
    """Predicted peak of `torch.cuda.max_memory_allocated` over a step, and what is alive at that moment."""

    peak_bytes: int
    phase: str  # forward | loss | backward | optimizer: where in the step the peak falls
    weights_bytes: int  # fp32 parameters
    amp_weight_copies_bytes: int  # autocast's half copies of the weights, kept for backward
    gradients_bytes: int  # parameter gradients accumulated so far
    optimizer_bytes: int  # optimizer state and update temporaries
    activations_bytes: int  # tensors kept for backward (train) or still to be read (inference)
    transient_bytes: int  # activation gradients, loss intermediates, casts in flight
    workspace_bytes: int  # allocator slack and library workspaces
    mode: str
    precision: str
    optimizer: str
    batch_size: int
    peak_op: str = ""  # the op running at the peak ("cross-entropy" for the loss, "" in the optimizer step)

    @property
    def peak_gib(self) -> float:
        return self.peak_bytes / GIB

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "peak_gib": round(self.peak_gib, 3)}


def peak_memory_bytes(
    graph: ModelGraph,
    *,
    batch_size: int | None = None,
    precision: str | None = None,
    optimizer: str | None = None,
    mode: str | None = None,
    with_loss: bool = True,
    settings: MemorySettings | None = None,
) -> MemoryEstimate:
    """Peak GPU memory of one step of `graph` (each argument defaults to the graph's own).

    `batch_size` rescales the graph's activations linearly (a graph extracted at batch 8 answers for batch 64).
    `precision` may differ from the one the graph was extracted at: dtypes are re-derived from autocast's rules.
    `with_loss` adds a cross-entropy on the model's output (logits), as training and evaluation loops do.
    Raises ValueError on an unknown precision, optimizer or mode.
    """
    settings = settings or MemorySettings()
    precision = precision or graph.precision
    optimizer = (optimizer or graph.optimizer or "none").lower()
    mode = mode or graph.mode
    batch = batch_size or graph.batch_size
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; use one of {', '.join(sorted(PRECISIONS))}")
    if optimizer not in OPTIMIZER_STATES:
        raise ValueError(f"unknown optimizer {optimizer!r}; use one of {', '.join(sorted(OPTIMIZER_STATES))}")
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use train or inference")
    if batch <= 0:
        raise ValueError(f"batch size must be positive, got {batch}")
    train = mode == "train"
    plan = build_plan(graph, amp=precision in AMP_PRECISIONS, scale=batch / max(graph.batch_size, 1))
    params = sum(op.params for op in graph.ops)
    step = _Step(plan)
    step.ledger.alloc(("weights",), FP32 * params, "weights")
    if train:
        step.ledger.alloc(("state",), FP32 * params * OPTIMIZER_STATES[optimizer], "optimizer")
    step.forward(train=train)
    if with_loss:
        step.loss_forward()
    step.end_forward(train=train)
    if train:
        step.backward(with_loss=with_loss, total_param_bytes=FP32 * params)
        step.ledger.alloc(("update",), FP32 * params * OPTIMIZER_TEMPORARIES[optimizer], "optimizer")
        step.ledger.observe("optimizer")
    top = step.ledger.peak
    workspace = round(settings.slack * top.total) + settings.fixed_bytes
    return MemoryEstimate(
        peak_bytes=top.total + workspace,
        phase=top.phase,
        weights_bytes=top.by["weights"],
        amp_weight_copies_bytes=top.by["amp_weight_copies"],
        gradients_bytes=top.by["gradients"],
        optimizer_bytes=top.by["optimizer"],
        activations_bytes=top.by["activations"],
        transient_bytes=top.by["transient"],
        workspace_bytes=workspace,
        mode=mode,
        precision=precision,
        optimizer=optimizer if train else "none",
        batch_size=batch,
        peak_op=top.op,
    )


def fits_gpu(estimate: MemoryEstimate, *, gpu_memory_bytes: float, usable: float = USABLE_FRACTION) -> bool:
    """Whether a step fits a GPU: its peak within `usable` of the GPU's memory. The rest is for what
    `max_memory_allocated` does not count: the CUDA context (about 0.5 GiB), the caching allocator's reserved
    but unused blocks, and other processes. With the catalogue's `GpuSpec.memory_gb` pass `memory_gb * 1e9`
    (decimal: a "24 GB" L4 shows 22.5 GiB to CUDA)."""
    return estimate.peak_bytes <= usable * gpu_memory_bytes


# ---- the ledger -----------------------------------------------------------------------------------------------
Key = tuple[object, ...]


@dataclass(slots=True)
class _Snapshot:
    total: int = 0
    phase: str = "forward"
    op: str = ""
    by: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))


class _Ledger:
    """Live tensors by key, their bytes by category, and the largest total seen at an observation point."""

    def __init__(self) -> None:
        self.live: dict[Key, tuple[int, str]] = {}
        self.by: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
        self.total = 0
        self.peak = _Snapshot()

    def alloc(self, key: Key, nbytes: int, category: str) -> None:
        if key in self.live or nbytes <= 0:
            return
        self.live[key] = (nbytes, category)
        self.by[category] += nbytes
        self.total += nbytes

    def free(self, key: Key) -> None:
        entry = self.live.pop(key, None)
        if entry is not None:
            self.by[entry[1]] -= entry[0]
            self.total -= entry[0]

    def recategorise(self, key: Key, category: str) -> None:
        entry = self.live.get(key)
        if entry is not None:
            self.by[entry[1]] -= entry[0]
            self.by[category] += entry[0]
            self.live[key] = (entry[0], category)

    def observe(self, phase: str, op: str = "") -> None:
        if self.total > self.peak.total:
            self.peak = _Snapshot(total=self.total, phase=phase, op=op, by=dict(self.by))


# ---- the step, phase by phase --------------------------------------------------------------------------------
class _Step:
    """One step replayed over a plan: the ledger of live tensors and what autograd still keeps."""

    def __init__(self, plan: StepPlan) -> None:
        self.plan = plan
        self.ledger = _Ledger()
        self.readers = dict(plan.readers)  # storage -> forward reads still to come
        self.saved: dict[int, list[Key]] = {}  # op -> keys it keeps for backward
        self.savers: dict[Key, int] = {}  # key -> ops whose backward still needs it

    def forward(self, *, train: bool) -> None:
        plan, ledger = self.plan, self.ledger
        for op in plan.ops:
            i = op.id
            casts = {p: cast_bytes(plan, op, p) for p in set(op.inputs)}
            for p, nbytes in casts.items():
                ledger.alloc(("cast", i, p), nbytes, "transient")
            # autocast's half weight copy: kept for backward in training; no cast cache under inference_mode
            ledger.alloc(("wcopy", i), plan.weight_copies[i], "amp_weight_copies")
            if plan.storage[i] == i:
                ledger.alloc(("out", i), plan.out_bytes[i], "activations")
            ledger.alloc(("extra", i), plan.extra_bytes[i], "activations")
            ledger.alloc(("scratch", i), plan.scratch_forward[i], "transient")
            ledger.observe("forward", op.name or op.type)
            ledger.free(("scratch", i))
            kept = self._kept(op, casts) if train and plan.requires_grad[i] else []
            self.saved[i] = kept
            for key in kept:
                self.savers[key] = self.savers.get(key, 0) + 1
            for p, nbytes in casts.items():
                if ("cast", i, p) in self.savers:
                    ledger.recategorise(("cast", i, p), "activations")  # kept for backward: an activation now
                else:
                    ledger.free(("cast", i, p))
            for key in (("wcopy", i), ("extra", i)):
                if key not in self.savers:
                    ledger.free(key)
            for s in plan.reads[i]:
                self.readers[s] -= 1
                self._maybe_free(s)
            self._maybe_free(plan.storage[i])

    def _kept(self, op: Op, casts: dict[int, int]) -> list[Key]:
        """Keys of the tensors autograd keeps for `op`'s backward (see `memory_rules.SaveRule`)."""
        plan, i = self.plan, op.id
        if i in plan.keep_inputs:  # the last matmul of a fused attention keeps q, k, v and its output
            fused: list[Key] = [("out", plan.storage[p]) for p in [*plan.keep_inputs[i], i]]
            return fused
        if plan.out_bytes[i] == 0 and plan.floats[i]:
            return []  # fused away: nothing materialised, nothing kept
        rule = plan.rules[i]
        inputs = sorted(set(op.inputs))
        chosen: list[int] = []
        if rule.inputs == "all":
            chosen = inputs
        elif rule.inputs == "partners" and len(inputs) == 1:
            chosen = inputs if op.params > 0 else []  # x * parameter keeps x; x * buffer keeps only the buffer
        elif rule.inputs == "partners":
            chosen = [p for p in inputs if any(plan.requires_grad[q] for q in inputs if q != p)]
        elif rule.inputs == "masks":
            chosen = [p for p in inputs if not plan.floats[p]]
        kept: list[Key] = [("cast", i, p) if casts.get(p) else ("out", plan.storage[p]) for p in chosen]
        if rule.output:
            kept.append(("out", plan.storage[i]))
        if plan.extra_bytes[i]:
            kept.append(("extra", i))
        if plan.weight_copies[i]:
            kept.append(("wcopy", i))
        return kept

    def _maybe_free(self, s: int) -> None:
        """Free an activation once no op will read it, nothing keeps it and it is no model input or output."""
        if self.readers.get(s, 0) <= 0 and s not in self.plan.held and ("out", s) not in self.savers:
            self.ledger.free(("out", s))

    def loss_forward(self) -> None:
        """`F.cross_entropy(logits.float(), y)`: an fp32 copy of half logits, then log-softmax's fp32 output (kept
        for backward); both vocabulary-sized for a language model."""
        logits = self.plan.logits
        if logits is None:
            return
        numel = self.plan.out_bytes[logits] // max(self.plan.elem_bytes[logits], 1)
        if self.plan.elem_bytes[logits] != FP32:
            self.ledger.alloc(("loss", "cast"), FP32 * numel, "transient")
        self.ledger.alloc(("loss", "logsoftmax"), FP32 * numel, "transient")
        self.ledger.observe("loss", "cross-entropy")
        self.ledger.free(("loss", "cast"))

    def end_forward(self, *, train: bool) -> None:
        """The forward function returns: its outputs are dropped unless autograd keeps them."""
        for s in self.plan.held:
            if self.plan.ops[s].type != OpType.INPUT and ("out", s) not in self.savers:
                self.ledger.free(("out", s))
        if not train:
            self.ledger.free(("loss", "logsoftmax"))

    def backward(self, *, with_loss: bool, total_param_bytes: int) -> None:
        """Reverse order: each op's backward allocates its inputs' and parameters' gradients, then frees its
        outputs' gradients and whatever only it kept."""
        plan, ledger = self.plan, self.ledger
        logits = plan.logits
        if logits is None:
            return
        numel = plan.out_bytes[logits] // max(plan.elem_bytes[logits], 1)
        if with_loss:  # nll_loss backward, then log_softmax backward: three fp32 logits-sized tensors at once
            ledger.alloc(("loss", "grad_logsoftmax"), FP32 * numel, "transient")
            ledger.alloc(("loss", "grad_logits"), FP32 * numel, "transient")
            ledger.observe("backward", "cross-entropy")
            for name in ("logsoftmax", "grad_logsoftmax", "grad_logits"):
                ledger.free(("loss", name))
        inputs: set[Key] = {("out", s) for s in plan.held if plan.ops[s].type == OpType.INPUT}  # the loop holds
        reached = {logits}  # ops whose output a gradient reaches
        ledger.alloc(("grad", logits), plan.out_bytes[logits], "transient")
        grads_left = total_param_bytes
        for op in reversed(plan.ops):
            i = op.id
            if i not in reached:
                continue  # no gradient reaches this op (an auxiliary head the loss does not use)
            for p in set(op.inputs) | set(plan.keep_inputs.get(i, [])):
                if plan.requires_grad[p]:
                    reached.add(p)
                    ledger.alloc(("grad", p), plan.out_bytes[p], "transient")
            weights = FP32 * max(op.params, plan.weights[i])
            kept = min(weights, grads_left)  # a tied weight gets its buffer once; its second gradient is added
            grads_left -= kept
            ledger.alloc(("pgrad", i), kept, "gradients")
            ledger.alloc(("pgrad-extra", i), weights - kept, "transient")
            ledger.alloc(("pgrad-half", i), plan.weight_copies[i], "transient")  # the copy's gradient, then fp32
            ledger.alloc(("scratch", i), plan.scratch_backward[i], "transient")
            ledger.observe("backward", op.name or op.type)
            for kind in ("scratch", "grad", "pgrad-extra", "pgrad-half"):
                ledger.free((kind, i))
            for key in self.saved.get(i, []):
                self.savers[key] -= 1
                if self.savers[key] <= 0:
                    del self.savers[key]
                    if key not in inputs:
                        ledger.free(key)
        for left in list(ledger.live):  # autograd frees what is left of the graph
            if left[0] in ("out", "cast", "wcopy", "extra", "grad") and left not in inputs:
                ledger.free(left)
