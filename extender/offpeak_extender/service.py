"""The extender's request logic: parse ExtenderArgs, read the store's snapshot, decide, build the reply.

Transport-free so the HTTP server, the benchmark and tests call the same code. No network call happens here.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from offpeak_core.decisions import DEFAULT_MARGIN, filter_nodes, prioritize_nodes
from offpeak_extender.metrics import (
    BAD_PREDICTION,
    ERROR,
    FILTER,
    MANAGED,
    PASSTHROUGH,
    PRIORITIZE,
    ExtenderMetrics,
    reason_kind,
)
from offpeak_core.model import NodeView
from offpeak_extender.store import ClusterStore, node_info
from offpeak_extender.wire import (
    ExtenderArgs,
    ExtenderFilterResult,
    HostPriority,
    WireError,
    error_filter_result,
    filter_result,
    parse_extender_args,
    priority_list,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecisionSettings:
    margin: float = DEFAULT_MARGIN  # safety margin on the p90 job time


class ExtenderService:
    def __init__(self, *, store: ClusterStore, metrics: ExtenderMetrics, settings: DecisionSettings) -> None:
        self.store = store
        self.metrics = metrics
        self.settings = settings

    def _views(self, args: ExtenderArgs) -> list[NodeView]:
        views, unknown = self.store.views(args.node_names)
        for name in unknown:
            # Not in the cache yet (new node, lagging watch): judge it on what the request says, fits-now only.
            obj: Mapping[str, Any] = (args.node_objects or {}).get(name) or {"metadata": {"name": name}}
            info = node_info(obj)
            total = info.gpus_total if args.node_objects is not None else max(info.gpus_total, args.pod.gpus)
            views.append(NodeView(name, info.gpu_type, total, total, None, None, True))
        return views

    def filter(self, body: Any) -> ExtenderFilterResult:
        try:
            args = parse_extender_args(body)
        except WireError as e:
            self.metrics.requests.labels(FILTER, ERROR).inc()
            return error_filter_result(f"offpeak extender: {e}")
        if not args.managed:
            self.metrics.requests.labels(FILTER, PASSTHROUGH).inc()
            return filter_result(args=args, passed=args.node_names, failed={})
        if args.prediction_error:
            log.warning("pod %s: %s; scheduling it runtime-blind", args.pod.key, args.prediction_error)
            self.metrics.requests.labels(FILTER, BAD_PREDICTION).inc()
        result = filter_nodes(pod=args.pod, nodes=self._views(args), now=self.store.clock(),
                              margin=self.settings.margin)
        kinds = Counter(reason_kind(r) for r in result.failed.values())
        for kind, n in kinds.items():
            self.metrics.filtered_out.labels(kind).inc(n)
        self.metrics.requests.labels(FILTER, MANAGED).inc()
        passed = set(result.passed)
        ordered = [n for n in args.node_names if n in passed]  # a subset of the names sent, in their order
        return filter_result(args=args, passed=ordered, failed=result.failed)

    def prioritize(self, body: Any) -> list[HostPriority]:
        try:
            args = parse_extender_args(body)
        except WireError:
            self.metrics.requests.labels(PRIORITIZE, ERROR).inc()
            return []
        if not args.managed:
            self.metrics.requests.labels(PRIORITIZE, PASSTHROUGH).inc()
            return priority_list({}, args.node_names)
        scores = prioritize_nodes(pod=args.pod, nodes=self._views(args), now=self.store.clock(),
                                  margin=self.settings.margin)
        self.metrics.requests.labels(PRIORITIZE, MANAGED).inc()
        return priority_list(scores, args.node_names)
