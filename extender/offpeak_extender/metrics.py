"""Prometheus metrics of the extender and the eviction controller, on an injectable registry."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from offpeak_core.evictions import EVICTION_REASONS
from offpeak_core.gangs import END_OUTCOMES

_REASON_KINDS = (
    ("needs ", "gpus_not_free_now"),
    ("window ends within", "window_too_short"),
    ("no idle window", "no_window"),
    ("unknown node", "unknown_node"),
    ("gang of ", "gang_no_room"),  # a gang's workers do not all fit: no node is admitted for any of them
    ("gang ", "gang_place_elsewhere"),  # a gang worker goes to its reserved place, not here
    ("elastic gang ", "gang_waits_to_join"),  # an elastic gang runs narrower now; this worker joins later
)


REASON_KIND_OTHER = "other"
# Every value offpeak_extender_filtered_out_total{reason} can take.
FILTER_REASON_KINDS = (*(kind for _, kind in _REASON_KINDS), REASON_KIND_OTHER)
# Every (verb, outcome) of offpeak_extender_requests_total (offpeak_extender.service).
FILTER, PRIORITIZE = "filter", "prioritize"
MANAGED, PASSTHROUGH, ERROR, BAD_PREDICTION = "managed", "passthrough", "error", "bad-prediction"
# Answered without a decision by the HTTP layer: over the body limit (413), past the deadline or after a bug
# (both fail-open: every node passes, scores 0).
TOO_LARGE, DEADLINE, INTERNAL_ERROR = "too-large", "deadline", "internal-error"
_TRANSPORT_OUTCOMES = (TOO_LARGE, DEADLINE, INTERNAL_ERROR)
# Every value of offpeak_extender_gang_reservations_total{outcome}: made, then ended one of END_OUTCOMES ways.
GANG_CREATED = "created"
GANG_OUTCOMES = (GANG_CREATED, *END_OUTCOMES)
REQUEST_OUTCOMES = {FILTER: (MANAGED, PASSTHROUGH, ERROR, BAD_PREDICTION, *_TRANSPORT_OUTCOMES),
                    PRIORITIZE: (MANAGED, PASSTHROUGH, ERROR, *_TRANSPORT_OUTCOMES)}


def reason_kind(reason: str) -> str:
    """Collapse a human reason (which carries numbers) to a low-cardinality metric label."""
    for prefix, kind in _REASON_KINDS:
        if reason.startswith(prefix):
            return kind
    return REASON_KIND_OTHER


_PREFIX_CHARS = max(len(prefix) for prefix, _ in _REASON_KINDS)


def count_reason_kinds(reasons: Iterable[str]) -> Tally[str]:
    """How many reasons of each kind: `reason_kind` once per distinct reason, not once per node (hot path: the
    filter's nodes share a few reason strings, so counting them is one pass in C)."""
    tally = Tally(reasons)
    return count_grouped_reason_kinds(list(tally), list(tally.values()))


def count_grouped_reason_kinds(reasons: Sequence[str], nodes: Sequence[int]) -> Tally[str]:
    """`count_reason_kinds` of a filter answer given as distinct reasons and how many nodes got each (`reason_kind`
    once per distinct prefix: reasons differ mostly in their numbers, further on)."""
    heads: Tally[str] = Tally()
    for reason, n in zip(reasons, nodes):
        heads[reason[:_PREFIX_CHARS]] += n
    out: Tally[str] = Tally()
    for head, n in heads.items():
        if n:
            out[reason_kind(head)] += n
    return out


@dataclass(frozen=True)
class ExtenderMetrics:
    decision_seconds: Histogram
    filtered_out: Counter
    requests: Counter
    data_stale: Gauge
    history_refresh_seconds: Histogram
    nodes_known: Gauge
    gang_reservations: Gauge
    gang_reserved_gpus: Gauge
    gang_events: Counter
    goodput_windows: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry) -> ExtenderMetrics:
        metrics = cls(
            decision_seconds=Histogram(
                "offpeak_extender_decision_seconds", "Time to parse, decide and serialise one extender call.",
                ["verb"], registry=registry,
                buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
            ),
            filtered_out=Counter(
                "offpeak_extender_filtered_out_total", "Nodes rejected by the filter, by kind of reason.",
                ["reason"], registry=registry,
            ),
            requests=Counter(
                "offpeak_extender_requests_total", "Extender calls by verb and outcome (managed, passthrough, error, "
                "too-large, deadline, internal-error).",
                ["verb", "outcome"], registry=registry,
            ),
            data_stale=Gauge(
                "offpeak_extender_data_stale", "1 when demand history is missing or old: decisions degrade to fits-now.",
                registry=registry,
            ),
            history_refresh_seconds=Histogram(
                "offpeak_extender_history_refresh_seconds", "Time to pull demand history and refit forecasts.",
                registry=registry,
            ),
            nodes_known=Gauge("offpeak_extender_nodes", "GPU nodes in the extender's cache.", registry=registry),
            gang_reservations=Gauge(
                "offpeak_extender_gang_reservations_active",
                "Gangs holding reserved places now (as of the last filter call or scrape).", registry=registry,
            ),
            gang_reserved_gpus=Gauge(
                "offpeak_extender_gang_reserved_gpus", "GPUs held back for gang workers not yet bound (as of the last "
                "filter call or scrape).", registry=registry,
            ),
            gang_events=Counter(
                "offpeak_extender_gang_reservations_total", "Gang reservations made (created) and ended, by how "
                "(complete: all workers bound, gone: the gang's pods were deleted, expired: the timeout passed).",
                ["outcome"], registry=registry,
            ),
            goodput_windows=Gauge(
                "offpeak_extender_goodput_windows", "Idle windows in the expected-goodput ledger: followed to their end "
                "or the horizon (observed), or still open (0 while goodput admission is off).", ["state"],
                registry=registry,
            ),
        )
        for state in ("observed", "open"):
            metrics.goodput_windows.labels(state)
        # Known label values exported at 0 from the start, so increase()/rate() see the first event.
        for kind in FILTER_REASON_KINDS:
            metrics.filtered_out.labels(kind)
        for outcome in GANG_OUTCOMES:
            metrics.gang_events.labels(outcome)
        for verb, outcomes in REQUEST_OUTCOMES.items():
            metrics.decision_seconds.labels(verb)
            for outcome in outcomes:
                metrics.requests.labels(verb, outcome)
        return metrics


@dataclass(frozen=True)
class EvictorMetrics:
    evictions: Counter
    gpu_seconds_lost: Counter
    failures: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> EvictorMetrics:
        metrics = cls(
            evictions=Counter("offpeak_evictions", "Offline pods evicted for online work, by reason.", ["reason"],
                              registry=registry),
            gpu_seconds_lost=Counter("offpeak_evicted_gpu_seconds_lost",
                                     "GPU-seconds of offline work lost to evictions (since last checkpoint or start).",
                                     registry=registry),
            failures=Counter("offpeak_eviction_failures", "Evictions that the API refused or that failed.",
                             ["reason"], registry=registry),
        )
        for reason in EVICTION_REASONS:  # exported at 0 from the start, so increase() sees the first eviction
            metrics.evictions.labels(reason)
            metrics.failures.labels(reason)
        return metrics
