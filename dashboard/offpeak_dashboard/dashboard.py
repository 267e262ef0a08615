"""The offpeak Grafana dashboard: what to look at to trust (or distrust) the predictor and the harvest.

The metric names are the ones the components export (docs/contracts.md); `tests/dashboard` checks that each name
used here is really defined in their code, and the e2e test runs every query against a real Prometheus.
"""

from __future__ import annotations

import json
from typing import Any

from offpeak_dashboard.grafana import Panel, Query, Row, dashboard_json

UID = "offpeak-overview"
TITLE = "offpeak: offline training in idle GPU windows"

# Exported by the operator (offpeak_operator.metrics).
JOB_PREDICTED = "offpeak_job_predicted_seconds"
JOB_ACTUAL = "offpeak_job_actual_seconds"
ERROR_RATIO = "offpeak_prediction_error_ratio"
JOBS = "offpeak_jobs"
REQUEUES = "offpeak_job_requeues_total"
PREDICTOR_CLIENT_LATENCY = "offpeak_predictor_request_seconds"
# Exported by the predictor service (offpeak_predictor.server): its own time per HTTP request.
PREDICTOR_SERVICE_LATENCY = "offpeak_predictor_http_request_seconds"
# Exported by the extender and the eviction controller (offpeak_extender).
EXTENDER_LATENCY = "offpeak_extender_decision_seconds"
EXTENDER_STALE = "offpeak_extender_data_stale"
EVICTIONS = "offpeak_evictions_total"
LOST_GPU_SECONDS = "offpeak_evicted_gpu_seconds_lost_total"
# Exported by the predictor service: what it learns from finished jobs (issue #15).
MODEL_INFO = "offpeak_predictor_model_info"
SAMPLE_OUTCOMES = "offpeak_predictor_sample_outcomes_total"
CORRECTED_KEYS = "offpeak_predictor_corrected_keys"
# Exported by the extender: gang placement of multi-worker jobs.
GANG_RESERVATIONS = "offpeak_extender_gang_reservations_active"
GANG_RESERVED_GPUS = "offpeak_extender_gang_reserved_gpus"
GANG_EVENTS = "offpeak_extender_gang_reservations_total"
# Exported by the node agent (offpeak_agent): GPUs per node, held by online work, held by offline work.
NODE_GPUS = "offpeak_node_gpus"
NODE_ONLINE_GPUS = "offpeak_node_online_gpus"
NODE_OFFLINE_GPUS = "offpeak_node_offline_gpus"

# Per-job gauges are labelled trainingjob/job_namespace/gpu_type/model_family by the operator (names no scrape
# target carries, so Prometheus keeps them as they are); group by exactly those, whatever the scrape adds.
JOB_LABELS = "job_namespace, trainingjob, gpu_type, model_family"


def _quantiles(metric: str, *, by: str = "") -> tuple[Query, ...]:
    group = f"le, {by}" if by else "le"
    suffix = f" {{{{{by}}}}}" if by else ""
    return tuple(
        Query(
            f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket[$__rate_interval])))",
            legend=f"p{int(q * 100)}{suffix}",
        )
        for q in (0.5, 0.9, 0.99)
    )


def _gpu_hours(metric: str, *, minus: str = "") -> str:
    """GPU-hours over the dashboard's time range from gauges counting GPUs (average × range length)."""
    expr = f"sum(avg_over_time({metric}[$__range]))"
    if minus:
        expr = f"({expr} - sum(avg_over_time({minus}[$__range])))"
    return f"{expr} * $__range_s / 3600"


PREDICTIONS = Row(
    "Predictions",
    (
        Panel(
            "Predicted vs actual runtime per job",
            "table",
            (
                Query(f"max by ({JOB_LABELS}) ({JOB_PREDICTED})", instant=True, table=True),
                Query(f"max by ({JOB_LABELS}) ({JOB_ACTUAL})", instant=True, table=True),
                Query(
                    f"max by ({JOB_LABELS}) ({JOB_ACTUAL}) / max by ({JOB_LABELS}) ({JOB_PREDICTED})",
                    instant=True,
                    table=True,
                ),
            ),
            description="Finished jobs: predicted (p50, at admission) and actual job seconds on the GPU type the "
            "job ran on. Ratio = actual / predicted; 1 is perfect, > 1 means the job ran longer than predicted.",
            unit="s",
            width=24,
            height=9,
            transformations=(
                {"id": "merge", "options": {}},
                {
                    "id": "organize",
                    "options": {
                        "excludeByName": {"Time": True},
                        "renameByName": {
                            "Value #A": "predicted",
                            "Value #B": "actual",
                            "Value #C": "actual / predicted",
                        },
                    },
                },
                {"id": "sortBy", "options": {"sort": [{"field": "actual / predicted", "desc": True}]}},
            ),
            overrides=(
                {
                    "matcher": {"id": "byName", "options": "actual / predicted"},
                    "properties": [{"id": "unit", "value": "none"}, {"id": "decimals", "value": 2}],
                },
            ),
            options={"showHeader": True, "cellHeight": "sm"},
        ),
        Panel(
            "Prediction error ratio (actual / predicted) over time",
            "heatmap",
            (
                Query(
                    f"sum by (le) (increase({ERROR_RATIO}_bucket[$__rate_interval]))",
                    legend="{{le}}",
                    heatmap=True,
                ),
            ),
            description="Distribution of actual/predicted job time for jobs finishing in each interval.",
            unit="none",
            options={
                "calculate": False,
                "yAxis": {"axisPlacement": "left", "unit": "none"},
                "cellGap": 1,
                "color": {"mode": "scheme", "scheme": "Oranges", "steps": 64},
                "tooltip": {"mode": "single", "yHistogram": True},
            },
        ),
        Panel(
            "Prediction error ratio quantiles",
            "timeseries",
            _quantiles(ERROR_RATIO),
            description="Quantiles of actual/predicted job time; the band between p50 and p90 should hug 1.",
            unit="none",
        ),
        Panel(
            "Jobs by phase",
            "timeseries",
            (Query(f"sum by (phase) ({JOBS})", legend="{{phase}}"),),
            description="TrainingJobs in each phase (Pending, Analyzing, Predicted, Waiting, Running, Requeued, "
            "Succeeded, Failed).",
            stacked=True,
        ),
        Panel(
            "Requeues",
            "timeseries",
            (Query(f"sum(increase({REQUEUES}[$__rate_interval]))", legend="requeues"),),
            description="TrainingJobs put back in the queue after an eviction.",
        ),
    ),
)

HARVEST = Row(
    "Idle-window harvest",
    (
        Panel(
            "GPU-hours harvested vs idle GPU-hours available",
            "bargauge",
            (
                Query(_gpu_hours(NODE_OFFLINE_GPUS), legend="harvested by offline training", instant=True),
                Query(
                    _gpu_hours(NODE_GPUS, minus=NODE_ONLINE_GPUS),
                    legend="idle (not used by online work)",
                    instant=True,
                ),
            ),
            description="Over the selected time range: GPU-hours offline training pods held, and GPU-hours online "
            "inference left idle. Their ratio is how much of the idle capacity offpeak harvested.",
            unit="h",
            options={"orientation": "horizontal", "displayMode": "basic", "showUnfilled": True},
        ),
        Panel(
            "GPUs: online, offline, idle",
            "timeseries",
            (
                Query(f"sum({NODE_ONLINE_GPUS})", legend="online"),
                Query(f"sum({NODE_OFFLINE_GPUS})", legend="offline (harvested)"),
                Query(
                    f"sum({NODE_GPUS}) - sum({NODE_ONLINE_GPUS}) - sum({NODE_OFFLINE_GPUS})",
                    legend="idle",
                ),
            ),
            description="GPUs across all nodes by who uses them; offpeak's goal is to shrink the idle band without "
            "delaying online work.",
            stacked=True,
        ),
    ),
)

EVICTION = Row(
    "Evictions",
    (
        Panel(
            "Evictions by reason",
            "timeseries",
            (Query(f"sum by (reason) (increase({EVICTIONS}[$__rate_interval]))", legend="{{reason}}"),),
            description="Offline pods evicted because online load came back.",
            stacked=True,
        ),
        Panel(
            "GPU-hours lost to evictions",
            "timeseries",
            (
                Query(f"sum(increase({LOST_GPU_SECONDS}[$__rate_interval])) / 3600", legend="lost in interval"),
                Query(f"sum(increase({LOST_GPU_SECONDS}[$__range])) / 3600", legend="lost over range", instant=True),
            ),
            description="Work thrown away by evictions (GPU-seconds since the last checkpoint, or since the start "
            "for jobs that do not checkpoint), in GPU-hours.",
            unit="h",
        ),
    ),
)

LEARNING = Row(
    "Learning from jobs, and gangs",
    (
        Panel(
            "Model version served",
            "table",
            (Query(f"max by (model_version) ({MODEL_INFO})", instant=True, table=True),),
            description="The predictor model each predictor replica serves (one row per version: two rows during "
            "a roll-out). Every prediction in a TrainingJob's status names its version too.",
            width=6,
            transformations=({"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True}}},),
            options={"showHeader": True, "cellHeight": "sm"},
        ),
        Panel(
            "Measured samples by outcome",
            "timeseries",
            (Query(f"sum by (status) (increase({SAMPLE_OUTCOMES}[$__rate_interval]))", legend="{{status}}"),),
            description="Step times measured by finished (or evicted) jobs, as the predictor judged them: accepted "
            "(the next prediction of that model on that GPU type is corrected), quarantined (implausibly far from "
            "the prediction), and the rest.",
            stacked=True,
            width=6,
        ),
        Panel(
            "Corrected prediction keys",
            "timeseries",
            (Query(f"sum by (level) ({CORRECTED_KEYS})", legend="{{level}}"),),
            description="Keys (a model graph, or a model family, on a GPU type with its precision and batch) that "
            "measured samples correct: how much of the cluster's work the predictor has learned from.",
            width=6,
        ),
        Panel(
            "Gang reservations",
            "timeseries",
            (
                Query(f"max({GANG_RESERVATIONS})", legend="gangs holding places"),
                Query(f"max({GANG_RESERVED_GPUS})", legend="GPUs held back"),
                Query(f"sum by (outcome) (increase({GANG_EVENTS}[$__rate_interval]))", legend="{{outcome}}"),
            ),
            description="Multi-worker jobs placed all-or-nothing: places held for workers not yet bound, and how "
            "reservations ended (complete, gone, expired: a partial gang released after the timeout).",
            width=6,
        ),
    ),
)

LATENCY = Row(
    "Latency",
    (
        Panel(
            "Predictor latency seen by the operator",
            "timeseries",
            _quantiles(PREDICTOR_CLIENT_LATENCY),
            description="Round trip of the operator's calls to the predictor service.",
            unit="s",
            width=8,
        ),
        Panel(
            "Predictor service latency",
            "timeseries",
            _quantiles(PREDICTOR_SERVICE_LATENCY),
            description="Time the predictor service spends per HTTP request (all endpoints).",
            unit="s",
            width=8,
        ),
        Panel(
            "Extender decision latency",
            "timeseries",
            _quantiles(EXTENDER_LATENCY)
            + (Query(f"max({EXTENDER_STALE})", legend="data stale (1 = yes)"),),
            description="Time the scheduler extender takes per filter/prioritize call (kube-scheduler's default "
            "extender timeout is 5 s). 'data stale' is 1 while the extender runs on an old Prometheus snapshot.",
            unit="s",
            width=8,
        ),
    ),
)


def build_dashboard() -> dict[str, Any]:
    """The offpeak dashboard as Grafana JSON."""
    return dashboard_json(
        uid=UID,
        title=TITLE,
        description="Predicted vs actual runtimes, harvest of idle GPU windows, evictions and service latency.",
        tags=("offpeak", "gpu", "training"),
        rows=(PREDICTIONS, LEARNING, HARVEST, EVICTION, LATENCY),
    )


def render(dashboard: dict[str, Any]) -> str:
    """Stable text form: the committed file must be byte-identical to this."""
    return json.dumps(dashboard, indent=2, sort_keys=True) + "\n"
