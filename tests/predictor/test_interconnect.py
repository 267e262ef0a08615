"""Multi-node predictions add the gradients' trip over the network and say which links they assumed."""

from __future__ import annotations

import pytest


from offpeak.errors import UserError
from offpeak_predictor import interconnect
from offpeak_predictor.gpus import resolve_gpu
from offpeak_predictor.predict import PredictOptions, Predictor

from .conftest import mlp_graph


def test_links_follow_the_board() -> None:
    assert interconnect.within_node(resolve_gpu("H100-SXM5-80GB")).gbytes_per_second == 450.0
    assert interconnect.within_node(resolve_gpu("A100-SXM4-40GB")).name.startswith("NVLink")
    assert interconnect.within_node(resolve_gpu("H100-PCIE-80GB")).name.startswith("PCIe Gen5")
    assert interconnect.within_node(resolve_gpu("L4")).gbytes_per_second == 32.0
    assert interconnect.within_node(resolve_gpu("T4")).gbytes_per_second == 16.0
    assert interconnect.network(200).gbytes_per_second == 25.0


def test_a_ring_moves_twice_the_data_less_one_share() -> None:
    link = interconnect.Link("x", 10.0)
    assert interconnect.ring_seconds(data_bytes=1e9, members=1, link=link) == 0.0
    assert interconnect.ring_seconds(data_bytes=1e9, members=2, link=link) == pytest.approx(0.1)
    assert interconnect.ring_seconds(data_bytes=1e9, members=4, link=link) == pytest.approx(0.15)
    # 100 M fp32 gradients across 2 nodes on 100 Gbit/s: 400 MB each way at 12.5 GB/s
    assert interconnect.between_nodes_seconds(params=1e8, nodes=2, link=interconnect.network(100)) == \
        pytest.approx(0.032)


def test_spreading_a_job_over_nodes_adds_the_network_and_says_so(tiny_model) -> None:
    graph = mlp_graph(width=2048)
    one_node = Predictor(tiny_model).predict(graph, ["A100-SXM4-40GB"], PredictOptions(num_gpus=8))[0]
    two_nodes = Predictor(tiny_model).predict(graph, ["A100-SXM4-40GB"],
                                              PredictOptions(num_gpus=16, gpus_per_node=8))[0]
    fast_net = Predictor(tiny_model, network_gbits=800).predict(graph, ["A100-SXM4-40GB"],
                                                                PredictOptions(num_gpus=16, gpus_per_node=8))[0]
    extra = two_nodes["interconnect"]["between_nodes_seconds_per_step"]
    assert extra > 0 and two_nodes["step_seconds"] == pytest.approx(one_node["step_seconds"] + extra, abs=1e-6)
    assert fast_net["interconnect"]["between_nodes_seconds_per_step"] == pytest.approx(extra / 8, abs=1e-6)
    assert two_nodes["interconnect"]["nodes"] == 2 and "NVLink" in two_nodes["interconnect"]["within_node"]
    assert "100 Gbit/s" in two_nodes["interconnect"]["between_nodes"]
    assert "between_nodes" not in one_node["interconnect"]
    single = Predictor(tiny_model).predict(graph, ["A100-SXM4-40GB"], PredictOptions())[0]
    assert "interconnect" not in single


def test_gpus_per_node_must_divide_the_job() -> None:
    with pytest.raises(UserError, match="gpus_per_node must divide num_gpus"):
        PredictOptions(num_gpus=16, gpus_per_node=3).validate()


def test_measured_runs_of_a_multi_node_layout_replace_the_network_estimate(tiny_model) -> None:
    """Samples are judged against the one-node step and their runs crossed the real network: a corrected answer
    scales the one-node step by what was measured and adds no network estimate on top (no double counting)."""
    import math

    from offpeak_predictor.correction import CorrectionTable, keys_for

    graph = mlp_graph(width=2048)
    options = PredictOptions(num_gpus=16, gpus_per_node=8)
    plain = Predictor(tiny_model)
    one_node = plain.predict(graph, ["A100-SXM4-40GB"], PredictOptions(num_gpus=16))[0]["step_seconds"]
    table = CorrectionTable()
    keys = keys_for(graph_hash=graph.content_hash(), family=graph.model_family, gpu_type="A100-SXM4-40GB",
                    precision="fp32", mode="train", batch_size=graph.batch_size, num_gpus=16)
    for _ in range(20):
        table.add(keys, math.log(1.5))  # the real runs took 1.5x the one-node model step
    answer = Predictor(tiny_model, corrections=table).predict(graph, ["A100-SXM4-40GB"], options)[0]
    assert answer["correction"]["samples"] > 0 and answer["interconnect"]["between_nodes_measured"] is True
    assert answer["step_seconds"] == pytest.approx(one_node * answer["correction"]["factor"], rel=1e-5)
    assert 1.3 < answer["step_seconds"] / one_node < 1.5
