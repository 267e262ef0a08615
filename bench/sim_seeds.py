"""Summarise the committed simulator reports over seeds: mean and range per policy, and offpeak against backfill.

Reads `<dir>/<kind>-{alibaba,helios}-s<seed>.json` for each kind of `TITLES` (written by
`reports/sim/regenerate.sh` from `reports/sim/scenarios/<kind>.yaml`) and prints markdown tables (mean, and min..max
over the seeds in brackets). Usage:
`.venv/bin/python bench/sim_seeds.py reports/sim > reports/sim/summary.md`.

`--elastic` summarises the elastic-width runs instead (`<dir>/elastic{-off,,-join}-<trace>-s<seed>.json`: the same
policies with elastic width off, on, on with joins; `elastic-wide-*`: on for jobs wider than a node only): `.venv/bin/python bench/sim_seeds.py --elastic reports/sim >
reports/sim/elastic_summary.md`.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

# the kinds of run report read and their tables' titles, in the order the tables are printed (per trace)
TITLES = {"before": "before issue 18 (wide jobs folded onto one node, no gangs; scenarios/before.yaml)",
          "days": "gangs + goodput (scenarios/days.yaml)",
          "goodput90": "gangs + goodput at engine.min_efficiency 0.9 stated (the default; a run's meta names the "
                       "threshold it was made at; scenarios/goodput90.yaml)",
          "pinned": "gangs + goodput, online demand pinned to nodes (the model before pod placement; "
                    "scenarios/pinned.yaml)",
          "pool": "gangs + goodput, pool windows (a node's window ends when its VC is forecast full; "
                  "scenarios/pool.yaml)",
          "poolexact": "gangs + goodput, pool windows with a perfect pool forecast (each VC's true future online "
                       "total; scenarios/poolexact.yaml)",
          "poolexactyield": "gangs + goodput, pool windows with a perfect pool forecast and yielding at a "
                            "checkpoint before it (scenarios/poolexactyield.yaml)",
          "poollead": "gangs + goodput, pool windows with each VC's online total known 35 min ahead of the rise "
                      "forecast, and yielding (scenarios/poollead.yaml)",
          "poolannounce": "gangs + goodput, pool windows with each VC's online total announced 35 min ahead as a "
                          "floor under the rise forecast, and yielding, jobs saving as they stop "
                          "(scenarios/poolannounce.yaml)",
          "poolcap": "gangs + goodput, pool windows with each VC's online total announced 35 min ahead as a floor and "
                     "a ceiling (OnlineDemand poolGpusAtMost), and yielding, jobs saving as they stop "
                     "(scenarios/poolcap.yaml)",
          "poolcaphour": "gangs + goodput, pool windows as poolcap, the ceiling stated once per clock hour as the "
                         "hour's busiest minute (scenarios/poolcaphour.yaml)",
          "poolplan": "gangs + goodput, pool windows as poolcaphour, the floor stated once per clock hour too, so each "
                      "hour is announced at its busiest minute (a replica plan; scenarios/poolplan.yaml)",
          "poolcaphour90": "gangs + goodput at engine.min_efficiency 0.9, pool windows as poolcaphour "
                           "(scenarios/poolcaphour90.yaml)",
          "poolcaphour-live": "gangs + goodput, pool windows as poolcaphour, jobs reporting their progress: planned "
                              "stops time a running job by its measured pace 2 min after start-up "
                              "(scenarios/poolcaphour-live.yaml)",
          "yieldsave": "gangs + goodput, node windows with planned stops, jobs saving as they stop, timed by the "
                       "prediction (scenarios/yieldsave.yaml)",
          "yieldsave-live": "gangs + goodput, as yieldsave, jobs reporting their progress: timed by the measured pace "
                            "2 min after start-up (scenarios/yieldsave-live.yaml)"}

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
        m = re.fullmatch(rf"({'|'.join(TITLES)})-(alibaba|helios)-s(\d+)\.json", f.name)
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


ELASTIC_COLUMNS = (
    ("work (V100 GPU-h)", lambda m: m["work_done_ref_gpu_hours"], "{:,.0f}"),
    ("evictions", lambda m: m["evictions"], "{:,.0f}"),
    ("GPU-h lost", lambda m: m["lost_gpu_seconds"] / 3600.0, "{:,.0f}"),
    ("JCT mean (h)", lambda m: (m["jct_mean_s"] or float("nan")) / 3600.0, "{:.2f}"),
    ("completed", lambda m: m["jobs_completed"], "{:,.0f}"),
    ("gang starts", lambda m: m["gang_starts"], "{:,.0f}"),
    ("narrow starts", lambda m: m.get("narrow_starts", 0), "{:,.0f}"),
    ("joins", lambda m: m.get("joins", 0), "{:,.0f}"),
    ("online GPUs that waited (%)", lambda m: _blocked_pct(m), "{:.2f}"),
)
VARIANTS = {"off": "elastic off", "on": "elastic 0.5", "join": "elastic 0.5 + joins",
            "wide": "elastic 0.5, jobs wider than a node only"}


def load_elastic(folder: Path) -> dict[str, dict[str, dict[int, dict[str, dict]]]]:
    """{trace: {variant: {seed: report}}} for the elastic-width runs found."""
    out: dict[str, dict[str, dict[int, dict[str, dict]]]] = defaultdict(lambda: defaultdict(dict))
    for f in sorted(folder.glob("elastic-*-s*.json")):
        m = re.fullmatch(r"elastic-(?:(off|join|wide)-)?(alibaba|helios)-s(\d+)\.json", f.name)
        if m:
            out[m[2]][m[1] or "on"][int(m[3])] = json.loads(f.read_text())
    return out


def elastic_tables(runs: dict[str, dict[int, dict[str, dict]]]) -> list[str]:
    """One row per (policy, variant), then each policy's ratios to backfill with elastic off (rigid, on the same
    seeds) and to backfill of its own run (JCT: own run only, it is over the jobs every policy of a run finished)."""
    lines = ["| policy | elastic | seeds | " + " | ".join(c for c, _, _ in ELASTIC_COLUMNS) + " |",
             "|---" * (len(ELASTIC_COLUMNS) + 3) + "|"]
    policies = list(next(iter(next(iter(runs.values())).values())))
    for p in policies:
        for v, reports in runs.items():
            seeds = sorted(reports)
            cells = [_cell([get(reports[s][p]) for s in seeds], fmt) for _, get, fmt in ELASTIC_COLUMNS]
            lines.append(f"| {p} | {VARIANTS[v]} | {','.join(map(str, seeds))} | " + " | ".join(cells) + " |")
    lines += ["", "| policy | elastic | work / rigid backfill's | evictions / rigid backfill's | GPU-h lost / rigid "
              "backfill's | work / own backfill's | evictions / own backfill's | GPU-h lost / own backfill's | "
              "JCT mean / own backfill's |", "|---" * 9 + "|"]
    rigid = runs.get("off", {})
    for p in policies:
        for v, reports in runs.items():
            seeds = sorted(reports)
            def ratio(key, base_of):
                xs = []
                for s in seeds:
                    b = base_of(s)
                    if b is None:
                        return "n/a"
                    xs.append(100.0 * (reports[s][p][key] or np.nan) / max(1e-9, b[key] or np.nan))
                return _cell(xs, "{:.1f}") + " %"
            rig = lambda s: rigid[s]["backfill"] if s in rigid else None  # noqa: E731
            own = lambda s: reports[s]["backfill"]  # noqa: E731
            cells = [ratio(k, rig) for k in ("work_done_ref_gpu_hours", "evictions", "lost_gpu_seconds")]
            cells += [ratio(k, own) for k in ("work_done_ref_gpu_hours", "evictions", "lost_gpu_seconds", "jct_mean_s")]
            lines.append(f"| {p} | {VARIANTS[v]} | " + " | ".join(cells) + " |")
    return lines


def main_elastic(folder: Path) -> int:
    found = load_elastic(folder)
    if not found:
        print(f"no elastic{{-off,,-join}}-<trace>-s<seed>.json reports in {folder}", file=sys.stderr)
        return 2
    for trace in ("alibaba", "helios"):
        if trace in found:
            runs = {v: found[trace][v] for v in VARIANTS if v in found[trace]}
            print(f"## {trace}: elastic width, " + " / ".join(VARIANTS[v] for v in runs) + "\n")
            print("\n".join(elastic_tables(runs)))
            print()
    return 0


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["--elastic"]:
        return main_elastic(Path(args[1] if len(args) > 1 else "reports/sim"))
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "reports/sim")
    found = load(folder)
    if not found:
        print(f"no week-/before-<trace>-s<seed>.json reports in {folder}", file=sys.stderr)
        return 2
    order = {k: i for i, k in enumerate(TITLES)}
    for (kind, trace), reports in sorted(found.items(), key=lambda kv: (kv[0][1], order[kv[0][0]])):
        title = TITLES[kind]
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
