"""The predictor's graph cache: one extractor, graphs reused from disk, the extractor's refusal passed on."""

import pytest

from offpeak.errors import UserError
from offpeak_graph.schema import load_graph, save_graph
from offpeak_predictor.graphcache import cache_key, get_graph

ARGS = {"torchvision": "squeezenet1_1", "batch_size": 2, "precision": "fp32", "mode": "train", "optimizer": "sgd"}


def test_graph_is_extracted_once_then_read_from_disk(tmp_path):
    first = get_graph(ARGS, directory=tmp_path)
    path = tmp_path / f"{cache_key(ARGS)}.json.gz"
    assert path.exists() and first.extraction == "torch-dispatch-meta"
    cached = load_graph(path)
    cached.model_name = "marked"  # a graph read back from disk keeps what the file says
    save_graph(cached, path)
    assert get_graph(ARGS, directory=tmp_path).model_name == "marked"
    assert get_graph(ARGS, directory=tmp_path).content_hash() == first.content_hash()


def test_a_changed_extractor_does_not_reuse_graphs_an_older_one_cached(tmp_path, monkeypatch):
    from offpeak_predictor import graphcache

    get_graph(ARGS, directory=tmp_path)
    old_key = cache_key(ARGS)
    monkeypatch.setattr(graphcache, "extractor_fingerprint", lambda: "another-extractor")
    assert cache_key(ARGS) != old_key
    get_graph(ARGS, directory=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{old_key}.json.gz", f"{cache_key(ARGS)}.json.gz"])


def test_fingerprint_changes_with_the_source_only(tmp_path):
    from offpeak_predictor.graphcache import source_fingerprint

    (tmp_path / "extract.py").write_text("A = 1\n")
    first = source_fingerprint(tmp_path)
    (tmp_path / "notes.txt").write_text("not code")
    assert source_fingerprint(tmp_path) == first
    (tmp_path / "extract.py").write_text("A = 2\n")
    assert source_fingerprint(tmp_path) != first
    (tmp_path / "extract.py").write_text("A = 1\n")
    assert source_fingerprint(tmp_path) == first


def test_extractor_refusal_is_raised_and_nothing_is_cached(tmp_path):
    args = {**ARGS, "torchvision": "resnet_does_not_exist"}
    with pytest.raises(UserError, match="unknown torchvision model"):
        get_graph(args, directory=tmp_path)
    assert list(tmp_path.iterdir()) == []
