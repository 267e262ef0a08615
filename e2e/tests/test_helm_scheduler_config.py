"""The KubeSchedulerConfiguration the chart renders is loaded and validated by a real kube-scheduler (the binary
the e2e build produced): `--write-config-to` parses, defaults and validates the file, writes it back, and exits."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from offpeak_dashboard.chart import chart_dir, render, scheduler_config
from offpeak_dashboard.checks import repo_root
from offpeak_dashboard.tools import ToolMissing, find_kube_scheduler
from offpeak_e2e.harness import E2ECluster


def _kube_scheduler() -> Path:
    try:
        return find_kube_scheduler()
    except ToolMissing as e:
        pytest.fail(str(e), pytrace=False)


def _load(config_text: str, tmp_path: Path, kubeconfig: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    config = yaml.safe_load(config_text)
    # In the pod the scheduler uses its in-cluster service account; here point it at the local API server.
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "written.yaml"
    result = subprocess.run(
        [str(_kube_scheduler()), f"--config={path}", f"--write-config-to={out}", "--secure-port=0"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    return result, out


@pytest.mark.parametrize("overrides", [[], ["scheduler.schedulerName=harvest", "scheduler.extender.weight=3"]])
def test_real_kube_scheduler_accepts_the_chart_config(
    e2e_cluster: E2ECluster, tmp_path: Path, overrides: list[str]
) -> None:
    objects = render(chart_dir(repo_root()), set_values=overrides, include_crds=False)
    result, written = _load(scheduler_config(objects), tmp_path, e2e_cluster.kubeconfig)
    assert result.returncode == 0, result.stderr[-2000:]
    config = yaml.safe_load(written.read_text())
    (profile,) = config["profiles"]
    expected_name = "harvest" if overrides else "offpeak-scheduler"
    assert profile["schedulerName"] == expected_name
    (extender,) = config["extenders"]
    assert extender["urlPrefix"] == "http://127.0.0.1:8888"
    assert extender["nodeCacheCapable"] is True and extender["ignorable"] is True
    assert extender["weight"] == (3 if overrides else 5)
    assert config["leaderElection"]["resourceName"] == ("offpeak-scheduler")


def test_real_kube_scheduler_rejects_a_broken_config(e2e_cluster: E2ECluster, tmp_path: Path) -> None:
    objects = render(chart_dir(repo_root()), include_crds=False)
    broken = yaml.safe_load(scheduler_config(objects))
    broken["extenders"][0]["weight"] = 0  # prioritizeVerb needs a positive weight
    result, _ = _load(yaml.safe_dump(broken), tmp_path, e2e_cluster.kubeconfig)
    assert result.returncode != 0
    assert "weight" in result.stderr
