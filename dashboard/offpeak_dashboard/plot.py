"""The predicted-vs-actual figure (matplotlib, headless): same picture as the dashboard's table, for people
without Grafana."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from offpeak_dashboard.runtimes import JobRuntime, summarise
from offpeak_dashboard.series import PanelData


def plot_runtimes(records: Sequence[JobRuntime], out: Path, *, title: str = "offpeak: predicted vs actual") -> Path:
    """Write a log-log scatter, one colour per GPU type, with the y = x line and a ±25 % band."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 6.0), dpi=110)
    try:
        draw_runtimes(ax, records, title=title)
        _save(fig, out)
    finally:
        plt.close(fig)
    return out


def draw_runtimes(ax: Any, records: Sequence[JobRuntime], *, title: str) -> None:
    """The predicted-vs-actual scatter on `ax`: one colour per GPU type, the y = x line, a ±25 % band, and a
    subtitle saying how far off the predictions were."""
    import matplotlib.pyplot as plt

    gpu_types = sorted({r.gpu_type for r in records})
    colours = plt.get_cmap("tab10")
    for i, gpu in enumerate(gpu_types):
        mine = [r for r in records if r.gpu_type == gpu]
        ax.scatter([r.predicted_seconds for r in mine], [r.actual_seconds for r in mine], s=22, alpha=0.8,
                   color=colours(i % 10), label=f"{gpu} ({len(mine)})")
    values = [v for r in records for v in (r.predicted_seconds, r.actual_seconds)] or [1.0, 10.0]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    line = [lo, hi]
    ax.plot(line, line, color="black", linewidth=1, label="actual = predicted")
    ax.fill_between(line, [v * 0.8 for v in line], [v * 1.25 for v in line], color="grey", alpha=0.15,
                    label="±25 %")
    format_log_axes(ax, lo, hi)
    ax.set_xlabel("predicted job time (s)")
    ax.set_ylabel("actual job time (s)")
    summary = summarise(records)
    if summary.jobs:
        typical = 2 ** summary.median_abs_log2_error
        subtitle = (f"{summary.jobs} jobs, median error ×{typical:.2f}, "
                    f"{summary.within_25_percent:.0%} within ±25 %")
    else:
        subtitle = "no finished jobs yet"
    ax.set_title(f"{title}\n{subtitle}", fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="upper left")


def plot_dashboard(panels: Sequence[PanelData], out: Path, *, title: str, columns: int = 3) -> Path:
    """Write the given panels side by side, `columns` to a row, as one PNG."""
    plt = _pyplot()
    rows = max(1, math.ceil(len(panels) / columns))
    fig, axes = plt.subplots(rows, columns, figsize=(6.0 * columns, 4.8 * rows), dpi=90, squeeze=False)
    try:
        for ax, panel in zip(axes.flat, panels):
            _draw_panel(ax, panel)
        for ax in list(axes.flat)[len(panels):]:
            ax.set_visible(False)
        fig.suptitle(title, fontsize=13)
        # fixed margins: tight_layout measures every label, which costs more than drawing the figure
        fig.subplots_adjust(left=0.05, right=0.98, bottom=0.07, top=0.9, wspace=0.28, hspace=0.38)
        _save(fig, out)
    finally:
        plt.close(fig)
    return out


def _draw_panel(ax: Any, panel: PanelData) -> None:
    if panel.kind == "scatter":
        draw_runtimes(ax, panel.runtimes, title=panel.title)
        return
    drawn = [s for s in panel.series if s.values]
    if panel.kind == "bars":
        values = [s.values[-1] for s in drawn]
        bars = ax.bar([textwrap.fill(s.name, 20) for s in drawn], values, color="tab:green", width=0.5)
        ax.bar_label(bars, labels=[f"{v:.3g}" for v in values], fontsize=9)
        ax.set_ylim(0, max(values, default=1.0) * 1.15 or 1.0)
        ax.set_ylabel(panel.unit)
    elif drawn:
        _draw_over_time(ax, drawn, stacked=panel.kind == "stacked")
        ax.set_ylabel(panel.unit)
        ax.legend(fontsize=8, loc="upper left")
    if panel.reference is not None:
        ax.axhline(panel.reference, color="black", linewidth=1, linestyle="--")
    if not drawn:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="grey")
    ax.set_title(panel.title, fontsize=10)
    ax.grid(True, alpha=0.25)


def _draw_over_time(ax: Any, series: Sequence[Any], *, stacked: bool) -> None:
    """Lines against wall-clock time (stacked areas on the union of the series' times when `stacked`)."""
    from datetime import datetime, timezone

    import matplotlib.dates as mdates

    def when(times: Sequence[float]) -> list[datetime]:
        return [datetime.fromtimestamp(t, tz=timezone.utc) for t in times]

    if stacked:
        times = sorted({t for s in series for t in s.times})
        columns = [dict(zip(s.times, s.values)) for s in series]
        ax.stackplot(when(times), *[[c.get(t, 0.0) for t in times] for c in columns],
                     labels=[s.name for s in series], alpha=0.8)
    else:
        for s in series:
            ax.plot(when(s.times), s.values, linewidth=1.2, label=s.name)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=timezone.utc))
    ax.set_xlabel("time (UTC)")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)


def nice_ticks(lo: float, hi: float, *, most: int = 8) -> list[float]:
    """Round tick values within [lo, hi] for a log axis of seconds: 1, 2, 5 × 10^k, or only 10^k when that would
    give more than `most` ticks (a span of many decades)."""
    if not 0 < lo < hi:
        raise ValueError("need 0 < lo < hi")
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for steps in ((1, 2, 5), (1,)):
        ticks = [m * 10.0**k for k in range(first, last + 1) for m in steps if lo <= m * 10.0**k <= hi]
        if len(ticks) <= most:
            return ticks
    return ticks


def format_log_axes(ax: Any, lo: float, hi: float) -> None:
    """Both axes log, from `lo` to `hi`, square, labelled at round seconds in plain numbers (matplotlib's default
    labels minor ticks as 3×10^1, 4×10^1, ... which run into each other on a span of about a decade)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ticks = nice_ticks(lo, hi)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_locator(FixedLocator(ticks))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())


def is_png(path: Path) -> bool:
    """True when the file starts with the PNG signature (used by checks and tests)."""
    with path.open("rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n"

