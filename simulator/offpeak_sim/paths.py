"""Where the shared trace data lives: `<repo>/../shared/data`, or `$OFFPEAK_SHARED_DATA`."""

from __future__ import annotations

import os
from pathlib import Path

from offpeak.errors import UserError

ENV_DATA_ROOT = "OFFPEAK_SHARED_DATA"
DEFAULT_ONLINE_TRACE = "alibaba-genai-serving-v2026"
DEFAULT_JOBS_TRACE = "ms-itp-elasticflow"


def repo_root() -> Path:
    """Return the repository root (three levels above this file: simulator/offpeak_sim/paths.py)."""
    return Path(__file__).resolve().parents[2]


def data_root() -> Path:
    """Return the shared data root, honouring `$OFFPEAK_SHARED_DATA`."""
    env = os.environ.get(ENV_DATA_ROOT)
    return Path(env) if env else repo_root().parent / "shared" / "data"


def trace_dir(name: str) -> Path:
    """Return `<data root>/traces/<name>`."""
    return data_root() / "traces" / name


def existing_dir(path: str | Path, *, what: str) -> Path:
    """Return `path` as a Path, or raise a UserError that says which folder is missing."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise UserError(
            f"{what} folder not found: {p} (pass another with the flag, or set {ENV_DATA_ROOT} to the data root)"
        )
    return p
