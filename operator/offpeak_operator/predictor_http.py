"""The operator's door to the predictor service: `offpeak_predictor.client.PredictorClient` plus metrics.

Every failure (unreachable, 5xx, a rejected request) becomes `PredictorUnavailable`, because the operator's
answer is the same for all of them: fall back and say why. Blocking calls; kopf runs handlers in threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from offpeak_predictor.client import PredictorClient, PredictorRequestError
from offpeak_predictor.client import PredictorUnavailable as ClientUnavailable
from offpeak_predictor.wire import SampleReport

from offpeak_operator.metrics import OperatorMetrics

__all__ = ["PredictorHTTP", "PredictorUnavailable", "SampleReport"]  # SampleReport: the one sample callers build

T = TypeVar("T")


class PredictorUnavailable(RuntimeError):
    """No usable answer from the predictor; the message says why (shown in the job's condition)."""


class PredictorHTTP:
    def __init__(self, url: str, *, timeout_seconds: float, metrics: OperatorMetrics,
                 client: PredictorClient | None = None, token_file: str | None = None) -> None:
        self.url = url
        self.client = client or PredictorClient(url, timeout=timeout_seconds, token_file=token_file)
        self.metrics = metrics

    def _call(self, endpoint: str, fn: Callable[[], T]) -> T:
        started = time.perf_counter()
        try:
            return fn()
        except (ClientUnavailable, PredictorRequestError) as e:
            self.metrics.predictor_failures_total.labels(endpoint=endpoint).inc()
            raise PredictorUnavailable(f"predictor {endpoint}: {e}") from e
        finally:
            self.metrics.predictor_request_seconds.labels(endpoint=endpoint).observe(time.perf_counter() - started)

    def predict(self, *, graph: dict[str, Any], gpus: list[str], precision: str, optimizer: str, steps: int,
                num_gpus: int, startup_seconds: float | None = None,
                gpus_per_node: int | None = None) -> dict[str, Any]:
        return self._call("/v1/predict", lambda: self.client.predict(
            graph, gpus, mode="train", precision=precision, optimizer=optimizer, steps=steps, num_gpus=num_gpus,
            startup_seconds=startup_seconds, gpus_per_node=gpus_per_node))

    def report_sample(self, sample: SampleReport) -> dict[str, Any]:
        """POST the measured step time of one attempt (with the token); the predictor's answer (id, status). A
        sample the predictor would refuse for its fields is refused here, before it is sent."""
        return self._call("/v1/samples", lambda: self.client.add_sample(sample))
