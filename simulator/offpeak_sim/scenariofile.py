"""Scenario files: one experiment as YAML, read and validated once, turned into the settings a run takes.

A file holds what an experiment changes from the defaults, in sections (docs/simulator.md, "Scenario files");
every default is the settings class's own, read from it here, so the file format and the code cannot disagree.
`load` reads the files (a later one overrides an earlier one, field by field), lays the command line's few
overrides on top, and checks every rule in this module: the settings classes are then handed values known to fit
together and do not check them again. A refusal is a `UserError` that names the file(s) and the field as written
in YAML (and the flag, when a flag set it), so a typo in a 40-line file is found from the message alone.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import yaml

from offpeak.errors import UserError
from offpeak_core.forecast import ForecastSettings
from offpeak_core.goodput import GoodputSettings
from offpeak_sim import paths
from offpeak_sim.fleet import parse_mix
from offpeak_sim.forecasting import FeedSettings
from offpeak_sim.online import OnlineSettings, detect_layout
from offpeak_sim.policies import DEFAULT_SET, Policy, parse_policies
from offpeak_sim.scenario import ScenarioSettings
from offpeak_sim.settings import EngineSettings

NonNegative = Annotated[float, msgspec.Meta(ge=0)]
Positive = Annotated[float, msgspec.Meta(gt=0)]
Share = Annotated[float, msgspec.Meta(ge=0, le=1)]
AtLeastOne = Annotated[int, msgspec.Meta(ge=1)]
WholeMinutes = Annotated[int, msgspec.Meta(ge=0)]


class Section(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A group of fields; an unknown field (a typo) is refused, not ignored."""


class Cluster(Section):
    nodes: AtLeastOne = ScenarioSettings.nodes
    gpus_per_node: AtLeastOne = ScenarioSettings.gpus_per_node
    # GPU type -> share of the nodes (normalised; offpeak_sim.fleet.SLOWDOWN names the known types)
    gpu_mix: dict[str, NonNegative] = msgspec.field(default_factory=lambda: parse_mix(ScenarioSettings.gpu_mix))


class Workload(Section):
    days: Positive = ScenarioSettings.days
    history_days: AtLeastOne = ScenarioSettings.history_days
    jobs_start_day: NonNegative = ScenarioSettings.jobs_start_day
    load: Positive = ScenarioSettings.load  # offered offline GPU-seconds / idle GPU-seconds
    clusters: list[str] = msgspec.field(default_factory=list)  # ITP clusters, e.g. ["04", "07"]; empty: all
    seed: Annotated[int, msgspec.Meta(ge=0)] = ScenarioSettings.seed
    fold_wide_jobs: bool = ScenarioSettings.fold_wide_jobs
    gangs: bool = EngineSettings.gangs


class Online(Section):
    placement: Literal["pods", "pinned"] = OnlineSettings.placement  # Helios and Philly; Alibaba is always pinned
    busy_util_pct: Annotated[float, msgspec.Meta(ge=0, le=100)] = OnlineSettings.busy_util_pct  # Alibaba
    hold_minutes: Annotated[int, msgspec.Meta(ge=0)] = OnlineSettings.hold_minutes  # Alibaba


class Forecast(Section):
    mode: Literal["seasonal", "exact"] = FeedSettings.mode
    quantile: Share = ForecastSettings.quantile
    refresh_seconds: Positive = FeedSettings.refresh_seconds


class Announce(Section):
    minutes: NonNegative = FeedSettings.pool_announce_seconds / 60.0
    ceiling: bool = FeedSettings.pool_announce_ceiling
    ceiling_block_minutes: WholeMinutes = int(FeedSettings.pool_ceiling_block_seconds // 60)
    floor_block_minutes: WholeMinutes = int(FeedSettings.pool_floor_block_seconds // 60)


class Pools(Section):
    windows: bool = FeedSettings.pool_windows
    look_back_hours: Positive = FeedSettings.pool_look_back_seconds / 3600.0
    forecast: Literal["rise", "exact"] = FeedSettings.pool_forecast
    lead_minutes: NonNegative = FeedSettings.pool_lead_seconds / 60.0
    announce: Announce = msgspec.field(default_factory=Announce)


class Engine(Section):
    checkpoint_interval_seconds: NonNegative = EngineSettings.checkpoint_seconds  # 0: jobs do not checkpoint
    restart_seconds: NonNegative = EngineSettings.restart_seconds
    eviction_grace_seconds: NonNegative = EngineSettings.eviction_grace_seconds
    margin: NonNegative = EngineSettings.margin
    min_efficiency: Annotated[float, msgspec.Meta(gt=0, le=1)] = GoodputSettings.min_efficiency
    yield_: bool = msgspec.field(default=EngineSettings.yield_at_checkpoints, name="yield")
    save_on_stop_seconds: NonNegative = EngineSettings.save_on_stop_seconds
    # seconds after an attempt's start-up its pace is measured and timed by (null: by its prediction throughout)
    live_pace_seconds: NonNegative | None = EngineSettings.live_pace_seconds


class Elastic(Section):
    min_fraction: Share | None = EngineSettings.elastic_min_fraction  # null or 0: elastic width off
    from_gpus: AtLeastOne = EngineSettings.elastic_from_gpus
    narrow: bool = EngineSettings.elastic_narrow
    join: bool = EngineSettings.elastic_join


class Predictor(Section):
    reports: str | None = None  # folder of the predictor's evaluation JSON; null: <repo>/reports/predictor
    sigma: NonNegative | None = ScenarioSettings.predictor_sigma  # set: log-normal error of this sigma instead


class ScenarioFile(Section):
    """A whole scenario, as the YAML file spells it."""

    online_trace: str = paths.DEFAULT_ONLINE_TRACE  # a name under <data root>/traces, or a folder
    jobs_trace: str = paths.DEFAULT_JOBS_TRACE
    policies: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_SET))
    cluster: Cluster = msgspec.field(default_factory=Cluster)
    workload: Workload = msgspec.field(default_factory=Workload)
    online: Online = msgspec.field(default_factory=Online)
    forecast: Forecast = msgspec.field(default_factory=Forecast)
    pools: Pools = msgspec.field(default_factory=Pools)
    engine: Engine = msgspec.field(default_factory=Engine)
    elastic: Elastic = msgspec.field(default_factory=Elastic)
    predictor: Predictor = msgspec.field(default_factory=Predictor)


@dataclass(frozen=True)
class Override:
    """One value set on the command line: `path` as in YAML (`cluster.nodes`), `flag` to name it in errors."""

    path: str
    value: Any
    flag: str


@dataclass(frozen=True)
class RunSettings:
    """What `runner.run` takes."""

    scenario: ScenarioSettings
    feed: FeedSettings
    engine: EngineSettings
    policies: tuple[Policy, ...]


@dataclass(frozen=True)
class LoadedScenario:
    files: tuple[str, ...]  # as given, in order
    spec: ScenarioFile  # the effective scenario: files, overrides, every default filled in
    settings: RunSettings


def load(files: Sequence[str | Path] = (), overrides: Sequence[Override] = ()) -> LoadedScenario:
    """Read `files` in order, apply `overrides`, check every rule, and build the run's settings."""
    names = tuple(str(f) for f in files)
    merged: dict[str, Any] = {}
    for name in names:
        raw = _read(name)
        _convert(raw, _Namer(f"scenario {name}", {}))  # a file's own mistakes are named with it alone
        merged = _merge(merged, raw, ScenarioFile)
    for o in overrides:
        merged = _merge(merged, _nested(o.path, o.value), ScenarioFile)
    namer = _Namer(f"scenario {' + '.join(names)}" if names else "scenario (defaults)",
                   {o.path: o.flag for o in overrides})
    spec = _convert(merged, namer)
    return LoadedScenario(names, spec, _settings(spec, namer))


def as_builtins(spec: ScenarioFile) -> dict[str, Any]:
    """The scenario as plain data (what a report's meta records and `dump` writes)."""
    out: dict[str, Any] = msgspec.to_builtins(spec)
    return out


def dump(spec: ScenarioFile) -> str:
    """The scenario as a YAML file that `load` reads back to the same scenario."""
    return yaml.safe_dump(as_builtins(spec), sort_keys=False, default_flow_style=False)


class _Namer:
    """Names a field in a message: its YAML path, and the flag that set it, if one did."""

    def __init__(self, label: str, flags: Mapping[str, str]) -> None:
        self.label = label
        self.flags = flags

    def __call__(self, path: str) -> str:
        return f"{path} ({self.flags[path]})" if path in self.flags else path

    def refuse(self, message: str) -> UserError:
        return UserError(f"{self.label}: {message}")


def _read(name: str) -> dict[str, Any]:
    try:
        text = Path(name).expanduser().read_text()
    except FileNotFoundError:
        raise UserError(f"scenario file not found: {name}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"scenario {name}: cannot read it: {e}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise UserError(f"scenario {name}: not valid YAML{line}: {getattr(e, 'problem', None) or e}") from None
    if raw is None:  # an empty file: every default
        return {}
    if not isinstance(raw, dict):
        raise UserError(f"scenario {name}: expected a mapping of sections ({', '.join(_field_names(ScenarioFile))}), "
                        f"got {type(raw).__name__}")
    return raw


def _convert(raw: Mapping[str, Any], name: _Namer) -> ScenarioFile:
    """`raw` as a ScenarioFile, msgspec's refusal rewritten to name the field as YAML spells it."""
    try:
        return msgspec.convert(raw, ScenarioFile)
    except msgspec.ValidationError as e:
        raise name.refuse(_explain(str(e), raw, name)) from None


_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$")


def _explain(message: str, raw: Mapping[str, Any], name: _Namer) -> str:
    """msgspec's "Expected `int` >= 1 - at `$.cluster.nodes`" as "cluster.nodes: expected `int` >= 1 (got 0)"."""
    m = _AT.match(message)
    what, at = (m["what"], (m["path"] or "").lstrip(".")) if m else (message, "")
    unknown = re.fullmatch(r"Object contains unknown field `(.+)`", what)
    if unknown:
        section = _section_type(at)
        known = f"; known: {', '.join(_field_names(section))}" if section is not None else ""
        field = f"{at}.{unknown[1]}" if at else unknown[1]
        return f"{field}: unknown field{known}"
    detail = what[0].lower() + what[1:] if what else what
    value = _value_at(raw, at)
    said = "got" in detail or detail.startswith("invalid enum value")  # msgspec named the value already
    got = f" (got {value!r})" if value is not _MISSING and not said else ""
    choices = _choices(at)
    return f"{name(at)}: {detail}{got}{choices}" if at else f"{detail}{got}"


_MISSING = object()


def _value_at(raw: Any, path: str) -> Any:
    for part in filter(None, re.split(r"\.|\[(\d+)\]", path)):
        if isinstance(raw, Mapping) and part in raw:
            raw = raw[part]
        elif isinstance(raw, list) and part.isdigit() and int(part) < len(raw):
            raw = raw[int(part)]
        else:
            return _MISSING
    return raw


def _field_type(path: str) -> Any:
    """The declared type of the field at `path` (`pools.announce.minutes`), or None when there is none."""
    kind: Any = ScenarioFile
    for part in filter(None, re.sub(r"\[\d+\]", "", path).split(".")):
        if not (isinstance(kind, type) and issubclass(kind, Section)):
            return None
        found = {f.encode_name: f.type for f in msgspec.structs.fields(kind)}
        if part not in found:
            return None
        kind = found[part]
    return kind


def _section_type(path: str) -> type[Section] | None:
    kind = _field_type(path)
    return kind if isinstance(kind, type) and issubclass(kind, Section) else None


def _field_names(section: type[Section]) -> list[str]:
    return [f.encode_name for f in msgspec.structs.fields(section)]


def _choices(path: str) -> str:
    kind = _field_type(path) if path else None
    if typing.get_origin(kind) is Literal:
        return f"; one of {', '.join(map(str, typing.get_args(kind)))}"
    return ""


def _nested(path: str, value: Any) -> dict[str, Any]:
    """`cluster.nodes`, 6 -> {"cluster": {"nodes": 6}}."""
    head, _, rest = path.partition(".")
    return {head: _nested(rest, value) if rest else value}


def _merge(base: Mapping[str, Any], top: Mapping[str, Any], kind: type[Section]) -> dict[str, Any]:
    """`top` over `base`: sections are merged field by field, any other value (a list, a GPU mix) replaced whole."""
    out = dict(base)
    types = {f.encode_name: f.type for f in msgspec.structs.fields(kind)}
    for key, value in top.items():
        sub = types.get(key)
        if (isinstance(sub, type) and issubclass(sub, Section) and isinstance(value, Mapping)
                and isinstance(out.get(key), Mapping)):
            out[key] = _merge(out[key], value, sub)
        else:
            out[key] = value
    return out


def _trace_dir(text: str, *, field: str, what: str, name: _Namer) -> Path:
    """A bare name (no '/', not starting with '.' or '~') is a trace under the data root; anything else a folder."""
    folder = Path(text).expanduser() if "/" in text or text.startswith((".", "~")) else paths.trace_dir(text)
    try:
        return paths.existing_dir(folder, what=what)
    except UserError as e:
        raise name.refuse(f"{name(field)}: {e}") from None


def _settings(s: ScenarioFile, name: _Namer) -> RunSettings:
    """Check the rules that tie fields together, then build the settings (msgspec has checked each field alone)."""
    online_dir = _trace_dir(s.online_trace, field="online_trace", what="online trace", name=name)
    jobs_dir = _trace_dir(s.jobs_trace, field="jobs_trace", what="jobs trace", name=name)
    try:
        layout = detect_layout(online_dir)
    except UserError as e:
        raise name.refuse(f"{name('online_trace')}: {e}") from None
    try:
        policies = parse_policies(",".join(s.policies))
    except UserError as e:
        raise name.refuse(f"{name('policies')}: {e}") from None
    mix = ",".join(f"{gpu}:{share!r}" for gpu, share in s.cluster.gpu_mix.items())
    try:
        parse_mix(mix)
    except UserError as e:
        raise name.refuse(f"cluster.gpu_mix: {e}") from None
    _check_rules(s, layout=layout, name=name)

    p, a, eng, el = s.pools, s.pools.announce, s.engine, s.elastic
    scenario = ScenarioSettings(
        online_trace=online_dir,
        jobs_trace=jobs_dir,
        nodes=s.cluster.nodes,
        gpus_per_node=s.cluster.gpus_per_node,
        gpu_mix=mix,
        days=s.workload.days,
        history_days=s.workload.history_days,
        jobs_start_day=s.workload.jobs_start_day,
        load=s.workload.load,
        clusters=tuple(s.workload.clusters),
        seed=s.workload.seed,
        online=OnlineSettings(busy_util_pct=s.online.busy_util_pct, hold_minutes=s.online.hold_minutes,
                              placement=s.online.placement),
        predictor_reports=(Path(s.predictor.reports).expanduser() if s.predictor.reports is not None
                           else paths.repo_root() / "reports" / "predictor"),
        predictor_sigma=s.predictor.sigma,
        fold_wide_jobs=s.workload.fold_wide_jobs,
    )
    feed = FeedSettings(
        mode=s.forecast.mode,
        refresh_seconds=s.forecast.refresh_seconds,
        forecast=ForecastSettings(quantile=s.forecast.quantile),
        pool_windows=p.windows,
        pool_look_back_seconds=p.look_back_hours * 3600.0,
        pool_forecast=p.forecast,
        pool_lead_seconds=p.lead_minutes * 60.0,
        pool_announce_seconds=a.minutes * 60.0,
        pool_announce_ceiling=a.ceiling,
        pool_ceiling_block_seconds=a.ceiling_block_minutes * 60.0,
        pool_floor_block_seconds=a.floor_block_minutes * 60.0,
    )
    engine = EngineSettings(
        checkpoint_seconds=eng.checkpoint_interval_seconds,
        eviction_grace_seconds=eng.eviction_grace_seconds,
        margin=eng.margin,
        gangs=s.workload.gangs,
        goodput=replace(EngineSettings().goodput, min_efficiency=eng.min_efficiency),
        restart_seconds=eng.restart_seconds,
        yield_at_checkpoints=eng.yield_,
        save_on_stop_seconds=eng.save_on_stop_seconds,
        live_pace_seconds=eng.live_pace_seconds,
        elastic_min_fraction=el.min_fraction or None,
        elastic_from_gpus=el.from_gpus,
        elastic_join=el.join,
        elastic_narrow=el.narrow,
    )
    return RunSettings(scenario, feed, engine, tuple(policies))


def _check_rules(s: ScenarioFile, *, layout: str, name: _Namer) -> None:
    """The rules between fields; every one broken is named, on one line."""
    p, a, e = s.pools, s.pools.announce, s.engine
    pod_placed = layout != "alibaba" and s.online.placement == "pods"
    broken: list[str] = []
    if e.save_on_stop_seconds > 0 and not e.yield_:
        broken.append(f"{name('engine.save_on_stop_seconds')} needs {name('engine.yield')}: true (jobs save as they "
                      "stop only at a planned stop)")
    if (s.elastic.join or s.elastic.narrow) and not s.elastic.min_fraction:
        broken.append(f"{name('elastic.join')} and {name('elastic.narrow')} need {name('elastic.min_fraction')} > 0 "
                      "(elastic width on)")
    if s.forecast.mode == "exact" and pod_placed:
        broken.append(f"{name('forecast.mode')}: exact needs the future online demand per node, which pod-placed "
                      f"online demand ({name('online_trace')}: a {layout} trace) does not have: set "
                      f"{name('online.placement')}: pinned")
    if p.windows and (not pod_placed or s.forecast.mode != "seasonal"):
        broken.append(f"{name('pools.windows')} needs pod-placed online demand (a Helios or Philly trace in "
                      f"{name('online_trace')}, {name('online.placement')}: pods) and {name('forecast.mode')}: "
                      "seasonal")
    if p.forecast != "rise" and not p.windows:
        broken.append(f"{name('pools.forecast')}: {p.forecast} needs {name('pools.windows')}: true")
    if p.lead_minutes > 0 and (not p.windows or p.forecast != "rise"):
        broken.append(f"{name('pools.lead_minutes')} needs {name('pools.windows')}: true and "
                      f"{name('pools.forecast')}: rise")
    if a.minutes > 0 and (not p.windows or p.forecast != "rise" or p.lead_minutes > 0):
        broken.append(f"{name('pools.announce.minutes')} needs {name('pools.windows')}: true, "
                      f"{name('pools.forecast')}: rise and no {name('pools.lead_minutes')}")
    if a.ceiling and a.minutes <= 0:
        broken.append(f"{name('pools.announce.ceiling')} needs {name('pools.announce.minutes')} > 0")
    if a.ceiling_block_minutes > 0 and not a.ceiling:
        broken.append(f"{name('pools.announce.ceiling_block_minutes')} needs {name('pools.announce.ceiling')}: true")
    if a.floor_block_minutes > 0 and a.minutes <= 0:
        broken.append(f"{name('pools.announce.floor_block_minutes')} needs {name('pools.announce.minutes')} > 0")
    if broken:
        raise name.refuse("; ".join(broken))
