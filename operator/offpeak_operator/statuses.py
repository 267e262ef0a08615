"""The TrainingJob status the reconciler writes after its own actions (a prediction, a graph, an API server's
refusal) and the human-unit twins of its seconds fields. Pure: status in, the fields to merge out."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from offpeak_core.humanize import duration

from offpeak_operator import conditions as cond
from offpeak_operator.conditions import rfc3339
from offpeak_operator.jobstate import Phase, parse_time
from offpeak_operator.predictions import Prediction, remaining_seconds


def copied_conditions(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The status's conditions as new dicts, to be changed and written back."""
    return [dict(c) for c in status.get("conditions") or []]


def display_fields(status: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """The human-unit twins of the seconds fields (`kubectl get tj` shows `1h12m`, not `4331.52`), where `patch`
    makes them stale; empty when they agree already."""
    out: dict[str, Any] = {}
    merged = {**status, **patch}
    for seconds, text in (("predictedSeconds", "predicted"), ("actualSeconds", "actual"), ("etaSeconds", "eta")):
        value = merged.get(seconds)
        want = duration(float(value)) if isinstance(value, int | float) and not isinstance(value, bool) else None
        if merged.get(text) != want:
            out[text] = want
    return out


def wants_reprediction(status: Mapping[str, Any], *, now: datetime) -> bool:
    """A waiting job whose prediction is a fallback although it has a model graph: try the predictor again once
    `nextPredictionTime` has come. Running jobs keep their prediction (their placement is made)."""
    if status.get("phase") != Phase.WAITING:
        return False
    prediction = status.get("prediction") or {}
    if prediction.get("source") in (None, "predictor") or not (status.get("graph") or {}).get("configMap"):
        return False
    next_at = parse_time(status.get("nextPredictionTime"))
    return next_at is None or now >= next_at


def reprediction_failed_status(*, status: Mapping[str, Any], message: str, now: datetime,
                               backoff: Callable[[int], float]) -> dict[str, Any]:
    """Status after a failed re-prediction: the fallback stays; the next try after `backoff(tries)` seconds."""
    tries = int(status.get("predictionRetries") or 0) + 1
    next_at = now + timedelta(seconds=backoff(tries))
    conds = cond.set_condition(copied_conditions(status), type=cond.PREDICTED, ok=False, reason="PredictorUnavailable",
                               message=f"{message}; retry {tries} at {rfc3339(next_at)}", now=now)
    return {"predictionRetries": tries, "nextPredictionTime": rfc3339(next_at), "conditions": conds}


def reprediction_status(*, status: Mapping[str, Any], prediction: Prediction, message: str,
                        now: datetime) -> dict[str, Any]:
    """Status after a successful re-prediction: the real prediction replaces the fallback; the phase stays."""
    out = prediction_status(status=status, prediction=prediction, reason="Predicted", message=message, now=now)
    out.pop("phase")
    return {**out, "predictionRetries": None, "nextPredictionTime": None}


def prediction_status(*, status: Mapping[str, Any], prediction: Prediction, reason: str, message: str,
                      now: datetime) -> dict[str, Any]:
    """Status after the Predict action: the prediction (or fallback) is stored and the job moves to Predicted."""
    completed = int(status.get("completedSteps") or 0)
    fastest = prediction.fastest()
    conds = cond.set_condition(copied_conditions(status), type=cond.PREDICTED, ok=prediction.source == "predictor",
                               reason=reason, message=message, now=now)
    out: dict[str, Any] = {"phase": Phase.PREDICTED, "prediction": prediction.to_status(), "conditions": conds,
                           "message": message}
    if fastest is not None:
        out["predictedSeconds"] = remaining_seconds(prediction, completed_steps=completed)[fastest.gpu_type]["p50"]
    return out


def graph_status(*, status: Mapping[str, Any], ok: bool, reason: str, message: str, now: datetime,
                 graph: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Status after an attempt to get the graph (analysis pod, ConfigMap, in-process extraction)."""
    out: dict[str, Any] = {
        "conditions": cond.set_condition(copied_conditions(status), type=cond.GRAPH_READY, ok=ok, reason=reason,
                                         message=message, now=now),
        "message": message,
    }
    if graph is not None:
        out["graph"] = dict(graph)
    return out


def rejected_status(*, status: Mapping[str, Any], message: str, now: datetime) -> dict[str, Any]:
    """Status when the API server refuses a training pod as invalid: Failed, the server's words in a condition."""
    conds = cond.finished(copied_conditions(status), succeeded=False, reason="PodRejected", message=message, now=now)
    return {"phase": Phase.FAILED, "finishTime": rfc3339(now), "message": message, "conditions": conds,
            "reason": "PodRejected"}


API_ERROR_REASONS = {403: "Forbidden", 409: "Conflict", 422: "Invalid"}


def api_error_status(*, status: Mapping[str, Any], action: str, code: int, message: str,
                     now: datetime) -> dict[str, Any] | None:
    """Status recording that the API server refused `action` (e.g. 403 exceeded quota): an ApiAccepted=False
    condition whose reason names the action and the refusal; None when exactly that is recorded already."""
    reason = f"{action}{API_ERROR_REASONS.get(code, 'Refused')}"
    text = f"the API server refused {action} ({code}): {message}"[:1000]
    current = cond.get_condition(status.get("conditions"), cond.API_ACCEPTED) or {}
    if current.get("status") == "False" and current.get("reason") == reason and current.get("message") == text:
        return None
    conds = cond.set_condition(copied_conditions(status), type=cond.API_ACCEPTED, ok=False, reason=reason, message=text,
                               now=now)
    return {"conditions": conds, "message": f"{text}; retrying"}


def api_error_condition(patch: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ApiAccepted condition of an `api_error_status` patch."""
    found = cond.get_condition(patch.get("conditions"), cond.API_ACCEPTED)
    assert found is not None
    return found


def api_accepted(conditions: Sequence[Mapping[str, Any]], *, now: datetime) -> list[dict[str, Any]]:
    """Conditions after the API server accepted the operator's requests again."""
    return cond.set_condition(conditions, type=cond.API_ACCEPTED, ok=True, reason="Accepted",
                              message="the API server accepts the operator's requests", now=now)
