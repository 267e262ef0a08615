"""Step-level ablations of the predictor in about half a minute each (issue #14): what a change to the step
composition or the model-level correction does to the held-out slices that matter, without the full
`offpeak eval-predictor` (20-40 min).

The op boosters are fitted once per run (with and without our H100 single ops, the evaluation's settings); every
variant then recomputes the step features and refits only the correction booster, per fold:

- `h100_family_out`: each model family of our H100 steps, trained on the public rows plus the other families' H100
  steps (the shipped model's case: a new model on a GPU we measured);
- `h100_unseen`: every H100 step, trained on public rows only, op boosters without H100 ops (a new GPU);
- `public_family_out`: each model family of the public rows, trained on the rest plus the H100 steps.

It reads our H100 rows only (`OWN_GPUS["H100"]`): its slices are those `offpeak eval-predictor` reported before our
H200 rows joined the training data (`modern_gpu_out` and `modern_family_out` now cover both GPUs). Needs the full
data (H100 rows):

    .venv/bin/python bench/predictor_ablation.py [--variant NAME ...] [--json] [--per-model]

Variants (`VARIANTS`): the changes tried on 2026-11-24, kept here so they can be rerun on new data. `baseline` is the
shipped step model (`stepops.step_ops`); `as-traced` the one before it, which the older variants were measured on.
The `dispatch-*` variants count every ATen op each model dispatches by tracing it again (about 2 minutes once, then
cached next to the graphs); `uncollapsed` traces every model again without merging leaf modules (same).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from offpeak_core.datapaths import runtime_dir
from offpeak_graph.schema import ModelGraph, Op, OpType
from offpeak_predictor import graphfeatures, stepops, train
from offpeak_predictor.features import BACKWARD_FACTOR, FREE, op_class
from offpeak_predictor.gpus import resolve_gpu
from offpeak_predictor.graphcache import cache_dir, cache_key, get_graph
from offpeak_predictor.graphfeatures import GraphSummary, StepContext, step_composition, step_features, summarise
from offpeak_predictor.loaders import OWN_GPUS, graph_args_of
from offpeak_predictor.memory_rules import LOWER_PRECISION
from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.pipeline import load_tables, modern_model_rows, modern_op_rows
from offpeak_predictor.train import TrainSettings, attach_graphs, fit_op_boosters, fit_step_booster, trainable

SETTINGS = TrainSettings(seed=7, max_op_rows_per_booster=15_000, op_rounds=80)  # as evaluate.run_evaluation


@dataclass(frozen=True)
class Variant:
    """A change under test: booster settings, a host-time model, extra step features, a weight per H100 row."""

    about: str
    settings: TrainSettings = SETTINGS
    host: Callable[[GraphSummary, StepContext], float] | None = None
    legacy_flag: bool = False  # a feature: the row ran PyTorch 1.x
    h100_weight: float = 1.0
    combine: Callable[[float, float], float] = max  # (GPU seconds, host seconds) -> step seconds
    ops: Callable[[ModelGraph], list[Op]] | None = None  # the ops a step prices; None: as shipped (`step_ops`)
    uncollapsed: bool = False  # graphs traced without merging a leaf module's ATen ops into one op
    dispatch_features: bool = False  # features from the dispatched-op count (see `dispatch_counts`)
    keep_conv_backward: bool = False  # retyped convolutions (framework_type "retyped-conv") keep the conv backward 2x
    same_models_out: bool = False  # diagnostic: H100 family out also drops the public steps of the same model names


def _host_per_op(inference_us: float, train_us: float, amp_cast_us: float = 0.0
                 ) -> Callable[[GraphSummary, StepContext], float]:  # fmt: skip
    """Host time of an eager step: per forward op (a training step's backward included), plus per parameter op
    under autocast (weight casts)."""

    def host(summary: GraphSummary, ctx: StepContext) -> float:
        if ctx.framework == "tensorflow":
            return 0.0
        per_op = train_us if ctx.mode == "train" else inference_us
        casts = summary.param_ops * amp_cast_us * (2 if ctx.mode == "train" else 1)
        return (len(summary.ops) * per_op + (casts if ctx.precision in ("fp16", "bf16") else 0.0)) * 1e-6

    return host


# ---- what the host dispatches: every ATen op PyTorch eager runs, views included (issue #14) ----------------------
# The graph records one op per kernel-launching module or function call (views and allocations are left out, a
# leaf module or `F.linear` is one op), so `len(summary.ops)` undercounts what the host does per step. The bench
# counts it by tracing each model again with a counter on the extractor's dispatch hook (cached next to the graphs).


@dataclass(frozen=True, slots=True)
class DispatchCount:
    """ATen ops one forward pass dispatches, from the extractor's trace on the meta device."""

    kernels: int  # ops that launch a kernel (inside grouped functions too), SDPA counted apart
    views: int  # views, aliases, allocations: no kernel, but the dispatcher (and autograd) still runs
    sdpa: int  # fused attention calls (the meta device decomposes them; CUDA runs one kernel)
    param_ops: int  # graph ops owning parameters: each casts its weight (and input) under autocast
    graph_ops: int  # ops in the graph

    def forward(self, precision: str) -> float:
        """Dispatched ops of one eager forward on a GPU: kernels, views, ~3 per fused attention (the op, its
        kernel, a transpose), and under autocast two casts (weight, input) per weight-consuming op."""
        casts = 2 * self.param_ops if precision in ("fp16", "bf16") else 0
        return float(self.kernels + self.views + 3 * self.sdpa + casts)


DISPATCH: dict[str, DispatchCount] = {}  # summary key -> count, filled by `Ablation.dispatch_counts`


def _count_dispatches(args: dict[str, Any]) -> DispatchCount:
    """Trace one model again, counting every ATen op the extractor's dispatch hook sees."""
    from offpeak_graph import torch_trace
    from offpeak_graph.aten_ops import ALLOC_OPS, base_name
    from offpeak_graph.extract import extract_graph
    from offpeak_graph.schema import OpType

    seen = {"kernels": 0, "views": 0, "in_sdpa": 0}
    original = torch_trace.Recorder.on_aten

    def counting(self: Any, func: Any, fargs: Any, kwargs: Any, out: Any) -> None:
        base = base_name(func._overloadpacket.__name__)
        if self._group is not None and self._group.op.type == OpType.SDPA:
            seen["in_sdpa"] += 1
        elif func.is_view or base in ALLOC_OPS or base in ("detach", "alias", "lift_fresh", "_unsafe_view"):
            seen["views"] += 1
        else:
            seen["kernels"] += 1
        original(self, func, fargs, kwargs, out)

    torch_trace.Recorder.on_aten = counting  # type: ignore[method-assign]
    try:
        graph = extract_graph(**args)  # type: ignore[arg-type]
    finally:
        torch_trace.Recorder.on_aten = original  # type: ignore[method-assign]
    return DispatchCount(kernels=seen["kernels"], views=seen["views"], sdpa=sum(op.type == "sdpa" for op in graph.ops),
                         param_ops=sum(op.params > 0 for op in graph.ops), graph_ops=len(graph.ops))  # fmt: skip


def _dispatch_of(summary: GraphSummary) -> DispatchCount:
    """The count of a summary's graph; a graph not traced here (collected files) counts its own ops."""
    count = DISPATCH.get(summary.key)
    if count is None:
        n = len(summary.ops)
        return DispatchCount(kernels=n, views=0, sdpa=0, param_ops=summary.param_ops, graph_ops=n)
    return count


# Lower envelope of our H100 rows (PyTorch 2.11, 16-core host): the fastest row per dispatched forward op, ViT-B/32
# fp16 inference (5.5 us) and ViT-L/16 bf16 training (21 us a forward op, its backward and optimizer included).
DISPATCH_US_INFERENCE = 5.5
DISPATCH_US_TRAIN = 21.0


def _host_dispatch(scale: float = 1.0) -> Callable[[GraphSummary, StepContext], float]:
    """Host time = dispatched forward ops x the envelope's cost per op (x `scale`), eager frameworks only."""

    def host(summary: GraphSummary, ctx: StepContext) -> float:
        if ctx.framework == "tensorflow":
            return 0.0
        per_op = DISPATCH_US_TRAIN if ctx.mode == "train" else DISPATCH_US_INFERENCE
        return _dispatch_of(summary).forward(ctx.precision) * per_op * scale * 1e-6

    return host


def _soft_max(p: float) -> Callable[[float, float], float]:
    """p-norm of (GPU, host): max() as p grows, the sum at p = 1; host and GPU overlap only in part."""
    return lambda gpu, host: float((gpu**p + host**p) ** (1.0 / p))


def _sum(gpu: float, host: float) -> float:
    return gpu + host


# ---- what the step prices (issue #14): the shipped `stepops.step_ops`, or parts of it --------------------------


def _as_traced(graph: ModelGraph) -> list[Op]:
    """The forward exactly as traced: the step model before 2026-11-24."""
    return graph.ops


def _traced_with_loss(graph: ModelGraph) -> list[Op]:
    return stepops.loss_ops(graph.ops, graph.precision)


def _traced_with_fused_attention(graph: ModelGraph) -> list[Op]:
    return stepops.fused_attention_ops(graph.ops)


def _uncollapsed_graph(args: dict[str, Any]) -> ModelGraph:
    """The graph traced with every ATen op of a leaf module kept apart (`RecordSettings(collapse_leaf_modules=
    False)`): a Python activation such as GPT-2's tanh GELU is its ~8 kernels, each reading and writing the
    activations, instead of one op that reads the input and writes the output. Cached next to the graphs."""
    from offpeak_graph import torch_trace
    from offpeak_graph.extract import extract_graph
    from offpeak_graph.schema import load_graph, save_graph

    path = cache_dir() / "uncollapsed" / f"{cache_key(args)}.json.gz"
    if path.exists():
        return load_graph(path)
    original = torch_trace.RecordSettings

    def settings() -> Any:
        return original(collapse_leaf_modules=False)

    torch_trace.RecordSettings = settings  # type: ignore[assignment,misc]
    try:
        graph = extract_graph(**args)  # type: ignore[arg-type]
    finally:
        torch_trace.RecordSettings = original  # type: ignore[misc]
    path.parent.mkdir(parents=True, exist_ok=True)
    save_graph(graph, path)
    return graph


def _copies_priced(graph: ModelGraph) -> list[Op]:
    """step_ops, with the graph's RESHAPE ops that copy (clone/contiguous/copy_/pad/roll/channel shuffle: views are
    not recorded, so these launch kernels) priced as memory ops instead of free; the layout copy after a fused
    attention that a GPU does as a view (`memory_plan._is_free_layout_copy`) stays free."""
    from offpeak_predictor.memory_plan import _is_free_layout_copy

    amp = graph.precision in ("fp16", "bf16")
    ops = [replace(op, type=OpType.OTHER)
           if op.type == OpType.RESHAPE and op.bytes_read + op.bytes_written > 0
           and not _is_free_layout_copy(op, graph.ops, batch=graph.batch_size, amp=amp) else op
           for op in graph.ops]  # fmt: skip
    return stepops.loss_ops(stepops.fused_attention_ops(ops), graph.precision)


def _with_weight_casts(graph: ModelGraph) -> list[Op]:
    """step_ops plus autocast's cast of each weight a matmul-class op reads (fp32 read, half written), once a
    forward; its backward (the half gradient cast back) comes from the elementwise backward factor."""
    ops = stepops.step_ops(graph)
    if graph.precision not in ("fp16", "bf16"):
        return ops
    nxt = max(op.id for op in ops) + 1
    casts = [Op(id=nxt + i, type=OpType.ELEMENTWISE, name="autocast", framework_type="aten._to_copy",
                output_shapes=[[int(op.params)]], dtype="bfloat16", bytes_read=4 * int(op.params),
                bytes_written=2 * int(op.params))
             for i, op in enumerate(o for o in graph.ops if o.params > 0 and o.type in LOWER_PRECISION)]  # fmt: skip
    return ops + casts


def _is_depthwise(op: Op) -> bool:
    """A grouped convolution with one input channel per group (MobileNet, EfficientNet, MnasNet, ConvNeXt)."""
    groups = int(op.attrs.get("groups", 1) or 1)
    return op.type.startswith("conv") and groups > 1 and groups == int(op.attrs.get("in_channels", 0) or 0)


def _is_pointwise(op: Op) -> bool:
    """An ungrouped 1x1 stride-1 convolution: a GEMM of (pixels x C_in) by (C_in x C_out)."""
    a = op.attrs
    return (op.type == OpType.CONV2D and int(a.get("groups", 1) or 1) == 1 and list(a.get("kernel") or []) == [1, 1]
            and list(a.get("stride") or [1, 1]) == [1, 1])


def _retyped(*rules: tuple[Callable[[Op], bool], OpType]) -> Callable[[ModelGraph], list[Op]]:
    """step_ops with the matching convolutions priced by another class's booster (same FLOPs and bytes)."""

    def retype(op: Op) -> Op:
        for is_it, new_type in rules:
            if is_it(op):
                return replace(op, type=new_type, framework_type="retyped-conv")
        return op

    def ops(graph: ModelGraph) -> list[Op]:
        return [retype(op) for op in stepops.step_ops(graph)]

    return ops


_T = _as_traced  # the variants below it were measured on the step model before 2026-11-24: their figures reproduce

VARIANTS: dict[str, Variant] = {
    "baseline": Variant("the shipped step model"),
    # the lower envelope of our H100 rows: ~20 us a forward op in inference, ~85 in training (PyTorch 2.11)
    "host-pt2": Variant("host floor 20 us/op inference, 80 us/op training", ops=_T, host=_host_per_op(20, 80)),
    "host-pt2-amp": Variant("host-pt2 plus 15 us per weight cast under autocast", ops=_T,
                            host=_host_per_op(20, 80, 15)),
    "legacy-flag": Variant("a PyTorch-1.x feature for the public rows that ran it", ops=_T, legacy_flag=True),
    "h100-x3": Variant("our H100 steps weigh 3x in the correction", ops=_T, h100_weight=3.0),
    "booster-15": Variant("correction with 15 leaves, 5 rows a leaf", ops=_T,
                          settings=replace(SETTINGS, step_leaves=15, step_min_leaf=5)),
    "booster-300": Variant("correction with 300 rounds", ops=_T, settings=replace(SETTINGS, step_rounds=300)),
    # what counts as an op for the host: every dispatched ATen op, views and autocast casts included
    "dispatch-max": Variant("host = all dispatched ops x envelope cost (5.5 / 21 us), max with GPU", ops=_T,
                            host=_host_dispatch()),
    "dispatch-soft3": Variant("dispatch host, p=3 soft max with GPU", ops=_T, host=_host_dispatch(),
                              combine=_soft_max(3.0)),
    "dispatch-soft2": Variant("dispatch host, p=2 soft max with GPU", ops=_T, host=_host_dispatch(),
                              combine=_soft_max(2.0)),
    "dispatch-sum": Variant("dispatch host + GPU (no overlap)", ops=_T, host=_host_dispatch(), combine=_sum),
    "dispatch-max-x2": Variant("dispatch host at 2x the envelope cost, max with GPU", ops=_T,
                               host=_host_dispatch(2.0)),
    "dispatch-features": Variant("dispatch features for the correction", ops=_T, dispatch_features=True),
    "dispatch-soft2-features": Variant("dispatch-soft2 plus the dispatch features", ops=_T, host=_host_dispatch(),
                                       combine=_soft_max(2.0), dispatch_features=True),
    # what the composition prices (shipped on 2026-11-24 as `stepops.step_ops`; `baseline` has both)
    "as-traced": Variant("the forward as traced: no loss, attention of nn.MultiheadAttention as its math",
                         ops=_as_traced),
    "traced+loss": Variant("as traced plus the cross-entropy on the logits (fp32 cast, log-softmax, NLL)",
                           ops=_traced_with_loss),
    "traced+fused-attention": Variant("as traced, nn.MultiheadAttention's attention priced as one fused op",
                                      ops=_traced_with_fused_attention),
    # the host again, on the shipped step model
    "dispatch-soft3-shipped": Variant("dispatch host, p=3 soft max with GPU, on step_ops", host=_host_dispatch(),
                                      combine=_soft_max(3.0)),
    "dispatch-features-shipped": Variant("dispatch features on step_ops", dispatch_features=True),
    # more of what the step runs and the graph prices free
    "copies-priced": Variant("step_ops with the traced copies (clone, contiguous, pad, roll) priced as memory ops",
                             ops=_copies_priced),
    "amp-weight-casts": Variant("step_ops plus autocast's weight casts (6 bytes a parameter a forward)",
                                ops=_with_weight_casts),
    "uncollapsed": Variant("step_ops of graphs traced without merging leaf modules (every kernel priced)",
                           ops=stepops.step_ops, uncollapsed=True),
    "depthwise-as-pool": Variant("step_ops, depthwise convolutions priced by the memory booster as a pooling stencil "
                                 "(backward 1x, not 2x)", ops=_retyped((_is_depthwise, OpType.AVGPOOL))),
    "depthwise-as-pool-bwd2": Variant("depthwise-as-pool with the convolution's backward (2x)",
                                      ops=_retyped((_is_depthwise, OpType.AVGPOOL)), keep_conv_backward=True),
    "pointwise-as-gemm": Variant("step_ops, ungrouped 1x1 stride-1 convolutions priced by the GEMM booster",
                                 ops=_retyped((_is_pointwise, OpType.LINEAR))),
    "baseline-same-models-out": Variant("diagnostic, not a step model: the shipped one, H100 family out also without "
                                        "the public steps of the same models", same_models_out=True),
    "pointwise-as-gemm-same-models-out": Variant("diagnostic: pointwise-as-gemm, H100 family out also without the "
                                                 "public steps of the same models",
                                                 ops=_retyped((_is_pointwise, OpType.LINEAR)), same_models_out=True),
    "pointwise-gemm+depthwise-pool": Variant("both: 1x1 convolutions by the GEMM booster, depthwise ones by the memory "
                                             "booster with the convolution's backward (2x)",
                                             ops=_retyped((_is_pointwise, OpType.LINEAR),
                                                          (_is_depthwise, OpType.AVGPOOL)), keep_conv_backward=True),
}


@contextmanager
def _host_model(host: Callable[[GraphSummary, StepContext], float] | None) -> Iterator[None]:
    """Swap `graphfeatures.host_seconds` (read by the step composition and features) for the variant's."""
    original = graphfeatures.host_seconds
    if host is not None:
        graphfeatures.host_seconds = host  # type: ignore[assignment]
    try:
        yield
    finally:
        graphfeatures.host_seconds = original


def _no_host(summary: GraphSummary, ctx: StepContext) -> float:
    return 0.0


def _dispatch_features(summary: GraphSummary, ctx: StepContext, fwd: np.ndarray, gpu_seconds: float) -> list[float]:
    """log dispatched ops, dispatched ops per graph op, share of views, share of ops priced under 10 us,
    log(dispatch host estimate / GPU estimate)."""
    count = _dispatch_of(summary)
    dispatched = count.forward(ctx.precision)
    host = _host_dispatch()(summary, ctx)
    return [math.log1p(dispatched), dispatched / max(len(summary.ops), 1), count.views / max(dispatched, 1.0),
            float(np.mean(fwd < 10e-6)) if len(fwd) else 0.0,
            math.log(max(host, 1e-7) / max(gpu_seconds, 1e-7)) if host > 0 else -10.0]  # fmt: skip


def _step_matrix(variant: Variant, model: RuntimeModel, rows: pd.DataFrame, sums: list[GraphSummary]
                 ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """`train.step_matrix` with the variant's host/GPU combination and extra features (same features otherwise)."""
    feats, bases = [], []
    for (_, row), summary in zip(rows.iterrows(), sums, strict=True):
        gpu, ctx = resolve_gpu(str(row["gpu"])), train.context_of(row)
        fwd = model.op_seconds(summary, gpu, ctx.precision)
        with _host_model(_no_host):
            gpu_seconds, per_class = step_composition(summary=summary, op_seconds=fwd, gpu=gpu, ctx=ctx)
        with _host_model(variant.host):
            base = variant.combine(gpu_seconds, graphfeatures.host_seconds(summary, ctx))
            x = step_features(summary=summary, base_step=base, per_class=per_class, gpu=gpu, ctx=ctx)
        if variant.dispatch_features:
            x += _dispatch_features(summary, ctx, fwd, gpu_seconds)
        feats.append(x)
        bases.append(base)
    return np.asarray(feats), np.asarray(bases)


def _mape(actual: np.ndarray, predicted: np.ndarray) -> float:
    return float(np.mean(np.abs(predicted - actual) / actual) * 100.0)


class Ablation:
    """The data and the two op models, loaded and fitted once."""

    def __init__(self) -> None:
        root = runtime_dir()
        ops, self.public = load_tables(root)
        self.public, self.public_sums = attach_graphs(self.public, get_graph)
        h100 = OWN_GPUS["H100"]
        self.held, self.held_sums = attach_graphs(modern_model_rows(root).query("source == @h100.source"), get_graph)
        if not len(self.held):
            raise SystemExit(f"no H100 steps under {root}: this bench needs the full data (OFFPEAK_SHARED_DATA)")
        self.op_public = fit_op_boosters(ops, SETTINGS)
        own_ops = modern_op_rows(root).query("source == @h100.ops_source")
        self.op_full = fit_op_boosters(pd.concat([ops, own_ops], ignore_index=True), SETTINGS)

    def dispatch_counts(self) -> None:
        """Fill `DISPATCH` for every traced graph of the rows (about 1.5 min the first time, then cached)."""
        folder = cache_dir() / "dispatch"
        folder.mkdir(parents=True, exist_ok=True)
        for rows, sums in ((self.public, self.public_sums), (self.held, self.held_sums)):
            for (_, row), summary in zip(rows.iterrows(), sums, strict=True):
                args = graph_args_of(row)
                if summary.key in DISPATCH or "graph_file" in args:
                    continue
                path = folder / f"{cache_key(args)}.json"
                if path.exists():
                    DISPATCH[summary.key] = DispatchCount(**json.loads(path.read_text()))
                    continue
                count = _count_dispatches(args)
                path.write_text(json.dumps(asdict(count)))
                DISPATCH[summary.key] = count

    def _steps(self, variant: Variant, boosters: dict[str, Any], rows: pd.DataFrame, sums: list[GraphSummary]
               ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        if variant.combine is max and not variant.dispatch_features:
            with _host_model(variant.host):
                x, base = train.step_matrix(RuntimeModel(op_boosters=boosters), rows, sums)
        else:
            x, base = _step_matrix(variant, RuntimeModel(op_boosters=boosters), rows, sums)
        if variant.legacy_flag:
            x = np.column_stack([x, rows["software"].astype(str).str.startswith("pytorch-1").to_numpy(float)])
        return x, base

    def _weights(self, variant: Variant, rows: pd.DataFrame) -> np.ndarray:
        h100 = rows["source"].astype(str).to_numpy() == "offpeak-h100"
        return train.source_weights(rows) * np.where(h100, variant.h100_weight, 1.0)

    def _fit_predict(self, variant: Variant, x: np.ndarray, y: np.ndarray, rows: pd.DataFrame,
                     x_test: np.ndarray, base_test: np.ndarray) -> np.ndarray:  # fmt: skip
        booster = fit_step_booster(x, y, variant.settings, weights=self._weights(variant, rows))
        clip = RuntimeModel(op_boosters={}).correction_clip
        return base_test * np.exp(np.clip(booster.predict(x_test, num_threads=variant.settings.threads), -clip, clip))

    def summaries(self, variant: Variant) -> tuple[list[GraphSummary], list[GraphSummary]]:
        """(public, H100) summaries of the ops the variant prices (the shipped ones without `ops`)."""
        if variant.ops is None:
            return self.public_sums, self.held_sums
        priced = variant.ops
        cache: dict[str, GraphSummary] = {}

        def summary_of(row: pd.Series) -> GraphSummary:
            key = json.dumps(graph_args_of(row), sort_keys=True)
            if key not in cache:
                args = json.loads(key)
                traced = variant.uncollapsed and "graph_file" not in args
                graph = _uncollapsed_graph(args) if traced else get_graph(args)
                ops = priced(graph)
                summary = summarise(replace(graph, ops=ops), key=graph.content_hash(), as_traced=True)
                if variant.keep_conv_backward:
                    kept = [op for op in ops if op_class(str(op.type)) != FREE]
                    retyped = np.array([op.framework_type == "retyped-conv" for op in kept], dtype=bool)
                    summary.backward_factor[retyped] = BACKWARD_FACTOR["conv"]
                cache[key] = summary
            return cache[key]

        return ([summary_of(row) for _, row in self.public.iterrows()],
                [summary_of(row) for _, row in self.held.iterrows()])  # fmt: skip

    def run(self, variant: Variant) -> dict[str, float]:
        pub, held = self.public, self.held
        public_sums, held_sums = self.summaries(variant)
        t_pub, t_held = pub["time_s"].to_numpy(float), held["time_s"].to_numpy(float)
        xp, bp = self._steps(variant, self.op_full, pub, public_sums)
        xh, bh = self._steps(variant, self.op_full, held, held_sums)
        yp, yh = np.log(t_pub) - np.log(bp), np.log(t_held) - np.log(bh)
        may_train = trainable(held, keep_own=True)
        out: dict[str, float] = {}

        family_out = np.full(len(held), np.nan)
        for family in sorted(held["family"].astype(str).unique()):
            test = (held["family"] == family).to_numpy()
            fit = may_train & ~test
            keep = np.ones(len(pub), dtype=bool)
            if variant.same_models_out:
                names = set(held.loc[test, "model_name"].astype(str).str.lower())
                keep = ~pub["model_name"].astype(str).str.lower().isin(names).to_numpy()
            rows = pd.concat([pub[keep], held[fit]], ignore_index=True)
            family_out[test] = self._fit_predict(variant, np.vstack([xp[keep], xh[fit]]), np.r_[yp[keep], yh[fit]],
                                                 rows, xh[test], bh[test])  # fmt: skip
        out["h100_family_out"] = _mape(t_held, family_out)
        self.family_out, self.base_held = family_out, bh  # for `per_model`

        xp0, bp0 = self._steps(variant, self.op_public, pub, public_sums)
        xh0, bh0 = self._steps(variant, self.op_public, held, held_sums)
        unseen = self._fit_predict(variant, xp0, np.log(t_pub) - np.log(bp0), pub, xh0, bh0)
        out["h100_unseen"] = _mape(t_held, unseen)

        public_out = np.full(len(pub), np.nan)
        for family in sorted(pub["family"].astype(str).unique()):
            test = (pub["family"] == family).to_numpy()
            rows = pd.concat([pub[~test], held[may_train]], ignore_index=True)
            public_out[test] = self._fit_predict(variant, np.vstack([xp[~test], xh[may_train]]),
                                                 np.r_[yp[~test], yh[may_train]], rows, xp[test], bp[test])  # fmt: skip
        out["public_family_out"] = _mape(t_pub, public_out)
        out["h100_base_only"] = _mape(t_held, bh)  # the step composition before any correction
        return out


def per_model(ablation: Ablation) -> pd.DataFrame:
    """Per H100 model, after `run`: median predicted / measured (each family out) and the composition's base /
    measured, by mode and precision family, with the composition's share of each op class."""
    held = ablation.held
    frame = pd.DataFrame({
        "model": held["model_name"].astype(str), "mode": held["mode"].astype(str),
        "amp": held["precision"].isin(["fp16", "bf16"]).map({True: "amp", False: "fp32"}),
        "pred": ablation.family_out / held["time_s"].to_numpy(float),
        "base": ablation.base_held / held["time_s"].to_numpy(float),
    })  # fmt: skip
    frame["ape"] = (frame["pred"] - 1.0).abs() * 100.0
    return frame.groupby(["model", "mode", "amp"]).agg(
        rows=("pred", "size"), pred=("pred", "median"), base=("base", "median"), ape=("ape", "mean")
    ).round(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS), help="default: every variant")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    parser.add_argument("--per-model", action="store_true", help="per H100 model after each variant")
    args = parser.parse_args(argv)
    names = args.variant or list(VARIANTS)
    print("fitting the op boosters once (about a minute) ...", file=sys.stderr)
    ablation = Ablation()
    if any(VARIANTS[n].host is not None and "dispatch" in n or VARIANTS[n].dispatch_features for n in names):
        ablation.dispatch_counts()
    results: dict[str, dict[str, float]] = {}
    for i, name in enumerate(names, 1):
        results[name] = ablation.run(VARIANTS[name])
        print(f"[{i}/{len(names)}] {name}", file=sys.stderr)
        if not args.json:
            cells = "  ".join(f"{k} {v:5.1f}" for k, v in results[name].items() if math.isfinite(v))
            print(f"{name:14s} MAPE %  {cells}   ({VARIANTS[name].about})")
        if args.per_model:
            print(per_model(ablation).sort_values("ape", ascending=False).to_string())
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
