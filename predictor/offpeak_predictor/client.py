"""Small synchronous client of the predictor HTTP API (used by the operator). Standard library only."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any


class PredictorUnavailable(Exception):
    """The predictor could not answer: connection refused, timeout, or a 5xx. Callers may retry later."""


class PredictorRequestError(ValueError):
    """The predictor rejected the request (4xx): the reason is in the message; retrying will not help."""

    def __init__(self, status: int, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.body = body or {}


class PredictorClient:
    def __init__(self, base_url: str, timeout: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(payload).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - configured URL
                return json.loads(resp.read())  # type: ignore[no-any-return]
        except urllib.error.HTTPError as e:
            try:
                body = json.loads(e.read())
            except (ValueError, OSError):
                body = {}
            message = body.get("error", e.reason) if isinstance(body, dict) else str(e.reason)
            if e.code >= 500:
                raise PredictorUnavailable(f"predictor answered HTTP {e.code}: {message}") from e
            raise PredictorRequestError(e.code, str(message), body if isinstance(body, dict) else None) from e
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError) as e:
            raise PredictorUnavailable(f"predictor at {self.base_url} unreachable: {e}") from e
        except ValueError as e:  # bad JSON from a proxy or similar
            raise PredictorUnavailable(f"predictor answered non-JSON: {e}") from e

    def predict(
        self, graph: dict[str, Any], gpus: list[str], *, mode: str | None = None, precision: str | None = None,
        optimizer: str | None = None, steps: int | None = None, num_gpus: int | None = None,
        startup_seconds: float | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """POST /v1/predict; returns the whole response ({model_version, graph_hash, predictions}).

        startup_seconds: the job's start-up before its first step; None = the predictor's default.
        """
        payload: dict[str, Any] = {"graph": graph, "gpus": list(gpus)}
        for key, value in (("mode", mode), ("precision", precision), ("optimizer", optimizer), ("steps", steps),
                           ("num_gpus", num_gpus), ("startup_seconds", startup_seconds)):  # fmt: skip
            if value is not None:
                payload[key] = value
        return self._post("/v1/predict", payload)

    def add_sample(
        self, *, gpu: str, job_seconds: float, steps: int | None = None, job: str = "",
        graph: dict[str, Any] | None = None, graph_hash: str | None = None, step_seconds: float | None = None,
    ) -> int:  # fmt: skip
        """POST /v1/samples; returns the stored sample id."""
        payload: dict[str, Any] = {"gpu": gpu, "job_seconds": job_seconds, "job": job}
        for key, value in (("steps", steps), ("graph", graph), ("graph_hash", graph_hash),
                           ("step_seconds", step_seconds)):  # fmt: skip
            if value is not None:
                payload[key] = value
        return int(self._post("/v1/samples", payload)["id"])
