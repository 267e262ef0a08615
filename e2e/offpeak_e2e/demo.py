"""`offpeak demo`: local cluster up, example TrainingJobs in, a live table, a predicted-vs-actual plot, clean exit.

Ctrl-C (or --duration, or every job finished) ends the demo and tears the cluster down (unless --keep).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import subprocess
import time
from pathlib import Path
from typing import Any

from offpeak.errors import UserError
from offpeak_core.timeparse import parse_timestamp

NAMESPACE = "demo"
DEMO_GPU_TYPES = ("A100-SXM4-40GB",)


def _row(tj: dict[str, Any], sim: dict[str, float], window: Any = None) -> dict[str, Any]:
    status = tj.get("status") or {}
    name = tj["metadata"]["name"]
    return {
        "job": name,
        "phase": status.get("phase", "-"),
        "gpu_type": status.get("gpuType") or "",
        "predicted_seconds": status.get("predictedSeconds"),
        "actual_seconds": status.get("actualSeconds"),
        "measured_seconds": sim.get(name),
        "node": status.get("node") or "",
        "attempts": status.get("attempts") or 0,
        "window": window(status) if window else "",
    }


def window_reader(cluster: Any, *, day_seconds: float, gpus: int) -> Any:
    """A function status -> "idle window" text: how long the node's replayed online load left the job's GPUs
    free from the attempt's start (what the window really was, to compare with the predicted time)."""
    from offpeak_e2e import onlineload  # noqa: PLC0415

    if "reference" not in cluster.state.urls:
        return None
    reference = float(cluster.state.urls["reference"])
    demand = onlineload.load_plan(onlineload.LoadSettings(nodes=tuple(cluster.nodes), gpus=gpus,
                                                          day_seconds=day_seconds))
    cache: dict[tuple[str, str], str] = {}

    def read(status: dict[str, Any]) -> str:
        node, start = status.get("node"), status.get("attemptStartTime")
        if not node or not start or node not in demand:
            return ""
        key = (node, start)
        if key not in cache:
            t0 = parse_timestamp(start)
            if t0 is None:
                return ""
            secs = onlineload.idle_window(demand, node, start=t0, reference=reference, day_seconds=day_seconds,
                                          gpus=gpus, need=int(status.get("gpus") or 1))
            cache[key] = f"{secs:.0f}s"
        return cache[key]

    return read


def _fmt(x: Any) -> str:
    return "-" if x is None else f"{float(x):.0f}s"


def render_table(rows: list[dict[str, Any]], *, elapsed: float, online: dict[str, int]) -> Any:
    from rich.table import Table  # noqa: PLC0415

    table = Table(title=f"offpeak demo — {elapsed:.0f}s — online GPUs per node: "
                        + ", ".join(f"{n}={v}" for n, v in sorted(online.items())))
    for col in ("job", "phase", "predicted", "actual", "measured", "node", "idle window", "attempts"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["job"], r["phase"], _fmt(r["predicted_seconds"]), _fmt(r["actual_seconds"]),
                      _fmt(r["measured_seconds"]), r["node"], r["window"], str(r["attempts"]))
    return table


def _online_replicas(cluster: Any) -> dict[str, int]:
    try:
        items = cluster.get("deployments", "-n", "online")["items"]
    except Exception:  # noqa: BLE001 - the table just shows nothing while the API is busy
        return {}
    return {d["metadata"]["name"].removeprefix("online-"): int(d["spec"].get("replicas") or 0) for d in items}


def write_plot(rows: list[dict[str, Any]], out_dir: Path) -> Path | None:
    """results.json and predicted_vs_actual.png (via `offpeak plot-runtimes`, else matplotlib here)."""
    from offpeak_e2e.cluster import offpeak_argv  # noqa: PLC0415

    done = [r for r in rows if r["predicted_seconds"] and r["actual_seconds"]]
    out_dir.mkdir(parents=True, exist_ok=True)
    results = out_dir / "results.json"
    results.write_text(json.dumps({"jobs": rows}, indent=2))
    if not done:
        return None
    png = out_dir / "predicted_vs_actual.png"
    proc = subprocess.run([*offpeak_argv(), "plot-runtimes", "--from-json", str(results), "--out", str(png),
                           "--title", "offpeak demo: predicted vs actual"], capture_output=True, text=True,
                          check=False)
    if proc.returncode == 0 and png.exists():
        return png
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(5, 5))
    xs = [r["predicted_seconds"] for r in done]
    ys = [r["actual_seconds"] for r in done]
    ax.scatter(xs, ys)
    hi = max(xs + ys) * 1.1
    ax.plot([0, hi], [0, hi], "k--", lw=1)
    ax.set_xlabel("predicted seconds (p50)")
    ax.set_ylabel("actual seconds")
    ax.set_title("offpeak demo: predicted vs actual")
    fig.savefig(png, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return png


def run_demo(args: argparse.Namespace, *, settings: Any) -> int:
    """Run the demo on a cluster made from `settings` (ClusterSettings; the CLI builds them from `args`)."""
    from rich.console import Console  # noqa: PLC0415
    from rich.live import Live  # noqa: PLC0415

    from offpeak_e2e import demojobs  # noqa: PLC0415
    from offpeak_e2e.cluster import LocalCluster  # noqa: PLC0415
    from offpeak_e2e.controlplane import StartError  # noqa: PLC0415
    from offpeak_e2e.harness import E2ECluster  # noqa: PLC0415

    if DEMO_GPU_TYPES[0] not in settings.control_plane.gpu_types:
        raise UserError(f"the demo's jobs run on {DEMO_GPU_TYPES[0]} (measured runtimes); include it in --gpu-types")
    console = Console() if sys.stdout.isatty() else Console(width=150)  # logs and CI: keep the table whole
    try:
        jobs = demojobs.plan_jobs(count=args.jobs, step_seconds=demojobs.measured_step_seconds())
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read the measured runtimes for the demo jobs: {e}") from e
    sim = {j.name: j.sim_seconds for j in jobs}
    local = LocalCluster(settings, echo=lambda m: console.print(m, highlight=False))
    stop = {"now": False}
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    rows: list[dict[str, Any]] = []
    code = 0
    try:
        try:
            state = local.up()
        except StartError as e:
            console.print(f"[red]offpeak demo: the local cluster did not start:[/red] {e}")
            return 1
        cluster = E2ECluster(cluster=local, state=state)
        cluster.kubectl("create", "namespace", NAMESPACE, check=False)
        cluster.wait_for("ServiceAccount demo/default",
                         lambda: cluster.kubectl("-n", NAMESPACE, "get", "sa", "default", check=False).returncode == 0,
                         timeout=60)
        for job in jobs:
            cluster.kubectl("-n", NAMESPACE, "apply", "-f", "-", stdin=json.dumps(demojobs.manifest(job)))
        console.print(f"submitted {len(jobs)} TrainingJobs to namespace {NAMESPACE!r}; "
                      f"KUBECONFIG={state.kubeconfig}  (Ctrl-C to stop)")
        window = window_reader(cluster, day_seconds=args.day_seconds, gpus=args.gpus_per_node)
        start = time.monotonic()
        with Live(console=console, refresh_per_second=1, transient=False) as live:
            while not stop["now"]:
                try:
                    items = cluster.get("trainingjobs.offpeak.io", "-n", NAMESPACE)["items"]
                except Exception:  # noqa: BLE001
                    items = []
                rows = sorted((_row(tj, sim, window) for tj in items), key=lambda r: r["job"])
                elapsed = time.monotonic() - start
                live.update(render_table(rows, elapsed=elapsed, online=_online_replicas(cluster)))
                if rows and all(r["phase"] in ("Succeeded", "Failed") for r in rows):
                    break
                if args.duration and elapsed >= args.duration:
                    break
                time.sleep(2)
    except KeyboardInterrupt:
        console.print("interrupted; tearing down")
        code = 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        out = Path(args.out)
        png = write_plot(rows, out) if rows else None
        finished = sum(r["phase"] == "Succeeded" for r in rows)
        console.print(f"{finished}/{len(jobs)} jobs succeeded; results in {out / 'results.json'}"
                      + (f"; plot {png}" if png else ""))
        if args.keep:
            console.print(f"cluster left running: offpeak cluster down --name {args.name}")
        else:
            local.down()
    return code
