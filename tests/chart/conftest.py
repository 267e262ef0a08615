"""Render the chart once per session (helm is a subprocess; keep the suite fast on 2 cores)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from support.chart import chart_dir, render
from support import REPO
from support.tools import ToolMissing, find_helm

CHART = chart_dir(REPO)
CUSTOM_VALUES = Path(__file__).with_name("values-custom.yaml")


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    try:
        return find_helm()
    except ToolMissing as e:
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def default_objects(helm_bin: Path) -> list[dict[str, Any]]:
    return render(CHART)


@pytest.fixture(scope="session")
def custom_objects(helm_bin: Path) -> list[dict[str, Any]]:
    return render(CHART, values=[CUSTOM_VALUES], release="harvest", namespace="gpu")


@pytest.fixture(scope="session", params=["default", "custom"])
def objects(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return request.getfixturevalue(f"{request.param}_objects")
