"""The reconciler's Kueue side, for TrainingJobs queued in Kueue (offpeak_operator.admission decides, this does):
read a job's Workload and the ResourceFlavors of its admission, create the Workload, give an evicted one's quota
back, mark a finished one Finished."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from kubernetes.client.exceptions import ApiException
from offpeak_core.kueue import assigned_flavors

from offpeak_operator import admission
from offpeak_operator.kube import KubeIO

log = logging.getLogger(__name__)
PATCH_TRIES = 3  # a Workload's status patch is guarded by its resourceVersion; Kueue may write in between


class KueueLink:
    def __init__(self, kube: KubeIO, clock: Callable[[], datetime]) -> None:
        self.kube = kube
        self.clock = clock

    def observe(self, job: Mapping[str, Any]) -> admission.WorkloadView:
        """The job's Workload as the state machine sees it (with the flavors of its admission, once admitted)."""
        name = admission.workload_name(job)
        workload = self.kube.get_kueue_workload(job["metadata"]["namespace"], name)
        flavors: dict[str, dict[str, Any]] = {}
        for flavor in assigned_flavors(workload or {}):
            found = self.kube.get_resource_flavor(flavor)
            if found is not None:
                flavors[flavor] = found
        return admission.workload_view(workload, name=name, resource_flavors=flavors)

    def create(self, job: Mapping[str, Any], *, queue: str, workers: int, pod: Mapping[str, Any]) -> None:
        body = admission.workload_body(job, queue=queue, workers=workers, pod=pod)
        if self.kube.create_kueue_workload(body):
            log.info("%s/%s: created Kueue workload %s in LocalQueue %s", job["metadata"]["namespace"],
                     job["metadata"]["name"], body["metadata"]["name"], queue)

    def release(self, job: Mapping[str, Any]) -> None:
        """Give an evicted Workload's quota back (its pods are gone), so Kueue queues it again."""
        self._patch(job, lambda wl: admission.release_patch(wl, now=self.clock()))

    def finish(self, job: Mapping[str, Any], *, succeeded: bool, message: str) -> None:
        """Mark the ended job's Workload Finished: Kueue releases its quota."""
        self._patch(job, lambda wl: admission.finished_patch(wl, succeeded=succeeded, message=message,
                                                             now=self.clock()))

    def _patch(self, job: Mapping[str, Any], make: Callable[[Mapping[str, Any]], dict[str, Any]]) -> None:
        """Patch the Workload's status from its current state, again when Kueue changed it in between (409)."""
        namespace, name = job["metadata"]["namespace"], admission.workload_name(job)
        for attempt in range(PATCH_TRIES):
            workload = self.kube.get_kueue_workload(namespace, name)
            if workload is None:
                return  # gone with its quota: nothing to give back
            try:
                self.kube.patch_kueue_workload_status(namespace, name, make(workload))
                return
            except ApiException as e:
                if e.status != 409 or attempt == PATCH_TRIES - 1:
                    raise
