"""Status conditions (Kubernetes style): pure helpers that keep lastTransitionTime honest."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

VALID = "Valid"
GRAPH_READY = "GraphReady"
PREDICTED = "Predicted"
SCHEDULED = "Scheduled"
FINISHED = "Finished"  # True once the job has ended either way; its reason says how (Succeeded, MaxAttemptsReached..)
SUCCEEDED = "Succeeded"  # True when the job succeeded: `kubectl wait --for=condition=Succeeded`
FAILED = "Failed"  # True when the job failed for good: `kubectl wait --for=condition=Failed`
API_ACCEPTED = "ApiAccepted"  # False while the API server refuses what the operator asks (quota, conflict)
SUSPENDED = "Suspended"  # True while the next attempt is held: spec.suspend, or Kueue has not admitted its Workload


def rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(conditions: Sequence[Mapping[str, Any]], *, type: str, ok: bool | None, reason: str,
                  message: str, now: datetime) -> list[dict[str, Any]]:
    """A new list with `type` set; the transition time only moves when the status value changes."""
    status = "Unknown" if ok is None else ("True" if ok else "False")
    out: list[dict[str, Any]] = []
    found = False
    for cond in conditions:
        if cond.get("type") != type:
            out.append(dict(cond))
            continue
        found = True
        changed = cond.get("status") != status
        out.append({"type": type, "status": status, "reason": reason, "message": message,
                    "lastTransitionTime": rfc3339(now) if changed else cond.get("lastTransitionTime", rfc3339(now))})
    if not found:
        out.append({"type": type, "status": status, "reason": reason, "message": message,
                    "lastTransitionTime": rfc3339(now)})
    return out


def finished(conditions: Sequence[Mapping[str, Any]], *, succeeded: bool, reason: str, message: str,
             now: datetime) -> list[dict[str, Any]]:
    """Terminal conditions by the API conventions: `Finished` and `Succeeded` or `Failed` all True, the outcome in
    the reason, so `kubectl wait --for=condition=...` returns for either ending."""
    out = set_condition(conditions, type=FINISHED, ok=True, reason=reason, message=message, now=now)
    return set_condition(out, type=SUCCEEDED if succeeded else FAILED, ok=True, reason=reason, message=message,
                         now=now)


def get_condition(conditions: Sequence[Mapping[str, Any]] | None, type: str) -> Mapping[str, Any] | None:
    for cond in conditions or ():
        if cond.get("type") == type:
            return cond
    return None


def is_true(conditions: Sequence[Mapping[str, Any]] | None, type: str) -> bool | None:
    cond = get_condition(conditions, type)
    if cond is None or cond.get("status") == "Unknown":
        return None
    return cond.get("status") == "True"
