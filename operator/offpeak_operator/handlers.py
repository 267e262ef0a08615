"""kopf wiring: every trigger calls the same reconcile; settings for watches, peering and progress storage.

Triggers: on.create (at once), pod events (fast reaction to start/finish/eviction) and the Resyncer loop (time);
for opted-in workloads, their events, their analysis pod's, and a Resyncer of those being analysed or awaiting a
re-prediction of their fallback.
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

from offpeak_core.jobkinds import BATCH_JOB, PYTORCH_JOB, JobKind
from offpeak_operator import names
from offpeak_operator.peering import PeeringGate
from offpeak_operator.reconciler import Reconciler
from offpeak_operator.resync import Resyncer
from offpeak_operator.workload_reconciler import WorkloadReconciler
from offpeak_operator.workloads import opted_in, polled_while
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
    resyncers = [resyncer]
    tasks: list[asyncio.Task[None]] = []

    @kopf.on.startup(registry=registry)
    async def start_resync(**_: Any) -> None:
        for each in resyncers:
            tasks.append(asyncio.create_task(each.run(), name="offpeak-resync"))

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
        # every job counts in offpeak_jobs, also finished ones seen after a restart; a deleted job's pods
        # and ConfigMaps go with it (owner references), so only the metric needs forgetting
        metrics.set_phase(f"{namespace}/{name}", None if deleted else (phase or "Pending"),
                          reason=str(status.get("reason") or ""))

    @kopf.on.event("", "v1", "pods", labels={names.LABEL_JOB: kopf.PRESENT}, registry=registry)
    def pod_changed(*, labels: Mapping[str, str], namespace: str | None, **_: Any) -> None:
        assert namespace is not None
        reconciler.reconcile(namespace, labels[names.LABEL_JOB], wait=False)

    watched = [kind for kind, on in ((BATCH_JOB, settings.watch_batch_jobs),
                                     (PYTORCH_JOB, settings.watch_pytorch_jobs)) if on]
    by_kind: dict[str, tuple[WorkloadReconciler, Resyncer]] = {}
    for kind in watched:
        workloads = WorkloadReconciler(reconciler, kind)
        # a hung analysis pod sends no event, nor does a fallback's retry time: poll those (polled_while)
        analyses = Resyncer(workloads, interval_seconds=settings.resync_seconds, gate=gate, live_while=polled_while)
        by_kind[kind.kind] = (workloads, analyses)
        _register_workload(registry, kind, workloads, analyses)
        resyncers.append(analyses)

    if by_kind:
        @kopf.on.event("", "v1", "pods", labels={names.LABEL_WORKLOAD_KIND: kopf.PRESENT,
                                                 names.LABEL_WORKLOAD_NAME: kopf.PRESENT}, registry=registry)
        def workload_pod_changed(*, labels: Mapping[str, str], namespace: str | None, **_: Any) -> None:
            """An opted-in workload's analysis pod changed: bring the workload forward at once."""
            owner = by_kind.get(labels[names.LABEL_WORKLOAD_KIND])
            if owner is not None and namespace is not None:
                name = labels[names.LABEL_WORKLOAD_NAME]
                owner[1].track(namespace, name, phase=owner[0].reconcile(namespace, name))

    return registry


def _register_workload(registry: kopf.OperatorRegistry, kind: JobKind, workloads: WorkloadReconciler,
                       analyses: Resyncer) -> None:
    """The trigger of one opted-in kind: its own events (and the poll of those being analysed)."""

    @kopf.on.event(kind.group or "batch", kind.version, kind.plural, registry=registry,
                   when=lambda body, **_: opted_in(body, kind))  # type: ignore[arg-type]
    def workload_event(*, type: str, name: str, namespace: str | None, **_: Any) -> None:
        if namespace is None:
            return
        deleted = type == "DELETED"
        analyses.track(namespace, name, phase=None if deleted else workloads.reconcile(namespace, name),
                       deleted=deleted)
