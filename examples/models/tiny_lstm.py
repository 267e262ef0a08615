"""A tiny LSTM sequence classifier (input: batch x seq x features)."""

from __future__ import annotations

import torch
from torch import nn


class TinyLSTM(nn.Module):
    def __init__(self, features: int = 16, hidden: int = 32, layers: int = 2, num_classes: int = 5) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def build() -> nn.Module:
    """Entry point for `offpeak extract --entrypoint examples.models.tiny_lstm:build --input-shape 20,16`."""
    return TinyLSTM()
