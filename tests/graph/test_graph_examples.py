"""The example entry-point models build, extract and really train (the README demo and e2e jobs use them)."""

from __future__ import annotations

import importlib
import math
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["tiny_cnn", "tiny_transformer"])
def test_example_models_train_on_the_cpu(name, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))
    module = importlib.import_module(f"examples.models.{name}")
    loss = module.train(steps=2, batch_size=2)
    assert math.isfinite(loss) and loss > 0
