"""Output: the rich table, the JSON report (+ a sibling `.meta.json` with the scenario and series), PNG plots."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


def _h(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x / 3600:.2f} h"


def _wait(m: Mapping[str, Any]) -> str:
    p50, p99 = m.get("online_wait_p50_s"), m.get("online_wait_p99_s")
    return "-" if p50 is None or p99 is None else f"{p50:.0f}/{p99:.0f}"


def table(metrics: Mapping[str, Mapping[str, Any]], *, title: str) -> Table:
    t = Table(title=title)
    for col in ("policy", "harvested GPU-h", "share of idle", "work V100-GPU-h", "evictions", "yields", "lost GPU-h", "online wait p50/p99 s",
                "done", "JCT mean", "JCT p95", "queue mean", "decision µs"):
        t.add_column(col, justify="left" if col == "policy" else "right")
    for name, m in metrics.items():
        t.add_row(
            name,
            f"{m['harvested_gpu_hours']:.0f}",
            f"{m['harvest_share']:.1%}",
            f"{m['work_done_ref_gpu_hours']:.0f}",
            str(m["evictions"]),
            str(m.get("yields", 0)),
            f"{m['lost_gpu_seconds'] / 3600:.0f}",
            _wait(m),
            f"{m['jobs_completed']}/{m['jobs']}",
            _h(m["jct_mean_s"]),
            _h(m["jct_p95_s"]),
            _h(m["queue_delay_mean_s"]),
            "-" if m["decision_latency_mean_us"] is None else f"{m['decision_latency_mean_us']:.0f}",
        )
    return t


def print_table(metrics: Mapping[str, Mapping[str, Any]], *, title: str, console: Console | None = None) -> None:
    (console or Console()).print(table(metrics, title=title))


def meta_path(report: Path) -> Path:
    return report.with_name(report.stem + ".meta.json")


def write_report(path: Path, metrics: Mapping[str, Any], meta: Mapping[str, Any]) -> None:
    """Write {policy: metrics} to `path` and the run's scenario/settings/series to `<stem>.meta.json`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(metrics, indent=2, sort_keys=False) + "\n")
    meta_path(path).write_text(json.dumps(meta, indent=1, default=str) + "\n")


def write_plots(
    folder: Path,
    *,
    metrics: Mapping[str, Mapping[str, Any]],
    harvest: Mapping[str, list[float]],
    jct: Mapping[str, list[float]],
) -> list[Path]:
    """harvest.png (cumulative harvested GPU-hours), jct_cdf.png, evictions.png; return the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, ys in harvest.items():
        ax.plot(np.arange(1, len(ys) + 1) / 24.0, ys, label=name)
    ax.set_xlabel("day")
    ax.set_ylabel("harvested GPU-hours (cumulative)")
    ax.set_title("GPU-hours harvested from idle windows")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.append(folder / "harvest.png")
    fig.savefig(out[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, xs in jct.items():
        if xs:
            x = np.sort(np.array(xs)) / 3600.0
            ax.plot(x, np.arange(1, len(x) + 1) / len(x), label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log)")
    ax.set_ylabel("CDF")
    ax.set_title("JCT of jobs every policy completed")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.append(folder / "jct_cdf.png")
    fig.savefig(out[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4))
    names = list(metrics)
    ax.bar(names, [metrics[n]["evictions"] for n in names], color="tab:red")
    ax.set_ylabel("evictions")
    if max((metrics[n]["evictions"] for n in names), default=0) > 0:
        ax.set_yscale("log")
    ax.set_title("Offline pods evicted for returning online demand")
    for i, n in enumerate(names):
        ax.annotate(str(metrics[n]["evictions"]), (i, max(1, metrics[n]["evictions"])), ha="center", va="bottom")
    fig.tight_layout()
    out.append(folder / "evictions.png")
    fig.savefig(out[-1], dpi=110)
    plt.close(fig)
    return out
