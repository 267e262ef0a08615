"""kube-scheduler extender wire format (k8s.io/kube-scheduler extender/v1): parse requests, build responses.

The wire types have no json tags, so their keys are Go field names (PascalCase); embedded Pod and Node objects
keep Kubernetes camelCase. Pure: dicts in, dataclasses/dicts out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from offpeak_core.model import PodRequest, Prediction

PREDICTED_ANNOTATION = "offpeak.io/predicted-job-seconds"
CHECKPOINTING_ANNOTATION = "offpeak.io/checkpointing"
BUSY_HOURS_ANNOTATION = "offpeak.io/busy-hours"
WORKLOAD_LABEL = "offpeak.io/workload"
TRAININGJOB_LABEL = "offpeak.io/trainingjob"
GPU_TYPE_LABEL = "offpeak.io/gpu-type"
GPU_RESOURCE = "nvidia.com/gpu"
MAX_EXTENDER_PRIORITY = 10


class ExtenderFilterResult(TypedDict, total=False):
    Nodes: dict[str, Any] | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class HostPriority(TypedDict):
    Host: str
    Score: int


class WireError(ValueError):
    """The request body is not a valid ExtenderArgs."""


@dataclass(frozen=True)
class ExtenderArgs:
    """A parsed ExtenderArgs: the pod, the candidate node names, and the Node objects when sent in full."""

    pod: PodRequest
    node_names: tuple[str, ...]
    node_objects: Mapping[str, Mapping[str, Any]] | None  # None when nodeCacheCapable (names only)
    managed: bool  # the pod carries a runtime prediction: offpeak decides; otherwise pass through
    prediction_error: str | None = None


def parse_quantity(value: Any) -> float:
    """Parse a Kubernetes quantity for countable resources (`2`, `"4"`, `"1k"`); GPUs are whole numbers."""
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    suffixes = {"k": 1e3, "M": 1e6, "G": 1e9, "m": 1e-3}
    try:
        if text and text[-1] in suffixes:
            return float(text[:-1]) * suffixes[text[-1]]
        return float(text)
    except ValueError as e:
        raise WireError(f"bad resource quantity {value!r}") from e


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """GPUs a pod asks for: sum over containers of max(request, limit), at least the largest init container."""
    spec = pod.get("spec") or {}

    def one(container: Mapping[str, Any]) -> float:
        res = container.get("resources") or {}
        req = (res.get("requests") or {}).get(GPU_RESOURCE, 0)
        lim = (res.get("limits") or {}).get(GPU_RESOURCE, 0)
        return max(parse_quantity(req), parse_quantity(lim))

    main = sum(one(c) for c in spec.get("containers") or [])
    init = max((one(c) for c in spec.get("initContainers") or []), default=0.0)
    return int(math.ceil(max(main, init)))


def parse_predictions(text: str) -> dict[str, Prediction]:
    """Parse the `offpeak.io/predicted-job-seconds` annotation: `{"<gpu-type>": {"p50": s, "p90": s}}`."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise WireError(f"{PREDICTED_ANNOTATION} is not JSON: {e.msg}") from e
    if not isinstance(raw, dict) or not raw:
        raise WireError(f'{PREDICTED_ANNOTATION} must be a non-empty object {{"<gpu-type>": {{"p50", "p90"}}}}')
    out: dict[str, Prediction] = {}
    for gpu_type, v in raw.items():
        try:
            p50 = float(v["p50"])
            p90 = float(v.get("p90", p50))
            out[str(gpu_type)] = Prediction(p50=p50, p90=max(p50, p90))
        except (TypeError, KeyError, ValueError) as e:
            raise WireError(f"{PREDICTED_ANNOTATION}[{gpu_type!r}] needs numeric p50/p90 seconds") from e
    return out


def parse_pod(pod: Mapping[str, Any]) -> tuple[PodRequest, bool, str | None]:
    """Pod object -> (PodRequest, managed, prediction error). Unannotated pods are unmanaged."""
    meta = pod.get("metadata") or {}
    ann = meta.get("annotations") or {}
    predicted: dict[str, Prediction] | None = None
    error: str | None = None
    managed = PREDICTED_ANNOTATION in ann
    if managed:
        try:
            predicted = parse_predictions(str(ann[PREDICTED_ANNOTATION]))
        except WireError as e:
            error = str(e)  # fail safe: schedule runtime-blind rather than block the pod
    req = PodRequest(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace") or "default"),
        gpus=pod_gpus(pod),
        predicted=predicted,
        checkpointing=str(ann.get(CHECKPOINTING_ANNOTATION, "")).lower() == "true",
        uid=str(meta.get("uid", "")),
    )
    return req, managed, error


def parse_extender_args(body: Any) -> ExtenderArgs:
    """Parse an ExtenderArgs JSON body (already decoded)."""
    if not isinstance(body, dict):
        raise WireError("ExtenderArgs must be a JSON object")
    pod = body.get("Pod")
    if not isinstance(pod, dict):
        raise WireError("ExtenderArgs.Pod is missing")
    req, managed, error = parse_pod(pod)
    names = body.get("NodeNames")
    nodes = body.get("Nodes")
    if names is not None:
        if not isinstance(names, list):
            raise WireError("ExtenderArgs.NodeNames must be a list")
        node_names = tuple(names) if all(type(n) is str for n in names) else tuple(str(n) for n in names)
        return ExtenderArgs(req, node_names, None, managed, error)
    if isinstance(nodes, dict):
        objects: dict[str, Mapping[str, Any]] = {}
        for item in nodes.get("items") or []:
            name = (item.get("metadata") or {}).get("name")
            if name:
                objects[str(name)] = item
        return ExtenderArgs(req, tuple(objects), objects, managed, error)
    return ExtenderArgs(req, (), None, managed, error)


def filter_result(
    *, args: ExtenderArgs, passed: Sequence[str], failed: Mapping[str, str], error: str = ""
) -> ExtenderFilterResult:
    """Build an ExtenderFilterResult in the same shape as the request (names or full Node objects)."""
    result: ExtenderFilterResult = {"FailedNodes": dict(failed), "FailedAndUnresolvableNodes": {}, "Error": error}
    if args.node_objects is None:
        result["NodeNames"] = list(passed)
        result["Nodes"] = None
    else:
        result["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "items": [args.node_objects[n] for n in passed]}
        result["NodeNames"] = None
    return result


def error_filter_result(message: str) -> ExtenderFilterResult:
    return {"Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message}


def priority_list(scores: Mapping[str, int], names: Sequence[str]) -> list[HostPriority]:
    """HostPriorityList in request order, scores clamped to 0..10."""
    out: list[HostPriority] = []
    for n in names:
        score = scores.get(n, 0)
        if not (type(score) is int and 0 <= score <= MAX_EXTENDER_PRIORITY):
            score = max(0, min(MAX_EXTENDER_PRIORITY, int(score)))
        out.append({"Host": n, "Score": score})
    return out
