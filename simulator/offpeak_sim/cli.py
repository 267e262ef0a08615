"""`offpeak simulate`: trace-driven comparison of scheduling policies for offline jobs in idle GPU windows."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from offpeak.errors import UserError

if TYPE_CHECKING:  # the scenario module reads numpy and the core; `offpeak --help` should not wait for them
    from offpeak_sim.scenariofile import Override

# the everyday flags: each overrides one field of the scenario (its path as the YAML file spells it)
OVERRIDES = (
    ("online_trace", "online_trace", "--online-trace"),
    ("jobs_trace", "jobs_trace", "--jobs-trace"),
    ("nodes", "cluster.nodes", "--nodes"),
    ("days", "workload.days", "--days"),
    ("seed", "workload.seed", "--seed"),
    ("policies", "policies", "--policies"),
)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="simulate a GPU cluster over days from real traces and compare scheduling policies",
        description="Replay real online GPU demand and an offline job stream on a simulated cluster; run every "
        "policy through the extender's decision code; print a table, write a JSON report and plots. What is "
        "simulated is a scenario file (YAML; docs/simulator.md, 'Scenario files'); a flag below overrides its field.",
    )
    p.add_argument("--scenario", metavar="FILE", action="append", default=[],
                   help="scenario file (YAML); repeat to layer files, a later one's fields over an earlier one's "
                   "(default: every default; --show-scenario prints them)")
    p.add_argument("--show-scenario", action="store_true",
                   help="print the effective scenario (files and flags, every default filled in) as YAML and exit")
    p.add_argument("--online-trace", metavar="NAME|DIR",
                   help="online demand trace: a name under <data>/traces or a folder (Alibaba GenAI, Helios or "
                   "Philly layout); online_trace (default alibaba-genai-serving-v2026)")
    p.add_argument("--jobs-trace", metavar="NAME|DIR",
                   help="offline job trace in the ms-itp-elasticflow layout; jobs_trace (default ms-itp-elasticflow)")
    p.add_argument("--nodes", type=int, help="GPU nodes; cluster.nodes (default 200)")
    p.add_argument("--days", type=float, help="simulated days; workload.days (default 7)")
    p.add_argument("--seed", type=int, help="random seed; workload.seed (default 0)")
    p.add_argument("--policies", help="comma-separated, or all; policies (default default,backfill,user-estimate,"
                   "offpeak,oracle)")
    p.add_argument("--report", metavar="OUT.json", help="write the per-policy JSON report here (needed to run)")
    p.add_argument("--plots", metavar="DIR", help="write harvest.png, jct_cdf.png, evictions.png here")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    p.add_argument("--workers", type=int, metavar="N",
                   help="processes to simulate the policies in, side by side (the same figures however many; default: "
                   "the cores this process may use, at most one per policy)")
    p.set_defaults(func=handle)


def overrides(args: argparse.Namespace) -> list[Override]:
    """The scenario fields the command line sets."""
    from offpeak_sim.scenariofile import Override

    out = []
    for attr, path, flag in OVERRIDES:
        value = getattr(args, attr)
        if value is None:
            continue
        if attr == "policies":
            value = [n.strip() for n in value.split(",") if n.strip()]
        out.append(Override(path=path, value=value, flag=flag))
    return out


def handle(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TimeElapsedColumn, TimeRemainingColumn

    from offpeak_sim import paths, report, scenariofile, workers
    from offpeak_sim.runner import run

    loaded = scenariofile.load(args.scenario, overrides(args))
    if args.show_scenario:
        sources = " + ".join(loaded.files) or "no file"
        print(f"# offpeak simulate scenario ({sources}, with the flags given), every default filled in")
        print(scenariofile.dump(loaded.spec), end="")
        return 0
    if args.workers is not None and args.workers < 1:
        raise UserError(f"--workers must be at least 1, not {args.workers}")
    if not args.report:
        raise UserError("--report OUT.json is needed to run a simulation (or --show-scenario to print the scenario)")
    sc, feed = loaded.settings.scenario, loaded.settings.feed
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

        out = run(scenario_settings=sc, policies=list(loaded.settings.policies), feed_settings=feed,
                  engine_settings=loaded.settings.engine, progress=progress,
                  workers=args.workers or workers.default_workers())
    out.meta["command"] = " ".join(["offpeak", *sys.argv[1:]]) if sys.argv[1:2] == ["simulate"] else None
    out.meta["scenario_files"] = list(loaded.files)
    out.meta["effective_scenario"] = scenariofile.as_builtins(loaded.spec)
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
    """Why the load the jobs offer is not the workload.load asked, when they differ by more than `tolerance` of it."""
    offered, before = float(scenario["offered_load"]), float(scenario["offered_load_before_thinning"])
    if abs(offered - asked) <= tolerance * asked:
        return None
    if before <= asked:
        return (f"the job trace offers only load {before:.2f} in these days, below the workload.load {asked:g} asked: "
                "every job is kept; fewer nodes (less idle capacity) or another workload.jobs_start_day raise it")
    return (f"the {scenario['jobs_kept']} jobs kept (of {scenario['jobs_in_period']}, each with probability "
            f"{asked / before:.1%}) offer load {offered:.2f}, not the workload.load {asked:g} asked: so few jobs are "
            "drawn that a few long ones decide the load; more nodes or days, or another seed, come closer")


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
