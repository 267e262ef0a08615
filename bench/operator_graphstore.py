"""How big real model graphs are in a ConfigMap, which reduction they need, and how fast the operator decides.

Prints one line per model: ops, gzip bytes of the whole graph, the form stored under the 700 kB ConfigMap budget,
and encode time; then state-machine decisions per second. Real models are extracted with the [extract] extra
(meta-device tracing, no weights); pass --quick to use only synthetic graphs.

    .venv/bin/python bench/operator_graphstore.py [--quick]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from datetime import UTC, datetime

from offpeak_graph.schema import ModelGraph, Op

from offpeak_operator.graphstore import DEFAULT_LIMIT_BYTES, encode_graph
from offpeak_operator.jobspec import parse_spec
from offpeak_operator.predictions import GpuPrediction, Prediction
from offpeak_operator.settings import OperatorSettings
from offpeak_operator.statemachine import Observed, PodView, decide

REAL_MODELS = (("torchvision", "resnet50", 64, None), ("hf_config", "bert-base-uncased", 32, 128),
               ("hf_config", "gpt2-large", 8, 1024))


def synthetic(n_ops: int) -> ModelGraph:
    ops = [Op(id=0, type="input", framework_type="input", output_shapes=[[8, 1024]])]
    for i in range(1, n_ops):
        kind = ("linear", "gelu", "layernorm", "add")[i % 4]
        ops.append(Op(id=i, type=kind, framework_type=f"aten.{kind}", name=f"blocks.{i // 4}.{kind}", inputs=[i - 1],
                      input_shapes=[[8, 1024, 1024 + i % 7]], output_shapes=[[8, 1024, 1024 + i % 7]],
                      flops=float(i * 1000), bytes_read=i * 8, bytes_written=i * 4, params=i % 5 * 1024))
    return ModelGraph(framework="synthetic", model_name=f"synthetic-{n_ops}", batch_size=8, ops=ops)


def real(kind: str, name: str, batch: int, seq: int | None) -> ModelGraph:
    from offpeak_graph.extract import extract_graph

    return extract_graph(**{kind: name}, batch_size=batch, seq_len=seq)


def report(graph: ModelGraph) -> None:
    whole = len(gzip.compress(json.dumps(graph.to_dict(), separators=(",", ":")).encode(), 9))
    start = time.perf_counter()
    enc = encode_graph(graph, limit_bytes=DEFAULT_LIMIT_BYTES)
    took = time.perf_counter() - start
    print(f"{graph.model_name:<22} ops={len(graph.ops):>7}  whole gzip={whole / 1024:>8.1f} KiB  "
          f"stored={enc.reduced or 'whole':<13} ops={enc.ops:>6} {len(enc.data) / 1024:>7.1f} KiB  encode {took:.2f}s")


def decisions_per_second(n: int = 20000) -> float:
    spec = parse_spec({"image": "i", "batchSize": 8, "steps": 1000, "gpuTypes": ["T4"], "workers": 4})
    pred = Prediction(source="predictor", steps=1000, gpus=(GpuPrediction("T4", 0.1, 0.2, 100, 200),))
    status = {"phase": "Waiting", "attempts": 1, "prediction": pred.to_status()}
    now = datetime(2026, 1, 1, tzinfo=UTC)
    pods = {f"j-a1-w{w}": PodView(f"j-a1-w{w}", phase="Running", node="n", gpu_type="T4", started_at=now)
            for w in range(4)}
    settings = OperatorSettings()
    start = time.perf_counter()
    for _ in range(n):
        decide(job_name="j", spec=spec, problems=[], status=status, observed=Observed(training_pods=pods), now=now,
               settings=settings)
    return n / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="synthetic graphs only (no torch)")
    args = parser.parse_args()
    print(f"ConfigMap budget for the graph: {DEFAULT_LIMIT_BYTES / 1024:.0f} KiB of base64")
    for n in (1_000, 20_000, 200_000):
        report(synthetic(n))
    if not args.quick:
        for model in REAL_MODELS:
            report(real(*model))
    print(f"state machine: {decisions_per_second():,.0f} decisions/s (4-worker running job)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
