"""POST /v1/collected: rows of `offpeak collect` reach the predictor through the authenticated path and calibrate
their GPU type at once; refused batches say why; `offpeak collect --predictor-url` posts them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import threading

import pytest
from aiohttp import web

from offpeak.cli import main
from offpeak_predictor.client import PredictorClient, PredictorRequestError, PredictorUnavailable
from offpeak_predictor.db import BenchmarkDB
from offpeak_predictor.predict import Predictor

from .conftest import AUTH, TOKEN, mlp_graph, serve, token_app


def _batch(model, *, ratio: float, n: int = 3) -> dict:
    """n model rows on T4 measured at `ratio` x the model, and one op row."""
    rows = []
    for i in range(n):
        graph = mlp_graph(batch=16 * (i + 1), width=512, name=f"collect_mlp{i}")
        predicted = Predictor(model).predict(graph, ["T4"], corrected=False)[0]["step_seconds"]
        rows.append({"precision": "fp32", "mode": "train", "optimizer": "adam", "time_s": ratio * predicted,
                     "time_std": 0.0, "graph": graph.to_dict()})  # fmt: skip
    op = {"precision": "bf16", "mode": "fwd", "op_class": "gemm", "flops": 2e9, "bytes": 6e6, "out_numel": 1e6,
          "lead_dim": 1024, "dtype_bytes": 2, "time_s": 1e-4}  # fmt: skip
    return {"gpu": "T4", "software": "pytorch-2.11", "model_rows": rows, "op_rows": [op]}


def test_collected_rows_are_stored_and_calibrate_their_gpu_at_once(tiny_model, tmp_path) -> None:
    job = mlp_graph(batch=64, width=1024).to_dict()

    async def scenario(client):
        async def predict(gpu):
            r = await client.post("/v1/predict", json={"graph": job, "gpus": [gpu]})
            return (await r.json())["predictions"][0]

        before = {g: await predict(g) for g in ("T4", "A100-PCIE-40GB")}
        r = await client.post("/v1/collected", json=_batch(tiny_model, ratio=2.0), headers=AUTH)
        answer = (r.status, await r.json())
        after = {g: await predict(g) for g in ("T4", "A100-PCIE-40GB")}
        return before, answer, after

    before, (status, body), after = serve(token_app(tiny_model, tmp_path), scenario)
    assert status == 201, body
    assert (body["model_rows"], body["op_rows"], body["gpu_type"]) == (3, 1, "T4")
    assert body["calibration"]["rows"] == 3 and body["calibration"]["median_ratio"] == pytest.approx(2.0)
    assert body["calibration"]["held_out_gain"] > 0  # three rows that agree: each is closer to the others' factor
    expected = 2.0 ** (3 / 5)  # three rows shrunk toward 1 with prior_rows = 2
    assert after["T4"]["step_seconds"] == pytest.approx(before["T4"]["step_seconds"] * expected)
    assert after["T4"]["correction"]["level"] == "gpu"
    assert after["A100-PCIE-40GB"]["step_seconds"] == before["A100-PCIE-40GB"]["step_seconds"]
    db = BenchmarkDB(tmp_path / "db.sqlite")
    models, ops = db.read("model_samples"), db.read("op_samples")
    assert set(models["source"]) == {"collect"} and set(models["gpu"]) == {"T4"} and len(ops) == 1
    # a restarted predictor calibrates from the stored rows (graphs kept beside the DB)
    restarted = token_app(tiny_model, tmp_path)
    restarted.build()
    assert restarted.predictor.calibration["T4"].rows == 3


def test_the_same_batch_posted_again_stores_nothing_twice(tiny_model, tmp_path) -> None:
    """A collect Job that lost the first answer posts again: the rows are stored once, and the GPU type's
    calibration still counts each measurement once. A new measurement of the same workloads is added."""
    batch = _batch(tiny_model, ratio=2.0)
    again = _batch(tiny_model, ratio=1.5)

    async def scenario(client):
        answers = []
        for body in (batch, batch, again):
            r = await client.post("/v1/collected", json=body, headers=AUTH)
            answers.append((r.status, await r.json()))
        return answers

    first, repeat, new = serve(token_app(tiny_model, tmp_path), scenario)
    assert first[0] == repeat[0] == new[0] == 201
    assert (first[1]["model_rows"], first[1]["op_rows"], first[1]["already_stored"]) == (3, 1, 0)
    assert (repeat[1]["model_rows"], repeat[1]["op_rows"], repeat[1]["already_stored"]) == (0, 0, 4)
    assert repeat[1]["calibration"]["rows"] == 3
    assert (new[1]["model_rows"], new[1]["op_rows"], new[1]["already_stored"]) == (3, 0, 1)  # same op time: kept once
    assert new[1]["calibration"]["rows"] == 6
    db = BenchmarkDB(tmp_path / "db.sqlite")
    assert len(db.read("model_samples")) == 6 and len(db.read("op_samples")) == 1


@contextlib.contextmanager
def _fake_predictor(handler):
    """An aiohttp app with `handler` at POST /v1/collected, on a loopback port in a thread; yields its URL."""
    app = web.Application()
    app.router.add_post("/v1/collected", handler)
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


STORED = {"gpu_type": "T4", "model_rows": 1, "op_rows": 0, "already_stored": 0, "calibration": None,
          "model_version": "m"}  # fmt: skip


def test_a_post_is_retried_with_backoff_while_the_predictor_is_unavailable_but_never_after_a_refusal(tmp_path):
    (tmp_path / "token").write_text(TOKEN)
    statuses: list[int] = []
    plan = [503, 503, 201]

    async def handler(request: web.Request) -> web.Response:
        status = plan[min(len(statuses), len(plan) - 1)]
        statuses.append(status)
        return web.json_response({"error": "restarting"} if status >= 400 else STORED, status=status)

    with _fake_predictor(handler) as url:
        client = PredictorClient(url, timeout=5.0, token_file=str(tmp_path / "token"))
        waits: list[float] = []
        assert client.add_collected({"gpu": "T4"}, attempts=4, sleep=waits.append) == STORED
        assert statuses == [503, 503, 201] and waits == [2.0, 4.0]
        statuses.clear()
        with pytest.raises(PredictorUnavailable, match="HTTP 503"):
            client.add_collected({"gpu": "T4"}, attempts=2, sleep=waits.append)
        assert statuses == [503, 503]
        statuses.clear()
        plan[:] = [400]
        with pytest.raises(PredictorRequestError):
            client.add_collected({"gpu": "T4"}, attempts=4, sleep=waits.append)
        assert statuses == [400]


@pytest.mark.parametrize(("headers", "token", "status", "reason"), [
    ({}, True, 401, "missing_token"),
    ({"Authorization": "Bearer nope"}, True, 403, "bad_token"),
    (AUTH, False, 403, "not_configured"),
])  # fmt: skip
def test_collected_rows_without_the_right_token_are_refused(tiny_model, tmp_path, headers, token, status,
                                                            reason) -> None:  # fmt: skip
    async def scenario(client):
        r = await client.post("/v1/collected", json=_batch(tiny_model, ratio=2.0, n=1), headers=headers)
        return r.status, await r.json()

    got, body = serve(token_app(tiny_model, tmp_path, token=token), scenario)
    assert (got, body["reason"]) == (status, reason) and body["error"]
    assert BenchmarkDB(tmp_path / "db.sqlite").read("model_samples").empty


def _bad(model, change) -> dict:
    body = _batch(model, ratio=2.0, n=2)
    change(body)
    return body


@pytest.mark.parametrize(("change", "message"), [
    (lambda b: b["model_rows"][1].update(time_s=-1.0), "Expected `float` > 0.0 - at `$.model_rows[1].time_s`"),
    (lambda b: b["model_rows"][0].update(time_s=float("inf")), "<= 1e+30 - at `$.model_rows[0].time_s`"),
    (lambda b: b["model_rows"][0].pop("graph"), "missing required field `graph` - at `$.model_rows[0]`"),
    (lambda b: b["model_rows"][0].update(graph={"ops": "x"}), "invalid model graph at `$.model_rows[0].graph.schema`"),
    (lambda b: b["model_rows"][0]["graph"]["ops"]["attrs"].__setitem__(1, {"in_features": 10**200}),
     "invalid model graph at `$.model_rows[0].graph.ops.attrs[1].in_features`: must be an integer in [0, "),
    (lambda b: b["model_rows"][0].update(precision="fp8"), "Invalid enum value 'fp8' - at `$.model_rows[0].precision`"),
    (lambda b: b["op_rows"][0].update(op_class="fft"), "Invalid enum value 'fft' - at `$.op_rows[0].op_class`"),
    (lambda b: b.update(gpu="Z9000"), "unknown GPU 'Z9000'"),
    (lambda b: b.update(model_rows=[], op_rows=[]), "give 'model_rows' and/or 'op_rows'"),
    (lambda b: b.update(op_rows=b["op_rows"] * 5001), "length <= 5000 - at `$.op_rows`"),
    (lambda b: b.update(software="x" * 201), "length <= 200 - at `$.software`"),
])  # fmt: skip
def test_bad_collected_rows_are_refused_with_the_field_named_and_nothing_stored(tiny_model, tmp_path, change,
                                                                                message) -> None:  # fmt: skip
    body = _bad(tiny_model, change)

    async def scenario(client):
        r = await client.post("/v1/collected", data=json.dumps(body), headers={**AUTH,
                              "Content-Type": "application/json"})  # fmt: skip
        return r.status, await r.json()

    status, answer = serve(token_app(tiny_model, tmp_path), scenario)
    assert status == 400 and message in answer["error"], answer
    db = BenchmarkDB(tmp_path / "db.sqlite")
    assert db.read("model_samples").empty and db.read("op_samples").empty


def test_collect_cli_posts_its_rows_with_the_token_and_reports_a_refusal(tmp_path, monkeypatch, capsys) -> None:
    """`offpeak collect --plan new-gpu --predictor-url` sends the bearer token and the rows it measured; a 4xx
    ends the command with the predictor's reason (the rows stay in the local DB)."""
    monkeypatch.setenv("OFFPEAK_GRAPH_CACHE", str(tmp_path / "graphs"))
    (tmp_path / "token").write_text(TOKEN)
    received: list[tuple[str | None, dict]] = []

    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        received.append((request.headers.get("Authorization"), body))
        if body["gpu"] != "T4":
            return web.json_response({"error": "unknown GPU 'cpu'"}, status=400)
        return web.json_response({**STORED, "model_rows": len(body["model_rows"]), "op_rows": len(body["op_rows"])},
                                 status=201)  # fmt: skip

    with _fake_predictor(handler) as url:
        common = ["collect", "--plan", "new-gpu", "--device", "cpu", "--db", str(tmp_path / "c.sqlite"),
                  "--predictor-url", url, "--token-file", str(tmp_path / "token")]
        monkeypatch.setattr("offpeak_predictor.collectplan.QUICK", _tiny_sizes())
        assert main([*common, "--gpu-type", "T4"]) == 0
        printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert printed["predictor"]["model_rows"] == printed["model_rows"] > 0
        auth, body = received[0]
        assert auth == f"Bearer {TOKEN}" and body["gpu"] == "T4"
        assert all(isinstance(r["graph"], dict) and r["time_s"] > 0 for r in body["model_rows"])
        assert len(body["op_rows"]) == printed["op_rows"] and not any(math.isnan(r["time_s"]) for r in body["op_rows"])
        assert main(common) == 2  # a CPU run is no GPU type: refused, with the reason printed
        assert "unknown GPU 'cpu'" in capsys.readouterr().err


def _tiny_sizes():
    """The quick plan's shapes at their smallest: the CLI test is about posting, not timing."""
    from offpeak_predictor.collectplan import Sizes

    return Sizes(gemm=(32,), conv=((1, 4, 4, 8, 3, 1, 1),), attention=((1, 1, 16, 8),), op_reps=1, cnn_batches=(2,),
                 cnn=(8, 4, 1), gpt_batches=(1,), gpt=(8, 16, 1, 32), model_steps=1)


def test_collected_rows_are_capped_per_gpu_and_orphaned_graphs_removed(tiny_model, tmp_path, monkeypatch) -> None:
    from offpeak_predictor import collected

    monkeypatch.setattr(collected, "MAX_COLLECTED_MODEL_ROWS", 2)
    monkeypatch.setattr(collected, "MAX_COLLECTED_OP_ROWS", 3)
    first = _batch(tiny_model, ratio=2.0, n=3)
    first["op_rows"] = [{**first["op_rows"][0], "flops": 2e9 * (i + 1)} for i in range(5)]

    async def scenario(client):
        r = await client.post("/v1/collected", json=first, headers=AUTH)
        return r.status, await r.json()

    status, body = serve(token_app(tiny_model, tmp_path), scenario)
    assert status == 201 and (body["model_rows"], body["op_rows"]) == (3, 5)  # stored, then the oldest dropped
    db = BenchmarkDB(tmp_path / "db.sqlite")
    models, ops = db.read("model_samples"), db.read("op_samples")
    assert list(models["model_name"]) == ["collect_mlp1", "collect_mlp2"]
    assert sorted(ops["flops"]) == [6e9, 8e9, 1e10]
    kept = {p.name for p in (tmp_path / "collected_graphs").glob("*.json.gz")}
    assert kept == {p.rsplit("/", 1)[-1] for p in models["graph_ref"]}  # the dropped row's graph file is gone
