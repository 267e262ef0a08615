"""Demand history for the forecaster: Prometheus range queries, or the store's own samples, refreshed in the
background so the request path never waits on the network."""

from __future__ import annotations

import gc
import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from offpeak_extender import heap
from offpeak_extender.goodputfeed import GoodputFeed
from offpeak_extender.metrics import ExtenderMetrics
from offpeak_extender.store import ClusterStore

log = logging.getLogger(__name__)

ONLINE_QUERY = "max by (node) (offpeak_node_online_gpus)"
MAX_POINTS_PER_QUERY = 10_000  # Prometheus refuses more than 11,000 points per series


class HistoryError(RuntimeError):
    """History could not be fetched; forecasts go stale and decisions degrade to fits-now."""


History = Mapping[str, tuple[np.ndarray, np.ndarray]]


class HistorySource(Protocol):
    def fetch(self, *, start: float, end: float, step: float) -> History: ...


def parse_matrix(payload: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Prometheus `query_range` JSON -> {node: (times, values)}; NaN strings survive as NaN."""
    if not isinstance(payload, dict) or payload.get("status") != "success":
        raise HistoryError(f"Prometheus query failed: {str(payload)[:200]}")
    data = payload.get("data") or {}
    if data.get("resultType") != "matrix":
        raise HistoryError(f"expected a matrix result, got {data.get('resultType')!r}")
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for series in data.get("result") or []:
        node = (series.get("metric") or {}).get("node")
        values = series.get("values") or []
        if not node or not values:
            continue
        t = np.array([float(ts) for ts, _ in values])
        v = np.array([float(x) for _, x in values])
        if node in out:
            t0, v0 = out[node]
            t, v = np.concatenate([t0, t]), np.concatenate([v0, v])
        out[node] = (t, v)
    return out


def merge(parts: list[dict[str, tuple[np.ndarray, np.ndarray]]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
    for part in parts:
        for node, (t, v) in part.items():
            ts, vs = out.setdefault(node, ([], []))
            ts.append(t)
            vs.append(v)
    return {n: (np.concatenate(ts), np.concatenate(vs)) for n, (ts, vs) in out.items()}


@dataclass
class PrometheusHistory:
    """Range queries of `offpeak_node_online_gpus{node}`, chunked under Prometheus's points limit."""

    url: str
    query: str = ONLINE_QUERY
    timeout_seconds: float = 10.0

    def _get(self, params: dict[str, str]) -> Any:
        url = f"{self.url.rstrip('/')}/api/v1/query_range?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_seconds) as resp:  # noqa: S310 - operator's URL
                return json.load(resp)
        except (urllib.error.URLError, OSError, json.JSONDecodeError) as e:
            raise HistoryError(f"Prometheus at {self.url} unreachable or bad reply: {e}") from e

    def fetch(self, *, start: float, end: float, step: float) -> History:
        parts = []
        chunk = step * MAX_POINTS_PER_QUERY
        t = start
        while t < end:
            stop = min(end, t + chunk)
            parts.append(parse_matrix(self._get(
                {"query": self.query, "start": f"{t:.3f}", "end": f"{stop:.3f}", "step": f"{step:g}"})))
            t = stop + step
        return merge(parts)


@dataclass
class LocalHistory:
    """The store's own per-step samples of online GPU requests (no Prometheus, e.g. the e2e demo)."""

    store: ClusterStore

    def fetch(self, *, start: float, end: float, step: float) -> History:
        return self.store.local_history()


# A pool whose nodes or GPUs changed keeps its nodes on their own windows until it is refitted: the refresher refits
# early for it, but no sooner than this after its last refresh (a refit of thousands of nodes takes seconds), and
# looks for such a change at least this often.
POOL_REFIT_GAP_SECONDS = 10.0
POOL_CHANGE_POLL_SECONDS = 1.0


class Refresher:
    """Background thread: sample online usage every step, refit forecasts every `refresh_seconds`, and soon after
    a pool's nodes change (`ClusterStore.pools_changed`)."""

    def __init__(self, *, store: ClusterStore, source: HistorySource, metrics: ExtenderMetrics | None,
                 refresh_seconds: float = 60.0, freeze_gc: bool = False, goodput: GoodputFeed | None = None,
                 trim_heap: bool = False) -> None:
        self.freeze_gc = freeze_gc  # move the fresh long-lived views out of the GC's scans (cuts p99 latency)
        self.trim_heap = trim_heap  # hand the refit's freed memory back to the kernel (`heap.trim_heap`)
        self.goodput = goodput  # its window ledger is fed at every sample step
        self.store = store
        self.source = source
        self.metrics = metrics
        self.refresh_seconds = refresh_seconds
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None

    def refresh_once(self) -> None:
        s = self.store.settings
        self.store.pools_changed.clear()  # this refit takes in every pool change made before it
        now = self.store.clock()
        started = time.perf_counter()
        try:
            history = self.source.fetch(start=now - s.history_seconds, end=now, step=s.step_seconds)
        except HistoryError as e:
            log.warning("history refresh failed: %s (decisions degrade to fits-now)", e)
            self.store.mark_history_failed(str(e))
        else:
            if not isinstance(self.source, LocalHistory):
                # nodes Prometheus has no series for (no agent yet): use the store's own pod-based samples
                local = self.store.local_history()
                history = {**{n: v for n, v in local.items() if n not in history}, **history}
            self.store.set_history(history, now=now)
            del history  # the refit's input: garbage from here on, so the trim below can hand it back
            if self.freeze_gc:
                gc.collect()
                gc.freeze()
            if self.trim_heap:
                heap.trim_heap()
        finally:
            if self.metrics is not None:
                self.metrics.history_refresh_seconds.observe(time.perf_counter() - started)
                self.metrics.data_stale.set(1 if self.store.data_stale() else 0)

    def _feed_goodput(self) -> None:
        if self.goodput is None:
            return
        try:
            self.goodput.tick()
        except Exception:  # noqa: BLE001 - the ledger must never stop the forecasts' refresh
            log.exception("goodput window ledger update failed; goodput admission keeps its last table")
            return
        if self.metrics is not None:
            observed, still_open = self.goodput.counts()
            self.metrics.goodput_windows.labels("observed").set(observed)
            self.metrics.goodput_windows.labels("open").set(still_open)

    def refresh_due(self, *, now: float, next_refresh: float, last_refresh: float) -> bool:
        """Whether to refit at `now` (monotonic seconds): the period is up, or a pool changed and the last refit is
        at least `POOL_REFIT_GAP_SECONDS` (at most the period) old."""
        if now >= next_refresh:
            return True
        gap = min(POOL_REFIT_GAP_SECONDS, self.refresh_seconds)
        return self.store.pools_changed.is_set() and now - last_refresh >= gap

    def run(self) -> None:
        step = self.store.settings.step_seconds
        poll = POOL_CHANGE_POLL_SECONDS if self.store.pools is not None else float("inf")
        next_refresh = 0.0
        next_sample = 0.0
        last_refresh = float("-inf")
        while not self.stop_event.is_set():
            if self.store.synced:
                if time.monotonic() >= next_sample:  # one sample per step keeps the whole history in the buffer
                    self.store.record_local_sample()
                    self._feed_goodput()
                    next_sample = time.monotonic() + step
                if self.refresh_due(now=time.monotonic(), next_refresh=next_refresh, last_refresh=last_refresh):
                    last_refresh = time.monotonic()
                    self.refresh_once()
                    next_refresh = time.monotonic() + self.refresh_seconds
            self.stop_event.wait(max(0.05, min(next_sample, next_refresh, time.monotonic() + poll) - time.monotonic())
                                 if self.store.synced else 0.5)

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, name="history-refresher", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
