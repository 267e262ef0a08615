"""HTTP service through aiohttp's test client: good and bad requests, metrics, OpenAPI."""

import asyncio
import json

from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from offpeak_predictor.db import BenchmarkDB
from offpeak_predictor.server import PredictorApp, ServerSettings

from .conftest import mlp_graph


TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _run(tiny_model, tmp_path, scenario, **settings):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    app = PredictorApp(model=tiny_model, db=BenchmarkDB(tmp_path / "db.sqlite"),
                       settings=ServerSettings(token_file=str(token_file), **settings),
                       registry=CollectorRegistry()).build()  # fmt: skip

    async def main():
        async with TestClient(TestServer(app)) as client:
            return await scenario(client)

    return asyncio.run(main())


def test_predict_returns_one_prediction_per_gpu(tiny_model, tmp_path):
    graph = mlp_graph().to_dict()

    async def scenario(client):
        resp = await client.post("/v1/predict", json={"graph": graph, "gpus": ["A100", "H100", "T4"], "steps": 100})
        return resp.status, await resp.json()

    status, body = _run(tiny_model, tmp_path, scenario)
    assert status == 200
    assert body["graph_hash"] == graph["content_hash"] and body["model_version"] == tiny_model.version
    preds = body["predictions"]
    assert [p["gpu"] for p in preds] == ["A100", "H100", "T4"]
    assert [p["gpu_type"] for p in preds] == ["A100-SXM4-40GB", "H100-SXM5-80GB", "T4"]
    for p in preds:
        assert p["step_seconds_p90"] >= p["step_seconds"] > 0
        assert p["job_seconds"] > 100 * p["step_seconds"]


def test_startup_seconds_is_honoured_and_defaults_to_60(tiny_model, tmp_path):
    graph = mlp_graph().to_dict()

    async def scenario(client):
        out = {}
        for label, extra in (("default", {}), ("none", {"startup_seconds": 0}), ("slow", {"startup_seconds": 300.5})):
            r = await client.post("/v1/predict", json={"graph": graph, "gpus": ["T4"], "steps": 100, **extra})
            assert r.status == 200, await r.text()
            out[label] = (await r.json())["predictions"][0]
        return out

    out = _run(tiny_model, tmp_path, scenario)
    base = 100 * out["none"]["step_seconds"]
    base_p90 = 100 * out["none"]["step_seconds_p90"]
    assert abs(out["none"]["job_seconds"] - base) < 1e-6 and abs(out["none"]["job_seconds_p90"] - base_p90) < 1e-6
    assert abs(out["default"]["job_seconds"] - (base + 60)) < 1e-6
    assert abs(out["slow"]["job_seconds"] - (base + 300.5)) < 1e-6
    assert out["slow"]["job_seconds_p90"] > out["slow"]["job_seconds"] and out["slow"]["job_seconds_p90"] > base_p90


def test_bad_startup_seconds_is_a_400_naming_the_field(tiny_model, tmp_path):
    graph = mlp_graph().to_dict()

    async def scenario(client):
        out = []
        for bad in (-1, "60", True, None):
            body = {"graph": graph, "gpus": ["T4"], "steps": 10, "startup_seconds": bad}
            r = await client.post("/v1/predict", json=body)
            out.append((bad, r.status, await r.json()))
        return out

    for bad, status, body in _run(tiny_model, tmp_path, scenario):
        if bad is None:  # JSON null = absent: the default start-up
            assert status == 200
        else:
            assert status == 400 and "startup_seconds" in body["error"], (bad, body)


def test_bad_requests_get_4xx_with_reasons(tiny_model, tmp_path):
    graph = mlp_graph().to_dict()

    async def scenario(client):
        out = {}
        r = await client.post("/v1/predict", json={"graph": graph, "gpus": ["Voodoo-5"]})
        out["unknown_gpu"] = (r.status, await r.json())
        r = await client.post("/v1/predict", data=b"{not json", headers={"Content-Type": "application/json"})
        out["bad_json"] = (r.status, await r.json())
        r = await client.post("/v1/predict", json={"graph": {"schema": "nope"}, "gpus": ["T4"]})
        out["bad_graph"] = (r.status, await r.json())
        r = await client.post("/v1/predict", json={"graph": graph, "gpus": []})
        out["no_gpus"] = (r.status, await r.json())
        r = await client.post("/v1/predict", json={"graph": graph, "gpus": ["T4"], "precision": "fp8"})
        out["bad_precision"] = (r.status, await r.json())
        r = await client.post("/v1/predict", data=b"x" * 5000, headers={"Content-Type": "application/json"})
        out["too_big"] = (r.status, await r.text())
        r = await client.post("/v1/samples", json={"gpu": "T4", "graph_hash": "sha256:x", "job_seconds": -1},
                              headers=AUTH)
        out["bad_sample"] = (r.status, await r.json())
        r = await client.get("/healthz")
        out["still_alive"] = (r.status, await r.json())
        r = await client.get("/metrics")
        out["metrics"] = (r.status, await r.text())
        return out

    out = _run(tiny_model, tmp_path, scenario, max_body_bytes=4096)
    status, body = out["unknown_gpu"]
    assert status == 400 and "Voodoo-5" in body["error"] and "H100-SXM5-80GB" in body["known_gpus"]
    assert out["bad_json"][0] == 400 and "JSON" in out["bad_json"][1]["error"]
    assert out["bad_graph"][0] == 400 and "schema" in out["bad_graph"][1]["error"]
    assert out["no_gpus"][0] == 400 and "gpus" in out["no_gpus"][1]["error"]
    assert out["bad_precision"][0] == 400 and "precision" in out["bad_precision"][1]["error"]
    assert out["too_big"][0] == 413
    assert out["bad_sample"][0] == 400 and "job_seconds" in out["bad_sample"][1]["error"]
    assert out["still_alive"] == (200, {"status": "ok"})
    status, text = out["metrics"]
    assert status == 200
    assert 'offpeak_predictor_errors_total{endpoint="/v1/predict",status="400"} 5.0' in text
    assert "offpeak_predictor_http_request_seconds_bucket" in text


def test_samples_are_stored_and_counted(tiny_model, tmp_path):
    graph = mlp_graph().to_dict()

    async def scenario(client):
        r1 = await client.post("/v1/samples", json={"graph": graph, "gpu": "A100", "job_seconds": 120.5,
                                                     "steps": 500, "job": "ns/job-a", "step_seconds": 0.2},
                               headers=AUTH)
        r2 = await client.post("/v1/samples", json={"graph_hash": "sha256:abc", "gpu": "H100", "job_seconds": 60},
                               headers=AUTH)
        metrics = await (await client.get("/metrics")).text()
        return r1.status, await r1.json(), r2.status, await r2.json(), metrics

    s1, b1, s2, b2, metrics = _run(tiny_model, tmp_path, scenario)
    # the first is judged against the model (201 learned, or 422 quarantined: 0.2 s is arbitrary here); the
    # second has no graph the model could check it against: stored, not learned (202)
    assert s1 in (201, 422) and s2 == 202 and b2["id"] == b1["id"] + 1 and b2["status"] == "unverified"
    rows = BenchmarkDB(tmp_path / "db.sqlite").job_samples()
    assert list(rows["gpu"]) == ["A100-SXM4-40GB", "H100-SXM5-80GB"]
    assert rows["graph_hash"].iloc[0] == graph["content_hash"] and rows["job"].iloc[0] == "ns/job-a"
    assert json.loads(rows["graph"].iloc[0])["model_name"] == "mlp"
    assert "offpeak_predictor_samples_total 2.0" in metrics


def test_readyz_and_openapi(tiny_model, tmp_path):
    async def scenario(client):
        ready = await (await client.get("/readyz")).json()
        doc = await (await client.get("/openapi.json")).json()
        return ready, doc

    ready, doc = _run(tiny_model, tmp_path, scenario)
    assert ready["model_version"] == tiny_model.version
    assert doc["openapi"].startswith("3.") and {"/v1/predict", "/v1/samples"} <= set(doc["paths"])
    ref = doc["paths"]["/v1/predict"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    props = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"]
    assert "H100-SXM5-80GB" in props["gpus"]["items"]["examples"]
    startup = props["startup_seconds"]["anyOf"][0]
    assert startup["type"] == "number" and startup["minimum"] == 0 and startup["maximum"] == 1e7
    assert doc["x-op-attrs"]["dropout"]["properties"]["p"]["anyOf"][0] == {"type": "number", "minimum": 0.0,
                                                                         "maximum": 1.0}  # fmt: skip
