"""Record a PyTorch model's forward pass as a list of `Op`s (imports torch; only the extractor loads this).

How: a `TorchDispatchMode` sees every ATen op with real shapes (on the meta device, so no memory or compute is
spent); a `TorchFunctionMode` turns a few composite functions (`F.linear`, `F.scaled_dot_product_attention`,
`torch.matmul`, ...) into one op each; forward hooks merge the ops of a leaf-module call (a module with no
children, or a known layer such as `nn.LSTM`) into one op carrying the module's attributes, when one type
describes them. Views and allocations launch no kernel: they are not recorded and edges pass through them.
Edges come from tensor identity: each tensor remembers the op that produced it. FLOPs come from
`torch.utils.flop_counter`'s registry (matmul-class ops; multiply-add = 2 FLOPs), so they match what PyTorch's
own `FlopCounterMode` reports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry
from torch.utils.weak import WeakTensorKeyDictionary

from offpeak_graph.aten_ops import (
    ALLOC_OPS,
    MODULE_TYPES,
    aten_op_type,
    base_name,
    bytes_read_of,
    module_op_type,
)
from offpeak_graph.schema import Op, OpType

# Composite functions recorded as one op each (their inner ATen ops are summed into it).
GROUPED_FUNCTIONS: dict[Callable[..., Any], OpType] = {
    F.linear: OpType.LINEAR,
    F.scaled_dot_product_attention: OpType.SDPA,
    torch.matmul: OpType.MATMUL,
    torch.Tensor.matmul: OpType.MATMUL,
    torch.Tensor.__matmul__: OpType.MATMUL,
    F.layer_norm: OpType.LAYERNORM,
    F.group_norm: OpType.GROUPNORM,
    F.batch_norm: OpType.BATCHNORM,
    F.embedding: OpType.EMBEDDING,
    F.cross_entropy: OpType.LOSS,
    F.softmax: OpType.SOFTMAX,
    F.dropout: OpType.DROPOUT,
}
if hasattr(F, "rms_norm"):
    GROUPED_FUNCTIONS[F.rms_norm] = OpType.RMSNORM


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a kernel touches for `t`: its elements, capped by its storage (expanded views share memory)."""
    logical = t.numel() * t.element_size()
    try:
        return min(logical, t.untyped_storage().nbytes())
    except (RuntimeError, NotImplementedError):
        return logical


def _tensors(obj: Any) -> list[torch.Tensor]:
    leaves, _ = tree_flatten(obj)
    return [x for x in leaves if isinstance(x, torch.Tensor)]


def _plain(value: Any) -> Any:
    """JSON-friendly attribute value (tuples -> lists, dtypes -> names)."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return str(value)


def module_attrs(module: nn.Module) -> dict[str, Any]:
    """The hyper-parameters that decide a layer's cost, read from the module."""
    names = (
        "in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups", "output_padding",
        "in_features", "out_features", "num_features", "normalized_shape", "num_groups", "num_channels",
        "num_embeddings", "embedding_dim", "input_size", "hidden_size", "num_layers", "bidirectional",
        "batch_first", "proj_size", "output_size", "p", "dim", "eps", "inplace", "nf", "nx",
    )  # fmt: skip
    scalar = (int, float, bool, tuple, list, str)
    attrs = {n: _plain(getattr(module, n)) for n in names if isinstance(getattr(module, n, None), scalar)}
    if "kernel_size" in attrs:
        attrs["kernel"] = attrs.pop("kernel_size")
    if "nf" in attrs and "nx" in attrs:  # transformers Conv1D
        attrs["in_features"], attrs["out_features"] = attrs.pop("nx"), attrs.pop("nf")
    if isinstance(module, (nn.Linear, nn.modules.conv._ConvNd)):
        attrs["bias"] = module.bias is not None
    if isinstance(module, nn.modules.conv._ConvNd) and isinstance(attrs.get("padding"), str):
        attrs["padding_mode"] = attrs.pop("padding")
    return attrs


def aten_attrs(base: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Attributes of a stand-alone ATen op, read from its arguments."""
    if base in ("convolution", "_convolution") and len(args) >= 9:
        weight = args[1]
        return {
            "in_channels": int(args[0].shape[1]),
            "out_channels": int(weight.shape[1] * args[8]) if args[6] else int(weight.shape[0]),
            "kernel": list(weight.shape[2:]),
            "stride": _plain(args[3]),
            "padding": _plain(args[4]),
            "dilation": _plain(args[5]),
            "transposed": bool(args[6]),
            "groups": int(args[8]),
        }
    if base in ("mm", "addmm", "bmm", "baddbmm"):
        a, b = (args[1], args[2]) if base in ("addmm", "baddbmm") else (args[0], args[1])
        return {"m": int(a.shape[-2]), "k": int(a.shape[-1]), "n": int(b.shape[-1])}
    return {}


def sdpa_attrs(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    q, k = args[0], args[1]
    attrs: dict[str, Any] = {"head_dim": int(q.shape[-1]), "seq_q": int(q.shape[-2]), "seq_k": int(k.shape[-2])}
    if q.dim() >= 3:
        attrs["heads"] = int(q.shape[-3])
    attrs["causal"] = bool(kwargs.get("is_causal", args[5] if len(args) > 5 else False))
    return attrs


@dataclass(slots=True)
class _Group:
    """A composite function call (`F.linear`, sdpa...) being assembled into one op from its ATen ops."""

    op: Op
    read: dict[int, tuple[torch.Tensor, int, int | None]] = field(default_factory=dict)  # id -> (t, bytes, producer)
    made: list[torch.Tensor] = field(default_factory=list)  # tensors produced inside
    ran: bool = False  # at least one recorded (non-view) ATen op ran inside


@dataclass(slots=True)
class _Frame:
    """A leaf-module call. Its ops are recorded normally; when it returns they are merged into one op, unless
    they are a mix that no single type describes (then they stay, named after the module)."""

    start: int  # index of this call's first op in Recorder.ops
    op: Op  # name, class, attrs and input shapes of the merged op
    reads: list[tuple[int | None, int, int, bool]] = field(default_factory=list)  # (producer, id, bytes, param?)
    held: list[torch.Tensor] = field(default_factory=list)  # keeps the ids in `reads` unique during the call
    made: list[torch.Tensor] = field(default_factory=list)  # tensors given a producer during the call


@dataclass(slots=True)
class RecordSettings:
    """What counts as one op."""

    collapse_leaf_modules: bool = True  # a childless module (or known layer) is one op
    group_functions: bool = True  # F.linear, sdpa, matmul... are one op each


class Recorder:
    """Collects ops while a model runs under `recording(...)`. One recorder per forward pass."""

    def __init__(self, model: nn.Module, *, settings: RecordSettings | None = None) -> None:
        self.settings = settings or RecordSettings()
        self.ops: list[Op] = []
        # Keyed by tensor identity without keeping tensors alive (the CPU fallback holds real activations).
        self._producer: WeakTensorKeyDictionary = WeakTensorKeyDictionary()  # tensor -> op id (-1: open group)
        self._param_of: WeakTensorKeyDictionary = WeakTensorKeyDictionary()  # parameter or view of one -> id(param)
        for p in model.parameters():
            self._param_of[p] = id(p)
        self._param_numel: dict[int, int] = {id(p): p.numel() for p in model.parameters()}
        self._counted_params: set[int] = set()
        self._names: dict[int, str] = {id(m): n for n, m in model.named_modules()}
        self._stack: list[tuple[nn.Module, bool]] = []  # (module, opened the frame)
        self._group: _Group | None = None
        self._frame: _Frame | None = None
        self.assumed_scalars = 0  # boolean reads of meta tensors answered True (see _DispatchMode)

    # ---- inputs -------------------------------------------------------------------------------------
    def add_input(self, name: str, t: torch.Tensor) -> None:
        op = Op(id=len(self.ops), type=OpType.INPUT, name=name, framework_type="input",
                output_shapes=[list(t.shape)], dtype=dtype_name(t.dtype))  # fmt: skip
        self.ops.append(op)
        self._set_producer(t, op.id)

    # ---- bookkeeping --------------------------------------------------------------------------------
    def _set_producer(self, t: torch.Tensor, op_id: int | None) -> None:
        if op_id is None:
            self._producer.pop(t, None)
            return
        self._producer[t] = op_id
        if self._frame is not None:
            self._frame.made.append(t)

    def _scope(self) -> str:
        return self._names.get(id(self._stack[-1][0]), "") if self._stack else ""

    def _take_params(self, tensors: list[torch.Tensor]) -> int:
        """Parameters (or views of them) among `tensors` not counted yet; counts them."""
        params = 0
        for t in tensors:
            param = self._param_of.get(t)
            if param is not None and param not in self._counted_params:
                self._counted_params.add(param)
                params += self._param_numel[param]
        return params

    def _append(self, op: Op, reads: list[tuple[int | None, torch.Tensor, int]], outs: list[torch.Tensor]) -> None:
        """Add a finished op; let an open module frame know what it read."""
        op.id = len(self.ops)
        self.ops.append(op)
        if self._frame is not None:
            self._frame.reads.extend((p, id(t), n, t in self._param_of) for p, t, n in reads)
            self._frame.held.extend(t for _, t, _ in reads)
        for t in outs:
            self._set_producer(t, op.id)

    # ---- module hooks -------------------------------------------------------------------------------
    def _collapsible(self, module: nn.Module) -> bool:
        if not self.settings.collapse_leaf_modules:
            return False
        return type(module).__name__ in MODULE_TYPES or next(module.children(), None) is None

    def pre_hook(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        opened = False
        if self._frame is None and self._group is None and self._collapsible(module):
            name = type(module).__name__
            shapes = [list(t.shape) for t in _tensors((args, kwargs)) if t not in self._param_of]
            op = Op(id=-1, type=OpType.OTHER, name=self._names.get(id(module), ""), framework_type=name,
                    attrs=module_attrs(module), input_shapes=shapes)  # fmt: skip
            self._frame = _Frame(start=len(self.ops), op=op)
            opened = True
        self._stack.append((module, opened))

    def post_hook(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        _, opened = self._stack.pop()
        if opened:
            frame, self._frame = self._frame, None
            assert frame is not None
            self._merge(frame, _tensors(output))

    def _merge(self, frame: _Frame, outs: list[torch.Tensor]) -> None:
        inner = self.ops[frame.start :]
        if not inner:
            return  # identity-like call (eval-mode dropout, nn.Identity): no op
        op_type = module_op_type(frame.op.framework_type, [OpType(op.type) for op in inner])
        if op_type is None:
            return  # a mix of ops: keep them, each named after this module
        op = frame.op
        op.id, op.type = frame.start, op_type
        op.flops = float(sum(o.flops for o in inner))
        op.params = sum(o.params for o in inner)
        external = [(p, key, n, param) for p, key, n, param in frame.reads if p is None or p < frame.start]
        op.inputs = sorted({p for p, _, _, _ in external if p is not None})
        op.output_shapes = [list(t.shape) for t in outs]
        op.dtype = dtype_name(outs[0].dtype) if outs else inner[-1].dtype
        op.bytes_written = sum(tensor_bytes(t) for t in outs)
        distinct = {key: (n, param) for _, key, n, param in external}
        op.bytes_read = bytes_read_of(op_type, list(distinct.values()), written=op.bytes_written)
        del self.ops[frame.start :]
        self.ops.append(op)
        for t in frame.made:  # everything made inside now comes from the merged op
            producer = self._producer.get(t)
            if producer is not None and producer >= frame.start:
                self._producer[t] = frame.start
        if self._frame is not None:  # cannot happen today (frames do not nest); keep the invariant explicit
            self._frame.reads.extend(frame.reads)

    # ---- function grouping --------------------------------------------------------------------------
    def run_function(self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        op_type = GROUPED_FUNCTIONS.get(func) if self.settings.group_functions else None
        if op_type is None or self._group is not None:
            return func(*args, **kwargs)
        attrs: dict[str, Any] = {}
        if op_type is OpType.SDPA:
            attrs = sdpa_attrs(args, kwargs)
        elif op_type is OpType.LINEAR and len(args) > 1 and isinstance(args[1], torch.Tensor):
            attrs = {"in_features": int(args[1].shape[-1]), "out_features": int(args[1].shape[0])}
        prefix = "F" if getattr(F, func.__name__, None) is func else "torch"
        shapes = [list(t.shape) for t in _tensors((args, kwargs)) if t not in self._param_of]
        op = Op(id=-1, type=op_type, name=self._scope(), framework_type=f"{prefix}.{func.__name__}", attrs=attrs,
                input_shapes=shapes)  # fmt: skip
        self._group = group = _Group(op=op)
        try:
            out = func(*args, **kwargs)
        finally:
            self._group = None
        if group.ran:
            outs = _tensors(out)
            op.output_shapes = [list(t.shape) for t in outs]
            op.dtype = dtype_name(outs[0].dtype) if outs else ""
            op.inputs = sorted({p for _, _, p in group.read.values() if p is not None})
            op.bytes_written = sum(tensor_bytes(t) for t in outs)
            op.bytes_read = bytes_read_of(op_type, [(n, t in self._param_of) for t, n, _ in group.read.values()],
                                          written=op.bytes_written)  # fmt: skip
            self._append(op, [(p, t, n) for t, n, p in group.read.values()], outs)
            for t in group.made:  # intermediate tensors of the function belong to it too
                if self._producer.get(t) == -1:
                    self._set_producer(t, op.id)
        return out

    # ---- ATen ops -----------------------------------------------------------------------------------
    def on_aten(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        base = base_name(func._overloadpacket.__name__)
        if base in ("_local_scalar_dense", "is_nonzero"):
            return  # a host read of a value (`.item()`): no kernel worth an op
        ins = _tensors((args, kwargs))
        outs = _tensors(out)
        if func.is_view or base in ALLOC_OPS or base in ("detach", "alias", "lift_fresh", "_unsafe_view"):
            source = self._producer.get(ins[0]) if ins and base not in ALLOC_OPS else None
            param = self._param_of.get(ins[0]) if ins else None
            for t in outs:
                if param is not None:
                    self._param_of[t] = param
                self._set_producer(t, source)
                if source == -1 and self._group is not None:
                    self._group.made.append(t)
            return
        packet = func._overloadpacket
        flops = float(flop_registry[packet](*args, **kwargs, out_val=out)) if packet in flop_registry else 0.0
        params = self._take_params(ins)
        producers = [self._producer.get(t) for t in ins]
        if self._group is not None:
            g = self._group
            g.ran = True
            g.op.flops += flops
            g.op.params += params
            for t, p in zip(ins, producers, strict=True):
                if p != -1:
                    g.read.setdefault(id(t), (t, tensor_bytes(t), p))
            for t in outs:
                self._producer[t] = -1  # resolved to the group's id when it closes
                g.made.append(t)
            return
        distinct = {id(t): (p, t) for t, p in zip(ins, producers, strict=True)}
        reads = [(p, t, tensor_bytes(t)) for p, t in distinct.values()]
        spatial = args[1].dim() - 2 if base in ("convolution", "_convolution") else None
        op_type = aten_op_type(base, spatial_dims=spatial)
        written = sum(tensor_bytes(t) for t in outs)
        op = Op(
            id=-1,
            type=op_type,
            name=self._scope(),
            framework_type=f"aten.{packet.__name__}",
            attrs=aten_attrs(base, args, kwargs),
            inputs=sorted({p for p in producers if p is not None}),
            input_shapes=[list(t.shape) for t in ins if t not in self._param_of],
            output_shapes=[list(t.shape) for t in outs],
            dtype=dtype_name(outs[0].dtype) if outs else "",
            flops=flops,
            bytes_read=bytes_read_of(op_type, [(n, t in self._param_of) for _, t, n in reads], written=written),
            bytes_written=written,
            params=params,
        )
        self._append(op, reads, outs)


_SCALAR_READS = (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default)


class _DispatchMode(TorchDispatchMode):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func in _SCALAR_READS and args[0].device.type == "meta" and args[0].dtype == torch.bool:
            # A meta tensor has no values. Libraries test masks (`if mask.all():`) to pick a fast path; the traced
            # inputs are all-valid tokens (no padding, no packing), for which such tests hold.
            self.recorder.assumed_scalars += 1
            return True
        out = func(*args, **kwargs)
        self.recorder.on_aten(func, args, kwargs, out)
        return out


class _FunctionMode(TorchFunctionMode):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return self.recorder.run_function(func, args, kwargs or {})


@contextmanager
def recording(model: nn.Module, recorder: Recorder) -> Iterator[Recorder]:
    """Hook `model` and switch on the modes for the duration of one forward pass."""
    with ExitStack() as stack:
        for module in model.modules():
            stack.callback(module.register_forward_pre_hook(recorder.pre_hook, with_kwargs=True).remove)
            stack.callback(module.register_forward_hook(recorder.post_hook, with_kwargs=True).remove)
        stack.enter_context(_FunctionMode(recorder))
        stack.enter_context(_DispatchMode(recorder))
        yield recorder


@dataclass(slots=True)
class ModelCall:
    """How to call the model once: positional and keyword arguments (tensors become INPUT ops)."""

    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def named_tensors(self) -> list[tuple[str, torch.Tensor]]:
        named = [(f"input{i}", a) for i, a in enumerate(self.args) if isinstance(a, torch.Tensor)]
        return named + [(k, v) for k, v in self.kwargs.items() if isinstance(v, torch.Tensor)]


def record_forward(model: nn.Module, call: ModelCall, *, settings: RecordSettings | None = None) -> Recorder:
    """Run `model(*args, **kwargs)` once; the recorder holds its ops in execution (= topological) order."""
    recorder = Recorder(model, settings=settings)
    for name, t in call.named_tensors():
        recorder.add_input(name, t)
    with recording(model, recorder):
        model(*call.args, **call.kwargs)
    return recorder
