"""Announced online demand: the online side says ahead of time how many GPUs it will hold in a pool, and when.

Why: a pool's forecast (`offpeak_core.poolrise`) only knows the pool's past, so a window ends a fixed distance
ahead of now and moves on with it; an offline pod then never sees the end of its window coming and leaves only by
eviction. An online owner who knows a scale-up ahead (a scheduled scaler, a launch, a nightly batch) can say so
with an `OnlineDemand` object (crds/onlinedemands.offpeak.io.yaml): from `start` until `end` its workloads hold
`gpus` online GPUs in pool `pool`. The pool's forecast online demand is then at least the sum of the announcements
in force at each step: a floor, so an announcement never makes a window longer than the pool's history allows.
A window that ends at an announced time stays put as time passes, so a checkpointing pod can stop at its last
checkpoint before it (`offpeak_core.yielding`) instead of being evicted. The simulator measured what this is worth
on Helios (docs/simulator.md, "Pool windows", announced online demand: as a floor, less than hoped).

An owner who controls the pool's whole online side (a scheduled scaler, fixed replica counts) can also say the most
it will hold (`poolGpusAtMost`): a ceiling over the forecast in the steps it covers, so the pool's recent peak no
longer hides the room the owner knows it leaves. Unlike the floor it can cost something if wrong: online work
above it evicts offline pods (online pods wait at most the eviction grace period for their GPUs).

Pure: parsing, the floor and the ceiling; the extender's informer feeds the objects in (`offpeak_extender.kube`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeGuard

import numpy as np

GROUP, VERSION, PLURAL = "offpeak.io", "v1alpha1", "onlinedemands"


class AnnouncementError(ValueError):
    """An OnlineDemand object the extender cannot use; the message says which field and why."""


@dataclass(frozen=True)
class Announcement:
    """`gpus` online GPUs held in `pool` from `start` until `end` (Unix seconds); `name` is namespace/name."""

    name: str
    pool: str
    gpus: int
    start: float
    end: float
    pool_gpus_at_most: int | None = None  # `spec.poolGpusAtMost`: the whole pool's online GPUs stay at or below it


def _instant(spec: Mapping[str, Any], key: str) -> float:
    text = spec.get(key)
    if not isinstance(text, str) or not text:
        raise AnnouncementError(f"spec.{key} is required: an RFC 3339 time such as 2026-11-28T04:00:00Z")
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise AnnouncementError(f"spec.{key} {text!r} is not an RFC 3339 time such as 2026-11-28T04:00:00Z") from None
    if when.tzinfo is None:
        raise AnnouncementError(f"spec.{key} {text!r} has no time zone (add Z for UTC)")
    return when.timestamp()


def _whole_number(value: object, *, least: int) -> TypeGuard[int]:
    """An int (not a bool, which is one in Python) of at least `least`: what the CRD's integer fields hold."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def object_name(obj: Mapping[str, Any]) -> str:
    """namespace/name of an object as the API serves it (what an announcement is known by)."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def announcement_from_object(obj: Mapping[str, Any]) -> Announcement:
    """An OnlineDemand object (as the API serves it) to an `Announcement`; AnnouncementError when unusable (the
    CRD's schema refuses most such objects before they are stored; this is for objects that slipped past it)."""
    name = object_name(obj)
    spec = obj.get("spec") or {}
    pool = spec.get("pool")
    if not isinstance(pool, str) or not pool:
        raise AnnouncementError(f"{name}: spec.pool is required: the value of the pool label of the nodes it means")
    gpus = spec.get("gpus")
    if not _whole_number(gpus, least=1):
        raise AnnouncementError(f"{name}: spec.gpus must be a whole number >= 1, got {gpus!r}")
    try:
        start, end = _instant(spec, "start"), _instant(spec, "end")
    except AnnouncementError as e:
        raise AnnouncementError(f"{name}: {e}") from None
    if end <= start:
        raise AnnouncementError(f"{name}: spec.end must be after spec.start")
    most = spec.get("poolGpusAtMost")
    if most is not None and not _whole_number(most, least=gpus):
        raise AnnouncementError(f"{name}: spec.poolGpusAtMost must be a whole number >= spec.gpus ({gpus}), "
                                f"got {most!r}")
    return Announcement(name, pool, gpus, start, end, most)


def announced_demand(announcements: Iterable[Announcement], times: np.ndarray, step_seconds: float) -> np.ndarray:
    """Announced online GPUs per forecast step: the sum of the announcements in force at any moment of the step
    `[times[i], times[i] + step_seconds)` (a step an announcement touches counts whole, as a forecast step's demand
    is its maximum)."""
    t = np.asarray(times, dtype=float)
    out = np.zeros(t.size)
    for a in announcements:
        out += np.where((t < a.end) & (t + step_seconds > a.start), a.gpus, 0)
    return out


def announced_ceiling(announcements: Iterable[Announcement], times: np.ndarray, step_seconds: float) -> np.ndarray:
    """The most online GPUs the pool can hold per forecast step, by the announcements that state it
    (`pool_gpus_at_most`): the least of those in force over the whole step `[times[i], times[i] + step_seconds)`,
    infinity where none is (a ceiling over part of a step says nothing of the rest, whose demand may be higher)."""
    t = np.asarray(times, dtype=float)
    out = np.full(t.size, np.inf)
    for a in announcements:
        if a.pool_gpus_at_most is not None:
            covered = (t >= a.start) & (t + step_seconds <= a.end)
            out = np.where(covered, np.minimum(out, a.pool_gpus_at_most), out)
    return out


def by_pool(announcements: Iterable[Announcement], *, now: float) -> dict[str, tuple[Announcement, ...]]:
    """Announcements not yet over at `now`, by pool, each pool's in a stable order (by start, then name), so
    equal sets compare equal and a view built on them can be found again."""
    out: dict[str, list[Announcement]] = {}
    for a in announcements:
        if a.end > now:
            out.setdefault(a.pool, []).append(a)
    return {pool: tuple(sorted(items, key=lambda a: (a.start, a.name))) for pool, items in out.items()}
