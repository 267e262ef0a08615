"""Smoke test of `offpeak demo`: non-interactive run that ends by itself, writes its plot, leaves nothing running."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from offpeak_e2e import build, procs
from offpeak_e2e.cluster import offpeak_argv, status
from offpeak_e2e.controlplane import ControlPlane, ControlPlaneSettings, run_dir_for
from offpeak_e2e.harness import session_cluster_name



@pytest.mark.slow
@pytest.mark.timeout(900)
def test_demo_runs_and_cleans_up(tmp_path: Path) -> None:
    assert not build.missing(), f"control-plane binaries missing: {build.missing()}"
    out = tmp_path / "demo"
    name = session_cluster_name("pytest-demo")
    t = time.monotonic()
    try:
        proc = subprocess.run(
            [*offpeak_argv(), "demo", "--name", name, "--jobs", "3", "--duration", "480", "--out", str(out)],
            capture_output=True, text=True, timeout=840, check=False,
        )
    finally:  # a killed demo cannot tear down itself: never leave its cluster running
        leftover = procs.Supervisor(run_dir_for(name)).procs()
        ControlPlane(ControlPlaneSettings(name=name), echo=lambda m: None).stop()
    print(f"[e2e] demo: {time.monotonic() - t:.1f}s")
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    results = json.loads((out / "results.json").read_text())["jobs"]
    assert len(results) == 3
    assert all(r["phase"] for r in results)
    succeeded = [r for r in results if r["phase"] == "Succeeded"]
    assert succeeded, results
    assert (out / "predicted_vs_actual.png").stat().st_size > 1000
    assert "jobs succeeded" in proc.stdout
    # torn down: no process of the demo cluster left
    info = status(name)
    assert info["processes"] == {}, info
    assert leftover == [], leftover
    shutil.rmtree(run_dir_for(name), ignore_errors=True)
