"""`offpeak collect --plan new-gpu`: the plan (pure), its op costs, and one quick run on CPU end to end."""

import json

import pandas as pd
import pytest

from offpeak.cli import main
from offpeak_predictor.collectplan import (
    FULL, QUICK, ModelWorkload, OpWorkload, amp_dtype, new_gpu_plan, op_class_of, op_row_cost, plan_summary,
)  # fmt: skip
from offpeak_predictor.db import BenchmarkDB
from offpeak_predictor.graphcache import get_graph
from offpeak_predictor.loaders import graph_args_of


def test_full_plan_spans_launch_to_compute_bound_ops_and_both_models_in_both_precisions():
    plan = new_gpu_plan(amp="bf16", quick=False)
    assert {w.precision for w in plan} == {"fp32", "bf16"}
    gemms = [w for w in plan if isinstance(w, OpWorkload) and w.kind == "gemm" and w.precision == "fp32"]
    sides = sorted(w.dim("m") for w in gemms)
    assert sides[0] <= 256 and sides[-1] >= 8192  # launch-bound to compute-bound
    assert all(w.dim("m") == w.dim("n") == w.dim("k") for w in gemms)
    for precision in ("fp32", "bf16"):
        kinds = {w.kind for w in plan if w.precision == precision}
        assert kinds == {"gemm", "conv", "attention", "cnn", "transformer"}
    # conv and attention also time the backward pass; a GEMM forward only
    assert all(w.backward for w in plan if isinstance(w, OpWorkload) and w.kind in ("conv", "attention"))
    assert not any(w.backward for w in gemms)
    # ops come first: they are cheap, and a broken op setup shows before the models run
    first_model = next(i for i, w in enumerate(plan) if isinstance(w, ModelWorkload))
    assert all(isinstance(w, ModelWorkload) for w in plan[first_model:])
    assert plan_summary(plan)["gemm"] == 2 * len(FULL.gemm)


def test_full_plan_times_depthwise_and_small_channel_pointwise_convolutions_in_both_precisions():
    # the kernels MobileNet/EfficientNet-like nets spend their time in, which no other op row in our data has
    for precision in ("fp32", "bf16"):
        convs = [w for w in new_gpu_plan(amp="bf16", quick=False)
                 if isinstance(w, OpWorkload) and w.kind == "conv" and w.precision == precision]  # fmt: skip
        depthwise = [w for w in convs if w.groups > 1]
        assert depthwise and all(w.groups == w.dim("c") == w.dim("k") for w in depthwise)
        assert {w.dim("r") for w in depthwise} >= {3, 5} and any(w.dim("stride") == 2 for w in depthwise)
        pointwise = [w for w in convs if w.dim("r") == 1 and w.groups == 1]
        assert min(min(w.dim("c"), w.dim("k")) for w in pointwise) <= 32  # small-channel, not only 256 -> 64
        assert all(w.backward for w in depthwise + pointwise)


def test_quick_plan_is_the_same_plan_with_smaller_sizes():
    full, quick = new_gpu_plan(amp="bf16", quick=False), new_gpu_plan(amp="bf16", quick=True)
    assert plan_summary(quick).keys() == plan_summary(full).keys()
    assert max(w.dim("m") for w in quick if isinstance(w, OpWorkload) and w.kind == "gemm") == max(QUICK.gemm) < 1024
    assert all(w.steps == QUICK.model_steps for w in quick if isinstance(w, ModelWorkload))


def test_no_amp_leaves_amp_rows_out_and_bad_amp_is_refused():
    assert {w.precision for w in new_gpu_plan(amp=None, quick=True)} == {"fp32"}
    with pytest.raises(ValueError, match="amp"):
        new_gpu_plan(amp="fp8", quick=True)


def test_amp_dtype_by_device():
    assert amp_dtype(device_type="cuda", bf16_supported=True) == "bf16"
    assert amp_dtype(device_type="cuda", bf16_supported=False) == "fp16"  # V100, T4
    assert amp_dtype(device_type="cpu", bf16_supported=False) == "bf16"  # CPU autocast is bf16
    assert amp_dtype(device_type="mps", bf16_supported=True) is None


def test_op_costs_match_the_loaders_formulas():
    gemm = OpWorkload("gemm", "bf16", (("m", 1024), ("n", 512), ("k", 256)), reps=1)
    cost = op_row_cost(gemm)
    assert cost["flops"] == 2 * 1024 * 512 * 256
    assert cost["bytes"] == 2 * (1024 * 256 + 256 * 512 + 1024 * 512)
    assert cost["dtype_bytes"] == 2 and cost["lead_dim"] == 1024
    conv = OpWorkload("conv", "fp32", (("n", 32), ("c", 64), ("k", 128), ("hw", 56), ("r", 3), ("stride", 2)), 1)
    cost = op_row_cost(conv)
    assert cost["out_numel"] == 32 * 128 * 28 * 28  # "same" padding, stride 2
    assert cost["flops"] == 2 * 32 * 128 * 28 * 28 * 64 * 9
    depthwise = OpWorkload("conv", "bf16", (("n", 8), ("c", 96), ("k", 96), ("hw", 28), ("r", 5), ("stride", 1),
                                            ("g", 96)), 1)  # fmt: skip
    cost = op_row_cost(depthwise)
    assert cost["flops"] == 2 * 8 * 96 * 28 * 28 * 25  # each output reads one channel's 5 x 5
    assert cost["bytes"] == 2 * (8 * 96 * 28 * 28 + 96 * 25 + 8 * 96 * 28 * 28)
    assert conv.groups == 1 and depthwise.groups == 96
    attn = OpWorkload("attention", "fp32", (("b", 2), ("h", 4), ("s", 128), ("d", 64)), 1, backward=True)
    assert op_row_cost(attn)["flops"] == 2 * 2 * 4 * 128 * 128 * 64  # causal: half of 4*b*h*s^2*d
    assert op_class_of(attn) == "gemm" and op_class_of(conv) == "conv"


def test_new_gpu_plan_runs_on_cpu_end_to_end(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OFFPEAK_GRAPH_CACHE", str(tmp_path / "graphs"))
    db_path = tmp_path / "c.sqlite"
    assert main(["collect", "--plan", "new-gpu", "--device", "cpu", "--db", str(db_path),
                 "--gpu-type", "A100-SXM4-40GB"]) == 0  # fmt: skip
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    plan = new_gpu_plan(amp="bf16", quick=True)
    n_models = sum(isinstance(w, ModelWorkload) for w in plan)
    n_ops = sum(2 if w.backward else 1 for w in plan if isinstance(w, OpWorkload))
    assert (printed["model_rows"], printed["op_rows"]) == (n_models, n_ops)
    assert printed["wall_seconds"] > 0 and printed["gpu"] == "A100-SXM4-40GB"
    db = BenchmarkDB(db_path)
    ops, models = db.read("op_samples"), db.read("model_samples")
    assert len(ops) == n_ops and set(ops["mode"]) == {"fwd", "train"} and (ops["time_s"] > 0).all()
    assert set(ops["precision"]) == {"fp32", "bf16"} and set(ops["op_class"]) == {"gemm", "conv"}
    # the depthwise convolution ran as one (groups = channels): its row's MACs per output are its 3 x 3 window
    conv_rows = ops[ops["op_class"] == "conv"]
    assert sorted(set((conv_rows["flops"] / (2 * conv_rows["out_numel"])).round(6))) == [9.0, 32.0, 144.0]
    assert set(models["family"]) == {"collect-cnn", "collect-transformer"} and (models["time_s"] > 0).all()
    # each model row's graph is readable the way the pipeline reads it, and matches the row
    for _, row in models.iterrows():
        graph = get_graph(graph_args_of(row))
        assert graph.batch_size == row["batch_size"] and graph.precision == row["precision"]
    assert pd.notna(models.loc[models["family"] == "collect-transformer", "seq_len"]).all()


def test_a_grouped_convolution_row_costs_what_the_graph_counts_for_the_same_layer():
    import torch
    from offpeak_graph.extract import extract_module

    for groups in (1, 96):
        layer = torch.nn.Conv2d(96, 96, 5, padding=2, groups=groups, bias=False)
        graph = extract_module(layer, batch_size=8, input_shape=(96, 28, 28), mode="inference", optimizer="none")
        (op,) = [o for o in graph.ops if o.type == "conv2d"]
        dims = (("n", 8), ("c", 96), ("k", 96), ("hw", 28), ("r", 5), ("stride", 1))
        dims += (("g", groups),) if groups > 1 else ()
        cost = op_row_cost(OpWorkload("conv", "fp32", dims, 1))
        assert cost["flops"] == op.flops and cost["bytes"] == op.bytes_read + op.bytes_written
