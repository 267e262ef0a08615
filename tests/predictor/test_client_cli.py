"""Python client against a live server thread, and the CLI contract (`--json` keys, exit codes)."""

import asyncio
import json
import socket
import threading

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from offpeak.cli import main
from offpeak_graph.schema import save_graph
from offpeak_predictor.client import PredictorClient, PredictorRequestError, PredictorUnavailable
from offpeak_predictor.db import BenchmarkDB
from offpeak_predictor.server import PredictorApp, ServerSettings
from offpeak_predictor.wire import SampleReport

from .conftest import mlp_graph


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def token_file(tmp_path):
    path = tmp_path / "token"
    path.write_text("client-test-token\n")
    return str(path)


@pytest.fixture
def live_server(tiny_model, tmp_path, token_file):
    port = _free_port()
    loop = asyncio.new_event_loop()
    app = PredictorApp(model=tiny_model, db=BenchmarkDB(tmp_path / "db.sqlite"), registry=CollectorRegistry(),
                       settings=ServerSettings(token_file=token_file)).build()  # fmt: skip
    runner = web.AppRunner(app)
    started = threading.Event()

    def serve():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10)
    yield f"http://127.0.0.1:{port}"
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_client_predicts_and_adds_samples(live_server, token_file):
    client = PredictorClient(live_server, timeout=10, token_file=token_file)
    graph = mlp_graph().to_dict()
    resp = client.predict(graph, ["A100", "L40S"], steps=10, optimizer="sgd")
    assert [p["gpu_type"] for p in resp["predictions"]] == ["A100-SXM4-40GB", "L40S"]
    assert all(p["optimizer"] == "sgd" and "job_seconds_p90" in p for p in resp["predictions"])
    no_startup = client.predict(graph, ["A100"], steps=10, optimizer="sgd", startup_seconds=0)["predictions"][0]
    assert abs(no_startup["job_seconds"] - 10 * no_startup["step_seconds"]) < 1e-6
    assert abs(resp["predictions"][0]["job_seconds"] - (no_startup["job_seconds"] + 60)) < 1e-6
    first = client.add_sample(SampleReport(gpu="A100", job_seconds=50.0, steps=10, job="ns/a",
                                                 graph_hash=resp["graph_hash"]))
    assert first["status"] == "unverified"  # a hash alone cannot be checked against the model
    step = no_startup["step_seconds"] * 1.2
    learned = client.add_sample(SampleReport(gpu="A100", step_seconds=step, graph=graph, optimizer="sgd",
                                                   startup_seconds=0))
    assert learned["id"] == first["id"] + 1 and learned["status"] == "accepted"
    corrected = client.predict(graph, ["A100"], steps=10, optimizer="sgd")["predictions"][0]
    assert corrected["correction"]["samples"] == 1 and corrected["step_seconds"] > no_startup["step_seconds"]
    with pytest.raises(PredictorRequestError) as refused:
        PredictorClient(live_server, timeout=10).add_sample(SampleReport(gpu="A100", step_seconds=step, graph=graph))
    assert refused.value.status == 401 and refused.value.body["reason"] == "missing_token"
    with pytest.raises(PredictorRequestError) as quarantined:
        client.add_sample(SampleReport(gpu="A100", step_seconds=step * 50, graph=graph, optimizer="sgd"))
    assert quarantined.value.status == 422 and quarantined.value.body["status"] == "quarantined"
    with pytest.raises(PredictorRequestError) as err:
        client.predict(graph, ["Voodoo-5"])
    assert err.value.status == 400 and "known_gpus" in err.value.body


def test_client_reports_unreachable_predictor():
    client = PredictorClient(f"http://127.0.0.1:{_free_port()}", timeout=1)
    with pytest.raises(PredictorUnavailable):
        client.predict(mlp_graph().to_dict(), ["T4"])


def test_predict_cli_json_contract(tmp_path, capsys):
    path = tmp_path / "g.json"
    save_graph(mlp_graph(batch=32), path)
    assert main(["predict", "--graph", str(path), "--gpu", "NVIDIA_H100_80GB_HBM3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gpu_type"] == "H100-SXM5-80GB"
    assert {"gpu", "step_seconds", "step_seconds_p90", "model_version"} <= set(out)
    assert "job_seconds" not in out
    assert main(["predict", "--graph", str(path), "--gpu", "A100", "--steps", "1000", "--optimizer", "none",
                 "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["optimizer"] == "none"
    assert out["job_seconds_p90"] >= out["job_seconds"] > 1000 * out["step_seconds"]


def test_predict_cli_compares_every_gpu_it_is_given(tmp_path, capsys):
    path = tmp_path / "g.json"
    save_graph(mlp_graph(batch=32), path)
    assert main(["predict", "--graph", str(path), "--gpu", "A100", "--gpu", "H100", "--gpu", "A100", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["gpu_type"] for r in rows] == ["A100-SXM4-40GB", "H100-SXM5-80GB"]  # each once, in the order given
    assert rows[0]["step_seconds"] != rows[1]["step_seconds"]
    assert main(["predict", "--graph", str(path), "--gpu", "A100", "--gpu", "T4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and " on A100 = A100-SXM4-40GB " in lines[0] and " on T4 " in lines[1]  # the alias said
    assert main(["predict", "--graph", str(path), "--gpu", "A100", "--gpu", "Voodoo-5"]) == 2  # all checked first


def test_predict_cli_bad_input_exits_2(tmp_path, capsys):
    path = tmp_path / "g.json"
    save_graph(mlp_graph(), path)
    assert main(["predict", "--graph", str(path), "--gpu", "Voodoo-5", "--json"]) == 2
    assert "known GPUs" in capsys.readouterr().err
    assert main(["predict", "--graph", str(tmp_path / "missing.json"), "--gpu", "T4", "--json"]) == 2
    assert main(["predict", "--torchvision", "resnet50", "--gpu", "T4", "--json"]) == 2  # no --batch-size
    assert "--batch-size" in capsys.readouterr().err
    assert main(["predict", "--graph", str(path), "--gpu", "T4", "--steps", "10", "--startup-seconds", "-5",
                 "--json"]) == 2
    assert "startup seconds must be >= 0" in capsys.readouterr().err


@pytest.mark.slow
def test_predict_cli_resnet50_on_a100(capsys):
    assert main(["predict", "--torchvision", "resnet50", "--batch-size", "64", "--gpu", "A100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # resnet50 bs64 fp32 training on an A100 takes ~0.1-0.3 s per step in public benchmarks.
    assert 0.05 < out["step_seconds"] < 0.6
