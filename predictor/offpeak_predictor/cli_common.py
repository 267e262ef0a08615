"""What the predictor's command modules share (`cli.py`, `cli_refit.py`); no argument parsing here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offpeak.errors import UserError


def load_model(path: str | None) -> Any:
    """The runtime model at `path` (None: the shipped one), or a UserError that says which file failed and why."""
    from offpeak_predictor.model import RuntimeModel

    try:
        return RuntimeModel.load(path)
    except FileNotFoundError as e:
        raise UserError(f"predictor model file not found: {path or 'package default'}") from e
    except (ValueError, OSError) as e:
        raise UserError(f"cannot load predictor model {path or 'package default'}: {e}") from e


def check_token_file(path: str | None) -> None:
    """A --token-file that was given must exist: its absence is the user's to fix, not an unreachable predictor."""
    if path and not Path(path).is_file():
        raise UserError(f"--token-file {path} does not exist (the predictor's shared secret)")
