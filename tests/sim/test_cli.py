"""The `offpeak simulate` contract: flags, report keys, plots, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offpeak.cli import main
from offpeak_sim import paths

CONTRACT_KEYS = ("harvested_gpu_hours", "harvest_share", "evictions", "lost_gpu_seconds", "jct_mean_s", "jct_p95_s")


def test_simulate_writes_report_with_contract_keys_and_plots(tmp_path: Path, capsys) -> None:
    out = tmp_path / "r.json"
    rc = main(["simulate", "--nodes", "6", "--days", "0.5", "--history-days", "1", "--seed", "3",
               "--policies", "default,backfill,user-estimate,offpeak,oracle",
               "--report", str(out), "--plots", str(tmp_path / "plots"), "--quiet"])
    assert rc == 0
    report = json.loads(out.read_text())
    assert list(report) == ["default", "backfill", "user-estimate", "offpeak", "oracle"]
    for name, m in report.items():
        for k in CONTRACT_KEYS:
            assert k in m, (name, k)
        assert m["evictions"] >= 0 and 0 <= m["harvest_share"] <= 1
    meta = json.loads((tmp_path / "r.meta.json").read_text())
    assert meta["scenario"]["nodes"] == 6
    for png in ("harvest.png", "jct_cdf.png", "evictions.png"):
        assert (tmp_path / "plots" / png).stat().st_size > 1000


def test_trace_folders_are_flags_and_the_data_root_is_an_env_var(tmp_path: Path, monkeypatch, capsys) -> None:
    root = paths.data_root()
    monkeypatch.setenv(paths.ENV_DATA_ROOT, str(tmp_path / "nowhere"))
    rc = main(["simulate", "--days", "0.1", "--report", str(tmp_path / "r.json"), "--quiet"])
    assert rc == 2 and "online trace folder not found" in capsys.readouterr().err
    rc = main(["simulate", "--nodes", "3", "--days", "0.2", "--history-days", "1", "--policies", "backfill",
               "--online-trace", str(root / "traces" / "philly-node-sequence"),
               "--jobs-trace", str(root / "traces" / "ms-itp-elasticflow"),
               "--report", str(tmp_path / "r.json"), "--quiet"])
    assert rc == 0
    assert list(json.loads((tmp_path / "r.json").read_text())) == ["backfill"]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--policies", "fifo"], "unknown policy"),
        (["--nodes", "0"], "--nodes"),
        (["--days", "-1"], "--days"),
        (["--online-trace", "/nonexistent/x"], "not found"),
        (["--predictor-sigma", "-0.1"], "--predictor-sigma"),
        (["--forecast-quantile", "1.5"], "--forecast-quantile"),
        (["--pool-windows"], "--pool-windows needs pod-placed online demand"),  # the default trace is Alibaba's
        (["--pool-look-back-hours", "0"], "--pool-look-back-hours"),
        (["--pool-forecast", "exact"], "--pool-forecast needs --pool-windows"),
        (["--pool-lead-minutes", "30"], "--pool-lead-minutes"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    rc = main(["simulate", *argv, "--report", str(tmp_path / "r.json"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and err.count("\n") == 1


def test_online_placement_is_a_flag_recorded_in_the_meta(tmp_path: Path, capsys) -> None:
    helios = str(paths.data_root() / "traces" / "helios-earth-vc-2020-05")
    base = ["simulate", "--nodes", "8", "--days", "0.2", "--history-days", "1", "--policies", "backfill",
            "--online-trace", helios, "--quiet"]
    for flag, want in (([], "pods"), (["--online-placement", "pinned"], "pinned")):
        out = tmp_path / f"{want}.json"
        assert main([*base, *flag, "--report", str(out)]) == 0
        meta = json.loads((tmp_path / f"{want}.meta.json").read_text())
        assert meta["scenario"]["online_placement"] == want
        assert meta["settings"]["scenario"]["online"]["placement"] == want
    capsys.readouterr()  # the runs' warnings (so few jobs drawn that the load is not --load's)
    rc = main([*base, "--forecast", "exact", "--report", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "--online-placement pinned" in err and err.count("\n") == 1
    assert main([*base, "--policies", "offpeak-p90", "--pool-windows", "--pool-look-back-hours", "2",
                 "--pool-lead-minutes", "30", "--report", str(tmp_path / "pool.json")]) == 0
    feed = json.loads((tmp_path / "pool.meta.json").read_text())["settings"]["feed"]
    assert feed["pool_windows"] is True and feed["pool_look_back_seconds"] == 7200.0
    assert feed["pool_forecast"] == "rise" and feed["pool_lead_seconds"] == 1800.0
    assert main([*base, "--policies", "offpeak-p90", "--pool-windows", "--pool-announce-minutes", "35",
                 "--report", str(tmp_path / "announced.json")]) == 0
    feed = json.loads((tmp_path / "announced.meta.json").read_text())["settings"]["feed"]
    assert feed["pool_announce_seconds"] == 2100.0 and feed["pool_lead_seconds"] == 0.0
    assert feed["pool_announce_ceiling"] is False
    assert main([*base, "--policies", "offpeak-p90", "--pool-windows", "--pool-announce-minutes", "35",
                 "--pool-announce-ceiling", "--pool-ceiling-block-minutes", "60",
                 "--report", str(tmp_path / "blocks.json")]) == 0
    feed = json.loads((tmp_path / "blocks.meta.json").read_text())["settings"]["feed"]
    assert feed["pool_announce_ceiling"] is True and feed["pool_ceiling_block_seconds"] == 3600.0
    assert feed["pool_floor_block_seconds"] == 0.0
    rc = main([*base, "--pool-windows", "--pool-floor-block-minutes", "60", "--report", str(tmp_path / "f.json")])
    assert rc == 2 and "--pool-floor-block-minutes" in capsys.readouterr().err
    rc = main([*base, "--pool-windows", "--pool-announce-minutes", "35", "--pool-ceiling-block-minutes", "60",
               "--report", str(tmp_path / "b.json")])
    assert rc == 2 and "--pool-ceiling-block-minutes" in capsys.readouterr().err
    rc = main([*base, "--pool-windows", "--pool-announce-ceiling", "--report", str(tmp_path / "cap.json")])
    assert rc == 2 and "--pool-announce-ceiling needs --pool-announce-minutes" in capsys.readouterr().err
    rc = main([*base, "--pool-windows", "--pool-announce-minutes", "35", "--pool-lead-minutes", "35",
               "--report", str(tmp_path / "both.json")])
    assert rc == 2 and "--pool-announce-minutes" in capsys.readouterr().err
    rc = main([*base, "--online-placement", "pinned", "--pool-windows", "--report", str(tmp_path / "y.json")])
    assert rc == 2 and "--pool-windows" in capsys.readouterr().err


def test_restart_and_yield_flags_reach_the_engine_and_the_goodput_rule(tmp_path: Path, capsys) -> None:
    base = ["simulate", "--nodes", "4", "--days", "0.2", "--history-days", "1", "--policies", "backfill", "--quiet"]
    for flags, restart, yields in (([], 60.0, False), (["--restart-seconds", "0", "--yield"], 0.0, True)):
        out = tmp_path / f"{restart:g}.json"
        assert main([*base, *flags, "--report", str(out)]) == 0
        engine = json.loads((tmp_path / f"{restart:g}.meta.json").read_text())["settings"]["engine"]
        assert engine["restart_seconds"] == restart and engine["goodput"]["startup_seconds"] == restart
        assert engine["yield_at_checkpoints"] is yields
        assert "yields" in json.loads(out.read_text())["backfill"]
    assert main([*base, "--restart-seconds", "-1", "--report", str(tmp_path / "x.json")]) == 2


def test_the_title_says_the_load_the_jobs_offer_and_the_one_asked_when_they_differ() -> None:
    from offpeak_sim.cli import load_note, report_title

    drawn = {"offered_load": 3.87, "offered_load_before_thinning": 57.2, "jobs_kept": 9, "jobs_in_period": 887,
             "online_layout": "alibaba"}
    title = report_title(nodes=4, gpus_per_node=8, days=1.0, forecast="seasonal", asked_load=0.8, scenario=drawn)
    assert title == "4 nodes × 8 GPUs, 1 day, online alibaba, forecast seasonal, load 3.87 (asked 0.8)"
    note = load_note(asked=0.8, scenario=drawn)
    assert note is not None and "the 9 jobs kept (of 887, each with probability 1.4%) offer load 3.87" in note
    close = {**drawn, "offered_load": 0.85}
    assert load_note(asked=0.8, scenario=close) is None
    assert report_title(nodes=4, gpus_per_node=8, days=2.5, forecast="exact", asked_load=0.8,
                        scenario=close).endswith("2.5 days, online alibaba, forecast exact, load 0.85")
    short = {**drawn, "offered_load": 0.3, "offered_load_before_thinning": 0.3}
    assert "the job trace offers only load 0.30 in these days" in str(load_note(asked=0.8, scenario=short))
