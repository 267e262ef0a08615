"""Model graphs in ConfigMaps: gzip + size-bounded reduction that keeps the totals the predictor needs.

A ConfigMap holds at most ~1 MiB, so a graph that does not fit is reduced, never dropped:
1. `merge-repeats`: consecutive ops with the same type and shapes (e.g. the 24 identical blocks of a
   transformer) become one op whose FLOPs/bytes/params are the run's sums and whose `attrs.repeat` is its length.
2. `aggregate`: one op per (type, framework type, dtype) with summed FLOPs/bytes/params and `attrs.count`.
Graph totals (forward FLOPs, parameters, bytes) and per-op-type totals are preserved by both. Pure.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from offpeak_graph.schema import GraphError, ModelGraph, Op, validate_graph

# ConfigMaps are limited to 1 MiB in total (keys, metadata, base64 text of binaryData): stay well below it.
DEFAULT_LIMIT_BYTES = 700_000


class GraphTooLarge(ValueError):
    """Even the per-op-type aggregate does not fit (should not happen for real models)."""


class GraphDecodeError(ValueError):
    """Stored bytes are not an offpeak model graph."""


@dataclass(frozen=True, slots=True)
class EncodedGraph:
    data: bytes  # gzip-compressed model-graph JSON
    graph_hash: str  # content hash of the ORIGINAL graph (what the predictor learnt from)
    reduced: str  # "" | "merge-repeats" | "aggregate"
    ops: int  # ops stored
    original_ops: int
    model_name: str
    model_family: str


def _compress(graph: ModelGraph) -> bytes:
    text = json.dumps(graph.to_dict(), separators=(",", ":"))
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)


def _same_kind(a: Op, b: Op) -> bool:
    return (a.type, a.framework_type, a.dtype, a.input_shapes, a.output_shapes, a.attrs) == (
        b.type, b.framework_type, b.dtype, b.input_shapes, b.output_shapes, b.attrs)  # fmt: skip


def _with(graph: ModelGraph, ops: list[Op]) -> ModelGraph:
    return ModelGraph(
        framework=graph.framework, model_name=graph.model_name, batch_size=graph.batch_size, ops=ops,
        seq_len=graph.seq_len, input_shape=graph.input_shape, precision=graph.precision, mode=graph.mode,
        optimizer=graph.optimizer, extraction=graph.extraction, model_family=graph.model_family,
    )  # fmt: skip


def merge_repeats(graph: ModelGraph) -> ModelGraph:
    """Collapse runs of consecutive identical ops into one op carrying the run's sums and `attrs.repeat`."""
    merged: list[Op] = []
    remap: dict[int, int] = {}
    for op in graph.ops:
        last = merged[-1] if merged else None
        if last is not None and _same_kind(_unrepeated(last), op):
            last.attrs["repeat"] = last.attrs.get("repeat", 1) + 1
            last.flops += op.flops
            last.bytes_read += op.bytes_read
            last.bytes_written += op.bytes_written
            last.params += op.params
            remap[op.id] = last.id
            continue
        copy = Op(id=op.id, type=op.type, name=op.name, framework_type=op.framework_type, attrs=dict(op.attrs),
                  inputs=[remap.get(i, i) for i in op.inputs if remap.get(i, i) != op.id],
                  input_shapes=op.input_shapes, output_shapes=op.output_shapes, dtype=op.dtype, flops=op.flops,
                  bytes_read=op.bytes_read, bytes_written=op.bytes_written, params=op.params)
        merged.append(copy)
        remap[op.id] = op.id
    return _with(graph, merged)


def _unrepeated(op: Op) -> Op:
    """`op` as it was before merging, for comparing with the next op (attrs without `repeat`)."""
    if "repeat" not in op.attrs:
        return op
    attrs = {k: v for k, v in op.attrs.items() if k != "repeat"}
    return Op(id=op.id, type=op.type, framework_type=op.framework_type, attrs=attrs, dtype=op.dtype,
              input_shapes=op.input_shapes, output_shapes=op.output_shapes)


def aggregate(graph: ModelGraph) -> ModelGraph:
    """One op per (type, framework type, dtype): sums of FLOPs, bytes and params, `attrs.count` ops."""
    groups: dict[tuple[str, str, str], Op] = {}
    for op in graph.ops:
        key = (op.type, op.framework_type, op.dtype)
        agg = groups.get(key)
        if agg is None:
            groups[key] = Op(id=len(groups), type=op.type, name=f"aggregate:{op.type}",
                             framework_type=op.framework_type, attrs={"count": 1}, dtype=op.dtype,
                             flops=op.flops, bytes_read=op.bytes_read, bytes_written=op.bytes_written,
                             params=op.params)
            continue
        agg.attrs["count"] += 1
        agg.flops += op.flops
        agg.bytes_read += op.bytes_read
        agg.bytes_written += op.bytes_written
        agg.params += op.params
    return _with(graph, list(groups.values()))


def encode_graph(graph: ModelGraph, *, limit_bytes: int = DEFAULT_LIMIT_BYTES) -> EncodedGraph:
    """gzip the graph, reducing it step by step until the base64 text fits `limit_bytes`."""
    original_hash = graph.content_hash()
    for reduced, candidate in (("", lambda: graph), ("merge-repeats", lambda: merge_repeats(graph)),
                               ("aggregate", lambda: aggregate(merge_repeats(graph)))):
        g = candidate()
        data = _compress(g)
        if _b64_len(len(data)) <= limit_bytes:
            return EncodedGraph(data=data, graph_hash=original_hash, reduced=reduced, ops=len(g.ops),
                                original_ops=len(graph.ops), model_name=graph.model_name,
                                model_family=graph.model_family)
    raise GraphTooLarge(f"model graph {graph.model_name!r} does not fit {limit_bytes} bytes even aggregated "
                        f"per op type ({len(data)} bytes compressed)")


def _b64_len(n: int) -> int:
    return 4 * ((n + 2) // 3)


def decode_bytes(raw: bytes) -> ModelGraph:
    """A graph from gzip or plain JSON bytes, checked by the one graph validation (finite numbers, known enums)."""
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        graph = ModelGraph.from_dict(json.loads(raw))
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError,
            OverflowError) as e:  # fmt: skip
        raise GraphDecodeError(f"not an offpeak model graph: {e}") from e
    try:
        return validate_graph(graph)
    except GraphError as e:
        raise GraphDecodeError(f"invalid model graph: {e}") from e


def graph_from_configmap(configmap: Mapping[str, Any], *, key: str) -> ModelGraph:
    """Read `key` from a ConfigMap dict: binaryData (base64 gzip or JSON) or data (JSON text or base64 gzip)."""
    name = configmap.get("metadata", {}).get("name", "?")
    binary = configmap.get("binaryData") or {}
    data = configmap.get("data") or {}
    if key in binary:
        raw = base64.b64decode(binary[key])
    elif key in data:
        text: str = data[key]
        raw = text.encode() if text.lstrip().startswith("{") else base64.b64decode(text)
    else:
        keys = sorted(set(binary) | set(data))
        raise GraphDecodeError(f"ConfigMap {name} has no key {key!r} (keys: {', '.join(keys) or 'none'})")
    return decode_bytes(raw)


MAX_HF_CONFIG_BYTES = 256 * 1024


class HfConfigError(ValueError):
    """An hfConfigMap that cannot be used; `reason` is the GraphReady condition's (InvalidModelSource fails the
    job). Messages never quote the ConfigMap's contents."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def hf_config_from_configmap(configmap: Mapping[str, Any], *, key: str) -> str:
    """The HF config JSON text under `key` of a ConfigMap dict (data), checked to be one JSON object."""
    name = configmap.get("metadata", {}).get("name", "?")
    text = (configmap.get("data") or {}).get(key)
    if not isinstance(text, str):
        keys = sorted(configmap.get("data") or {})
        raise HfConfigError("InvalidModelSource",
                            f"ConfigMap {name} has no data key {key!r} (keys: {', '.join(keys) or 'none'})")
    if len(text.encode()) > MAX_HF_CONFIG_BYTES:
        raise HfConfigError("InvalidModelSource", f"ConfigMap {name} key {key!r} is larger than "
                                                  f"{MAX_HF_CONFIG_BYTES} bytes")  # fmt: skip
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise HfConfigError("InvalidModelSource", f"ConfigMap {name} key {key!r} is not JSON "
                                                  f"(line {e.lineno}, column {e.colno})") from e  # fmt: skip
    if not isinstance(data, dict):
        raise HfConfigError("InvalidModelSource", f"ConfigMap {name} key {key!r} must hold a JSON object "
                                                  "(a HuggingFace config.json)")  # fmt: skip
    return text


# The analysis pod's last container prints the encoded graph between these markers, in short lines (container
# runtimes split long log lines), and the operator reads it back from the pod's log.
LOG_BEGIN = "OFFPEAK-GRAPH-BEGIN"
LOG_END = "OFFPEAK-GRAPH-END"
LOG_LINE = 4000


def to_log_lines(data: bytes, header: Mapping[str, Any] | None = None) -> list[str]:
    """The log block: a begin line with a JSON header, base64 in short lines, an end line with a checksum."""
    text = base64.b64encode(data).decode()
    digest = hashlib.sha256(data).hexdigest()
    begin = f"{LOG_BEGIN} {json.dumps(dict(header or {}), separators=(',', ':'))}"
    return [begin, *(text[i:i + LOG_LINE] for i in range(0, len(text), LOG_LINE)), f"{LOG_END} {digest}"]


def from_log(log: str) -> tuple[bytes, dict[str, Any]]:
    """The bytes and header printed by `to_log_lines` somewhere in `log` (the last complete block wins)."""
    lines = [ln.strip() for ln in log.splitlines()]
    ends = [i for i, ln in enumerate(lines) if ln.startswith(LOG_END)]
    if not ends:
        raise GraphDecodeError("analysis pod log holds no complete graph block")
    end = ends[-1]
    begins = [i for i in range(end) if lines[i].startswith(LOG_BEGIN)]
    if not begins:
        raise GraphDecodeError("analysis pod log holds a graph end marker without a begin marker")
    begin = begins[-1]
    try:
        header = json.loads(lines[begin][len(LOG_BEGIN):].strip() or "{}")
        data = base64.b64decode("".join(lines[begin + 1:end]), validate=True)
    except (ValueError, json.JSONDecodeError) as e:
        raise GraphDecodeError(f"graph block in analysis pod log is malformed: {e}") from e
    digest = lines[end][len(LOG_END):].strip()
    if hashlib.sha256(data).hexdigest() != digest:
        raise GraphDecodeError("graph in analysis pod log is corrupt (checksum mismatch)")
    return data, header if isinstance(header, dict) else {}
