"""Assemble the operator from settings: Kubernetes client, predictor client, metrics, reconciler, kopf registry."""

from __future__ import annotations

from dataclasses import dataclass

import kopf
from prometheus_client import CollectorRegistry

from offpeak_operator.gpus import load_resolver
from offpeak_operator.handlers import build_registry, kopf_settings
from offpeak_operator.kube import KubeIO, load_api_client
from offpeak_operator.metrics import OperatorMetrics
from offpeak_operator.predictor_http import PredictorHTTP
from offpeak_operator.reconciler import Context, Extractor, Reconciler
from offpeak_operator.settings import OperatorSettings
from offpeak_operator.statusserver import StatusChannel, StatusServer, Throttle, build_app


@dataclass
class Operator:
    reconciler: Reconciler
    registry: kopf.OperatorRegistry
    kopf_settings: kopf.OperatorSettings
    metrics: OperatorMetrics
    status_server: StatusServer | None = None  # started by the CLI (`start()`), beside kopf


def build_operator(settings: OperatorSettings, *, kubeconfig: str | None = None,
                   metrics_registry: CollectorRegistry | None = None, extract: Extractor | None = None) -> Operator:
    api_client = load_api_client(kubeconfig)
    metrics = OperatorMetrics(metrics_registry)
    ctx = Context(settings=settings, kube=KubeIO(api_client),
                  predictor=PredictorHTTP(settings.predictor.url, timeout_seconds=settings.predictor.timeout_seconds,
                                          metrics=metrics, token_file=settings.predictor.token_file),
                  metrics=metrics, resolve_gpu=load_resolver())
    if extract is not None:
        ctx.extract = extract
    server = None
    if settings.status is not None:
        ctx.status_channel = channel = StatusChannel.from_settings(settings.status)
        app = build_app(channel=channel, store=ctx.kube, metrics=metrics,
                        throttle=Throttle(settings.status.min_interval_seconds))
        server = StatusServer(app, host=settings.status.host, port=settings.status.port, channel=channel)
    reconciler = Reconciler(ctx)
    return Operator(reconciler=reconciler, registry=build_registry(reconciler, settings, api_client),
                    kopf_settings=kopf_settings(settings), metrics=metrics, status_server=server)
