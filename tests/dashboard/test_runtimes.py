"""Predicted-vs-actual records: parsing, joining Prometheus vectors, the summary and the PNG."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from offpeak.cli import main
from offpeak.errors import UserError
from offpeak_dashboard.plot import is_png, plot_runtimes
from offpeak_dashboard.runtimes import (
    JobRuntime,
    join_prometheus_vectors,
    records_from_json,
    summarise,
)


def test_records_accept_snake_and_camel_case_and_namespace() -> None:
    records = records_from_json(
        {
            "jobs": [
                {"job": "a", "namespace": "ml", "gpu_type": "L4", "predicted_seconds": 100, "actual_seconds": 120},
                {"name": "b", "gpuType": "A100-SXM4-40GB", "predictedSeconds": "50", "actualSeconds": 40.5},
            ]
        }
    )
    assert records == [
        JobRuntime("ml/a", "L4", 100.0, 120.0),
        JobRuntime("b", "A100-SXM4-40GB", 50.0, 40.5),
    ]
    assert records[0].ratio == pytest.approx(1.2)


def test_records_from_kubectl_get_trainingjobs() -> None:
    listing = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {"metadata": {"name": "done", "namespace": "ml"},
             "status": {"phase": "Succeeded", "gpuType": "L4", "predictedSeconds": 300, "actualSeconds": 420}},
            {"metadata": {"name": "running", "namespace": "ml"},
             "status": {"phase": "Running", "gpuType": "L4", "predictedSeconds": 300}},
            {"metadata": {"name": "new", "namespace": "ml"}},
        ],
    }
    assert records_from_json(listing) == [JobRuntime("ml/done", "L4", 300.0, 420.0)]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"rows": []}, "expected a JSON list"),
        ([{"gpu_type": "L4", "predicted_seconds": 1, "actual_seconds": 1}], "missing the job name"),
        ([{"job": "a", "predicted_seconds": 1, "actual_seconds": 1}], "missing the GPU type"),
        ([{"job": "a", "gpu_type": "L4", "predicted_seconds": 1}], "needs both"),
        ([{"job": "a", "gpu_type": "L4", "predicted_seconds": 0, "actual_seconds": 1}], "positive"),
        ([{"job": "a", "gpu_type": "L4", "predicted_seconds": "soon", "actual_seconds": 1}], "number"),
        ([{"job": "a", "gpu_type": "L4", "predicted_seconds": float("nan"), "actual_seconds": 1}], "positive"),
    ],
)
def test_bad_records_say_what_is_wrong(document: object, message: str) -> None:
    with pytest.raises(UserError, match=message):
        records_from_json(document, source="jobs.json")


def _item(value: float, **labels: str) -> dict:
    return {"metric": labels, "value": [1700000000.0, str(value)]}


def test_join_ignores_target_labels_and_unmatched_series() -> None:
    # As scraped: the target's own job/instance/pod labels sit beside the operator's per-job labels.
    predicted = [
        _item(100, __name__="p", instance="op-1:9090", job="offpeak-operator", namespace="offpeak-system",
              trainingjob="a", job_namespace="ml", gpu_type="L4"),
        _item(10, __name__="p", instance="op-1:9090", job="offpeak-operator", trainingjob="lonely", job_namespace="ml",
              gpu_type="L4"),
    ]
    actual = [
        _item(150, __name__="q", instance="op-2:9090", job="offpeak-operator", namespace="other", trainingjob="a",
              job_namespace="ml", gpu_type="L4"),
        _item(5, job="offpeak-operator", trainingjob="a", job_namespace="ml", gpu_type="H100-SXM5-80GB"),
        _item(float("nan"), job="offpeak-operator", trainingjob="lonely", job_namespace="ml", gpu_type="L4"),
    ]
    assert join_prometheus_vectors(predicted=predicted, actual=actual) == [JobRuntime("ml/a", "L4", 100.0, 150.0)]


def test_join_keeps_jobs_and_namespaces_apart() -> None:
    predicted = [_item(100, trainingjob="a", job_namespace="ml", gpu_type="L4"),
                 _item(200, trainingjob="b", job_namespace="ml", gpu_type="L4"),
                 _item(300, trainingjob="a", job_namespace="cv", gpu_type="L4")]
    actual = [_item(110, trainingjob="a", job_namespace="ml", gpu_type="L4"),
              _item(190, trainingjob="b", job_namespace="ml", gpu_type="L4"),
              _item(330, trainingjob="a", job_namespace="cv", gpu_type="L4")]
    joined = join_prometheus_vectors(predicted=predicted, actual=actual)
    assert [(r.job, r.predicted_seconds, r.actual_seconds) for r in joined] == [
        ("cv/a", 300, 330), ("ml/a", 100, 110), ("ml/b", 200, 190)]


def test_dashboard_and_plot_group_by_the_operators_job_labels() -> None:
    from offpeak_dashboard.dashboard import JOB_LABELS
    from offpeak_operator.metrics import JOB_LABELS as OPERATOR_JOB_LABELS

    assert sorted(label.strip() for label in JOB_LABELS.split(",")) == sorted(OPERATOR_JOB_LABELS)
    from offpeak_dashboard.dashboard import JOB_ACTUAL, JOB_PREDICTED, build_dashboard
    from offpeak_dashboard.grafana import iter_queries

    per_job = [q for _, q in iter_queries(build_dashboard()) if JOB_PREDICTED in q or JOB_ACTUAL in q]
    assert per_job and all(f"max by ({JOB_LABELS})" in q and "exported_" not in q for q in per_job)


def test_summary_is_scale_free() -> None:
    records = [
        JobRuntime("a", "L4", 100, 200),  # 2x too slow
        JobRuntime("b", "L4", 100, 50),  # 2x too fast
        JobRuntime("c", "L4", 100, 110),
    ]
    summary = summarise(records)
    assert summary.jobs == 3
    assert summary.median_abs_log2_error == pytest.approx(1.0)
    assert summary.within_25_percent == pytest.approx(1 / 3)
    assert math.isnan(summarise([]).median_abs_log2_error)


def test_plot_writes_a_png(tmp_path: Path) -> None:
    records = [JobRuntime(f"j{i}", gpu, 10.0 * (i + 1), 12.0 * (i + 1)) for i, gpu in enumerate(["L4", "A100"] * 3)]
    out = plot_runtimes(records, tmp_path / "sub" / "r.png")
    assert is_png(out)
    assert out.stat().st_size > 5000


def test_cli_plot_runtimes_from_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps([{"job": "a", "gpu_type": "L4", "predicted_seconds": 60, "actual_seconds": 75}]))
    out = tmp_path / "r.png"
    assert main(["plot-runtimes", "--from-json", str(jobs), "--out", str(out)]) == 0
    assert is_png(out)
    assert "1 jobs" in capsys.readouterr().out


def test_cli_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "jobs.json"
    bad.write_text("{not json")
    assert main(["plot-runtimes", "--from-json", str(bad), "--out", str(tmp_path / "r.png")]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["plot-runtimes", "--prometheus-url", "ftp://x", "--out", str(tmp_path / "r.png")]) == 2


def test_cli_generate_matches_render(capsys: pytest.CaptureFixture[str]) -> None:
    from offpeak_dashboard.dashboard import build_dashboard, render

    assert main(["dashboard", "generate"]) == 0
    assert capsys.readouterr().out == render(build_dashboard())


def test_check_tool_reports_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import check_dashboard

    stale = tmp_path / check_dashboard.DASHBOARD_FILE
    stale.parent.mkdir(parents=True)
    stale.write_text("{}\n")
    assert check_dashboard.main(["--repo", str(tmp_path)]) == 1
    assert "out of date" in capsys.readouterr().err


def test_cli_check_needs_a_prometheus(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OFFPEAK_PROMETHEUS_URL", raising=False)
    assert main(["dashboard", "check"]) == 2
    assert "--prometheus-url" in capsys.readouterr().err


def test_nice_ticks_are_round_seconds_and_few_on_a_wide_span() -> None:
    from offpeak_dashboard.plot import nice_ticks

    assert nice_ticks(14.7, 221.0) == [20.0, 50.0, 100.0, 200.0]
    assert nice_ticks(3.0, 9.0) == [5.0]
    assert nice_ticks(1.0, 1e6) == [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6]  # 1-2-5 would give 19
    with pytest.raises(ValueError):
        nice_ticks(0.0, 10.0)


def test_the_figures_tick_labels_do_not_run_into_each_other() -> None:
    """The demo's span (about 15-220 s) labelled 3×10^1 and 4×10^1 on top of each other before."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from offpeak_dashboard.plot import format_log_axes

    for lo, hi in ((14.7, 221.0), (5.0, 90_000.0), (100.0, 400.0)):
        fig, ax = plt.subplots(figsize=(6.4, 6.0), dpi=110)
        try:
            format_log_axes(ax, lo, hi)
            fig.canvas.draw()
            renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
            for axis in (ax.xaxis, ax.yaxis):
                labels = [t for t in axis.get_ticklabels(which="both") if t.get_visible() and t.get_text()]
                assert len(labels) >= 1, (lo, hi)
                boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: (b.x0, b.y0))
                assert not any(a.overlaps(b) for a, b in zip(boxes, boxes[1:])), [t.get_text() for t in labels]
        finally:
            plt.close(fig)
