"""A least-recently-used cache bounded by the approximate bytes of its values (not by their count)."""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import numpy as np

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
ENTRY_OVERHEAD_BYTES = 256  # key, dict slot and object headers of one entry


class SizedLRU(Generic[K, V]):
    """Keeps the most recently used values whose sizes (`sizeof(value)`) sum to at most `max_bytes`."""

    def __init__(self, *, max_bytes: int, sizeof: Callable[[V], int]) -> None:
        self.max_bytes = max_bytes
        self._sizeof = sizeof
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: K) -> V | None:
        hit = self._items.get(key)
        if hit is None:
            return None
        self._items.move_to_end(key)
        return hit[0]

    def resize(self, max_bytes: int) -> None:
        """Change the budget, evicting the oldest values beyond a smaller one at once."""
        self.max_bytes = max_bytes
        while self.bytes > self.max_bytes and self._items:
            self.bytes -= self._items.popitem(last=False)[1][1]

    def clear(self) -> None:
        self._items.clear()
        self.bytes = 0

    def put(self, key: K, value: V) -> None:
        """Store a value (one larger than the whole budget is not kept) and evict the oldest beyond the budget."""
        size = self._sizeof(value) + ENTRY_OVERHEAD_BYTES
        if key in self._items:
            self.bytes -= self._items.pop(key)[1]
        if size > self.max_bytes:
            return
        self._items[key] = (value, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            self.bytes -= self._items.popitem(last=False)[1][1]


def approx_bytes(value: object) -> int:
    """Approximate memory of a value: numpy arrays by `nbytes`, dataclasses and containers field by field."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes) + 112
    if isinstance(value, (str, bytes)):
        return len(value) + 50
    if isinstance(value, (int, float, bool)) or value is None:
        return 32
    if isinstance(value, (list, tuple)):
        return 56 + sum(approx_bytes(v) + 8 for v in value)
    if isinstance(value, dict):
        return 64 + sum(approx_bytes(k) + approx_bytes(v) + 24 for k, v in value.items())
    if dataclasses.is_dataclass(value):
        return 64 + sum(approx_bytes(getattr(value, f.name)) for f in dataclasses.fields(value))
    return 64
