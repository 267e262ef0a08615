"""`offpeak dashboard generate|check` and `offpeak plot-runtimes`."""

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
    dashboard = subparsers.add_parser("dashboard", help="generate or check the Grafana dashboard JSON")
    actions = dashboard.add_subparsers(dest="dashboard_command", metavar="ACTION", required=True)

    generate = actions.add_parser("generate", help="print the dashboard JSON (or write it with --out)")
    generate.add_argument("--out", type=Path, help="write here instead of stdout")
    generate.set_defaults(func=_generate)

    check = actions.add_parser(
        "check",
        help="run every dashboard query against a Prometheus and report panels that get no data "
        "(source-tree checks: tools/check_dashboard.py)",
    )
    check.add_argument(
        "--prometheus-url",
        default=os.environ.get("OFFPEAK_PROMETHEUS_URL"),
        help="the Prometheus that scrapes offpeak (env OFFPEAK_PROMETHEUS_URL); required",
    )
    check.add_argument("--range-seconds", type=int, default=600, help="value of $__range in the queries")
    check.set_defaults(func=_check)

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


def _check(args: argparse.Namespace) -> int:
    from offpeak_dashboard.querycheck import run_queries

    if not args.prometheus_url:
        raise UserError("--prometheus-url (or OFFPEAK_PROMETHEUS_URL) is required")
    empty = 0
    for result in run_queries(args.prometheus_url, range_seconds=args.range_seconds):
        if result.error or result.series == 0:
            empty += 1
            print(f"panel {result.panel!r}: {result.error or 'no data'} for {result.expr}", file=sys.stderr)
        else:
            print(f"ok  {result.series:4d} series  {result.panel}: {result.expr}")
    if empty:
        return 1
    print("dashboard OK")
    return 0


def _plot_runtimes(args: argparse.Namespace) -> int:
    from offpeak_dashboard.plot import plot_runtimes
    from offpeak_dashboard.runtimes import join_prometheus_vectors, records_from_json

    if args.from_json:
        try:
            document = json.loads(args.from_json.read_text(encoding="utf-8"))
        except FileNotFoundError as e:
            raise UserError(f"{args.from_json}: no such file") from e
        except json.JSONDecodeError as e:
            raise UserError(f"{args.from_json}: not valid JSON ({e})") from e
        records = records_from_json(document, source=str(args.from_json))
    else:
        from offpeak_dashboard.dashboard import JOB_ACTUAL, JOB_LABELS, JOB_PREDICTED
        from offpeak_dashboard.prometheus import instant_query

        # the same grouping as the dashboard's table: one series per job, whatever targets exported it
        records = join_prometheus_vectors(
            predicted=instant_query(args.prometheus_url, f"max by ({JOB_LABELS}) ({JOB_PREDICTED})"),
            actual=instant_query(args.prometheus_url, f"max by ({JOB_LABELS}) ({JOB_ACTUAL})"),
        )
    if not records:
        print("warning: no finished jobs with both predicted and actual runtimes; writing an empty plot",
              file=sys.stderr)
    plot_runtimes(records, args.out, title=args.title)
    print(f"wrote {args.out} ({len(records)} jobs)")
    return 0
