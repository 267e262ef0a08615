"""The model-graph file format: compact, lossless, versioned (pure Python, no torch)."""

from __future__ import annotations

import json
import random

import pytest

from offpeak_graph.schema import SCHEMA_VERSION, ModelGraph, Op, OpType, load_graph, save_graph

_BLOCK = (  # one transformer block: (type, framework op, input shape, output shape, flops per token, params)
    (OpType.LAYERNORM, "LayerNorm", [8, 2048, 4096], [8, 2048, 4096], 0.0, 8192),
    (OpType.LINEAR, "Linear", [8, 2048, 4096], [8, 2048, 12288], 2.0 * 4096 * 12288, 4096 * 12288),
    (OpType.SDPA, "F.scaled_dot_product_attention", [8, 32, 2048, 128], [8, 32, 2048, 128], 4.0 * 2048 * 4096, 0),
    (OpType.LINEAR, "Linear", [8, 2048, 4096], [8, 2048, 4096], 2.0 * 4096 * 4096, 4096 * 4096),
    (OpType.ADD, "aten.add", [8, 2048, 4096], [8, 2048, 4096], 0.0, 0),
    (OpType.LAYERNORM, "LayerNorm", [8, 2048, 4096], [8, 2048, 4096], 0.0, 8192),
    (OpType.LINEAR, "Linear", [8, 2048, 4096], [8, 2048, 16384], 2.0 * 4096 * 16384, 4096 * 16384),
    (OpType.GELU, "GELU", [8, 2048, 16384], [8, 2048, 16384], 0.0, 0),
    (OpType.LINEAR, "Linear", [8, 2048, 16384], [8, 2048, 4096], 2.0 * 16384 * 4096, 16384 * 4096),
    (OpType.ADD, "aten.add", [8, 2048, 4096], [8, 2048, 4096], 0.0, 0),
)


def synthetic_graph(n_ops: int, *, seed: int = 0) -> ModelGraph:
    """A deep transformer-like graph with n_ops ops (repeating blocks, a few random extra edges and attrs)."""
    rng = random.Random(seed)
    ops = [Op(id=0, type=OpType.INPUT, name="input_ids", framework_type="input", output_shapes=[[8, 2048]],
              dtype="int64")]  # fmt: skip
    while len(ops) < n_ops:
        i = len(ops)
        op_type, fw, shape_in, shape_out, flops_per_token, params = _BLOCK[(i - 1) % len(_BLOCK)]
        inputs = [i - 1] + ([i - rng.randint(2, 5)] if op_type == OpType.ADD and i > 5 else [])
        ops.append(Op(
            id=i, type=op_type, name=f"model.layers.{(i - 1) // len(_BLOCK)}.op{(i - 1) % len(_BLOCK)}",
            framework_type=fw, attrs={"heads": 32, "head_dim": 128} if op_type == OpType.SDPA else {},
            inputs=sorted(inputs), input_shapes=[shape_in], output_shapes=[shape_out], dtype="bfloat16",
            flops=flops_per_token * 8 * 2048, bytes_read=2 * 8 * 2048 * shape_in[-1] + 2 * params,
            bytes_written=2 * 8 * 2048 * shape_out[-1], params=params,
        ))  # fmt: skip
    return ModelGraph(framework="synthetic", model_name="synthetic-100k", model_family="synthetic", batch_size=8,
                      seq_len=2048, precision="bf16", ops=ops)  # fmt: skip


def test_100k_op_graph_is_a_few_mb_gzipped_and_round_trips_losslessly(tmp_path):
    graph = synthetic_graph(100_000)
    gz, plain = tmp_path / "g.json.gz", tmp_path / "g.json"
    save_graph(graph, gz)
    save_graph(graph, plain)
    assert gz.stat().st_size < 2_000_000, f"{gz.stat().st_size} bytes gzipped"
    assert plain.stat().st_size < 16_000_000, f"{plain.stat().st_size} bytes plain"
    for path in (gz, plain):
        loaded = load_graph(path)
        assert loaded.ops == graph.ops
        assert loaded.content_hash() == graph.content_hash()
        assert loaded.total_params == graph.total_params
        assert loaded.total_flops_forward == graph.total_flops_forward
        for field in ("framework", "model_name", "model_family", "batch_size", "seq_len", "precision", "schema"):
            assert getattr(loaded, field) == getattr(graph, field)


def test_gzip_output_is_deterministic(tmp_path):
    graph = synthetic_graph(500)
    save_graph(graph, tmp_path / "a.json.gz")
    save_graph(graph, tmp_path / "b.json.gz")
    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()


def test_content_hash_ignores_the_name_but_not_the_batch_or_ops():
    graph = synthetic_graph(50)
    renamed = ModelGraph.from_dict({**graph.to_dict(), "model_name": "other"})
    assert renamed.content_hash() == graph.content_hash()
    bigger = ModelGraph.from_dict({**graph.to_dict(), "batch_size": 16})
    assert bigger.content_hash() != graph.content_hash()
    changed = synthetic_graph(50)
    changed.ops[3].flops += 1
    assert changed.content_hash() != graph.content_hash()


def test_header_totals_and_unknown_ops_are_reported():
    graph = synthetic_graph(21)
    graph.ops.append(Op(id=21, type=OpType.OTHER, framework_type="aten.cummax", inputs=[20]))
    data = json.loads(json.dumps(graph.to_dict()))
    assert data["schema"] == SCHEMA_VERSION
    assert data["total_params"] == sum(op.params for op in graph.ops)
    assert data["unknown_ops"] == {"aten.cummax": 1}
    assert graph.summary()["unknown_ops"] == {"aten.cummax": 1}
    assert set(data["ops"]) >= {"id", "type", "inputs", "input_shapes", "output_shapes", "flops", "params"}


def test_other_schema_versions_and_ragged_columns_are_rejected():
    data = synthetic_graph(5).to_dict()
    with pytest.raises(ValueError, match="schema"):
        ModelGraph.from_dict({**data, "schema": "offpeak.io/model-graph/v0"})
    ragged = {**data, "ops": {**data["ops"], "flops": data["ops"]["flops"][:-1]}}
    with pytest.raises(ValueError, match="flops"):
        ModelGraph.from_dict(ragged)
