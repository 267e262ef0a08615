"""`offpeak dashboard generate|check|render` and `offpeak plot-runtimes`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from offpeak.errors import UserError


def register(subparsers: Any) -> None:
    """Add this component's subcommands to the `offpeak` dispatcher."""
    dashboard = subparsers.add_parser("dashboard", help="generate, check or render the Grafana dashboard")
    actions = dashboard.add_subparsers(dest="dashboard_command", metavar="ACTION", required=True)

    generate = actions.add_parser("generate", help="print the dashboard JSON (or write it with --out)")
    generate.add_argument("--out", type=Path, help="write here instead of stdout")
    generate.set_defaults(func=_generate)

    check = actions.add_parser(
        "check",
        help="run every dashboard query against a Prometheus and report panels that get no data "
        "(source-tree checks: tools/check_dashboard.py)",
        description="Exit status: 0 every panel gets data; 1 some panel gets none (or Prometheus rejected its "
        "query), one line each on stderr; 2 bad arguments or no usable Prometheus (one line on stderr).",
    )
    _prometheus_url_argument(check)
    check.add_argument("--range-seconds", type=int, default=600, help="value of $__range in the queries")
    check.set_defaults(func=_check)

    render = actions.add_parser(
        "render",
        help="draw the dashboard's main panels from a Prometheus's data into a PNG (matplotlib)",
        description="Predicted vs actual runtime, error by GPU type, jobs waiting and why, harvested GPU-hours, "
        "GPUs by use and evictions, from the dashboard's own queries (variables set to All). Exit status: 0 "
        "written; 2 bad arguments or no usable Prometheus (one line on stderr).",
    )
    _prometheus_url_argument(render)
    render.add_argument("--out", type=Path, required=True, help="PNG file to write")
    render.add_argument("--range-seconds", type=int, default=3600,
                        help="how far back to draw, ending now (default 3600)")
    render.add_argument("--end", type=float, help="end of the range, Unix seconds (default: now)")
    render.set_defaults(func=_render)

    plot = subparsers.add_parser("plot-runtimes", help="predicted vs actual job runtimes as a PNG (log-log)")
    source = plot.add_mutually_exclusive_group(required=True)
    source.add_argument("--prometheus-url", help="read offpeak_job_predicted/actual_seconds from this Prometheus")
    source.add_argument(
        "--from-json",
        type=Path,
        help='JSON list (or {"jobs": [...]}) of {"job", "gpu_type", "predicted_seconds", "actual_seconds"}, '
        "or the output of `kubectl get trainingjobs -A -o json`",
    )
    plot.add_argument("--out", type=Path, required=True, help="PNG file to write")
    plot.add_argument("--title", default="offpeak: predicted vs actual job time")
    plot.set_defaults(func=_plot_runtimes)


def _generate(args: argparse.Namespace) -> int:
    from offpeak_dashboard.dashboard import build_dashboard, render

    text = render(build_dashboard())
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def _prometheus_url_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prometheus-url",
                        help="the Prometheus that scrapes offpeak (default: $OFFPEAK_PROMETHEUS_URL)")


def _prometheus_url(args: argparse.Namespace) -> str:
    """--prometheus-url, else $OFFPEAK_PROMETHEUS_URL (read when the command runs)."""
    url = args.prometheus_url or os.environ.get("OFFPEAK_PROMETHEUS_URL")
    if not url:
        raise UserError("--prometheus-url (or OFFPEAK_PROMETHEUS_URL) is required")
    return str(url)


def _check(args: argparse.Namespace) -> int:
    from offpeak_dashboard.querycheck import run_queries

    empty = 0
    for result in run_queries(_prometheus_url(args), range_seconds=args.range_seconds):
        if result.error or result.series == 0:
            empty += 1
            print(f"panel {result.panel!r}: {result.error or 'no data'} for {result.expr}", file=sys.stderr)
        else:
            print(f"ok  {result.series:4d} series  {result.panel}: {result.expr}")
    if empty:
        return 1
    print("dashboard OK")
    return 0


def _render(args: argparse.Namespace) -> int:
    import time

    from offpeak_dashboard.render import Window, render_dashboard

    if args.range_seconds <= 0:
        raise UserError(f"--range-seconds must be positive, got {args.range_seconds}")
    window = Window.ending(args.end if args.end is not None else time.time(), seconds=args.range_seconds)
    panels = render_dashboard(_prometheus_url(args), args.out, window=window)
    for panel in panels:
        shown = len(panel.runtimes) if panel.kind == "scatter" else sum(1 for s in panel.series if s.values)
        what = "jobs" if panel.kind == "scatter" else "series"
        print(f"{shown:4d} {what:6s}  {panel.title}")
    print(f"wrote {args.out}")
    return 0


def _plot_runtimes(args: argparse.Namespace) -> int:
    from offpeak_dashboard.plot import plot_runtimes
    from offpeak_dashboard.runtimes import records_from_json

    if args.from_json:
        try:
            document = json.loads(args.from_json.read_text(encoding="utf-8"))
        except FileNotFoundError as e:
            raise UserError(f"{args.from_json}: no such file") from e
        except json.JSONDecodeError as e:
            raise UserError(f"{args.from_json}: not valid JSON ({e})") from e
        records = records_from_json(document, source=str(args.from_json))
    else:
        from offpeak_dashboard.render import scatter_runtimes

        records = scatter_runtimes(args.prometheus_url)  # the dashboard's scatter queries: one point per job
    if not records:
        print("warning: no finished jobs with both predicted and actual runtimes; writing an empty plot",
              file=sys.stderr)
    plot_runtimes(records, args.out, title=args.title)
    print(f"wrote {args.out} ({len(records)} jobs)")
    return 0
