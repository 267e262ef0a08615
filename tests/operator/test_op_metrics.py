from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from offpeak_operator.metrics import MAX_MODEL_FAMILIES, OperatorMetrics


def value(reg: CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, labels)


def test_phase_gauge_counts_jobs_per_namespace_and_forgets_deleted_ones() -> None:
    m = OperatorMetrics(CollectorRegistry())
    m.set_phase("ns/a", "Running")
    m.set_phase("ns/b", "Running")
    m.set_phase("other/c", "Running")
    m.set_phase("ns/a", "Succeeded")
    assert value(m.registry, "offpeak_jobs", job_namespace="ns", phase="Running") == 1
    assert value(m.registry, "offpeak_jobs", job_namespace="ns", phase="Succeeded") == 1
    assert value(m.registry, "offpeak_jobs", job_namespace="other", phase="Running") == 1
    m.set_phase("ns/b", None)
    assert value(m.registry, "offpeak_jobs", job_namespace="ns", phase="Running") == 0
    assert value(m.registry, "offpeak_jobs", job_namespace="ns", phase="Failed") == 0  # every phase is exported
    m.set_phase("other/c", None)  # the namespace's last job: its series go
    assert value(m.registry, "offpeak_jobs", job_namespace="other", phase="Running") is None
    assert value(m.registry, "offpeak_jobs", job_namespace="other", phase="Failed") is None


def test_waiting_jobs_are_counted_by_reason_and_stay_at_zero_while_the_namespace_has_jobs() -> None:
    m = OperatorMetrics(CollectorRegistry())
    m.set_phase("ns/a", "Waiting", reason="WaitingForWindow")
    m.set_phase("ns/b", "Waiting", reason="Unschedulable")
    m.set_phase("ns/c", "Pending")  # no reason yet: the phase says why
    assert value(m.registry, "offpeak_jobs_waiting", job_namespace="ns", reason="WaitingForWindow") == 1
    assert value(m.registry, "offpeak_jobs_waiting", job_namespace="ns", reason="Unschedulable") == 1
    assert value(m.registry, "offpeak_jobs_waiting", job_namespace="ns", reason="Pending") == 1
    m.set_phase("ns/a", "Running", reason="Running")
    assert value(m.registry, "offpeak_jobs_waiting", job_namespace="ns", reason="WaitingForWindow") == 0
    assert value(m.registry, "offpeak_jobs_waiting", job_namespace="ns", reason="Running") is None
    for job in ("ns/a", "ns/b", "ns/c"):
        m.set_phase(job, None)
    assert value(m.registry, "offpeak_jobs_waiting", job_namespace="ns", reason="WaitingForWindow") is None


def _families(m: OperatorMetrics) -> set[str]:
    return {sample.labels["model_family"] for metric in m.registry.collect() for sample in metric.samples
            if metric.name == "offpeak_prediction_error_ratio"}


def test_model_families_from_users_graphs_are_bounded() -> None:
    """3,000 distinct families made 4 MB of /metrics: only the first few keep a label, the rest are `other`."""
    m = OperatorMetrics(CollectorRegistry())
    for i in range(3000):
        m.job_finished(job=f"j{i}", namespace="ns", gpu_type="T4", model_family=f"family-{i}", predicted_seconds=10,
                       actual_seconds=12)
    assert _families(m) == {f"family-{i}" for i in range(MAX_MODEL_FAMILIES)} | {"other"}
    assert value(m.registry, "offpeak_prediction_error_ratio_count", gpu_type="T4", model_family="other") == (
        3000 - MAX_MODEL_FAMILIES)
    assert len(generate_latest(m.registry)) < 1_000_000  # the per-job gauges are bounded too (2,000 jobs)


def test_stale_model_families_give_their_place_back_and_their_series_are_removed() -> None:
    now = [0.0]
    m = OperatorMetrics(CollectorRegistry(), max_model_families=2, model_family_stale_seconds=3600,
                        clock=lambda: now[0])
    for gpu in ("T4", "L4"):
        m.job_finished(job=f"old-{gpu}", namespace="ns", gpu_type=gpu, model_family="old", predicted_seconds=10,
                       actual_seconds=12)
    m.job_finished(job="busy", namespace="ns", gpu_type="T4", model_family="busy", predicted_seconds=10,
                   actual_seconds=12)
    now[0] = 3000.0
    m.job_finished(job="busy2", namespace="ns", gpu_type="T4", model_family="busy", predicted_seconds=10,
                   actual_seconds=12)
    m.job_finished(job="new", namespace="ns", gpu_type="T4", model_family="new", predicted_seconds=10,
                   actual_seconds=12)
    assert _families(m) == {"old", "busy", "other"}  # full: `new` shares `other`
    now[0] = 4000.0  # `old` unseen for over an hour, `busy` seen 1000 s ago
    m.job_finished(job="new2", namespace="ns", gpu_type="T4", model_family="new", predicted_seconds=10,
                   actual_seconds=12)
    assert _families(m) == {"busy", "new", "other"}
    for gpu in ("T4", "L4"):
        assert value(m.registry, "offpeak_prediction_error_ratio_count", gpu_type=gpu, model_family="old") is None


def test_job_finished_gives_grafana_predicted_vs_actual() -> None:
    m = OperatorMetrics(CollectorRegistry())
    m.job_finished(job="j", namespace="ns", gpu_type="T4", model_family="", predicted_seconds=100, actual_seconds=150)
    labels = {"trainingjob": "j", "job_namespace": "ns", "gpu_type": "T4", "model_family": "unknown"}
    assert value(m.registry, "offpeak_job_predicted_seconds", **labels) == 100
    assert value(m.registry, "offpeak_job_actual_seconds", **labels) == 150
    # `job`/`namespace` would be renamed exported_* by Prometheus (the scrape target has its own)
    for metric in m.registry.collect():
        for sample in metric.samples:
            assert not {"job", "namespace", "instance"} & set(sample.labels), sample
    assert value(m.registry, "offpeak_prediction_error_ratio_bucket", gpu_type="T4", model_family="unknown",
                 le="1.5") == 1
    assert value(m.registry, "offpeak_prediction_error_ratio_bucket", gpu_type="T4", model_family="unknown",
                 le="1.25") == 0
    text = generate_latest(m.registry).decode()
    for name in ("offpeak_job_requeues_total", "offpeak_analysis_duration_seconds",
                 "offpeak_predictor_request_seconds", "offpeak_predictor_failures_total"):
        assert f"# TYPE {name.removesuffix('_total')}" in text


def test_labelled_counters_export_zero_before_the_first_event() -> None:
    """increase()/rate() need a 0 sample before the first increment, or the first event is never seen."""
    m = OperatorMetrics(CollectorRegistry())
    for reason in ("Evicted", "PodFailed"):
        assert value(m.registry, "offpeak_job_requeues_total", reason=reason) == 0
    for endpoint in ("/v1/predict", "/v1/samples"):
        assert value(m.registry, "offpeak_predictor_failures_total", endpoint=endpoint) == 0
        assert value(m.registry, "offpeak_predictor_request_seconds_count", endpoint=endpoint) == 0
    m.job_requeues_total.labels(reason="Evicted").inc()
    assert value(m.registry, "offpeak_job_requeues_total", reason="Evicted") == 1
    assert value(m.registry, "offpeak_job_requeues_total", reason="PodFailed") == 0


def test_eta_drift_compares_the_end_with_the_paces_first_eta_or_else_the_prediction() -> None:
    m = OperatorMetrics(CollectorRegistry())
    m.job_finished(job="a", namespace="ns", gpu_type="T4", model_family="", predicted_seconds=100, actual_seconds=140,
                   pace_eta_seconds=135)
    m.job_finished(job="b", namespace="ns", gpu_type="T4", model_family="", predicted_seconds=100, actual_seconds=70)
    pace = {"gpu_type": "T4", "eta_source": "pace"}
    assert value(m.registry, "offpeak_eta_error_ratio_bucket", **pace, le="1.1") == 1  # 140 / 135
    assert value(m.registry, "offpeak_eta_error_ratio_bucket", **pace, le="1.0") == 0
    prediction = {"gpu_type": "T4", "eta_source": "prediction"}
    assert value(m.registry, "offpeak_eta_error_ratio_bucket", **prediction, le="0.8") == 1  # 70 / 100
    assert value(m.registry, "offpeak_eta_error_ratio_bucket", **prediction, le="0.67") == 0
    assert value(m.registry, "offpeak_eta_error_ratio_count", **pace) == 1
