"""Property-based tests of the predictor's graph schema and HTTP API (issue #16): any graph is accepted with finite,
non-negative numbers and known enums, or refused with a GraphError naming its field; any body sent to
`/v1/predict` or `/v1/samples` gets a 2xx or a 4xx with a reason in strict JSON, never a 5xx or a hang; a write
without the token changes nothing."""

from __future__ import annotations

import http.client
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from offpeak_graph.schema import GraphError, ModelGraph, validate_graph
from offpeak_predictor.model import RuntimeModel
from support.loopback import served

from .conftest import AUTH, mlp_graph, token_app

SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=4), max_leaves=12)
BASE_GRAPH = mlp_graph(batch=8, width=16, layers=1).to_dict()
OP_COLUMNS = sorted(BASE_GRAPH["ops"])
DEEP = "[" * 100_000 + "]" * 100_000  # deeper than the JSON decoder's recursion limit


@st.composite
def graphs(draw: st.DrawFn, most_changes: int = 3) -> Any:
    """A valid graph with up to `most_changes` of its fields (top level, a whole op column, or one op's value)
    replaced by arbitrary JSON or dropped, or (with changes allowed) arbitrary JSON altogether."""
    if most_changes and draw(st.integers(0, 9)) == 0:
        return draw(JSON)
    graph = json.loads(json.dumps(BASE_GRAPH))
    for _ in range(draw(st.integers(0, most_changes))):
        where = draw(st.sampled_from(["top", "column", "value", "drop"]))
        if where == "top":
            graph[draw(st.sampled_from(sorted(BASE_GRAPH)))] = draw(JSON)
        elif where == "drop":
            graph.pop(draw(st.sampled_from(sorted(BASE_GRAPH))), None)
        elif isinstance(graph.get("ops"), dict):
            column = draw(st.sampled_from(OP_COLUMNS))
            if where == "column" or not isinstance(graph["ops"].get(column), list):
                graph["ops"][column] = draw(JSON)
            elif graph["ops"][column]:
                i = draw(st.integers(0, len(graph["ops"][column]) - 1))
                graph["ops"][column][i] = draw(JSON | st.integers(-(10**400), 10**400)
                                               | st.sampled_from([-1, 0, 1e308, -0.0, 2**63]))
    return graph


def check_graph(graph: ModelGraph) -> None:
    """What a graph that passed `validate_graph` may be relied on for."""
    assert graph.ops and isinstance(graph.batch_size, int) and graph.batch_size > 0
    for op in graph.ops:
        for value in (op.flops, op.bytes_read, op.bytes_written, op.params):
            assert math.isfinite(value) and value >= 0
        for shape in (*op.input_shapes, *op.output_shapes):
            assert all(isinstance(d, int) and d >= 0 for d in shape)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
@example({**BASE_GRAPH, "ops": {**BASE_GRAPH["ops"], "flops": [0.0, float("nan"), 1.0]}})
@example({**BASE_GRAPH, "batch_size": 10**400})
def test_a_graph_is_accepted_sound_or_refused_naming_its_field(raw: Any) -> None:
    if not isinstance(raw, dict):
        with pytest.raises((GraphError, ValueError, KeyError, TypeError, AttributeError)):
            validate_graph(ModelGraph.from_dict(raw))
        return
    try:
        graph = validate_graph(ModelGraph.from_dict(raw))
    except GraphError as e:
        assert str(e)
    except (ValueError, KeyError, TypeError, OverflowError):
        pass  # the server's `_parse_graph` turns these into a 400 naming the error (checked through HTTP below)
    else:
        check_graph(graph)


def strict_json(raw: bytes) -> Any:
    """JSON as a strict client reads it: NaN and Infinity are not JSON."""
    def refuse(constant: str) -> Any:
        raise AssertionError(f"{constant} in a reply")

    return json.loads(raw, parse_constant=refuse)


@pytest.fixture(scope="module")
def server(tiny_model: RuntimeModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """The real predictor app with a token and a sample DB on 127.0.0.1 in a background thread: (port, DB path)."""
    tmp = tmp_path_factory.mktemp("fuzz")
    with served(token_app(tiny_model, tmp).build()) as port:
        yield port, tmp / "db.sqlite"


def post(port: int, path: str, raw: bytes, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)  # a hang fails the test
    try:
        conn.request("POST", path, body=raw, headers={"Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        return resp.status, strict_json(resp.read())
    finally:
        conn.close()


GPUS = st.lists(st.sampled_from(["T4", "A100-PCIE-40GB", "V100-PCIE-32GB"]), min_size=1, max_size=3, unique=True)
PREDICT_BODIES = st.one_of(
    st.fixed_dictionaries({"graph": graphs(most_changes=1), "gpus": GPUS}, optional={  # mostly answerable
        "steps": st.integers(0, 10**6), "mode": st.sampled_from(["train", "inference"]),
        "precision": st.sampled_from(["fp32", "bf16", "fp16", "tf32"]), "optimizer": st.sampled_from(["adam", "sgd"]),
        "num_gpus": st.integers(1, 16), "startup_seconds": st.floats(0, 1e4)}),
    st.fixed_dictionaries({"graph": graphs(), "gpus": st.lists(
        st.sampled_from(["T4", "A100-PCIE-40GB", "H100", "no-such-gpu", ""]), min_size=1, max_size=3) | JSON},
        optional={"steps": st.integers(-5, 10**6) | JSON,
                  "mode": st.sampled_from(["train", "inference", "bogus"]) | JSON,
                  "precision": st.sampled_from(["fp32", "bf16", "fp16", "tf32", "int3"]) | JSON,
                  "optimizer": st.sampled_from(["adam", "sgd", "magic"]) | JSON,
                  "num_gpus": st.integers(-2, 5000) | JSON,
                  "startup_seconds": SCALARS}),
    JSON,
)


def check_answer(status: int, reply: Any) -> None:
    assert 200 <= status < 500, (status, reply)
    if status >= 400:
        assert isinstance(reply, dict) and isinstance(reply.get("error"), str) and reply["error"], reply


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(body=PREDICT_BODIES)
@example(body={"graph": BASE_GRAPH, "gpus": ["T4"], "steps": 100})
def test_predict_answers_any_body_with_a_finite_prediction_or_a_4xx_with_a_reason(server: tuple[int, Path],
                                                                                  body: Any) -> None:
    status, reply = post(server[0], "/v1/predict", json.dumps(body).encode())
    event(f"HTTP {status}")
    check_answer(status, reply)
    if status == 200:
        assert reply["predictions"]
        for p in reply["predictions"]:
            assert 0 < p["step_seconds"] <= p["step_seconds_p90"] and math.isfinite(p["step_seconds_p90"])
            if "job_seconds_p90" in p:
                assert 0 <= p["job_seconds"] <= p["job_seconds_p90"] and math.isfinite(p["job_seconds_p90"])


@pytest.mark.parametrize("raw", [DEEP.encode(), b"\xff\xfe", b"", b"{", b"[]", b"NaN", b'{"graph": ' + DEEP.encode()
                                 + b"}"])
@pytest.mark.parametrize("path", ["/v1/predict", "/v1/samples"])
def test_malformed_bytes_get_a_400_with_a_reason(server: tuple[int, Path], raw: bytes, path: str) -> None:
    status, reply = post(server[0], path, raw, AUTH)
    assert status == 400 and reply["error"], reply


SAMPLE_BODIES = st.one_of(
    st.fixed_dictionaries({"graph": graphs(most_changes=1), "gpu": st.sampled_from(["T4", "A100-PCIE-40GB"]),
                           "job": st.just("ml/fuzz"), "job_seconds": st.floats(0.01, 1e6)},  # mostly storable
                          optional={"steps": st.integers(1, 10**6), "mode": st.sampled_from(["train", "inference"])}),
    st.fixed_dictionaries({}, optional={
        "graph": graphs(),
        "graph_hash": st.text(max_size=20) | JSON,
        "gpu": st.sampled_from(["T4", "A100-PCIE-40GB", "nope"]) | JSON,
        "job": st.text(max_size=20) | JSON,
        "job_seconds": st.floats(allow_nan=True, allow_infinity=True) | JSON,
        "step_seconds": st.floats(allow_nan=True, allow_infinity=True) | JSON,
        "steps": st.integers(-5, 10**6) | JSON,
        "mode": st.sampled_from(["train", "inference", "bogus"]) | JSON,
    }),
    JSON,
)


def stored_rows(db: Path) -> int:
    import sqlite3

    with sqlite3.connect(db) as conn:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return sum(conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in tables)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(body=SAMPLE_BODIES, token=st.sampled_from([None, "Bearer wrong", "Basic abc", AUTH["Authorization"],
                                                  AUTH["Authorization"]]))
@example(body={"graph": BASE_GRAPH, "gpu": "T4", "job": "ml/fuzz", "job_seconds": 12.5}, token=None)
def test_samples_answers_any_body_and_stores_nothing_without_the_token(server: tuple[int, Path], body: Any,
                                                                       token: str | None) -> None:
    port, db = server
    before = stored_rows(db)
    status, reply = post(port, "/v1/samples", json.dumps(body).encode(),
                         {"Authorization": token} if token is not None else None)
    event(f"HTTP {status}")
    check_answer(status, reply)
    if token != AUTH["Authorization"]:
        assert status in (401, 403) and stored_rows(db) == before
