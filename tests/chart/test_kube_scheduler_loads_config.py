"""The KubeSchedulerConfiguration the chart renders is loaded and validated by a real kube-scheduler (the binary
the e2e build produced): `--write-config-to` parses, defaults and validates the file, writes it back, and exits
before contacting any API server (it only needs a kubeconfig to exist, so a dummy one is used)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from support.chart import chart_dir, render, scheduler_config
from support import REPO
from support.tools import ToolMissing, find_kube_scheduler

DUMMY_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: unused}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def _kube_scheduler() -> Path:
    try:
        return find_kube_scheduler()
    except ToolMissing as e:
        pytest.fail(str(e), pytrace=False)


def _flags(objects: list[dict]) -> list[str]:
    """The chart's kube-scheduler flags other than its --config (which `_load` replaces)."""
    (deployment,) = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("-scheduler")]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return [a for a in container["command"][1:] if not a.startswith("--config=")]


def _load(config: dict, tmp_path: Path,
          flags: list[str] | None = None) -> tuple[subprocess.CompletedProcess[str], Path]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(DUMMY_KUBECONFIG)
    # In the pod the scheduler uses its in-cluster service account; the config file itself names no kubeconfig.
    assert "clientConnection" not in config
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**config, "clientConnection": {"kubeconfig": str(kubeconfig)}}))
    out = tmp_path / "written.yaml"
    result = subprocess.run(
        [str(_kube_scheduler()), f"--config={path}", f"--write-config-to={out}", "--secure-port=0", *(flags or [])],
        capture_output=True, text=True, timeout=60, check=False,
    )
    return result, out


@pytest.mark.parametrize(
    "overrides",
    [[], ["scheduler.schedulerName=harvest", "scheduler.extender.weight=3", "scheduler.leaderElection.resourceName=h"]],
    ids=["default", "custom"],
)
def test_real_kube_scheduler_accepts_the_chart_config(tmp_path: Path, overrides: list[str]) -> None:
    objects = render(chart_dir(REPO), set_values=overrides, include_crds=False)
    flags = _flags(objects)
    assert "--pod-max-in-unschedulable-pods-duration=20s" in flags  # refused pods retried without a cluster event
    result, written = _load(yaml.safe_load(scheduler_config(objects)), tmp_path, flags)
    assert result.returncode == 0, result.stderr[-2000:]  # the real binary takes the chart's flags too
    config = yaml.safe_load(written.read_text())
    (profile,) = config["profiles"]
    assert profile["schedulerName"] == ("harvest" if overrides else "offpeak-scheduler")
    (extender,) = config["extenders"]
    assert extender["urlPrefix"] == "http://offpeak-extender.offpeak-system.svc:8888"  # the extender's Service
    assert (extender["filterVerb"], extender["prioritizeVerb"]) == ("filter", "prioritize")
    assert extender["nodeCacheCapable"] is True and extender["ignorable"] is True
    assert extender["managedResources"][0]["name"] == "nvidia.com/gpu"
    assert extender["weight"] == (3 if overrides else 5)
    assert config["percentageOfNodesToScore"] == 100  # gangs: every feasible node reaches the extender
    election = config["leaderElection"]
    assert election["leaderElect"] is True
    assert election["resourceName"] == ("h" if overrides else "offpeak-scheduler")
    assert election["resourceNamespace"] == "offpeak-system"


def test_real_kube_scheduler_rejects_a_broken_config(tmp_path: Path) -> None:
    objects = render(chart_dir(REPO), include_crds=False)
    broken = yaml.safe_load(scheduler_config(objects))
    broken["extenders"][0]["weight"] = 0  # prioritizeVerb needs a positive weight
    result, _ = _load(broken, tmp_path)
    assert result.returncode != 0
    assert "weight" in result.stderr
