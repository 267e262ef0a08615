"""Scenario files (`offpeak_sim.scenariofile`): every field reaches the settings a run takes, every rule is checked
once there, and a refusal names the file and the field as YAML spells it. The committed experiments all load."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from offpeak.errors import UserError
from offpeak_sim import paths
from offpeak_sim.forecasting import FeedSettings
from offpeak_sim.policies import DEFAULT_SET
from offpeak_sim.scenario import ScenarioSettings
from offpeak_sim.scenariofile import Override, ScenarioFile, dump, load
from offpeak_sim.settings import EngineSettings

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "reports" / "sim" / "scenarios"
REGENERATE = ROOT / "reports" / "sim" / "regenerate.sh"
HELIOS = "helios-earth-vc-2020-05"


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def refusal(*files: Path, overrides: tuple[Override, ...] = ()) -> str:
    with pytest.raises(UserError) as e:
        load(files, overrides)
    return str(e.value)


def test_no_file_gives_the_settings_classes_own_defaults() -> None:
    got = load().settings
    assert got.scenario == ScenarioSettings(
        online_trace=paths.trace_dir(paths.DEFAULT_ONLINE_TRACE),
        jobs_trace=paths.trace_dir(paths.DEFAULT_JOBS_TRACE),
        predictor_reports=paths.repo_root() / "reports" / "predictor",
    )
    assert got.feed == FeedSettings()
    assert got.engine == EngineSettings()
    assert [p.name for p in got.policies] == list(DEFAULT_SET)


def test_every_field_of_a_file_reaches_the_settings_the_engine_gets(tmp_path: Path) -> None:
    path = write(tmp_path, f"""
online_trace: {HELIOS}
policies: [backfill, offpeak-p90]
cluster: {{nodes: 12, gpus_per_node: 4, gpu_mix: {{H100-SXM5-80GB: 1}}}}
workload: {{days: 2.5, history_days: 3, jobs_start_day: 1, load: 0.5, clusters: ["04", "07"], seed: 9,
           fold_wide_jobs: true, gangs: false}}
online: {{placement: pods, busy_util_pct: 20, hold_minutes: 2}}
forecast: {{mode: seasonal, quantile: 0.8, refresh_seconds: 300}}
pools:
  windows: true
  look_back_hours: 2
  announce: {{minutes: 35, ceiling: true, ceiling_block_minutes: 60, floor_block_minutes: 30}}
engine: {{checkpoint_interval_seconds: 600, restart_seconds: 0, eviction_grace_seconds: 10, margin: 0.3,
         min_efficiency: 0.7, yield: true, save_on_stop_seconds: 60, live_pace_seconds: 120}}
elastic: {{min_fraction: 0.5, from_gpus: 9, narrow: true, join: true}}
predictor: {{reports: {tmp_path}, sigma: 0.3}}
""")
    s = load([path]).settings
    sc, feed, engine = s.scenario, s.feed, s.engine
    assert [p.name for p in s.policies] == ["backfill", "offpeak-p90"]
    assert sc.online_trace == paths.trace_dir(HELIOS)
    assert (sc.nodes, sc.gpus_per_node, sc.gpu_mix) == (12, 4, "H100-SXM5-80GB:1.0")
    assert (sc.days, sc.history_days, sc.jobs_start_day, sc.load, sc.clusters, sc.seed) == (
        2.5, 3, 1.0, 0.5, ("04", "07"), 9)
    assert sc.fold_wide_jobs and not engine.gangs
    assert (sc.online.placement, sc.online.busy_util_pct, sc.online.hold_minutes) == ("pods", 20.0, 2)
    assert (sc.predictor_reports, sc.predictor_sigma) == (tmp_path, 0.3)
    assert (feed.mode, feed.forecast.quantile, feed.refresh_seconds) == ("seasonal", 0.8, 300.0)
    assert feed.pool_windows and feed.pool_look_back_seconds == 7200.0 and feed.pool_forecast == "rise"
    assert (feed.pool_announce_seconds, feed.pool_announce_ceiling) == (2100.0, True)
    assert (feed.pool_ceiling_block_seconds, feed.pool_floor_block_seconds) == (3600.0, 1800.0)
    assert (engine.checkpoint_seconds, engine.restart_seconds, engine.eviction_grace_seconds, engine.margin) == (
        600.0, 0.0, 10.0, 0.3)
    assert engine.goodput.min_efficiency == 0.7 and engine.goodput.startup_seconds == 0.0
    assert engine.yield_at_checkpoints and engine.save_on_stop_seconds == 60.0 and engine.live_pace_seconds == 120.0
    assert (engine.elastic_min_fraction, engine.elastic_from_gpus, engine.elastic_narrow, engine.elastic_join) == (
        0.5, 9, True, True)


def test_a_later_file_overrides_an_earlier_one_field_by_field_and_a_flag_overrides_both(tmp_path: Path) -> None:
    base = write(tmp_path, "cluster: {nodes: 50, gpu_mix: {V100-SXM2-16GB: 1, A100-SXM4-40GB: 1}}\n"
                           "engine: {margin: 0.3, yield: true}\n", "base.yaml")
    top = write(tmp_path, "cluster: {gpu_mix: {H100-SXM5-80GB: 1}}\nengine: {margin: 0.5}\n", "top.yaml")
    got = load([base, top])
    assert got.files == (str(base), str(top))
    assert got.spec.cluster.nodes == 50  # kept from the first file
    assert got.settings.scenario.gpu_mix == "H100-SXM5-80GB:1.0"  # a mapping is replaced whole, not merged
    assert got.settings.engine.margin == 0.5 and got.settings.engine.yield_at_checkpoints
    flags = (Override("cluster.nodes", 7, "--nodes"), Override("policies", ["oracle"], "--policies"))
    got = load([base, top], flags)
    assert got.settings.scenario.nodes == 7 and [p.name for p in got.settings.policies] == ["oracle"]


def test_a_typo_is_refused_naming_the_file_the_field_and_the_fields_it_could_be(tmp_path: Path) -> None:
    path = write(tmp_path, "pools:\n  windws: true\n")
    assert refusal(path) == (f"scenario {path}: pools.windws: unknown field; known: windows, look_back_hours, "
                             "forecast, lead_minutes, announce")
    path = write(tmp_path, "cluster: {nodes: 8}\nnodes: 8\n")
    assert refusal(path).startswith(f"scenario {path}: nodes: unknown field; known: online_trace, jobs_trace, ")


@pytest.mark.parametrize("text,message", [
    ("cluster: {nodes: 0}", "cluster.nodes: expected `int` >= 1 (got 0)"),
    ("cluster: {nodes: many}", "cluster.nodes: expected `int`, got `str`"),
    ("workload: {days: -1}", "workload.days: expected `float` > 0.0 (got -1)"),
    ("workload: {clusters: [04]}", "workload.clusters[0]: expected `str`, got `int`"),
    ("forecast: {quantile: 1.5}", "forecast.quantile: expected `float` <= 1.0 (got 1.5)"),
    ("forecast: {mode: perfect}", "forecast.mode: invalid enum value 'perfect'; one of seasonal, exact"),
    ("predictor: {sigma: -0.1}", "predictor.sigma: expected `float` >= 0.0 (got -0.1)"),
    ("engine: {min_efficiency: 0}", "engine.min_efficiency: expected `float` > 0.0 (got 0)"),
    ("engine: {restart_seconds: -1}", "engine.restart_seconds: expected `float` >= 0.0 (got -1)"),
    ("elastic: {min_fraction: 1.5}", "elastic.min_fraction: expected `float` <= 1.0 (got 1.5)"),
    ("pools: {look_back_hours: 0}", "pools.look_back_hours: expected `float` > 0.0 (got 0)"),
    ("pools: {announce: {ceiling_block_minutes: 7.5}}", "pools.announce.ceiling_block_minutes: expected `int`, "
                                                        "got `float`"),
    ("policies: [fifo]", "policies: unknown policy fifo"),
    ("cluster: {gpu_mix: {T4: 1}}", "cluster.gpu_mix: unknown GPU type 'T4'"),
    ("online_trace: no-such-trace", "online_trace: online trace folder not found"),
    ("- a list", "expected a mapping of sections"),
    ("cluster: [", "not valid YAML"),
])
def test_a_bad_value_is_refused_with_the_files_name_and_the_fields_path(tmp_path: Path, text: str,
                                                                        message: str) -> None:
    path = write(tmp_path, text + "\n")
    got = refusal(path)
    assert got.startswith(f"scenario {path}: ") and message in got, got


# the rules between fields that `offpeak simulate`'s flags were refused by, now the file's (same meaning)
@pytest.mark.parametrize("text,message", [
    ("engine: {save_on_stop_seconds: 60}", "engine.save_on_stop_seconds needs engine.yield: true"),
    ("elastic: {join: true}", "elastic.join and elastic.narrow need elastic.min_fraction > 0"),
    ("elastic: {min_fraction: 0, narrow: true}", "elastic.join and elastic.narrow need elastic.min_fraction > 0"),
    (f"online_trace: {HELIOS}\nforecast: {{mode: exact}}", "set online.placement: pinned"),
    ("pools: {windows: true}", "pools.windows needs pod-placed online demand"),  # the default trace is Alibaba's
    (f"online_trace: {HELIOS}\nonline: {{placement: pinned}}\npools: {{windows: true}}",
     "pools.windows needs pod-placed online demand"),
    (f"online_trace: {HELIOS}\nonline: {{placement: pinned}}\nforecast: {{mode: exact}}\npools: {{windows: true}}",
     "and forecast.mode: seasonal"),
    ("pools: {forecast: exact}", "pools.forecast: exact needs pools.windows: true"),
    (f"online_trace: {HELIOS}\npools: {{lead_minutes: 30}}", "pools.lead_minutes needs pools.windows: true"),
    (f"online_trace: {HELIOS}\npools: {{windows: true, forecast: exact, lead_minutes: 30}}",
     "pools.lead_minutes needs pools.windows: true and pools.forecast: rise"),
    (f"online_trace: {HELIOS}\npools: {{windows: true, lead_minutes: 35, announce: {{minutes: 35}}}}",
     "pools.announce.minutes needs pools.windows: true, pools.forecast: rise and no pools.lead_minutes"),
    (f"online_trace: {HELIOS}\npools: {{windows: true, announce: {{ceiling: true}}}}",
     "pools.announce.ceiling needs pools.announce.minutes > 0"),
    (f"online_trace: {HELIOS}\npools: {{windows: true, announce: {{minutes: 35, ceiling_block_minutes: 60}}}}",
     "pools.announce.ceiling_block_minutes needs pools.announce.ceiling: true"),
    (f"online_trace: {HELIOS}\npools: {{windows: true, announce: {{floor_block_minutes: 60}}}}",
     "pools.announce.floor_block_minutes needs pools.announce.minutes > 0"),
])
def test_a_rule_between_fields_is_refused_naming_the_fields(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text + "\n")
    got = refusal(path)
    assert got.startswith(f"scenario {path}: ") and message in got and "\n" not in got, got


def test_a_rule_is_checked_on_the_effective_scenario_and_names_the_flag_that_broke_it(tmp_path: Path) -> None:
    pool = write(tmp_path, f"online_trace: {HELIOS}\npools: {{windows: true}}\n")
    assert load([pool]).settings.feed.pool_windows
    alibaba = Override("online_trace", paths.DEFAULT_ONLINE_TRACE, "--online-trace")
    assert "online_trace (--online-trace)" in refusal(pool, overrides=(alibaba,))
    got = refusal(overrides=(Override("cluster.nodes", 0, "--nodes"),))
    assert got == "scenario (defaults): cluster.nodes (--nodes): expected `int` >= 1 (got 0)"


def test_a_trace_is_a_name_under_the_data_root_or_a_folder(tmp_path: Path) -> None:
    folder = paths.data_root() / "traces" / HELIOS
    by_name = load(overrides=(Override("online_trace", HELIOS, "--online-trace"),))
    by_path = load(overrides=(Override("online_trace", str(folder), "--online-trace"),))
    assert by_name.settings.scenario.online_trace == by_path.settings.scenario.online_trace == folder
    assert by_name.spec.online_trace == HELIOS  # the scenario keeps the name as written


def test_the_dumped_scenario_loads_back_to_the_same_scenario(tmp_path: Path) -> None:
    path = write(tmp_path, f"online_trace: {HELIOS}\npools: {{windows: true, announce: {{minutes: 35}}}}\n"
                           "workload: {clusters: ['04']}\nengine: {yield: true}\n")
    spec = load([path]).spec
    again = write(tmp_path, dump(spec), "again.yaml")
    assert load([again]).spec == spec
    assert yaml.safe_load(dump(ScenarioFile()))["engine"]["yield"] is False  # the YAML name, not Python's


def regenerate_runs() -> list[tuple[str, str]]:
    """(scenario name, trace) of every `run NAME TRACE...` in reports/sim/regenerate.sh."""
    code = "\n".join(re.sub(r"(^|\s)#.*$", "", line) for line in REGENERATE.read_text().splitlines())
    runs = []
    for m in re.finditer(r"\brun\s+(?:--plots\s+)?([\w-]+)((?:[ \t]+(?:alibaba|helios)\b)+)", code):
        runs += [(m[1], trace) for trace in m[2].split()]
    return runs


def regenerate_traces() -> dict[str, str]:
    return dict(re.findall(r"\[(\w+)\]=([\w.-]+)", REGENERATE.read_text()))


def test_regenerate_names_only_scenario_files_that_exist_and_runs_every_one() -> None:
    runs = regenerate_runs()
    named = {name for name, _ in runs}
    files = {p.stem for p in SCENARIOS.glob("*.yaml")}
    assert len(named) >= 17 and {"days", "poolcap", "elastic-wide"} <= named
    assert named - files == set(), "regenerate.sh runs scenarios that have no file"
    assert files - named == set(), "scenario files that regenerate.sh does not run"
    assert set(regenerate_traces()) == {trace for _, trace in runs} == {"alibaba", "helios"}


@pytest.mark.parametrize("name,trace", sorted(set(regenerate_runs())))
def test_every_committed_scenario_loads_on_the_traces_regenerate_runs_it_on(name: str, trace: str) -> None:
    path = SCENARIOS / f"{name}.yaml"
    assert path.read_text().startswith("# "), "the first line says what the experiment tests"
    online = Override("online_trace", regenerate_traces()[trace], "--online-trace")
    got = load([path], (online,))
    assert got.settings.scenario.online_trace == paths.trace_dir(regenerate_traces()[trace])
    load([path])  # and on its own, on the trace it names (or the default)
