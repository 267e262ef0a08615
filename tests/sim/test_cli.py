"""The `offpeak simulate` contract: scenario files and the flags over them, report keys, plots, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from offpeak.cli import main
from offpeak_sim import paths

CONTRACT_KEYS = ("harvested_gpu_hours", "harvest_share", "evictions", "lost_gpu_seconds", "jct_mean_s", "jct_p95_s")


def scenario(tmp_path: Path, text: str, name: str = "small.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


SMALL = "workload: {history_days: 1}\n"  # one day of history keeps the runs short


def test_simulate_writes_report_with_contract_keys_and_plots(tmp_path: Path, capsys) -> None:
    out = tmp_path / "r.json"
    rc = main(["simulate", "--scenario", scenario(tmp_path, SMALL), "--nodes", "6", "--days", "0.5", "--seed", "3",
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
    rc = main(["simulate", "--scenario", scenario(tmp_path, SMALL), "--nodes", "3", "--days", "0.2",
               "--policies", "backfill",
               "--online-trace", str(root / "traces" / "philly-node-sequence"),
               "--jobs-trace", str(root / "traces" / "ms-itp-elasticflow"),
               "--report", str(tmp_path / "r.json"), "--quiet"])
    assert rc == 0
    assert list(json.loads((tmp_path / "r.json").read_text())) == ["backfill"]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--policies", "fifo"], "policies (--policies): unknown policy"),
        (["--nodes", "0"], "cluster.nodes (--nodes)"),
        (["--days", "-1"], "workload.days (--days)"),
        (["--online-trace", "/nonexistent/x"], "not found"),
        (["--scenario", "/nonexistent/s.yaml"], "scenario file not found: /nonexistent/s.yaml"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    rc = main(["simulate", *argv, "--report", str(tmp_path / "r.json"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and err.count("\n") == 1


def test_a_refused_scenario_file_is_one_line_naming_the_file_and_the_field(tmp_path: Path, capsys) -> None:
    path = scenario(tmp_path, "pools:\n  announce:\n    ceiling: true\n", "poolcap.yaml")
    rc = main(["simulate", "--scenario", path, "--report", str(tmp_path / "r.json"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert f"scenario {path}: pools.announce.ceiling needs pools.announce.minutes > 0" in err


def test_show_scenario_prints_the_file_the_flags_and_every_default_and_runs_nothing(tmp_path: Path, capsys) -> None:
    path = scenario(tmp_path, "cluster: {nodes: 50}\nworkload: {days: 2}\nengine: {yield: true}\n")
    assert main(["simulate", "--scenario", path, "--days", "1.5", "--show-scenario"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["cluster"]["nodes"] == 50 and shown["engine"]["yield"] is True  # the file's
    assert shown["workload"]["days"] == 1.5  # the flag wins over the file
    assert shown["forecast"]["quantile"] == 0.9 and shown["pools"]["announce"]["minutes"] == 0.0  # defaults
    again = scenario(tmp_path, yaml.safe_dump(shown), "again.yaml")  # a file started from it is the same scenario
    assert main(["simulate", "--scenario", again, "--show-scenario"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == shown
    assert main(["simulate", "--show-scenario"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["cluster"]["nodes"] == 200  # no file: all defaults
    assert main(["simulate"]) == 2 and "--report" in capsys.readouterr().err


def test_a_scenario_files_settings_reach_the_run_and_the_meta_names_the_file(tmp_path: Path, capsys) -> None:
    helios = "helios-earth-vc-2020-05"
    base = ["simulate", "--nodes", "8", "--days", "0.2", "--policies", "offpeak-p90", "--quiet"]
    pool = scenario(tmp_path, f"""# pool windows with announced demand
online_trace: {helios}
workload: {{history_days: 1}}
pools:
  windows: true
  look_back_hours: 2
  announce: {{minutes: 35, ceiling: true, ceiling_block_minutes: 60}}
engine: {{restart_seconds: 0, yield: true, save_on_stop_seconds: 60}}
""", "pool.yaml")
    assert main([*base, "--scenario", pool, "--report", str(tmp_path / "pool.json")]) == 0
    meta = json.loads((tmp_path / "pool.meta.json").read_text())
    assert meta["scenario_files"] == [pool]
    assert meta["effective_scenario"]["pools"]["announce"]["ceiling_block_minutes"] == 60
    assert meta["effective_scenario"]["cluster"]["nodes"] == 8  # the flag's
    assert meta["scenario"]["online_layout"] == "helios" and meta["scenario"]["online_placement"] == "pods"
    feed, engine = meta["settings"]["feed"], meta["settings"]["engine"]
    assert feed["pool_windows"] is True and feed["pool_look_back_seconds"] == 7200.0
    assert feed["pool_announce_seconds"] == 2100.0 and feed["pool_announce_ceiling"] is True
    assert feed["pool_ceiling_block_seconds"] == 3600.0 and feed["pool_floor_block_seconds"] == 0.0
    assert engine["restart_seconds"] == 0.0 and engine["goodput"]["startup_seconds"] == 0.0
    assert engine["yield_at_checkpoints"] is True and engine["save_on_stop_seconds"] == 60.0
    assert "yields" in json.loads((tmp_path / "pool.json").read_text())["offpeak-p90"]
    pinned = scenario(tmp_path, "online: {placement: pinned}\nworkload: {history_days: 1}\n", "pinned.yaml")
    assert main([*base, "--scenario", pinned, "--online-trace", helios, "--report", str(tmp_path / "p.json")]) == 0
    meta = json.loads((tmp_path / "p.meta.json").read_text())
    assert meta["scenario"]["online_placement"] == "pinned"
    assert meta["settings"]["scenario"]["online"]["placement"] == "pinned"
    assert meta["settings"]["engine"]["restart_seconds"] == 60.0 and meta["scenario_files"] == [pinned]


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
