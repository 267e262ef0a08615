"""The types hold: mypy over every package as pyproject.toml's [tool.mypy] says (the core strictly), and the check
really fails on a wrong type in the core."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import offpeak_core
from offpeak_core.datapaths import cache_dir

REPO = Path(__file__).resolve().parents[2]
MYPY = [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml")]


def _mypy(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MYPY, *args], cwd=cwd, capture_output=True, text=True, timeout=900, check=False)


def test_every_package_type_checks() -> None:
    # the cache lives beside the built binaries: a warm run checks only what changed (seconds, not minutes)
    out = _mypy("--cache-dir", str(cache_dir() / "mypy"), cwd=REPO)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert "Success: no issues found" in out.stdout


def test_the_check_fails_on_a_wrong_type_in_the_core(tmp_path: Path) -> None:
    shadow = tmp_path / "offpeak_core"
    shutil.copytree(Path(offpeak_core.__file__).parent, shadow,
                    ignore=shutil.ignore_patterns("sample_data", "__pycache__", "traces"))
    (shadow / "leaky.py").write_text("def half(x):\n    return x / 2\n\n\ndef name() -> str:\n    return 1\n")
    out = _mypy("--cache-dir", str(tmp_path / "cache"), "--follow-imports", "silent", str(shadow / "leaky.py"),
                cwd=tmp_path)
    assert out.returncode != 0
    assert 'Function is missing a type annotation' in out.stdout  # strict on the core: untyped defs refused
    assert 'Incompatible return value type (got "int", expected "str")' in out.stdout
