"""Wire-format parsing and serialising with realistic ExtenderArgs JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest
from .k8s_objects import gpu_node, gpu_pod
from offpeak_core.model import Prediction

from offpeak_extender.wire import (
    NamesFilterReply,
    WireError,
    encode_filter_result,
    encode_priorities,
    encode_scores,
    error_filter_result,
    filter_result,
    json_strings,
    parse_extender_args,
    parse_predictions,
    pod_gpus,
    priority_list,
)

PRED = {"A100-SXM4-40GB": {"p50": 3000, "p90": 3600}, "T4": {"p50": 9000, "p90": 11000}}


def test_parse_node_names_args() -> None:
    body = json.loads(json.dumps({"Pod": gpu_pod("resnet-0", gpus=2, predicted=PRED, checkpointing=True),
                                  "Nodes": None, "NodeNames": ["a", "b"]}))
    args = parse_extender_args(body)
    assert args.node_names == ("a", "b") and args.node_objects is None and args.managed
    assert args.pod.gpus == 2 and args.pod.checkpointing and args.pod.namespace == "ml"
    assert args.pod.predicted is not None and args.pod.predicted["T4"].p90 == 11000


def test_parse_full_nodes_and_reply_with_subset_objects() -> None:
    body = {"Pod": gpu_pod("x-0", predicted=PRED), "Nodes": {"items": [gpu_node("a"), gpu_node("b")]}}
    args = parse_extender_args(body)
    assert args.node_names == ("a", "b")
    res = filter_result(args=args, passed=["b"], failed={"a": "window ends within 1m, job needs ~1h"})
    assert res["NodeNames"] is None
    assert [n["metadata"]["name"] for n in res["Nodes"]["items"]] == ["b"]  # type: ignore[index]
    assert res["FailedNodes"] == {"a": "window ends within 1m, job needs ~1h"}
    assert set(res) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def test_unannotated_pod_is_unmanaged() -> None:
    args = parse_extender_args({"Pod": gpu_pod("web-0", workload="online"), "NodeNames": ["a"]})
    assert not args.managed and args.pod.predicted is None


def test_bad_prediction_annotation_is_runtime_blind_with_error() -> None:
    pod = gpu_pod("x-0")
    pod["metadata"]["annotations"]["offpeak.io/predicted-job-seconds"] = "{not json"
    args = parse_extender_args({"Pod": pod, "NodeNames": ["a"]})
    assert args.managed and args.pod.predicted is None and "not JSON" in (args.prediction_error or "")


@pytest.mark.parametrize("text", ["[]", "{}", '{"T4": {"p90": 3}}', '{"T4": {"p50": "fast"}}'])
def test_parse_predictions_rejects_bad_shapes(text: str) -> None:
    with pytest.raises(WireError):
        parse_predictions(text)


def test_p90_below_p50_is_raised_to_p50() -> None:
    assert parse_predictions('{"T4": {"p50": 10, "p90": 5}}')["T4"].p90 == 10


@pytest.mark.parametrize("body", [None, [], {"NodeNames": ["a"]}, {"Pod": {}, "NodeNames": "a"}])
def test_bad_args(body: object) -> None:
    with pytest.raises(WireError):
        parse_extender_args(body)


def test_pod_gpus_requests_limits_and_init() -> None:
    pod = gpu_pod("x", gpus=2)
    pod["spec"]["containers"].append({"name": "side", "resources": {"requests": {"nvidia.com/gpu": 1}}})
    pod["spec"]["initContainers"] = [{"name": "init", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]
    assert pod_gpus(pod) == 4
    pod["spec"]["initContainers"] = []
    assert pod_gpus(pod) == 3


def test_priority_list_order_and_clamp() -> None:
    assert priority_list({"a": 12, "b": -1}, ["b", "a", "c"]) == [
        {"Host": "b", "Score": 0}, {"Host": "a", "Score": 10}, {"Host": "c", "Score": 0}]


def test_encode_priorities_matches_json_of_priority_list() -> None:
    scores = {"a": 12, "b": -1, 'q"uote': 3, "é": 5}
    names = ["b", "a", "c", 'q"uote', "é"]
    assert json.loads(encode_priorities(scores, names)) == priority_list(scores, names)
    assert encode_priorities({}, []) == b"[]"


def test_parse_predictions_reads_the_memory_verdict() -> None:
    text = json.dumps({"L4": {"p50": 10, "p90": 12, "fits_memory": False, "peak_memory_gib": 31.2,
                              "gpu_memory_gib": 22.4}, "T4": {"p50": 20}})
    got = parse_predictions(text)
    assert (got["L4"].fits_memory, got["L4"].peak_memory_gib, got["L4"].gpu_memory_gib) == (False, 31.2, 22.4)
    assert got["T4"].fits_memory is None and got["T4"].peak_memory_gib is None
    for bad in ({"p50": 1, "fits_memory": "no"}, {"p50": 1, "fits_memory": True, "peak_memory_gib": -1}):
        with pytest.raises(WireError, match="fits_memory"):
            parse_predictions(json.dumps({"L4": bad}))


NAMES = ["a", 'q"uote', "é", "back\\slash", "tab\tnode", "日本", "gpu-node-00001"]


@pytest.mark.parametrize("seed", range(10))
def test_encode_scores_gives_the_bytes_of_encode_priorities(seed: int) -> None:
    rng = np.random.default_rng(seed)
    names = [str(n) for n in rng.choice(NAMES, size=int(rng.integers(0, 30)))]
    scores = rng.integers(-3, 14, size=len(names))
    want = encode_priorities(dict(zip(names, scores.tolist())), names)  # duplicates: the last score, as in a dict
    if len(set(names)) == len(names):
        assert encode_scores(json_strings(names), scores) == want
    distinct = list(dict.fromkeys(names))
    dedup = np.array([dict(zip(names, scores.tolist()))[n] for n in distinct], dtype=np.int64)
    got = encode_scores(json_strings(distinct), dedup)
    assert got == encode_priorities(dict(zip(distinct, dedup.tolist())), distinct)
    assert json.loads(got) == priority_list(dict(zip(distinct, dedup.tolist())), distinct)
    with pytest.raises(ValueError):
        encode_scores(json_strings(names), np.zeros(len(names) + 1, dtype=np.int64))


@pytest.mark.parametrize("seed", range(10))
def test_encode_filter_result_gives_the_bytes_of_json_dumps(seed: int) -> None:
    rng = np.random.default_rng(seed)
    reasons = ["needs 2 GPU(s), 0 of 8 free now", 'a "quoted" reason', "é and 日本", "window ends within 5m"]
    names = [f"{rng.choice(NAMES)}-{i}" for i in range(int(rng.integers(0, 40)))]
    failed = {n: str(rng.choice(reasons)) for n in names if rng.random() < 0.6}
    passed = [n for n in names if n not in failed]
    args = parse_extender_args({"Pod": gpu_pod("x-0"), "NodeNames": names})
    full = parse_extender_args({"Pod": gpu_pod("x-0"), "Nodes": {"items": [gpu_node(n) for n in names]}})
    for result in (filter_result(args=args, passed=passed, failed=failed),
                   filter_result(args=full, passed=passed, failed=failed, error="e"),
                   error_filter_result('bad "request"'), {"FailedNodes": {"a": 1, "b": None}}):
        want = json.dumps(result, separators=(",", ":")).encode()
        assert encode_filter_result(result) == want  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(10))
def test_a_names_reply_in_columns_is_the_filter_result_and_its_bytes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    reasons = ["needs 2 GPU(s), 0 of 8 free now", 'a "quoted" reason', "é and 日本", "window ends within 5m"]
    names = np.array([f"{rng.choice(NAMES)}-{i}" for i in range(int(rng.integers(0, 40)))], dtype=object)
    fits = rng.random(len(names)) < 0.4
    failing = np.flatnonzero(~fits)
    used = reasons[:int(rng.integers(1, len(reasons) + 1))]
    reply = NamesFilterReply(names=names, json_names=np.array(json_strings(names), dtype=object), fits=fits,
                             failing=failing, reason_of=rng.integers(0, len(used), failing.size), reasons=used)
    args = parse_extender_args({"Pod": gpu_pod("x-0"), "NodeNames": names.tolist()})
    failed = {str(names[i]): used[k] for i, k in zip(failing, reply.reason_of)}
    want = filter_result(args=args, passed=names[fits].tolist(), failed=failed)
    assert reply.result() == want and list(reply.result()) == list(want)  # the same keys, in the same order
    assert list(reply.result()["FailedNodes"]) == list(want["FailedNodes"])
    assert reply.encode() == encode_filter_result(want)


def test_node_names_must_be_strings() -> None:
    for names in (["a", 1], ["a", None], [["a"]], [b"a"]):
        with pytest.raises(WireError, match="list of strings"):
            parse_extender_args({"Pod": gpu_pod("x-0"), "NodeNames": names})
    assert parse_extender_args({"Pod": gpu_pod("x-0"), "NodeNames": []}).node_names == ()


def test_predictions_kept_for_the_next_call_are_not_shared_with_the_caller() -> None:
    """Parsed annotations are kept (a pod's is sent to filter and prioritize alike): each caller still gets its own
    dict, an invalid one is refused every time, and an annotation too long to keep is parsed as well."""
    text = json.dumps({"T4": {"p50": 100, "p90": 200}})
    first = parse_predictions(text)
    first["T4"] = Prediction(1.0, 1.0)
    first["A100"] = Prediction(1.0, 1.0)
    assert parse_predictions(text) == {"T4": Prediction(100.0, 200.0)}
    for _ in range(2):
        with pytest.raises(WireError, match="finite p50/p90"):
            parse_predictions(json.dumps({"T4": {"p50": -1}}))
    long = {f"gpu-{i:04d}": {"p50": i, "p90": 2 * i} for i in range(400)}
    assert parse_predictions(json.dumps(long))["gpu-0399"] == Prediction(399.0, 798.0)
