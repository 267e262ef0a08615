"""`offpeak cluster up|down|status|build` and `offpeak demo` (heavy imports happen inside the handlers)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from offpeak.errors import UserError

SERVICE_NAMES = ("prometheus", "online", "predictor", "extender", "evictor", "operator")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from e
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from e
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def _add_cluster_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--name", default="default", help="cluster name (run dir under the cache; default: default)")
    p.add_argument("--nodes", type=_positive_int, default=4, help="fake GPU nodes (default 4)")
    p.add_argument("--gpus-per-node", type=_positive_int, default=8, help="nvidia.com/gpu per node (default 8)")
    p.add_argument("--gpu-types", default="", help="comma-separated canonical GPU types for the nodes")
    p.add_argument("--day-seconds", type=_positive_float, default=600.0,
                   help="one trace day of online load replayed in this many seconds (default 600)")
    p.add_argument("--no-online-load", action="store_true", help="keep online Deployments at 0 replicas")
    p.add_argument("--without", default="", help=f"comma-separated services not to start: {','.join(SERVICE_NAMES)}")
    p.add_argument("--no-build", action="store_true", help="fail instead of building missing binaries")


def settings_from_args(args: argparse.Namespace) -> Any:
    """ClusterSettings from the shared cluster options (validated; UserError on bad input)."""
    from offpeak_e2e.cluster import ClusterSettings, with_services  # noqa: PLC0415
    from offpeak_e2e.controlplane import ControlPlaneSettings  # noqa: PLC0415
    from offpeak_e2e.nodes import DEFAULT_GPU_TYPES  # noqa: PLC0415

    gpu_types = tuple(t.strip() for t in args.gpu_types.split(",") if t.strip()) or DEFAULT_GPU_TYPES
    _check_gpu_types(gpu_types)
    cp = ControlPlaneSettings(
        name=args.name, nodes=args.nodes, gpus_per_node=args.gpus_per_node, gpu_types=gpu_types,
        build_missing=not args.no_build,
    )
    settings = ClusterSettings(control_plane=cp, day_seconds=args.day_seconds, online_load=not args.no_online_load)
    without = [s.strip() for s in args.without.split(",") if s.strip()]
    try:
        return with_services(settings, without=without)
    except ValueError as e:
        raise UserError(str(e)) from e


def _check_gpu_types(gpu_types: tuple[str, ...]) -> None:
    try:
        from offpeak_predictor import gpus  # noqa: PLC0415
    except ImportError:
        return
    names = set(gpus.known_gpus())
    unknown = [t for t in gpu_types if t not in names]
    if unknown:
        raise UserError(f"unknown GPU type(s) {', '.join(unknown)}; use canonical names such as A100-SXM4-40GB")


def _up(args: argparse.Namespace) -> int:
    from offpeak_e2e.cluster import LocalCluster  # noqa: PLC0415
    from offpeak_e2e.controlplane import StartError  # noqa: PLC0415

    cluster = LocalCluster(settings_from_args(args), echo=lambda m: print(m, flush=True))
    try:
        state = cluster.up()
    except StartError as e:
        print(f"offpeak cluster up: {e}")
        return 1
    print(json.dumps({"kubeconfig": state.kubeconfig, "urls": state.urls, "nodes": state.nodes}, indent=2))
    print(f"export KUBECONFIG={state.kubeconfig}   # stop with: offpeak cluster down --name {args.name}")
    return 0


def _down(args: argparse.Namespace) -> int:
    from offpeak_e2e.controlplane import ControlPlane, ControlPlaneSettings  # noqa: PLC0415

    ControlPlane(ControlPlaneSettings(name=args.name), echo=print).stop()
    print(f"cluster {args.name!r} stopped")
    return 0


def _status(args: argparse.Namespace) -> int:
    from offpeak_e2e.cluster import status  # noqa: PLC0415

    info = status(args.name)
    print(json.dumps(info, indent=2))
    procs = info["processes"]
    return 0 if isinstance(procs, dict) and procs and all(v == "running" for v in procs.values()) else 1


def _build(args: argparse.Namespace) -> int:
    from offpeak_e2e import build  # noqa: PLC0415

    known = {target.name for target in build.TARGETS}
    unknown = [name for name in args.only.split(",") if name and name not in known]
    if unknown:
        raise UserError(f"unknown --only target(s) {', '.join(unknown)}: use {_target_names()}")
    return build.main(["--only", args.only] if args.only else [])


def _target_names() -> str:
    """The targets `cluster build` makes, from build.py's own list."""
    from offpeak_e2e.build import TARGETS  # noqa: PLC0415

    return ",".join(t.name for t in TARGETS)


def _demo(args: argparse.Namespace) -> int:
    from offpeak_e2e.demo import DEMO_GPU_TYPES, run_demo  # noqa: PLC0415

    if not args.gpu_types:
        args.gpu_types = ",".join(DEMO_GPU_TYPES)
    return run_demo(args, settings=settings_from_args(args))


def register(subparsers: Any) -> None:
    """Add `cluster` and `demo` to the offpeak CLI."""
    cluster = subparsers.add_parser("cluster", help="local Kubernetes control plane with fake GPU nodes")
    sub = cluster.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="build (first time) and start the local cluster and offpeak's services")
    _add_cluster_options(up)
    up.set_defaults(func=_up)
    down = sub.add_parser("down", help="stop everything `cluster up` started")
    down.add_argument("--name", default="default")
    down.set_defaults(func=_down, gpu_catalogue=False)
    st = sub.add_parser("status", help="show the cluster's processes and URLs (exit 1 unless all run)")
    st.add_argument("--name", default="default")
    st.set_defaults(func=_status, gpu_catalogue=False)
    b = sub.add_parser("build", help="build the control-plane binaries from Go modules into the cache")
    b.add_argument("--only", default="", help=f"comma-separated targets (default: all of {_target_names()})")
    b.set_defaults(func=_build, gpu_catalogue=False)

    demo = subparsers.add_parser("demo", help="start the local cluster, submit example jobs, show a live table")
    _add_cluster_options(demo)
    demo.set_defaults(name="demo")
    demo.add_argument("--jobs", type=_positive_int, default=8, help="TrainingJobs to submit (default 8)")
    demo.add_argument("--duration", type=_positive_float, default=None,
                      help="stop after this many seconds (default: run until all jobs finish or Ctrl-C)")
    demo.add_argument("--out", default="offpeak-demo",
                      help="folder for the plot PNG and results (default ./offpeak-demo)")
    demo.add_argument("--keep", action="store_true", help="leave the cluster running at the end")
    demo.set_defaults(func=_demo)
