"""Kubernetes timestamps (RFC 3339, e.g. ``2026-11-23T04:05:06Z``) to Unix seconds: one parser for every component."""

from __future__ import annotations

from datetime import datetime


def parse_timestamp(text: str | None) -> float | None:
    """Unix seconds of an RFC 3339 timestamp; None for an empty or malformed one (status fields may be either)."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
