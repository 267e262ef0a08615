"""Fixtures for the model-graph tests: a folder of small entry-point modules, outside the repository."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

ENTRYPOINTS = '''
import torch
from torch import nn


class DataDependent(nn.Module):
    """Branches on a tensor value: cannot run on meta tensors."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        h = self.a(x)
        if h.mean().item() > 1e9:
            return self.b(h) * 2
        return self.b(h)


class Exotic(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, x):
        return torch.special.bessel_j0(self.a(x)).cummax(dim=-1).values


class ManualAttention(nn.Module):
    """Single-head self-attention written with @, torch.matmul and softmax (the path HF 'eager' attention takes)."""

    def __init__(self, dim=32):
        super().__init__()
        self.qkv = nn.Parameter(torch.zeros(dim, 3 * dim))
        self.dim = dim

    def forward(self, x):
        q, k, v = (x @ self.qkv).split(self.dim, dim=-1)
        weights = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / self.dim**0.5, dim=-1)
        return torch.matmul(weights, v)


def manual_attention():
    return ManualAttention()


class PositionsWithoutDevice(nn.Module):
    """Creates a tensor in forward without naming a device (common in user code)."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Embedding(64, 8)

    def forward(self, x):
        return x + self.pos(torch.arange(x.shape[1]))


def positions_without_device():
    return PositionsWithoutDevice()


def data_dependent():
    return DataDependent()


def exotic():
    return Exotic()


def raises():
    raise ValueError("cannot build: missing weights")


def not_a_module():
    return {"model": 1}


def linear():
    return nn.Linear(4, 2)


def tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=1000, n_positions=256))


def wrapped():
    return nn.DataParallel(torch.compile(nn.Linear(4, 2)))
'''


@pytest.fixture(scope="session")
def entrypoint_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory (to pass as --python-path) holding module `offpeak_test_models`."""
    folder = tmp_path_factory.mktemp("entrypoints")
    (folder / "offpeak_test_models.py").write_text(textwrap.dedent(ENTRYPOINTS))
    return folder
