"""ONNX file -> `ModelGraph`, using `onnx.shape_inference` for shapes (imports onnx).

Symbolic input dimensions are pinned before inference: axis 0 to the batch size, axis 1 to the sequence length
when one is given. ONNX nodes are already topologically sorted (the format requires it). Initializers are
parameters, counted at their first consumer; `Constant` nodes are data, not operators.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Any

from offpeak.errors import UserError
from offpeak_graph.aten_ops import bytes_read_of
from offpeak_graph.onnx_fold import infer_with_folding
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
        onnx.checker.check_model(str(file))  # by path: also works past protobuf's 2 GB limit
        model = onnx.load(str(file), load_external_data=False)  # shapes only: leave big weights on disk
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


_PRECISIONS: dict[int, str] = {1: "fp32", 10: "fp16", 16: "bf16"}  # TensorProto element types


def _file_precision(float_inputs: list[int], asked: str) -> str:
    """The file's first float input decides; an fp32 file asked for as tf32 stays tf32 (same tensors)."""
    if not float_inputs:
        return asked
    found = _PRECISIONS[float_inputs[0]]
    return "tf32" if found == "fp32" and asked == "tf32" else found


@dataclass(slots=True)
class _Tensors:
    """What is known about every named tensor of the model."""

    shapes: dict[str, tuple[list[int] | None, int]]  # name -> (shape or None, element type)
    params: set[str]  # initializers (and Identity aliases of them)
    constants: set[str] = field(default_factory=set)  # Constant node outputs: data, not activations
    alias_of: dict[str, str] = field(default_factory=dict)  # Identity output -> initializer
    counted: set[str] = field(default_factory=set)  # initializers already attributed to an op

    def shape(self, name: str) -> list[int] | None:
        return self.shapes.get(name, (None, 0))[0]

    def dtype(self, name: str) -> str:
        import onnx

        elem = self.shapes.get(name, (None, 0))[1]
        if not elem:
            return ""
        try:
            return str(onnx.helper.tensor_dtype_to_np_dtype(elem))
        except (KeyError, ValueError, TypeError):
            return str(onnx.TensorProto.DataType.Name(elem)).lower()

    def nbytes(self, name: str) -> int:
        import onnx

        shape, elem = self.shapes.get(name, (None, 0))
        if shape is None or any(d < 0 for d in shape) or not elem:
            return 0
        try:
            size = int(onnx.helper.tensor_dtype_to_np_dtype(elem).itemsize)
        except (KeyError, ValueError, TypeError):
            size = 4
        return prod(shape) * size

    def take_params(self, names: list[str]) -> int:
        """Elements of initializers among `names` not yet attributed to an op."""
        total = 0
        for name in names:
            if name in self.params and name not in self.counted:
                self.counted.add(name)
                total += prod(self.shape(name) or [])
        return total


def _node_op(node: Any, index: int, tensors: _Tensors, producer: dict[str, int]) -> Op:
    ins = [tensors.alias_of.get(n, n) for n in node.input if n]
    outs = [n for n in node.output if n]
    in_shapes = [tensors.shape(n) for n in ins]
    out_shapes = [tensors.shape(n) for n in outs]
    attrs = _attrs(node)
    weight = in_shapes[1] if len(ins) > 1 and ins[1] in tensors.params else None
    if node.op_type == "Conv" and "kernel" not in attrs and len(in_shapes) > 1 and in_shapes[1]:
        attrs["kernel"] = in_shapes[1][2:]  # type: ignore[index]
    if node.op_type in ("Gemm", "MatMul") and weight and len(weight) == 2:
        transposed = node.op_type == "Gemm" and bool(attrs.get("transB"))
        attrs["in_features"], attrs["out_features"] = (weight[1], weight[0]) if transposed else (weight[0], weight[1])
    table_is_param = bool(ins) and ins[0] in tensors.params  # Gather from a constant table: an embedding
    kernel = attrs.get("kernel")
    op_type = onnx_op_type(
        node.op_type,
        kernel_rank=len(kernel) if isinstance(kernel, list) else None,
        weight_is_param=weight is not None if node.op_type == "MatMul" else table_is_param,
    )
    activations = [(n, s) for n, s in zip(ins, in_shapes, strict=True)
                   if n not in tensors.params and n not in tensors.constants]  # fmt: skip
    return Op(
        id=-1,
        type=op_type,
        name=node.name or f"{node.op_type}_{index}",
        framework_type=node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}",
        attrs=attrs,
        inputs=sorted({producer[n] for n in ins if n in producer}),
        input_shapes=[s if s is not None else [] for _, s in activations],
        output_shapes=[s if s is not None else [] for s in out_shapes],
        dtype=tensors.dtype(outs[0]) if outs else "",
        flops=onnx_flops(node.op_type, inputs=in_shapes, outputs=out_shapes, attrs=attrs),
        bytes_read=bytes_read_of(op_type, [(tensors.nbytes(n), n in tensors.params) for n in dict.fromkeys(ins)],
                                 written=sum(tensors.nbytes(n) for n in outs)),
        bytes_written=sum(tensors.nbytes(n) for n in outs),
        params=tensors.take_params(ins),
    )


def extract_onnx(path: str, options: ExtractOptions) -> ModelGraph:
    """The graph of an ONNX file. `precision` is read from the file's first floating-point input."""
    import onnx

    model = _load(path)
    init_names = {i.name for i in model.graph.initializer}
    _pin_inputs(model, options, init_names)
    try:
        model = infer_with_folding(model)
    except Exception as e:  # noqa: BLE001 - InferenceError and friends
        raise UserError(f"ONNX shape inference failed for {path!r}: {' '.join(str(e).split())[:200]}") from e
    tensors = _Tensors(shapes=_shape_table(model), params=set(init_names))

    ops: list[Op] = []
    producer: dict[str, int] = {}
    for value in model.graph.input:
        if value.name not in init_names:
            producer[value.name] = len(ops)
            shape = tensors.shape(value.name) or []
            ops.append(Op(id=len(ops), type=OpType.INPUT, name=value.name, framework_type="input",
                          output_shapes=[shape], dtype=tensors.dtype(value.name)))  # fmt: skip
    for index, node in enumerate(model.graph.node):
        if node.op_type in SKIPPED:
            tensors.constants.update(node.output)
            continue
        if node.op_type == "Identity" and node.input[0] in tensors.params:  # exporters alias shared weights
            tensors.alias_of[node.output[0]] = tensors.alias_of.get(node.input[0], node.input[0])
            tensors.params.add(node.output[0])
            tensors.shapes[node.output[0]] = tensors.shapes[node.input[0]]
            continue
        op = _node_op(node, index, tensors, producer)
        op.id = len(ops)
        ops.append(op)
        for name in node.output:
            if name:
                producer[name] = op.id

    inputs = [o for o in ops if o.type == OpType.INPUT]
    per_sample = inputs[0].output_shapes[0][1:] if inputs and inputs[0].output_shapes else None
    float_inputs = [tensors.shapes[o.name][1] for o in inputs if tensors.shapes[o.name][1] in _PRECISIONS]
    return ModelGraph(
        framework="onnx",
        model_name=Path(path).stem,
        model_family=model.graph.name or Path(path).stem,
        batch_size=options.batch_size,
        seq_len=options.seq_len,
        input_shape=per_sample or None,
        precision=_file_precision(float_inputs, options.precision),
        mode=options.mode,
        optimizer=options.optimizer,
        extraction=EXTRACTION_ONNX,
        ops=ops,
    )
