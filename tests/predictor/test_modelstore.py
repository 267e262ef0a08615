"""The versioned model store (promote, rollback, retention, a broken pointer) and the serving side's watcher."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest

from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.modelstore import ModelStore, ModelStoreError, ModelWatcher, refit_into_store
from offpeak_predictor.predict import Predictor
from offpeak_predictor.refit import RefitSettings
from offpeak_predictor.samples import Feedback

from .conftest import mlp_graph
from .refit_support import add_samples

NOW = dt.datetime(2026, 12, 1, 3, 0, 0, tzinfo=dt.UTC)


def _version(model: RuntimeModel, version: str) -> RuntimeModel:
    return dataclasses.replace(model, version=version)


def test_promote_then_rollback_restores_the_previous_version(tiny_model, tmp_path) -> None:
    store = ModelStore(tmp_path / "store")
    assert store.current() is None and store.versions() == []
    base = _version(tiny_model, "base")
    pointer = store.promote(_version(tiny_model, "base+refit.1"), replaces=base, reason="better", now=NOW)
    assert (pointer.current, pointer.previous) == ("base+refit.1", "base")  # the replaced model is kept to go back to
    assert store.versions() == ["base", "base+refit.1"]
    store.promote(_version(tiny_model, "base+refit.2"), replaces=base)
    assert (store.pointer().current, store.pointer().previous) == ("base+refit.2", "base+refit.1")
    pointer = store.rollback()
    assert (pointer.current, pointer.previous) == ("base+refit.1", "base")
    assert store.load("base+refit.1").version == "base+refit.1"
    assert "base+refit.2" not in store.versions()  # a rolled-back version is gone for good
    store.rollback()
    assert store.current() == "base"
    with pytest.raises(ModelStoreError, match="nothing to roll back to: .* one version only"):
        store.rollback()
    saved = json.loads(store.pointer_path.read_text())
    assert [e["action"] for e in saved["events"]] == ["promote", "promote", "rollback", "rollback"]
    assert saved["events"][0] == {"at": NOW.isoformat(), "action": "promote", "version": "base+refit.1",
                                  "reason": "better"}  # fmt: skip
    assert not [p for p in store.root.rglob("*.tmp")]  # atomic writes leave no temporary files


def test_an_empty_store_has_nothing_to_roll_back(tmp_path) -> None:
    with pytest.raises(ModelStoreError, match="no promoted version"):
        ModelStore(tmp_path / "store").rollback()


def test_retention_keeps_the_last_n_versions(tiny_model, tmp_path) -> None:
    store = ModelStore(tmp_path / "store", keep=3)
    base = _version(tiny_model, "base")
    for i in range(1, 6):
        store.promote(_version(tiny_model, f"base+refit.{i}"), replaces=base)
    assert store.pointer().history == ("base+refit.3", "base+refit.4", "base+refit.5")
    assert store.versions() == ["base+refit.3", "base+refit.4", "base+refit.5"]
    with pytest.raises(ValueError, match="keep must be >= 2"):
        ModelStore(tmp_path / "other", keep=1)


def test_a_corrupt_or_dangling_pointer_is_a_clear_error(tiny_model, tmp_path) -> None:
    store = ModelStore(tmp_path / "store")
    base = _version(tiny_model, "base")
    store.promote(_version(tiny_model, "base+refit.1"), replaces=base)
    store.pointer_path.write_text("{not json")
    with pytest.raises(ModelStoreError, match=r"pointer .*pointer.json is corrupt .*versions on disk: base, "):
        store.current()
    watcher = ModelWatcher(store, base=base)
    with pytest.raises(ModelStoreError):
        watcher.reload_if_changed()
    assert watcher.serving == "base"  # still serving what it served
    store.pointer_path.write_text(json.dumps({"format": "offpeak-model-store/v1", "current": "x", "history": ["y"]}))
    with pytest.raises(ModelStoreError, match="'current' is not the last entry"):
        store.current()
    store.pointer_path.unlink()
    store.promote(_version(tiny_model, "base+refit.2"), replaces=base)  # a missing pointer is an empty store
    store.model_path("base+refit.2").unlink()
    with pytest.raises(ModelStoreError, match=r"'base\+refit.2' is named by .* is missing; roll back"):
        ModelWatcher(store, base=base).reload_if_changed()
    with pytest.raises(ModelStoreError, match="not a usable model version"):
        store.model_path("../escape")


def test_the_watcher_serves_the_current_version_of_its_own_base(tiny_model, tmp_path) -> None:
    store = ModelStore(tmp_path / "store")
    base = _version(tiny_model, "base")
    watcher = ModelWatcher(store, base=base)
    assert watcher.reload_if_changed() is None  # empty store: keep serving the base
    store.promote(_version(tiny_model, "base+refit.1"), replaces=base)
    model = watcher.reload_if_changed()
    assert model is not None and model.version == "base+refit.1"
    assert watcher.reload_if_changed() is None  # unchanged pointer: nothing to do
    store.rollback()
    assert watcher.reload_if_changed() is base
    # a store re-fitted from another base (the image now ships a newer model) is not served
    newer = ModelWatcher(store, base=_version(tiny_model, "newer"))
    store.promote(_version(tiny_model, "base+refit.2"))
    assert newer.reload_if_changed() is None and newer.wanted() == "newer"


def test_a_promoted_refit_reaches_a_fresh_predictor_and_its_corrections_are_rejudged(tiny_model, tmp_path) -> None:
    """What the server does after a refit: serve the new model, re-learn the corrections against it."""
    db = add_samples(tmp_path / "db.sqlite", tiny_model, lambda *_: 1.4)
    store = ModelStore(tmp_path / "store")
    result = refit_into_store(serving=tiny_model, samples=db.job_samples(), store=store, now=NOW,
                              settings=RefitSettings(threads=1))  # fmt: skip
    assert result.decision.promote and store.current() == result.decision.candidate_version
    assert store.pointer().previous == tiny_model.version
    model = ModelWatcher(store, base=tiny_model).reload_if_changed()
    assert model is not None and model.version == store.current()
    predictor = Predictor(model)
    counts = Feedback(predictor=predictor, db=db).rebuild()
    assert counts["accepted"] == 36
    rows = db.sample_rows()
    assert {r["model_version"] for r in rows} == {model.version}  # re-judged under the promoted model
    # the bias is now in the model, so what the correction still has to add is small
    graph = mlp_graph(batch=16, width=1024, layers=2, name="mlp-d")
    answer = predictor.predict(graph, ["T4"])[0]
    assert abs(answer["correction"]["factor"] - 1.0) < 0.1
    # a second refit has nothing left to learn but noise: the held-out error says so, the model stays
    again = refit_into_store(serving=model, samples=db.job_samples(), store=store, now=NOW + dt.timedelta(days=1),
                             settings=RefitSettings(threads=1))  # fmt: skip
    assert not again.decision.promote and store.current() == model.version
    fresh = ModelStore(tmp_path / "fresh")
    dry = refit_into_store(serving=tiny_model, samples=db.job_samples(), store=fresh, now=NOW,
                           settings=RefitSettings(threads=1), dry_run=True)  # fmt: skip
    assert dry.decision.promote and fresh.current() is None and fresh.versions() == []  # a dry run stores nothing
