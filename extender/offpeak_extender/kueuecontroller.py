"""Kueue admission-check controller: answers offpeak's checks on Kueue Workloads from the extender's own forecast.

It runs in the extender process (`--kueue-admission-check`), so a workload is admitted by the same judgement that
will place its pods. Every `interval_seconds` it marks offpeak's AdmissionChecks Active, lists the Workloads, and
for each Pending check of offpeak's on a workload with reserved quota asks the extender's filter about the
workload's pod template (`offpeak_extender.kueuecheck`). Nothing is decided before the node and pod caches are
synced. Without Kueue's CRDs it says so once and keeps looking, so installing Kueue later needs no restart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from offpeak_core.jobkinds import OPT_IN_LABEL, template_opted_in
from offpeak_core.kueue import flavor_node_labels
from offpeak_extender import kueuecheck
from offpeak_extender.service import ExtenderService
from offpeak_extender.wire import WireError, parse_pod

log = logging.getLogger(__name__)


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KueueAdmissionCheck:
    """Polls Kueue's objects and answers offpeak's admission checks (one daemon thread)."""

    def __init__(self, *, api_client: Any, service: ExtenderService, controller_name: str = kueuecheck.CONTROLLER_NAME,
                 interval_seconds: float = 5.0, rewrite_pending_seconds: float = 30.0,
                 clock: Callable[[], float] = time.time) -> None:
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.api_client = api_client
        self.service = service
        self.controller_name = controller_name
        self.interval_seconds = interval_seconds
        self.rewrite_pending_seconds = rewrite_pending_seconds
        self._written: dict[tuple[str, str, str], float] = {}  # when each Pending message was last written
        self.clock = clock
        self.stop_event = threading.Event()
        self._missing_said = False

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.run, name="kueue-admission-check", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self.stop_event.set()

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self.sweep()
            except Exception as e:  # noqa: BLE001 - the loop must outlive API hiccups; the next sweep redoes all
                log.warning("kueue admission check: %s; trying again in %.0fs", e, self.interval_seconds)
            self.stop_event.wait(self.interval_seconds)

    def sweep(self) -> dict[str, int]:
        """One pass; returns how many checks it set Ready, left Pending, and left alone (unchanged)."""
        counts = {kueuecheck.READY: 0, kueuecheck.PENDING: 0, "unchanged": 0}
        if not self.service.store.synced:
            return counts
        checks = self._list_cluster("admissionchecks")
        if checks is None:
            return counts
        ours = kueuecheck.our_checks(checks, self.controller_name)
        now = _rfc3339(self.clock())
        for check in checks:
            if check["metadata"]["name"] in ours and (patch := kueuecheck.active_patch(check, now=now)) is not None:
                self.custom.patch_cluster_custom_object_status(kueuecheck.GROUP, kueuecheck.VERSION,
                                                               "admissionchecks", check["metadata"]["name"], patch)
                log.info("AdmissionCheck %s marked Active", check["metadata"]["name"])
        if not ours:
            return counts
        written, seen = self._written, {}
        flavors: dict[str, dict[str, Any]] | None = None  # read once a sweep, when a pending check has flavors
        for workload in self._list_cluster("workloads") or ():
            for pending in kueuecheck.pending_checks(workload, ours):
                key = (pending.namespace, pending.workload, pending.check)
                if pending.flavors and flavors is None:
                    flavors = {f["metadata"]["name"]: f for f in self._list_cluster("resourceflavors") or ()}
                verdict = self._verdict(pending, flavors or {})
                last = written.get(key)
                if verdict.state == kueuecheck.PENDING and (verdict.message == pending.message or (
                        last is not None and time.monotonic() - last < self.rewrite_pending_seconds)):
                    counts["unchanged"] += 1  # a new reason ("window ends within 3s" -> "2s") waits a while
                    if last is not None:
                        seen[key] = last
                    continue
                self._apply(pending, verdict, now=now)
                counts[verdict.state] += 1
                if verdict.state == kueuecheck.PENDING:
                    seen[key] = time.monotonic()
        self._written = seen  # only checks still pending: the table never outgrows the cluster's workloads
        return counts

    def _list_cluster(self, plural: str) -> list[dict[str, Any]] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            listing: Any = self.custom.list_cluster_custom_object(kueuecheck.GROUP, kueuecheck.VERSION, plural)
        except ApiException as e:
            if e.status != 404:
                raise
            if not self._missing_said:
                log.warning("Kueue's %s.%s resource is not installed; offpeak's admission check waits for it",
                            plural, kueuecheck.GROUP)
                self._missing_said = True
            return None
        self._missing_said = False
        items: list[dict[str, Any]] = listing.get("items") or []
        return items

    def _template(self, pending: kueuecheck.PendingCheck) -> tuple[dict[str, Any], str | None]:
        """(pod set, problem): the owning Job's or PyTorchJob's template when there is one (Kueue does not copy
        offpeak's later annotations into a Workload it made), else the workload's first pod set."""
        from kubernetes.client.exceptions import ApiException

        if pending.owner_job is not None:
            try:
                job = self.batch.read_namespaced_job(pending.owner_job, pending.namespace)
            except ApiException as e:
                if e.status != 404:
                    raise
                return {}, f"its Job {pending.owner_job} is gone"
            job = self.api_client.sanitize_for_serialization(job)
            return kueuecheck.job_pod_set(job, pending.pod_sets), kueuecheck.job_problem(job)
        if pending.owner_pytorch_job is not None:
            try:
                owner: Any = self.custom.get_namespaced_custom_object("kubeflow.org", "v1", pending.namespace,
                                                                 "pytorchjobs", pending.owner_pytorch_job)
            except ApiException as e:
                if e.status != 404:
                    raise
                return {}, f"its PyTorchJob {pending.owner_pytorch_job} is gone"
            return kueuecheck.pytorch_job_pod_set(owner), kueuecheck.job_problem(owner)
        if not pending.pod_sets:
            return {}, "the workload has no pod sets"
        return dict(pending.pod_sets[0]), None

    def _verdict(self, pending: kueuecheck.PendingCheck,
                 resource_flavors: Mapping[str, Mapping[str, Any]]) -> kueuecheck.Verdict:
        pod_set, problem = self._template(pending)
        if problem is not None:
            return kueuecheck.Verdict(kueuecheck.PENDING, problem)
        template = pod_set.get("template") or {}
        if not template_opted_in(template):
            return kueuecheck.Verdict(kueuecheck.READY, f"not offline work (no {OPT_IN_LABEL}: \"true\" "
                                      "label on its pod template): offpeak does not gate it")
        try:
            pod, managed, error = parse_pod(kueuecheck.pod_of(template, pending.namespace))
        except WireError as e:
            return kueuecheck.Verdict(kueuecheck.PENDING, f"its pod template cannot be read: {e}")
        if error:
            log.warning("workload %s/%s: %s; judged runtime-blind", pending.namespace, pending.workload, error)
        result, views = self.service.judge(pod)
        labels = flavor_node_labels(pending.flavors, resource_flavors)
        return kueuecheck.decide(pod=pod, managed=managed, count=int(pod_set.get("count", 1) or 1), result=result,
                                 views=views, allowed=kueuecheck.allowed_gpu_types(template),
                                 flavor_nodes=self.service.store.nodes_labelled(labels) if labels else None,
                                 flavors=pending.flavors)

    def _apply(self, pending: kueuecheck.PendingCheck, verdict: kueuecheck.Verdict, *, now: str) -> None:
        body = kueuecheck.check_state_apply(pending, verdict, now=now)
        self.custom.patch_namespaced_custom_object_status(
            kueuecheck.GROUP, kueuecheck.VERSION, pending.namespace, "workloads", pending.workload, body,
            field_manager=kueuecheck.FIELD_MANAGER, force=True, _content_type="application/apply-patch+yaml")
        log.info("workload %s/%s: check %s %s: %s", pending.namespace, pending.workload, pending.check,
                 verdict.state, verdict.message)
