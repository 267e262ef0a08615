"""The layering of docs/architecture.md holds, and the check really fails when the core imports an I/O library."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import offpeak_core

REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(*, pythonpath: Path | None = None, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath) if pythonpath else ""}
    return subprocess.run([str(LINT_IMPORTS), "--config", str(REPO / "pyproject.toml"), "--cache-dir", str(cache)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_import_contracts_hold(tmp_path: Path) -> None:
    out = _lint(cache=tmp_path / "cache")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 kept, 0 broken" in out.stdout


def test_contract_breaks_when_the_core_imports_kubernetes_or_aiohttp(tmp_path: Path) -> None:
    shadow = tmp_path / "site" / "offpeak_core"
    skip = shutil.ignore_patterns("sample_data", "__pycache__")
    shutil.copytree(Path(offpeak_core.__file__).parent, shadow, ignore=skip)
    (shadow / "leaky.py").write_text("import kubernetes\nfrom aiohttp import web\n")
    out = _lint(pythonpath=shadow.parent, cache=tmp_path / "cache")
    assert out.returncode != 0
    assert "The core is pure" in out.stdout and "BROKEN" in out.stdout
    assert "offpeak_core.leaky -> kubernetes" in out.stdout and "offpeak_core.leaky -> aiohttp" in out.stdout
