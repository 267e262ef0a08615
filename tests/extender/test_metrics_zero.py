"""Labelled counters export every known label value at 0 before the first event, so increase()/rate() see it."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from offpeak_core.evictions import REASON_PENDING, REASON_PRESSURE
from offpeak_extender.metrics import (
    FILTER_REASON_KINDS,
    EvictorMetrics,
    ExtenderMetrics,
    count_grouped_reason_kinds,
    count_reason_kinds,
    reason_kind,
)


def test_evictor_counters_start_at_zero_for_every_reason() -> None:
    registry = CollectorRegistry()
    metrics = EvictorMetrics.create(registry)
    for reason in (REASON_PENDING, REASON_PRESSURE):
        assert registry.get_sample_value("offpeak_evictions_total", {"reason": reason}) == 0
        assert registry.get_sample_value("offpeak_eviction_failures_total", {"reason": reason}) == 0
    metrics.evictions.labels(REASON_PRESSURE).inc()
    assert registry.get_sample_value("offpeak_evictions_total", {"reason": REASON_PRESSURE}) == 1
    assert registry.get_sample_value("offpeak_evictions_total", {"reason": REASON_PENDING}) == 0


def test_extender_counters_start_at_zero_for_every_reason_and_outcome() -> None:
    registry = CollectorRegistry()
    ExtenderMetrics.create(registry)
    for kind in ("gpus_not_free_now", "window_too_short", "no_window", "unknown_node", "other"):
        assert registry.get_sample_value("offpeak_extender_filtered_out_total", {"reason": kind}) == 0
    for verb, outcome in [("filter", "managed"), ("filter", "passthrough"), ("filter", "error"),
                          ("filter", "bad-prediction"), ("prioritize", "managed"), ("prioritize", "passthrough"),
                          ("prioritize", "error")]:
        assert registry.get_sample_value("offpeak_extender_requests_total", {"verb": verb, "outcome": outcome}) == 0
    for verb in ("filter", "prioritize"):
        assert registry.get_sample_value("offpeak_extender_decision_seconds_count", {"verb": verb}) == 0


def test_every_reason_kind_is_pre_initialised() -> None:
    for reason in ("needs 2 GPUs, 1 free", "window ends within 3m", "no idle window", "unknown node x", "anything"):
        assert reason_kind(reason) in FILTER_REASON_KINDS


def test_count_reason_kinds_agrees_with_reason_kind() -> None:
    reasons = ["needs 2 GPU(s), 1 of 8 free now", "window ends within 3m, job needs ~1h", "window ends within 41m, x",
               "no idle window for 4 GPU(s) now", "unknown node x", "no", "", "window ends", "something else"]
    expected: dict[str, int] = {}
    for r in reasons:
        expected[reason_kind(r)] = expected.get(reason_kind(r), 0) + 1
    assert dict(count_reason_kinds(reasons)) == expected


def test_grouped_reason_kinds_count_each_reason_as_often_as_nodes_got_it() -> None:
    reasons = ["needs 2 GPU(s), 1 of 8 free now", "window ends within 3m, job needs ~1h", "window ends within 41m, x",
               "no idle window for 4 GPU(s) now", "gang of 2 has no room", "", "something else", "needs 2 GPU(s), 0"]
    nodes = [3, 1, 4, 0, 2, 5, 1, 7]
    expanded = [r for r, n in zip(reasons, nodes) for _ in range(n)]
    assert count_grouped_reason_kinds(reasons, nodes) == count_reason_kinds(expanded)
    assert "no_window" not in count_grouped_reason_kinds(reasons, nodes)  # no node got it
