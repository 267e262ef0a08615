"""A tiny CNN for 32x32 images (CIFAR-sized): the smallest useful image-classification job."""

from __future__ import annotations

import torch
from torch import nn


class TinyCNN(nn.Module):
    def __init__(self, num_classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Linear(2 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


def build() -> nn.Module:
    """Entry point for `offpeak extract --entrypoint examples.models.tiny_cnn:build --input-shape 3,32,32`."""
    return TinyCNN()


def train(*, steps: int = 20, batch_size: int = 8) -> float:
    """Run real SGD steps on random data; returns the last loss."""
    model = build()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss = torch.tensor(0.0)
    for _ in range(steps):
        x, y = torch.randn(batch_size, 3, 32, 32), torch.randint(0, 10, (batch_size,))
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss.item()


if __name__ == "__main__":
    import argparse
    import time

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=8)
    cli = parser.parse_args()
    started = time.perf_counter()
    final = train(steps=cli.steps, batch_size=cli.batch_size)
    print(f"{cli.steps} steps in {time.perf_counter() - started:.2f}s, final loss {final:.4f}")
