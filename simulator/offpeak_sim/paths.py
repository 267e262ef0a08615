"""Where the simulator's traces live: the shared data root (`offpeak_core.datapaths`), and folder checks."""

from __future__ import annotations

from pathlib import Path

from offpeak.errors import UserError
from offpeak_core.datapaths import ENV_DATA_ROOT, data_root, trace_dir

__all__ = [
    "DEFAULT_JOBS_TRACE", "DEFAULT_ONLINE_TRACE", "ENV_DATA_ROOT",
    "data_root", "existing_dir", "repo_root", "trace_dir",
]

DEFAULT_ONLINE_TRACE = "alibaba-genai-serving-v2026"
DEFAULT_JOBS_TRACE = "ms-itp-elasticflow"


def repo_root() -> Path:
    """The source checkout this package runs from (its committed predictor reports calibrate the simulated
    prediction error; outside a checkout they are absent and the simulator uses its default error profile)."""
    return Path(__file__).resolve().parents[2]


def existing_dir(path: str | Path, *, what: str) -> Path:
    """Return `path` as a Path, or raise a UserError that says which folder is missing."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise UserError(
            f"{what} folder not found: {p} (name another trace or folder, or set {ENV_DATA_ROOT} to the data root)"
        )
    return p
