"""`offpeak extender` (scheduler extender HTTP service) and `offpeak evictor` (eviction controller).

Only argument parsing and wiring here; heavy imports happen inside the handlers.
"""

from __future__ import annotations

import argparse
import logging

from offpeak.cliargs import env
from offpeak.errors import UserError
from offpeak_core.decisions import DEFAULT_MARGIN
from offpeak_core.gangs import DEFAULT_GANG_TIMEOUT_SECONDS
from offpeak_core.yielding import DEFAULT_MARGIN_SECONDS
from offpeak_extender.kueuecheck import CONTROLLER_NAME


def _off_when_zero(text: str) -> float | None:
    """A number where 0 means off (None)."""
    return float(text) or None


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "extender",
        help="kube-scheduler extender: place training pods into forecast idle GPU windows",
        description="Serve /filter and /prioritize for a kube-scheduler (nodeCacheCapable or full Nodes). "
        "Each flag has an OFFPEAK_* environment fallback.",
    )
    p.add_argument("--port", type=int, default=env("OFFPEAK_EXTENDER_PORT", 8888))
    p.add_argument("--host", default=env("OFFPEAK_EXTENDER_HOST", "127.0.0.1"))
    p.add_argument("--kubeconfig", default=env("KUBECONFIG"), help="default: $KUBECONFIG, then in-cluster")
    p.add_argument("--prometheus-url", default=env("OFFPEAK_PROMETHEUS_URL"),
                   help="history of offpeak_node_online_gpus; without it the extender samples pods itself")
    p.add_argument("--margin", type=float, default=env("OFFPEAK_MARGIN", DEFAULT_MARGIN),
                   help="safety margin on the p90 job time (0.15 = +15%%)")
    _forecast_arguments(p)
    p.add_argument("--metrics-port", type=int,
                   default=env("OFFPEAK_EXTENDER_METRICS_PORT"),
                   help="also serve /healthz, /readyz and /metrics (only those) on this port, so --host can stay "
                   "127.0.0.1 for the scheduler alone")
    p.add_argument("--metrics-host", default=env("OFFPEAK_EXTENDER_METRICS_HOST", "0.0.0.0"),  # noqa: S104
                   help="address of --metrics-port (default 0.0.0.0: kubelet probes and Prometheus)")
    p.add_argument("--deadline-seconds", type=float, default=env("OFFPEAK_EXTENDER_DEADLINE_SECONDS", 3.0),
                   help="answer fail-open (all nodes pass, scores 0) when a decision takes longer; keep it below "
                   "the scheduler's httpTimeout (5s)")
    p.add_argument("--max-body-bytes", type=int,
                   default=env("OFFPEAK_EXTENDER_MAX_BODY_BYTES", 8 * 1024 * 1024),
                   help="largest /filter or /prioritize body accepted (413 above); default 8 MiB")
    p.add_argument("--inline-body-bytes", type=int,
                   default=env("OFFPEAK_EXTENDER_INLINE_BODY_BYTES", 512 * 1024),
                   help="bodies up to this size are parsed on the event loop and, when the answer is cheap (a "
                        "node list whose columns are kept), decided there without a worker thread; 0: never; "
                        "default 512 KiB")
    p.add_argument("--gang-timeout-seconds", type=float,
                   default=env("OFFPEAK_GANG_TIMEOUT_SECONDS", DEFAULT_GANG_TIMEOUT_SECONDS),
                   help="release a gang's reserved places when not every worker is bound this long after the first "
                   "worker reserved them")
    p.add_argument("--goodput-min-efficiency", type=_off_when_zero,
                   default=env("OFFPEAK_GOODPUT_MIN_EFFICIENCY"),
                   help="turn on expected-goodput admission: a checkpointing pod may take a window shorter than its "
                   "run when, by how long such windows really lasted here, the work it keeps is at least this share "
                   "of the GPU time it holds (e.g. 0.8); off by default")
    p.add_argument("--goodput-startup-seconds", type=float,
                   default=env("OFFPEAK_GOODPUT_STARTUP_SECONDS", 60.0),
                   help="time from start to a job's first step (image, restore): no work is kept in it")
    p.add_argument("--goodput-min-samples", type=int,
                   default=env("OFFPEAK_GOODPUT_MIN_SAMPLES", 30),
                   help="windows of a forecast class observed before it admits anything by goodput")
    p.add_argument("--kueue-admission-check", nargs="?", const=CONTROLLER_NAME,
                   default=env("OFFPEAK_KUEUE_ADMISSION_CHECK"), metavar="CONTROLLER_NAME",
                   help="answer Kueue AdmissionChecks whose controllerName is this (default when given without a "
                   f"value: {CONTROLLER_NAME}): a workload is admitted once a forecast window fits it; off by default")
    p.add_argument("--kueue-interval-seconds", type=float,
                   default=env("OFFPEAK_KUEUE_INTERVAL_SECONDS", 5.0),
                   help="how often the Kueue admission check looks at pending workloads")
    p.add_argument("--log-level", default=env("OFFPEAK_LOG_LEVEL", "INFO"))
    p.set_defaults(func=run_extender)

    e = subparsers.add_parser(
        "evictor",
        help="eviction controller: evict offline pods when online work needs their GPUs",
        description="Watch pending online pods and online GPU demand; evict offline pods that lose the least work.",
    )
    e.add_argument("--kubeconfig", default=env("KUBECONFIG"))
    e.add_argument("--metrics-port", type=int, default=env("OFFPEAK_EVICTOR_METRICS_PORT", 9091))
    e.add_argument("--host", default=env("OFFPEAK_EVICTOR_HOST", "0.0.0.0"))  # noqa: S104 - scraped by Prometheus
    e.add_argument("--grace-seconds", type=int, default=env("OFFPEAK_GRACE_SECONDS", 30))
    e.add_argument("--interval-seconds", type=float, default=env("OFFPEAK_INTERVAL_SECONDS", 2.0))
    e.add_argument("--prometheus-url", default=env("OFFPEAK_PROMETHEUS_URL"),
                   help="measured online GPUs per node (node agent); without it only pending online pods count")
    e.add_argument("--pressure-settle-seconds", type=float,
                   default=env("OFFPEAK_PRESSURE_SETTLE_SECONDS", 60.0),
                   help="measured online GPU use does not evict an offline pod younger than this: the measurement "
                        "lags the pods (agent sampling, Prometheus scrapes) and may predate it; pending online pods "
                        "evict at once whatever the age")
    e.add_argument("--yield-at-checkpoints", action="store_true",
                   default=env("OFFPEAK_YIELD_AT_CHECKPOINTS", False),
                   help="stop a checkpointing pod at its last checkpoint before its node's idle window is forecast "
                        "to end (nothing lost, no online pod waits); the evictor then also fits forecasts, from "
                        "--prometheus-url or the pods it sees, with the forecast options below (give it the "
                        "extender's). A planned stop does not count against the TrainingJob's maxAttempts")
    e.add_argument("--yield-margin-seconds", type=float,
                   default=env("OFFPEAK_YIELD_MARGIN_SECONDS", DEFAULT_MARGIN_SECONDS),
                   help="a pod stops when its next checkpoint would land less than this before its window's "
                        "forecast end")
    e.add_argument("--startup-seconds", type=float, default=env("OFFPEAK_GOODPUT_STARTUP_SECONDS", 60.0),
                   help="time from a pod's start to its first step: its checkpoints are counted from then")
    _forecast_arguments(e)
    e.add_argument("--log-level", default=env("OFFPEAK_LOG_LEVEL", "INFO"))
    e.set_defaults(func=run_evictor)


def _forecast_arguments(p: argparse.ArgumentParser) -> None:
    """The seasonal forecaster's options: the extender's, and the evictor's for planned stops (the same values,
    so both see the same windows)."""
    p.add_argument("--refresh-seconds", type=float, default=env("OFFPEAK_REFRESH_SECONDS", 60.0))
    p.add_argument("--history-days", type=float, default=env("OFFPEAK_HISTORY_DAYS", 28.0),
                   help="history used by the seasonal forecaster, in (possibly compressed) days")
    p.add_argument("--step-seconds", type=float, default=env("OFFPEAK_STEP_SECONDS", 300.0))
    p.add_argument("--season-seconds", type=float, default=env("OFFPEAK_SEASON_SECONDS", 86400.0),
                   help="length of one day (e.g. 600 to compress a day into 10 minutes in tests)")
    p.add_argument("--horizon-seconds", type=float, default=None, help="forecast horizon (default: one day)")
    p.add_argument("--quantile", type=float, default=env("OFFPEAK_QUANTILE", 0.9),
                   help="online demand quantile per time bin (higher = more cautious windows)")
    p.add_argument("--stale-seconds", type=float, default=None,
                   help="forecasts older than this are stale (default: 3 x refresh, at least 2 steps)")
    p.add_argument("--pool-label", default=env("OFFPEAK_POOL_LABEL"), metavar="KEY",
                   help="turn on pool windows: nodes that share a value of this node label form a pool whose online "
                   "pods may run on any of its nodes (e.g. an inference service's node pool); a pooled node's windows "
                   "end when the pool's total online demand, forecast from its recent peak and the rises its history "
                   "shows and never below what OnlineDemand objects announce for the pool, leaves less room than the "
                   "pool's offline pods hold; off by default")
    p.add_argument("--pool-ceiling-namespaces", default=env("OFFPEAK_POOL_CEILING_NAMESPACES"),
                   metavar="NS,NS",
                   help="with --pool-label: OnlineDemand objects in these namespaces may also state the most online "
                   "GPUs their pool holds (spec.poolGpusAtMost), which caps the pool's forecast; elsewhere that field "
                   "is ignored (logged) and the object counts as a floor only; default: none")
    p.add_argument("--pool-look-back-seconds", type=float,
                   default=env("OFFPEAK_POOL_LOOK_BACK_SECONDS"),
                   help="how far back a pool's recent peak is taken (default: a quarter of --season-seconds, 6 h)")


def _check(args: argparse.Namespace) -> None:
    for name in ("refresh_seconds", "step_seconds", "season_seconds", "history_days", "pool_look_back_seconds"):
        if getattr(args, name, 1) is not None and getattr(args, name, 1) <= 0:
            raise UserError(f"--{name.replace('_', '-')} must be > 0")
    for name in ("deadline_seconds", "max_body_bytes", "gang_timeout_seconds", "kueue_interval_seconds"):
        if getattr(args, name, 1) <= 0:
            raise UserError(f"--{name.replace('_', '-')} must be > 0")
    if getattr(args, "inline_body_bytes", 0) < 0:
        raise UserError("--inline-body-bytes must be >= 0")
    if getattr(args, "margin", 0) < 0:
        raise UserError("--margin must be >= 0")
    if not 0 < getattr(args, "port", getattr(args, "metrics_port", 1)) < 65536:
        raise UserError("port must be in 1..65535")
    if getattr(args, "port", None) is not None and getattr(args, "metrics_port", None) is not None:
        if not 0 < args.metrics_port < 65536 or args.metrics_port == args.port:
            raise UserError("--metrics-port must be in 1..65535 and differ from --port")


def run_extender(args: argparse.Namespace) -> int:
    _check(args)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from offpeak_extender.app import ExtenderConfig, serve_extender

    try:
        config = ExtenderConfig.from_args(args)
    except ValueError as e:
        raise UserError(str(e)) from e
    serve_extender(config)
    return 0


def run_evictor(args: argparse.Namespace) -> int:
    _check(args)
    for name in ("grace_seconds", "yield_margin_seconds", "startup_seconds", "pressure_settle_seconds"):
        if getattr(args, name) < 0:
            raise UserError(f"--{name.replace('_', '-')} must be >= 0")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from offpeak_extender.app import serve_evictor

    serve_evictor(args)
    return 0
