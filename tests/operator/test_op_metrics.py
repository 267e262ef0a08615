from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from offpeak_operator.metrics import OperatorMetrics


def value(reg: CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, labels)


def test_phase_gauge_counts_jobs_and_forgets_deleted_ones() -> None:
    m = OperatorMetrics(CollectorRegistry())
    m.set_phase("ns/a", "Running")
    m.set_phase("ns/b", "Running")
    m.set_phase("ns/a", "Succeeded")
    assert value(m.registry, "offpeak_jobs", phase="Running") == 1
    assert value(m.registry, "offpeak_jobs", phase="Succeeded") == 1
    m.set_phase("ns/b", None)
    assert value(m.registry, "offpeak_jobs", phase="Running") == 0
    assert value(m.registry, "offpeak_jobs", phase="Failed") == 0  # every phase is exported


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
