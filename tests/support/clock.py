"""A settable fake clock for components that take `clock: Callable[[], float]` (seconds)."""

from __future__ import annotations


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t
