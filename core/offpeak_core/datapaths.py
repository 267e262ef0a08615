"""Where the measured data lives: one resolver for every component (predictor, simulator, extender, e2e).

Order, first match wins:
1. ``$OFFPEAK_SHARED_DATA`` when set (even if it does not exist: an explicit setting is never second-guessed);
2. ``<repo>/../shared/data`` beside a source checkout (the full public data sets, when a team has them);
3. the small sample shipped inside this package (``offpeak_core/sample_data``), so a fresh clone, a wheel and an
   image all work without downloads. It mirrors the full layout with slices of the same files; its README says
   how each slice was derived (``tools/derive_sample_data.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

ENV_DATA_ROOT = "OFFPEAK_SHARED_DATA"
ENV_CACHE = "OFFPEAK_CACHE"
SAMPLE_DIR = "sample_data"

DataKind = Literal["full", "sample", "custom"]


def sample_root() -> Path:
    """The data sample shipped with the package (same layout as the full data: ``runtime/``, ``traces/``)."""
    return Path(__file__).resolve().parent / SAMPLE_DIR


def checkout_data_root() -> Path | None:
    """``<repo>/../shared/data`` when this package runs from a source checkout that has it beside it."""
    repo = Path(__file__).resolve().parents[2]
    candidate = repo.parent / "shared" / "data"
    if (repo / "pyproject.toml").is_file() and candidate.is_dir():
        return candidate
    return None


def data_root() -> Path:
    """The data root in use (see the module docstring for the order)."""
    env = os.environ.get(ENV_DATA_ROOT)
    if env:
        return Path(env).expanduser()
    return checkout_data_root() or sample_root()


def data_kind(root: Path | None = None) -> DataKind:
    """Whether `root` (default: the one in use) is the shipped sample, the full data beside the checkout, or a
    folder the user named."""
    root = (root or data_root()).resolve()
    if root == sample_root():
        return "sample"
    full = checkout_data_root()
    if full is not None and root == full.resolve():
        return "full"
    return "custom"


def runtime_dir() -> Path:
    """Measured GPU runtimes: ``<data root>/runtime``."""
    return data_root() / "runtime"


def trace_dir(name: str) -> Path:
    """One cluster trace: ``<data root>/traces/<name>``."""
    return data_root() / "traces" / name


def describe() -> str:
    """One line for logs and test headers: which data is in use and what that means."""
    root = data_root()
    kind = data_kind(root)
    what = {
        "sample": "the small sample shipped in the package; set OFFPEAK_SHARED_DATA for the full public data",
        "full": "the full public data beside the checkout",
        "custom": f"the folder named by ${ENV_DATA_ROOT}",
    }[kind]
    return f"data: {root} — {what}"


def cache_dir() -> Path:
    """offpeak's own cache (built binaries, graph cache, benchmark DB, local clusters): ``$OFFPEAK_CACHE``, else
    ``~/.cache/offpeak``. Everything in it can be rebuilt; CI starts it empty."""
    return Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "offpeak").expanduser()
