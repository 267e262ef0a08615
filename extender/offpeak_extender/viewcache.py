"""The store's view cache: the views that are current, and the columns of the node-name lists kube-scheduler sends
over and over (`NodeArrays`), with the log of which nodes each change touched, so kept columns are patched where a
few nodes changed instead of gathered again. Not thread-safe: the store holds its lock around every call.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import islice

from offpeak_core.model import NodeView
from offpeak_core.nodearrays import NodeArrays, NodeRows

# Node-name lists whose columns are kept. kube-scheduler sends the same lists again and again (every feasible node
# to /filter, those that passed to /prioritize); each entry costs ~250 bytes a node.
ARRAYS_CACHE_ENTRIES = 4
# Per-node changes remembered (a GPU-moving pod event makes two: its node's view dropped, then rebuilt), so kept
# columns can be patched instead of gathered again; columns older than the log are gathered again.
CHANGE_LOG_ENTRIES = 1024

ListKey = str | tuple[str, ...]


@dataclass(frozen=True)
class CachedArrays:
    """A name list's columns and the names the store did not know, as of `generation`."""

    arrays: NodeArrays
    unknown: tuple[str, ...]
    generation: int
    positions: Mapping[str, int] | None = None  # each name's position in the list, once a patch needed it


class ViewCache:
    """Views that are current (inputs unchanged since they were built), for the request path's lookups: an entry
    goes when its node's pods or the node change, all go on a refit or when staleness flips. A generation, bumped
    by every change a view or the node set can see: columns gathered at one generation are reused for the same name
    list until the next, then patched where the change log names their nodes."""

    def __init__(self) -> None:
        self.ready: dict[str, NodeView] = {}
        self.stale = True  # whether the ready views were built from stale forecasts
        self.rows = NodeRows()  # the ready views as columns
        self.generation = 0
        self.arrays: dict[ListKey, CachedArrays] = {}  # by `wire.list_key`
        self._log: deque[tuple[str, ...]] = deque(maxlen=CHANGE_LOG_ENTRIES)  # the nodes of each generation

    def changed(self, nodes: tuple[str, ...] | None = None) -> None:
        """Something views or the node set depend on changed: the views of `nodes` only (their rows of cached
        columns are patched on the next lookup), or anything (None: cached columns are not served again)."""
        self.generation += 1
        if nodes is None:
            self.arrays.clear()
            self._log.clear()
        else:
            self._log.append(nodes)

    def changed_since(self, generation: int) -> set[str] | None:
        """The nodes changed after `generation`; None when that is not known (a change to anything since, or more
        changes than the log keeps)."""
        behind = self.generation - generation
        if behind > len(self._log):  # the log holds exactly the generations since the last change to anything
            return None
        return {n for nodes in islice(reversed(self._log), behind) for n in nodes}

    def drop(self, *nodes: str) -> None:
        """The views of `nodes` are no longer current."""
        for node in nodes:
            self.ready.pop(node, None)

    def forget(self, node: str) -> None:
        """A node left the cluster: its view and its row go."""
        self.ready.pop(node, None)
        self.rows.forget(node)

    def retain(self, live: Mapping[str, object]) -> None:
        """Keep only the nodes of a re-list: one it no longer has is unknown, not kept."""
        self.rows.retain(live)
        for gone in set(self.ready) - set(live):
            del self.ready[gone]

    def reset(self, ready: dict[str, NodeView], *, stale: bool) -> None:
        """Every view at once (a refit, or staleness flipping)."""
        self.ready = ready
        self.stale = stale
        self.changed()

    def remember(self, key: ListKey, entry: CachedArrays) -> None:
        """Keep `entry` for `key` (in place of an older one), dropping the oldest beyond `ARRAYS_CACHE_ENTRIES`."""
        self.arrays.pop(key, None)
        while len(self.arrays) >= ARRAYS_CACHE_ENTRIES:
            del self.arrays[next(iter(self.arrays))]
        self.arrays[key] = entry

    def patch(self, key: ListKey, hit: CachedArrays, positions: Mapping[str, int], at: list[int],
              views: Sequence[NodeView], generation: int) -> NodeArrays | None:
        """`hit`'s columns with the rows `at` rewritten from `views` (the same columns when `at` is empty), kept for
        `key` if nothing changed since `generation`; None when the rows cannot be patched."""
        arrays = hit.arrays
        if at:
            patched = self.rows.patch(hit.arrays, at, views)
            if patched is None:
                return None
            arrays = patched
        if self.generation == generation:
            self.remember(key, CachedArrays(arrays, hit.unknown, generation, positions))
        return arrays


def rows_to_patch(hit: CachedArrays, names: Sequence[str], changed: set[str]) -> tuple[Mapping[str, int], list[int]]:
    """Each name's position in `hit`'s list (kept with it once a patch needed it) and, in order, the positions of
    the `changed` nodes it lists: the rows a patch rewrites."""
    positions = hit.positions if hit.positions is not None else dict(zip(names, range(len(names))))
    return positions, sorted(positions[n] for n in changed if n in positions)
