"""`offpeak agent`: per-GPU utilisation, memory and pod attribution as Prometheus metrics."""

from __future__ import annotations

import argparse
import logging
import socket

from offpeak.cliargs import env
from offpeak.errors import UserError


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "agent",
        help="GPU node agent: NVML utilisation/memory per GPU and pod, as Prometheus metrics",
        description="Runs on every GPU node (DaemonSet). Without NVML it exports no GPU data (absent, not zero), "
        "stays alive (/healthz) but not ready (/readyz), and retries NVML before each sample.",
    )
    p.add_argument("--port", type=int, default=env("OFFPEAK_AGENT_PORT", 9400))
    p.add_argument("--host", default=env("OFFPEAK_AGENT_HOST", "0.0.0.0"))  # noqa: S104 - scraped
    p.add_argument("--node-name", default=env("NODE_NAME"),
                   help="this node's name (default: $NODE_NAME, then the hostname)")
    p.add_argument("--interval", type=float, default=env("OFFPEAK_AGENT_INTERVAL", 5.0),
                   help="seconds between samples")
    p.add_argument("--kubeconfig", default=env("KUBECONFIG"),
                   help="to name pods; default in-cluster; without API access pods show as 'other'")
    p.add_argument("--proc-root", default=env("OFFPEAK_PROC_ROOT", "/proc"),
                   help="host /proc (mount it with hostPID or as a volume)")
    p.add_argument("--log-level", default=env("OFFPEAK_LOG_LEVEL", "INFO"))
    p.set_defaults(func=run_agent)


def run_agent(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        raise UserError("--interval must be > 0")
    if not 0 < args.port < 65536:
        raise UserError("--port must be in 1..65535")
    args.node_name = args.node_name or socket.gethostname()
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from offpeak_agent.app import serve

    serve(args)
    return 0
