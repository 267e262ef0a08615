"""The resync loop's peering gate: kopf's rule (highest live priority leads; ties pause everyone)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from offpeak_operator.peering import PeeringGate, is_active
from offpeak_operator.settings import PeeringSettings

NOW = datetime(2026, 11, 21, 6, 0, tzinfo=UTC)


def peer(priority: int, *, ago: float = 5, lifetime: int = 60) -> dict[str, Any]:
    return {"priority": priority, "lastseen": (NOW - timedelta(seconds=ago)).isoformat(), "lifetime": lifetime}


def test_highest_live_priority_leads() -> None:
    status = {"me": peer(50), "low": peer(10)}
    assert is_active(status=status, identity="me", priority=50, now=NOW)
    assert not is_active(status={**status, "high": peer(90)}, identity="me", priority=50, now=NOW)


def test_a_tie_pauses_everyone_like_kopf() -> None:
    assert not is_active(status={"me": peer(50), "twin": peer(50)}, identity="me", priority=50, now=NOW)


def test_dead_peers_do_not_count() -> None:
    status = {"me": peer(50), "gone": peer(90, ago=120, lifetime=60)}
    assert is_active(status=status, identity="me", priority=50, now=NOW)
    # kopf treats a peer without lastseen as seen now
    assert not is_active(status={"new": {"priority": 90}}, identity="me", priority=50, now=NOW)


class FakeKube:
    def __init__(self, objects: dict[str | None, dict[str, Any] | None] | Exception) -> None:
        self.objects = objects
        self.asked: list[tuple[str | None, str]] = []

    def peering_status(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        self.asked.append((namespace, name))
        if isinstance(self.objects, Exception):
            raise self.objects
        return self.objects.get(namespace)


def settings(*, clusterwide: bool) -> PeeringSettings:
    return PeeringSettings(identity="me", priority=50, clusterwide=clusterwide)


def test_gate_reads_the_cluster_object_or_the_namespace_one() -> None:
    kube = FakeKube({None: {"me": peer(50)}, "ml": {"me": peer(50), "other": peer(70)}})
    assert PeeringGate(kube, settings(clusterwide=True), clock=lambda: NOW)("ml")
    assert not PeeringGate(kube, settings(clusterwide=False), clock=lambda: NOW)("ml")
    assert kube.asked == [(None, "offpeak-operator"), ("ml", "offpeak-operator")]


def test_gate_is_closed_when_unsure() -> None:
    assert not PeeringGate(FakeKube({}), settings(clusterwide=True), clock=lambda: NOW)("ml")  # no object
    assert not PeeringGate(FakeKube(RuntimeError("403")), settings(clusterwide=True), clock=lambda: NOW)("ml")
