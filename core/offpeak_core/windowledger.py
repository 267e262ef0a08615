"""How long the forecast's idle windows really last, learnt as the extender runs (for expected-goodput admission).

The simulator learns its `WindowSurvival` from the trace's future; a live extender has no future to read. It keeps a
ledger instead: every `note_seconds`, for every node and every free-GPU level free right now, it writes down the
forecast's seconds left; whenever it sees the node's online demand again, it closes the entries whose GPUs online
work has taken back. Entries still open are right-censored at their age, and entries older than the horizon count
as having outlasted it — the Kaplan-Meier table `goodput.WindowSurvival` reads. Pure and clock-free: the caller
passes `now`, the forecast's seconds left per level (`NodeArrays.window_left`) and the online GPUs it observed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from offpeak_core.goodput import DEFAULT_CLASS_EDGES, WindowSurvival, add_observations


@dataclass(frozen=True)
class LedgerSettings:
    """`note_seconds`: how often a (node, level) gets a new entry (bounds the ledger at nodes x levels x horizon /
    note_seconds); `horizon_seconds`: entries followed this long count as outlasting it."""

    note_seconds: float = 900.0
    bin_seconds: float = 300.0
    horizon_seconds: float = 6 * 3600.0
    min_at_risk: int = 10

    def __post_init__(self) -> None:
        if self.note_seconds <= 0 or self.bin_seconds <= 0 or self.horizon_seconds < self.bin_seconds:
            raise ValueError("note_seconds and bin_seconds must be > 0, horizon_seconds >= bin_seconds")


class WindowLedger:
    """Open entries (node, level, start, forecast left) and the table of closed ones."""

    def __init__(self, settings: LedgerSettings = LedgerSettings(), edges: tuple[float, ...] = DEFAULT_CLASS_EDGES
                 ) -> None:
        self.s = settings
        self.edges = edges
        self._bins = int(np.ceil(settings.horizon_seconds / settings.bin_seconds))
        self._closed = np.zeros((len(edges), self._bins + 1), dtype=np.int64)
        self._nodes: dict[str, int] = {}
        self._node = np.zeros(0, dtype=np.int64)
        self._level = np.zeros(0, dtype=np.int64)
        self._start = np.zeros(0)
        self._left = np.zeros(0)
        self._noted_at: dict[str, float] = {}

    def __len__(self) -> int:
        """Open entries."""
        return len(self._start)

    def open_on(self, name: str) -> int:
        """Open entries of one node."""
        i = self._nodes.get(name)
        return 0 if i is None else int(np.count_nonzero(self._node == i))

    def observed(self) -> int:
        """Entries closed or followed to the horizon so far."""
        return int(self._closed.sum())

    def _ids(self, names: Sequence[str]) -> np.ndarray:
        return np.fromiter((self._nodes.setdefault(n, len(self._nodes)) for n in names), dtype=np.int64,
                           count=len(names))

    def observe(self, *, now: float, names: Sequence[str], capacity: np.ndarray, online: np.ndarray) -> None:
        """Close the open entries of `names` whose level no longer fits beside the online GPUs seen `now`, and
        move entries older than the horizon into the table as outlasting it. Entries of nodes not in `names`
        (gone from the cluster) are dropped: how long their windows lasted is unknown."""
        if len(self._start):
            ids = self._ids(names)
            free = np.full(len(self._nodes), -1, dtype=np.int64)  # per node: GPUs online work leaves (-1: gone)
            free[ids] = np.asarray(capacity, dtype=np.int64) - np.asarray(online, dtype=np.int64)
            gone = free[self._node] < 0
            closed = ~gone & (self._level > free[self._node])
            aged = ~closed & ~gone & (now - self._start >= self.s.horizon_seconds)
            if closed.any():
                add_observations(self._closed, edges=self.edges, bin_seconds=self.s.bin_seconds,
                                 forecast_left=self._left[closed], lasted=now - self._start[closed],
                                 outlasted=np.zeros(int(closed.sum()), dtype=bool))
            if aged.any():
                add_observations(self._closed, edges=self.edges, bin_seconds=self.s.bin_seconds,
                                 forecast_left=self._left[aged], lasted=now - self._start[aged],
                                 outlasted=np.ones(int(aged.sum()), dtype=bool))
            keep = ~(closed | aged | gone)
            self._node, self._level = self._node[keep], self._level[keep]
            self._start, self._left = self._start[keep], self._left[keep]

    def note(self, *, now: float, names: Sequence[str], capacity: np.ndarray, online: np.ndarray,
             left_by_level: dict[int, np.ndarray]) -> int:
        """Open an entry for every node of `names` not noted in the last `note_seconds` and every level free now
        (`left_by_level[level]`: the forecast's seconds left with that many GPUs free, per node). Returns how many."""
        due = np.fromiter((now - self._noted_at.get(n, -np.inf) >= self.s.note_seconds for n in names), dtype=bool,
                          count=len(names))
        if not due.any():
            return 0
        ids = self._ids(names)
        free = np.asarray(capacity, dtype=np.int64) - np.asarray(online, dtype=np.int64)
        nodes, levels, lefts = [], [], []
        for level, left in sorted(left_by_level.items()):
            take = due & (free >= level) & (np.asarray(left) > 0)
            nodes.append(ids[take])
            levels.append(np.full(int(take.sum()), level, dtype=np.int64))
            lefts.append(np.asarray(left, dtype=float)[take])
        for n in np.asarray(names, dtype=object)[due]:
            self._noted_at[str(n)] = now
        added = int(sum(len(x) for x in nodes))
        if added:
            self._node = np.concatenate([self._node, *nodes])
            self._level = np.concatenate([self._level, *levels])
            self._start = np.concatenate([self._start, np.full(added, now)])
            self._left = np.concatenate([self._left, *lefts])
        return added

    def survival(self, *, now: float) -> WindowSurvival:
        """The table so far, open entries right-censored at their age."""
        open_at = np.zeros_like(self._closed)
        if len(self._start):
            add_observations(open_at, edges=self.edges, bin_seconds=self.s.bin_seconds, forecast_left=self._left,
                             lasted=now - self._start, outlasted=np.zeros(len(self._start), dtype=bool))
        return WindowSurvival(self.edges, self.s.bin_seconds, self._closed.copy(), open_at,
                              min_at_risk=self.s.min_at_risk)
