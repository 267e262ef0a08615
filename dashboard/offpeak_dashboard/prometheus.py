"""Thin Prometheus HTTP API client (instant and range queries): the one place this package does network I/O."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from offpeak.errors import UserError


class PrometheusUnavailable(UserError):
    """No usable answer from the server (unreachable, no such API, not JSON): every further query would fail the
    same way, so callers stop at the first."""


def instant_query(base_url: str, expr: str, *, at: float | None = None, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Run `expr` at `at` (Unix seconds; default: the server's now); return the API's `result` list (vector
    items)."""
    params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
    data = _get(base_url, "query", params, expr=expr, timeout=timeout)
    if data.get("resultType") == "scalar":
        return [{"metric": {}, "value": data.get("result")}]
    return list(data.get("result", []))


def range_query(base_url: str, expr: str, *, start: float, end: float, step: float,
                timeout: float = 10.0) -> list[dict[str, Any]]:
    """Run `expr` over [start, end] (Unix seconds) every `step` seconds; return the matrix items
    (`{"metric": {...}, "values": [[t, "v"], ...]}`)."""
    params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
    data = _get(base_url, "query_range", params, expr=expr, timeout=timeout)
    if data.get("resultType") == "scalar":
        return [{"metric": {}, "values": [data.get("result")]}]
    return list(data.get("result", []))


def _get(base_url: str, endpoint: str, params: dict[str, str], *, expr: str, timeout: float) -> dict[str, Any]:
    if not base_url.startswith(("http://", "https://")):
        raise UserError(f"Prometheus URL must start with http:// or https://, got {base_url!r}")
    url = f"{base_url.rstrip('/')}/api/v1/{endpoint}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (scheme checked above)
            body = json.load(response)
    except urllib.error.HTTPError as e:
        detail = e.read().decode("utf-8", "replace")[:300]
        if e.code == 404:
            raise PrometheusUnavailable(f"{base_url} has no Prometheus query API (HTTP 404 for {endpoint}); check "
                                        "--prometheus-url") from e
        raise UserError(f"Prometheus at {base_url} rejected {expr!r}: HTTP {e.code} {detail}") from e
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise PrometheusUnavailable(f"cannot reach Prometheus at {base_url} ({reason}); check --prometheus-url "
                                    "(or OFFPEAK_PROMETHEUS_URL) and that Prometheus runs") from e
    except json.JSONDecodeError as e:
        raise PrometheusUnavailable(f"{base_url} did not answer with JSON; is it a Prometheus server?") from e
    if not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error", body) if isinstance(body, dict) else body
        raise UserError(f"Prometheus query {expr!r} failed: {error}")
    return dict(body.get("data") or {})
