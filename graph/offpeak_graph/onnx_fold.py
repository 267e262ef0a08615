"""Fold an ONNX model's shape arithmetic into constants, so shape inference can see through dynamic reshapes.

Exporters compute reshape targets at run time (`Shape -> Gather -> Div -> Concat -> Reshape`), and
`onnx.shape_inference` propagates values only through a few of those ops, leaving dimensions unknown (and their
FLOPs uncountable). Once input dimensions are pinned every `Shape` output is known, so the small integer
computations that follow can be evaluated (with `onnx.reference`) and replaced by `Constant` nodes. Repeated until
nothing changes. Only nodes whose inputs are all small known values are evaluated; activations never are.
"""

from __future__ import annotations

from typing import Any

MAX_FOLDED_ELEMENTS = 1 << 16  # larger values are data, not shapes
_MAX_ROUNDS = 8
_NEVER_FOLD = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                         "Bernoulli", "Dropout", "If", "Loop", "Scan"})  # fmt: skip


def _known_values(model: Any) -> dict[str, Any]:
    """Values known before evaluation: small integer initializers and Constant nodes. Floating-point
    initializers are parameters: folding them away (e.g. a position-embedding lookup) would lose real ops."""
    from onnx import TensorProto, numpy_helper

    integer_types = {TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL}
    known: dict[str, Any] = {}
    for init in model.graph.initializer:
        small = _numel(list(init.dims)) <= MAX_FOLDED_ELEMENTS and not init.external_data
        if small and init.data_type in integer_types:
            known[init.name] = numpy_helper.to_array(init)
    for node in model.graph.node:
        if node.op_type == "Constant":
            try:
                known[node.output[0]] = _run(node, [])[0]
            except Exception:  # noqa: BLE001, S112 - an odd constant is simply not folded
                continue
    return known


def _numel(dims: list[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _run(node: Any, inputs: list[Any]) -> list[Any]:
    from onnx.reference import ReferenceEvaluator

    names = [n for n in node.input]
    feeds = {name: value for name, value in zip(names, inputs, strict=True) if name}
    return list(ReferenceEvaluator(node).run(None, feeds))


def _static_shape(value_info: Any) -> list[int] | None:
    tt = value_info.type.tensor_type
    if not tt.HasField("shape"):
        return None
    dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in tt.shape.dim]
    return None if any(d < 0 for d in dims) else dims


def fold_round(model: Any) -> int:
    """One pass over the (shape-inferred) model: replace foldable nodes by Constants. Returns how many."""
    import numpy as np
    from onnx import helper, numpy_helper

    shapes = {v.name: _static_shape(v) for v in [*model.graph.input, *model.graph.value_info, *model.graph.output]}
    known = _known_values(model)
    folded = 0
    nodes: list[Any] = []
    for node in model.graph.node:
        outputs = _evaluate(node, shapes, known)
        if outputs is None or len(outputs) != len(node.output):
            nodes.append(node)
            continue
        if any(np.asarray(v).size > MAX_FOLDED_ELEMENTS for v in outputs):
            nodes.append(node)
            continue
        for name, value in zip(node.output, outputs, strict=True):
            if name:
                known[name] = np.asarray(value)
                nodes.append(helper.make_node("Constant", [], [name],
                                              value=numpy_helper.from_array(np.asarray(value), name)))  # fmt: skip
        folded += 1
    if folded:
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return folded


def _evaluate(node: Any, shapes: dict[str, list[int] | None], known: dict[str, Any]) -> list[Any] | None:
    """The node's output values if they can be computed from shapes and known values alone, else None."""
    import numpy as np

    if node.op_type in ("Constant", *_NEVER_FOLD) or node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type in ("Shape", "Size"):
        shape = shapes.get(node.input[0])
        if shape is None:
            return None
        if node.op_type == "Size":
            return [np.array(_numel(shape), dtype=np.int64)]
        start = next((a.i for a in node.attribute if a.name == "start"), 0)
        end = next((a.i for a in node.attribute if a.name == "end"), None)
        return [np.array(shape[start:end], dtype=np.int64)]
    if not node.input or not all(not name or name in known for name in node.input):
        return None
    try:
        return _run(node, [known.get(name) for name in node.input])
    except Exception:  # noqa: BLE001 - whatever cannot be evaluated stays a node
        return None


def infer_with_folding(model: Any) -> Any:
    """Shape-infer `model`, folding shape arithmetic between rounds until shapes stop improving."""
    import onnx

    model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    for _ in range(_MAX_ROUNDS):
        if fold_round(model) == 0:
            break
        del model.graph.value_info[:]
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    return model
