"""The live progress channel's contract: per-attempt tokens, the report URL, what a training pod gets, and the
report body (Kubeflow Trainer's `trainerStatus`). Pure; `statusserver` serves it, `podspecs` injects it.

Training pods get no API credentials. They POST their progress over HTTPS to the operator's status server, as
Kubeflow Trainer's pods do (KEP-2779): the URL, a file holding a bearer token and a file holding the CA are named
by `KUBEFLOW_TRAINER_SERVER_URL` / `_TOKEN` / `_CA_CERT` (and the KEP's earlier `KUBEFLOW_TRAINER_STATUS_*`), so
the HF Transformers callback and the Kubeflow SDK report to offpeak unchanged, and so does `offpeak.progress`.

A token names one attempt of one job: `v1.<subject>.<mac>`, the subject `<plural>/<namespace>/<name>/<uid>/<attempt>`
(base64url) and the mac its HMAC-SHA256 under a key only the operator holds. Nothing is stored per job: the server
recomputes the mac (compared in constant time) before it reads anything from the API, and writes only to the job
and attempt the token names. Token and CA reach the pod as its own annotations, projected into files by a
downward-API volume; anyone who may read the pod may read them, which lets them report that attempt's progress and
nothing else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from offpeak.progress import (METRIC_ATTEMPT_STEPS, METRIC_CHECKPOINT, METRIC_STARTUP, METRIC_STEP_SECONDS,
                              METRIC_STEPS, METRIC_TOTAL, STATUS_ENV_PREFIXES)
from offpeak_core.livepace import Report

from offpeak_operator.names import ANN_STATUS_CA, ANN_STATUS_TOKEN

TOKEN_VERSION = "v1"
PATH_PREFIX = "/apis/offpeak.io/v1alpha1/namespaces"
MAX_BODY_BYTES = 64 * 1024  # as Kubeflow Trainer's status server
MAX_METRICS = 256  # entries of trainerStatus.metrics accepted in one report
MAX_KEPT_METRICS = 16  # of the user's own metrics (loss, ...), kept in status.liveReport for people to read
MAX_METRIC_NAME = 128
MAX_METRIC_VALUE = 256

# what the pod gets: a downward-API volume projecting two of its own annotations (names.py) into files
STATUS_VOLUME = "offpeak-status"
STATUS_DIR = "/var/run/secrets/offpeak.io/status"
TOKEN_FILE, CA_FILE = "token", "ca.crt"
# Kubeflow Trainer's names (merged: SERVER; KEP-2779 and earlier SDKs: STATUS), as offpeak.progress reads them
STATUS_ENV = tuple(f"{p}_{s}" for p in STATUS_ENV_PREFIXES for s in ("URL", "TOKEN", "CA_CERT"))

# trainerStatus.metrics the operator reads (offpeak.progress names them): the HF callback's step and total, and
# offpeak.progress's own
COUNT_METRICS = (METRIC_STEPS, METRIC_TOTAL, METRIC_ATTEMPT_STEPS, METRIC_CHECKPOINT)
SECONDS_METRICS = (METRIC_STEP_SECONDS, METRIC_STARTUP)


class ReportError(ValueError):
    """A report body offpeak cannot use; the message names the field and why (the 422's words)."""


@dataclass(frozen=True, slots=True)
class Claim:
    """What a valid token allows: reports on one attempt of one object."""

    plural: str  # trainingjobs, jobs, pytorchjobs
    namespace: str
    name: str
    uid: str
    attempt: int

    @property
    def subject(self) -> str:
        return f"{self.plural}/{self.namespace}/{self.name}/{self.uid}/{self.attempt}"

    @property
    def path(self) -> str:
        return report_path(plural=self.plural, namespace=self.namespace, name=self.name, attempt=self.attempt)


def report_path(*, plural: str, namespace: str, name: str, attempt: int) -> str:
    """Where one attempt POSTs its reports (the status server's route, with the base URL the pod's env var)."""
    return f"{PATH_PREFIX}/{namespace}/{plural}/{name}/attempts/{attempt}/status"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, subject: str) -> bytes:
    return hmac.new(key, f"offpeak-status/{TOKEN_VERSION}/{subject}".encode(), hashlib.sha256).digest()


def mint(key: bytes, claim: Claim) -> str:
    """The token of one attempt (derived, never stored: the same key gives the same token)."""
    return f"{TOKEN_VERSION}.{_b64(claim.subject.encode())}.{_b64(_mac(key, claim.subject))}"


def verify(key: bytes, token: str) -> Claim | None:
    """The claim of a token made with `key`; None for anything else (malformed, another key, tampered)."""
    parts = token.strip().split(".")
    if len(parts) != 3 or parts[0] != TOKEN_VERSION:
        return None
    try:
        subject = _unb64(parts[1]).decode()
        mac = _unb64(parts[2])
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if not hmac.compare_digest(mac, _mac(key, subject)):
        return None
    fields = subject.split("/")
    if len(fields) != 5 or not fields[4].isdigit():
        return None
    return Claim(plural=fields[0], namespace=fields[1], name=fields[2], uid=fields[3], attempt=int(fields[4]))


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; None when there is none."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


# ---- what a training pod gets -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodParts:
    """The status channel's additions to a training pod."""

    annotations: dict[str, str]
    env: list[dict[str, str]]
    volume: dict[str, Any]
    mount: dict[str, Any]


class Channel(Protocol):
    """Who gives training pods their part of the channel (statusserver.StatusChannel)."""

    def pod_parts(self, claim: Claim) -> PodParts: ...


def pod_parts(*, url: str, token: str, ca_pem: str) -> PodParts:
    """Annotations, environment, volume and mount that let a pod report to `url` (and nothing else)."""
    files = {"URL": url, "TOKEN": f"{STATUS_DIR}/{TOKEN_FILE}", "CA_CERT": f"{STATUS_DIR}/{CA_FILE}"}
    env = [{"name": f"{prefix}_{suffix}", "value": value} for prefix in STATUS_ENV_PREFIXES
           for suffix, value in files.items()]
    items = [{"path": TOKEN_FILE, "fieldRef": {"fieldPath": f"metadata.annotations['{ANN_STATUS_TOKEN}']"}},
             {"path": CA_FILE, "fieldRef": {"fieldPath": f"metadata.annotations['{ANN_STATUS_CA}']"}}]
    return PodParts(annotations={ANN_STATUS_TOKEN: token, ANN_STATUS_CA: ca_pem}, env=env,
                    volume={"name": STATUS_VOLUME, "downwardAPI": {"items": items, "defaultMode": 0o444}},
                    mount={"name": STATUS_VOLUME, "mountPath": STATUS_DIR, "readOnly": True})


# ---- the report body ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrainerStatus:
    """One report, as Kubeflow's `trainerStatus` carries it, with the metrics offpeak reads taken out."""

    progress_percentage: int | None = None
    estimated_remaining_seconds: int | None = None
    steps: int | None = None  # current_step: the step reached (absolute)
    total_steps: int | None = None
    step_seconds: float | None = None  # offpeak.progress: mean seconds per step after the first
    attempt_steps: int | None = None  # offpeak.progress: steps this attempt did
    checkpoint_steps: int | None = None  # offpeak.progress: the step the last checkpoint covers
    startup_seconds: float | None = None  # offpeak.progress: start -> end of the first step
    metrics: tuple[tuple[str, str], ...] = ()  # the user's own metrics (loss, ...), as sent


def _whole(value: Any, where: str, *, maximum: int | None = None) -> int:
    number = _number(value, where)
    if number != int(number) or (maximum is not None and number > maximum):
        bound = f" <= {maximum}" if maximum is not None else ""
        raise ReportError(f"{where}: {value!r} is not a whole number >= 0{bound}")
    return int(number)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise ReportError(f"{where}: {value!r} is not a number")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ReportError(f"{where}: {value!r} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise ReportError(f"{where}: {value!r} is not a finite number >= 0")
    return number


def parse_trainer_status(raw: Any, *, where: str = "trainerStatus") -> TrainerStatus:
    """A `trainerStatus` object (a report's, or a Kubeflow TrainJob's `status.trainerStatus`), checked."""
    if not isinstance(raw, Mapping):
        raise ReportError(f"{where}: must be an object")
    metrics = raw.get("metrics") or []
    if not isinstance(metrics, list) or len(metrics) > MAX_METRICS:
        raise ReportError(f"{where}.metrics: must be a list of at most {MAX_METRICS} {{name, value}} objects")
    known: dict[str, Any] = {}
    others: list[tuple[str, str]] = []
    for i, m in enumerate(metrics):
        name = m.get("name") if isinstance(m, Mapping) else None
        value = m.get("value") if isinstance(m, Mapping) else None
        if not isinstance(name, str) or not name or len(name) > MAX_METRIC_NAME:
            raise ReportError(f"{where}.metrics[{i}].name: a string of 1 to {MAX_METRIC_NAME} characters")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ReportError(f"{where}.metrics[{i}].value: a string (or a number) for {name!r}")
        if name in COUNT_METRICS:
            known[name] = _whole(value, f"{where}.metrics[{name}]")
        elif name in SECONDS_METRICS:
            known[name] = _number(value, f"{where}.metrics[{name}]")
        elif len(others) < MAX_KEPT_METRICS:
            others.append((name, str(value)[:MAX_METRIC_VALUE]))
    pct, eta = raw.get("progressPercentage"), raw.get("estimatedRemainingSeconds")
    return TrainerStatus(
        progress_percentage=None if pct is None else _whole(pct, f"{where}.progressPercentage", maximum=100),
        estimated_remaining_seconds=None if eta is None else _whole(eta, f"{where}.estimatedRemainingSeconds"),
        steps=known.get(METRIC_STEPS), total_steps=known.get(METRIC_TOTAL),
        step_seconds=known.get(METRIC_STEP_SECONDS) or None, attempt_steps=known.get(METRIC_ATTEMPT_STEPS),
        checkpoint_steps=known.get(METRIC_CHECKPOINT), startup_seconds=known.get(METRIC_STARTUP),
        metrics=tuple(others),
    )  # fmt: skip


def parse_body(data: bytes) -> TrainerStatus | None:
    """A report body `{"trainerStatus": {...}}`; None when it carries no trainerStatus (nothing to record, as
    Kubeflow's server answers it). Other top-level fields are ignored, as Kubeflow's server does."""
    if len(data) > MAX_BODY_BYTES:
        raise ReportError(f"body: larger than {MAX_BODY_BYTES} bytes")
    try:
        body = json.loads(data or b"{}")
    except (ValueError, UnicodeDecodeError) as e:
        raise ReportError(f"body: not JSON ({e})") from None
    if not isinstance(body, Mapping):
        raise ReportError('body: must be a JSON object {"trainerStatus": {...}}')
    raw = body.get("trainerStatus")
    return None if raw is None else parse_trainer_status(raw)


def to_status(report: TrainerStatus, *, attempt: int, received_at: datetime) -> dict[str, Any]:
    """`status.liveReport` (a TrainingJob's) or the live-report annotation (an opted-in workload's)."""
    fields = {"progressPercentage": report.progress_percentage,
              "estimatedRemainingSeconds": report.estimated_remaining_seconds, "steps": report.steps,
              "totalSteps": report.total_steps, "stepSeconds": report.step_seconds,
              "attemptSteps": report.attempt_steps, "checkpointSteps": report.checkpoint_steps,
              "startupSeconds": report.startup_seconds}
    out: dict[str, Any] = {"attempt": attempt, "receivedAt": timestamp(received_at),
                           **{k: v for k, v in fields.items() if v is not None}}
    if report.metrics:
        out["metrics"] = [{"name": n, "value": v} for n, v in report.metrics]
    return out


def timestamp(t: datetime) -> str:
    """RFC 3339 with milliseconds: paces are timed between reports a few seconds apart."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def core_report(raw: Mapping[str, Any], *, received_at: float, total_steps: int) -> Report | None:
    """The pace's view of a stored live report: the step reached (`current_step`, else the progress percentage of
    `total_steps`), and the training code's own step time when it sent one; None when it says neither."""
    steps = raw.get("steps")
    if not isinstance(steps, int) or isinstance(steps, bool):
        pct = raw.get("progressPercentage")
        if not isinstance(pct, int) or isinstance(pct, bool) or total_steps <= 0:
            return None
        steps = total_steps * pct // 100
    step_seconds = raw.get("stepSeconds")
    attempt_steps = raw.get("attemptSteps")
    return Report(at=received_at, steps=steps,
                  step_seconds=float(step_seconds) if isinstance(step_seconds, int | float) else None,
                  attempt_steps=attempt_steps if isinstance(attempt_steps, int) else None)
