"""Prediction service core: graph in, per-GPU step and job predictions out (no HTTP, no CLI).

Graph summaries are cached by content hash, so repeated requests for the same model (the operator asks for
every GPU type; the scheduler re-asks) skip feature extraction.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, replace
from collections.abc import Mapping
from typing import Any

from offpeak_graph.schema import MODES, PRECISIONS, ModelGraph
from offpeak_predictor import interconnect
from offpeak_predictor.calibration import GpuCalibration
from offpeak_predictor.correction import Correction, CorrectionTable, calibrated_prior, keys_for, model_prior
from offpeak_predictor.gpus import resolve_gpu
from offpeak_predictor.graphfeatures import GraphSummary, StepContext, summarise
from offpeak_predictor.jobtime import DEFAULT_STARTUP_SECONDS, job_estimate
from offpeak_predictor.lru import SizedLRU, approx_bytes
from offpeak_predictor.memory import MemoryEstimate, fits_gpu, peak_memory_bytes
from offpeak_predictor.model import RuntimeModel
# Overrides a request may ask for: the graph's own modes and precisions (one home: the schema), and the optimizers
# the runtime model was trained to price (the wire's, narrower than the schema's)
from offpeak_predictor.wire import MAX_STARTUP_SECONDS, MAX_STEPS, OPTIMIZERS

GRAPH_BYTES_PER_OP = 700  # an Op object with its small lists, for the graph-object cache's budget


@dataclass(frozen=True, slots=True)
class PredictOptions:
    """Overrides of the graph's own settings; None = take the graph's value."""

    mode: str | None = None
    precision: str | None = None
    optimizer: str | None = None
    num_gpus: int = 1
    steps: int | None = None
    startup_seconds: float = DEFAULT_STARTUP_SECONDS
    gpus_per_node: int | None = None  # None: all num_gpus in one node; else num_gpus / gpus_per_node nodes

    @property
    def nodes(self) -> int:
        return self.num_gpus // (self.gpus_per_node or self.num_gpus)

    def validate(self) -> None:
        from offpeak.errors import UserError

        for name, value, allowed in (("mode", self.mode, MODES), ("precision", self.precision, PRECISIONS),
                                     ("optimizer", self.optimizer, OPTIMIZERS)):  # fmt: skip
            if value is not None and value not in allowed:
                raise UserError(f"{name} must be one of {', '.join(allowed)} (got {value!r})")
        if self.num_gpus < 1:
            raise UserError("num_gpus must be >= 1")
        if self.gpus_per_node is not None and (self.gpus_per_node < 1 or self.num_gpus % self.gpus_per_node):
            raise UserError(f"gpus_per_node must divide num_gpus ({self.num_gpus}), got {self.gpus_per_node}")
        if self.steps is not None and self.steps < 0:
            raise UserError("steps must be >= 0")
        if self.steps is not None and self.steps > MAX_STEPS:
            raise UserError(f"steps must be <= {MAX_STEPS}")
        if self.startup_seconds < 0:
            raise UserError("startup seconds must be >= 0")
        if self.startup_seconds > MAX_STARTUP_SECONDS:
            raise UserError(f"startup seconds must be <= {MAX_STARTUP_SECONDS:g}")


def correction_fields(correction: Correction, *, model_step_seconds: float) -> dict[str, Any]:
    """The `correction` object of a prediction: how measured samples changed the model's answer."""
    return {"samples": correction.samples, "level": correction.level, "factor": round(correction.factor, 6),
            "p90_factor": round(correction.p90_factor, 6), "model_step_seconds": model_step_seconds}


class Predictor:
    """Model + summary caches (each an LRU bounded by approximate bytes) + optional correction table (measured
    samples). One lock serialises predictions, so a thread pool may call it."""

    def __init__(self, model: RuntimeModel, *, cache_bytes: int = 256 * 2**20,
                 corrections: CorrectionTable | None = None,
                 calibration: Mapping[str, GpuCalibration] | None = None,
                 network_gbits: float = interconnect.DEFAULT_NETWORK_GBITS) -> None:  # fmt: skip
        self.model = model
        self.corrections = corrections
        # per-GPU-type calibration from collected rows (calibration.py): replaced whole, never mutated, so a
        # reader holding the old mapping stays consistent
        self.calibration: Mapping[str, GpuCalibration] = calibration or {}
        self.network = interconnect.network(network_gbits)  # between the nodes of a multi-node job
        self.lock = threading.RLock()
        self._cache: SizedLRU[str, GraphSummary] = SizedLRU(max_bytes=cache_bytes // 2, sizeof=approx_bytes)
        # Content hashes of graph objects seen recently (hashing a 1,000-op graph costs ~1.5 ms). Holding the
        # object keeps its id unique; callers must not mutate a graph after predicting with it.
        self._hashes: SizedLRU[int, tuple[ModelGraph, str]] = SizedLRU(
            max_bytes=cache_bytes // 4, sizeof=lambda hit: GRAPH_BYTES_PER_OP * len(hit[0].ops))
        # Peak memory is the same on every GPU type and costs ~10 ms for a 500-op graph: once per job shape.
        self._memory: SizedLRU[tuple[str, str, str, str], MemoryEstimate | None] = SizedLRU(
            max_bytes=cache_bytes // 16, sizeof=approx_bytes)
        # The rest of the budget prices ops: per (graph, GPU, precision), in the model (1/2 + 1/4 + 1/16 + 3/16).
        model.bound_op_cache(cache_bytes * 3 // 16)

    def prior(self, gpu_type: str, *, p90_log_margin: float) -> Correction:
        """What corrections refine for this GPU type: its calibration from collected rows, else the model."""
        cal = self.calibration.get(gpu_type)
        if cal is None:
            return model_prior(p90_log_margin)
        return calibrated_prior(p90_log_margin, log_factor=cal.log_factor, rows=cal.rows)

    @property
    def cache_bytes(self) -> int:
        """Approximate bytes held by the caches (summaries, graph hashes, memory estimates, op prices)."""
        return self._cache.bytes + self._hashes.bytes + self._memory.bytes + self.model.op_cache_bytes

    def graph_hash(self, graph: ModelGraph) -> str:
        hit = self._hashes.get(id(graph))
        if hit is not None and hit[0] is graph:
            return hit[1]
        digest = graph.content_hash()
        self._hashes.put(id(graph), (graph, digest))
        return digest

    @property
    def version(self) -> str:
        return self.model.version

    def summary(self, graph: ModelGraph, *, key: str | None = None) -> GraphSummary:
        key = key or self.graph_hash(graph)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        summary = summarise(graph, key=key)
        self._cache.put(key, summary)
        return summary

    def memory(self, graph: ModelGraph, *, graph_hash: str, ctx: StepContext) -> MemoryEstimate | None:
        """Peak GPU memory of one step (per GPU: data-parallel workers each hold a whole replica), or None when
        the graph's optimizer or precision is one the memory model does not know."""
        key = (graph_hash, ctx.mode, ctx.precision, ctx.optimizer)
        if key in self._memory:
            return self._memory.get(key)
        try:
            estimate: MemoryEstimate | None = peak_memory_bytes(graph, precision=ctx.precision, mode=ctx.mode,
                                                                optimizer=ctx.optimizer)
        except ValueError:
            estimate = None
        self._memory.put(key, estimate)
        return estimate

    def predict(self, graph: ModelGraph, gpus: list[str], options: PredictOptions = PredictOptions(),
                *, graph_hash: str | None = None, corrected: bool = True) -> list[dict[str, Any]]:  # fmt: skip
        """One prediction dict per requested GPU (unknown GPU -> UserError listing known ones).

        With a correction table or a calibration of the GPU type (and `corrected`), each answer is the model's
        corrected by the GPU type's collected rows and the measured samples of its keys, and says so in
        `correction`; `corrected=False` gives the model's own answer (what samples are judged against).
        """
        with self.lock:
            return self._predict(graph, gpus, options, graph_hash=graph_hash, corrected=corrected)

    def _predict(self, graph: ModelGraph, gpus: list[str], options: PredictOptions, *, graph_hash: str | None,
                 corrected: bool) -> list[dict[str, Any]]:  # fmt: skip
        options.validate()
        specs = [resolve_gpu(name) for name in gpus]
        graph_hash = graph_hash or self.graph_hash(graph)
        summary = self.summary(graph, key=graph_hash)
        mode = options.mode or graph.mode
        ctx = StepContext(
            mode=mode, optimizer=(options.optimizer or graph.optimizer) if mode == "train" else "none",
            precision=options.precision or graph.precision, num_gpus=options.num_gpus,
        )  # fmt: skip
        nodes = options.nodes
        # the model prices one node's data parallelism (what it was trained on); the network comes on top
        node_ctx = replace(ctx, num_gpus=options.num_gpus // nodes)
        preds = self.model.predict_steps_batch([(summary, spec, node_ctx) for spec in specs])
        between = interconnect.between_nodes_seconds(params=summary.params, nodes=nodes, link=self.network)
        # measured samples are judged against the model's step with every GPU in one node (see samples.py): a
        # corrected multi-node answer scales that same step
        judged = preds if nodes == 1 or self.corrections is None or not corrected else \
            self.model.predict_steps_batch([(summary, spec, ctx) for spec in specs])
        memory = self.memory(graph, graph_hash=graph_hash, ctx=ctx)
        out = []
        for asked, spec, pred, judged_pred in zip(gpus, specs, preds, judged, strict=True):
            model_step, model_p90 = pred.step_seconds + between, pred.step_seconds_p90 + between
            step, step_p90 = model_step, model_p90
            item: dict[str, Any] = {
                "gpu": asked, "gpu_type": spec.name, "step_seconds": step, "step_seconds_p90": step_p90,
                "model_version": self.version,
                "mode": ctx.mode, "precision": ctx.precision, "optimizer": ctx.optimizer, "num_gpus": ctx.num_gpus,
            }  # fmt: skip
            if ctx.num_gpus > 1:
                item["interconnect"] = interconnect.describe(gpu=spec, gpus_per_node=node_ctx.num_gpus, nodes=nodes,
                                                             net=self.network, between_seconds=between)
            if memory is not None:
                gpu_bytes = spec.memory_gb * 1e9  # the catalogue's GB are decimal
                item.update(peak_memory_gib=round(memory.peak_gib, 3), gpu_memory_gib=round(gpu_bytes / 2**30, 2),
                            fits_memory=fits_gpu(memory, gpu_memory_bytes=gpu_bytes))
            if corrected and (self.corrections is not None or spec.name in self.calibration):
                keys = keys_for(graph_hash=graph_hash, family=graph.model_family, gpu_type=spec.name,
                                precision=ctx.precision, mode=ctx.mode, batch_size=graph.batch_size,
                                num_gpus=ctx.num_gpus)  # fmt: skip
                margin = math.log(pred.step_seconds_p90 / pred.step_seconds)  # this prediction's calibrated width
                prior = self.prior(spec.name, p90_log_margin=margin)
                correction = prior if self.corrections is None else \
                    self.corrections.lookup(keys, p90_log_margin=margin, prior=prior)
                if correction.samples:
                    # samples are judged against the model's one-node step (their own runs crossed the real
                    # network), so the learnt factor already carries it: no network estimate on top
                    step, step_p90 = correction.apply(judged_pred.step_seconds)
                    if "interconnect" in item and nodes > 1:
                        item["interconnect"]["between_nodes_measured"] = True
                item.update(step_seconds=step, step_seconds_p90=step_p90,
                            correction=correction_fields(correction, model_step_seconds=model_step))
            if options.steps is not None:
                job = job_estimate(step_seconds=step, step_seconds_p90=step_p90, steps=options.steps,
                                   startup_seconds=options.startup_seconds)  # fmt: skip
                item.update(steps=options.steps, job_seconds=job.job_seconds, job_seconds_p90=job.job_seconds_p90)
            out.append(item)
        return out
