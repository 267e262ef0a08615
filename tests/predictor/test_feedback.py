"""The feedback service without HTTP: judge, store, learn at once, survive restarts, forget old rows."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from offpeak_predictor.correction import CorrectionSettings
from offpeak_predictor.db import BenchmarkDB
from offpeak_predictor.predict import Predictor
from offpeak_predictor.samples import Feedback, FeedbackSettings, Sample, judge, measured_step_seconds

from .conftest import mlp_graph

GPU = "T4"


def _feedback(model, tmp_path, **settings) -> Feedback:
    return Feedback(predictor=Predictor(model), db=BenchmarkDB(tmp_path / "db.sqlite"),
                    settings=FeedbackSettings(**settings))


def _sample(graph, step_seconds: float | None, *, job: str = "ns/a") -> Sample:
    return Sample(job=job, gpu_type=GPU, graph_hash=graph.content_hash(), family=graph.model_family,
                  precision=graph.precision, mode=graph.mode, optimizer=graph.optimizer, num_gpus=1,
                  batch_size=graph.batch_size, step_seconds=step_seconds, client="test")


def _predict(fb: Feedback, graph, *, corrected: bool = True) -> dict:
    return fb.predictor.predict(graph, [GPU], graph_hash=graph.content_hash(), corrected=corrected)[0]


def test_an_accepted_sample_corrects_the_very_next_prediction(tiny_model, tmp_path) -> None:
    fb, graph = _feedback(tiny_model, tmp_path), mlp_graph()
    before = _predict(fb, graph)
    assert before["correction"]["samples"] == 0 and before["correction"]["factor"] == 1.0
    model_step = before["step_seconds"]
    outcome = fb.ingest(_sample(graph, model_step * 1.4), graph, graph.to_dict())
    assert outcome.judgement.status == "accepted" and outcome.judgement.predicted_step_seconds == model_step
    after = _predict(fb, graph)
    assert after["correction"]["samples"] == 1 and after["correction"]["level"] == "graph"
    assert model_step < after["step_seconds"] < model_step * 1.4
    assert after["correction"]["model_step_seconds"] == model_step
    assert after["step_seconds_p90"] / after["step_seconds"] < before["step_seconds_p90"] / before["step_seconds"]
    assert after["model_version"] == tiny_model.version
    assert _predict(fb, graph, corrected=False)["step_seconds"] == model_step  # the model itself is untouched


def test_the_samples_answer_shows_the_correction_predict_then_serves(tiny_model, tmp_path) -> None:
    from dataclasses import replace

    from offpeak_predictor.intervals import POOLED, Calibration, Cell

    # A model whose train/full regimes are wider than its pool: the answer must use the prediction's own regime.
    wide = {f"train/full/{size}": Cell(q50=0.0, q90=math.log(3.0), n=100) for size in ("small", "medium", "large")}
    model = replace(tiny_model, calibration=Calibration(cells={**wide, POOLED: Cell(q50=0.0, q90=0.1, n=300)}))
    model.p90_log_margin = 0.1
    fb, graph = _feedback(model, tmp_path), mlp_graph()
    before = _predict(fb, graph)
    assert before["step_seconds_p90"] / before["step_seconds"] == pytest.approx(3.0)
    outcome = fb.ingest(_sample(graph, before["step_seconds"] * 1.2), graph, graph.to_dict())
    after = _predict(fb, graph)
    assert outcome.correction is not None
    assert outcome.correction.p90_factor == pytest.approx(after["correction"]["p90_factor"])


def test_repeated_measurements_converge_on_them(tiny_model, tmp_path) -> None:
    fb, graph = _feedback(tiny_model, tmp_path), mlp_graph()
    model_step = _predict(fb, graph)["step_seconds"]
    errors = []
    for _ in range(8):
        errors.append(abs(_predict(fb, graph)["step_seconds"] / (model_step * 1.4) - 1))
        fb.ingest(_sample(graph, model_step * 1.4), graph, graph.to_dict())
    assert errors[0] == pytest.approx(0.4 / 1.4)  # the model alone
    assert all(b < a for a, b in zip(errors, errors[1:])) and errors[-1] < 0.05


def test_a_sample_far_from_the_model_is_quarantined_not_learned(tiny_model, tmp_path) -> None:
    fb, graph = _feedback(tiny_model, tmp_path), mlp_graph()
    model_step = _predict(fb, graph)["step_seconds"]
    outcome = fb.ingest(_sample(graph, model_step * 6), graph, graph.to_dict())
    assert outcome.judgement.status == "quarantined" and "6x" in outcome.judgement.reason
    assert _predict(fb, graph)["step_seconds"] == model_step and len(fb.table) == 0
    row = fb.db.job_samples().iloc[0]
    assert row["status"] == "quarantined" and "quarantine" in row["reason"] and row["client"] == "test"


def test_a_sample_without_graph_or_step_time_is_stored_unverified(tiny_model, tmp_path) -> None:
    fb, graph = _feedback(tiny_model, tmp_path), mlp_graph()
    assert fb.ingest(_sample(graph, 0.1), None, None).judgement.status == "unverified"
    assert fb.ingest(_sample(graph, None), graph, graph.to_dict()).judgement.status == "unverified"
    assert len(fb.table) == 0 and list(fb.db.job_samples()["status"]) == ["unverified", "unverified"]


def test_corrections_survive_a_restart(tiny_model, tmp_path) -> None:
    fb, graph = _feedback(tiny_model, tmp_path), mlp_graph()
    model_step = _predict(fb, graph)["step_seconds"]
    for factor in (1.3, 1.5, 0.1):  # the last one is quarantined
        fb.ingest(_sample(graph, model_step * factor), graph, graph.to_dict())
    live = _predict(fb, graph)
    restarted = _feedback(tiny_model, tmp_path)
    assert _predict(restarted, graph)["correction"]["samples"] == 0  # nothing until the table is rebuilt
    counts = restarted.rebuild()
    assert counts == {"accepted": 2, "quarantined": 1}
    again = _predict(restarted, graph)
    assert again["step_seconds"] == pytest.approx(live["step_seconds"])
    assert again["step_seconds_p90"] == pytest.approx(live["step_seconds_p90"])


def test_rows_judged_under_another_model_are_rejudged_from_their_graph(tiny_model, tmp_path) -> None:
    fb, graph = _feedback(tiny_model, tmp_path), mlp_graph()
    model_step = _predict(fb, graph)["step_seconds"]
    fb.ingest(_sample(graph, model_step * 1.2), graph, graph.to_dict())
    sample_id = int(fb.db.job_samples()["id"].iloc[0])
    fb.db.update_sample(sample_id, model_version="old-model", predicted_step_seconds=model_step * 100)
    restarted = _feedback(tiny_model, tmp_path)
    assert restarted.rebuild() == {"accepted": 1}
    row = restarted.db.job_samples().iloc[0]
    assert row["model_version"] == tiny_model.version and row["predicted_step_seconds"] == pytest.approx(model_step)
    x = restarted.table.evidence(_sample(graph, 0).keys()[-1]).mean
    assert x == pytest.approx(math.log(1.2))


def test_rows_stored_before_judging_existed_are_learned_from_their_graph(tiny_model, tmp_path) -> None:
    graph = mlp_graph()
    model_step = _predict(_feedback(tiny_model, tmp_path), graph)["step_seconds"]
    db = BenchmarkDB(tmp_path / "db.sqlite")
    db.add_job_sample(job="ns/old", gpu=GPU, graph_hash=graph.content_hash(), step_seconds=model_step * 1.1,
                      job_seconds=None, steps=None, graph=graph.to_dict())  # the pre-feedback insert
    db.add_job_sample(job="ns/old2", gpu=GPU, graph_hash="sha256:gone", step_seconds=1.0, job_seconds=None,
                      steps=None, graph=None)
    fb = _feedback(tiny_model, tmp_path)
    assert fb.rebuild() == {"accepted": 1, "unverified": 1}
    assert _predict(fb, graph)["correction"]["samples"] == 1
    assert fb.rebuild() == {"accepted": 1, "unverified": 1}  # a rebuild starts from an empty table
    assert _predict(fb, graph)["correction"]["samples"] == 1
    fresh = _feedback(tiny_model, tmp_path)
    assert fresh.rebuild() == {"accepted": 1, "unverified": 1}  # judgements were written back


def test_retention_keeps_the_newest_rows_and_unlearns_dropped_ones(tiny_model, tmp_path) -> None:
    fb, graph = _feedback(tiny_model, tmp_path, max_samples=3), mlp_graph()
    model_step = _predict(fb, graph)["step_seconds"]
    factors = (3.0, 2.5, 1.1, 1.2, 1.3)
    for f in factors:
        fb.ingest(_sample(graph, model_step * f), graph, graph.to_dict())
    rows = fb.db.job_samples()
    assert len(rows) == 3 and list(rows["step_seconds"]) == pytest.approx([model_step * f for f in factors[2:]])
    graph_key = _sample(graph, 0).keys()[-1]
    evidence = fb.table.evidence(graph_key)
    assert evidence.n == 3
    assert evidence.mean == pytest.approx(sum(math.log(f) for f in factors[2:]) / 3)


def test_retention_by_graph_bytes_unlearns_dropped_rows_too(tiny_model, tmp_path) -> None:
    graph = mlp_graph()
    size = len(json.dumps(graph.to_dict()))
    fb = _feedback(tiny_model, tmp_path, max_graph_bytes=2 * size + size // 2)  # room for two graphs
    model_step = _predict(fb, graph)["step_seconds"]
    factors = (3.0, 1.1, 1.2)
    for f in factors:
        fb.ingest(_sample(graph, model_step * f), graph, graph.to_dict())
    rows = fb.db.job_samples()
    assert list(rows["step_seconds"]) == pytest.approx([model_step * f for f in factors[1:]])
    evidence = fb.table.evidence(_sample(graph, 0).keys()[-1])
    assert evidence.n == 2 and evidence.mean == pytest.approx((math.log(1.1) + math.log(1.2)) / 2)


def test_judge_and_measured_step_are_pure_rules() -> None:
    s = CorrectionSettings()
    assert judge(measured=1.0, predicted=1.0, settings=s).status == "accepted"
    assert judge(measured=5.5, predicted=1.0, settings=s).status == "quarantined"
    assert judge(measured=None, predicted=1.0, settings=s).status == "unverified"
    assert judge(measured=1.0, predicted=None, settings=s).status == "unverified"
    assert measured_step_seconds(step_seconds=0.5, job_seconds=999, steps=10) == 0.5
    assert measured_step_seconds(step_seconds=None, job_seconds=160, steps=100, startup_seconds=60) == 1.0
    assert measured_step_seconds(step_seconds=None, job_seconds=50, steps=100, startup_seconds=60) is None
    assert measured_step_seconds(step_seconds=None, job_seconds=50, steps=0) is None


def test_a_jobs_final_sample_replaces_its_live_one_so_the_run_counts_once(tiny_model, tmp_path) -> None:
    fb, graph = _feedback(tiny_model, tmp_path), mlp_graph()
    model_step = _predict(fb, graph)["step_seconds"]
    live = fb.ingest(_sample(graph, model_step * 1.3), graph, graph.to_dict())  # measured while the job ran
    assert _predict(fb, graph)["correction"]["samples"] == 1
    final = replace(_sample(graph, model_step * 1.4), replaces=live.id)
    fb.ingest(final, graph, graph.to_dict())
    key = _sample(graph, 0).keys()[-1]
    assert fb.table.evidence(key).n == 1 and fb.table.evidence(key).mean == pytest.approx(math.log(1.4))
    rows = fb.db.job_samples().set_index("id")
    assert rows.loc[live.id, "status"] == "superseded" and "replaced by sample" in rows.loc[live.id, "reason"]
    restarted = _feedback(tiny_model, tmp_path)
    assert restarted.rebuild() == {"accepted": 1, "superseded": 1}
    assert restarted.table.evidence(key).n == 1
    # a later rebuild under another model does not bring the replaced sample back
    fb.db.update_sample(int(live.id), model_version="old-model")
    assert _feedback(tiny_model, tmp_path).rebuild() == {"accepted": 1, "superseded": 1}


def test_a_sample_replaces_only_its_own_jobs_sample(tiny_model, tmp_path) -> None:
    fb, graph = _feedback(tiny_model, tmp_path), mlp_graph()
    model_step = _predict(fb, graph)["step_seconds"]
    theirs = fb.ingest(_sample(graph, model_step * 1.3, job="ns/other"), graph, graph.to_dict())
    fb.ingest(replace(_sample(graph, model_step * 1.4), replaces=theirs.id), graph, graph.to_dict())
    fb.ingest(replace(_sample(graph, model_step * 1.4), replaces=999), graph, graph.to_dict())  # no such sample
    assert fb.table.evidence(_sample(graph, 0).keys()[-1]).n == 3
    assert set(fb.db.job_samples()["status"]) == {"accepted"}
