"""The informer's index: nodes by name, GPU pods by uid, each node's GPU usage by workload, each gang's pods.

What the watch events say, kept for the store's lookups; no forecast, no view. Not thread-safe: the store holds its
lock around every call (`offpeak_extender.store`).
"""

from __future__ import annotations

from dataclasses import dataclass

from offpeak_core.decisions import prediction_for
from offpeak_core.gangs import GangKey, width_scale
from offpeak_core.model import OfflinePod
from offpeak_core.yielding import since_checkpoint
from offpeak_extender.objects import ACTIVE_PHASES, NodeInfo, PodInfo


@dataclass
class Usage:
    """GPUs a node's pods request, by workload; `version` is bumped whenever its view must be built again."""

    online: int = 0
    offline: int = 0
    other: int = 0
    version: int = 0

    @property
    def used(self) -> int:
        return self.online + self.offline + self.other


_NONE = Usage()


class ClusterIndex:
    """Nodes, GPU pods, usage and gangs as the informer last saw them."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}
        self.usage: dict[str, Usage] = {}
        self.gangs: dict[GangKey, dict[str, str | None]] = {}  # gang -> its live pods (uid -> node or None)

    def usage_of(self, node: str) -> Usage:
        return self.usage.get(node, _NONE)

    def bump(self, node: str) -> None:
        """Mark `node`'s view as out of date (a view built from older inputs is not kept)."""
        self.usage.setdefault(node, Usage()).version += 1

    def set_pods(self, pods: dict[str, PodInfo]) -> None:
        """Every pod from a full list (a re-list); usage is recounted by `recount`."""
        self.pods = pods
        self.gangs = {}
        for pod in pods.values():
            self.index_gang(pod, +1)

    def account(self, pod: PodInfo | None, sign: int) -> str | None:
        """Count (+1) or uncount (-1) a pod's GPUs on its node; the node whose usage (so whose view) changed."""
        if pod is None or not pod.holds_gpus or pod.node is None:
            return None
        u = self.usage.setdefault(pod.node, Usage())
        if pod.workload == "online":
            u.online += sign * pod.gpus
        elif pod.workload == "offline":
            u.offline += sign * pod.gpus
        else:
            u.other += sign * pod.gpus
        u.version += 1
        return pod.node

    def recount(self, changed_nodes: set[str]) -> set[str]:
        """Recount GPU usage from all pods; bump view versions only where usage or the node itself changed (those
        nodes are returned)."""
        old = self.usage
        self.usage = {}
        for pod in self.pods.values():
            self.account(pod, +1)
        moved: set[str] = set()
        for n in set(self.nodes) | set(old):
            new = self.usage.setdefault(n, Usage())
            prev = old.get(n)
            same = prev is not None and (prev.online, prev.offline, prev.other) == (new.online, new.offline, new.other)
            if same and prev is not None and n not in changed_nodes:
                new.version = prev.version
            else:
                new.version = (prev.version if prev else 0) + 1
                moved.add(n)
        return moved

    def index_gang(self, pod: PodInfo | None, sign: int) -> None:
        """Add (+1) or remove (-1) a gang worker in the gang index; pods being deleted or finished are gone."""
        if pod is None or pod.gang is None:
            return
        members = self.gangs.get(pod.gang)
        if sign < 0:
            if members is not None:
                members.pop(pod.uid, None)
                if not members:
                    del self.gangs[pod.gang]
            return
        if pod.deleting or pod.phase not in ACTIVE_PHASES:
            return
        self.gangs.setdefault(pod.gang, {})[pod.uid] = pod.node

    def pods_on(self, node: str) -> list[PodInfo]:
        return [p for p in self.pods.values() if p.node == node and p.holds_gpus]

    def pending(self, workload: str) -> list[PodInfo]:
        return [p for p in self.pods.values() if p.workload == workload and p.node is None
                and p.phase == "Pending" and p.gpus > 0 and not p.deleting]

    def free_gpus(self, name: str) -> int:
        info = self.nodes.get(name)
        return 0 if info is None else max(0, info.gpus_total - self.usage_of(name).used)

    def gang_starts(self, key: GangKey) -> list[tuple[float, str]]:
        return [(pod.started_at, node) for uid, node in self.gangs.get(key, {}).items()
                if node is not None and (pod := self.pods.get(uid)) is not None and pod.started_at is not None]

    def gang_start(self, key: GangKey) -> float | None:
        return min((at for at, _ in self.gang_starts(key)), default=None)

    def gang_gpus(self, key: GangKey) -> int:
        """GPUs the gang's bound workers hold, together: a worker still waiting for a place (an elastic gang's, or
        one not yet scheduled) has done no work an eviction could throw away."""
        return sum(pod.gpus for uid, node in self.gangs.get(key, {}).items()
                   if node is not None and (pod := self.pods.get(uid)) is not None)

    def offline_pods(self, node: str, *, now: float, startup_seconds: float) -> list[OfflinePod]:
        """The offline pods running on `node` as eviction sees them (`ClusterStore.offline_pods_on`)."""
        pods = [p for p in self.pods_on(node) if p.workload == "offline" and not p.deleting]
        gang_gpus = {p.gang: self.gang_gpus(p.gang) for p in pods if p.gang is not None}
        widths: dict[GangKey | None, int] = {  # an elastic gang runs on its bound workers now
            p.gang: sum(n is not None for n in self.gangs.get(p.gang, {}).values())
            for p in pods if p.gang is not None and p.elastic_width is not None}
        starts = {key: self.gang_start(key) for key in widths if key is not None}
        gpu_type = info.gpu_type if (info := self.nodes.get(node)) is not None else ""
        return [
            OfflinePod(name=p.name, namespace=p.namespace, gpus=p.gpus, checkpointing=p.checkpointing,
                       elapsed_seconds=max(0.0, now - p.started_at) if p.started_at else 0.0,
                       trainingjob=p.trainingjob, uid=p.uid,
                       gang_gpus=gang_gpus[p.gang] if p.gang is not None else 0,
                       seconds_since_checkpoint=_since_checkpoint(p, now=now, startup_seconds=startup_seconds),
                       checkpoint_interval_seconds=p.checkpoint_interval,
                       save_on_stop_seconds=p.save_on_stop,
                       finish_by=finish_by(p, gpu_type, widths.get(p.gang),
                                           starts.get(p.gang) if p.gang is not None else None),
                       last_checkpoint_at=p.live.last_checkpoint_at() if p.live is not None else None)
            for p in pods
        ]


def _since_checkpoint(pod: PodInfo, *, now: float, startup_seconds: float) -> float | None:
    """Work a stop now throws away: since the checkpoint its live report names, else since the last one its
    interval puts after its start (None: it does not checkpoint, or says nothing of when)."""
    if not pod.checkpointing or pod.started_at is None:
        return None
    if pod.live is not None and (since := pod.live.since_checkpoint(now)) is not None:
        return since
    if pod.checkpoint_interval is None:
        return None
    return since_checkpoint(now=now, started_at=pod.started_at, interval=pod.checkpoint_interval,
                            startup_seconds=startup_seconds)


def finish_by(pod: PodInfo, gpu_type: str, width: int | None = None, gang_start: float | None = None) -> float | None:
    """When the pod is expected to be done: by its measured pace once its attempt reported a steady one (that pace
    is the width it runs at now), else its start plus its predicted p90 on the node's GPU type; for a worker
    of an elastic gang running on `width` of its workers now, the gang's start (`gang_start`, its first worker's:
    a worker that joined later finishes with the others) plus that p90 scaled to the width (as if it had run so
    from its start: late, rather than early, when workers joined since)."""
    if pod.live is not None and (pod.elastic_width is None or width is None or pod.live.workers == width):
        return pod.live.finish_by()  # an elastic gang that changed width since is timed by its prediction again
    if pod.started_at is None or not pod.predicted:
        return None
    pred, exact = prediction_for(pod.predicted, gpu_type)
    if pred is None or not exact:
        return None
    if pod.elastic_width is not None and width is not None and 1 <= width <= pod.elastic_width:
        start = pod.started_at if gang_start is None else min(gang_start, pod.started_at)
        return start + pred.p90 * width_scale(width=width, full_width=pod.elastic_width)
    return pod.started_at + pred.p90
