"""Shared builders for the operator's tests: a TrainingJob body, a small model graph, a fixed clock."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from offpeak_graph.schema import ModelGraph, Op

NOW = datetime(2026, 11, 21, 6, 0, 0, tzinfo=UTC)


def job_body(name: str = "train-1", namespace: str = "ns", **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"image": "example/train:1", "batchSize": 32, "steps": 1000,
                            "gpuTypes": ["A100-SXM4-40GB", "T4"]}
    base.update(spec)
    return {"apiVersion": "offpeak.io/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": namespace, "uid": "uid-123"}, "spec": base, "status": {}}


def small_graph(blocks: int = 4, *, name: str = "tiny") -> ModelGraph:
    """input -> `blocks` identical (linear, relu) pairs -> loss."""
    ops = [Op(id=0, type="input", framework_type="input", output_shapes=[[8, 64]])]
    for _ in range(blocks):
        for kind in ("linear", "relu"):
            ops.append(Op(id=len(ops), type=kind, framework_type=f"aten.{kind}", inputs=[len(ops) - 1],
                          input_shapes=[[8, 64]], output_shapes=[[8, 64]],
                          flops=2 * 8 * 64 * 64 if kind == "linear" else 512,
                          bytes_read=2048, bytes_written=2048, params=64 * 64 + 64 if kind == "linear" else 0))
    ops.append(Op(id=len(ops), type="loss", framework_type="aten.cross_entropy", inputs=[len(ops) - 1],
                  input_shapes=[[8, 64]], output_shapes=[[]], flops=1024))
    return ModelGraph(framework="synthetic", model_name=name, batch_size=8, ops=ops, model_family="mlp")

