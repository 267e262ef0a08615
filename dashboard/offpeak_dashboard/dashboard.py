"""The offpeak Grafana dashboard: what to look at to trust (or distrust) the predictor and the harvest.

The metric names are the ones the components export (docs/contracts.md); `tests/dashboard` checks that each name
used here is really defined in their code, and the e2e test runs every query against a real Prometheus.
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.models.dashboard import VariableModel
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from offpeak_dashboard.grafana import (
    Query,
    Row,
    bargauge_panel,
    dashboard_json,
    datasource_variable,
    heatmap_panel,
    label_variable,
    scatter_panel,
    table_panel,
    timeseries_panel,
)

UID = "offpeak-overview"
TITLE = "offpeak: offline training in idle GPU windows"

# Exported by the operator (offpeak_operator.metrics).
JOB_PREDICTED = "offpeak_job_predicted_seconds"
JOB_ACTUAL = "offpeak_job_actual_seconds"
ERROR_RATIO = "offpeak_prediction_error_ratio"
ETA_ERROR_RATIO = "offpeak_eta_error_ratio"
JOBS = "offpeak_jobs"
JOBS_WAITING = "offpeak_jobs_waiting"
REQUEUES = "offpeak_job_requeues_total"
PREDICTOR_CLIENT_LATENCY = "offpeak_predictor_request_seconds"
# Exported by the predictor service (offpeak_predictor.server): its own time per HTTP request.
PREDICTOR_SERVICE_LATENCY = "offpeak_predictor_http_request_seconds"
# Exported by the extender and the eviction controller (offpeak_extender).
EXTENDER_LATENCY = "offpeak_extender_decision_seconds"
EXTENDER_STALE = "offpeak_extender_data_stale"
EXTENDER_FILTERED_OUT = "offpeak_extender_filtered_out_total"
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

# Template variables and the label each filters (the operator's metrics carry these labels).
NAMESPACE_FILTER = 'job_namespace=~"$namespace"'
GPU_FILTER = 'gpu_type=~"$gpu_type"'
FAMILY_FILTER = 'model_family=~"$model_family"'
JOB_FILTER = f"{{{NAMESPACE_FILTER}, {GPU_FILTER}, {FAMILY_FILTER}}}"
ERROR_FILTER = f"{{{GPU_FILTER}, {FAMILY_FILTER}}}"
# Jobs finish now and then, not every scrape: the error over time is that of the jobs finished in the last hour.
ERROR_WINDOW = "1h"

# Titles of the main panels (`offpeak dashboard render` draws these from the same queries).
SCATTER = "Predicted vs actual runtime"
ERROR_BY_GPU = "Prediction error by GPU type over time"
ERROR_BY_FAMILY = "Prediction error by model family over time"
WAITING = "Jobs waiting, and why"
HARVESTED = "GPU-hours harvested vs idle GPU-hours available"
EVICTED = "Evictions by reason"
ETA_DRIFT = "ETA drift: actual / expected end"


def _quantiles(metric: str) -> tuple[Query, ...]:
    return tuple(
        Query(f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket[$__rate_interval])))",
              legend=f"p{int(q * 100)}")
        for q in (0.5, 0.9, 0.99)
    )


def _median_error_by(label: str) -> Query:
    return Query(f"histogram_quantile(0.5, sum by (le, {label}) (rate({ERROR_RATIO}_bucket{ERROR_FILTER}"
                 f"[{ERROR_WINDOW}])))", legend=f"{{{{{label}}}}}")


def _gpu_hours(metric: str, *, minus: str = "") -> str:
    """GPU-hours over the dashboard's time range from gauges counting GPUs (average × range length)."""
    expr = f"sum(avg_over_time({metric}[$__range]))"
    if minus:
        expr = f"({expr} - sum(avg_over_time({minus}[$__range])))"
    return f"{expr} * $__range_s / 3600"


PREDICTED_BY_JOB = f"max by ({JOB_LABELS}) ({JOB_PREDICTED}{JOB_FILTER})"
ACTUAL_BY_JOB = f"max by ({JOB_LABELS}) ({JOB_ACTUAL}{JOB_FILTER})"
_TABLE = PromQueryFormat.TABLE

def _predictions() -> Row:
    return Row("Predictions", (
        scatter_panel(
            SCATTER,
            x=Query(PREDICTED_BY_JOB, instant=True, format=_TABLE),
            y=Query(ACTUAL_BY_JOB, instant=True, format=_TABLE),
            x_name="predicted", y_name="actual", identity_name="actual = predicted",
            description="One point per finished job: predicted (p50, at admission) against actual job seconds on the "
            "GPU type it ran on, log-log. Points on the line were predicted exactly; above it, the job ran longer.",
            unit="s", height=10,
        ),
        timeseries_panel(
            ERROR_BY_GPU, _median_error_by("gpu_type"),
            description=f"Median actual / predicted job time of the jobs finished in the last {ERROR_WINDOW}, per GPU "
            "type; 1 is perfect, above 1 the jobs ran longer than predicted.",
            unit="none", height=10,
        ),
        timeseries_panel(
            ERROR_BY_FAMILY, _median_error_by("model_family"),
            description=f"Median actual / predicted job time of the jobs finished in the last {ERROR_WINDOW}, per "
            "model family (the operator keeps the first 50 families it sees; later ones are 'other').",
            unit="none",
        ),
        heatmap_panel(
            "Prediction error ratio (actual / predicted) over time",
            Query(f"sum by (le) (increase({ERROR_RATIO}_bucket{ERROR_FILTER}[$__rate_interval]))", legend="{{le}}",
                  format=PromQueryFormat.HEATMAP),
            description="Distribution of actual/predicted job time for jobs finishing in each interval.",
        ),
        timeseries_panel(
            ETA_DRIFT,
            Query(f"histogram_quantile(0.5, sum by (le) (rate({ERROR_RATIO}_bucket{ERROR_FILTER}[{ERROR_WINDOW}])))",
                  legend="prediction (every job)"),
            Query(f"histogram_quantile(0.5, sum by (le, eta_source) (rate({ETA_ERROR_RATIO}_bucket{{{GPU_FILTER}}}"
                  f"[{ERROR_WINDOW}])))", legend="ETA from {{eta_source}}"),
            description=f"Median actual / expected job time of the jobs finished in the last {ERROR_WINDOW}. "
            "'prediction (every job)': expected = the prediction at admission. 'ETA from pace': expected = the "
            "first ETA of the job's steady measured pace (reported by the training loop), so the gap between the "
            "two is what live progress corrects. 'ETA from prediction': jobs that never reported a pace, whose ETA "
            "stayed the prediction. 1 is perfect; above 1 the job ran longer than expected.",
            unit="none", width=24,
        ),
        table_panel(
            "Predicted vs actual runtime per job",
            Query(PREDICTED_BY_JOB, instant=True, format=_TABLE),
            Query(ACTUAL_BY_JOB, instant=True, format=_TABLE),
            Query(f"{ACTUAL_BY_JOB} / {PREDICTED_BY_JOB}", instant=True, format=_TABLE),
            description="Finished jobs: predicted (p50, at admission) and actual job seconds on the GPU type the "
            "job ran on. Ratio = actual / predicted; 1 is perfect, > 1 means the job ran longer than predicted.",
            unit="s", width=24, height=9,
            transformations=(
                ("merge", {}),
                ("organize", {"excludeByName": {"Time": True}, "renameByName": {
                    "Value #A": "predicted", "Value #B": "actual", "Value #C": "actual / predicted"}}),
                ("sortBy", {"sort": [{"field": "actual / predicted", "desc": True}]}),
            ),
            decimals_of={"actual / predicted": 2},
        ),
    ))

def _queue() -> Row:
    return Row("Queue", (
        timeseries_panel(
            WAITING,
            Query(f"sum by (reason) ({JOBS_WAITING}{{{NAMESPACE_FILTER}}})", legend="{{reason}}"),
            description="TrainingJobs that do not run yet, by the reason in their status: WaitingForWindow (no idle "
            "window long enough yet), Unschedulable (the scheduler found no node), Evicted (requeued), or the phase "
            "(Pending, Analyzing, Predicted) while nothing more is known.",
            stacked=True, width=6,
        ),
        timeseries_panel(
            "Nodes turned away by the extender, by reason",
            Query(f"sum by (reason) (increase({EXTENDER_FILTERED_OUT}[$__rate_interval]))", legend="{{reason}}"),
            description="Why the scheduler extender rejected nodes for offline pods: GPUs not free now, the idle "
            "window too short for the predicted runtime, no idle window, or no room for a whole gang.",
            stacked=True, width=6,
        ),
        timeseries_panel(
            "Jobs by phase",
            Query(f"sum by (phase) ({JOBS}{{{NAMESPACE_FILTER}}})", legend="{{phase}}"),
            description="TrainingJobs in each phase (Pending, Analyzing, Predicted, Waiting, Running, Requeued, "
            "Succeeded, Failed).",
            stacked=True, width=6,
        ),
        timeseries_panel(
            "Requeues",
            Query(f"sum(increase({REQUEUES}[$__rate_interval]))", legend="requeues"),
            description="TrainingJobs put back in the queue after an eviction.",
            width=6,
        ),
    ))

def _harvest() -> Row:
    return Row("Idle-window harvest", (
        bargauge_panel(
            HARVESTED,
            Query(_gpu_hours(NODE_OFFLINE_GPUS), legend="harvested by offline training", instant=True),
            Query(_gpu_hours(NODE_GPUS, minus=NODE_ONLINE_GPUS), legend="idle (not used by online work)", instant=True),
            description="Over the selected time range: GPU-hours offline training pods held, and GPU-hours online "
            "inference left idle. Their ratio is how much of the idle capacity offpeak harvested.",
            unit="h",
        ),
        timeseries_panel(
            "GPUs: online, offline, idle",
            Query(f"sum({NODE_ONLINE_GPUS})", legend="online"),
            Query(f"sum({NODE_OFFLINE_GPUS})", legend="offline (harvested)"),
            Query(f"sum({NODE_GPUS}) - sum({NODE_ONLINE_GPUS}) - sum({NODE_OFFLINE_GPUS})", legend="idle"),
            description="GPUs across all nodes by who uses them; offpeak's goal is to shrink the idle band without "
            "delaying online work.",
            stacked=True,
        ),
    ))

def _eviction() -> Row:
    return Row("Evictions", (
        timeseries_panel(
            EVICTED,
            Query(f"sum by (reason) (increase({EVICTIONS}[$__rate_interval]))", legend="{{reason}}"),
            description="Offline pods evicted because online load came back.",
            stacked=True,
        ),
        timeseries_panel(
            "GPU-hours lost to evictions",
            Query(f"sum(increase({LOST_GPU_SECONDS}[$__rate_interval])) / 3600", legend="lost in interval"),
            Query(f"sum(increase({LOST_GPU_SECONDS}[$__range])) / 3600", legend="lost over range", instant=True),
            description="Work thrown away by evictions (GPU-seconds since the last checkpoint, or since the start "
            "for jobs that do not checkpoint), in GPU-hours.",
            unit="h",
        ),
    ))

def _learning() -> Row:
    return Row("Learning from jobs, and gangs", (
        table_panel(
            "Model version served",
            Query(f"max by (model_version) ({MODEL_INFO})", instant=True, format=_TABLE),
            description="The predictor model each predictor replica serves (one row per version: two rows during "
            "a roll-out). Every prediction in a TrainingJob's status names its version too.",
            width=6,
            transformations=(("organize", {"excludeByName": {"Time": True, "Value": True}}),),
        ),
        timeseries_panel(
            "Measured samples by outcome",
            Query(f"sum by (status) (increase({SAMPLE_OUTCOMES}[$__rate_interval]))", legend="{{status}}"),
            description="Step times measured by finished (or evicted) jobs, as the predictor judged them: accepted "
            "(the next prediction of that model on that GPU type is corrected), quarantined (implausibly far from "
            "the prediction), and the rest.",
            stacked=True, width=6,
        ),
        timeseries_panel(
            "Corrected prediction keys",
            Query(f"sum by (level) ({CORRECTED_KEYS})", legend="{{level}}"),
            description="Keys (a model graph, or a model family, on a GPU type with its precision and batch) that "
            "measured samples correct: how much of the cluster's work the predictor has learned from.",
            width=6,
        ),
        timeseries_panel(
            "Gang reservations",
            Query(f"max({GANG_RESERVATIONS})", legend="gangs holding places"),
            Query(f"max({GANG_RESERVED_GPUS})", legend="GPUs held back"),
            Query(f"sum by (outcome) (increase({GANG_EVENTS}[$__rate_interval]))", legend="{{outcome}}"),
            description="Multi-worker jobs placed all-or-nothing: places held for workers not yet bound, and how "
            "reservations ended (complete, gone, expired: a partial gang released after the timeout).",
            width=6,
        ),
    ))

def _latency() -> Row:
    return Row("Latency", (
        timeseries_panel(
            "Predictor latency seen by the operator", *_quantiles(PREDICTOR_CLIENT_LATENCY),
            description="Round trip of the operator's calls to the predictor service.",
            unit="s", width=8,
        ),
        timeseries_panel(
            "Predictor service latency", *_quantiles(PREDICTOR_SERVICE_LATENCY),
            description="Time the predictor service spends per HTTP request (all endpoints).",
            unit="s", width=8,
        ),
        timeseries_panel(
            "Extender decision latency",
            *_quantiles(EXTENDER_LATENCY), Query(f"max({EXTENDER_STALE})", legend="data stale (1 = yes)"),
            description="Time the scheduler extender takes per filter/prioritize call (kube-scheduler's default "
            "extender timeout is 5 s). 'data stale' is 1 while the extender runs on an old Prometheus snapshot.",
            unit="s", width=8,
        ),
    ))

def _variables() -> tuple[Builder[VariableModel], ...]:
    """Fresh builders each time: the SDK's builders are mutable."""
    return (
        datasource_variable(),
        label_variable("namespace", label="Namespace", query=f"label_values({JOBS}, job_namespace)"),
        label_variable("gpu_type", label="GPU type", query=f"label_values({ERROR_RATIO}_count, gpu_type)"),
        label_variable("model_family", label="Model family",
                       query=f"label_values({ERROR_RATIO}_count{{{GPU_FILTER}}}, model_family)"),
    )


def build_dashboard() -> dict[str, Any]:
    """The offpeak dashboard as Grafana JSON."""
    return dashboard_json(
        uid=UID,
        title=TITLE,
        description="Predicted vs actual runtimes, the queue, harvest of idle GPU windows, evictions and latency.",
        tags=("offpeak", "gpu", "training"),
        rows=(_predictions(), _queue(), _harvest(), _eviction(), _learning(), _latency()),
        variables=_variables(),
    )


def render(dashboard: dict[str, Any]) -> str:
    """Stable text form: the committed file must be byte-identical to this."""
    return json.dumps(dashboard, indent=2, sort_keys=True) + "\n"
