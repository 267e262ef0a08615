"""Thin Prometheus HTTP API client (instant queries only): the one place this package does network I/O."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from offpeak.errors import UserError


def instant_query(base_url: str, expr: str, *, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Run `expr` at the current time; return the API's `result` list (vector items)."""
    if not base_url.startswith(("http://", "https://")):
        raise UserError(f"Prometheus URL must start with http:// or https://, got {base_url!r}")
    url = f"{base_url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (scheme checked above)
            body = json.load(response)
    except urllib.error.HTTPError as e:
        detail = e.read().decode("utf-8", "replace")[:300]
        raise UserError(f"Prometheus at {base_url} rejected {expr!r}: HTTP {e.code} {detail}") from e
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        raise UserError(f"cannot reach Prometheus at {base_url}: {e}") from e
    except json.JSONDecodeError as e:
        raise UserError(f"{base_url} did not answer with JSON; is it a Prometheus server?") from e
    if body.get("status") != "success":
        raise UserError(f"Prometheus query {expr!r} failed: {body.get('error', body)}")
    data = body.get("data", {})
    if data.get("resultType") == "scalar":
        return [{"metric": {}, "value": data.get("result")}]
    return list(data.get("result", []))
