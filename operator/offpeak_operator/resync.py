"""Periodic re-reconcile of every live TrainingJob, for decisions that only time can trigger (backoff over,
analysis deadline passed) and for missed events; and of every opted-in workload while it is analysed or its
fallback prediction awaits the predictor.

Not a kopf timer on purpose: kopf puts a finalizer on every object that has a timer or daemon, and a finalizer
would block `kubectl delete` while the operator is down. This loop runs on kopf's event loop instead, fed by the
TrainingJob watch.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Protocol

from offpeak_operator.jobstate import TERMINAL

log = logging.getLogger(__name__)


class Reconciles(Protocol):
    def reconcile(self, namespace: str, name: str, *, wait: bool = True) -> str | None: ...


def not_terminal(phase: str | None) -> bool:
    return phase not in TERMINAL


class Resyncer:
    def __init__(self, reconciler: Reconciles, *, interval_seconds: float,
                 gate: Callable[[str], bool] | None = None,
                 live_while: Callable[[str | None], bool] = not_terminal) -> None:
        self.reconciler = reconciler
        self.interval = interval_seconds
        self.gate = gate  # namespace -> is this operator the active peer there (peering.PeeringGate); None: always
        self.live_while = live_while  # which phases (or workload states) are polled
        self._live: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def track(self, namespace: str, name: str, *, phase: str | None, deleted: bool = False) -> None:
        """Remember an object seen on the watch; forget it once it leaves the polled phases, or is deleted."""
        key = (namespace, name)
        with self._lock:
            if deleted or not self.live_while(phase):
                self._live.discard(key)
            else:
                self._live.add(key)

    def live(self) -> list[tuple[str, str]]:
        with self._lock:
            return sorted(self._live)

    async def run(self) -> None:
        """Until cancelled: every interval, reconcile each live job in a worker thread."""
        while True:
            await asyncio.sleep(self.interval)
            active: dict[str, bool] = {}
            for namespace, name in self.live():
                if self.gate is not None:
                    if namespace not in active:
                        active[namespace] = await asyncio.to_thread(self.gate, namespace)
                    if not active[namespace]:
                        continue  # a higher-priority peer works these jobs; kopf has paused us too
                try:
                    phase = await asyncio.to_thread(self.reconciler.reconcile, namespace, name, wait=False)
                except Exception:  # noqa: BLE001 - one job's API error must not stop the loop for the others
                    log.exception("resync of %s/%s failed; retrying next round", namespace, name)
                    continue
                if phase is not None:
                    self.track(namespace, name, phase=phase)
