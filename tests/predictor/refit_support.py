"""Synthetic job samples for the re-fit tests: MLP 'models' measured as a multiple of the model's own p50."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from offpeak_predictor.db import BenchmarkDB
from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.predict import Predictor

from .conftest import mlp_graph

GPUS = ("T4", "V100-PCIE-32GB", "A100-PCIE-40GB")
# six 'models' of one family: (name, width, layers)
MODELS = (("mlp-a", 256, 2), ("mlp-b", 512, 3), ("mlp-c", 768, 4), ("mlp-d", 1024, 2), ("mlp-e", 1536, 3),
          ("mlp-f", 2048, 4))  # fmt: skip


def add_samples(db_path: Path, model: RuntimeModel, factor: Callable[[str, str, int], float], *,
                models: tuple[tuple[str, int, int], ...] = MODELS, batches: tuple[int, ...] = (16, 64),
                gpus: tuple[str, ...] = GPUS, noise: float = 0.03, seed: int = 0,
                status: str = "accepted") -> BenchmarkDB:  # fmt: skip
    """One accepted sample per (model, batch, GPU): measured = model p50 x factor(model, gpu, batch) x noise."""
    rng = np.random.default_rng(seed)
    db = BenchmarkDB(db_path)
    predictor = Predictor(model)
    for name, width, layers in models:
        for batch in batches:
            graph = mlp_graph(batch=batch, width=width, layers=layers, name=name)
            for gpu in gpus:
                p50 = predictor.predict(graph, [gpu])[0]["step_seconds"]
                measured = p50 * factor(name, gpu, batch) * float(np.exp(rng.normal(0.0, noise)))
                db.add_job_sample(job=f"ns/{name}", gpu=gpu, graph_hash=graph.content_hash(), step_seconds=measured,
                                  job_seconds=None, steps=None, graph=graph.to_dict(), family="mlp",
                                  precision="fp32", mode="train", optimizer="adam", num_gpus=1, batch_size=batch,
                                  model_version=model.version, predicted_step_seconds=p50, status=status,
                                  reason="")  # fmt: skip
    return db
