"""Benchmark DB round trips and the sample-workload collector on the CPU (tiny configs)."""

import pandas as pd
import pytest

from offpeak.cli import main
from offpeak_predictor.collect import CollectPlan, build_sample_cnn, time_steps
from offpeak_predictor.db import BenchmarkDB
from offpeak_predictor.graphcache import get_graph
from offpeak_predictor.loaders import MODEL_COLUMNS, graph_args_of


def test_db_append_read_and_replace_source(tmp_path):
    db = BenchmarkDB(tmp_path / "b.sqlite")
    rows = pd.DataFrame([{"source": "a", "gpu": "T4", "time_s": 0.1}, {"source": "b", "gpu": "L4", "time_s": 0.2}])
    assert db.append("model_samples", rows) == 2
    assert db.replace_source("model_samples", "a", rows.iloc[:1].assign(time_s=0.5)) == 1
    back = db.read("model_samples").sort_values("source")
    assert list(back.columns) == list(MODEL_COLUMNS)
    assert list(back["time_s"]) == [0.5, 0.2]
    with pytest.raises(ValueError):
        db.read("nope")
    assert list(db.read("model_samples", source="b", gpu="L4")["time_s"]) == [0.2]
    assert db.read("model_samples", source="b", gpu="T4").empty
    with pytest.raises(ValueError, match="unknown column"):
        db.read("model_samples", **{"gpu = gpu OR 1": "x"})  # column names never come from a caller's string


def test_time_steps_drops_the_warm_up_step():
    calls = []
    durations = iter([0.05, 0.0, 0.0, 0.0])

    def step():
        import time

        calls.append(1)
        time.sleep(next(durations))

    mean, std = time_steps(step, steps=3, sync=lambda: None)
    assert len(calls) == 4  # steps 1..N+1
    assert mean < 0.02  # the slow first step is not in the mean


def test_plan_enumerates_every_combination():
    plan = CollectPlan(conv_layers=[1, 2], filters=[4], dense_layers=[1], nodes=[8, 16], batch_sizes=[2],
                       input_sizes=[8], torchvision=["resnet18"])  # fmt: skip
    kinds = [w["kind"] for w in plan.workloads()]
    assert kinds.count("sample_cnn") == 4 and kinds.count("torchvision") == 1


def test_sample_cnn_shapes():
    import torch

    model = build_sample_cnn(conv_layers=3, filters=8, dense_layers=2, nodes=16, input_size=16)
    assert model(torch.zeros(2, 3, 16, 16)).shape == (2, 10)


def test_collect_cli_on_cpu_appends_rows_with_graphs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OFFPEAK_GRAPH_CACHE", str(tmp_path / "graphs"))
    db_path = tmp_path / "c.sqlite"
    assert main(["collect", "--db", str(db_path), "--device", "cpu", "--steps", "2", "--conv-layers", "1,2",
                 "--filters", "4", "--nodes", "8", "--batch-size", "2", "--input-size", "8"]) == 0  # fmt: skip
    rows = BenchmarkDB(db_path).read("model_samples")
    assert len(rows) == 2
    assert (rows["gpu"] == "cpu").all() and (rows["time_s"] > 0).all()
    assert rows["software"].str.contains("pytorch-").all()
    graph = get_graph(graph_args_of(rows.iloc[1]))
    assert graph.model_name == "sample_cnn_c2x4_d1x8" and graph.model_family == "synthetic"
    assert graph.extraction == "torch-dispatch-meta"  # the extractor's own tracing (offpeak_graph.extract_module)
    assert (graph.batch_size, graph.input_shape, graph.optimizer) == (2, [3, 8, 8], "sgd")
    assert sum(op.type == "conv2d" for op in graph.ops) == 2
    # conv 3->4 and 4->4 (3x3, same padding) at 8x8, 2x2 max-pool, dense 64->8, classifier 8->10; batch 2
    b = 2
    expected = 2 * b * 64 * 4 * 3 * 9 + 2 * b * 64 * 4 * 4 * 9 + 2 * b * 64 * 8 + 2 * b * 8 * 10
    assert graph.total_flops_forward == expected
    assert graph.total_params == (3 * 9 * 4 + 4) + (4 * 9 * 4 + 4) + (64 * 8 + 8) + (8 * 10 + 10)


def test_collect_rejects_bad_lists(tmp_path):
    assert main(["collect", "--db", str(tmp_path / "x.sqlite"), "--device", "cpu", "--filters", "a,b"]) == 2


def test_collected_torchvision_row_has_the_family_used_for_hold_outs(tmp_path, monkeypatch):
    from offpeak_predictor.collect import run_collect
    from offpeak_predictor.train import exclude_holdout

    monkeypatch.setenv("OFFPEAK_GRAPH_CACHE", str(tmp_path / "graphs"))
    db = BenchmarkDB(tmp_path / "t.sqlite")
    plan = CollectPlan(conv_layers=[], torchvision=["mnasnet0_5"], batch_sizes=[2], input_sizes=[32], steps=1)
    assert run_collect(plan=plan, db=db, device="cpu", gpu_type="T4") == 1
    row = db.read("model_samples").iloc[0]
    assert row["model_name"] == "mnasnet0_5" and row["family"] == "mnasnet"
    assert exclude_holdout(db.read("model_samples")).empty  # held-out family: never trains the predictor
    graph = get_graph(graph_args_of(row))
    assert graph.model_name == "mnasnet0_5" and graph.extraction == "torch-dispatch-meta"


def test_samples_are_bounded_by_their_graphs_bytes_as_well_as_rows(tmp_path) -> None:
    import sqlite3

    from offpeak_predictor.db import BenchmarkDB

    path = tmp_path / "db.sqlite"
    with sqlite3.connect(path) as con:  # a DB written before graph_bytes existed: its rows are measured
        con.execute("CREATE TABLE job_samples (id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL, job TEXT, "
                    "gpu TEXT, graph_hash TEXT, step_seconds REAL, job_seconds REAL, steps INTEGER, graph TEXT)")
        con.execute("INSERT INTO job_samples (job, graph) VALUES ('old', ?)", ('{"pad": "' + "x" * 990 + '"}',))
    db = BenchmarkDB(path)
    for i in range(4):
        db.add_job_sample(job=f"j{i}", gpu="T4", graph_hash=f"h{i}", step_seconds=0.1, job_seconds=10.0, steps=100,
                          graph={"pad": "x" * 990})  # 1,001 bytes of JSON each
    db.add_job_sample(job="no-graph", gpu="T4", graph_hash="h", step_seconds=0.1, job_seconds=10.0, steps=100,
                      graph=None)
    assert db.prune_samples(max_rows=100, max_graph_bytes=10_000) == []
    dropped = db.prune_samples(max_rows=100, max_graph_bytes=2_500)  # the newest two graphs fit, with "no-graph"
    assert [row["job"] for row in dropped] == ["old", "j0", "j1"]
    assert list(db.job_samples()["job"]) == ["j2", "j3", "no-graph"]
    assert [row["job"] for row in db.prune_samples(max_rows=1)] == ["j2", "j3"]
