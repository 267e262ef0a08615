"""POST /v1/model/refit and /v1/model/rollback on the real app: authenticated, served at once, reversible."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, generate_latest

from offpeak_predictor.db import BenchmarkDB
from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.refit import RefitSettings
from offpeak_predictor.server import PredictorApp, ServerSettings

from .conftest import mlp_graph
from .refit_support import add_samples

AUTH = {"Authorization": "Bearer tok"}


def _app(model: RuntimeModel, tmp_path: Path, *, store: bool = True) -> tuple[PredictorApp, CollectorRegistry]:
    (tmp_path / "token").write_text("tok")
    db = add_samples(tmp_path / "db.sqlite", model, lambda *_: 1.4)  # every model measured 40 % slower
    registry = CollectorRegistry()
    settings = ServerSettings(token_file=str(tmp_path / "token"), refit=RefitSettings(threads=1),
                              model_store=str(tmp_path / "store") if store else None)
    return PredictorApp(model=model, db=BenchmarkDB(db.path), registry=registry, settings=settings), registry


def test_refit_is_served_at_once_and_rollback_restores_the_previous_version(tiny_model: RuntimeModel,
                                                                            tmp_path: Path) -> None:
    app, registry = _app(tiny_model, tmp_path)
    graph = mlp_graph(batch=32, width=1024, layers=3, name="mlp-new").to_dict()

    async def main() -> None:
        async with TestClient(TestServer(app.build())) as c:
            assert (await c.post("/v1/model/refit", json={})).status == 401  # state changes need the token
            before = await (await c.post("/v1/predict", json={"graph": graph, "gpus": ["T4"]})).json()
            r = await c.post("/v1/model/refit", json={"dry_run": False}, headers=AUTH)
            body = await r.json()
            assert r.status == 200, body
            assert body["decision"]["promote"] and body["model_version"] == body["decision"]["candidate_version"]
            after = await (await c.post("/v1/predict", json={"graph": graph, "gpus": ["T4"]})).json()
            assert after["model_version"] == body["model_version"] != before["model_version"]
            ratio = (after["predictions"][0]["correction"]["model_step_seconds"]
                     / before["predictions"][0]["correction"]["model_step_seconds"])
            assert 1.2 < ratio < 1.6, ratio  # learnt the 40 % for a model no sample had
            metrics = generate_latest(registry).decode()
            assert f'model_version="{body["model_version"]}"' in metrics
            assert f'model_version="{tiny_model.version}"' not in metrics
            r = await c.post("/v1/model/rollback", headers=AUTH)
            rolled = await r.json()
            assert r.status == 200 and rolled["model_version"] == tiny_model.version, rolled
            r = await c.post("/v1/model/rollback", headers=AUTH)
            assert r.status == 409 and "nothing to roll back" in (await r.json())["error"]
            assert (await c.post("/v1/model/refit", json={"dry_run": "yes"}, headers=AUTH)).status == 400

    asyncio.run(main())


def test_without_a_store_refit_is_refused_with_a_reason(tiny_model: RuntimeModel, tmp_path: Path) -> None:
    app, _ = _app(tiny_model, tmp_path, store=False)

    async def main() -> None:
        async with TestClient(TestServer(app.build())) as c:
            r = await c.post("/v1/model/refit", headers=AUTH)
            assert r.status == 503 and "--model-store" in (await r.json())["error"]

    asyncio.run(main())
