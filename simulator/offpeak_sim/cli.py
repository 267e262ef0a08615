"""`offpeak simulate`: trace-driven comparison of scheduling policies for offline jobs in idle GPU windows."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from offpeak.errors import UserError

DEFAULT_POLICIES = "default,backfill,user-estimate,offpeak,oracle"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="simulate a GPU cluster over days from real traces and compare scheduling policies",
        description="Replay real online GPU demand and an offline job stream on a simulated cluster; run every "
        "policy through the extender's decision code; print a table, write a JSON report and plots.",
    )
    p.add_argument("--online-trace", metavar="DIR", help="online demand trace folder (Alibaba GenAI, Helios or "
                   "Philly layout; default <data>/traces/alibaba-genai-serving-v2026)")
    p.add_argument("--jobs-trace", metavar="DIR", help="offline job trace folder in the ms-itp-elasticflow layout "
                   "(default <data>/traces/ms-itp-elasticflow)")
    p.add_argument("--nodes", type=int, default=200, help="GPU nodes (default 200)")
    p.add_argument("--gpus-per-node", type=int, default=8, help="GPUs per node (default 8)")
    p.add_argument("--gpu-mix", default=None, help="node GPU types, TYPE:share,... (default V100 1/4, A100 1/2, H100 1/4)")
    p.add_argument("--days", type=float, default=7.0, help="simulated days (default 7)")
    p.add_argument("--history-days", type=int, default=7, help="days of online history before the run (default 7)")
    p.add_argument("--jobs-start-day", type=float, default=0.0, help="day of the job trace to start at (default 0)")
    p.add_argument("--load", type=float, default=0.8,
                   help="thin the job stream to this offered load (GPU-seconds / idle GPU-seconds, default 0.8)")
    p.add_argument("--clusters", default="", help="ITP clusters to use, e.g. 04,07 (default all)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--policies", default=DEFAULT_POLICIES, help=f"comma-separated (default {DEFAULT_POLICIES})")
    p.add_argument("--checkpoint-interval", type=float, default=1800.0,
                   help="seconds between checkpoints; 0 = none (default 1800)")
    p.add_argument("--restart-seconds", type=float, default=None,
                   help="seconds every (re)start of a job spends before useful work (image, restore); the goodput "
                   "rule weighs the same figure (default: EngineSettings' 60)")
    p.add_argument("--yield", dest="yield_", action="store_true",
                   help="the offpeak policies stop a job at a checkpoint whose successor would land after its "
                   "forecast window ends (off by default)")
    p.add_argument("--save-on-stop", type=float, default=0.0, metavar="SECONDS",
                   help="with --yield: jobs save when told to stop (the TrainingJob checkpoint contract) within "
                   "SECONDS, so a planned stop comes that long before the window's end instead of at the last "
                   "periodic checkpoint (default 0: periodic checkpoints only)")
    p.add_argument("--elastic", type=float, default=None, metavar="MIN_FRACTION",
                   help="elastic width: a checkpointing job of N >= 2 GPUs may start on ceil(MIN_FRACTION x N)..N of "
                   "them, the widest that fits now, its runtime scaled by N / width (e.g. 0.5; default off)")
    p.add_argument("--elastic-from-gpus", type=int, default=2, metavar="G",
                   help="with --elastic: only jobs of at least G GPUs are elastic (default 2; 9 on 8-GPU nodes: only "
                   "jobs wider than a node)")
    p.add_argument("--elastic-narrow", action="store_true",
                   help="with --elastic: a gang that loses members to online work goes on with the others (if they "
                        "hold its least width and worker 0) from its last checkpoint instead of being requeued")
    p.add_argument("--elastic-join", action="store_true",
                   help="with --elastic: a running job's waiting workers join when GPUs open for them (the job "
                   "restarts from its last checkpoint, wider)")
    p.add_argument("--eviction-grace", type=float, default=30.0, help="seconds online work waits per eviction (default 30)")
    p.add_argument("--margin", type=float, default=None, help="extender filter margin on p90 (default: the extender's)")
    p.add_argument("--forecast", choices=("seasonal", "exact"), default="seasonal",
                   help="idle windows from the extender's seasonal forecaster or from the true future (default seasonal)")
    p.add_argument("--forecast-quantile", type=float, default=None,
                   help="seasonal forecaster's demand quantile per bin (default: the extender's, p90)")
    p.add_argument("--refresh-seconds", type=float, default=600.0, help="forecast refresh period (default 600)")
    p.add_argument("--predictor-reports", metavar="DIR", default=None,
                   help="predictor evaluation JSON folder for the error profile (default <repo>/reports/predictor)")
    p.add_argument("--predictor-sigma", type=float, default=None,
                   help="use a log-normal predictor error with this sigma instead of the predictor's report")
    p.add_argument("--min-efficiency", type=float, default=None,
                   help="goodput admission: expected useful work / GPU time held a short window must reach "
                   "(default: GoodputSettings' 0.9, as the chart's)")
    p.add_argument("--no-gangs", action="store_true",
                   help="do not run jobs across nodes; with --fold-wide-jobs, the pre-issue-18 model")
    p.add_argument("--fold-wide-jobs", action="store_true",
                   help="fold jobs wider than a node onto one node with the same GPU-seconds (the old model)")
    p.add_argument("--busy-util", type=float, default=10.0, help="Alibaba: GPU duty %% that counts as online-busy (default 10)")
    p.add_argument("--hold-minutes", type=int, default=5, help="Alibaba: busy minutes hold the GPU +- this (default 5)")
    p.add_argument("--online-placement", choices=("pods", "pinned"), default="pods",
                   help="Helios/Philly: online pods placed as the default scheduler would, evicting through the "
                   "evictor's plan_for_pending (pods, default), or online GPUs packed onto fixed nodes (pinned, "
                   "the model before); Alibaba is always pinned")
    p.add_argument("--pool-windows", action="store_true",
                   help="pod-placed online demand: a node's windows end when its pool (Helios VC) is forecast full, "
                   "from the pool's recent peak and the rises its history shows (offpeak_core.poolrise), not when the "
                   "node's own online history says; the extender's --pool-label does the same")
    p.add_argument("--pool-look-back-hours", type=float, default=6.0,
                   help="with --pool-windows: the pool's peak over this many past hours is where rises start (6)")
    p.add_argument("--pool-forecast", choices=("rise", "exact"), default="rise",
                   help="with --pool-windows: the pool's online demand ahead from its recent peak and past rises "
                   "(rise, the extender's, default) or its true future total (exact: a perfect pool forecaster)")
    p.add_argument("--pool-lead-minutes", type=float, default=0.0,
                   help="with the rise pool forecast: each pool's true online total is known this far ahead (online "
                   "owners announcing scale-ups; default 0), the rises start from its peak beyond it")
    p.add_argument("--pool-announce-minutes", type=float, default=0.0,
                   help="with the rise pool forecast: online owners announce what they will need this far ahead "
                   "(default 0): each pool's true online total within it is a floor under the forecast, as the "
                   "extender's announced demand is")
    p.add_argument("--pool-announce-ceiling", action="store_true",
                   help="with --pool-announce-minutes: the announcements also say the most each pool's online side "
                   "will hold (an OnlineDemand's poolGpusAtMost), so within them the forecast is the announced total")
    p.add_argument("--pool-ceiling-block-minutes", type=float, default=0.0,
                   help="with --pool-announce-ceiling: the ceiling is stated once per clock-aligned span of this many "
                   "minutes, the span's busiest minute capping all of it, as a scaler's replica limit would be "
                   "(default 0: per forecast step, the true total itself)")
    p.add_argument("--pool-floor-block-minutes", type=float, default=0.0,
                   help="with --pool-announce-minutes: the floor is stated once per clock-aligned span of this many "
                   "minutes too, the span's busiest minute holding all of it, as a replica plan would (default 0: per "
                   "forecast step)")
    p.add_argument("--report", required=True, metavar="OUT.json", help="write the per-policy JSON report here")
    p.add_argument("--plots", metavar="DIR", help="write harvest.png, jct_cdf.png, evictions.png here")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TimeElapsedColumn, TimeRemainingColumn

    from offpeak_core.decisions import DEFAULT_MARGIN
    from offpeak_core.forecast import ForecastSettings
    from offpeak_sim import paths, report
    from offpeak_sim.engine import EngineSettings
    from offpeak_sim.fleet import DEFAULT_MIX
    from offpeak_sim.forecasting import FeedSettings
    from offpeak_sim.online import OnlineSettings, detect_layout
    from offpeak_sim.policies import parse_policies
    from offpeak_sim.runner import run
    from offpeak_sim.scenario import ScenarioSettings

    if args.nodes < 1 or args.gpus_per_node < 1:
        raise UserError("--nodes and --gpus-per-node must be >= 1")
    if args.days <= 0 or args.history_days < 1:
        raise UserError("--days must be > 0 and --history-days >= 1")
    if args.save_on_stop and not args.yield_:
        raise UserError("--save-on-stop needs --yield")
    if args.save_on_stop < 0:
        raise UserError("--save-on-stop must be >= 0")
    if args.checkpoint_interval < 0 or args.eviction_grace < 0 or args.refresh_seconds <= 0:
        raise UserError("--checkpoint-interval and --eviction-grace must be >= 0, --refresh-seconds > 0")
    if args.restart_seconds is not None and args.restart_seconds < 0:
        raise UserError("--restart-seconds must be >= 0")
    if args.elastic is not None and not 0.0 <= args.elastic <= 1.0:
        raise UserError("--elastic must be within 0..1 (the share of a job's GPUs it may run on; 0 = off)")
    if (args.elastic_join or args.elastic_narrow) and not args.elastic:
        raise UserError("--elastic-join and --elastic-narrow need --elastic MIN_FRACTION")
    if args.predictor_sigma is not None and args.predictor_sigma < 0:
        raise UserError("--predictor-sigma must be >= 0")
    if args.margin is not None and args.margin < 0:
        raise UserError("--margin must be >= 0")
    policies = parse_policies(args.policies)
    online_dir = paths.existing_dir(args.online_trace or paths.trace_dir(paths.DEFAULT_ONLINE_TRACE), what="online trace")
    jobs_dir = paths.existing_dir(args.jobs_trace or paths.trace_dir(paths.DEFAULT_JOBS_TRACE), what="jobs trace")
    reports_dir = Path(args.predictor_reports) if args.predictor_reports else paths.repo_root() / "reports" / "predictor"
    sc = ScenarioSettings(
        online_trace=online_dir,
        jobs_trace=jobs_dir,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        gpu_mix=args.gpu_mix or DEFAULT_MIX,
        days=args.days,
        history_days=args.history_days,
        jobs_start_day=args.jobs_start_day,
        load=args.load,
        clusters=tuple(c.strip() for c in args.clusters.split(",") if c.strip()),
        seed=args.seed,
        online=OnlineSettings(busy_util_pct=args.busy_util, hold_minutes=args.hold_minutes,
                              placement=args.online_placement),
        predictor_reports=reports_dir,
        predictor_sigma=args.predictor_sigma,
        fold_wide_jobs=args.fold_wide_jobs,
    )
    if args.forecast_quantile is not None and not 0.0 <= args.forecast_quantile <= 1.0:
        raise UserError("--forecast-quantile must be within 0..1")
    if args.forecast == "exact" and args.online_placement == "pods" and detect_layout(online_dir) != "alibaba":
        raise UserError("--forecast exact needs the future online demand per node: add --online-placement pinned")
    fs = ForecastSettings() if args.forecast_quantile is None else ForecastSettings(quantile=args.forecast_quantile)
    if args.pool_windows and (args.online_placement != "pods" or detect_layout(online_dir) == "alibaba"
                              or args.forecast != "seasonal"):
        raise UserError("--pool-windows needs pod-placed online demand (a Helios or Philly trace, --online-placement "
                        "pods) and the seasonal forecast")
    if args.pool_look_back_hours <= 0:
        raise UserError("--pool-look-back-hours must be > 0")
    if args.pool_forecast != "rise" and not args.pool_windows:
        raise UserError("--pool-forecast needs --pool-windows")
    if args.pool_lead_minutes < 0 or (args.pool_lead_minutes > 0 and (not args.pool_windows
                                                                      or args.pool_forecast != "rise")):
        raise UserError("--pool-lead-minutes must be >= 0, and needs --pool-windows with the rise pool forecast")
    if args.pool_announce_minutes < 0 or (args.pool_announce_minutes > 0 and (
            not args.pool_windows or args.pool_forecast != "rise" or args.pool_lead_minutes > 0)):
        raise UserError("--pool-announce-minutes must be >= 0, and needs --pool-windows with the rise pool forecast "
                        "and no --pool-lead-minutes")
    if args.pool_announce_ceiling and args.pool_announce_minutes <= 0:
        raise UserError("--pool-announce-ceiling needs --pool-announce-minutes")
    if args.pool_ceiling_block_minutes < 0 or args.pool_ceiling_block_minutes % 1 or (
            args.pool_ceiling_block_minutes > 0 and not args.pool_announce_ceiling):
        raise UserError("--pool-ceiling-block-minutes must be whole minutes >= 0, and needs --pool-announce-ceiling")
    if args.pool_floor_block_minutes < 0 or args.pool_floor_block_minutes % 1 or (
            args.pool_floor_block_minutes > 0 and args.pool_announce_minutes <= 0):
        raise UserError("--pool-floor-block-minutes must be whole minutes >= 0, and needs --pool-announce-minutes")
    feed = FeedSettings(mode=args.forecast, refresh_seconds=args.refresh_seconds, forecast=fs,
                        pool_windows=args.pool_windows, pool_look_back_seconds=args.pool_look_back_hours * 3600.0,
                        pool_forecast=args.pool_forecast, pool_lead_seconds=args.pool_lead_minutes * 60.0,
                        pool_announce_seconds=args.pool_announce_minutes * 60.0,
                        pool_announce_ceiling=args.pool_announce_ceiling,
                        pool_ceiling_block_seconds=args.pool_ceiling_block_minutes * 60.0,
                        pool_floor_block_seconds=args.pool_floor_block_minutes * 60.0)
    if args.min_efficiency is not None and not 0.0 < args.min_efficiency <= 1.0:
        raise UserError("--min-efficiency must be within (0, 1]")
    goodput = EngineSettings().goodput
    if args.min_efficiency is not None:
        goodput = replace(goodput, min_efficiency=args.min_efficiency)
    engine = EngineSettings(
        checkpoint_seconds=args.checkpoint_interval,
        eviction_grace_seconds=args.eviction_grace,
        margin=DEFAULT_MARGIN if args.margin is None else args.margin,
        gangs=not args.no_gangs,
        goodput=goodput,
        restart_seconds=EngineSettings().restart_seconds if args.restart_seconds is None else args.restart_seconds,
        yield_at_checkpoints=args.yield_,
        save_on_stop_seconds=args.save_on_stop,
        elastic_min_fraction=args.elastic or None,
        elastic_join=args.elastic_join,
        elastic_narrow=args.elastic_narrow,
        elastic_from_gpus=args.elastic_from_gpus,
    )
    console = Console(stderr=True)
    show = not args.quiet
    with Progress(
        "[progress.description]{task.description}", BarColumn(), "{task.percentage:>3.0f}%",
        TimeElapsedColumn(), TimeRemainingColumn(), console=console, disable=not show, transient=True,
    ) as bar:
        task = bar.add_task("simulating", total=None)

        def progress(done: int, total: int) -> None:
            if done % 60 == 0 or done == total:
                bar.update(task, completed=done, total=total, description=f"simulating day {done / 1440:.1f}")

        out = run(scenario_settings=sc, policies=policies, feed_settings=feed, engine_settings=engine, progress=progress)
    out.meta["command"] = " ".join(["offpeak", *sys.argv[1:]]) if sys.argv[1:2] == ["simulate"] else None
    out.meta["code"] = _code_version(paths.repo_root())
    report.write_report(Path(args.report), out.metrics, out.meta)
    if args.plots:
        report.write_plots(Path(args.plots), metrics=out.metrics, harvest=out.harvest, jct=out.jct)
    note = load_note(asked=sc.load, scenario=out.meta["scenario"])
    if note:
        console.print(f"warning: {note}", highlight=False, soft_wrap=True)
    if show:
        title = report_title(nodes=sc.nodes, gpus_per_node=sc.gpus_per_node, days=sc.days, forecast=feed.mode,
                             asked_load=sc.load, scenario=out.meta["scenario"])
        report.print_table(out.metrics, title=title, console=Console(width=160))
    return 0


def load_note(*, asked: float, scenario: Mapping[str, Any], tolerance: float = 0.25) -> str | None:
    """Why the load the jobs offer is not the --load asked, when they differ by more than `tolerance` of it."""
    offered, before = float(scenario["offered_load"]), float(scenario["offered_load_before_thinning"])
    if abs(offered - asked) <= tolerance * asked:
        return None
    if before <= asked:
        return (f"the job trace offers only load {before:.2f} in these days, below the --load {asked:g} asked: every "
                "job is kept; fewer --nodes (less idle capacity) or another --jobs-start-day raise it")
    return (f"the {scenario['jobs_kept']} jobs kept (of {scenario['jobs_in_period']}, each with probability "
            f"{asked / before:.1%}) offer load {offered:.2f}, not the --load {asked:g} asked: so few jobs are drawn "
            "that a few long ones decide the load; more --nodes or --days, or another --seed, come closer")


def report_title(*, nodes: int, gpus_per_node: int, days: float, forecast: str, asked_load: float,
                 scenario: Mapping[str, Any]) -> str:
    """The table's title: the scenario, and the load the jobs really offer (with the one asked, when they differ)."""
    load = f"load {float(scenario['offered_load']):.2f}"
    if load_note(asked=asked_load, scenario=scenario):
        load += f" (asked {asked_load:g})"
    return (f"{nodes} nodes × {gpus_per_node} GPUs, {days:g} day{'' if days == 1 else 's'}, online "
            f"{scenario['online_layout']}, forecast {forecast}, {load}")


def _code_version(root: Path) -> dict[str, object]:
    """Commit of the checkout and whether the decision code (extender/) or simulator/ had local changes."""
    import subprocess

    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    return {
        "commit": git("rev-parse", "HEAD").strip() or None,
        "uncommitted": [ln[3:] for ln in git("status", "--porcelain", "--", "extender", "simulator", "core").splitlines() if ln],
    }
