"""Source-tree checks of the Grafana dashboard (a development tool, also run by the unit tests): the committed
JSON is what the generator gives, grafana-foundation-sdk's typed Grafana models accept all of it, and every metric
a panel uses is defined by some offpeak component.

    python tools/check_dashboard.py [--repo .]

Whether every panel gets data from a running Prometheus is `offpeak dashboard check --prometheus-url URL`.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path
from typing import Any

from offpeak_dashboard.dashboard import build_dashboard, render
from offpeak_dashboard.grafana import iter_queries, library_problems
from offpeak_dashboard.metricnames import definitions_in_tree, exported_series, undefined_names

# Folders whose code exports offpeak metrics (docs/contracts.md); e2e holds the stand-in node exporter.
METRIC_SOURCE_FOLDERS = ("operator", "predictor", "extender", "agent", "e2e", "simulator")
DASHBOARD_FILE = Path("charts/offpeak/files/dashboard.json")


def repo_root() -> Path:
    """The source checkout this script lives in (tools/ → repo)."""
    return Path(__file__).resolve().parents[1]


def committed_file_diff(path: Path) -> str:
    """Unified diff between the committed dashboard and the generated one; empty when they match."""
    expected = render(build_dashboard())
    actual = path.read_text(encoding="utf-8") if path.exists() else ""
    if actual == expected:
        return ""
    return "".join(
        difflib.unified_diff(
            actual.splitlines(keepends=True), expected.splitlines(keepends=True), str(path), "generated", n=1
        )
    )


def undefined_metrics(root: Path, dashboard: dict[str, Any] | None = None) -> dict[str, set[str]]:
    """{panel: metric names its queries use that no offpeak component defines}."""
    definitions = definitions_in_tree(root / folder for folder in METRIC_SOURCE_FOLDERS if (root / folder).is_dir())
    return undefined_names(iter_queries(dashboard or build_dashboard()), exported_series(definitions))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", type=Path, default=repo_root(), help="source checkout to check")
    args = ap.parse_args(argv)
    path = args.repo / DASHBOARD_FILE
    problems: list[str] = []
    diff = committed_file_diff(path)
    if diff:
        shown = "".join(diff.splitlines(keepends=True)[:40])
        problems.append(f"{path} is out of date; run: offpeak dashboard generate --out {path}\n{shown}")
    for problem in library_problems(build_dashboard()):
        problems.append(f"the Grafana models do not accept the dashboard's {problem}")
    for panel, names in sorted(undefined_metrics(args.repo).items()):
        problems.append(f"panel {panel!r} uses metrics no offpeak component defines: {', '.join(sorted(names))}")
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print("dashboard OK")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
