"""Is this operator the active one among its kopf peers? For the resync loop, which kopf does not pause.

kopf pauses its own watches and handlers while a live peer has a higher (or the same) priority, but the resync
loop (resync.py) is ours: without this gate a replica that lost the lead would keep reconciling the jobs it had
seen. The rule mirrors kopf's (`kopf._core.engines.peering.process_peering_event`), read from the same peering
object kopf writes (`status: {identity: {priority, lastseen, lifetime}}`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from offpeak_operator.settings import PeeringSettings

log = logging.getLogger(__name__)


def is_active(*, status: Mapping[str, Any], identity: str, priority: int, now: datetime) -> bool:
    """True when no other live peer has a priority at least ours (equal priorities pause everyone, as in kopf)."""
    for peer, info in status.items():
        if peer == identity or not isinstance(info, Mapping):
            continue
        lastseen = info.get("lastseen")
        seen = datetime.fromisoformat(lastseen) if isinstance(lastseen, str) else now  # kopf: missing = just now
        if seen.tzinfo is None:
            seen = seen.replace(tzinfo=UTC)
        if seen + timedelta(seconds=int(info.get("lifetime", 60))) <= now:
            continue  # dead peer
        if int(info.get("priority", 0)) >= priority:
            return False
    return True


class PeeringReader(Protocol):
    def peering_status(self, namespace: str | None, name: str) -> Mapping[str, Any] | None: ...


class PeeringGate:
    """`gate(namespace) -> bool` for the Resyncer: reads the peering object (cluster-wide or per namespace)."""

    def __init__(self, kube: PeeringReader, settings: PeeringSettings,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.kube = kube
        self.settings = settings
        self.clock = clock

    def __call__(self, namespace: str) -> bool:
        where = None if self.settings.clusterwide else namespace
        try:
            status = self.kube.peering_status(where, self.settings.name)
        except Exception as e:  # noqa: BLE001 - unknown means "not sure we lead": skip this round, kopf decides
            log.warning("cannot read peering object %s: %s; resync paused this round", self.settings.name, e)
            return False
        if status is None:  # no peering object: kopf's mandatory peering keeps everything paused too
            return False
        return is_active(status=status, identity=self.settings.identity, priority=self.settings.priority,
                         now=self.clock())
