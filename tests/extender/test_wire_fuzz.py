"""Property-based tests of the extender's wire parsing: any JSON body is answered (2xx, or 4xx with a reason),
never with a 5xx, an unexpected exception or a hang."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from offpeak_extender.metrics import ExtenderMetrics
from offpeak_extender.server import ServerSettings, make_app
from offpeak_extender.service import DecisionSettings, ExtenderService
from offpeak_extender.wire import (
    CHECKPOINTING_ANNOTATION,
    GPU_RESOURCE,
    MAX_EXTENDER_PRIORITY,
    PREDICTED_ANNOTATION,
    WireError,
    loads,
    parse_extender_args,
)
from support.loopback import served

from .test_http import NOW, Clock, make_store

SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=4), max_leaves=12)
NODE_NAMES = st.sampled_from(["short", "long", "t4", "new-node", "", "é"])
QUANTITY = (st.integers(-3, 10) | st.sampled_from(["2", "1k", "-1", "1e400", "nan", "inf", "0.5", "1Gi", "x", "", "4m"])
            | JSON)
PREDICTION_TEXT = st.one_of(
    st.text(max_size=20),
    # integers of thousands of digits (which Python's JSON reader refuses) where a number or any value goes
    st.builds(lambda key, digits, sign: json.dumps({"T4": {key: 7}}).replace("7", sign + "9" * digits),
              st.sampled_from(["p50", "p90", "peak_memory_gib", "other"]), st.integers(4290, 4400),
              st.sampled_from(["", "-"])),
    st.dictionaries(st.sampled_from(["A100-SXM4-40GB", "T4", "a100", ""]),
                    st.fixed_dictionaries({}, optional={"p50": SCALARS, "p90": SCALARS}) | JSON,
                    max_size=3).map(json.dumps),
)
CONTAINER = st.fixed_dictionaries({}, optional={"resources": st.fixed_dictionaries({}, optional={
    "requests": st.fixed_dictionaries({}, optional={GPU_RESOURCE: QUANTITY}) | JSON,
    "limits": st.fixed_dictionaries({}, optional={GPU_RESOURCE: QUANTITY}) | JSON,
}) | JSON}) | JSON
POD = st.fixed_dictionaries({}, optional={
    "metadata": st.fixed_dictionaries({}, optional={
        "name": SCALARS, "namespace": SCALARS, "uid": SCALARS,
        "annotations": st.fixed_dictionaries({}, optional={PREDICTED_ANNOTATION: PREDICTION_TEXT | JSON,
                                                            CHECKPOINTING_ANNOTATION: SCALARS}) | JSON,
    }) | JSON,
    "spec": st.fixed_dictionaries({}, optional={"containers": st.lists(CONTAINER, max_size=3) | JSON,
                                                "initContainers": st.lists(CONTAINER, max_size=2) | JSON}) | JSON,
}) | JSON
NODE = st.fixed_dictionaries({}, optional={"metadata": st.fixed_dictionaries({}, optional={"name": NODE_NAMES | JSON})
                                           | JSON,
                                           "status": JSON}) | JSON
ARGS = st.fixed_dictionaries({}, optional={
    "Pod": POD,
    "NodeNames": st.lists(NODE_NAMES, max_size=6) | st.lists(NODE_NAMES | SCALARS, max_size=4) | JSON,
    "Nodes": st.fixed_dictionaries({}, optional={"items": st.lists(NODE, max_size=4) | JSON}) | JSON,
})
BODIES = ARGS | JSON
DEEP = "[" * 100_000 + "]" * 100_000  # deeper than the JSON decoder's recursion limit


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ARGS | JSON)
@example({"Pod": {"metadata": {"annotations": {PREDICTED_ANNOTATION: '{"T4": {"p50": 1%s}}' % ("0" * 4400)}}},
          "NodeNames": ["t4"]})  # a ValueError out of json.loads, which failed the whole call
def test_parse_extender_args_returns_or_raises_wire_error(body: Any) -> None:
    try:
        args = parse_extender_args(body)
    except WireError as e:
        assert str(e)  # a reason for the scheduler's log
    else:
        assert all(type(n) is str for n in args.node_names) and args.pod.gpus >= 0


def json_answer(raw: str | bytes) -> tuple[str, Any]:
    """What `json.loads` made of `raw` before msgspec decoded first: its value, or the WireError it was turned into."""
    try:
        return "value", json.loads(raw)
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return "error", type(e).__name__


def loads_answer(raw: str | bytes) -> tuple[str, Any]:
    try:
        return "value", loads(raw)
    except WireError as e:
        return "error", str(e)


@settings(max_examples=400, deadline=None)
@given(body=JSON | ARGS, indent=st.sampled_from([None, 1]))
def test_loads_decodes_as_json_did(body: Any, indent: int | None) -> None:
    text = json.dumps(body, indent=indent)  # NaN, Infinity and integers past 64 bits included
    assert repr(loads(text)) == repr(json.loads(text))  # repr: NaN == NaN, 1 != 1.0, -0.0 != 0.0
    assert repr(loads(text.encode())) == repr(json.loads(text.encode()))


@pytest.mark.parametrize("raw", [
    "NaN", "[Infinity, -Infinity]", "1e400", "123456789012345678901234567890", "-9223372036854775809",
    '"\\ud800"', '{"a": 1, "a": 2}', "-0.0", "[0.1, 1e-320, 2.5e+300]", "\ufeff[1]", b"\xef\xbb\xbf[1]",
    "[1]".encode("utf-16"), "[1]".encode("utf-32-le"), b"\xff\xfe", b"\xc3", "", "{", "[1,]", "01", '"a\x01"',
    DEEP,
])
def test_loads_answers_what_json_took_or_refused_as_before(raw: str | bytes) -> None:
    kind, want = json_answer(raw)
    got_kind, got = loads_answer(raw)
    assert got_kind == kind
    if kind == "value":
        assert repr(got) == repr(want)
    else:
        assert got.startswith("not JSON")


@pytest.fixture(scope="module")
def service() -> ExtenderService:
    return ExtenderService(store=make_store(Clock(NOW)), metrics=ExtenderMetrics.create(CollectorRegistry()),
                           settings=DecisionSettings())


def check_reply(verb: str, sent: Any, reply: Any) -> None:
    """Filter: the ExtenderFilterResult keys, passed names a subset of those sent. Prioritize: scores 0..10."""
    if verb == "filter":
        assert set(reply) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
        if reply["NodeNames"] is not None and isinstance(sent, dict) and isinstance(sent.get("NodeNames"), list):
            assert set(reply["NodeNames"]) <= set(sent["NodeNames"])
    else:
        assert isinstance(reply, list)
        assert all(set(p) == {"Host", "Score"} and 0 <= p["Score"] <= MAX_EXTENDER_PRIORITY for p in reply)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(body=BODIES, verb=st.sampled_from(["filter", "prioritize"]))
def test_service_answers_any_json_with_a_well_formed_reply(service: ExtenderService, body: Any, verb: str) -> None:
    raw = json.dumps(body).encode()  # NaN and Infinity included, as Python's decoder accepts them
    check_reply(verb, body, json.loads(service.answer(verb, raw)))


@pytest.mark.parametrize("raw", [DEEP.encode(), b"\xff\xfe", b"", b"{", b'{"Pod": {}, "NodeNames": ["a"] ',
                                 b'{"Pod": {"spec": {"containers": "abc"}}, "NodeNames": ["a"]}'])
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_service_answers_malformed_bytes(service: ExtenderService, raw: bytes, verb: str) -> None:
    reply = json.loads(service.answer(verb, raw))
    check_reply(verb, None, reply)
    if verb == "filter":
        assert reply["Error"].startswith("offpeak extender: ")


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    """The real aiohttp app on 127.0.0.1 in a background thread; yields its port."""
    registry = CollectorRegistry()
    app = make_app(service=ExtenderService(store=make_store(Clock(NOW)), metrics=ExtenderMetrics.create(registry),
                                           settings=DecisionSettings()),
                   registry=registry, settings=ServerSettings(max_body_bytes=256 * 1024))
    with served(app) as port:
        yield port


def post(port: int, path: str, raw: bytes) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)  # a hang fails the test
    try:
        conn.request("POST", path, body=raw, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(body=BODIES, verb=st.sampled_from(["filter", "prioritize"]))
@example(body={"Pod": {}, "NodeNames": ["x" * 300_000]}, verb="filter")  # over this server's 256 KiB limit
def test_http_answers_any_json_with_2xx_or_4xx_and_a_reason(server: int, body: Any, verb: str) -> None:
    status, raw = post(server, f"/{verb}", json.dumps(body).encode())
    assert 200 <= status < 500, (status, raw[:200])
    reply = json.loads(raw)
    if status >= 400:
        assert reply["Error"]
    else:
        check_reply(verb, body, reply)


def test_http_answers_too_deep_json(server: int) -> None:
    status, raw = post(server, "/filter", DEEP.encode())
    assert status == 200 and "not JSON" in json.loads(raw)["Error"]
