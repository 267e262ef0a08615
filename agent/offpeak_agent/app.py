"""Wire the agent: NVML backend (or none), pod directory, sampler thread, HTTP server."""

from __future__ import annotations

import argparse
import logging
import threading
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry

from offpeak_agent.collector import AgentMetrics, Sampler
from offpeak_agent.nvml import open_backend
from offpeak_agent.pods import KubePods, PodDirectory, StaticPods
from offpeak_agent.server import make_app

log = logging.getLogger(__name__)


def _pods(args: argparse.Namespace) -> PodDirectory:
    try:
        from kubernetes import client, config

        if args.kubeconfig:
            api = config.new_client_from_config(config_file=args.kubeconfig)
        else:
            config.load_incluster_config()
            api = client.ApiClient()
        return KubePods(api_client=api, node_name=args.node_name)
    except Exception as e:  # noqa: BLE001 - no API access: keep measuring, label processes as 'other'
        log.warning("no Kubernetes API access (%s): GPU processes will not be named", e)
        return StaticPods()


def serve(args: argparse.Namespace) -> None:
    registry = CollectorRegistry()
    backend = open_backend()
    sampler = Sampler(node=args.node_name, backend=backend, pods=_pods(args), metrics=AgentMetrics(registry),
                      interval=args.interval, proc_root=Path(args.proc_root),
                      reopen=lambda: open_backend(retry=True))
    sampler.sample_once()
    threading.Thread(target=sampler.run, name="gpu-sampler", daemon=True).start()
    log.info("agent for node %s on http://%s:%d (%s)", args.node_name, args.host, args.port,
             "NVML" if backend.available else "no NVML yet: not ready, retrying before each sample")
    try:
        web.run_app(make_app(sampler=sampler, registry=registry), host=args.host, port=args.port, print=None,
                    access_log=None)
    finally:
        sampler.stop_event.set()
