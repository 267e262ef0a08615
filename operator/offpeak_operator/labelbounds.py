"""Bounded metric label values for labels that come from user data (pure; the clock is passed in).

A label such as `model_family` is whatever users' model graphs say: without a bound every new value is a new set
of series that lives as long as the process (3,000 families made 4 MB of /metrics). Here at most `limit` values
keep their own series; later ones share `other` until a value unseen for `stale_after` seconds gives its place back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

OTHER = "other"


@dataclass(frozen=True)
class Admission:
    """The label value to export for one observation, and the values that went stale (remove their series)."""

    value: str
    stale: tuple[str, ...] = ()


@dataclass
class BoundedLabelValues:
    """At most `limit` distinct values keep their own label; the rest are exported as `other`.

    First come, first kept (a busy value is never pushed out by a burst of one-off values, which would churn
    series); a value not seen for `stale_after` seconds is dropped, and its place goes to the next new value.
    """

    limit: int
    stale_after: float
    other: str = OTHER
    _last_seen: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.limit < 1 or self.stale_after <= 0:
            raise ValueError("limit must be >= 1 and stale_after > 0")

    @property
    def kept(self) -> frozenset[str]:
        """The values that have their own label now."""
        return frozenset(self._last_seen)

    def admit(self, value: str, *, now: float) -> Admission:
        """Record `value` seen at `now`: the label to export, and the values whose series must go."""
        stale = tuple(sorted(v for v, seen in self._last_seen.items() if now - seen > self.stale_after))
        for v in stale:
            del self._last_seen[v]
        if value == self.other:
            return Admission(self.other, stale)
        if value in self._last_seen or len(self._last_seen) < self.limit:
            self._last_seen[value] = now
            return Admission(value, stale)
        return Admission(self.other, stale)
