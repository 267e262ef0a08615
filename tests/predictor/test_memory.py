"""Peak GPU memory (`offpeak_predictor.memory`): hand-computed small graphs, the physics it must respect (batch,
optimizer, precision, mode), the op rules that matter, and the H100 measurements.

The measured rows come from `<data root>/runtime/offpeak-h100/h100_models.jsonl` when the data in use has them; the
shipped sample does not, so `data/h100_peak_memory.csv` (derived from them by `bench/memory_eval.py
--write-test-data`) and a few graphs extracted by the project's extractor stand in, and are checked against the
full data whenever it is there.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from offpeak_core.datapaths import runtime_dir
from offpeak_graph.schema import ModelGraph, Op, load_graph
from offpeak_predictor.memory import (
    GIB,
    MemoryEstimate,
    MemorySettings,
    fits_gpu,
    peak_memory_bytes,
)

DATA = Path(__file__).parent / "data"
EXACT = MemorySettings(slack=0.0, fixed_bytes=0)  # tensors only: what the hand computations add up


def mlp(*, batch: int = 64, width: int = 32, layers: int = 3, inplace: bool = False) -> ModelGraph:
    """input [B, W] fp32, then (linear W->W with bias, relu) x layers."""
    ops = [Op(id=0, type="input", output_shapes=[[batch, width]])]
    for _ in range(layers):
        ops.append(Op(id=len(ops), type="linear", inputs=[len(ops) - 1], input_shapes=[[batch, width]],
                      output_shapes=[[batch, width]], params=width * width + width,
                      attrs={"in_features": width, "out_features": width}))  # fmt: skip
        ops.append(Op(id=len(ops), type="relu", inputs=[len(ops) - 1], input_shapes=[[batch, width]],
                      output_shapes=[[batch, width]], attrs={"inplace": inplace}))  # fmt: skip
    return ModelGraph(framework="synthetic", model_name="mlp", batch_size=batch, ops=ops)


def lm(*, batch: int = 2, seq: int = 128, hidden: int = 64, vocab: int = 32000) -> ModelGraph:
    """token ids -> embedding -> layernorm -> LM head over the vocabulary (weights tied to the embedding)."""
    ops = [
        Op(id=0, type="input", output_shapes=[[batch, seq]], dtype="int64"),
        Op(id=1, type="embedding", inputs=[0], output_shapes=[[batch, seq, hidden]], params=vocab * hidden),
        Op(id=2, type="layernorm", inputs=[1], output_shapes=[[batch, seq, hidden]], params=2 * hidden),
        Op(id=3, type="linear", inputs=[2], output_shapes=[[batch, seq, vocab]], params=0,
           attrs={"in_features": hidden, "out_features": vocab}),
    ]  # fmt: skip
    return ModelGraph(framework="synthetic", model_name="lm", batch_size=batch, seq_len=seq, ops=ops)


# ---- hand-computed ------------------------------------------------------------------------------------------
def test_mlp_training_peak_is_the_start_of_backward() -> None:
    # B=64, W=32, 3 layers: P = 3 * (32*32 + 32) = 3168 parameters; one activation = 64*32*4 = 8192 bytes.
    # Kept for backward: the input (linear 1), each relu's output (relu, and the next linear): 1 + 3 tensors.
    # The loss adds log-softmax's output; its backward adds its gradient and the logits' gradient: 3 tensors.
    # No optimizer state (plain SGD), so the peak is 4 * P + 8192 * (1 + 3 + 3).
    est = peak_memory_bytes(mlp(), precision="fp32", optimizer="sgd-nomomentum", mode="train", settings=EXACT)
    assert est.peak_bytes == 4 * 3168 + 8192 * 7
    assert est.phase == "backward" and est.peak_op == "cross-entropy"
    assert (est.weights_bytes, est.gradients_bytes, est.optimizer_bytes) == (4 * 3168, 0, 0)
    assert est.activations_bytes == 8192 * 4


def test_mlp_training_under_autocast() -> None:
    # bf16 autocast: linears compute in half; the fp32 input gets a half copy kept for linear 1; each linear keeps
    # a half copy of its weights (2 * P bytes); relu outputs are half (4096 bytes). The loss casts the half logits
    # to fp32 (freed after log-softmax); at the start of backward: log-softmax output + 2 gradients, fp32.
    est = peak_memory_bytes(mlp(), precision="bf16", optimizer="sgd-nomomentum", mode="train", settings=EXACT)
    weights, copies, input_fp32, input_half, relus, loss = 4 * 3168, 2 * 3168, 8192, 4096, 3 * 4096, 3 * 8192
    assert est.peak_bytes == weights + copies + input_fp32 + input_half + relus + loss
    assert est.amp_weight_copies_bytes == copies


def test_mlp_inference_keeps_only_what_is_still_to_be_read() -> None:
    # Inference: at any op, the held input, the op's input and its output are alive: 3 activations, never more.
    est = peak_memory_bytes(mlp(), precision="fp32", mode="inference", settings=EXACT)
    assert est.peak_bytes == 4 * 3168 + 3 * 8192
    assert est.gradients_bytes == est.optimizer_bytes == 0
    assert est.optimizer == "none"


def test_workspace_is_slack_plus_fixed_bytes() -> None:
    settings = MemorySettings(slack=0.01, fixed_bytes=64 * 2**20)
    exact = peak_memory_bytes(mlp(), mode="train", optimizer="adam", settings=EXACT).peak_bytes
    est = peak_memory_bytes(mlp(), mode="train", optimizer="adam", settings=settings)
    assert est.peak_bytes == exact + round(0.01 * exact) + 64 * 2**20
    assert est.workspace_bytes == est.peak_bytes - exact


def test_adam_update_needs_one_more_parameter_sized_temporary() -> None:
    # A wide, shallow model at batch 1: the peak is Adam's update: weights, gradients, 2 moments, sqrt(v).
    graph = mlp(batch=1, width=1024, layers=2)
    params = 2 * (1024 * 1024 + 1024)
    est = peak_memory_bytes(graph, precision="fp32", optimizer="adamw", mode="train", settings=EXACT)
    assert est.phase == "optimizer"
    assert est.peak_bytes == 5 * 4 * params + 4 * 1024  # + the (held) input
    assert (est.gradients_bytes, est.optimizer_bytes) == (4 * params, 3 * 4 * params)


# ---- physics ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_peak_grows_with_batch(precision: str) -> None:
    graph = load_graph(DATA / "mobilenet_v2_b128_train.json.gz")
    peaks = [peak_memory_bytes(graph, batch_size=b, precision=precision, optimizer="sgd").peak_bytes
             for b in (1, 8, 32, 128, 512)]  # fmt: skip
    assert peaks == sorted(peaks) and len(set(peaks)) == len(peaks)
    # activations dominate: 4x the batch is nearly 4x the memory
    assert 3.5 < peaks[4] / peaks[3] < 4.0


def test_rescaled_graph_equals_graph_extracted_at_that_batch() -> None:
    small, big = mlp(batch=8), mlp(batch=64)
    for precision in ("fp32", "fp16"):
        a = peak_memory_bytes(small, batch_size=64, precision=precision, optimizer="adam")
        b = peak_memory_bytes(big, precision=precision, optimizer="adam")
        assert a.peak_bytes == b.peak_bytes


def test_optimizer_state_orders_the_peak() -> None:
    graph = load_graph(DATA / "gpt2_large_lm_b1_train.json.gz")
    peak = {opt: peak_memory_bytes(graph, precision="bf16", optimizer=opt).peak_bytes
            for opt in ("none", "sgd-nomomentum", "sgd", "adam", "adamw")}  # fmt: skip
    assert peak["none"] <= peak["sgd-nomomentum"] < peak["sgd"] < peak["adam"] == peak["adamw"]
    params = graph.total_params
    assert peak["adamw"] - peak["sgd"] > 4 * params  # one more state and Adam's temporary


def test_autocast_halves_most_activations_but_not_the_weights() -> None:
    graph = load_graph(DATA / "mobilenet_v2_b128_train.json.gz")
    fp32 = peak_memory_bytes(graph, precision="fp32", optimizer="sgd")
    for precision in ("bf16", "fp16"):
        amp = peak_memory_bytes(graph, precision=precision, optimizer="sgd")
        assert amp.activations_bytes < 0.6 * fp32.activations_bytes
        assert amp.weights_bytes == fp32.weights_bytes  # fp32 master weights
        assert amp.amp_weight_copies_bytes > 0 == fp32.amp_weight_copies_bytes
    assert peak_memory_bytes(graph, precision="tf32", optimizer="sgd").peak_bytes == fp32.peak_bytes


def test_inference_needs_less_than_training() -> None:
    for name in ("mobilenet_v2_b128_train", "gpt2_large_lm_b1_train"):
        graph = load_graph(DATA / f"{name}.json.gz")
        train = peak_memory_bytes(graph, precision="bf16", optimizer="adamw", mode="train")
        infer = peak_memory_bytes(graph, precision="bf16", mode="inference")
        assert infer.peak_bytes < train.peak_bytes / 2
        assert infer.gradients_bytes == 0 and infer.optimizer_bytes == 0


def test_vocabulary_sized_logits_dominate_a_language_models_loss() -> None:
    graph = lm()
    logits_fp32 = 2 * 128 * 32000 * 4
    with_loss = peak_memory_bytes(graph, precision="bf16", optimizer="none", settings=EXACT)
    without = peak_memory_bytes(graph, precision="bf16", optimizer="none", with_loss=False, settings=EXACT)
    assert with_loss.peak_bytes - without.peak_bytes >= 2 * logits_fp32
    assert with_loss.peak_op == "cross-entropy"


def test_a_tied_lm_head_still_casts_its_weight_under_autocast() -> None:
    # The head's params are 0 in the graph (counted at the embedding), but it multiplies by the whole matrix.
    est = peak_memory_bytes(lm(), precision="bf16", optimizer="none", settings=EXACT)
    assert est.amp_weight_copies_bytes == 2 * 64 * 32000


# ---- op rules -----------------------------------------------------------------------------------------------
def conv_bn_act(act: str, *, inplace: bool, framework_type: str) -> ModelGraph:
    shape = [8, 16, 32, 32]
    ops = [
        Op(id=0, type="input", output_shapes=[shape]),
        Op(id=1, type="conv2d", inputs=[0], output_shapes=[shape], params=16 * 16 * 9),
        Op(id=2, type="batchnorm", inputs=[1], output_shapes=[shape], params=32),
        Op(id=3, type=act, inputs=[2], output_shapes=[shape], framework_type=framework_type,
           attrs={"inplace": inplace}),
        Op(id=4, type="conv2d", inputs=[3], output_shapes=[shape], params=16 * 16 * 9),
    ]  # fmt: skip
    return ModelGraph(framework="synthetic", model_name="block", batch_size=8, ops=ops)


def kept_activations(graph: ModelGraph) -> int:
    return peak_memory_bytes(graph, optimizer="none", with_loss=False, settings=EXACT).activations_bytes


def test_in_place_relu_keeps_its_result_but_in_place_relu6_keeps_a_copy() -> None:
    one = 8 * 16 * 32 * 32 * 4
    relu_inplace = kept_activations(conv_bn_act("relu", inplace=True, framework_type="ReLU"))
    relu = kept_activations(conv_bn_act("relu", inplace=False, framework_type="ReLU"))
    relu6_inplace = kept_activations(conv_bn_act("relu", inplace=True, framework_type="ReLU6"))
    silu_inplace = kept_activations(conv_bn_act("silu", inplace=True, framework_type="SiLU"))
    assert relu_inplace == relu  # in place or not, relu keeps one tensor: its result
    assert relu6_inplace == silu_inplace == relu_inplace + one  # hardtanh/silu need the input: autograd copies it


def attention_graph(*, q_heads: int, kv_heads: int, seq: int = 256) -> ModelGraph:
    q, kv = [2, q_heads, seq, 64], [2, kv_heads, seq, 64]
    ops = [
        Op(id=0, type="input", output_shapes=[[2, seq, 64 * q_heads]]),
        Op(id=1, type="linear", inputs=[0], output_shapes=[q], params=64 * q_heads * 64 * q_heads),
        Op(id=2, type="linear", inputs=[0], output_shapes=[kv], params=64 * q_heads * 64 * kv_heads),
        Op(id=3, type="linear", inputs=[0], output_shapes=[kv], params=64 * q_heads * 64 * kv_heads),
        Op(id=4, type="sdpa", inputs=[1, 2, 3], input_shapes=[q, kv, kv], output_shapes=[q],
           framework_type="F.scaled_dot_product_attention"),
    ]  # fmt: skip
    return ModelGraph(framework="synthetic", model_name="attn", batch_size=2, ops=ops)


def test_fp32_grouped_query_attention_takes_the_math_path() -> None:
    # No fused fp32 kernel takes grouped-query attention: the math path keeps [B, H, S, S] fp32 probabilities.
    # Under autocast flash attention does, and keeps nothing quadratic: only the smaller k and v differ.
    probs = 2 * 8 * 256 * 256 * 4
    smaller_kv = 2 * (2 * 6 * 256 * 64)  # elements k and v lose with 2 instead of 8 heads
    gqa, mha = attention_graph(q_heads=8, kv_heads=2), attention_graph(q_heads=8, kv_heads=8)
    assert kept_activations(gqa) - kept_activations(mha) == probs - 4 * smaller_kv

    def bf16(graph: ModelGraph) -> int:
        return peak_memory_bytes(graph, precision="bf16", optimizer="none", with_loss=False,
                                 settings=EXACT).activations_bytes  # fmt: skip

    assert bf16(gqa) - bf16(mha) == -2 * smaller_kv


def decomposed_attention() -> ModelGraph:
    """`nn.MultiheadAttention` as the tracer sees it: scale q and k, q @ k^T, _safe_softmax, @ v."""
    qkv, head = [3, 2, 128, 256], [2, 4, 128, 64]
    ops = [
        Op(id=0, type="input", output_shapes=[[2, 128, 256]]),
        Op(id=1, type="matmul", inputs=[0], output_shapes=[[256, 768]], params=256 * 768),
        Op(id=2, type="reshape", inputs=[1], output_shapes=[qkv], framework_type="aten.clone"),
        Op(id=3, type="mul", inputs=[2], output_shapes=[head], framework_type="aten.mul"),
        Op(id=4, type="mul", inputs=[2], output_shapes=[[2, 4, 64, 128]], framework_type="aten.mul"),
        Op(id=5, type="bmm", inputs=[3, 4], output_shapes=[[8, 128, 128]], framework_type="aten.bmm"),
        Op(id=6, type="softmax", inputs=[5], output_shapes=[[2, 4, 128, 128]], framework_type="aten._safe_softmax"),
        Op(id=7, type="bmm", inputs=[2, 6], output_shapes=[[8, 128, 64]], framework_type="aten.bmm"),
        Op(id=8, type="linear", inputs=[7], output_shapes=[[2, 128, 256]], params=256 * 256),
    ]  # fmt: skip
    return ModelGraph(framework="synthetic", model_name="mha", batch_size=2, ops=ops)


def test_decomposed_attention_is_priced_as_the_fused_kernel() -> None:
    # Fused: q, k, v (the packed projection) and the output are kept; no scores, no scaled copies.
    one_head_set = 2 * 128 * 256 * 4
    kept = kept_activations(decomposed_attention())
    assert kept == 3 * one_head_set + one_head_set + 2 * 128 * 256 * 4  # qkv, attention output, the input


def test_bad_arguments_say_what_to_use() -> None:
    graph = mlp()
    with pytest.raises(ValueError, match="precision"):
        peak_memory_bytes(graph, precision="int8")
    with pytest.raises(ValueError, match="optimizer"):
        peak_memory_bytes(graph, optimizer="lamb")
    with pytest.raises(ValueError, match="mode"):
        peak_memory_bytes(graph, mode="serve")
    with pytest.raises(ValueError, match="batch"):
        peak_memory_bytes(graph, batch_size=-1)
    graph.ops[2].inputs = [5]  # reads a later op: not a topological order
    with pytest.raises(ValueError, match="topological"):
        peak_memory_bytes(graph)


def test_fits_gpu_leaves_headroom() -> None:
    est = peak_memory_bytes(mlp(), settings=EXACT)
    assert fits_gpu(est, gpu_memory_bytes=est.peak_bytes / 0.95)
    assert not fits_gpu(est, gpu_memory_bytes=est.peak_bytes / 0.96)
    assert set(est.to_dict()) >= {"peak_bytes", "peak_gib", "phase", "activations_bytes", "workspace_bytes"}


# ---- the H100 measurements -----------------------------------------------------------------------------------
def measured_rows() -> list[dict[str, Any]]:
    """The H100 rows from the data in use, else the derived CSV shipped beside this file."""
    source = runtime_dir() / "offpeak-h100" / "h100_models.jsonl"
    if source.is_file():
        rows = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
        return [r for r in rows if "peak_mem_gib" in r]
    return shipped_rows()


def shipped_rows() -> list[dict[str, Any]]:
    with (DATA / "h100_peak_memory.csv").open() as f:
        reader = csv.DictReader(line for line in f if not line.startswith("#"))
        return [{**r, "batch_size": int(r["batch_size"]), "seq_len": int(r["seq_len"]) if r["seq_len"] else None,
                 "peak_mem_gib": float(r["peak_mem_gib"])} for r in reader]  # fmt: skip


def test_shipped_rows_are_the_measured_rows() -> None:
    shipped, measured = shipped_rows(), measured_rows()
    assert len(shipped) == 96
    key = ("model", "batch_size", "seq_len", "mode", "precision", "optimizer")
    assert {tuple(r[k] for k in key): round(r["peak_mem_gib"], 9) for r in shipped} == {
        tuple(r[k] for k in key): round(r["peak_mem_gib"], 9) for r in measured
    }


def test_within_ten_percent_of_the_h100_rows_the_shipped_graphs_cover() -> None:
    graphs = {p.name.removesuffix(".json.gz"): load_graph(p) for p in DATA.glob("*.json.gz")}
    errors: dict[str, float] = {}
    for row in measured_rows():
        for name, graph in graphs.items():
            model, _, mode = name.rpartition("_")
            if model.rsplit("_b", 1)[0] != row["model"] or mode != row["mode"]:
                continue  # a graph answers for its model and mode, at any batch (rescaled)
            est: MemoryEstimate = peak_memory_bytes(graph, batch_size=row["batch_size"], precision=row["precision"],
                                                    optimizer=row["optimizer"], mode=row["mode"])  # fmt: skip
            label = f"{row['model']} b{row['batch_size']} {row['mode']} {row['precision']}"
            errors[label] = est.peak_bytes / (row["peak_mem_gib"] * GIB) - 1
    assert len(errors) >= 20
    worst = max(errors, key=lambda k: abs(errors[k]))
    assert abs(errors[worst]) <= 0.10, f"{worst}: {errors[worst]:+.1%}"
    assert sum(abs(e) for e in errors.values()) / len(errors) <= 0.05


def test_predictions_say_how_much_memory_and_where_it_fits(tiny_model) -> None:
    """The predictor's answer carries the step's peak memory and, per GPU type, whether it fits."""
    from offpeak_predictor.predict import PredictOptions, Predictor

    big = mlp(batch=4096, width=16384, layers=8)  # 8.6 GB of fp32 weights: with gradients and Adam's states > 32 GiB
    out = Predictor(tiny_model).predict(big, ["T4", "A100-SXM4-80GB", "L4"], PredictOptions(optimizer="adam"))
    by_gpu = {o["gpu_type"]: o for o in out}
    assert {o["peak_memory_gib"] for o in out} == {out[0]["peak_memory_gib"]}  # the same job on every GPU
    need = out[0]["peak_memory_gib"]
    assert need > peak_memory_bytes(big, optimizer="sgd").peak_gib  # Adam's two states cost more
    for gpu, o in by_gpu.items():
        assert o["fits_memory"] == (need <= 0.95 * o["gpu_memory_gib"]), gpu
    assert by_gpu["A100-SXM4-80GB"]["fits_memory"] and not by_gpu["T4"]["fits_memory"]
