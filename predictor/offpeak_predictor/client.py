"""Small synchronous client of the predictor HTTP API (used by the operator). Standard library only."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
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
    """`token_file`: the shared secret sent as a bearer token on writes (re-read per call, so rotation works)."""

    def __init__(self, base_url: str, timeout: float = 5.0, *, token_file: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.token_file = token_file

    def _token_header(self) -> dict[str, str]:
        if not self.token_file:
            return {}
        try:
            token = Path(self.token_file).read_text().strip()
        except OSError as e:
            raise PredictorUnavailable(f"cannot read the predictor token file {self.token_file}: {e}") from e
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _post(self, path: str, payload: dict[str, Any], *, authenticated: bool = False) -> dict[str, Any]:
        data = json.dumps(payload).encode()
        headers = {"Content-Type": "application/json", **(self._token_header() if authenticated else {})}
        req = urllib.request.Request(self.base_url + path, data=data, method="POST", headers=headers)
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
        startup_seconds: float | None = None, gpus_per_node: int | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """POST /v1/predict; returns the whole response ({model_version, graph_hash, predictions}).

        startup_seconds: the job's start-up before its first step; None = the predictor's default.
        gpus_per_node: the job's GPUs in one node when it spans several (None: all in one node).
        """
        payload: dict[str, Any] = {"graph": graph, "gpus": list(gpus)}
        for key, value in (("mode", mode), ("precision", precision), ("optimizer", optimizer), ("steps", steps),
                           ("num_gpus", num_gpus), ("startup_seconds", startup_seconds),
                           ("gpus_per_node", gpus_per_node)):  # fmt: skip
            if value is not None:
                payload[key] = value
        return self._post("/v1/predict", payload)

    def add_sample(
        self, *, gpu: str, job_seconds: float | None = None, steps: int | None = None, job: str = "",
        graph: dict[str, Any] | None = None, graph_hash: str | None = None, step_seconds: float | None = None,
        **fields: Any,
    ) -> dict[str, Any]:  # fmt: skip
        """POST /v1/samples with the bearer token; the answer: `id`, `status` (accepted | unverified), `reason`,
        `correction`. A quarantined or refused sample raises PredictorRequestError (422, 401, 403) with the reason.

        `fields`: the other sample fields of docs/contracts.md (precision, mode, optimizer, num_gpus, batch_size,
        model_family, startup_seconds); None values are left out.
        """
        payload: dict[str, Any] = {"gpu": gpu, "job": job}
        for key, value in (("job_seconds", job_seconds), ("steps", steps), ("graph", graph),
                           ("graph_hash", graph_hash), ("step_seconds", step_seconds), *fields.items()):  # fmt: skip
            if value is not None:
                payload[key] = value
        return self._post("/v1/samples", payload, authenticated=True)

    def add_collected(
        self, body: dict[str, Any], *, attempts: int = 1, backoff_seconds: float = 2.0,
        on_retry: Callable[[int, float, PredictorUnavailable], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> dict[str, Any]:  # fmt: skip
        """POST /v1/collected with the bearer token (rows from `offpeak collect`, `collected.batch_body`); the
        answer: rows stored and the GPU type's calibration. A refused batch raises PredictorRequestError at once;
        an unavailable predictor is tried `attempts` times, waiting `backoff_seconds` doubling up to 30 s, so a
        predictor restarting during a collect Job does not cost the Job's GPU time again. Retrying is safe: the
        predictor skips rows of a batch it already stored."""
        wait = backoff_seconds
        for attempt in range(1, max(1, attempts) + 1):
            try:
                return self._post("/v1/collected", body, authenticated=True)
            except PredictorUnavailable as e:
                if attempt >= attempts:
                    raise
                if on_retry:
                    on_retry(attempt, wait, e)
                sleep(wait)
                wait = min(2 * wait, 30.0)
        raise AssertionError("unreachable")
