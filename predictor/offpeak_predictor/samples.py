"""Observed job samples -> the correction table: judge, store, learn, rebuild at start-up, forget old rows.

The service knows nothing of HTTP. Each sample is judged against the serving model's own prediction for the
same graph, GPU type and options: a plausible one is learned at once (the next prediction for its keys is
corrected), one more than `quarantine_ratio` off is stored with status `quarantined` and not learned, and one
the model cannot re-predict (no graph) is stored `unverified`. A sample may replace an earlier one of the same
job (`replaces`: its id): a running job's early sample, measured while it ran, gives way to its final one, so
one run counts once; the earlier row is kept with status `superseded` and unlearned. The table is a cache of the accepted rows of
the sample DB under the serving model: rebuilt from it at start-up (rows judged under another model version
are re-judged from their stored graph), and a row dropped by retention is taken out of it again.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from offpeak.errors import UserError
from offpeak_graph.schema import GraphError, ModelGraph, parse_graph
from offpeak_predictor.correction import (
    Correction, CorrectionKey, CorrectionSettings, CorrectionTable, implausible, keys_for, log_ratio,
)  # fmt: skip
from offpeak_predictor.db import BenchmarkDB, RowTooLarge
from offpeak_predictor.predict import PredictOptions, Predictor

log = logging.getLogger(__name__)
Status = Literal["accepted", "quarantined", "unverified"]
SUPERSEDED = "superseded"  # the stored status of a sample a later one of the same job replaced


@dataclass(frozen=True, slots=True)
class FeedbackSettings:
    correction: CorrectionSettings = field(default_factory=CorrectionSettings)
    max_samples: int = 10_000  # job_samples rows kept; the oldest are dropped (and unlearned) beyond this
    # ... and beyond this many stored bytes: every byte of the rows, their graph JSON and every text field (a graph
    # is up to the body limit); one sample larger than all of it is refused (`--max-sample-mib`)
    max_graph_bytes: int = 512 * 2**20


class SampleTooLarge(UserError):
    """A sample whose row alone is over the samples' byte budget (a 413)."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One observed job, validated: what was run where, and how long one step took."""

    job: str
    gpu_type: str
    graph_hash: str
    family: str
    precision: str
    mode: str
    optimizer: str
    num_gpus: int
    batch_size: int
    step_seconds: float | None  # measured seconds per step (None: cannot be learned from)
    job_seconds: float | None = None
    steps: int | None = None
    client: str = ""
    replaces: int | None = None  # the id of an earlier sample of the same job this one takes the place of

    def keys(self) -> tuple[CorrectionKey, ...]:
        return keys_for(graph_hash=self.graph_hash, family=self.family, gpu_type=self.gpu_type,
                        precision=self.precision, mode=self.mode, batch_size=self.batch_size,
                        num_gpus=self.num_gpus)  # fmt: skip

    def options(self) -> PredictOptions:
        return PredictOptions(mode=self.mode, precision=self.precision, optimizer=self.optimizer,
                              num_gpus=self.num_gpus)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Judgement:
    status: Status
    reason: str = ""
    predicted_step_seconds: float | None = None  # the serving model's own (uncorrected) p50
    log_ratio: float | None = None  # log(measured / predicted), set when accepted


@dataclass(frozen=True, slots=True)
class Outcome:
    id: int
    judgement: Judgement
    correction: Correction | None = None  # the key's correction after this sample (accepted only)


def measured_step_seconds(*, step_seconds: float | None, job_seconds: float | None, steps: int | None,
                          startup_seconds: float = 0.0) -> float | None:  # fmt: skip
    """The measured step time: as reported, else (job - start-up) / steps; None when neither can be had."""
    if step_seconds is not None:
        return step_seconds if step_seconds > 0 else None
    if job_seconds is None or not steps:
        return None
    per_step = (job_seconds - startup_seconds) / steps
    return per_step if per_step > 0 else None


def judge(*, measured: float | None, predicted: float | None, settings: CorrectionSettings) -> Judgement:
    """Accept, quarantine (too far from the model's own prediction) or leave unverified. Pure."""
    if measured is None:
        return Judgement("unverified", "no step time: give step_seconds, or job_seconds and steps")
    if predicted is None or predicted <= 0:
        return Judgement("unverified", "the model cannot predict this sample: send its 'graph'")
    x = log_ratio(actual=measured, predicted=predicted)
    why = implausible(x, settings)
    if why is not None:
        return Judgement("quarantined", why, predicted_step_seconds=predicted)
    return Judgement("accepted", "", predicted_step_seconds=predicted, log_ratio=x)


def sample_from_row(row: Mapping[Any, Any], graph: ModelGraph | None) -> Sample:
    """A stored row as a Sample; older rows without the key columns take them from their graph."""
    def pick(key: str, default: Any) -> Any:
        value = row.get(key)
        return default if value is None or (isinstance(value, float) and math.isnan(value)) else value

    return Sample(
        job=str(pick("job", "")), gpu_type=str(row["gpu"]), graph_hash=str(pick("graph_hash", "")),
        family=str(pick("family", graph.model_family if graph else "")),
        precision=str(pick("precision", graph.precision if graph else "fp32")),
        mode=str(pick("mode", graph.mode if graph else "train")),
        optimizer=str(pick("optimizer", graph.optimizer if graph else "adam")),
        num_gpus=int(pick("num_gpus", 1)), batch_size=int(pick("batch_size", graph.batch_size if graph else 0)),
        step_seconds=measured_step_seconds(step_seconds=pick("step_seconds", None),
                                           job_seconds=pick("job_seconds", None), steps=pick("steps", None)),
        client=str(pick("client", "")),
    )  # fmt: skip


class Feedback:
    """Owns the correction table the predictor reads; the only writer of job samples."""

    def __init__(self, *, predictor: Predictor, db: BenchmarkDB, settings: FeedbackSettings = FeedbackSettings(),
                 table: CorrectionTable | None = None) -> None:  # fmt: skip
        self.predictor = predictor
        self.db = db
        self.settings = settings
        self.table = table if table is not None else CorrectionTable(settings.correction)
        predictor.corrections = self.table

    def _model_answer(self, sample: Sample, graph: ModelGraph | None) -> tuple[float, float] | None:
        """(p50, p90) step seconds of the model alone for the sample's graph and GPU type."""
        if graph is None:
            return None
        answer = self.predictor.predict(graph, [sample.gpu_type], sample.options(), graph_hash=sample.graph_hash,
                                        corrected=False)  # fmt: skip
        return float(answer[0]["step_seconds"]), float(answer[0]["step_seconds_p90"])

    def _model_step(self, sample: Sample, graph: ModelGraph | None) -> float | None:
        answer = self._model_answer(sample, graph)
        return None if answer is None else answer[0]

    def ingest(self, sample: Sample, graph: ModelGraph | None, graph_dict: dict[str, Any] | None) -> Outcome:
        """Judge, store, learn (when accepted), then apply retention. SampleTooLarge, with nothing stored, when the
        sample's row alone is over the samples' byte budget."""
        model = self._model_answer(sample, graph)
        judgement = judge(measured=sample.step_seconds, predicted=None if model is None else model[0],
                          settings=self.settings.correction)  # fmt: skip
        try:
            sample_id = self.db.add_job_sample(
                job=sample.job, gpu=sample.gpu_type, graph_hash=sample.graph_hash, step_seconds=sample.step_seconds,
                job_seconds=sample.job_seconds, steps=sample.steps, graph=graph_dict, client=sample.client,
                family=sample.family, precision=sample.precision, mode=sample.mode, optimizer=sample.optimizer,
                num_gpus=sample.num_gpus, batch_size=sample.batch_size, model_version=self.predictor.version,
                predicted_step_seconds=judgement.predicted_step_seconds, status=judgement.status,
                reason=judgement.reason, max_bytes=self.settings.max_graph_bytes,
            )  # fmt: skip
        except RowTooLarge as e:
            raise SampleTooLarge(f"{e} (--max-sample-mib); send a smaller graph, or none (graph_hash)") from e
        if sample.replaces is not None:
            self._supersede(sample.replaces, job=sample.job, by=sample_id)
        correction = None
        if judgement.log_ratio is not None:
            self.table.add(sample.keys(), judgement.log_ratio)
            margin = math.log(model[1] / model[0]) if model else self.predictor.model.p90_log_margin
            prior = self.predictor.prior(sample.gpu_type, p90_log_margin=margin)
            correction = self.table.lookup(sample.keys(), p90_log_margin=margin, prior=prior)  # as /v1/predict would
        self._retain()
        return Outcome(id=sample_id, judgement=judgement, correction=correction)

    def _supersede(self, sample_id: int, *, job: str, by: int) -> None:
        """Unlearn and mark an earlier sample of the same job (a sample of another job, or one already replaced,
        is left as it is: a client replaces only its own job's samples)."""
        row = self.db.sample_row(sample_id)
        if row is None or not job or row.get("job") != job or row.get("status") == SUPERSEDED:
            return
        x = _stored_log_ratio(row, self.predictor.version)
        if x is not None:
            self.table.remove(sample_from_row(row, None).keys(), x)
        self.db.update_sample(sample_id, status=SUPERSEDED, reason=f"replaced by sample {by} of the same job")

    def _retain(self) -> None:
        for row in self.db.prune_samples(max_rows=self.settings.max_samples,
                                         max_graph_bytes=self.settings.max_graph_bytes):
            x = _stored_log_ratio(row, self.predictor.version)
            if x is not None:
                self.table.remove(sample_from_row(row, None).keys(), x)

    def rebuild(self) -> Counter[str]:
        """Refill the table from the DB (start-up); re-judge rows judged under another model. Counts by status."""
        counts: Counter[str] = Counter()
        self.table.clear()
        self._retain()
        for row in self.db.sample_rows():
            if row.get("status") == SUPERSEDED:  # a later sample of its job counts instead
                counts[SUPERSEDED] += 1
                continue
            if row.get("status") and row.get("model_version") == self.predictor.version:
                x = _stored_log_ratio(row, self.predictor.version)
            else:  # judged under another model (or stored before samples were judged)
                x = self._rejudge(row)
            if x is not None:
                self.table.add(sample_from_row(row, None).keys(), x)
                counts["accepted"] += 1
            else:
                counts[str(row.get("status") or "unverified")] += 1
        return counts

    def _rejudge(self, row: dict[str, Any]) -> float | None:
        raw = self.db.sample_graph(int(row["id"]))
        graph = _graph_or_none(raw)
        sample = sample_from_row(row, graph)
        judgement = judge(measured=sample.step_seconds, predicted=self._model_step(sample, graph),
                          settings=self.settings.correction)  # fmt: skip
        judged = {"model_version": self.predictor.version, "predicted_step_seconds": judgement.predicted_step_seconds,
                  "status": judgement.status, "reason": judgement.reason, "family": sample.family,
                  "precision": sample.precision, "mode": sample.mode, "optimizer": sample.optimizer,
                  "batch_size": sample.batch_size, "num_gpus": sample.num_gpus}  # fmt: skip
        self.db.update_sample(int(row["id"]), **judged)
        row.update(judged)
        return judgement.log_ratio


def _stored_log_ratio(row: Mapping[str, Any], model_version: str) -> float | None:
    """The log ratio an accepted row was learned with under `model_version` (None: not learned under it)."""
    if row.get("status") != "accepted" or row.get("model_version") != model_version:
        return None
    measured, predicted = sample_from_row(row, None).step_seconds, row.get("predicted_step_seconds")
    if measured is None or not predicted:
        return None
    return log_ratio(actual=measured, predicted=float(predicted))


def _graph_or_none(raw: dict[str, Any] | None) -> ModelGraph | None:
    if raw is None:
        return None
    try:
        return parse_graph(raw)
    except GraphError:  # stored before a rule it breaks: the row is re-judged without its graph
        return None
