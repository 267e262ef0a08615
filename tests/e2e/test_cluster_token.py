"""The local cluster gives predictor and operator one shared token, as the chart does, so samples are accepted."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from offpeak_e2e.cluster import ClusterSettings, LocalCluster
from offpeak_e2e.controlplane import ControlPlaneSettings


def test_predictor_and_operator_share_one_private_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OFFPEAK_CACHE", str(tmp_path))
    cluster = LocalCluster(ClusterSettings(control_plane=ControlPlaneSettings(name="tok")), echo=lambda m: None)
    first = cluster._predictor_token()
    assert first == cluster._predictor_token()  # made once, kept for the cluster's life
    secret = first.read_text()
    assert len(secret) == 64 and int(secret, 16) >= 0
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    other = LocalCluster(ClusterSettings(control_plane=ControlPlaneSettings(name="other")), echo=lambda m: None)
    assert other._predictor_token().read_text() != secret  # each cluster its own
