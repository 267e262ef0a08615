"""`parse_request`: the general path's arguments or error for any body, with pods and name lists reused, bounded."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offpeak_extender.recent import RecentRequests, parse_request
from offpeak_extender.wire import PREDICTED_ANNOTATION, NotJSON, WireError, loads, parse_extender_args

from .test_wire_fuzz import ARGS, DEEP, JSON


def general(raw: str | bytes) -> tuple[str, str]:
    """What the general path makes of `raw`: its arguments' repr (NaN == NaN), or its error's type and text."""
    try:
        return "args", repr(parse_extender_args(loads(raw)))
    except WireError as e:
        return type(e).__name__, str(e)


def fast(raw: str | bytes, recent: RecentRequests) -> tuple[str, str]:
    try:
        return "args", repr(parse_request(raw, recent))
    except WireError as e:
        return type(e).__name__, str(e)


SHARED = RecentRequests(lists=3, pods=4)  # small, so examples also meet lists and pods that were dropped


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=ARGS | JSON, indent=st.sampled_from([None, 1]))
def test_any_body_gets_the_general_paths_arguments_or_error_first_time_and_again(body: Any, indent: int | None
                                                                                  ) -> None:
    raw = json.dumps(body, indent=indent).encode()
    want = general(raw)
    assert fast(raw, SHARED) == want
    assert fast(raw, SHARED) == want  # the pod and the names now from what was kept


@pytest.mark.parametrize("raw", [
    DEEP, "", "{", "[1]", "null", '{"Pod": null, "NodeNames": ["a"]}', '{"NodeNames": ["a"]}',
    '{"Pod": {}, "NodeNames": ["a"], "NodeNames": ["b", "c"]}', '{"Pod": {}, "Pod": null, "NodeNames": ["a"]}',
    '{"Pod": {}, "NodeNames": [NaN]}', '{"Pod": {"a": NaN}, "NodeNames": ["a"]}', '{"Pod": {}, "NodeNames": "a"}',
    '{"Pod": {}, "NodeNames": ["a", 1]}', '{"Pod": {}, "NodeNames": ["\\ud800"]}', '{"Pod": {}, "NodeNames": null,'
    ' "Nodes": {"items": [{"metadata": {"name": "a"}}]}}', '{"Pod": {}, "NodeNames": ["a\\u0000b", "c"]}',
    '{"Pod": {}, "NodeNames": []}', '{"Pod": {"spec": {"containers": "abc"}}, "NodeNames": ["a"]}',
    '{"Pod": {"metadata": {"annotations": {"offpeak.io/predicted-job-seconds": "{}"}}}, "NodeNames": ["a"]}',
    b"\xef\xbb\xbf{}", '{"Pod": {}, "NodeNames": ["a"]} x',
])
def test_edge_bodies_get_the_general_paths_answer(raw: str | bytes) -> None:
    recent = RecentRequests()
    want = general(raw)
    assert fast(raw, recent) == want
    assert fast(raw, recent) == want


def test_a_body_that_is_not_json_is_not_json_either_way() -> None:
    with pytest.raises(NotJSON):
        parse_request(b'{"Pod": {}, "NodeNames": ["a"', RecentRequests())
    with pytest.raises(WireError) as e:
        parse_request(b'{"NodeNames": ["a"]}', RecentRequests())
    assert not isinstance(e.value, NotJSON) and "Pod is missing" in str(e.value)


def body(names: list[str], pod_name: str = "train-0", p50: float = 60.0) -> bytes:
    pod = {"metadata": {"name": pod_name, "annotations": {PREDICTED_ANNOTATION: json.dumps({"T4": {"p50": p50,
                                                                                               "p90": 2 * p50}})}},
           "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}]}}
    return json.dumps({"Pod": pod, "NodeNames": names}).encode()


def test_a_name_list_seen_before_comes_back_as_the_same_tuple_and_key_until_it_is_dropped() -> None:
    recent = RecentRequests(lists=2)
    first = parse_request(body(["a", "b"]), recent)
    again = parse_request(body(["a", "b"], pod_name="other"), recent)  # another pod, the same list
    assert again.node_names is first.node_names and again.names_key is first.names_key
    parse_request(body(["c"]), recent)
    parse_request(body(["a", "b"]), recent)  # used again: the most recent now
    parse_request(body(["d"]), recent)  # drops ["c"], the least recently used, not ["a", "b"]
    assert parse_request(body(["a", "b"]), recent).node_names is first.node_names
    assert len(recent._lists) == 2
    c = parse_request(body(["c"]), recent)
    assert c.node_names == ("c",) and parse_request(body(["c"]), recent).node_names is c.node_names


def test_a_list_longer_than_the_bytes_kept_is_parsed_each_time() -> None:
    recent = RecentRequests(list_bytes=100)
    names = [f"node-{i:03d}" for i in range(20)]  # ~250 bytes of JSON
    first = parse_request(body(names), recent)
    second = parse_request(body(names), recent)
    assert first.node_names == second.node_names and first.node_names is not second.node_names
    assert recent._lists == []


def test_each_caller_gets_its_own_predictions_and_pods_are_bounded() -> None:
    recent = RecentRequests(pods=2)
    first = parse_request(body(["a"]), recent)
    assert first.pod.predicted is not None
    first.pod.predicted.clear()  # type: ignore[attr-defined]  # a caller changing its dict
    again = parse_request(body(["a"]), recent)
    assert set(again.pod.predicted or {}) == {"T4"} and again.pod.predicted["T4"].p50 == 60.0  # type: ignore[index]
    for p50 in (1.0, 2.0, 3.0):
        parse_request(body(["a"], p50=p50), recent)
    assert len(recent._pods) == 2


def test_a_pod_refused_is_not_kept_and_refused_again() -> None:
    recent = RecentRequests()
    raw = b'{"Pod": {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "x"}}}]}}, "NodeNames": []}'
    for _ in range(2):
        with pytest.raises(WireError, match="quantity"):
            parse_request(raw, recent)
    assert recent._pods == {}
