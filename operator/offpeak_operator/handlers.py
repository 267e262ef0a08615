"""kopf wiring: every trigger calls the same reconcile; settings for watches, peering and progress storage.

Triggers: on.create (at once), pod events (fast reaction to start/finish/eviction) and the Resyncer loop (time).
No handler needs a finalizer, so deleting a TrainingJob never waits for the operator.

Handlers are registered on a registry built per operator (no import-time side effects), so tests can run the
real operator with `kopf.testing.KopfRunner(..., registry=build_registry(...), settings=kopf_settings(...))`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import kopf
from kubernetes import client

from offpeak_core.jobkinds import PYTORCH_JOB
from offpeak_operator import names
from offpeak_operator.peering import PeeringGate
from offpeak_operator.reconciler import Reconciler
from offpeak_operator.resync import Resyncer
from offpeak_operator.workload_reconciler import WorkloadReconciler
from offpeak_operator.workloads import opted_in
from offpeak_operator.settings import OperatorSettings

PEERING_NAME = "offpeak-operator"
RESOURCE = (names.GROUP, names.VERSION, names.PLURAL)


def connection_info(api_client: client.ApiClient) -> kopf.ConnectionInfo:
    """kopf credentials from the same ApiClient the reconciler uses (one source of truth for --kubeconfig)."""
    cfg = api_client.configuration
    header = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix("authorization")
    parts = header.split(" ", 1) if header else []
    scheme, token = (None, None) if not parts else (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1])
    return kopf.ConnectionInfo(
        server=cfg.host, ca_path=cfg.ssl_ca_cert, insecure=not cfg.verify_ssl, username=cfg.username or None,
        password=cfg.password or None, scheme=scheme, token=token, certificate_path=cfg.cert_file,
        private_key_path=cfg.key_file,
    )  # fmt: skip


def kopf_settings(settings: OperatorSettings) -> kopf.OperatorSettings:
    s = kopf.OperatorSettings()
    s.watching.server_timeout = settings.watch_server_timeout_seconds
    s.watching.client_timeout = settings.watch_client_timeout_seconds
    s.watching.connect_timeout = 30
    s.persistence.progress_storage = kopf.AnnotationsProgressStorage()
    s.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage()
    s.posting.level = logging.WARNING  # our own Events say what happened; kopf posts only its warnings
    s.peering.name = PEERING_NAME
    s.execution.max_workers = 8
    return s


def build_registry(reconciler: Reconciler, settings: OperatorSettings,
                   api_client: client.ApiClient) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    metrics = reconciler.ctx.metrics

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return connection_info(api_client)

    gate = PeeringGate(reconciler.ctx.kube, settings.peering) if settings.peering is not None else None
    resyncer = Resyncer(reconciler, interval_seconds=settings.resync_seconds, gate=gate)
    tasks: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def start_resync(**_: Any) -> None:
        tasks.append(asyncio.create_task(resyncer.run(), name="offpeak-resync"))

    @kopf.on.cleanup(registry=registry)
    async def stop_resync(**_: Any) -> None:
        for task in tasks:
            task.cancel()

    @kopf.on.create(*RESOURCE, registry=registry)
    def created(*, name: str, namespace: str | None, **_: Any) -> None:
        assert namespace is not None  # namespaced resource
        phase = reconciler.reconcile(namespace, name)
        resyncer.track(namespace, name, phase=phase)

    @kopf.on.event(*RESOURCE, registry=registry)
    def job_event(*, type: str, name: str, namespace: str | None, status: kopf.Status, **_: Any) -> None:
        assert namespace is not None
        phase = status.get("phase")
        deleted = type == "DELETED"
        resyncer.track(namespace, name, phase=phase, deleted=deleted)
        # every job counts in offpeak_jobs{phase}, also finished ones seen after a restart; a deleted job's pods
        # and ConfigMaps go with it (owner references), so only the metric needs forgetting
        metrics.set_phase(f"{namespace}/{name}", None if deleted else (phase or "Pending"))

    @kopf.on.event("", "v1", "pods", labels={names.LABEL_JOB: kopf.PRESENT}, registry=registry)
    def pod_changed(*, labels: Mapping[str, str], namespace: str | None, **_: Any) -> None:
        assert namespace is not None
        reconciler.reconcile(namespace, labels[names.LABEL_JOB], wait=False)

    if settings.watch_batch_jobs:
        jobs = WorkloadReconciler(reconciler)

        @kopf.on.event("batch", "v1", "jobs", registry=registry,
                       when=lambda body, **_: opted_in(body))  # type: ignore[arg-type]
        def batch_job_event(*, type: str, name: str, namespace: str | None, **_: Any) -> None:
            if type != "DELETED" and namespace is not None:
                jobs.reconcile(namespace, name)

    if settings.watch_pytorch_jobs:
        pytorch_jobs = WorkloadReconciler(reconciler, PYTORCH_JOB)

        @kopf.on.event(PYTORCH_JOB.group, PYTORCH_JOB.version, PYTORCH_JOB.plural, registry=registry,
                       when=lambda body, **_: opted_in(body, PYTORCH_JOB))  # type: ignore[arg-type]
        def pytorch_job_event(*, type: str, name: str, namespace: str | None, **_: Any) -> None:
            if type != "DELETED" and namespace is not None:
                pytorch_jobs.reconcile(namespace, name)

    return registry
