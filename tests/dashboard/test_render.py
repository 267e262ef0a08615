"""`offpeak dashboard render` and `check` against a small fake Prometheus HTTP API on loopback (query and
query_range), serving canned series: the PNG is made from the dashboard's own queries, and an unreachable
Prometheus is one line and exit status 2."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from support.loopback import served

from offpeak.cli import main
from offpeak_dashboard.dashboard import JOB_ACTUAL, JOB_PREDICTED, build_dashboard
from offpeak_dashboard.grafana import iter_queries
from offpeak_dashboard.plot import is_png
from offpeak_dashboard.render import MAIN_PANELS

END = 1_700_000_000.0
JOBS = (("ml", "a", "L4", 100.0, 130.0), ("ml", "b", "A100-SXM4-40GB", 400.0, 380.0), ("cv", "c", "L4", 50.0, 49.0))


@dataclass
class FakePrometheus:
    """Canned answers by the metric a query names; every request is kept as (endpoint, params)."""

    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def vector(self, query: str) -> list[dict[str, Any]]:
        for metric, index in ((JOB_PREDICTED, 3), (JOB_ACTUAL, 4)):
            if metric in query:
                return [{"metric": {"job_namespace": ns, "trainingjob": name, "gpu_type": gpu, "model_family": "mlp"},
                         "value": [END, str(job[index])]} for job in JOBS for ns, name, gpu in [job[:3]]]
        return [{"metric": {}, "value": [END, "12.5"]}]

    def matrix(self, query: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        times = [start + i * step for i in range(int((end - start) // step) + 1)]
        labels = ({"gpu_type": "L4"}, {"gpu_type": "T4"}) if "gpu_type" in query else ({"reason": "WaitingForWindow"},)
        return [{"metric": dict(lab), "values": [[t, str(1.0 + 0.1 * i)] for t in times]}
                for i, lab in enumerate(labels)]

    def app(self) -> web.Application:
        async def query(request: web.Request) -> web.Response:
            self.requests.append(("query", dict(request.query)))
            result = self.vector(request.query["query"])
            return web.json_response({"status": "success", "data": {"resultType": "vector", "result": result}})

        async def query_range(request: web.Request) -> web.Response:
            q = request.query
            self.requests.append(("query_range", dict(q)))
            result = self.matrix(q["query"], float(q["start"]), float(q["end"]), float(q["step"]))
            return web.json_response({"status": "success", "data": {"resultType": "matrix", "result": result}})

        app = web.Application()
        app.router.add_get("/api/v1/query", query)
        app.router.add_get("/api/v1/query_range", query_range)
        return app


@pytest.fixture
def prometheus() -> Iterator[tuple[str, FakePrometheus]]:
    fake = FakePrometheus()
    with served(fake.app()) as port:
        yield f"http://127.0.0.1:{port}", fake


def test_render_draws_the_main_panels_from_the_dashboards_queries(
        prometheus: tuple[str, FakePrometheus], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url, fake = prometheus
    out = tmp_path / "dashboard.png"
    assert main(["dashboard", "render", "--prometheus-url", url, "--out", str(out), "--range-seconds", "3600",
                 "--end", str(END)]) == 0
    assert is_png(out) and out.stat().st_size > 20_000
    printed = capsys.readouterr().out
    assert "   3 jobs    Predicted vs actual runtime" in printed and f"wrote {out}" in printed

    sent = [params["query"] for _, params in fake.requests]
    assert all("$" not in q for q in sent), sent  # every Grafana variable substituted (label variables: All)
    by_panel = dict.fromkeys((p.title for p in MAIN_PANELS), 0)
    dashboard_queries = iter_queries(build_dashboard())
    for title, expr in dashboard_queries:
        if title in by_panel:
            by_panel[title] += 1
    assert len(sent) == sum(by_panel.values()) == 10  # each main panel's queries, once, and nothing else
    instant = [p for endpoint, p in fake.requests if endpoint == "query"]
    ranged = [p for endpoint, p in fake.requests if endpoint == "query_range"]
    assert len(instant) == 4 and all(float(p["time"]) == END for p in instant)  # scatter (2) and harvest (2)
    assert all(float(p["end"]) == END and float(p["start"]) == END - 3600 and p["step"] == "15" for p in ranged)
    assert sum(JOB_PREDICTED in q for q in sent) == 1 and sum(JOB_ACTUAL in q for q in sent) == 1
    assert any('job_namespace=~".*"' in q for q in sent)


def test_check_counts_series_per_panel(prometheus: tuple[str, FakePrometheus],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    url, fake = prometheus
    assert main(["dashboard", "check", "--prometheus-url", url]) == 0
    out = capsys.readouterr().out
    assert out.endswith("dashboard OK\n")
    assert len(fake.requests) == len(iter_queries(build_dashboard())) + 3  # and one per label variable
    assert "variable $model_family: count by (model_family) (offpeak_prediction_error_ratio_count" in out


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("action", ["check", "render"])
def test_an_unreachable_prometheus_is_one_line_and_exit_status_2(action: str, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """`dashboard check` printed one "cannot reach Prometheus" line per query (33) and exited 1."""
    argv = ["dashboard", action, "--prometheus-url", f"http://127.0.0.1:{_closed_port()}"]
    assert main(argv + (["--out", str(tmp_path / "d.png")] if action == "render" else [])) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and "cannot reach Prometheus" in lines[0] and "--prometheus-url" in lines[0], lines
    assert "Traceback" not in captured.err and not (tmp_path / "d.png").exists()


def test_the_url_comes_from_the_environment_when_the_command_runs(
        prometheus: tuple[str, FakePrometheus], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    url, fake = prometheus
    monkeypatch.setenv("OFFPEAK_PROMETHEUS_URL", url)
    assert main(["dashboard", "check"]) == 0
    assert fake.requests
