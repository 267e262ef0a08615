"""Errors shared by every component; they live in the pure core so that it can raise them too."""

from offpeak_core.errors import UserError

__all__ = ["UserError"]
