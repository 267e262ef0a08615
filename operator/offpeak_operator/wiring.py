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


@dataclass
class Operator:
    reconciler: Reconciler
    registry: kopf.OperatorRegistry
    kopf_settings: kopf.OperatorSettings
    metrics: OperatorMetrics


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
    reconciler = Reconciler(ctx)
    return Operator(reconciler=reconciler, registry=build_registry(reconciler, settings, api_client),
                    kopf_settings=kopf_settings(settings), metrics=metrics)
