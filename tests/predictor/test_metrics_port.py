"""Issue #16: with a metrics port, /metrics lives on its own read-only listener and no longer on the API port;
the serve command's other listener and memory settings."""

import asyncio
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from offpeak_predictor.predict import PredictOptions
from offpeak_predictor.server import PredictorApp, ServerSettings

from .conftest import mlp_graph

TOKEN = "metrics-port-token"


def _both(tiny_model, tmp_path, scenario, **settings):
    """Run `scenario(api_client, metrics_client)` against one PredictorApp's two listeners."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    predictor = PredictorApp(model=tiny_model, db=None, registry=CollectorRegistry(),
                             settings=ServerSettings(token_file=str(token_file), **settings))  # fmt: skip

    async def main():
        async with TestClient(TestServer(predictor.build())) as api, \
                TestClient(TestServer(predictor.build_metrics())) as metrics:  # fmt: skip
            return await scenario(api, metrics)

    return asyncio.run(main())


def test_metrics_move_to_their_own_listener_which_serves_nothing_else(tiny_model, tmp_path):
    graph = mlp_graph().to_dict()

    async def scenario(api, metrics):
        out = {"predict": (await api.post("/v1/predict", json={"graph": graph, "gpus": ["T4"]})).status,
               "api_metrics": (await api.get("/metrics")).status}
        r = await metrics.get("/metrics")
        out["metrics"] = (r.status, await r.text())
        for path in ("/healthz", "/readyz"):
            out[path] = (await metrics.get(path)).status
        for method, path in (("POST", "/v1/predict"), ("POST", "/v1/samples"), ("GET", "/openapi.json"),
                             ("POST", "/metrics")):
            r = await metrics.request(method, path, json={"graph": graph, "gpus": ["T4"]},
                                      headers={"Authorization": f"Bearer {TOKEN}"})
            out[f"{method} {path}"] = r.status
        return out

    out = _both(tiny_model, tmp_path, scenario, metrics_port=9092)
    assert out["predict"] == 200
    assert out["api_metrics"] == 404  # one home: scrapers need no access to the API port
    status, text = out["metrics"]
    assert status == 200
    assert 'offpeak_predictor_predictions_total{gpu_type="T4"} 1.0' in text  # the API's traffic, counted
    assert out["/healthz"] == out["/readyz"] == 200
    assert out["POST /v1/predict"] == out["POST /v1/samples"] == out["GET /openapi.json"] == 404
    assert out["POST /metrics"] == 405


def test_without_a_metrics_port_metrics_stay_on_the_api_port(tiny_model, tmp_path):
    async def scenario(api, metrics):
        return (await api.get("/metrics")).status

    assert _both(tiny_model, tmp_path, scenario) == 200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(url: str, data: bytes | None = None) -> int:
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


@pytest.mark.slow
def test_serve_command_opens_the_metrics_port(tiny_model, tmp_path: Path):
    """The CLI wires --metrics-port through to a second listener (the chart's Prometheus scrapes it)."""
    model = tmp_path / "model.json.gz"
    tiny_model.save(model)
    port, metrics_port = _free_port(), _free_port()
    log = tmp_path / "predictor.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "offpeak.cli", "predictor", "serve", "--host", "127.0.0.1", "--port", str(port),
             "--metrics-host", "127.0.0.1", "--metrics-port", str(metrics_port), "--model", str(model),
             "--db", str(tmp_path / "db.sqlite")],
            env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if _status(f"http://127.0.0.1:{metrics_port}/healthz") == 200:
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise AssertionError(log.read_text()) from None
                time.sleep(0.3)
        assert _status(f"http://127.0.0.1:{port}/healthz") == 200
        assert _status(f"http://127.0.0.1:{metrics_port}/metrics") == 200
        assert _status(f"http://127.0.0.1:{port}/metrics") == 404
        assert _status(f"http://127.0.0.1:{metrics_port}/v1/samples", data=b"{}") == 404
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0, log.read_text()  # SIGTERM: a clean shutdown of both listeners


@pytest.mark.parametrize("flags, message", [
    (["--metrics-port", "8080"], "--metrics-port must be in 1..65535 and differ from --port"),
    (["--metrics-port", "70000"], "--metrics-port must be in 1..65535 and differ from --port"),
    (["--cache-mib", "0"], "--cache-mib must be positive"),
    (["--max-sample-mib", "0"], "--max-sample-mib must be positive"),
])
def test_serve_refuses_settings_that_cannot_work(flags: list[str], message: str, capsys):
    from offpeak.cli import main

    assert main(["predictor", "serve", "--port", "8080", *flags]) != 0
    assert message in capsys.readouterr().err


def test_cache_budget_bounds_what_the_predictor_keeps(tiny_model, tmp_path):
    budget = 64 * 1024
    predictor = PredictorApp(model=tiny_model, db=None, registry=CollectorRegistry(),
                             settings=ServerSettings(cache_bytes=budget)).predictor  # fmt: skip
    for width in range(64, 64 + 200):
        graph = mlp_graph(width=width)
        predictor.predict(graph, ["T4"], PredictOptions(), graph_hash=graph.content_hash())
    assert 0 < predictor.cache_bytes <= budget  # the default (256 MiB) would keep all 200 summaries
