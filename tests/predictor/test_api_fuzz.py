"""Property-based tests of the predictor's graph schema and HTTP API (issues #16, #48): any graph is accepted with
finite, non-negative numbers, known enums and typed op attributes (and then predicted without an error), or refused
with a GraphError naming its field; any body sent to `/v1/predict` or `/v1/samples`, integers of thousands of digits
and any Authorization header bytes included, gets a 2xx or a 4xx with a reason in strict JSON, never a 5xx or a
hang; a write without the token changes nothing."""

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

from offpeak_graph.schema import GraphError, ModelGraph, parse_graph
from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.predict import Predictor
from support.loopback import served

from .conftest import AUTH, mlp_graph, token_app

SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=4), max_leaves=12)
BASE_GRAPH = mlp_graph(batch=8, width=16, layers=1).to_dict()
OP_COLUMNS = sorted(BASE_GRAPH["ops"])
DEEP = "[" * 100_000 + "]" * 100_000  # deeper than the JSON decoder's recursion limit
NUMBERS = st.integers(-(10**400), 10**400) | st.sampled_from([-1, 0, 1, 0.5, 1e308, -0.0, 2**40, 2**63])
# op attributes: the keys the schema types (and one it does not), with values of any type and size
ATTRS = st.dictionaries(
    st.sampled_from(["p", "in_features", "out_features", "bias", "inplace", "kernel", "stride", "padding", "groups",
                     "eps", "normalized_shape", "heads", "causal", "dim", "m", "custom"]),
    NUMBERS | JSON | st.lists(NUMBERS, max_size=3), max_size=4)
OP_TYPES = st.sampled_from(["linear", "dropout", "conv2d", "layernorm", "sdpa", "softmax", "relu", "other"])


@st.composite
def graphs(draw: st.DrawFn, most_changes: int = 3) -> Any:
    """A valid graph with up to `most_changes` of its fields (top level, a whole op column, or one op's value)
    replaced by arbitrary JSON or dropped, or (with changes allowed) arbitrary JSON altogether."""
    if most_changes and draw(st.integers(0, 9)) == 0:
        return draw(JSON)
    graph = json.loads(json.dumps(BASE_GRAPH))
    for _ in range(draw(st.integers(0, most_changes))):
        where = draw(st.sampled_from(["top", "column", "value", "drop", "attrs", "attrs", "shape"]))
        if where == "top":
            graph[draw(st.sampled_from(sorted(BASE_GRAPH)))] = draw(JSON)
        elif where == "drop":
            graph.pop(draw(st.sampled_from(sorted(BASE_GRAPH))), None)
        elif where == "attrs" and isinstance(graph.get("ops"), dict) and isinstance(graph["ops"].get("attrs"), list) \
                and graph["ops"]["attrs"]:
            i = draw(st.integers(0, len(graph["ops"]["attrs"]) - 1))
            graph["ops"]["attrs"][i] = draw(ATTRS)
            if isinstance(graph["ops"].get("type"), list) and len(graph["ops"]["type"]) > i:
                graph["ops"]["type"][i] = draw(OP_TYPES)
        elif where == "shape" and isinstance(graph.get("ops"), dict) and graph["ops"].get("output_shapes") and \
                isinstance(graph["ops"]["output_shapes"], list):
            i = draw(st.integers(0, len(graph["ops"]["output_shapes"]) - 1))
            graph["ops"]["output_shapes"][i] = [draw(st.lists(st.integers(0, 2**41), min_size=1, max_size=70))]
        elif isinstance(graph.get("ops"), dict):
            column = draw(st.sampled_from(OP_COLUMNS))
            if where == "column" or not isinstance(graph["ops"].get(column), list):
                graph["ops"][column] = draw(JSON)
            elif graph["ops"][column]:
                i = draw(st.integers(0, len(graph["ops"][column]) - 1))
                graph["ops"][column][i] = draw(JSON | NUMBERS)
    return graph


def check_graph(graph: ModelGraph, predictor: Predictor) -> None:
    """What a graph that passed `parse_graph` may be relied on for: sound numbers, and a finite prediction."""
    assert graph.ops and isinstance(graph.batch_size, int) and graph.batch_size > 0
    for op in graph.ops:
        for value in (op.flops, op.bytes_read, op.bytes_written, op.params):
            assert math.isfinite(value) and value >= 0
        for shape in (*op.input_shapes, *op.output_shapes):
            assert all(isinstance(d, int) and d >= 0 for d in shape)
    (answer,) = predictor.predict(graph, ["T4"])  # no OverflowError, TypeError, ... on what passed
    assert math.isfinite(answer["step_seconds_p90"])


@pytest.fixture(scope="module")
def predictor(tiny_model: RuntimeModel) -> Predictor:
    return Predictor(tiny_model, cache_bytes=2**20)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(raw=graphs())
@example(raw={**BASE_GRAPH, "ops": {**BASE_GRAPH["ops"], "flops": [0.0, float("nan"), 1.0]}})
@example(raw={**BASE_GRAPH, "batch_size": 10**400})
@example(raw={**BASE_GRAPH, "ops": {**BASE_GRAPH["ops"], "output_shapes": [[[2**40] * 30]] * 3}})
@example(raw={**BASE_GRAPH, "ops": {**BASE_GRAPH["ops"], "attrs": [{}, {"in_features": 10**200}, {}]}})
@example(raw={**BASE_GRAPH, "ops": {**BASE_GRAPH["ops"], "type": ["input", "linear", "dropout"],
                                    "attrs": [{}, {}, {"p": [1]}]}})
def test_a_graph_is_accepted_sound_or_refused_naming_its_field(predictor: Predictor, raw: Any) -> None:
    try:
        graph = parse_graph(raw)
    except GraphError as e:  # the only refusal, whatever the JSON: a field and a reason
        assert e.field and e.reason
    else:
        check_graph(graph, predictor)


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


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(body=PREDICT_BODIES, path=st.sampled_from(["/v1/predict", "/v1/samples"]), digits=st.integers(4290, 4400),
       where=st.sampled_from(["top", "graph", "op"]))
def test_an_integer_of_thousands_of_digits_anywhere_is_a_4xx_with_a_reason(server: tuple[int, Path], body: Any,
                                                                           path: str, digits: int,
                                                                           where: str) -> None:  # fmt: skip
    """json.dumps cannot write such an integer (nor json.loads read it): it is put into the text in place of a
    marker, at the top level, in the graph's header or in an op column."""
    marker = 987654321012345
    if not isinstance(body, dict):
        body = {"value": body}
    graph = body.get("graph")
    if where == "graph" and isinstance(graph, dict):
        graph["batch_size"] = marker
    elif where == "op" and isinstance(graph, dict) and isinstance(graph.get("ops"), dict):
        graph["ops"]["flops"] = [marker]
    else:
        body["steps"] = marker
    text = json.dumps(body).replace(str(marker), "9" * digits)
    status, reply = post(server[0], path, text.encode(), AUTH)
    check_answer(status, reply)
    assert status >= 400 or digits < 4300  # past the limit it cannot have been read


# header values as bytes the HTTP parser hands to the app (tab, printable ASCII, and any byte from 0x80: other control
# bytes get aiohttp's own 400 before the app), written byte for byte (http.client writes latin-1)
HEADER_BYTES = st.lists(st.sampled_from([9, *range(0x20, 0x7F), *range(0x80, 0x100)]), max_size=40).map(bytes)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(raw=HEADER_BYTES, prefix=st.sampled_from([b"", b"Bearer ", b"bearer ", AUTH["Authorization"].encode()]))
@example(raw=b"\xff", prefix=b"Bearer ")
@example(raw=b"\xc3\x28", prefix=AUTH["Authorization"].encode())
def test_any_authorization_bytes_are_refused_with_a_reason_and_store_nothing(server: tuple[int, Path], raw: bytes,
                                                                           prefix: bytes) -> None:  # fmt: skip
    port, db = server
    value = prefix + raw
    before = stored_rows(db)
    status, reply = post(port, "/v1/samples", json.dumps({"graph_hash": "sha256:x", "gpu": "T4",
                                                          "job_seconds": 1}).encode(),
                         {"Authorization": value.decode("latin-1")})  # fmt: skip
    event(f"HTTP {status}")
    check_answer(status, reply)
    if value.decode("latin-1").strip() != AUTH["Authorization"]:  # (ASCII blanks around the token are ignored)
        assert status in (400, 401, 403) and stored_rows(db) == before, (status, reply)


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
