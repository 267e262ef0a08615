"""Features, step composition and a tiny trained model predicting without HTTP."""

import math

import numpy as np
import pytest

from offpeak_predictor.features import (
    base_times, conv2d_cost, distinct_ops, gemm_cost, make_op_table, op_feature_matrix,
)
from offpeak_predictor.features import ALL_OP_FEATURES
from offpeak_predictor.gpus import resolve_gpu
from offpeak_predictor.graphfeatures import STEP_FEATURES, StepContext, step_composition, step_features, summarise
from offpeak_predictor.model import RuntimeModel

from .conftest import mlp_graph


def test_gemm_and_conv_costs():
    flops, nbytes = gemm_cost(batch=2, m=3, k_in=4, n_out=5, dtype_bytes=4)
    assert flops == 2 * 2 * 3 * 4 * 5
    assert nbytes == 4 * 2 * (3 * 4 + 4 * 5 + 3 * 5)
    flops, _, out = conv2d_cost(batch=1, c_in=3, c_out=8, kernel=3, size=32, stride=1, padding=1, dtype_bytes=4)
    assert out == 8 * 32 * 32 and flops == 2 * out * 3 * 9
    _, _, out = conv2d_cost(batch=1, c_in=3, c_out=8, kernel=3, size=32, stride=2, padding=0, dtype_bytes=4)
    assert out == 8 * 15 * 15


def test_roofline_base_time_is_compute_or_memory_bound():
    table = make_op_table(op_class=["gemm", "elementwise"], flops=[2e12, 1e6], bytes_=[1e6, 4e9],
                          out_numel=[1e6, 1e6], lead_dim=[1, 1], dtype_bytes=[4, 4])  # fmt: skip
    a100 = resolve_gpu("A100")
    base = base_times(table, a100, "fp32")
    assert base[0] == pytest.approx(2e12 / 19.5e12, rel=1e-3)  # compute bound on CUDA cores
    assert base[1] == pytest.approx(4e9 / 1555e9, rel=1e-2)  # memory bound
    fp16 = base_times(table, a100, "fp16")
    assert fp16[0] < base[0] / 10  # tensor cores for the GEMM
    feats = op_feature_matrix(table, a100, "fp32")
    assert feats.shape == (2, len(ALL_OP_FEATURES)) and np.isfinite(feats).all()


def test_summary_drops_free_ops_and_keeps_totals():
    g = mlp_graph(batch=32, width=512, layers=3)
    s = summarise(g)
    assert len(summarise(g, as_traced=True).ops) == 6  # input dropped
    assert len(s.ops) == 6 + 2  # and the loss on the logits added: log-softmax and NLL (fp32: no cast)
    assert s.ops.flops.sum() == pytest.approx(g.total_flops_forward)
    assert s.params == g.total_params and s.key == g.content_hash()


def test_training_step_costs_more_than_inference_and_optimizer_adds_traffic():
    s = summarise(mlp_graph())
    gpu = resolve_gpu("T4")
    fwd = np.full(len(s.ops), 1e-4)
    infer, _ = step_composition(summary=s, op_seconds=fwd, gpu=gpu, ctx=StepContext(mode="inference"))
    train_none, _ = step_composition(summary=s, op_seconds=fwd, gpu=gpu, ctx=StepContext(optimizer="none"))
    train_adam, per_class = step_composition(summary=s, op_seconds=fwd, gpu=gpu, ctx=StepContext(optimizer="adam"))
    assert infer == pytest.approx(fwd.sum())
    assert train_none > 2 * infer
    assert train_adam > train_none
    feats = step_features(summary=s, base_step=train_adam, per_class=per_class, gpu=gpu, ctx=StepContext())
    assert len(feats) == len(STEP_FEATURES) and all(math.isfinite(f) for f in feats)


def test_optimizer_traffic_follows_how_the_framework_implements_it():
    """PyTorch's foreach Adam makes a pass per arithmetic step (AdamW one more for its weight decay, fp16 one more
    for GradScaler's unscale); TensorFlow's fused training ops move only what they must."""
    s = summarise(mlp_graph(batch=8, width=4096, layers=4))  # 67 M parameters, little compute
    gpu = resolve_gpu("H100")
    fwd = np.full(len(s.ops), 1e-3)  # GPU-bound: the host's launch floor stays below it

    def step(**ctx: str) -> float:
        return step_composition(summary=s, op_seconds=fwd, gpu=gpu, ctx=StepContext(**ctx))[0]

    none, sgd, adam, adamw = (step(optimizer=o) for o in ("none", "sgd", "adam", "adamw"))
    assert none < sgd < adam < adamw
    # Adam's seven passes over fp32 tensors (72 bytes a parameter) at the H100's bandwidth.
    assert adam - none == pytest.approx(s.params * 72 / gpu.bandwidth_bytes, rel=1e-6)
    assert step(optimizer="adam", precision="fp16") > step(optimizer="adam", precision="bf16")
    tf_adam, tf_none = step(optimizer="adam", framework="tensorflow"), step(optimizer="none", framework="tensorflow")
    assert tf_adam - tf_none == pytest.approx(s.params * 32 / gpu.bandwidth_bytes, rel=1e-6)
    assert step(mode="inference", optimizer="adamw") == step(mode="inference", optimizer="none")


def test_tiny_model_predicts_unseen_gpu_and_orders_gpus_sensibly(tiny_model):
    g = summarise(mlp_graph(batch=256, width=4096, layers=6))
    preds = {name: tiny_model.predict_step(g, resolve_gpu(name), StepContext()) for name in ("P4", "A100", "H100")}
    for p in preds.values():
        assert p.step_seconds > 0 and p.step_seconds_p90 >= p.step_seconds
    # A 6-layer 4096-wide MLP at batch 256 is compute bound: a P4 (5.5 TFLOPS) must be slower than an H100.
    assert preds["P4"].step_seconds > preds["H100"].step_seconds


def test_model_round_trips_through_its_file(tiny_model, tmp_path):
    path = tmp_path / "m.json.gz"
    tiny_model.save(path)
    loaded = RuntimeModel.load(path)
    g = summarise(mlp_graph())
    a = tiny_model.predict_step(g, resolve_gpu("V100-PCIE-32GB"), StepContext())
    b = loaded.predict_step(g, resolve_gpu("V100-PCIE-32GB"), StepContext())
    assert a.step_seconds == pytest.approx(b.step_seconds, rel=1e-9)
    assert loaded.training_summary["op_rows"] > 0


def test_repeated_ops_are_priced_once_and_every_op_as_if_alone(tiny_model):
    # row 0 repeated (rows 1, 5); rows 2, 3, 4, 6 and 7 each differ from it in one column only (FLOPs, bytes,
    # batch-like dimension, class, dtype)
    cols = dict(op_class=["gemm", "gemm", "gemm", "gemm", "gemm", "gemm", "elementwise", "gemm"],
                flops=[2e9, 2e9, 4e9, 2e9, 2e9, 2e9, 2e9, 2e9], bytes_=[4e6, 4e6, 4e6, 8e6, 4e6, 4e6, 4e6, 4e6],
                out_numel=[1e6] * 8, lead_dim=[64, 64, 64, 64, 32, 64, 64, 64],
                dtype_bytes=[4, 4, 4, 4, 4, 4, 4, 2])  # fmt: skip
    table = make_op_table(**cols)
    ops = distinct_ops(table)
    assert len(ops.table) == 6 and ops.inverse[0] == ops.inverse[1] == ops.inverse[5]
    for name in ("T4", "H100"):
        gpu = resolve_gpu(name)
        alone = [tiny_model._price_ops(make_op_table(**{k: [v[i]] for k, v in cols.items()}), gpu, "fp32")[0]
                 for i in range(len(table))]  # fmt: skip
        np.testing.assert_allclose(tiny_model._price_ops(table, gpu, "fp32"), alone, rtol=1e-12)


def test_a_summary_carries_its_distinct_ops_for_every_gpu(tiny_model):
    s = summarise(mlp_graph(batch=16, width=256, layers=5))
    assert len(s.distinct.table) < len(s.ops) and len(s.distinct.inverse) == len(s.ops)
    np.testing.assert_array_equal(s.distinct.table.flops[s.distinct.inverse], s.ops.flops)
    gpu = resolve_gpu("L4")
    np.testing.assert_array_equal(tiny_model.op_seconds(s, gpu, "bf16"), tiny_model._price_ops(s.ops, gpu, "bf16"))


def test_batch_prediction_matches_single(tiny_model):
    g = summarise(mlp_graph(batch=16))
    items = [(g, resolve_gpu(n), StepContext()) for n in ("T4", "L4", "H200")]
    batch = tiny_model.predict_steps_batch(items)
    single = [tiny_model.predict_step(*it) for it in items]
    assert [round(b.step_seconds, 12) for b in batch] == [round(s.step_seconds, 12) for s in single]


def test_shipped_default_model_loads_and_predicts():
    model = RuntimeModel.load()
    assert model.version.startswith("offpeak-rt-")
    assert model.training_summary["model_rows"] > 100
    s = summarise(mlp_graph(batch=128, width=2048))
    t4 = model.predict_step(s, resolve_gpu("T4"), StepContext()).step_seconds
    h100 = model.predict_step(s, resolve_gpu("H100"), StepContext()).step_seconds
    assert 0 < h100 < t4


def test_many_tiny_ops_are_floored_by_host_launch_time():
    from offpeak_predictor.graphfeatures import host_seconds

    s = summarise(mlp_graph(batch=1, width=8, layers=200))
    gpu = resolve_gpu("H100")
    tiny = np.full(len(s.ops), 1e-7)  # GPU work far below launch cost
    total, _ = step_composition(summary=s, op_seconds=tiny, gpu=gpu, ctx=StepContext(optimizer="sgd"))
    host = host_seconds(s, StepContext(optimizer="sgd"))
    assert total == pytest.approx(host)
    assert host == pytest.approx((400 + 2) * 8e-6 * 3 + 200 * 2e-5)  # 400 layer ops and the loss (log-softmax, NLL)
    # Graph-mode frameworks (TensorFlow rows) have no per-op host floor.
    tf_total, _ = step_composition(summary=s, op_seconds=tiny, gpu=gpu,
                                   ctx=StepContext(optimizer="sgd", framework="tensorflow"))  # fmt: skip
    assert tf_total < host / 10
