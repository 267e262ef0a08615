"""validate_graph: the one check of a model graph's numbers, enums and size (issue #16)."""

import pytest

from offpeak_graph.schema import GraphError, ModelGraph, Op, validate_graph


def _graph(**changes) -> ModelGraph:
    ops = [Op(id=0, type="input", output_shapes=[[8, 16]]),
           Op(id=1, type="linear", inputs=[0], input_shapes=[[8, 16]], output_shapes=[[8, 16]], flops=4096.0,
              bytes_read=1536, bytes_written=512, params=272)]  # fmt: skip
    graph = ModelGraph(framework="synthetic", model_name="g", batch_size=8, ops=ops)
    for key, value in changes.items():
        if key.startswith("op_"):
            setattr(graph.ops[1], key[3:], value)
        else:
            setattr(graph, key, value)
    return graph


def test_a_good_graph_passes_and_survives_a_round_trip():
    graph = _graph()
    assert validate_graph(graph) is graph
    assert validate_graph(ModelGraph.from_dict(graph.to_dict())).content_hash() == graph.content_hash()


@pytest.mark.parametrize(("field", "changes"), [
    ("ops.flops[1]", {"op_flops": float("nan")}),
    ("ops.flops[1]", {"op_flops": float("inf")}),
    ("ops.flops[1]", {"op_flops": -1.0}),
    ("ops.bytes_written[1]", {"op_bytes_written": -1}),
    ("ops.params[1]", {"op_params": "many"}),
    ("ops.output_shapes[1]", {"op_output_shapes": [[8, -16]]}),
    ("ops.input_shapes[1]", {"op_input_shapes": [[8, 1.5]]}),
    ("batch_size", {"batch_size": 0}),
    ("batch_size", {"batch_size": -1}),
    ("mode", {"mode": "bogus"}),
    ("precision", {"precision": "int3"}),
    ("optimizer", {"optimizer": "magic"}),
    ("seq_len", {"seq_len": -4}),
    ("ops", {"ops": []}),
    ("ops.attrs[1]", {"op_attrs": 0}),  # found by tests/predictor/test_api_fuzz.py: it was a 500 in the predictor
    ("ops.attrs[1]", {"op_attrs": {1: "x"}}),
    ("ops.inputs[1]", {"op_inputs": ["0"]}),
    ("ops.inputs[1]", {"op_inputs": 0}),
    ("ops.id[1]", {"op_id": None}),  # found by test_api_fuzz.py: the loss pricing then failed, a 500
    ("ops.id[1]", {"op_id": "1"}),
    ("ops.dtype[1]", {"op_dtype": None}),
    ("ops.name[1]", {"op_name": 3}),
    ("model_name", {"model_name": None}),
    ("framework", {"framework": ["pytorch"]}),
])  # fmt: skip
def test_bad_graphs_raise_naming_the_field(field, changes):
    with pytest.raises(GraphError, match=field.replace("[", r"\[").replace("]", r"\]")):
        validate_graph(_graph(**changes))


def test_too_many_ops_is_refused():
    graph = _graph()
    graph.ops = graph.ops * 3
    with pytest.raises(GraphError, match="at most 5"):
        validate_graph(graph, max_ops=5)
