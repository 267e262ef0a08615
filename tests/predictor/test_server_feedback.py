"""Closing the loop over HTTP: identity on /v1/samples, quarantine, corrected predictions, restart, metrics."""

from __future__ import annotations

from offpeak_predictor.db import BenchmarkDB

from .conftest import AUTH, TOKEN, mlp_graph, serve, token_app


async def _predict(client, graph) -> dict:
    r = await client.post("/v1/predict", json={"graph": graph, "gpus": ["T4"], "steps": 100, "startup_seconds": 0})
    assert r.status == 200, await r.text()
    body = await r.json()
    return {**body["predictions"][0], "response_model_version": body["model_version"]}


def test_samples_without_the_right_token_are_refused_with_a_reason_and_counted(tiny_model, tmp_path) -> None:
    graph = mlp_graph().to_dict()
    sample = {"graph": graph, "gpu": "T4", "step_seconds": 0.01, "job_seconds": 10, "steps": 100}

    async def scenario(client):
        out = {}
        for label, headers in (("none", {}), ("wrong", {"Authorization": "Bearer nope"}),
                               ("basic", {"Authorization": f"Basic {TOKEN}"})):
            r = await client.post("/v1/samples", json=sample, headers=headers)
            out[label] = (r.status, await r.json(), r.headers.get("WWW-Authenticate"))
        out["predict"] = (await client.post("/v1/predict", json={"graph": graph, "gpus": ["T4"]})).status
        out["metrics"] = await (await client.get("/metrics")).text()
        return out

    out = serve(token_app(tiny_model, tmp_path), scenario)
    status, body, challenge = out["none"]
    assert status == 401 and body["reason"] == "missing_token" and "Bearer" in body["error"] and challenge
    assert out["wrong"][0] == 403 and out["wrong"][1]["reason"] == "bad_token"
    assert out["basic"][0] == 401
    assert out["predict"] == 200  # reading needs no identity
    metrics = out["metrics"]
    assert 'offpeak_predictor_auth_failures_total{endpoint="/v1/samples",reason="missing_token"} 2.0' in metrics
    assert 'offpeak_predictor_auth_failures_total{endpoint="/v1/samples",reason="bad_token"} 1.0' in metrics
    assert len(BenchmarkDB(tmp_path / "db.sqlite").job_samples()) == 0  # nothing stored


def test_a_predictor_without_a_secret_accepts_no_samples(tiny_model, tmp_path) -> None:
    async def scenario(client):
        r = await client.post("/v1/samples", json={"graph_hash": "sha256:x", "gpu": "T4", "job_seconds": 1},
                              headers=AUTH)
        return r.status, await r.json()

    status, body = serve(token_app(tiny_model, tmp_path, token=False), scenario)
    assert status == 403 and body["reason"] == "not_configured"


def test_an_accepted_sample_changes_the_very_next_prediction(tiny_model, tmp_path) -> None:
    graph = mlp_graph().to_dict()

    async def scenario(client):
        before = await _predict(client, graph)
        measured = before["step_seconds"] * 1.5
        r = await client.post("/v1/samples", headers=AUTH, json={
            "graph": graph, "gpu": "T4", "step_seconds": measured, "job_seconds": measured * 100 + 30,
            "steps": 100, "job": "ns/a", "precision": "fp32", "optimizer": "adam", "num_gpus": 1})
        stored = (r.status, await r.json())
        after = await _predict(client, graph)
        other_gpu = (await (await client.post("/v1/predict", json={"graph": graph, "gpus": ["A100"]})).json())
        ready = await (await client.get("/readyz")).json()
        metrics = await (await client.get("/metrics")).text()
        return before, stored, after, other_gpu["predictions"][0], ready, metrics

    before, (status, body), after, other_gpu, ready, metrics = serve(token_app(tiny_model, tmp_path), scenario)
    assert status == 201 and body["status"] == "accepted" and body["correction"]["samples"] == 1
    assert body["predicted_step_seconds"] == before["step_seconds"]
    assert before["correction"] == {"samples": 0, "level": "model", "factor": 1.0,
                                    "p90_factor": before["correction"]["p90_factor"],
                                    "model_step_seconds": before["step_seconds"]}
    assert after["correction"]["samples"] == 1 and after["correction"]["factor"] > 1.2
    assert after["step_seconds"] > before["step_seconds"] * 1.2
    assert after["job_seconds"] == after["step_seconds"] * 100
    assert after["model_version"] == after["response_model_version"] == tiny_model.version
    assert after["correction"]["p90_factor"] < before["correction"]["p90_factor"]
    assert other_gpu["correction"]["samples"] == 0  # another GPU type is another key
    assert ready["corrected_keys"] == {"family": 1, "graph": 1}
    assert f'offpeak_predictor_model_info{{model_version="{tiny_model.version}"}} 1.0' in metrics
    assert 'offpeak_predictor_corrected_keys{level="graph"} 1.0' in metrics
    assert 'offpeak_predictor_sample_outcomes_total{status="accepted"} 1.0' in metrics


def test_an_implausible_sample_is_quarantined_with_a_4xx_and_counted(tiny_model, tmp_path) -> None:
    graph = mlp_graph().to_dict()

    async def scenario(client):
        before = await _predict(client, graph)
        r = await client.post("/v1/samples", headers=AUTH, json={
            "graph": graph, "gpu": "T4", "step_seconds": before["step_seconds"] * 20, "job_seconds": 1e6})
        stored = (r.status, await r.json())
        after = await _predict(client, graph)
        metrics = await (await client.get("/metrics")).text()
        return before, stored, after, metrics

    before, (status, body), after, metrics = serve(token_app(tiny_model, tmp_path), scenario)
    assert status == 422 and body["status"] == "quarantined" and "20x" in body["error"] and body["id"] >= 1
    assert after["step_seconds"] == before["step_seconds"] and after["correction"]["samples"] == 0
    assert 'offpeak_predictor_sample_outcomes_total{status="quarantined"} 1.0' in metrics
    row = BenchmarkDB(tmp_path / "db.sqlite").job_samples().iloc[0]
    assert row["status"] == "quarantined"


def test_a_restarted_predictor_answers_with_the_learned_correction(tiny_model, tmp_path) -> None:
    graph = mlp_graph().to_dict()

    async def learn(client):
        before = await _predict(client, graph)
        for _ in range(3):
            r = await client.post("/v1/samples", headers=AUTH, json={
                "graph": graph, "gpu": "T4", "step_seconds": before["step_seconds"] * 0.6})
            assert r.status == 201
        return await _predict(client, graph)

    async def ask(client):
        return await _predict(client, graph)

    learned = serve(token_app(tiny_model, tmp_path), learn)
    restarted = serve(token_app(tiny_model, tmp_path), ask)
    assert restarted["correction"]["samples"] == 3
    assert restarted["step_seconds"] == learned["step_seconds"] < learned["correction"]["model_step_seconds"]


def test_a_sample_can_replace_an_earlier_one_of_its_job(tiny_model, tmp_path) -> None:
    graph = mlp_graph().to_dict()

    async def scenario(client):
        sample = {"graph": graph, "gpu": "T4", "step_seconds": (await _predict(client, graph))["step_seconds"] * 1.2,
                  "job": "ns/a"}
        first = await (await client.post("/v1/samples", headers=AUTH, json=sample)).json()
        second = await client.post("/v1/samples", headers=AUTH, json={**sample, "replaces": first["id"]})
        bad = await client.post("/v1/samples", headers=AUTH, json={**sample, "replaces": "one"})
        return first, (await second.json())["correction"]["samples"], bad.status, await bad.json()

    first, samples, bad, body = serve(token_app(tiny_model, tmp_path), scenario)
    assert first["status"] == "accepted" and samples == 1  # one run, counted once
    assert bad == 400 and "replaces" in body["error"]
    statuses = dict(zip(*BenchmarkDB(tmp_path / "db.sqlite").job_samples()[["id", "status"]].values.T, strict=True))
    assert statuses[first["id"]] == "superseded"
