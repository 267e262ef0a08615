"""The extender's request logic: parse ExtenderArgs, read the store's snapshot, decide, build the reply.

Transport-free so the HTTP server, the benchmark and tests call the same code. No network call happens here.
A request runs as an `Attempt` with a deadline: the worker thread checks it between steps, and whoever answers
at the deadline uses `fail_open` (every node passes, every score 0: what the extender does for any pod it cannot
judge), so a slow decision never blocks a pod.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import numpy as np

from offpeak_core.decisions import DEFAULT_MARGIN, FilterColumns, score_arrays
from offpeak_core.goodput import GoodputAdmission
from offpeak_core.model import FilterResult, NodeView, PodRequest
from offpeak_core.nodearrays import NodeArrays
from offpeak_extender.gangs import GangPlacer, GangSettings
from offpeak_extender.goodputfeed import GoodputFeed
from offpeak_extender.metrics import (
    BAD_PREDICTION,
    ERROR,
    FILTER,
    MANAGED,
    PASSTHROUGH,
    PRIORITIZE,
    ExtenderMetrics,
    count_grouped_reason_kinds,
    count_reason_kinds,
)
from offpeak_extender.recent import RecentRequests, parse_request
from offpeak_extender.store import ClusterStore, node_info
from offpeak_extender.wire import (
    ExtenderArgs,
    ExtenderFilterResult,
    HostPriority,
    NamesFilterReply,
    NotJSON,
    WireError,
    encode_filter_result,
    encode_priorities,
    encode_scores,
    error_filter_result,
    filter_result,
    json_strings,
    parse_extender_args,
    priority_list,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecisionSettings:
    margin: float = DEFAULT_MARGIN  # safety margin on the p90 job time


class DeadlineExceeded(Exception):
    """The request ran past its deadline (or was abandoned): its answer is the fail-open one."""


@dataclass
class Attempt:
    """One request's decision, shared by the event loop (which answers at the deadline) and the worker thread."""

    deadline: float  # time.monotonic() by which the answer is due
    args: ExtenderArgs | None = None  # set by the worker once parsed, so a fail-open answer can name the nodes
    abandoned: bool = False  # set by the event loop once it answered without the worker

    @classmethod
    def within(cls, seconds: float) -> Attempt:
        return cls(deadline=time.monotonic() + seconds)

    def check(self) -> None:
        """Raise `DeadlineExceeded` when the answer is no longer wanted (called between steps)."""
        if self.abandoned or time.monotonic() > self.deadline:
            raise DeadlineExceeded


def fail_open(verb: str, args: ExtenderArgs | None, reason: str) -> bytes:
    """The answer when no decision is possible in time: every node passes, every score is 0 (neutral).

    Without parsed arguments the filter answers `Error` (an ignorable extender is then skipped by the scheduler)
    and prioritize an empty list (no scores).
    """
    if verb == FILTER:
        if args is None:
            return encode_filter_result(error_filter_result(f"offpeak extender: {reason}; decide without offpeak"))
        return encode_filter_result(filter_result(args=args, passed=args.node_names, failed={}))
    return encode_priorities({}, args.node_names if args is not None else ())


class ExtenderService:
    def __init__(self, *, store: ClusterStore, metrics: ExtenderMetrics, settings: DecisionSettings,
                 gangs: GangSettings | None = None, goodput: GoodputFeed | None = None) -> None:
        self.store = store
        self.metrics = metrics
        self.settings = settings
        self.goodput = goodput  # None: expected-goodput admission is off
        self.gangs = GangPlacer(store=store, metrics=metrics, settings=gangs or GangSettings())
        self._recent = RecentRequests()  # pods and node-name lists of recent requests, by their JSON text

    def answer(self, verb: str, raw: bytes, attempt: Attempt | None = None) -> bytes:
        """A whole call: JSON bytes in, JSON bytes out (what the HTTP handler runs in its worker thread)."""
        try:
            args = self._parse(verb, partial(parse_request, raw, self._recent), attempt)
        except WireError as e:
            return _refused(verb, e)
        return self._decide(verb, args, attempt)

    def answer_now(self, verb: str, raw: bytes, attempt: Attempt | None = None) -> bytes | None:
        """`answer`, when it is known to be cheap, else None (then `answer` in a worker thread).

        Cheap, and so answered without a worker (the HTTP handler calls this on its event loop for small bodies,
        saving two thread hand-offs, ~0.1 ms each): a body that is not valid ExtenderArgs, a pod offpeak does not
        manage, and the usual managed pod, alone (no gang) while no GPUs are reserved for gangs, over a name list
        whose columns the store keeps (`ClusterStore.kept_arrays`: kube-scheduler sends the same lists again and
        again; a few rows are patched after a pod event). What may rebuild views, plan a gang or wait for a lock
        is left to the worker, whose deadline answers fail-open.
        """
        try:
            args = self._parse(verb, partial(parse_request, raw, self._recent), attempt)
        except WireError as e:
            return _refused(verb, e)
        if not args.managed:
            return self._decide(verb, args, attempt)
        if args.gang is not None or args.node_objects is not None or args.names_key is None or len(self.gangs.table):
            return None
        arrays = self.store.kept_arrays(args.names_key, args.node_names)
        if arrays is None:
            return None
        return self._decide(verb, args, attempt, arrays)

    def _decide(self, verb: str, args: ExtenderArgs, attempt: Attempt | None, arrays: NodeArrays | None = None
                ) -> bytes:
        """The reply to `args`; `arrays`: their nodes' columns, when the caller has them (every name known)."""
        if verb == FILTER:
            reply = self._filter(args, attempt, arrays)
            return reply.encode() if isinstance(reply, NamesFilterReply) else encode_filter_result(reply)
        return self._scores(args, attempt, arrays).encode()

    def _parse(self, verb: str, parse: Callable[[], ExtenderArgs], attempt: Attempt | None) -> ExtenderArgs:
        try:
            args = parse()
        except WireError:
            self.metrics.requests.labels(verb, ERROR).inc()
            raise
        if attempt is not None:
            attempt.args = args
            attempt.check()
        return args

    def _admission(self) -> GoodputAdmission | None:
        return self.goodput.admission() if self.goodput is not None else None

    def _unknown_views(self, args: ExtenderArgs, unknown: list[str]) -> list[NodeView]:
        """Nodes not in the cache yet (new node, lagging watch): judged on what the request says, fits-now only."""
        views = []
        for name in unknown:
            obj: Mapping[str, Any] = (args.node_objects or {}).get(name) or {"metadata": {"name": name}}
            info = node_info(obj)
            total = info.gpus_total if args.node_objects is not None else max(info.gpus_total, args.pod.gpus)
            views.append(NodeView(name, info.gpu_type, total, total, None, None, True))
        return views

    def filter(self, body: Any, attempt: Attempt | None = None) -> ExtenderFilterResult:
        """The filter's answer to an ExtenderArgs body already decoded."""
        try:
            args = self._parse(FILTER, partial(parse_extender_args, body), attempt)
        except WireError as e:
            return error_filter_result(f"offpeak extender: {e}")
        reply = self._filter(args, attempt)
        return reply.result() if isinstance(reply, NamesFilterReply) else reply

    def _filter(self, args: ExtenderArgs, attempt: Attempt | None, kept: NodeArrays | None = None
                ) -> ExtenderFilterResult | NamesFilterReply:
        """The filter's answer: as columns in the usual case (`_columns_reply`), else as the wire's dict. `kept`:
        the columns of `args`' names (every name known), when the caller has them."""
        if not args.managed:
            self.metrics.requests.labels(FILTER, PASSTHROUGH).inc()
            return filter_result(args=args, passed=args.node_names, failed={})
        if args.prediction_error:
            log.warning("pod %s: %s; scheduling it runtime-blind", args.pod.key, args.prediction_error)
            self.metrics.requests.labels(FILTER, BAD_PREDICTION).inc()
        if args.gang_error:
            log.warning("pod %s: %s; placing it alone, not as part of a gang", args.pod.key, args.gang_error)
        arrays: NodeArrays | None
        arrays, unknown = self._node_arrays(args, kept)
        views = arrays.views
        if args.node_objects is not None and unknown:
            views = (*views, *self._unknown_views(args, unknown))
            arrays = None  # rare (nodes the cache has not seen yet): the per-node path judges them with the rest
        # (names only: an unknown node has no GPU count to check, so it passes fits-now; added below)
        if attempt is not None:
            attempt.check()
        now = self.store.clock()
        if args.gang is not None:
            result = self.gangs.filter_worker(pod=args.pod, gang=args.gang, views=views, now=now,
                                              margin=self.settings.margin,
                                              goodput=None if self.goodput is None else self.goodput.admission)
        else:
            # (an unreadable prediction takes the dict path: `filter_result` adds it to the nodes' reasons)
            if args.node_objects is None and not unknown and arrays is not None and arrays.distinct and \
                    not args.prediction_error:
                columns = self.gangs.filter_other_columns(pod=args.pod, arrays=arrays, now=now,
                                                          margin=self.settings.margin, goodput=self._admission())
                if columns is not None:
                    return self._columns_reply(arrays, columns, attempt)
            result = self.gangs.filter_other(pod=args.pod, views=views, now=now, margin=self.settings.margin,
                                             arrays=arrays, goodput=self._admission())
        if attempt is not None:
            attempt.check()
        self._count_filtered(count_reason_kinds(result.failed.values()))
        self.metrics.requests.labels(FILTER, MANAGED).inc()
        if len(result.passed) + len(result.failed) == len(args.node_names) and not unknown:
            passed: tuple[str, ...] | list[str] = result.passed  # views come back in request order
        else:
            failed = result.failed
            passed = [n for n in args.node_names if n not in failed]  # a subset of the names sent, in their order
        return filter_result(args=args, passed=passed, failed=result.failed)

    def _node_arrays(self, args: ExtenderArgs, kept: NodeArrays | None) -> tuple[NodeArrays, list[str]]:
        """The columns of `args`' names and the names the store does not know: `kept` when the caller has them
        (`answer_now`: every name known), else the store's."""
        return (kept, []) if kept is not None else self.store.node_arrays(args.node_names, key=args.names_key)

    def _columns_reply(self, arrays: NodeArrays, columns: FilterColumns, attempt: Attempt | None) -> NamesFilterReply:
        """The usual answer (names only, each known to the store and listed once, no GPUs reserved for gangs), kept
        as columns: its reply is joined from the store's quoted names and a few reasons, no dict per node."""
        if attempt is not None:
            attempt.check()
        nodes = np.bincount(columns.reason_of, minlength=len(columns.reasons)).tolist()  # per reason
        self._count_filtered(count_grouped_reason_kinds(columns.reasons, nodes))
        self.metrics.requests.labels(FILTER, MANAGED).inc()
        return NamesFilterReply(names=arrays.names, json_names=arrays.json_names, fits=columns.fits,
                                failing=columns.failing, reason_of=columns.reason_of, reasons=columns.reasons)

    def _count_filtered(self, kinds: Mapping[str, int]) -> None:
        for kind, n in kinds.items():
            self.metrics.filtered_out.labels(kind).inc(n)

    def judge(self, pod: PodRequest) -> tuple[FilterResult, list[NodeView]]:
        """The filter's answer for `pod` over every node the cache knows, reserving nothing (what the Kueue
        admission check asks before a workload's pods exist), with the views it judged."""
        arrays, _ = self.store.node_arrays(self.store.node_names())
        result = self.gangs.filter_other(pod=pod, views=arrays.views, now=self.store.clock(),
                                         margin=self.settings.margin, arrays=arrays, goodput=self._admission())
        return result, list(arrays.views)

    def prioritize(self, body: Any, attempt: Attempt | None = None) -> list[HostPriority]:
        """The prioritize answer to an ExtenderArgs body already decoded."""
        try:
            args = self._parse(PRIORITIZE, partial(parse_extender_args, body), attempt)
        except WireError:
            return []
        got = self._scores(args, attempt)
        return priority_list(dict(zip(got.names, got.scores.tolist())), got.names)

    def _scores(self, args: ExtenderArgs, attempt: Attempt | None, kept: NodeArrays | None = None) -> _Scores:
        if not args.managed:
            self.metrics.requests.labels(PRIORITIZE, PASSTHROUGH).inc()
            return _Scores(args.node_names, np.zeros(len(args.node_names), dtype=np.int64))
        arrays, unknown = self._node_arrays(args, kept)  # unknown: score 0
        if attempt is not None:
            attempt.check()
        now = self.store.clock()
        if args.gang is None:  # GPUs reserved for gangs are taken, as in the filter (a gang worker has its place)
            arrays = arrays.withhold(self.gangs.withheld(now))
        scores = score_arrays(pod=args.pod, nodes=arrays, now=now, margin=self.settings.margin,
                              goodput=None if args.gang is not None else self._admission())
        if attempt is not None:
            attempt.check()
        self.metrics.requests.labels(PRIORITIZE, MANAGED).inc()
        if unknown:  # the columns hold the known names only
            by_name = dict(zip(arrays.names.tolist(), scores.tolist()))
            return _Scores(args.node_names, np.array([by_name.get(n, 0) for n in args.node_names], dtype=np.int64))
        return _Scores(args.node_names, scores, arrays.json_names.tolist())


def _refused(verb: str, error: WireError) -> bytes:
    """The reply to a body that is not valid ExtenderArgs: the filter's `Error` naming the field, no scores."""
    if verb != FILTER:
        return encode_priorities({}, ())
    return encode_filter_result(error_filter_result(f"offpeak extender: {_request_is(error)}"))


def _request_is(error: WireError) -> str:
    """What a request's error says in a filter reply: what the body is when it is not JSON, else the field."""
    return f"request is {error}" if isinstance(error, NotJSON) else str(error)


class _Scores(NamedTuple):
    """A prioritize answer: the names asked about, in order, and each one's score; the names as JSON strings too
    when the store's columns have them (every name known), else they are quoted when encoding."""

    names: Sequence[str]
    scores: np.ndarray
    json_names: list[str] | None = None

    def encode(self) -> bytes:
        json_names = self.json_names if self.json_names is not None else json_strings(self.names)
        return encode_scores(json_names, self.scores)
