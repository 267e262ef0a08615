"""Predictor speed/memory figures: model load, one 1,000-op graph prediction, batched throughput, RSS.

Targets: p99 <= 2 ms for one 1,000-op graph whose summary is cached, on a GPU type it was not priced on yet (issue
14; issue 3 asked <= 5 ms); >= 2,000 graph predictions/s batched on 2 cores; model load <= 1 s; resident memory
<= 300 MB. The summary itself (made once per graph content) is timed apart. Prints one JSON object; exit 1 if a
target is missed.
"""

from __future__ import annotations

import json
import resource
import sys
import time

import numpy as np

from offpeak_graph.schema import ModelGraph, Op
from offpeak_predictor.gpus import known_gpus, resolve_gpu
from offpeak_predictor.graphfeatures import StepContext, summarise
from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.predict import Predictor


def synthetic_graph(n_ops: int, seed: int) -> ModelGraph:
    """A CNN-like chain: conv, batchnorm, relu, add ... with varied shapes (plain data, no torch)."""
    rng = np.random.default_rng(seed)
    ops = [Op(id=0, type="input")]
    kinds = ["conv2d", "batchnorm", "relu", "add", "linear", "layernorm", "softmax", "reshape"]
    for i in range(1, n_ops):
        kind = kinds[rng.integers(len(kinds))]
        c, hw, b = int(rng.choice([64, 128, 256, 512])), int(rng.choice([7, 14, 28, 56])), 32
        numel = b * c * hw * hw
        flops = 2.0 * numel * c * 9 if kind == "conv2d" else (2.0 * b * c * c if kind == "linear" else numel)
        ops.append(Op(id=i, type=kind, inputs=[i - 1], output_shapes=[[b, c, hw, hw]], flops=flops,
                      bytes_read=4 * numel, bytes_written=4 * numel, params=c * c * 9 if kind == "conv2d" else 0))
    return ModelGraph(framework="synthetic", model_name=f"synthetic-{seed}", batch_size=32, ops=ops)


def main() -> int:
    t0 = time.perf_counter()
    model = RuntimeModel.load()
    load_s = time.perf_counter() - t0
    predictor = Predictor(model)

    graph = synthetic_graph(1000, 0)
    gpus = known_gpus()
    summary_s = []
    for _ in range(20):
        t = time.perf_counter()
        summarise(graph)
        summary_s.append(time.perf_counter() - t)
    predictor.predict(graph, ["A100"])  # warm imports / allocations; the summary is cached from here on
    single_cold, single_warm = [], []
    for i in range(300):
        model._op_cache.clear()  # op features + boosters recomputed: the cost of a new (graph, GPU) pair
        t = time.perf_counter()
        predictor.predict(graph, [gpus[i % len(gpus)]])
        single_cold.append(time.perf_counter() - t)
    for i in range(300):
        t = time.perf_counter()
        predictor.predict(graph, ["A100"])
        single_warm.append(time.perf_counter() - t)

    graphs = [synthetic_graph(int(n), s) for s, n in enumerate(np.random.default_rng(1).integers(50, 400, 200))]
    summaries = [predictor.summary(g) for g in graphs]
    specs = [resolve_gpu(n) for n in ("A100", "H100", "T4", "L4", "V100", "A10", "L40S", "H200", "B200", "P100")]
    items = [(s, spec, StepContext()) for s in summaries for spec in specs]
    model._op_cache.clear()
    t = time.perf_counter()
    model.predict_steps_batch(items)
    cold_rate = len(items) / (time.perf_counter() - t)
    t = time.perf_counter()
    model.predict_steps_batch(items)
    warm_rate = len(items) / (time.perf_counter() - t)

    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    figures = {
        "model_load_s": round(load_s, 3),
        "summary_1000op_p50_ms": round(float(np.percentile(summary_s, 50)) * 1e3, 2),
        "single_1000op_p50_ms_new_gpu": round(float(np.percentile(single_cold, 50)) * 1e3, 2),
        "single_1000op_p99_ms_new_gpu": round(float(np.percentile(single_cold, 99)) * 1e3, 2),
        "single_1000op_p99_ms_cached": round(float(np.percentile(single_warm, 99)) * 1e3, 2),
        "batched_graph_predictions_per_s_uncached": round(cold_rate),
        "batched_graph_predictions_per_s_cached_ops": round(warm_rate),
        "max_rss_mb": round(rss_mb, 1),
    }
    targets = {
        "single_1000op_p99_ms_new_gpu": figures["single_1000op_p99_ms_new_gpu"] <= 2,
        "batched_graph_predictions_per_s_cached_ops": figures["batched_graph_predictions_per_s_cached_ops"] >= 2000,
        "model_load_s": figures["model_load_s"] <= 1,
        "max_rss_mb": figures["max_rss_mb"] <= 300,
    }
    print(json.dumps({"figures": figures, "targets_met": targets}, indent=1))
    return 0 if all(targets.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
