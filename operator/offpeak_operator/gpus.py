"""Adapter to the predictor's GPU catalogue (`offpeak_predictor.gpus`), optional at import time."""

from __future__ import annotations

from offpeak_operator.jobspec import GpuResolver


def load_resolver() -> GpuResolver | None:
    """A resolver to canonical GPU names, or None when the predictor package is not installed (no check)."""
    try:
        from offpeak_predictor.gpus import find_gpu
    except ImportError:
        return None

    def resolve(name: str) -> str:
        spec = find_gpu(name)
        if spec is None:
            raise LookupError(f"unknown GPU type {name!r}")
        return spec.name

    return resolve
