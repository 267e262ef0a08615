"""Declared online schedules from the node annotation `offpeak.io/busy-hours`.

Grammar (UTC, comma- or semicolon-separated rules): `[DAYS] HH:MM-HH:MM`, where DAYS is `Mon-Fri`, `Sat,Sun`,
`daily` or absent (every day). An end before the start wraps past midnight (`22:00-06:00`). Examples:
`Mon-Fri 08:00-20:00`, `Mon-Fri 08:00-20:00; Sat 10:00-14:00`, `daily 00:00-24:00`.

Time of day is measured on a configurable day length (`day_seconds`) so the compressed days of the e2e tests
(e.g. 600 s) keep the same schedule shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
# 1970-01-01 (epoch day 0) was a Thursday: day-of-week index (Mon=0) is (day + 3) % 7.
EPOCH_WEEKDAY = 3

_RULE = re.compile(r"^(?:(?P<days>[A-Za-z,\- ]+?)\s+)?(?P<start>\d{1,2}:\d{2})\s*-\s*(?P<end>\d{1,2}:\d{2})$")


@dataclass(frozen=True)
class BusyRule:
    """Busy on `days` (Mon=0) from `start` to `end`, both in minutes after midnight (end may be <= start: wraps)."""

    days: frozenset[int]
    start: int
    end: int


@dataclass(frozen=True)
class BusySchedule:
    rules: tuple[BusyRule, ...]
    text: str = ""

    def mask(self, times: np.ndarray, *, day_seconds: float = 86400.0) -> np.ndarray:
        """Boolean array: True where online work is declared busy at each time."""
        t = np.asarray(times, dtype=float)
        day_index = np.floor(t / day_seconds)
        weekday = ((day_index + EPOCH_WEEKDAY) % 7).astype(int)
        minute = (t - day_index * day_seconds) / day_seconds * 1440.0
        busy = np.zeros(t.shape, dtype=bool)
        for rule in self.rules:
            days = np.isin(weekday, sorted(rule.days))
            if rule.end > rule.start:
                busy |= days & (minute >= rule.start) & (minute < rule.end)
            else:  # wraps past midnight: the part after midnight belongs to the previous day's rule
                prev_days = np.isin((weekday - 1) % 7, sorted(rule.days))
                busy |= days & (minute >= rule.start)
                busy |= prev_days & (minute < rule.end)
        return busy

    def step_mask(self, times: np.ndarray, *, step_seconds: float, day_seconds: float = 86400.0) -> np.ndarray:
        """Boolean array: True where any part of the step `[t, t + step_seconds)` is declared busy.

        Why: a forecast step's demand is its most, so busy hours that begin inside a step make the whole step busy
        and end a window at the step's start, never after the hours began (`mask` of the step's start alone would
        read them a step late). Rules are whole minutes of the day, so looking at each step's start and at every
        minute boundary inside it finds every busy stretch it touches."""
        t = np.asarray(times, dtype=float)
        busy = self.mask(t, day_seconds=day_seconds)
        minute = day_seconds / 1440.0
        if t.size == 0 or step_seconds <= 0:
            return busy
        n = int(np.ceil(step_seconds / minute)) + 1
        # just inside each minute boundary after t, so rounding cannot put it a hair before the boundary
        inside = (np.floor(t / minute) + 1)[:, None] * minute + np.arange(n)[None, :] * minute + minute * 1e-3
        in_step = inside < (t + step_seconds)[:, None]
        hits = self.mask(inside.ravel(), day_seconds=day_seconds).reshape(inside.shape)
        return busy | (hits & in_step).any(axis=1)

    def busy_at(self, t: float, *, day_seconds: float = 86400.0) -> bool:
        return bool(self.mask(np.array([t]), day_seconds=day_seconds)[0])


def _minutes(text: str, rule: str) -> int:
    hh, mm = text.split(":")
    h, m = int(hh), int(mm)
    if not (0 <= h <= 24 and 0 <= m < 60) or (h == 24 and m):
        raise ValueError(f"bad time {text!r} in busy-hours rule {rule!r} (use HH:MM, 00:00..24:00)")
    return h * 60 + m


def _days(text: str | None, rule: str) -> frozenset[int]:
    if not text or text.strip().lower() in ("daily", "every day", "*"):
        return frozenset(range(7))
    days: set[int] = set()
    for part in text.replace(" ", "").lower().split(","):
        names = part.split("-")
        try:
            idx = [DAY_NAMES.index(n[:3]) for n in names]
        except ValueError as e:
            raise ValueError(f"bad day {part!r} in busy-hours rule {rule!r} (use Mon..Sun, e.g. Mon-Fri)") from e
        if len(idx) == 1:
            days.add(idx[0])
        elif len(idx) == 2:
            a, b = idx
            days.update(range(a, b + 1) if a <= b else [*range(a, 7), *range(0, b + 1)])
        else:
            raise ValueError(f"bad day range {part!r} in busy-hours rule {rule!r}")
    return frozenset(days)


def parse_busy_hours(text: str) -> BusySchedule:
    """Parse an `offpeak.io/busy-hours` value; raises ValueError with the offending rule on bad input."""
    rules: list[BusyRule] = []
    for raw in re.split(r"[;\n]|(?<=\d),", text):
        rule = raw.strip()
        if not rule:
            continue
        m = _RULE.match(rule)
        if not m:
            raise ValueError(f"bad busy-hours rule {rule!r}; expected e.g. 'Mon-Fri 08:00-20:00'")
        start, end = _minutes(m["start"], rule), _minutes(m["end"], rule)
        if start == end:
            raise ValueError(f"empty busy-hours rule {rule!r}: start equals end")
        rules.append(BusyRule(days=_days(m["days"], rule), start=start, end=end))
    if not rules:
        raise ValueError("empty busy-hours annotation; expected e.g. 'Mon-Fri 08:00-20:00'")
    return BusySchedule(rules=tuple(rules), text=text)
