"""Shared fixtures: small hand-made graphs and a tiny trained model (seconds to build, no torch)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from offpeak_graph.schema import ModelGraph, Op
from offpeak_predictor.graphfeatures import summarise
from offpeak_predictor.loaders import load_neusight_ops, runtime_dir
from offpeak_predictor.db import BenchmarkDB
from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.server import PredictorApp, ServerSettings
from offpeak_predictor.train import TrainSettings, train_model


def mlp_graph(*, batch: int = 64, width: int = 1024, layers: int = 4, precision: str = "fp32",
              name: str = "mlp") -> ModelGraph:  # fmt: skip
    """A plain MLP graph: input, then (linear, relu) x layers. FLOPs/bytes follow the schema conventions."""
    size = 4 if precision == "fp32" else 2
    ops = [Op(id=0, type="input", output_shapes=[[batch, width]])]
    for i in range(layers):
        ops.append(Op(id=len(ops), type="linear", inputs=[len(ops) - 1], input_shapes=[[batch, width]],
                      output_shapes=[[batch, width]], flops=2.0 * batch * width * width,
                      bytes_read=size * (batch * width + width * width), bytes_written=size * batch * width,
                      params=width * width + width))  # fmt: skip
        ops.append(Op(id=len(ops), type="relu", inputs=[len(ops) - 1], input_shapes=[[batch, width]],
                      output_shapes=[[batch, width]], flops=float(batch * width),
                      bytes_read=size * batch * width, bytes_written=size * batch * width))  # fmt: skip
        del i
    return ModelGraph(framework="synthetic", model_name=name, batch_size=batch, ops=ops, precision=precision,
                      mode="train", optimizer="adam", model_family="mlp")  # fmt: skip


@pytest.fixture(scope="session")
def op_slice() -> pd.DataFrame:
    """A few thousand real NeuSight op rows (first rows of each file)."""
    return load_neusight_ops(runtime_dir(), max_rows_per_file=300)


@pytest.fixture(scope="session")
def tiny_model(op_slice: pd.DataFrame) -> RuntimeModel:
    """Op boosters on the real slice; model-level correction on synthetic MLP 'measurements'."""
    rng = np.random.default_rng(0)
    graphs, rows = [], []
    for batch in (8, 32, 128):
        for width in (256, 1024, 2048):
            g = mlp_graph(batch=batch, width=width)
            for gpu in ("T4", "V100-PCIE-32GB", "A100-PCIE-40GB"):
                graphs.append(summarise(g))
                flops = g.total_flops_forward * 3
                peak = {"T4": 8.1e12, "V100-PCIE-32GB": 14e12, "A100-PCIE-40GB": 19.5e12}[gpu]
                rows.append({"source": "synthetic", "gpu": gpu, "precision": "fp32", "mode": "train",
                             "optimizer": "adam", "model_name": "mlp", "family": "mlp", "num_gpus": 1,
                             "time_s": flops / (0.5 * peak) * rng.uniform(0.9, 1.1) + 2e-4,
                             "software": "pytorch"})  # fmt: skip
    settings = TrainSettings(op_rounds=30, step_rounds=20, step_min_leaf=3, threads=1)
    return train_model(op_slice, pd.DataFrame(rows), graphs, settings)


TOKEN = "0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def token_app(model: RuntimeModel, tmp_path: Path, *, token: bool = True) -> PredictorApp:
    """A predictor app with a benchmark DB in `tmp_path` and, unless `token=False`, the bearer token `TOKEN`."""
    token_file = None
    if token:
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN)
    return PredictorApp(model=model, db=BenchmarkDB(tmp_path / "db.sqlite"),
                        settings=ServerSettings(token_file=str(token_file) if token_file else None),
                        registry=CollectorRegistry())  # fmt: skip


def serve(app: PredictorApp, scenario: Callable[[TestClient], Awaitable[Any]]) -> Any:
    """Run `scenario(client)` against `app` on a test server; its result."""
    async def main() -> Any:
        async with TestClient(TestServer(app.build())) as client:
            return await scenario(client)

    return asyncio.run(main())
