"""Fixtures for the operator's unit tests (helpers live in optestkit.py, a uniquely named module)."""

from __future__ import annotations

import pytest
from offpeak_graph.schema import ModelGraph
from optestkit import small_graph


@pytest.fixture
def graph() -> ModelGraph:
    return small_graph()
