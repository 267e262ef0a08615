"""Issue #16 (predictor): no graph_url, one graph validation, finite answers, bounded caches, work off the loop."""

import asyncio
import json
import time

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from offpeak_predictor.lru import SizedLRU
from offpeak_predictor.predict import Predictor
from offpeak_predictor.server import PredictorApp, ServerSettings

from .conftest import mlp_graph


def _run(model, scenario, **settings):
    app = PredictorApp(model=model, db=None, settings=ServerSettings(**settings),
                       registry=CollectorRegistry()).build()  # fmt: skip

    async def main():
        async with TestClient(TestServer(app)) as client:
            return await scenario(client)

    return asyncio.run(main())


def _graph_text(graph_dict: dict) -> str:
    """JSON text as an attacker could send it (NaN/Infinity literals allowed)."""
    return json.dumps({"graph": graph_dict, "gpus": ["T4"], "steps": 100})


def _with(**changes):
    graph = mlp_graph().to_dict()
    for key, value in changes.items():
        if key.startswith("ops."):
            graph["ops"][key[4:]][1] = value
        else:
            graph[key] = value
    return graph


BAD_GRAPHS = [
    ("ops.flops", _with(**{"ops.flops": float("nan")})),
    ("ops.flops", _with(**{"ops.flops": float("inf")})),
    ("ops.flops", _with(**{"ops.flops": -1.0})),
    ("ops.bytes_read", _with(**{"ops.bytes_read": -5})),
    ("ops.params", _with(**{"ops.params": float("nan")})),
    ("ops.output_shapes", _with(**{"ops.output_shapes": [[-1, 4]]})),
    ("batch_size", _with(batch_size=0)),
    ("batch_size", _with(batch_size=-3)),
    ("mode", _with(mode="bogus")),
    ("precision", _with(precision="fp64")),
    ("optimizer", _with(optimizer="lion?")),
    ("ops", _with(ops={"id": [], "type": []})),
]


@pytest.mark.parametrize(("field", "graph"), BAD_GRAPHS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD_GRAPHS)])
def test_bad_graphs_get_a_400_naming_the_field(tiny_model, field, graph):
    async def scenario(client):
        resp = await client.post("/v1/predict", data=_graph_text(graph), headers={"Content-Type": "application/json"})
        return resp.status, await resp.text()

    status, text = _run(tiny_model, scenario)
    assert status == 400, text
    assert field in json.loads(text)["error"]


def test_huge_steps_and_huge_batch_are_400_not_500(tiny_model):
    graph = mlp_graph().to_dict()

    async def scenario(client):
        out = []
        for body in ('{"graph": %s, "gpus": ["T4"], "steps": 1%s}' % (json.dumps(graph), "0" * 400),
                     '{"graph": %s, "gpus": ["T4"], "steps": 1e400}' % json.dumps(graph),
                     _graph_text(_with(batch_size=10**400))):
            resp = await client.post("/v1/predict", data=body, headers={"Content-Type": "application/json"})
            out.append((resp.status, await resp.text()))
        return out

    for status, text in _run(tiny_model, scenario):
        assert status == 400, text
        json.loads(text)  # always valid JSON


def test_graph_url_is_refused_and_never_fetched(tiny_model):
    async def scenario(client):
        out = []
        for graph in ({}, {"graph": mlp_graph().to_dict()}):
            resp = await client.post("/v1/predict", json={"graph_url": "http://169.254.169.254/latest",
                                                          "gpus": ["T4"], **graph})  # fmt: skip
            out.append((resp.status, await resp.json()))
        return out

    (status, body), (with_graph, answer) = _run(tiny_model, scenario)
    assert status == 400 and "`graph`" in body["error"]  # only an inline graph is read
    assert with_graph == 400 and "inline" in answer["error"]


def test_a_non_finite_prediction_is_a_4xx_never_invalid_json(tiny_model, monkeypatch):
    def nan_predict(self, graph, gpus, options, **kw):
        return [{"gpu": "T4", "gpu_type": "T4", "step_seconds": float("nan")}]

    monkeypatch.setattr(Predictor, "predict", nan_predict)

    async def scenario(client):
        resp = await client.post("/v1/predict", json={"graph": mlp_graph().to_dict(), "gpus": ["T4"]})
        return resp.status, await resp.text()

    status, text = _run(tiny_model, scenario)
    assert status == 400 and "finite" in json.loads(text)["error"]


def test_sized_lru_keeps_within_its_byte_budget():
    cache: SizedLRU[int, np.ndarray] = SizedLRU(max_bytes=10_000, sizeof=lambda a: int(a.nbytes))
    for i in range(100):
        cache.put(i, np.zeros(200))  # 1,600 bytes each
    assert cache.bytes <= 10_000 and 1 <= len(cache) <= 6
    assert cache.get(99) is not None and cache.get(0) is None
    cache.put(1000, np.zeros(10_000))  # larger than the whole budget: not kept
    assert cache.get(1000) is None and cache.bytes <= 10_000
    cache.resize(4_000)  # a smaller budget evicts the oldest at once
    assert cache.bytes <= 4_000 and cache.get(99) is not None and len(cache) == 2


def test_predictor_caches_stay_bounded_with_many_distinct_graphs(tiny_model):
    predictor = Predictor(tiny_model, cache_bytes=2 * 2**20)
    for width in range(64, 64 + 40):
        predictor.predict(mlp_graph(width=width, layers=200), ["T4", "A100"])
    assert predictor.cache_bytes <= 2 * 2**20  # op prices included
    assert len(predictor._cache) < 40  # older summaries were evicted


def test_the_models_per_op_prices_take_only_their_share_of_the_cache_budget(tiny_model):
    predictor = Predictor(tiny_model, cache_bytes=2**20)  # 40 graphs x 2 GPUs of op prices need ~270 KiB
    for width in range(64, 64 + 40):
        predictor.predict(mlp_graph(width=width, layers=200), ["T4", "A100"])
    assert 0 < tiny_model.op_cache_bytes <= 2**20 * 3 // 16
    assert predictor.cache_bytes <= 2**20


def _slowed(cls, method: str, monkeypatch, started: list[float]) -> None:
    """`cls.method` takes 1.5 s more (the work of a 100k-op graph), noting when it started."""
    original = getattr(cls, method)

    def slow(self, *args, **kwargs):
        started.append(time.perf_counter())
        time.sleep(1.5)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, method, slow)


async def _healthz_meanwhile(client, request, started: list[float]):
    """(healthz status, seconds after the slow work began that /healthz answered, the slow request's response)."""
    pending = asyncio.create_task(request)
    while not started:
        await asyncio.sleep(0.01)
    health = await client.get("/healthz")
    answered_after = time.perf_counter() - started[0]
    return health.status, answered_after, await pending


def test_healthz_answers_while_a_big_prediction_runs(tiny_model, monkeypatch):
    started: list[float] = []
    _slowed(Predictor, "predict", monkeypatch, started)

    async def scenario(client):
        health, after, resp = await _healthz_meanwhile(
            client, client.post("/v1/predict", json={"graph": mlp_graph().to_dict(), "gpus": ["T4"]}), started)
        return health, after, resp.status

    health_status, answered_after, predict_status = _run(tiny_model, scenario)
    assert health_status == 200 and answered_after < 1.0  # well before the prediction's 1.5 s are over
    assert predict_status == 200


def test_a_prediction_past_its_deadline_is_a_503(tiny_model, monkeypatch):
    monkeypatch.setattr(Predictor, "predict", lambda self, *a, **k: time.sleep(1.0) or [])

    async def scenario(client):
        resp = await client.post("/v1/predict", json={"graph": mlp_graph().to_dict(), "gpus": ["T4"]})
        return resp.status, await resp.json()

    status, body = _run(tiny_model, scenario, predict_deadline_s=0.2)
    assert status == 503 and "longer than" in body["error"]


def test_sized_lru_clear_empties_it():
    cache: SizedLRU[str, str] = SizedLRU(max_bytes=10_000, sizeof=len)
    cache.put("a", "x" * 100)
    cache.clear()
    assert len(cache) == 0 and cache.bytes == 0 and cache.get("a") is None


def test_healthz_answers_while_a_sample_is_judged(tiny_model, tmp_path, monkeypatch):
    from offpeak_predictor.samples import Feedback

    from .conftest import AUTH, serve, token_app

    started: list[float] = []
    _slowed(Feedback, "ingest", monkeypatch, started)  # judging predicts the graph and writes SQLite
    sample = {"graph": mlp_graph().to_dict(), "gpu": "T4", "job": "ml/j", "job_seconds": 60.0, "steps": 100}

    async def scenario(client):
        health, after, resp = await _healthz_meanwhile(
            client, client.post("/v1/samples", json=sample, headers=AUTH), started)
        return health, after, resp.status

    health_status, answered_after, sample_status = serve(token_app(tiny_model, tmp_path), scenario)
    assert health_status == 200 and answered_after < 1.0
    assert sample_status in (201, 202, 422)  # judged (422: quarantined) and stored either way
    from offpeak_predictor.db import BenchmarkDB

    assert list(BenchmarkDB(tmp_path / "db.sqlite").job_samples()["job"]) == ["ml/j"]


def test_a_body_over_its_endpoints_limit_is_a_413_naming_it(tiny_model, tmp_path):
    from offpeak_predictor.server import SMALL_BODY_BYTES

    from .conftest import AUTH, serve, token_app

    big = json.dumps({"dry_run": False, "pad": "x" * SMALL_BODY_BYTES}).encode()

    async def scenario(client):
        declared = await client.post("/v1/model/refit", data=big, headers=AUTH)

        async def chunks():  # no Content-Length: the limit holds while streaming
            for i in range(0, len(big), 8192):
                yield big[i:i + 8192]

        streamed = await client.post("/v1/model/refit", data=chunks(), headers=AUTH)
        graph_sized = await client.post("/v1/predict", json={"graph": mlp_graph().to_dict(), "gpus": ["T4"],
                                                             "pad": "x" * SMALL_BODY_BYTES})  # fmt: skip
        return (declared.status, await declared.json(), streamed.status, await streamed.json(), graph_sized.status)

    d_status, d_body, s_status, s_body, predict_status = serve(token_app(tiny_model, tmp_path), scenario)
    assert d_status == 413 and f"{SMALL_BODY_BYTES} bytes, the limit of /v1/model/refit" in d_body["error"]
    assert s_status == 413 and "the limit of /v1/model/refit" in s_body["error"]
    assert predict_status == 200  # a graph-bearing endpoint keeps the larger limit


def test_a_large_body_is_decoded_off_the_event_loop(tiny_model, monkeypatch):
    import threading

    from offpeak_predictor import server

    threads: list[str] = []
    original = server.wire.decode

    def recording(raw, kind):
        threads.append(threading.current_thread().name)
        return original(raw, kind)

    monkeypatch.setattr(server.wire, "decode", recording)
    graph = mlp_graph().to_dict()

    async def scenario(client):
        loop_thread = threading.current_thread().name
        small = await client.post("/v1/predict", json={"graph": graph, "gpus": ["T4"]})
        large = await client.post("/v1/predict", json={"graph": graph, "gpus": ["T4"],
                                                       "pad": "x" * server.INLINE_DECODE_BYTES})  # fmt: skip
        return loop_thread, small.status, large.status

    loop_thread, small_status, large_status = _run(tiny_model, scenario)
    assert small_status == 200 and large_status == 200
    assert threads[0] == loop_thread and threads[1] != loop_thread
