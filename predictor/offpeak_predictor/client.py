"""Small synchronous client of the predictor HTTP API (used by the operator): the standard library's HTTP and the
wire types the server checks with (`wire.py`), so a request is encoded, and an answer checked, by the same
definitions as on the server."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from offpeak.errors import UserError
from offpeak_predictor import wire
from offpeak_predictor.wire import CollectedAnswer, CollectedBatch, PredictRequest, PredictResponse, SampleAnswer
from offpeak_predictor.wire import SampleReport

T = TypeVar("T")


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

    def _post(self, path: str, payload: msgspec.Struct | Mapping[str, Any], answer: Any = dict, *,
              authenticated: bool = False) -> Any:
        """POST a payload; the answer decoded as `answer`, its wire type (plain values by default: the model store's
        answers), so a predictor answering something else is unavailable, not trusted."""
        headers = {"Content-Type": "application/json", **(self._token_header() if authenticated else {})}
        req = urllib.request.Request(self.base_url + path, data=wire.encode(payload), method="POST", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - configured URL
                raw = resp.read()
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
        try:
            return msgspec.json.decode(raw, type=answer)
        except msgspec.DecodeError as e:  # bad JSON from a proxy, or an answer outside the contract
            raise PredictorUnavailable(f"predictor answered what is not a {answer.__name__}: {e}") from e

    def predict(
        self, graph: dict[str, Any], gpus: list[str], *, mode: str | None = None, precision: str | None = None,
        optimizer: str | None = None, steps: int | None = None, num_gpus: int | None = None,
        startup_seconds: float | None = None, gpus_per_node: int | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """POST /v1/predict; returns the whole response ({model_version, graph_hash, predictions}) as plain values,
        checked against `wire.PredictResponse`.

        startup_seconds: the job's start-up before its first step; None = the predictor's default.
        gpus_per_node: the job's GPUs in one node when it spans several (None: all in one node).
        """
        fields = {"mode": mode, "precision": precision, "optimizer": optimizer, "steps": steps, "num_gpus": num_gpus,
                  "startup_seconds": startup_seconds, "gpus_per_node": gpus_per_node}  # fmt: skip
        request = _checked({"graph": graph, "gpus": list(gpus), **{k: v for k, v in fields.items() if v is not None}},
                           PredictRequest)  # fmt: skip
        return wire.to_builtins(self._post("/v1/predict", request, PredictResponse))

    def add_sample(self, sample: SampleReport) -> dict[str, Any]:
        """POST /v1/samples with the bearer token; the answer (`wire.SampleAnswer` as plain values): `id`,
        `status` (accepted | unverified), `reason`, `correction`. A quarantined or refused sample raises
        PredictorRequestError (422, 401, 403) with the reason."""
        checked = _checked(wire.to_builtins(sample), SampleReport)  # a struct built in code is not checked yet
        return wire.to_builtins(self._post("/v1/samples", checked, SampleAnswer, authenticated=True))

    def add_collected(
        self, body: CollectedBatch | Mapping[str, Any], *, attempts: int = 1, backoff_seconds: float = 2.0,
        on_retry: Callable[[int, float, PredictorUnavailable], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> dict[str, Any]:  # fmt: skip
        """POST /v1/collected with the bearer token (rows from `offpeak collect`, `collected.batch_body`); the
        answer: rows stored and the GPU type's calibration. A refused batch raises PredictorRequestError at once;
        an unavailable predictor is tried `attempts` times, waiting `backoff_seconds` doubling up to 30 s, so a
        predictor restarting during a collect Job does not cost the Job's GPU time again. Retrying is safe: the
        predictor skips rows of a batch it already stored. A body given as plain values is checked first (nothing is
        sent that the predictor would refuse for its fields: PredictorRequestError 400 naming the field)."""
        batch = body if isinstance(body, CollectedBatch) else _checked(dict(body), CollectedBatch)
        wait = backoff_seconds
        for attempt in range(1, max(1, attempts) + 1):
            try:
                return wire.to_builtins(self._post("/v1/collected", batch, CollectedAnswer, authenticated=True))
            except PredictorUnavailable as e:
                if attempt >= attempts:
                    raise
                if on_retry:
                    on_retry(attempt, wait, e)
                sleep(wait)
                wait = min(2 * wait, 30.0)
        raise AssertionError("unreachable")


def _checked(value: dict[str, Any], kind: type[T]) -> T:
    """Plain values as a wire payload, checked as the predictor will check them: what it would refuse raises
    PredictorRequestError (400, naming the field) here, before anything is sent."""
    try:
        return wire.convert(value, kind)
    except UserError as e:
        raise PredictorRequestError(400, str(e)) from e
