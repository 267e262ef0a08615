from __future__ import annotations

import base64
import json

import pytest
from offpeak_graph.schema import ModelGraph
from optestkit import small_graph

from offpeak_operator import graphstore as gs


def totals(g: ModelGraph) -> tuple[float, int, int, int]:
    return (g.total_flops_forward, g.total_params, sum(o.bytes_read for o in g.ops),
            sum(o.bytes_written for o in g.ops))


def test_small_graph_is_stored_whole(graph: ModelGraph) -> None:
    enc = gs.encode_graph(graph)
    assert enc.reduced == "" and enc.ops == len(graph.ops)
    assert gs.decode_bytes(enc.data).to_dict() == graph.to_dict()
    assert enc.graph_hash == graph.content_hash()


def test_merge_repeats_keeps_totals_and_counts() -> None:
    big = small_graph(blocks=6)  # keep only the linears: six identical ops in a row
    big.ops = [big.ops[0], *[op for op in big.ops if op.type == "linear"], big.ops[-1]]
    for i, op in enumerate(big.ops):
        op.id, op.inputs = i, ([i - 1] if i else [])
    merged = gs.merge_repeats(big)
    assert [op.type for op in merged.ops] == ["input", "linear", "loss"]
    assert merged.ops[1].attrs["repeat"] == 6
    assert totals(merged) == totals(big)
    assert merged.ops[2].inputs == [merged.ops[1].id]  # edges point at the merged op


def test_aggregate_keeps_per_type_totals(graph: ModelGraph) -> None:
    agg = gs.aggregate(graph)
    assert totals(agg) == totals(graph)
    linear = next(op for op in agg.ops if op.type == "linear")
    assert linear.attrs["count"] == 4
    assert linear.flops == sum(op.flops for op in graph.ops if op.type == "linear")


def test_oversized_graph_is_reduced_not_lost() -> None:
    big = small_graph(blocks=4000)  # alternating linear/relu: nothing consecutive to merge
    for i, op in enumerate(big.ops):  # distinct names defeat gzip a little
        op.name = f"layers.{i}.module"
    limit = 20_000
    enc = gs.encode_graph(big, limit_bytes=limit)
    assert enc.reduced == "aggregate"
    assert len(base64.b64encode(enc.data)) <= limit
    back = gs.decode_bytes(enc.data)
    assert totals(back) == totals(big)
    assert enc.graph_hash == big.content_hash() and enc.original_ops == len(big.ops)


def test_configmap_round_trip_binary_and_text(graph: ModelGraph) -> None:
    enc = gs.encode_graph(graph)
    cm = {"metadata": {"name": "g"}, "binaryData": {"graph.json.gz": base64.b64encode(enc.data).decode()}}
    assert gs.graph_from_configmap(cm, key="graph.json.gz").content_hash() == graph.content_hash()
    cm_text = {"metadata": {"name": "g"}, "data": {"graph.json": json.dumps(graph.to_dict())}}
    assert gs.graph_from_configmap(cm_text, key="graph.json").model_name == "tiny"


def test_configmap_errors_name_the_keys() -> None:
    with pytest.raises(gs.GraphDecodeError, match="no key 'graph.json.gz'.*other"):
        gs.graph_from_configmap({"metadata": {"name": "g"}, "data": {"other": "x"}}, key="graph.json.gz")
    with pytest.raises(gs.GraphDecodeError):
        gs.decode_bytes(b'{"schema": "something/else"}')


def test_log_block_round_trip_amid_other_output(graph: ModelGraph) -> None:
    enc = gs.encode_graph(graph)
    lines = gs.to_log_lines(enc.data, {"hash": enc.graph_hash, "reduced": ""})
    assert all(len(line) <= gs.LOG_LINE + 100 for line in lines)
    log = "Downloading...\nwarning: x\n" + "\n".join(lines) + "\nbye\n"
    data, header = gs.from_log(log)
    assert data == enc.data and header["hash"] == enc.graph_hash


def test_corrupt_or_truncated_log_is_detected(graph: ModelGraph) -> None:
    lines = gs.to_log_lines(gs.encode_graph(graph).data)
    with pytest.raises(gs.GraphDecodeError, match="no complete"):
        gs.from_log("\n".join(lines[:-1]))
    tampered = [*lines[:1], "A" * len(lines[1]), *lines[2:]]
    with pytest.raises(gs.GraphDecodeError, match="checksum"):
        gs.from_log("\n".join(tampered))
