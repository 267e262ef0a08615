"""Extraction options, validated once at the entry point (pure: no torch)."""

from __future__ import annotations

from dataclasses import dataclass

from offpeak.errors import UserError
from offpeak_graph.schema import PRECISIONS

__all__ = ["MODES", "OPTIMIZERS", "PRECISIONS", "ExtractOptions", "parse_shape"]
MODES: tuple[str, ...] = ("train", "inference")
OPTIMIZERS: tuple[str, ...] = ("sgd", "adam", "adamw", "none")


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtractOptions:
    """How to run the model once: batch size, per-sample input shape or sequence length, precision, mode.

    `optimizer` does not change the forward graph; it is recorded so the predictor can cost the update step.
    """

    batch_size: int
    input_shape: tuple[int, ...] | None = None  # per sample, e.g. (3, 224, 224); float input
    seq_len: int | None = None  # token ids of shape (batch, seq_len) when no input_shape is given
    precision: str = "fp32"
    mode: str = "train"
    optimizer: str = "adam"

    def __post_init__(self) -> None:
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise UserError(f"batch size must be a positive integer, got {self.batch_size!r}")
        if self.input_shape is not None and (not self.input_shape or any(d < 1 for d in self.input_shape)):
            raise UserError(f"input shape must be positive integers like 3,224,224, got {list(self.input_shape)}")
        if self.seq_len is not None and self.seq_len < 1:
            raise UserError(f"sequence length must be a positive integer, got {self.seq_len}")
        for value, allowed, what in ((self.precision, PRECISIONS, "precision"), (self.mode, MODES, "mode"),
                                     (self.optimizer, OPTIMIZERS, "optimizer")):  # fmt: skip
            if value not in allowed:
                raise UserError(f"unknown {what} {value!r}; use one of {', '.join(allowed)}")


def parse_shape(text: str | None) -> tuple[int, ...] | None:
    """`"3,224,224"` (or `3x224x224`) -> (3, 224, 224)."""
    if text is None or str(text).strip() == "":
        return None
    parts = str(text).replace("x", ",").replace(" ", "").split(",")
    try:
        shape = tuple(int(p) for p in parts if p != "")
    except ValueError:
        raise UserError(f"input shape must be comma-separated integers like 3,224,224, got {text!r}") from None
    if not shape or any(d < 1 for d in shape):
        raise UserError(f"input shape must be positive integers like 3,224,224, got {text!r}")
    return shape
