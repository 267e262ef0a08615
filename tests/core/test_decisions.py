"""Filter/prioritize reasons and scores, and victim choice."""

from __future__ import annotations

import math

import pytest

from offpeak_core.decisions import choose_victims, filter_nodes, prediction_for, prioritize_nodes, window_left
from offpeak_core.model import IdleWindow, NodeView, OfflinePod, PodRequest, Prediction

NOW = 1_000_000.0
H = 3600.0


def node(name: str, *, free: int = 4, total: int = 8, end: float | None = None, gpu: str = "A100-SXM4-40GB",
         wfree: int | None = None, stale: bool = False) -> NodeView:
    return NodeView(name=name, gpu_type=gpu, gpus_total=total, gpus_free_now=free, window_end=end,
                    window_free_gpus=wfree, data_stale=stale)


def pod(gpus: int = 1, **pred: tuple[float, float]) -> PodRequest:
    predicted = {k.replace("_", "-"): Prediction(p50=a, p90=b) for k, (a, b) in pred.items()} if pred else None
    return PodRequest(name="train-0", namespace="ml", gpus=gpus, predicted=predicted)


def test_filter_keeps_nodes_whose_window_outlasts_p90_with_margin() -> None:
    p = pod(**{"A100-SXM4-40GB": (3000.0, H)})
    nodes = [node("long", end=NOW + 2 * H), node("exact", end=NOW + H * 1.15), node("short", end=NOW + H)]
    res = filter_nodes(pod=p, nodes=nodes, now=NOW)
    assert res.passed == ("long", "exact")
    assert set(res.failed) == {"short"}
    assert res.failed["short"].startswith("window ends within 1h, job needs ~1h09m")


def test_reason_matches_human_format() -> None:
    p = pod(**{"A100-SXM4-40GB": (3000.0, 3600.0 + 120)})  # p90 62m -> x1.15 = 71.3m -> 1h12m
    res = filter_nodes(pod=p, nodes=[node("n1", end=NOW + 41 * 60)], now=NOW)
    assert res.failed["n1"] == "window ends within 41m, job needs ~1h12m (p90 x1.15) on A100-SXM4-40GB"


def test_filter_rejects_when_gpus_not_free_now_even_without_prediction() -> None:
    res = filter_nodes(pod=pod(gpus=4), nodes=[node("full", free=2), node("ok", free=4)], now=NOW)
    assert res.passed == ("ok",)
    assert res.failed["full"] == "needs 4 GPU(s), 2 of 8 free now"


def test_runtime_blind_pod_only_needs_to_fit_now() -> None:
    res = filter_nodes(pod=pod(), nodes=[node("closing", end=NOW + 1.0)], now=NOW)
    assert res.passed == ("closing",)


def test_stale_node_degrades_to_fits_now() -> None:
    p = pod(**{"A100-SXM4-40GB": (H, 2 * H)})
    res = filter_nodes(pod=p, nodes=[node("stale", end=NOW + 60, stale=True), node("fresh", end=NOW + 60)], now=NOW)
    assert res.passed == ("stale",)
    assert "fresh" in res.failed


def test_open_window_fits_any_job() -> None:
    p = pod(**{"A100-SXM4-40GB": (100 * H, 200 * H)})
    assert filter_nodes(pod=p, nodes=[node("open", end=None)], now=NOW).passed == ("open",)


def test_window_too_small_for_requested_gpus() -> None:
    p = pod(gpus=4, **{"A100-SXM4-40GB": (H, H)})
    res = filter_nodes(pod=p, nodes=[node("n", free=4, end=NOW + 10 * H, wfree=2)], now=NOW)
    assert res.failed["n"].startswith("no idle window for 4 GPU(s) now")


def test_nested_windows_pick_the_level_of_the_request() -> None:
    n = NodeView("n", "A100-SXM4-40GB", 8, 4, windows=(
        IdleWindow(start=NOW - 10, end=NOW + 5 * H, free_gpus=1),
        IdleWindow(start=NOW - 10, end=NOW + H, free_gpus=4),
    ))
    assert window_left(node=n, gpus=1, now=NOW) == pytest.approx(5 * H)
    assert window_left(node=n, gpus=3, now=NOW) == pytest.approx(H)
    assert window_left(node=n, gpus=5, now=NOW) == 0.0
    p = pod(gpus=2, **{"A100-SXM4-40GB": (2 * H, 2 * H)})
    assert filter_nodes(pod=p, nodes=[n], now=NOW).passed == ()
    p1 = pod(gpus=1, **{"A100-SXM4-40GB": (2 * H, 2 * H)})
    assert filter_nodes(pod=p1, nodes=[n], now=NOW).passed == ("n",)


def test_prediction_lookup_prefix_and_unknown_type_is_conservative() -> None:
    preds = {"A100-SXM4-40GB": Prediction(10, 20), "T4": Prediction(50, 90)}
    assert prediction_for(preds, "a100") == (preds["A100-SXM4-40GB"], True)
    assert prediction_for(preds, "V100") == (preds["T4"], False)
    assert prediction_for({"A10": Prediction(1, 2), "T4": Prediction(50, 90)}, "A100-SXM4-40GB")[1] is False
    res = filter_nodes(pod=PodRequest("p", predicted=preds), nodes=[node("v", gpu="V100", end=NOW + 60)], now=NOW)
    assert "slowest known GPU type" in res.failed["v"]


def test_negative_margin_rejected() -> None:
    with pytest.raises(ValueError):
        filter_nodes(pod=pod(), nodes=[], now=NOW, margin=-0.1)


def test_prioritize_prefers_tightest_fitting_window() -> None:
    p = pod(**{"A100-SXM4-40GB": (H, H)})
    nodes = [node("tight", end=NOW + 1.3 * H), node("loose", end=NOW + 10 * H), node("open", end=None),
             node("too-short", end=NOW + 0.5 * H)]
    s = prioritize_nodes(pod=p, nodes=nodes, now=NOW)
    assert s["tight"] > s["loose"] >= s["open"] >= 1
    assert s["too-short"] == 0
    assert all(0 <= v <= 10 for v in s.values())


def test_prioritize_prefers_gpu_type_where_job_finishes_soonest() -> None:
    p = pod(**{"H100-SXM5-80GB": (H, H), "T4": (4 * H, 4 * H)})
    nodes = [node("h100", gpu="H100-SXM5-80GB", end=None), node("t4", gpu="T4", end=None)]
    s = prioritize_nodes(pod=p, nodes=nodes, now=NOW)
    assert s["h100"] > s["t4"]


def test_prioritize_bin_packs_runtime_blind_pods() -> None:
    s = prioritize_nodes(pod=pod(gpus=2), nodes=[node("snug", free=2), node("roomy", free=8), node("no", free=1)],
                         now=NOW)
    assert s == {"snug": 10, "roomy": 2, "no": 0}


def test_victims_prefer_checkpointing_then_least_progress() -> None:
    n = node("n", free=0)
    pods = [
        OfflinePod("old", gpus=1, elapsed_seconds=9000),
        OfflinePod("young", gpus=1, elapsed_seconds=100),
        OfflinePod("ckpt", gpus=1, checkpointing=True, elapsed_seconds=50000, seconds_since_checkpoint=600),
    ]
    assert [p.name for p in choose_victims(node=n, online_gpus_needed=1, offline_pods=pods)] == ["ckpt"]
    assert [p.name for p in choose_victims(node=n, online_gpus_needed=2, offline_pods=pods)] == ["ckpt", "young"]


def test_victims_drop_unnecessary_and_count_free_gpus() -> None:
    pods = [OfflinePod("small", gpus=1, elapsed_seconds=10), OfflinePod("big", gpus=4, elapsed_seconds=20)]
    # 4 needed: small first (least work) then big covers it alone -> small is unnecessary
    assert [p.name for p in choose_victims(node=node("n", free=0), online_gpus_needed=4, offline_pods=pods)] == ["big"]
    assert choose_victims(node=node("n", free=3), online_gpus_needed=3, offline_pods=pods) == []
    assert [p.name for p in choose_victims(node=node("n", free=2), online_gpus_needed=3, offline_pods=pods)] == ["small"]


def test_a_gang_worker_risks_its_whole_gangs_work() -> None:
    """Evicting one worker of a gang stops every worker, so it loses the work on all of the gang's GPUs: an
    independent pod with more of its own work at risk goes first (counted per pod, the worker looked cheaper)."""
    worker = OfflinePod("ddp-worker-0", gpus=1, checkpointing=True, elapsed_seconds=900, seconds_since_checkpoint=300,
                        gang_gpus=16)
    solo = OfflinePod("solo", gpus=1, checkpointing=True, elapsed_seconds=900, seconds_since_checkpoint=600)
    assert worker.work_at_risk_seconds == 300 * 16 and solo.work_at_risk_seconds == 600
    got = choose_victims(node=node("n", free=0), online_gpus_needed=1, offline_pods=[worker, solo])
    assert [p.name for p in got] == ["solo"]
    assert OfflinePod("alone", gpus=2, elapsed_seconds=10, gang_gpus=0).work_at_risk_seconds == 20


def test_victims_best_effort_when_not_enough() -> None:
    pods = [OfflinePod("a", gpus=1), OfflinePod("b", gpus=1)]
    got = choose_victims(node=node("n", free=0), online_gpus_needed=5, offline_pods=pods)
    assert {p.name for p in got} == {"a", "b"}


def test_work_at_risk() -> None:
    assert OfflinePod("x", gpus=2, elapsed_seconds=100).work_at_risk_seconds == 200
    assert OfflinePod("x", gpus=2, checkpointing=True, elapsed_seconds=100,
                      seconds_since_checkpoint=30).work_at_risk_seconds == 60
    assert math.isinf(IdleWindow(0, None, 1).length(5))


def test_empty_windows_tuple_means_no_window_not_open_ended() -> None:
    p = pod(**{"A100-SXM4-40GB": (60.0, 60.0)})
    none_given = NodeView("a", "A100-SXM4-40GB", 8, 4)  # windows=None: window_end None -> open-ended
    no_window = NodeView("b", "A100-SXM4-40GB", 8, 4, windows=())
    res = filter_nodes(pod=p, nodes=[none_given, no_window], now=NOW)
    assert res.passed == ("a",)
    assert res.failed["b"].startswith("no idle window for 1 GPU(s) now")


def test_reasons_have_no_percent_sign() -> None:
    """kube-scheduler formats reasons printf-style: a '%' would come out as '%!)(MISSING)' in kubectl describe."""
    p = pod(gpus=2, **{"A100-SXM4-40GB": (H, H)})
    nodes = [node("a", end=NOW + 60), node("b", free=1), node("c", gpu="V100", end=NOW + 60), node("d", wfree=1)]
    for margin in (0.0, 0.15, 0.333):
        assert all("%" not in r for r in filter_nodes(pod=p, nodes=nodes, now=NOW, margin=margin).failed.values())


def test_checkpoint_aware_rule_caps_needed_window_when_enabled() -> None:
    preds = {"A100-SXM4-40GB": Prediction(p50=4 * H, p90=5 * H)}
    ck = PodRequest("ck", gpus=1, predicted=preds, checkpointing=True, checkpoint_interval_seconds=600.0)
    no_ck = PodRequest("plain", gpus=1, predicted=preds, checkpoint_interval_seconds=600.0)
    nodes = [node("one-hour", end=NOW + H)]
    assert filter_nodes(pod=ck, nodes=nodes, now=NOW).passed == ()  # off by default: needs 5h45m
    assert filter_nodes(pod=ck, nodes=nodes, now=NOW, checkpoint_intervals=4).passed == ("one-hour",)  # 40m
    tight = filter_nodes(pod=ck, nodes=nodes, now=NOW, checkpoint_intervals=9)  # 90m > 1h
    assert tight.failed["one-hour"] == (
        "window ends within 1h, job needs ~1h30m (p90 x1.15 capped at a few checkpoints) on A100-SXM4-40GB")
    assert filter_nodes(pod=no_ck, nodes=nodes, now=NOW, checkpoint_intervals=4).passed == ()  # not checkpointing
    assert prioritize_nodes(pod=ck, nodes=nodes, now=NOW, checkpoint_intervals=4)["one-hour"] >= 1


def test_a_gpu_type_too_small_for_the_job_is_never_chosen_whatever_its_window() -> None:
    small = Prediction(p50=600.0, p90=700.0, peak_memory_gib=31.0, gpu_memory_gib=22.4, fits_memory=False)
    big = Prediction(p50=900.0, p90=1000.0, peak_memory_gib=31.0, gpu_memory_gib=74.5, fits_memory=True)
    p = PodRequest(name="train-0", namespace="ml", gpus=1, predicted={"L4": small, "H100-SXM5-80GB": big})
    nodes = [node("l4", gpu="L4", end=None), node("l4-stale", gpu="L4", stale=True),
             node("h100", gpu="H100-SXM5-80GB", end=NOW + 2 * H)]
    res = filter_nodes(pod=p, nodes=nodes, now=NOW)
    assert res.passed == ("h100",)
    assert res.failed["l4"] == "needs ~31 GiB of GPU memory: does not fit L4 (22 GiB)"
    assert res.failed["l4-stale"] == res.failed["l4"]  # a stale forecast does not make the GPU bigger
    assert prioritize_nodes(pod=p, nodes=nodes, now=NOW)["l4"] == 0


def test_unknown_memory_verdict_places_by_time_alone() -> None:
    unknown = Prediction(p50=600.0, p90=700.0)  # an older predictor, or a fallback prediction
    p = PodRequest(name="train-0", namespace="ml", gpus=1, predicted={"L4": unknown})
    assert filter_nodes(pod=p, nodes=[node("l4", gpu="L4", end=None)], now=NOW).passed == ("l4",)
