"""Trace loading on the real shared files (small slices) and on slices cut the same way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from offpeak.errors import UserError
from offpeak_sim import jobs, online, paths
from offpeak_sim.fleet import build_fleet, parse_mix

TRACES = paths.data_root() / "traces"


def test_itp_cluster_loads_rebased_and_sorted() -> None:
    js = jobs.load_jobs(TRACES / "ms-itp-elasticflow", clusters=("10",))
    raw = pd.read_csv(TRACES / "ms-itp-elasticflow" / "raw" / "cluster10.csv")
    assert len(js) == len(raw)
    assert js.arrival_s[0] == 0 and np.all(np.diff(js.arrival_s) >= 0)
    assert js.gpu_seconds() == pytest.approx(float((raw.duration * raw.num_gpu).sum()))


def test_other_time_slice_in_same_layout_is_rebased(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    day45 = 45 * 86400
    pd.DataFrame(
        {"job_id": ["a", "b", "c"], "submission_time": [day45 + 50, day45 + 10, day45 + 90],
         "duration": [600, 1200, 30], "num_gpu": [16, 1, 2]}
    ).to_csv(raw / "cluster03.csv", index=False)
    (raw / "cluster08.csv").write_text("job_id,submission_time,duration,num_gpu\n")  # header-only, like holdout 08
    js = jobs.load_jobs(tmp_path)
    assert list(js.arrival_s) == [0, 40, 80]
    folded = jobs.fold_to_node(js, gpus_per_node=8)
    assert folded.gpus.max() == 8
    assert folded.gpu_seconds() == pytest.approx(js.gpu_seconds())  # GPU-seconds kept when folding


def test_thinning_hits_target_and_never_adds(tmp_path: Path) -> None:
    n = 4000
    js = jobs.JobStream(np.arange(n).astype(str), np.arange(n, dtype=float), np.full(n, 100.0), np.ones(n, int))
    thin = jobs.thin_to_load(js, target_gpu_seconds=js.gpu_seconds() / 4, rng=np.random.default_rng(0))
    assert thin.gpu_seconds() == pytest.approx(js.gpu_seconds() / 4, rel=0.1)
    same = jobs.thin_to_load(js, target_gpu_seconds=js.gpu_seconds() * 2, rng=np.random.default_rng(0))
    assert len(same) == n


def test_bad_folders_raise_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cluster"):
        jobs.load_jobs(tmp_path)
    with pytest.raises(UserError, match="not an online trace"):
        online.detect_layout(tmp_path)
    with pytest.raises(UserError, match="not found"):
        paths.existing_dir(tmp_path / "nope", what="online trace")


@pytest.mark.parametrize(
    "folder,layout",
    [("alibaba-genai-serving-v2026", "alibaba"), ("helios-earth-vc-2020-05", "helios"), ("philly-node-sequence", "philly")],
)
def test_online_demand_from_real_traces(folder: str, layout: str) -> None:
    fleet = build_fleet(nodes=12, gpus_per_node=8, mix=parse_mix("A100-SXM4-40GB:1,H100-SXM5-80GB:1"))
    d = online.load_online_demand(TRACES / folder, fleet=fleet, minutes=3 * 1440, seed=1)
    assert online.detect_layout(TRACES / folder) == layout
    assert d.shape == (12, 3 * 1440)
    assert d.min() >= 0 and (d <= fleet.gpus[:, None]).all()
    assert 0.02 < d.mean() / 8 < 0.98  # neither empty nor saturated
    assert (np.diff(d, axis=1) != 0).any()  # demand moves over time


def test_alibaba_profile_counts_busy_minutes() -> None:
    f = TRACES / "alibaba-genai-serving-v2026" / online.ALIBABA_FILE
    prof = online.alibaba_daily_profiles(f, busy_util_pct=10.0)
    df = pd.read_csv(f)
    assert prof.shape == (df.container_ip.nunique(), 1440)
    # every sampled pod-minute is busy exactly when one of its samples reached 10 % duty (pods in id order)
    pods = {p: i for i, p in enumerate(sorted(df.container_ip.astype(str).unique()))}
    minute = (df.timestamp_anon.astype("int64") % 86400) // 60
    hot = df.assign(pod=df.container_ip.astype(str).map(pods), minute=minute, hot=df.value >= 10)
    expected = hot.groupby(["pod", "minute"])["hot"].any()
    got = prof[expected.index.get_level_values("pod"), expected.index.get_level_values("minute")]
    assert (got == expected.to_numpy()).all()
    assert 0.05 < prof.mean() < 0.95  # neither idle nor saturated


def test_alibaba_layout_from_a_tiny_slice(tmp_path: Path) -> None:
    rows = []
    for pod, busy_from in (("aa", 0), ("bb", 600)):
        for m in range(0, 1440, 1):
            rows.append({"value": 50.0 if m >= busy_from else 0.0, "timestamp_anon": 1662854400 + m * 60, "container_ip": pod})
    pd.DataFrame(rows).to_csv(tmp_path / online.ALIBABA_FILE, index=False)
    fleet = build_fleet(nodes=1, gpus_per_node=2, mix={"A100-SXM4-40GB": 1.0})
    d = online.load_online_demand(
        tmp_path, fleet=fleet, minutes=1440, seed=0,
        settings=online.OnlineSettings(hold_minutes=0, day_jitter_minutes=0),
    )
    assert d[0, :600].tolist() == [1] * 600  # one pod busy all day
    assert d[0, 600:].tolist() == [2] * 840  # the second from minute 600
