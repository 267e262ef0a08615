"""kube-scheduler extender wire format (k8s.io/kube-scheduler extender/v1): parse requests, build responses.

The wire types have no json tags, so their keys are Go field names (PascalCase); embedded Pod and Node objects
keep Kubernetes camelCase. Pure: dicts in, dataclasses/dicts out.

Over 500 lines because it is the whole protocol (args, results, the pod and node fields offpeak reads) in one
place, so a change to the wire format is made once.
"""

from __future__ import annotations

import json
import math
from json.encoder import encode_basestring_ascii as _quote  # str -> JSON string literal, in C
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, NamedTuple, TypedDict

import msgspec
import numpy as np

from offpeak_core.gangs import MAX_GANG_SIZE, GangKey
from offpeak_core.model import PodRequest, Prediction


PREDICTED_ANNOTATION = "offpeak.io/predicted-job-seconds"
CHECKPOINTING_ANNOTATION = "offpeak.io/checkpointing"
CHECKPOINT_INTERVAL_ANNOTATION = "offpeak.io/checkpoint-interval-seconds"  # set by the operator from the spec
BUSY_HOURS_ANNOTATION = "offpeak.io/busy-hours"
WORKLOAD_LABEL = "offpeak.io/workload"
TRAININGJOB_LABEL = "offpeak.io/trainingjob"
ATTEMPT_LABEL = "offpeak.io/attempt"
WORKER_LABEL = "offpeak.io/worker"
# Workers of one attempt placed all-or-none ("<N>"; absent or "1": no gang). Gang key: namespace, job, attempt.
GANG_SIZE_ANNOTATION = "offpeak.io/gang-size"
# Elastic gang ("<m>", 1 <= m <= N; absent: N, all or none): the job may run on any m..N of its workers, so the
# extender places the widest width that fits now and lets the others join later (worker 0 always runs first).
GANG_MIN_SIZE_ANNOTATION = "offpeak.io/gang-min-size"
# The gang of pods another controller makes (a PyTorchJob's replicas; written by the operator into every replica
# template): the key is namespace and this label, in place of a TrainingJob's job and attempt labels.
GANG_LABEL = "offpeak.io/gang"
GPU_RESOURCE = "nvidia.com/gpu"
MAX_EXTENDER_PRIORITY = 10
MAX_POD_GPUS = 1024  # far above any node; keeps GPU counts small integers
# More node names than any real cluster has (Kubernetes tests 5,000 nodes; the largest managed clusters
# allow 65,000): a bigger list is refused before any per-node work.
MAX_NODES = 100_000


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


class NotJSON(WireError):
    """The request body is not JSON at all."""


@dataclass(frozen=True)
class ExtenderArgs:
    """A parsed ExtenderArgs: the pod, the candidate node names, and the Node objects when sent in full."""

    pod: PodRequest
    node_names: tuple[str, ...]
    node_objects: Mapping[str, Mapping[str, Any]] | None  # None when nodeCacheCapable (names only)
    managed: bool  # the pod carries a runtime prediction: offpeak decides; otherwise pass through
    prediction_error: str | None = None
    gang: Gang | None = None  # the pod is one worker of a gang (gang size > 1)
    gang_error: str | None = None  # a gang annotation or label that could not be read (the pod goes alone)
    names_key: str | tuple[str, ...] | None = None  # `list_key(node_names)`, made while checking them (names only)


@dataclass(frozen=True)
class Gang:
    """The gang a worker pod belongs to, as its labels and annotations say: `size` workers, of which it may run on
    any `min_size` or more (`min_size == size`: all or none), and this pod's worker index (None: not given or not
    a number; every elastic worker has one)."""

    key: GangKey
    size: int
    min_size: int
    worker: int | None = None

    @property
    def elastic(self) -> bool:
        return self.min_size < self.size


def _whole_number(text: Any, name: str, what: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError as e:
        raise WireError(f"{name} must be a whole number of {what}, got {str(text)[:40]!r}") from e


def parse_gang(meta: Mapping[str, Any]) -> Gang | None:
    """A pod's gang from `offpeak.io/gang-size` (and `offpeak.io/gang-min-size`) and the job and attempt labels
    (or `offpeak.io/gang`); None for a lone pod (no annotation, or "1"); WireError when the size is not an integer
    in 1..MAX_GANG_SIZE, the minimum not one in 1..size, an elastic worker has no index in 0..size-1, or no label
    says which gang."""
    ann = _mapping(meta.get("annotations"), "Pod.metadata.annotations")
    text = ann.get(GANG_SIZE_ANNOTATION)
    if text is None:
        return None
    size = _whole_number(text, GANG_SIZE_ANNOTATION, "workers")
    if not 1 <= size <= MAX_GANG_SIZE:
        raise WireError(f"{GANG_SIZE_ANNOTATION} must be in 1..{MAX_GANG_SIZE}, got {size}")
    if size == 1:
        return None
    min_text = ann.get(GANG_MIN_SIZE_ANNOTATION)
    min_size = size if min_text is None else _whole_number(min_text, GANG_MIN_SIZE_ANNOTATION, "workers")
    if not 1 <= min_size <= size:
        raise WireError(f"{GANG_MIN_SIZE_ANNOTATION} must be in 1..{size} (the gang size), got {min_size}")
    labels = _mapping(meta.get("labels"), "Pod.metadata.labels")
    worker = _worker_index(labels.get(WORKER_LABEL), size)
    if min_size < size and worker is None:
        raise WireError(f"{GANG_MIN_SIZE_ANNOTATION} needs the {WORKER_LABEL} label, the worker's index in "
                        f"0..{size - 1} (the lowest indexes run first), got {str(labels.get(WORKER_LABEL))[:40]!r}")
    namespace = str(meta.get("namespace") or "default")
    if labels.get(GANG_LABEL):  # "gang:" keeps it apart from a TrainingJob of the same name
        return Gang(GangKey(namespace, f"gang:{labels[GANG_LABEL]}", ""), size, min_size, worker)
    job = labels.get(TRAININGJOB_LABEL)
    if not job:
        raise WireError(f"{GANG_SIZE_ANNOTATION} needs the {TRAININGJOB_LABEL} label (the gang is job and attempt) "
                        f"or {GANG_LABEL}")
    return Gang(GangKey(namespace, str(job), str(labels.get(ATTEMPT_LABEL, ""))), size, min_size, worker)


def _worker_index(text: Any, size: int) -> int | None:
    """The `offpeak.io/worker` label as an index in 0..size-1; None when absent or not one (a rigid gang needs
    none: a PyTorchJob's replicas share one template's labels)."""
    try:
        index = int(str(text).strip())
    except ValueError:
        return None
    return index if 0 <= index < size else None


_QUANTITY_SUFFIXES = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
                      "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}


def parse_quantity(value: Any) -> float:
    """Parse a Kubernetes quantity for countable resources (`2`, `"4"`, `"1k"`); finite and >= 0, else WireError."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        text = str(value).strip()
        suffix = text[-2:] if text[-2:] in _QUANTITY_SUFFIXES else text[-1:] if text[-1:] in _QUANTITY_SUFFIXES else ""
        try:
            number = float(text[: len(text) - len(suffix)]) * _QUANTITY_SUFFIXES.get(suffix, 1.0)
        except (ValueError, OverflowError) as e:
            raise WireError(f"bad resource quantity {str(value)[:40]!r}") from e
    if not (math.isfinite(number) and number >= 0):
        raise WireError(f"bad resource quantity {str(value)[:40]!r}: must be a finite number >= 0")
    return number


def _mapping(value: Any, what: str) -> Mapping[str, Any]:
    """`value` as an object (absent/null -> empty); anything else is a WireError naming the field."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WireError(f"{what} must be an object, got {type(value).__name__}")
    return value


def _objects(value: Any, what: str) -> list[Mapping[str, Any]]:
    """`value` as a list of objects (absent/null -> empty); anything else is a WireError naming the field."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise WireError(f"{what} must be a list, got {type(value).__name__}")
    return [_mapping(v, f"{what}[{i}]") for i, v in enumerate(value)]


def pod_gpus(pod: Mapping[str, Any]) -> int:
    """GPUs a pod asks for: sum over containers of max(request, limit), at least the largest init container."""
    spec = _mapping(pod.get("spec"), "Pod.spec")

    def one(container: Mapping[str, Any], what: str) -> float:
        res = _mapping(container.get("resources"), f"{what}.resources")
        req = _mapping(res.get("requests"), f"{what}.resources.requests").get(GPU_RESOURCE, 0)
        lim = _mapping(res.get("limits"), f"{what}.resources.limits").get(GPU_RESOURCE, 0)
        return max(parse_quantity(req), parse_quantity(lim))

    main = sum(one(c, "container") for c in _objects(spec.get("containers"), "Pod.spec.containers"))
    init = max((one(c, "initContainer") for c in _objects(spec.get("initContainers"), "Pod.spec.initContainers")),
               default=0.0)
    gpus = max(main, init)
    if gpus > MAX_POD_GPUS:
        raise WireError(f"pod asks for {gpus:g} GPUs, more than any node has ({MAX_POD_GPUS} at most)")
    return int(math.ceil(gpus))


_decode = msgspec.json.Decoder().decode  # untyped: the same dicts, lists, strings and numbers as `json.loads`


def loads(text: str | bytes) -> Any:
    """Decode JSON; any malformed input (bad syntax or encoding, nesting too deep) is a WireError.

    msgspec decodes first: twice as fast as `json` on thousands of node names, to the same values (integers of any
    size, floats rounded alike). What it refuses goes to `json`, whose answer or error it was before: malformed
    input, and what only `json` takes (NaN, Infinity, numbers past a float, lone surrogates, UTF-16 or a BOM). An
    integer of more digits than Python converts (4,300) is refused by both: a WireError too, never a crash.
    """
    try:
        return _decode(text)
    except (msgspec.DecodeError, RecursionError):
        pass
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise NotJSON(f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    except (UnicodeDecodeError, RecursionError) as e:
        raise NotJSON(f"not JSON: {type(e).__name__}") from e
    except ValueError as e:  # an integer past Python's digit limit for int(str)
        raise NotJSON(f"not JSON: {str(e).split(';')[0][:100]}") from e


def _seconds(value: Any) -> float:
    """A number of seconds: finite and >= 0 (`bool` is not a number here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(value)
    number = float(value)
    if not (math.isfinite(number) and number >= 0):
        raise ValueError(value)
    return number


def parse_predictions(text: str) -> dict[str, Prediction]:
    """Parse the `offpeak.io/predicted-job-seconds` annotation: `{"<gpu-type>": {"p50": s, "p90": s}}`, each
    entry optionally with `fits_memory` (bool), `peak_memory_gib` and `gpu_memory_gib` (the step's peak GPU memory
    and the GPU type's)."""
    if len(text) > _KEPT_PREDICTION_CHARS:
        return _parse_predictions(text)
    return dict(_kept_predictions(text))  # a copy: the caller may change its dict, not the one kept


_KEPT_PREDICTION_CHARS = 4096  # a few dozen GPU types; the cache below holds at most 256 of these (~1 MiB)


@lru_cache(maxsize=256)  # each scheduling cycle sends a pod's annotation twice (filter, prioritize), and again on retry
def _kept_predictions(text: str) -> dict[str, Prediction]:
    return _parse_predictions(text)


def _parse_predictions(text: str) -> dict[str, Prediction]:
    try:
        raw = loads(text)
    except WireError as e:
        raise WireError(f"{PREDICTED_ANNOTATION} is {e}") from e
    if not isinstance(raw, dict) or not raw:
        raise WireError(f'{PREDICTED_ANNOTATION} must be a non-empty object {{"<gpu-type>": {{"p50", "p90"}}}}')
    out: dict[str, Prediction] = {}
    for gpu_type, v in raw.items():
        try:
            if not isinstance(v, dict):
                raise TypeError(v)
            p50 = _seconds(v["p50"])
            p90 = _seconds(v.get("p90", p50))
            fits = v.get("fits_memory")
            if fits is not None and not isinstance(fits, bool):
                raise TypeError(fits)
            out[str(gpu_type)] = Prediction(
                p50=p50, p90=max(p50, p90), fits_memory=fits,
                peak_memory_gib=_seconds(v["peak_memory_gib"]) if "peak_memory_gib" in v else None,
                gpu_memory_gib=_seconds(v["gpu_memory_gib"]) if "gpu_memory_gib" in v else None,
            )
        except (TypeError, KeyError, ValueError, OverflowError) as e:
            raise WireError(f"{PREDICTED_ANNOTATION}[{gpu_type[:60]!r}] needs finite p50/p90 seconds >= 0 "
                            "(and a boolean fits_memory, GiB >= 0)") from e
    return out


def parse_pod(pod: Mapping[str, Any]) -> tuple[PodRequest, bool, str | None]:
    """Pod object -> (PodRequest, managed, prediction error). Unannotated pods are unmanaged."""
    meta = _mapping(pod.get("metadata"), "Pod.metadata")
    ann = _mapping(meta.get("annotations"), "Pod.metadata.annotations")
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
        checkpoint_interval_seconds=_checkpoint_interval(ann.get(CHECKPOINT_INTERVAL_ANNOTATION)),
    )
    return req, managed, error


def _checkpoint_interval(value: Any) -> float | None:
    """Seconds between checkpoints; None (the job needs a window for its whole run) for anything else than a
    positive finite number: a bad annotation must not let a job into a short window."""
    try:
        seconds = float(str(value))
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def node_names(names: Any) -> tuple[tuple[str, ...], str | tuple[str, ...]]:
    """The names and their `list_key` (the store's cache key of the list, made by the join that checks them)."""
    if not isinstance(names, list):
        raise WireError("ExtenderArgs.NodeNames must be a list")
    if len(names) > MAX_NODES:
        raise WireError(f"ExtenderArgs.NodeNames has {len(names)} names, more than {MAX_NODES} (no real cluster)")
    try:
        key = list_key(names)  # one join in C: a TypeError names anything that is not a string
    except TypeError:
        raise WireError("ExtenderArgs.NodeNames must be a list of strings") from None
    return tuple(names), key


def list_key(names: Sequence[str]) -> str | tuple[str, ...]:
    """The key of a node-name list in the store's columns cache: the names joined by NUL, one string, which keeps its
    hash once computed and compares in one memcmp (a tuple of thousands of names rehashes at every lookup); the tuple
    of names when a name holds a NUL itself or the list is empty, where joining could give two lists one key. A name
    that is not a string is a TypeError."""
    joined = "\0".join(names)
    return joined if joined.count("\0") == len(names) - 1 else tuple(names)


def _node_objects(nodes: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    items = _objects(nodes.get("items"), "ExtenderArgs.Nodes.items")
    if len(items) > MAX_NODES:
        raise WireError(f"ExtenderArgs.Nodes has {len(items)} items, more than {MAX_NODES} (no real cluster)")
    objects: dict[str, Mapping[str, Any]] = {}
    for i, item in enumerate(items):
        name = _mapping(item.get("metadata"), f"ExtenderArgs.Nodes.items[{i}].metadata").get("name")
        if name:
            objects[str(name)] = item
    return objects


def parse_extender_args(body: Any) -> ExtenderArgs:
    """Parse an ExtenderArgs JSON body (already decoded); anything malformed is a WireError with the field."""
    if not isinstance(body, dict):
        raise WireError("ExtenderArgs must be a JSON object")
    names = body.get("NodeNames")
    return extender_args(partial(parse_pod_part, body.get("Pod")), body.get("Nodes"),
                         None if names is None else partial(node_names, names))


class PodPart(NamedTuple):
    """What ExtenderArgs says of its pod: the request, whether offpeak decides for it, and its gang."""

    request: PodRequest
    managed: bool
    prediction_error: str | None
    gang: Gang | None
    gang_error: str | None


def parse_pod_part(pod: Any) -> PodPart:
    """ExtenderArgs.Pod (decoded) as a `PodPart`; WireError when it is missing or malformed."""
    if not isinstance(pod, dict):
        raise WireError("ExtenderArgs.Pod is missing")
    req, managed, error = parse_pod(pod)
    gang: Gang | None = None
    gang_error: str | None = None
    if managed:
        try:
            gang = parse_gang(_mapping(pod.get("metadata"), "Pod.metadata"))
        except WireError as e:
            gang_error = str(e)
    return PodPart(req, managed, error, gang, gang_error)


NamesAndKey = tuple[tuple[str, ...], str | tuple[str, ...]]


def extender_args(pod: Callable[[], PodPart], nodes: Any, names: Callable[[], NamesAndKey] | None) -> ExtenderArgs:
    """ExtenderArgs from its fields, checked in the order of `parse_extender_args`: the pod (`pod()`), then the node
    names (`names()`, checked and keyed once the pod is fine), else the Node objects."""
    req, managed, error, gang, gang_error = pod()
    if names is not None:
        checked, key = names()
        return ExtenderArgs(req, checked, None, managed, error, gang, gang_error, key)
    if nodes is not None:
        objects = _node_objects(_mapping(nodes, "ExtenderArgs.Nodes"))
        return ExtenderArgs(req, tuple(objects), objects, managed, error, gang, gang_error)
    return ExtenderArgs(req, (), None, managed, error, gang, gang_error)


def filter_result(
    *, args: ExtenderArgs, passed: Sequence[str], failed: Mapping[str, str], error: str = ""
) -> ExtenderFilterResult:
    """Build an ExtenderFilterResult in the same shape as the request (names or full Node objects). A pod judged
    runtime-blind for an unreadable prediction says so in every node's reason (the pod's events show them)."""
    if args.prediction_error:
        note = f" (judged runtime-blind: {args.prediction_error[:200]})"
        failed = {node: reason + note for node, reason in failed.items()}
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
    get = scores.get
    return [{"Host": n, "Score": _clamp(get(n, 0))} for n in names]


def _clamp(score: int) -> int:
    if type(score) is int and 0 <= score <= MAX_EXTENDER_PRIORITY:
        return score
    return max(0, min(MAX_EXTENDER_PRIORITY, int(score)))


def encode_priorities(scores: Mapping[str, int], names: Sequence[str]) -> bytes:
    """The HostPriorityList of `priority_list(scores, names)` as compact JSON, built without the dicts: several
    times faster than `json.dumps` on a list of small dicts (hot path)."""
    get = scores.get
    return ("[" + ",".join([f'{{"Host":{_quote(n)},"Score":{_clamp(get(n, 0))}}}' for n in names]) + "]").encode()


_HOST_OPEN = '{"Host":'
# What follows a quoted host name, by score: the score, and the next entry's opening (cut off after the last).
_SCORE_NEXT = np.array([f',"Score":{s}}},{_HOST_OPEN}' for s in range(MAX_EXTENDER_PRIORITY + 1)], dtype=object)


def json_strings(names: Iterable[str]) -> list[str]:
    """Each name as a JSON string literal (quoted and escaped, as `json.dumps` writes it)."""
    return list(map(_quote, names))


def encode_scores(json_names: list[str], scores: np.ndarray) -> bytes:
    """`encode_priorities` for integer scores given in the names' order (`scores[i]` is that of the node named
    `json_names[i]`, a JSON string: `json_strings`, or `NodeArrays.json_names`): the same bytes, built by array
    indexing and one join instead of formatting each entry (the extender's hot path)."""
    if len(scores) != len(json_names):
        raise ValueError(f"{len(scores)} scores for {len(json_names)} names")
    if not json_names:
        return b"[]"
    parts = [""] * (2 * len(json_names))  # quoted name, score and next opening, alternately
    parts[::2] = json_names
    parts[1::2] = _SCORE_NEXT.take(scores, mode="clip").tolist()  # clipped to 0..10 in the same C call
    return f"[{_HOST_OPEN}{''.join(parts)[:-len(_HOST_OPEN) - 1]}]".encode()


@dataclass(frozen=True)
class NamesFilterReply:
    """A filter answer to a names-only request (nodeCacheCapable) that lists no node twice, as columns of its nodes
    in request order: `fits` per node; the k-th node that does not pass, `failing[k]`, has the reason
    `reasons[reason_of[k]]`. The reply is joined from prepared JSON strings instead of built as dicts and encoded
    (the extender's hot path); `result()` is the same answer as `filter_result` builds it."""

    names: np.ndarray  # object: node names
    json_names: np.ndarray  # object: the same names as JSON strings
    fits: np.ndarray
    failing: np.ndarray
    reason_of: np.ndarray
    reasons: Sequence[str]

    def failed(self) -> dict[str, str]:
        return dict(zip(self.names[self.failing].tolist(), map(self.reasons.__getitem__, self.reason_of.tolist())))

    def result(self) -> ExtenderFilterResult:
        return {"FailedNodes": self.failed(), "FailedAndUnresolvableNodes": {}, "Error": "",
                "NodeNames": self.names[self.fits].tolist(), "Nodes": None}

    def encode(self) -> bytes:
        """`encode_filter_result(self.result())`, byte for byte (a test holds them equal)."""
        passed = ",".join(self.json_names[self.fits].tolist())
        quoted = np.array([_reason_entry(r) for r in self.reasons], dtype=object)
        n = len(self.failing)
        parts = [""] * (2 * n + 2)  # one join of every piece: a 5,000-node reply is ~260 KiB, copied once
        parts[0] = '{"FailedNodes":{'
        parts[1:-1:2] = self.json_names[self.failing].tolist()  # "name", :"reason", alternately
        parts[2:-1:2] = quoted[self.reason_of].tolist()
        if n:
            parts[-2] = parts[-2][:-1]  # the last reason without its comma
        parts[-1] = f'}},"FailedAndUnresolvableNodes":{{}},"Error":"","NodeNames":[{passed}],"Nodes":null}}'
        return "".join(parts).encode()


_REASON_MAPS = ("FailedNodes", "FailedAndUnresolvableNodes")


def encode_filter_result(result: ExtenderFilterResult) -> bytes:
    """`json.dumps(result, separators=(",", ":"))`, byte for byte, with each distinct failure reason quoted once:
    thousands of failed nodes share a few reasons (hot path)."""
    parts = []
    for key, value in result.items():
        text = _encode_reasons(value) if key in _REASON_MAPS and isinstance(value, dict) and value else _compact(value)
        parts.append(f"{_quote(key)}:{text}")
    return ("{" + ",".join(parts) + "}").encode()


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _encode_reasons(failed: Mapping[str, str]) -> str:
    """A node -> reason map as a JSON object (what `_compact` gives), quoting each distinct reason once and
    joining names and reasons in one pass."""
    try:
        quoted = {r: _reason_entry(r) for r in set(failed.values())}
        return _reason_object(list(map(_quote, failed)), list(map(quoted.__getitem__, failed.values())))
    except TypeError:  # a name or reason that is not a string (not what the decisions build): the general encoder
        return _compact(failed)


def _reason_entry(reason: str) -> str:
    """A reason as it follows its node's name in a reply's reason map: `:"reason",`."""
    return f":{_quote(reason)},"


def _reason_object(json_names: list[str], entries: list[str]) -> str:
    """`{"name":"reason",...}` from the names as JSON strings and their `_reason_entry`s, in one join."""
    parts = [""] * (2 * len(json_names))  # "name", :"reason", alternately
    parts[::2] = json_names
    parts[1::2] = entries
    return "{" + "".join(parts)[:-1] + "}"  # less the last comma
