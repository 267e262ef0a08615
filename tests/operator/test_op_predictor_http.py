"""The predictor adapter over real HTTP (a throw-away local server standing in for the predictor)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from prometheus_client import CollectorRegistry

from offpeak_operator.metrics import OperatorMetrics
from offpeak_operator.predictor_http import PredictorHTTP, PredictorUnavailable, SampleReport


class Handler(BaseHTTPRequestHandler):
    seen: list[tuple[str, dict]] = []
    auth: list[str | None] = []

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Handler.seen.append((self.path, body))
        if "Z9000" in body.get("gpus", []):
            code, out = 400, {"error": "unknown GPU 'Z9000'"}
        elif self.path == "/v1/samples":
            Handler.auth.append(self.headers.get("Authorization"))
            code, out = 201, {"id": 7, "status": "accepted", "model_version": "m"}
        else:
            code, out = 200, {"model_version": "m", "graph_hash": "h", "predictions": []}
        data = json.dumps(out).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    srv = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()


def test_predict_and_sample_bodies_follow_the_contract(server: str, tmp_path) -> None:
    m = OperatorMetrics(CollectorRegistry())
    token = tmp_path / "token"
    token.write_text("operator-secret\n")
    p = PredictorHTTP(server, timeout_seconds=2, metrics=m, token_file=str(token))
    assert p.predict(graph={"g": 1}, gpus=["T4"], precision="fp16", optimizer="sgd", steps=10, num_gpus=2)[
        "model_version"] == "m"
    answer = p.report_sample(SampleReport(gpu="T4", step_seconds=1.5, job_seconds=20.0, steps=10, startup_seconds=5.0,
                                          job="ns/j", graph_hash="sha256:x", graph=None, mode="train", precision="fp16",
                                          optimizer="sgd", num_gpus=2, batch_size=32, model_family="resnet"))
    assert answer == {"id": 7, "status": "accepted", "model_version": "m"}
    (path1, body1), (path2, body2) = Handler.seen[-2:]
    assert path1 == "/v1/predict" and body1["mode"] == "train" and body1["num_gpus"] == 2
    assert path2 == "/v1/samples" and body2 == {
        "gpu": "T4", "step_seconds": 1.5, "job_seconds": 20.0, "job": "ns/j", "steps": 10, "graph_hash": "sha256:x",
        "startup_seconds": 5.0, "mode": "train", "precision": "fp16", "optimizer": "sgd", "num_gpus": 2,
        "batch_size": 32, "model_family": "resnet"}
    assert Handler.auth[-1] == "Bearer operator-secret"  # the shared secret, as a bearer token
    assert m.registry.get_sample_value("offpeak_predictor_request_seconds_count", {"endpoint": "/v1/predict"}) == 1


def test_a_sample_the_predictor_would_refuse_is_refused_before_it_is_sent(server: str, tmp_path) -> None:
    m = OperatorMetrics(CollectorRegistry())
    (tmp_path / "token").write_text("operator-secret\n")
    p = PredictorHTTP(server, timeout_seconds=2, metrics=m, token_file=str(tmp_path / "token"))
    sent = len(Handler.seen)
    with pytest.raises(PredictorUnavailable, match=r"HTTP 400: .*\$\.job_seconds"):
        p.report_sample(SampleReport(gpu="T4", job_seconds=-1.0, steps=10, job="ns/j", graph_hash="sha256:x"))
    with pytest.raises(PredictorUnavailable, match=r"\$\.job"):
        p.report_sample(SampleReport(gpu="T4", job_seconds=1.0, job="x" * 400, graph_hash="sha256:x"))
    assert len(Handler.seen) == sent
    assert m.registry.get_sample_value("offpeak_predictor_failures_total", {"endpoint": "/v1/samples"}) == 2


def test_rejection_and_unreachable_both_become_unavailable(server: str) -> None:
    m = OperatorMetrics(CollectorRegistry())
    with pytest.raises(PredictorUnavailable, match="Z9000"):
        PredictorHTTP(server, timeout_seconds=2, metrics=m).predict(graph={}, gpus=["Z9000"], precision="fp32",
                                                                   optimizer="adam", steps=1, num_gpus=1)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(PredictorUnavailable, match="unreachable"):
        PredictorHTTP(dead, timeout_seconds=2, metrics=m).report_sample(SampleReport(
            gpu="T4", step_seconds=0.1, job_seconds=1, steps=1, job="j", graph_hash="h"))
    assert m.registry.get_sample_value("offpeak_predictor_failures_total", {"endpoint": "/v1/predict"}) == 1
    assert m.registry.get_sample_value("offpeak_predictor_failures_total", {"endpoint": "/v1/samples"}) == 1
