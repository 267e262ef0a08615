"""Node views as columns, so the extender decides for 1,000 nodes with a few array operations instead of a Python
loop over nodes (issue #16: filter+prioritize p99 <= 5 ms at 1,000 nodes).

`NodeRows` keeps one row per node, written when the node's view changes (the store rebuilds a view only when its
pods or forecast change), so a request copies rows by index instead of converting every view again. Pure: no I/O,
no clock; the caller serialises access (the extender's store gathers under its lock, and forgets deleted nodes).
"""

from __future__ import annotations

import math
import dataclasses
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field, replace
from json.encoder import encode_basestring_ascii as json_string

import numpy as np

from offpeak_core.model import IdleWindow, NodeView

NO_WINDOW_FREE = -1  # padding in the window columns: never enough free GPUs


def withhold(node: NodeView, gpus: int) -> NodeView:
    """`node` as other pods see it while `gpus` of its GPUs are reserved for a gang: fewer free now and in every
    window (reserved workers run through the window)."""
    if gpus <= 0:
        return node
    windows = None if node.windows is None else tuple(
        IdleWindow(w.start, w.end, max(0, w.free_gpus - gpus), w.confidence, w.end_certain) for w in node.windows)
    window_free = None if node.window_free_gpus is None else max(0, node.window_free_gpus - gpus)
    return dataclasses.replace(node, gpus_free_now=max(0, node.gpus_free_now - gpus),
                               window_free_gpus=window_free, windows=windows)


@dataclass(frozen=True)
class NodeArrays:
    """The nodes of one request, in request order: what `decisions` needs of each `NodeView`, as arrays.

    Window columns are padded to the longest window list: `win_free` is `NO_WINDOW_FREE` in padding, an
    open-ended window ends at +inf. A view without a window list (`windows is None`) is described by
    `flat_free`/`flat_end` (its current window; +inf when open-ended) instead. The columns are read-only: one
    `NodeArrays` may answer many requests (the extender's store keeps them per node-name list); `withhold` copies.
    What `window_left` derives from the columns alone is kept with them (`_ends`), for the requests after.
    """

    views: tuple[NodeView, ...]
    names: np.ndarray  # object: each view's name, so results are built by masks instead of a loop over views
    json_names: np.ndarray  # object: each name as a JSON string (quoted), so replies listing nodes are joined
    distinct: bool  # no node is listed twice (then a per-node answer needs no dict to be told apart)
    type_names: tuple[str, ...]  # distinct GPU types; `type_code` indexes it
    type_code: np.ndarray
    free_now: np.ndarray
    total: np.ndarray  # GPUs of the node (`gpus_total`)
    stale: np.ndarray
    has_windows: np.ndarray
    flat_free: np.ndarray
    flat_end: np.ndarray
    win_start: np.ndarray  # (width, nodes): window j of every node is one contiguous row, so a max over windows
    # is `width` passes over all nodes instead of a short reduction per node
    win_end: np.ndarray
    win_free: np.ndarray
    win_certain: np.ndarray  # the window ends by `win_end` for certain (`IdleWindow.end_certain`)
    # GPUs -> (lo, hi, end, certain): each node's latest end of a window with that many GPUs free that started by a
    # time t with lo <= t < hi (no window starts in between, so every such t sees the same windows), and whether it is
    # certain. Not an argument: `replace` (withhold, patched rows) starts a new one for the new columns.
    _ends: dict[int, tuple[float, float, np.ndarray, np.ndarray]] = field(default_factory=dict, init=False,
                                                                          repr=False, compare=False)

    @classmethod
    def from_views(cls, views: Sequence[NodeView]) -> NodeArrays:
        """Columns for `views` without a cache (tests, one-off callers)."""
        rows = NodeRows()
        return rows.gather(views)

    def __len__(self) -> int:
        return len(self.views)

    def withhold(self, gpus_by_node: Mapping[str, int]) -> NodeArrays:
        """These nodes as other pods see them while GPUs are reserved for gangs: `gpus_by_node[name]` fewer free now
        and in every window (never below 0; padding stays padding), as `withhold` does to each view (the reasons
        read the views). Only the listed rows are copied and changed."""
        if not gpus_by_node:  # no reservation (the usual case): nothing to look at
            return self
        rows = [(i, gpus_by_node[v.name]) for i, v in enumerate(self.views) if gpus_by_node.get(v.name, 0) > 0]
        if not rows:
            return self
        at = np.array([i for i, _ in rows], dtype=np.int64)
        take = np.array([g for _, g in rows], dtype=np.int64)
        free_now, flat_free, win_free = self.free_now.copy(), self.flat_free.copy(), self.win_free.copy()
        free_now[at] = np.maximum(0, free_now[at] - take)
        flat_free[at] = np.maximum(0, flat_free[at] - take)
        part = win_free[:, at]
        win_free[:, at] = np.where(part == NO_WINDOW_FREE, NO_WINDOW_FREE, np.maximum(0, part - take[None, :]))
        changed = list(self.views)
        for i, g in rows:
            changed[i] = withhold(changed[i], g)
        return replace(self, views=tuple(changed), free_now=_frozen(free_now), flat_free=_frozen(flat_free),
                       win_free=_frozen(win_free))

    def window_left(self, *, gpus: int, now: float) -> np.ndarray:
        """`decisions.window_left` for every node at once: seconds from `now` with `gpus` GPUs free (inf: open)."""
        return self.window_left_certain(gpus=gpus, now=now)[0]

    def window_left_certain(self, *, gpus: int, now: float) -> tuple[np.ndarray, np.ndarray]:
        """`window_left`, and per node whether that window's end is certain (`decisions.window_left_certain`; read
        it only where the time left is above 0).

        The end each node's time is measured to depends on `now` only through which windows have started, so it is
        kept per GPU count and reused while no window starts or is passed: then a request costs one subtraction.
        """
        kept = self._ends.get(gpus)
        if kept is not None and kept[0] <= now < kept[1]:
            end, certain = kept[2], kept[3]
        else:
            end, certain = self._window_end(gpus, now)
            started = self.win_start <= now
            lo = float(self.win_start[started].max(initial=-math.inf))
            hi = float(self.win_start[~started].min(initial=math.inf))
            # one dict item: threads sharing these columns may race, harmlessly
            self._ends[gpus] = (lo, hi, end, certain)
        return np.maximum(0.0, end - now), certain  # = max(0, max of end - now): subtracting is monotonic

    def _window_end(self, gpus: int, now: float) -> tuple[np.ndarray, np.ndarray]:
        """Per node, the end `window_left` measures to: the latest end of a started window with `gpus` GPUs free
        (-inf: none), or the current window's end when no window list is known (-inf: too few GPUs free); and
        whether a window ending then ends for certain."""
        in_window = (self.win_free >= gpus) & (self.win_start <= now)
        ends = np.where(in_window, self.win_end, -math.inf)
        latest = ends.max(axis=0, initial=-math.inf)  # of the fitting ones
        certain = (in_window & self.win_certain & (ends == latest[None, :]) & np.isfinite(latest)[None, :]).any(axis=0)
        flat = np.where(self.flat_free < gpus, -math.inf, self.flat_end)
        return _frozen(np.where(self.has_windows, latest, flat)), _frozen(certain & self.has_windows)


def _frozen(column: np.ndarray) -> np.ndarray:
    """`column` made read-only: a shared `NodeArrays` must not be changed by one of its readers."""
    column.flags.writeable = False
    return column


class NodeRows:
    """A row per node name, rewritten only when the node's view object changes; `gather` copies rows by index."""

    def __init__(self, width: int = 8) -> None:
        self._index: dict[str, int] = {}
        self._views: list[NodeView | None] = []  # None: a forgotten node's slot, listed in `_spare`
        self._spare: list[int] = []
        self._type_index: dict[str, int] = {}
        self._type_names: list[str] = []
        self._width = max(1, width)
        self._alloc(16)

    def _alloc(self, capacity: int) -> None:
        self._names = np.full(capacity, "", dtype=object)
        self._json_names = np.full(capacity, "", dtype=object)
        self._free_now = np.zeros(capacity, dtype=np.int64)
        self._total = np.zeros(capacity, dtype=np.int64)
        self._type_code = np.zeros(capacity, dtype=np.int64)
        self._stale = np.zeros(capacity, dtype=bool)
        self._has_windows = np.zeros(capacity, dtype=bool)
        self._flat_free = np.zeros(capacity, dtype=np.int64)
        self._flat_end = np.zeros(capacity, dtype=float)
        self._win_start = np.zeros((self._width, capacity), dtype=float)
        self._win_end = np.zeros((self._width, capacity), dtype=float)
        self._win_free = np.full((self._width, capacity), NO_WINDOW_FREE, dtype=np.int64)
        self._win_certain = np.zeros((self._width, capacity), dtype=bool)

    def _grow(self, capacity: int, width: int) -> None:
        """Reallocate to at least `capacity` rows and `width` window columns, keeping the rows written so far."""
        old = (self._names, self._json_names, self._free_now, self._total, self._type_code, self._stale,
               self._has_windows, self._flat_free, self._flat_end, self._win_start, self._win_end, self._win_free,
               self._win_certain)
        n, w = len(old[0]), self._width
        self._width = max(self._width, width)
        self._alloc(n if capacity <= n else max(capacity, 2 * n))
        new = (self._names, self._json_names, self._free_now, self._total, self._type_code, self._stale,
               self._has_windows, self._flat_free, self._flat_end, self._win_start, self._win_end, self._win_free,
               self._win_certain)
        for dst, src in zip(new, old):
            if src.ndim == 1:
                dst[:n] = src[:n]
            else:
                dst[:w, :n] = src[:w, :n]

    def _write(self, i: int, view: NodeView) -> None:
        windows = view.windows or ()
        if len(windows) > self._width or i >= len(self._free_now):
            self._grow(i + 1, len(windows))
        code = self._type_index.get(view.gpu_type)
        if code is None:
            code = self._type_index[view.gpu_type] = len(self._type_names)
            self._type_names.append(view.gpu_type)
        self._names[i], self._json_names[i] = view.name, json_string(view.name)
        self._free_now[i], self._total[i] = view.gpus_free_now, view.gpus_total
        self._type_code[i], self._stale[i] = code, view.data_stale
        self._has_windows[i] = view.windows is not None
        self._flat_free[i] = view.gpus_free_now if view.window_free_gpus is None else view.window_free_gpus
        self._flat_end[i] = math.inf if view.window_end is None else view.window_end
        self._win_free[:, i] = NO_WINDOW_FREE
        self._win_certain[:, i] = False
        for j, w in enumerate(windows):
            self._win_start[j, i] = w.start
            self._win_end[j, i] = math.inf if w.end is None else w.end
            self._win_free[j, i] = w.free_gpus
            self._win_certain[j, i] = w.end_certain

    def patch(self, arrays: NodeArrays, at: Sequence[int], views: Sequence[NodeView]) -> NodeArrays | None:
        """`arrays` with the node at position `at[k]` described by `views[k]` instead: what `gather` gives for the
        whole list when only those nodes changed, for the cost of copying the columns those rows change. None when a
        view has more windows than `arrays` has columns for (then `gather` the list).

        The views must be of the nodes named at those positions; `arrays` must come from this `NodeRows`."""
        width = arrays.win_start.shape[0]
        if any(len(v.windows or ()) > width for v in views):
            return None
        rows = np.array([self._row(v) for v in views], dtype=np.int64)
        pos = np.asarray(at, dtype=np.int64)
        listed = list(arrays.views)
        for p, view in zip(pos.tolist(), views):
            listed[p] = view

        def put(old: np.ndarray, new: np.ndarray) -> np.ndarray:
            rows_new = new[rows] if old.ndim == 1 else new[:width, rows]
            if np.array_equal(old[..., pos], rows_new):
                return old  # read-only and unchanged: shared, not copied
            column = old.copy()
            column[..., pos] = rows_new
            return _frozen(column)

        return replace(
            arrays, views=tuple(listed), type_names=tuple(self._type_names),
            type_code=put(arrays.type_code, self._type_code), free_now=put(arrays.free_now, self._free_now),
            total=put(arrays.total, self._total), stale=put(arrays.stale, self._stale),
            has_windows=put(arrays.has_windows, self._has_windows), flat_free=put(arrays.flat_free, self._flat_free),
            flat_end=put(arrays.flat_end, self._flat_end), win_start=put(arrays.win_start, self._win_start),
            win_end=put(arrays.win_end, self._win_end), win_free=put(arrays.win_free, self._win_free),
            win_certain=put(arrays.win_certain, self._win_certain),
        )

    def _row(self, view: NodeView) -> int:
        """The row of `view`'s node, written first when the view is new or changed."""
        i = self._index.get(view.name)
        return i if i is not None and self._views[i] is view else self._place(view, i)

    def gather(self, views: Sequence[NodeView]) -> NodeArrays:
        """The request's nodes as columns (read-only copies); rows of views not seen before (or changed since) are
        written first."""
        get, known = self._index.get, self._views
        found: list[int] = []
        keep = found.append
        for view in views:  # hot path: a dict lookup and an identity check per node
            i = get(view.name)
            if i is None or known[i] is not view:
                i = self._place(view, i)
            keep(i)
        rows = np.array(found, dtype=np.int64)
        return NodeArrays(
            views=tuple(views), names=_frozen(self._names[rows]), json_names=_frozen(self._json_names[rows]),
            distinct=bool(np.bincount(rows).max(initial=0) <= 1), type_names=tuple(self._type_names),
            type_code=_frozen(self._type_code[rows]), free_now=_frozen(self._free_now[rows]),
            total=_frozen(self._total[rows]), stale=_frozen(self._stale[rows]),
            has_windows=_frozen(self._has_windows[rows]), flat_free=_frozen(self._flat_free[rows]),
            flat_end=_frozen(self._flat_end[rows]), win_start=_frozen(self._win_start.take(rows, axis=1)),
            win_end=_frozen(self._win_end.take(rows, axis=1)),
            win_free=_frozen(self._win_free.take(rows, axis=1)),
            win_certain=_frozen(self._win_certain.take(rows, axis=1)),
        )

    def _place(self, view: NodeView, i: int | None) -> int:
        """Write `view` into its node's row (a new or a reused spare one when `i` is None); return the row."""
        if i is None:
            if self._spare:
                i = self._spare.pop()
                self._views[i] = view
            else:
                i = len(self._views)
                self._views.append(view)
            self._index[view.name] = i
        else:
            self._views[i] = view
        self._write(i, view)
        return i

    def forget(self, name: str) -> None:
        """Free the row of a node that left the cluster (its slot is reused by the next new node)."""
        i = self._index.pop(name, None)
        if i is not None:
            self._views[i] = None
            self._spare.append(i)

    def retain(self, live: Container[str]) -> None:
        """Forget every node not in `live` (after a full re-list of the cluster's nodes)."""
        for name in [n for n in self._index if n not in live]:
            self.forget(name)

    def __len__(self) -> int:
        return len(self._index)
