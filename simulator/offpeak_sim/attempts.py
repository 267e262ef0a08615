"""One attempt of a job on its GPUs (`Run`): what the engine starts, stops, and the deciding modules read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Run:
    """One attempt of a job: its pods' nodes and width, and when it started and ends (for the heap and metrics)."""

    job: int
    node: int  # the first member's node
    start: float
    gpus: int  # all members together (fewer than the job's when it runs narrower, elastic width)
    slowdown: float  # wall seconds per reference second of the job's work: the GPU type's, × job GPUs / gpus
    end: float
    members: tuple[tuple[int, int], ...] = ()  # (node, GPUs) per pod; one entry for a single-node job
    startup: float = 0.0  # seconds at the start of the attempt with no useful work (restart cost)
    expected_end: float | None = None  # when the policy believes it ends (start + startup + p90); None: blind
