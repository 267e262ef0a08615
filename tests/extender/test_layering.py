"""The pure core stays pure: no Kubernetes, HTTP or metrics imports (the simulator imports these modules)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import offpeak_extender

PURE = ["model", "decisions", "forecast", "windows", "schedules", "evictions", "wire", "humanize"]
FORBIDDEN = ("kubernetes", "aiohttp", "prometheus_client", "urllib", "requests", "socket", "offpeak_extender.store",
             "offpeak_extender.kube", "offpeak_extender.server", "offpeak_extender.history")


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("module", PURE)
def test_pure_module_has_no_io_imports(module: str) -> None:
    path = Path(offpeak_extender.__file__).parent / f"{module}.py"
    bad = {n for n in imports(path) if any(n == f or n.startswith(f + ".") for f in FORBIDDEN)}
    assert not bad, f"{module}.py imports {sorted(bad)}"
