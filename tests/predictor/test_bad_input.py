"""Issue #48, bad input closed: each finding of the loopback probe answered a 500 or failed the wrong way. Each is
now a 4xx naming the field by its JSON path and the reason (or the documented fallback), and nothing is half-done."""

from __future__ import annotations

import http.client
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from offpeak_predictor import collected, db
from offpeak_predictor.db import BenchmarkDB
from offpeak_predictor.predict import Predictor
from offpeak_predictor.samples import FeedbackSettings
from offpeak_predictor.server import PredictorApp, ServerSettings
from support.loopback import served

from .conftest import AUTH, TOKEN, mlp_graph, serve, token_app

BIG = "1" + "0" * 5000  # past Python's 4,300-digit limit for int(str): json.loads raised a ValueError
GRAPH = mlp_graph(batch=8, width=16, layers=1).to_dict()


def _post_all(app: PredictorApp, posts: list[tuple[str, str | dict[str, Any]]]) -> list[tuple[int, Any]]:
    async def scenario(client):
        out = []
        for path, body in posts:
            data = body if isinstance(body, str) else json.dumps(body)
            r = await client.post(path, data=data, headers={**AUTH, "Content-Type": "application/json"})
            out.append((r.status, await r.json()))
        return out

    return serve(app, scenario)


def _text_with(body: dict[str, Any], key: str, raw_number: str) -> str:
    """`body` as JSON text with `"key": <raw_number>` (a number json.dumps cannot write)."""
    return json.dumps({**body, key: 12345}).replace(f'"{key}": 12345', f'"{key}": {raw_number}')


@pytest.mark.parametrize(("path", "text", "where"), [
    ("/v1/predict", _text_with({"graph": GRAPH, "gpus": ["T4"]}, "steps", BIG), "$.steps"),
    ("/v1/predict", json.dumps({"graph": GRAPH, "gpus": ["T4"]}).replace('"batch_size": 8', f'"batch_size": {BIG}'),
     "$.graph"),
    ("/v1/predict", _text_with({"graph": GRAPH, "gpus": ["T4"], "startup_seconds": float("nan")}, "steps", BIG),
     "4300"),  # not strict JSON as well: Python's reader names the limit
    ("/v1/samples", _text_with({"graph": GRAPH, "gpu": "T4", "job": "a/b"}, "job_seconds", BIG), "$.job_seconds"),
    ("/v1/samples", _text_with({"graph_hash": "sha256:x", "gpu": "T4"}, "num_gpus", BIG), "$.num_gpus"),
])  # fmt: skip
def test_an_integer_of_thousands_of_digits_is_a_400_naming_where(tiny_model, tmp_path, path, text, where) -> None:
    [(status, body)] = _post_all(token_app(tiny_model, tmp_path), [(path, text)])
    assert status == 400 and where in body["error"], body
    assert len(BenchmarkDB(tmp_path / "db.sqlite").job_samples()) == 0


def _graph_with(op: int, **column_values: Any) -> dict[str, Any]:
    graph = json.loads(json.dumps(GRAPH))
    for column, value in column_values.items():
        graph["ops"][column][op] = value
    return graph


BAD_GRAPHS = [  # each was a 500: OverflowError in graphfeatures.py / memory.py, TypeError in memory_rules.py
    (_graph_with(1, output_shapes=[[2**40] * 30]), "$.graph.ops.output_shapes[1]", "more than 1e+30 elements"),
    (_graph_with(1, output_shapes=[[1] * 65]), "$.graph.ops.output_shapes[1]", "at most 64"),
    (_graph_with(1, attrs={"in_features": 10**200, "out_features": 10**200}), "$.graph.ops.attrs[1].in_features",
     "must be an integer in [0, 1099511627776]"),
    (_graph_with(2, type="dropout", attrs={"p": [1, 2]}), "$.graph.ops.attrs[2].p", "must be a number in [0.0, 1.0] (got [1, 2])"),
    (_graph_with(2, type="dropout", attrs={"p": 1.5}), "$.graph.ops.attrs[2].p", "(got 1.5)"),
    (_graph_with(1, attrs={"bias": "yes"}), "$.graph.ops.attrs[1].bias", "must be true or false"),
]


@pytest.mark.parametrize(("graph", "where", "why"), BAD_GRAPHS, ids=[w for _, w, _ in BAD_GRAPHS])
def test_huge_shapes_and_mistyped_op_attributes_are_a_400_naming_the_field(tiny_model, tmp_path, graph, where,
                                                                           why) -> None:  # fmt: skip
    sample = {"graph": graph, "gpu": "T4", "job": "ml/x", "job_seconds": 10.0, "steps": 100}
    answers = _post_all(token_app(tiny_model, tmp_path), [("/v1/predict", {"graph": graph, "gpus": ["T4"]}),
                                                          ("/v1/samples", sample)])  # fmt: skip
    for status, body in answers:
        assert status == 400 and f"`{where}`" in body["error"] and why in body["error"], body


def test_unknown_attributes_and_kinds_are_kept_as_they_are(tiny_model, tmp_path) -> None:
    """Only the attributes the schema types are checked: another key, or any key of an untyped op kind, is kept (a
    new extractor may write them), and it is part of the graph's content."""
    graph = _graph_with(1, attrs={"in_features": 16, "out_features": 16, "custom": {"any": ["thing"]}})
    graph["ops"]["attrs"][2] = {"p": [1, 2], "in_features": "x"}  # a relu: no typed attributes
    [(status, body)] = _post_all(token_app(tiny_model, tmp_path), [("/v1/predict", {"graph": graph, "gpus": ["T4"]})])
    assert status == 200 and body["graph_hash"] != GRAPH["content_hash"]


def _raw_post(port: int, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """POST /v1/samples with header values sent byte for byte (http.client writes them as latin-1)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v1/samples", body=json.dumps({"graph_hash": "sha256:x", "gpu": "T4", "job_seconds": 1}),
                     headers={"Content-Type": "application/json", **headers})  # fmt: skip
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


@pytest.mark.parametrize("value", ["Bearer \xff", f"Bearer {TOKEN}\xff", "Bearer \xc3\x28"])
def test_an_authorization_header_that_is_not_utf8_is_a_401_and_counted(tiny_model, tmp_path, value) -> None:
    app = token_app(tiny_model, tmp_path)
    with served(app.build()) as port:
        status, body = _raw_post(port, {"Authorization": value})
        good, _ = _raw_post(port, AUTH)
    assert status == 401 and body["reason"] == "malformed_header" and "UTF-8" in body["error"]
    assert good == 202  # the server still answers the right token
    assert app.metrics.registry.get_sample_value("offpeak_predictor_auth_failures_total",
                                                 {"endpoint": "/v1/samples", "reason": "malformed_header"}) == 1
    assert len(BenchmarkDB(tmp_path / "db.sqlite").job_samples()) == 1  # only the authorised one


def test_a_token_file_that_is_not_utf8_fails_with_a_reason(tmp_path) -> None:
    from offpeak.errors import UserError
    from offpeak_predictor.auth import read_token

    (tmp_path / "token").write_bytes(b"\xff\xfe secret")
    with pytest.raises(UserError, match="not UTF-8"):
        read_token(tmp_path / "token")


def _stored_bytes(path: Path) -> int:
    """Every byte the samples' rows hold, measured by SQLite itself (text as UTF-8, graphs, 8 per number)."""
    with sqlite3.connect(path) as con:
        rows = con.execute("SELECT * FROM job_samples").fetchall()
    return sum(len(v.encode()) if isinstance(v, str) else 8 for row in rows for v in row if v is not None)


def test_every_sample_field_has_a_length_limit_naming_it(tiny_model, tmp_path) -> None:
    """The probe stored 80 MiB under a 1 MiB limit with 2 MiB `job` strings: those fields are bounded now."""
    long = "x" * (2 * 2**20)
    base = {"graph_hash": "sha256:x", "gpu": "T4", "job_seconds": 10.0}
    answers = _post_all(token_app(tiny_model, tmp_path), [
        ("/v1/samples", {**base, "job": long}), ("/v1/samples", {**base, "model_family": long}),
        ("/v1/samples", {**base, "graph_hash": long}), ("/v1/samples", {**base, "gpu": long}),
        ("/v1/samples", {"graph": {**GRAPH, "model_family": long}, "gpu": "T4", "job_seconds": 10.0}),
    ])  # fmt: skip
    wheres = ["`$.job`", "`$.model_family`", "`$.graph_hash`", "`$.gpu`", "`$.graph.model_family`"]
    for (status, body), where in zip(answers, wheres, strict=True):
        assert status == 400 and where in body["error"], body
    assert len(BenchmarkDB(tmp_path / "db.sqlite").job_samples()) == 0


def test_the_sample_budget_counts_every_stored_byte(tiny_model, tmp_path) -> None:
    """`--max-sample-mib` bounds the whole rows (graph, job, family, hash, reason, ...), not the graphs alone."""
    budget = 40_000
    (tmp_path / "token").write_text(TOKEN)
    app = PredictorApp(model=tiny_model, db=BenchmarkDB(tmp_path / "db.sqlite"),
                       settings=ServerSettings(token_file=str(tmp_path / "token")),
                       feedback=FeedbackSettings(max_graph_bytes=budget))  # fmt: skip
    longest = {"graph_hash": "h" * 128, "gpu": "T4", "job_seconds": 10.0, "job": "n" * 317, "model_family": "f" * 256}
    answers = _post_all(app, [("/v1/samples", longest)] * 80)
    assert {status for status, _ in answers} == {202}
    assert 40 < len(BenchmarkDB(tmp_path / "db.sqlite").job_samples()) < 80  # the oldest were dropped
    assert _stored_bytes(tmp_path / "db.sqlite") <= budget


def test_a_sample_larger_than_the_whole_budget_is_a_413_and_stores_nothing(tiny_model, tmp_path) -> None:
    (tmp_path / "token").write_text(TOKEN)
    graph = mlp_graph(batch=8, width=16, layers=40).to_dict()
    app = PredictorApp(model=tiny_model, db=BenchmarkDB(tmp_path / "db.sqlite"),
                       settings=ServerSettings(token_file=str(tmp_path / "token")),
                       feedback=FeedbackSettings(max_graph_bytes=len(json.dumps(graph)) // 2))  # fmt: skip
    first = {"graph_hash": "sha256:x", "gpu": "T4", "job_seconds": 10.0}
    [(small, _), (status, body)] = _post_all(app, [("/v1/samples", first),
                                                   ("/v1/samples", {"graph": graph, "gpu": "T4", "job_seconds": 1.0})])
    assert small == 202 and status == 413 and "max-sample-mib" in body["error"], body
    assert list(BenchmarkDB(tmp_path / "db.sqlite").job_samples()["graph_hash"]) == ["sha256:x"]  # kept, alone


def _model_row(model, *, ratio: float, batch: int = 16) -> dict[str, Any]:
    graph = mlp_graph(batch=batch, width=512, name=f"probe{batch}")
    predicted = Predictor(model).predict(graph, ["T4"], corrected=False)[0]["step_seconds"]
    return {"precision": "fp32", "mode": "train", "optimizer": "adam", "time_s": ratio * predicted,
            "graph": graph.to_dict()}  # fmt: skip


OP_ROW = {"precision": "bf16", "mode": "fwd", "op_class": "gemm", "flops": 2e9, "bytes": 6e6, "out_numel": 1e6,
          "lead_dim": 1024, "dtype_bytes": 2, "time_s": 1e-4}  # fmt: skip


def test_model_rows_alone_on_a_fresh_db_are_stored_and_answered(tiny_model, tmp_path) -> None:
    """The probe: model rows only, on a fresh DB, were stored and then answered 500 (the op table did not exist yet
    when the rows past the cap were pruned)."""
    answers = _post_all(token_app(tiny_model, tmp_path), [
        ("/v1/collected", {"gpu": "T4", "model_rows": [_model_row(tiny_model, ratio=1.5)]}),
        ("/v1/collected", {"gpu": "T4", "op_rows": [OP_ROW]}),
    ])  # fmt: skip
    (status, body), (ops_status, ops_body) = answers
    assert status == 201 and (body["model_rows"], body["op_rows"]) == (1, 0), body
    assert body["calibration"]["rows"] == 1
    assert ops_status == 201 and ops_body["op_rows"] == 1
    db_ = BenchmarkDB(tmp_path / "db.sqlite")
    assert len(db_.read("model_samples")) == 1 and len(db_.read("op_samples")) == 1


def test_a_collected_post_that_fails_stores_nothing(tiny_model, tmp_path, monkeypatch) -> None:
    """All or nothing: a failure inside the write (here, pruning) leaves no row and no new graph file behind."""
    def failing(*args: Any, **kwargs: Any) -> int:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(db, "_keep_newest", failing)
    body = {"gpu": "T4", "model_rows": [_model_row(tiny_model, ratio=1.5)], "op_rows": [OP_ROW]}
    [(status, _)] = _post_all(token_app(tiny_model, tmp_path), [("/v1/collected", body)])
    assert status == 500
    db_ = BenchmarkDB(tmp_path / "db.sqlite")
    assert db_.read("model_samples").empty and db_.read("op_samples").empty
    assert not list((tmp_path / "collected_graphs").glob("*"))


def test_a_row_the_model_cannot_price_is_refused_before_anything_is_stored(tiny_model, tmp_path, monkeypatch) -> None:
    good, bad = _model_row(tiny_model, ratio=1.0), _model_row(tiny_model, ratio=1.0, batch=32)
    original = Predictor.predict

    def nan_for_batch_32(self, graph, gpus, options=None, **kw):
        answer = original(self, graph, gpus, options, **kw) if options is not None else original(self, graph, gpus)
        return [{**a, "step_seconds": float("nan")} for a in answer] if graph.batch_size == 32 else answer

    monkeypatch.setattr(Predictor, "predict", nan_for_batch_32)
    body = {"gpu": "T4", "model_rows": [good, bad], "op_rows": [OP_ROW]}
    [(status, answer)] = _post_all(token_app(tiny_model, tmp_path), [("/v1/collected", body)])
    assert status == 400 and "$.model_rows[1]" in answer["error"], answer
    db_ = BenchmarkDB(tmp_path / "db.sqlite")
    assert db_.read("model_samples").empty and db_.read("op_samples").empty


def test_one_implausible_collected_row_cannot_move_the_calibration(tiny_model, tmp_path) -> None:
    """The probe's jump: one row (posted by the request that answered 500) measured far off the model, then an
    accepted post, and the T4 calibration sat at its x4 cap. A row further than the quarantine ratio (5x) from the
    model says more about the measurement than about the GPU: it is stored, counted, and not used."""
    job = mlp_graph(batch=64, width=1024).to_dict()

    async def scenario(client):
        async def t4():
            r = await client.post("/v1/predict", json={"graph": job, "gpus": ["T4"]})
            return (await r.json())["predictions"][0]["step_seconds"]

        before = await t4()
        r1 = await client.post("/v1/collected", json={"gpu": "T4", "model_rows": [_model_row(tiny_model, ratio=1e4)]},
                               headers=AUTH)  # fmt: skip
        r2 = await client.post("/v1/collected", json={"gpu": "T4", "op_rows": [OP_ROW]}, headers=AUTH)
        return before, (r1.status, await r1.json()), (r2.status, await r2.json()), await t4()

    before, (s1, b1), (s2, b2), after = serve(token_app(tiny_model, tmp_path), scenario)
    assert (s1, s2) == (201, 201)
    for body in (b1, b2):
        cal = body["calibration"]
        assert (cal["factor"], cal["rows"], cal["implausible_rows"]) == (1.0, 0, 1), cal
    assert after == pytest.approx(before)  # not 4x
    assert len(BenchmarkDB(tmp_path / "db.sqlite").read("model_samples")) == 1  # stored, as a quarantined sample is


def test_calibration_leaves_out_implausible_rows_and_keeps_the_rest() -> None:
    from offpeak_predictor.calibration import calibrate

    ratios = [0.4, 0.45, 0.5, 9.0]  # log ratios: three about 1.6x, one 8,000x
    cal = calibrate({"T4": ratios})["T4"]
    assert (cal.rows, cal.implausible_rows) == (3, 1) and cal.median_log_ratio == pytest.approx(0.45)
    alone = calibrate({"T4": [9.0]})["T4"]
    assert (alone.log_factor, alone.rows, alone.implausible_rows) == (0.0, 0, 1)


def test_collected_graph_files_are_written_whole(tiny_model, tmp_path) -> None:
    body = {"gpu": "T4", "model_rows": [_model_row(tiny_model, ratio=1.0)]}
    [(status, _)] = _post_all(token_app(tiny_model, tmp_path), [("/v1/collected", body)])
    files = list((tmp_path / "collected_graphs").iterdir())
    assert status == 201 and [f.suffixes for f in files] == [[".json", ".gz"]]  # no temporary file left
    assert collected.load_graph(files[0]).model_name == "probe16"
