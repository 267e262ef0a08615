"""ONNX file -> `ModelGraph`, using `onnx.shape_inference` for shapes (imports onnx).

Symbolic input dimensions are pinned before inference: axis 0 to the batch size, axis 1 to the sequence length
when one is given. ONNX nodes are already topologically sorted (the format requires it). Initializers are
parameters, counted at their first consumer; `Constant` nodes are data, not operators.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offpeak.errors import UserError
from offpeak_graph.onnx_ops import ATTR_NAMES, SKIPPED, onnx_flops, onnx_op_type
from offpeak_graph.options import ExtractOptions
from offpeak_graph.schema import ModelGraph, Op, OpType

EXTRACTION_ONNX = "onnx-shape-inference"


def _load(path: str) -> Any:
    import onnx

    file = Path(path)
    if not file.is_file():
        raise UserError(f"ONNX file {path!r} not found")
    try:
        model = onnx.load(str(file))
        onnx.checker.check_model(model)
    except Exception as e:  # noqa: BLE001 - protobuf DecodeError, ValidationError, ...
        first = " ".join(str(e).split())[:200] or type(e).__name__
        raise UserError(f"{path!r} is not a valid ONNX model ({first}); re-export it with torch.onnx.export") from e
    return model


def _pin_inputs(model: Any, options: ExtractOptions, initializer_names: set[str]) -> None:
    """Give symbolic input dims concrete values; a fixed batch dim must match the asked batch size."""
    for value in model.graph.input:
        if value.name in initializer_names or not value.type.HasField("tensor_type"):
            continue
        dims = value.type.tensor_type.shape.dim
        for axis, dim in enumerate(dims):
            fixed = dim.HasField("dim_value") and dim.dim_value > 0
            if axis == 0:
                if fixed and dim.dim_value != options.batch_size:
                    raise UserError(
                        f"ONNX input {value.name!r} has a fixed batch of {dim.dim_value}; pass --batch-size "
                        f"{dim.dim_value} or export with a dynamic batch axis"
                    )
                dim.dim_value = options.batch_size
            elif not fixed and axis == 1 and options.seq_len is not None:
                dim.dim_value = options.seq_len


def _shape_table(model: Any) -> dict[str, tuple[list[int] | None, int]]:
    """name -> (shape with -1 for unknown dims, or None if rank unknown; element type)."""
    table: dict[str, tuple[list[int] | None, int]] = {}
    for value in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        tt = value.type.tensor_type
        shape = None
        if tt.HasField("shape"):
            shape = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
        table[value.name] = (shape, tt.elem_type)
    for init in model.graph.initializer:
        table[init.name] = (list(init.dims), init.data_type)
    return table


def _attrs(node: Any) -> dict[str, Any]:
    import onnx

    attrs: dict[str, Any] = {}
    for attr in node.attribute:
        value = onnx.helper.get_attribute_value(attr)
        if isinstance(value, bytes):
            value = value.decode(errors="replace")
        elif isinstance(value, (list, tuple)):
            if not all(isinstance(v, (int, float)) for v in value):
                continue
            value = list(value)
        elif not isinstance(value, (int, float, str)):
            continue  # tensors and sub-graphs
        attrs[ATTR_NAMES.get(attr.name, attr.name)] = value
    return attrs


def extract_onnx(path: str, options: ExtractOptions) -> ModelGraph:
    import onnx

    model = _load(path)
    init_names = {i.name for i in model.graph.initializer}
    _pin_inputs(model, options, init_names)
    try:
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as e:  # noqa: BLE001 - InferenceError and friends
        raise UserError(f"ONNX shape inference failed for {path!r}: {' '.join(str(e).split())[:200]}") from e
    shapes = _shape_table(model)

    def dtype(name: str) -> str:
        elem = shapes.get(name, (None, 0))[1]
        try:
            return str(onnx.helper.tensor_dtype_to_np_dtype(elem)) if elem else ""
        except (KeyError, ValueError, TypeError):
            return onnx.TensorProto.DataType.Name(elem).lower()

    def nbytes(name: str) -> int:
        shape, elem = shapes.get(name, (None, 0))
        if shape is None or any(d < 0 for d in shape) or not elem:
            return 0
        try:
            size = onnx.helper.tensor_dtype_to_np_dtype(elem).itemsize
        except (KeyError, ValueError, TypeError):
            size = 4
        n = 1
        for d in shape:
            n *= d
        return n * size

    ops: list[Op] = []
    producer: dict[str, int] = {}
    alias_of: dict[str, str] = {}  # Identity outputs of initializers -> the initializer
    for value in model.graph.input:
        if value.name in init_names:
            continue
        producer[value.name] = len(ops)
        ops.append(Op(id=len(ops), type=OpType.INPUT, name=value.name, framework_type="input",
                      output_shapes=[shapes[value.name][0] or []], dtype=dtype(value.name)))  # fmt: skip
    counted: set[str] = set()
    constants: set[str] = set()  # outputs of Constant nodes: data, not activations
    for index, node in enumerate(model.graph.node):
        if node.op_type in SKIPPED:
            constants.update(node.output)
            continue
        if node.op_type == "Identity" and node.input[0] in init_names:
            alias_of[node.output[0]] = alias_of.get(node.input[0], node.input[0])  # exporters share weights so
            init_names.add(node.output[0])
            shapes[node.output[0]] = shapes[node.input[0]]
            continue
        ins = [alias_of.get(n, n) for n in node.input if n]
        outs = [n for n in node.output if n]
        in_shapes = [shapes.get(n, (None, 0))[0] for n in ins]
        out_shapes = [shapes.get(n, (None, 0))[0] for n in outs]
        attrs = _attrs(node)
        kernel = attrs.get("kernel")
        if node.op_type == "Conv" and kernel is None and len(in_shapes) > 1 and in_shapes[1]:
            kernel = in_shapes[1][2:]  # type: ignore[index]
            attrs["kernel"] = kernel
        weight_is_param = (len(ins) > 1 and ins[1] in init_names) if node.op_type == "MatMul" else bool(ins and ins[0] in init_names)
        if node.op_type in ("Gemm", "MatMul") and len(ins) > 1 and ins[1] in init_names and in_shapes[1]:
            w = in_shapes[1]
            assert w is not None
            trans = bool(attrs.get("transB")) if node.op_type == "Gemm" else False
            attrs["in_features"], attrs["out_features"] = (w[1], w[0]) if trans else (w[0], w[1])
        params = 0
        for n in ins:
            if n in init_names and n not in counted:
                counted.add(n)
                init_shape = shapes[n][0] or []
                count = 1
                for d in init_shape:
                    count *= d
                params += count
        op = Op(
            id=len(ops),
            type=onnx_op_type(node.op_type, kernel_rank=len(kernel) if kernel else None, weight_is_param=weight_is_param),
            name=node.name or f"{node.op_type}_{index}",
            framework_type=node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}",
            attrs=attrs,
            inputs=sorted({producer[n] for n in ins if n in producer}),
            input_shapes=[s if s is not None else [] for n, s in zip(ins, in_shapes, strict=True)
                          if n not in init_names and n not in constants],
            output_shapes=[s if s is not None else [] for s in out_shapes],
            dtype=dtype(outs[0]) if outs else "",
            flops=onnx_flops(node.op_type, inputs=in_shapes, outputs=out_shapes, attrs=attrs),
            bytes_read=sum(nbytes(n) for n in dict.fromkeys(ins)),
            bytes_written=sum(nbytes(n) for n in outs),
            params=params,
        )
        ops.append(op)
        for n in outs:
            producer[n] = op.id
    first_input = next((o for o in ops if o.type == OpType.INPUT), None)
    per_sample = first_input.output_shapes[0][1:] if first_input and first_input.output_shapes else None
    return ModelGraph(
        framework="onnx",
        model_name=Path(path).stem,
        model_family=model.graph.name or Path(path).stem,
        batch_size=options.batch_size,
        seq_len=options.seq_len,
        input_shape=per_sample or None,
        precision=options.precision,
        mode=options.mode,
        optimizer=options.optimizer,
        extraction=EXTRACTION_ONNX,
        ops=ops,
    )
