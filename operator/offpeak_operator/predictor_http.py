"""Thin HTTP adapter to the predictor service (docs/contracts.md, "Predictor HTTP"). Blocking, with timeouts.

The operator's handlers run in kopf's worker threads, so plain urllib is enough and keeps this dependency-free.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from offpeak_operator.metrics import OperatorMetrics


class PredictorUnavailable(RuntimeError):
    """The predictor could not be reached or refused the request; the message says how."""


class PredictorHTTP:
    def __init__(self, url: str, *, timeout_seconds: float, metrics: OperatorMetrics) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout_seconds
        self.metrics = metrics

    def _post(self, endpoint: str, body: Mapping[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.url}{endpoint}", data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as e:
            self.metrics.predictor_failures_total.labels(endpoint=endpoint).inc()
            detail = e.read()[:300].decode(errors="replace")
            raise PredictorUnavailable(f"predictor {endpoint} answered HTTP {e.code}: {detail}") from e
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            self.metrics.predictor_failures_total.labels(endpoint=endpoint).inc()
            raise PredictorUnavailable(f"predictor at {self.url} unreachable: {e}") from e
        finally:
            self.metrics.predictor_request_seconds.labels(endpoint=endpoint).observe(time.perf_counter() - started)
        try:
            result = json.loads(payload)
        except json.JSONDecodeError as e:
            self.metrics.predictor_failures_total.labels(endpoint=endpoint).inc()
            raise PredictorUnavailable(f"predictor {endpoint} answered non-JSON") from e
        if not isinstance(result, dict):
            raise PredictorUnavailable(f"predictor {endpoint} answered {type(result).__name__}, not an object")
        return result

    def predict(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._post("/v1/predict", body)

    def report_sample(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._post("/v1/samples", body)
