"""Summarise the committed simulator reports over seeds: mean and range per policy, and offpeak against backfill.

Reads `<dir>/{days,before,pinned}-{alibaba,helios}-s<seed>.json` (written by `reports/sim/regenerate.sh`) and prints
markdown tables (mean, and min..max over the seeds in brackets). Usage:
`.venv/bin/python bench/sim_seeds.py reports/sim > reports/sim/summary.md`.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

COLUMNS = (
    ("harvested GPU-h", lambda m: m["harvested_gpu_hours"], "{:,.0f}"),
    ("work (V100 GPU-h)", lambda m: m["work_done_ref_gpu_hours"], "{:,.0f}"),
    ("evictions", lambda m: m["evictions"], "{:,.0f}"),
    ("yields", lambda m: m.get("yields", 0), "{:,.0f}"),
    ("GPU-h lost", lambda m: m["lost_gpu_seconds"] / 3600.0, "{:,.0f}"),
    ("JCT mean (h)", lambda m: (m["jct_mean_s"] or float("nan")) / 3600.0, "{:.2f}"),
    ("JCT p95 (h)", lambda m: (m["jct_p95_s"] or float("nan")) / 3600.0, "{:.1f}"),
    ("queueing mean (h)", lambda m: (m["queue_delay_mean_s"] or float("nan")) / 3600.0, "{:.2f}"),
    ("completed", lambda m: m["jobs_completed"], "{:,.0f}"),
    ("online wait p50 (s)", lambda m: _num(m.get("online_wait_p50_s")), "{:.0f}"),
    ("online wait p99 (s)", lambda m: _num(m.get("online_wait_p99_s")), "{:.0f}"),
    ("online GPUs that waited (%)", lambda m: _blocked_pct(m), "{:.2f}"),
)


def _num(x: float | None) -> float:
    return float("nan") if x is None else float(x)


def _blocked_pct(m: dict) -> float:
    """Share of online GPU requests that had to wait for offline work to let go (NaN in reports without it)."""
    n = m.get("online_gpu_requests")
    return float("nan") if not n else 100.0 * m["online_gpu_requests_blocked"] / n


def _cell(xs: list[float], fmt: str) -> str:
    a = np.array(xs, dtype=float)
    if len(a) == 1:
        return fmt.format(a[0])
    return f"{fmt.format(a.mean())} ({fmt.format(a.min())}–{fmt.format(a.max())})"


def load(folder: Path) -> dict[tuple[str, str], dict[int, dict[str, dict]]]:
    """{(kind, trace): {seed: report}} for every report file found."""
    out: dict[tuple[str, str], dict[int, dict[str, dict]]] = defaultdict(dict)
    for f in sorted(folder.glob("*-s*.json")):
        m = re.fullmatch(r"(days|before|pinned)-(alibaba|helios)-s(\d+)\.json", f.name)
        if m:
            out[(m[1], m[2])][int(m[3])] = json.loads(f.read_text())
    return out


def table(reports: dict[int, dict[str, dict]]) -> list[str]:
    seeds = sorted(reports)
    policies = list(reports[seeds[0]])
    lines = ["| policy | " + " | ".join(c for c, _, _ in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for p in policies:
        cells = [_cell([get(reports[s][p]) for s in seeds], fmt) for _, get, fmt in COLUMNS]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return lines


def versus_backfill(reports: dict[int, dict[str, dict]], policy: str) -> list[str]:
    """Per-seed ratios of `policy` to backfill (the issue's targets), then mean and range."""
    seeds = sorted(reports)
    rows = {"work / backfill's": [], "evictions / backfill's": [], "GPU-h lost / backfill's": [],
            "JCT mean / backfill's": []}
    for s in seeds:
        o, b = reports[s][policy], reports[s]["backfill"]
        rows["work / backfill's"].append(o["work_done_ref_gpu_hours"] / b["work_done_ref_gpu_hours"])
        rows["evictions / backfill's"].append(o["evictions"] / max(1, b["evictions"]))
        rows["GPU-h lost / backfill's"].append(o["lost_gpu_seconds"] / max(1.0, b["lost_gpu_seconds"]))
        rows["JCT mean / backfill's"].append((o["jct_mean_s"] or np.nan) / (b["jct_mean_s"] or np.nan))
    return [f"- {policy}: {k} {_cell([100 * x for x in v], '{:.1f}')} %" for k, v in rows.items()]


def main() -> int:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "reports/sim")
    found = load(folder)
    if not found:
        print(f"no week-/before-<trace>-s<seed>.json reports in {folder}", file=sys.stderr)
        return 2
    order = {"before": 0, "days": 1, "pinned": 2}
    titles = {"before": "before issue 18 (wide jobs folded onto one node, no gangs)", "days": "gangs + goodput",
              "pinned": "gangs + goodput, online demand pinned to nodes (the model before pod placement)"}
    for (kind, trace), reports in sorted(found.items(), key=lambda kv: (kv[0][1], order[kv[0][0]])):
        title = titles[kind]
        print(f"## {trace}, {title}: seeds {', '.join(map(str, sorted(reports)))}\n")
        print("\n".join(table(reports)))
        print()
        any_seed = reports[min(reports)]
        for p in ("offpeak", "offpeak-p90", "oracle"):
            if p in any_seed and "backfill" in any_seed:
                print("\n".join(versus_backfill(reports, p)))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
