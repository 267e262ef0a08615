"""Times the workloads of a named collection plan (`collectplan.py`) on one device; CPU and CUDA run the same code.

Single ops: `warmup` untimed calls, then `reps` calls back to back with one synchronise at the end (the mean is
what a training loop sees, launch overhead included, which is the point in the launch-bound regime). Whole models:
`collect.time_steps` (step 1 warm-up, mean and spread of individually synchronised steps 2..N+1), as the custom
plan does. fp32 keeps PyTorch's defaults (TF32 off for matmul, on for cuDNN); AMP ops run on tensors of the AMP
dtype, AMP models under autocast on fp32 weights (GradScaler for fp16 on CUDA).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offpeak_predictor.collect import tf32_setting, time_steps
from offpeak_predictor.collectmodels import build_small_cnn, build_small_gpt
from offpeak_predictor.collectplan import ModelWorkload, OpWorkload, Workload, op_class_of, op_row_cost


@dataclass(slots=True)
class CollectResult:
    """Rows for `model_samples` and `op_samples`, and the wall time of the run."""

    model_rows: list[dict[str, Any]] = field(default_factory=list)
    op_rows: list[dict[str, Any]] = field(default_factory=list)
    wall_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Target:
    """Where a plan runs: the torch device, its synchronise, the GPU type recorded and the software string."""

    device: Any
    sync: Callable[[], None]
    gpu_label: str
    software: str


def make_target(*, device: str, gpu_type: str | None) -> tuple[Target, str | None]:
    """The device to run on and the AMP dtype it trains with (`collectplan.amp_dtype`); UserError when CUDA is
    asked for but absent. The GPU type recorded is `gpu_type`, else the catalogue's name for the device."""
    import torch

    from offpeak_predictor.collect import _device
    from offpeak_predictor.collectplan import amp_dtype
    from offpeak_predictor.gpus import find_gpu

    dev = _device(device)
    if dev.type == "cuda":
        name = torch.cuda.get_device_name(dev)
        sync: Callable[[], None] = lambda: torch.cuda.synchronize(dev)  # noqa: E731
        bf16 = torch.cuda.is_bf16_supported()
    else:
        name, sync, bf16 = "cpu", (lambda: None), True
    spec = find_gpu(gpu_type or name)
    software = f"pytorch-{torch.__version__} cuda-{torch.version.cuda} device={name}"
    target = Target(device=dev, sync=sync, gpu_label=spec.name if spec else (gpu_type or name), software=software)
    return target, amp_dtype(device_type=dev.type, bf16_supported=bf16)


def time_reps(fn: Callable[[], Any], *, reps: int, sync: Callable[[], None], warmup: int = 2) -> float:
    """Mean seconds of one call over `reps` back-to-back calls after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    sync()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    sync()
    return (time.perf_counter() - start) / reps


def _dtype(precision: str) -> Any:
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def op_calls(op: OpWorkload, device: Any) -> tuple[Callable[[], Any], Callable[[], Any] | None]:
    """(forward call, forward+backward call or None) of one op workload, inputs made once on the device."""
    import torch
    import torch.nn.functional as F

    dtype = _dtype(op.precision)
    if op.kind == "gemm":
        a = torch.randn(op.dim("m"), op.dim("k"), device=device, dtype=dtype)
        b = torch.randn(op.dim("k"), op.dim("n"), device=device, dtype=dtype)
        return (lambda: a @ b), None
    if op.kind == "conv":
        r = op.dim("r")
        conv = torch.nn.Conv2d(op.dim("c"), op.dim("k"), r, stride=op.dim("stride"), padding=r // 2, bias=False,
                               groups=op.groups)  # fmt: skip
        conv = conv.to(device=device, dtype=dtype)
        x = torch.randn(op.dim("n"), op.dim("c"), op.dim("hw"), op.dim("hw"), device=device, dtype=dtype,
                        requires_grad=True)  # fmt: skip
        grad = torch.ones_like(conv(x))

        def conv_fwd() -> Any:
            with torch.no_grad():
                return conv(x)

        return conv_fwd, lambda: conv(x).backward(grad)
    shape = (op.dim("b"), op.dim("h"), op.dim("s"), op.dim("d"))
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.ones(shape, device=device, dtype=dtype)

    def attn_fwd() -> Any:
        with torch.no_grad():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return attn_fwd, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)


def time_op(op: OpWorkload, target: Target) -> list[dict[str, Any]]:
    """The `fwd` row of one op, and its `train` (forward+backward) row when the workload asks for it."""
    fwd, train = op_calls(op, target.device)
    cost = op_row_cost(op)
    base = {"source": "collect", "gpu": target.gpu_label, "precision": op.precision, "op_class": op_class_of(op),
            **cost, "time_std": float("nan"), "software": target.software}  # fmt: skip
    rows = []
    with tf32_setting(op.precision):
        for mode, call in (("fwd", fwd), ("train", train)):
            if call is not None:
                rows.append({**base, "mode": mode, "time_s": time_reps(call, reps=op.reps, sync=target.sync)})
    return rows


def _model_and_batch(w: ModelWorkload, device: Any) -> tuple[Any, Any, Any, dict[str, Any]]:
    """(model, input, target labels, extract_module arguments) of one model workload."""
    import torch

    if w.kind == "cnn":
        model = build_small_cnn(width=w.width, stages=w.depth)
        x = torch.randn(w.batch_size, 3, w.input_size, w.input_size, device=device)
        y = torch.randint(0, 10, (w.batch_size,), device=device)
        return model, x, y, {"input_shape": (3, w.input_size, w.input_size)}
    model = build_small_gpt(width=w.width, blocks=w.depth, vocab=w.vocab, seq_len=w.seq_len)
    x = torch.randint(0, w.vocab, (w.batch_size, w.seq_len), device=device)
    y = torch.randint(0, w.vocab, (w.batch_size, w.seq_len), device=device)
    return model, x, y, {"seq_len": w.seq_len}


def time_model(w: ModelWorkload, target: Target, *, graph_dir: Path) -> dict[str, Any]:
    """One `model_samples` row: a training step (forward, loss, backward, SGD) timed; its graph saved."""
    import torch

    from offpeak_graph.extract import extract_module
    from offpeak_graph.schema import save_graph

    torch.manual_seed(0)
    dev = target.device
    model, x, y, shape_args = _model_and_batch(w, dev)
    model = model.to(dev).train()
    family = f"collect-{w.kind}"
    graph = extract_module(model, batch_size=w.batch_size, precision=w.precision, mode="train", optimizer="sgd",
                           model_name=w.name, model_family=family, **shape_args)  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    amp = None if w.precision == "fp32" else _dtype(w.precision)
    scaler = torch.amp.GradScaler(dev.type, enabled=w.precision == "fp16" and dev.type == "cuda")

    def step() -> None:
        with torch.autocast(dev.type, dtype=amp or torch.bfloat16, enabled=amp is not None):
            out = model(x)
            loss = loss_fn(out.float().flatten(0, -2), y.flatten())
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    with tf32_setting(w.precision):
        mean, std = time_steps(step, steps=w.steps, sync=target.sync)
    path = graph_dir / f"{graph.content_hash().split(':')[1][:24]}.json.gz"
    save_graph(graph, path)
    shape = f"[3, {w.input_size}, {w.input_size}]" if w.kind == "cnn" else None
    return {"source": "collect", "gpu": target.gpu_label, "precision": w.precision, "mode": "train",
            "optimizer": "sgd", "model_name": w.name, "family": family, "graph_kind": "graph_file",
            "graph_ref": str(path), "batch_size": w.batch_size, "seq_len": w.seq_len or None, "input_shape": shape,
            "num_gpus": 1, "time_s": mean, "time_std": std, "software": target.software}  # fmt: skip


def run_plan(workloads: list[Workload], *, target: Target, graph_dir: Path,
             on_done: Callable[[Workload], None] | None = None,
             on_start: Callable[[Workload], None] | None = None) -> CollectResult:  # fmt: skip
    """Time every workload in order; `on_start`/`on_done` drive a progress bar (the caller's)."""
    started = time.perf_counter()
    graph_dir.mkdir(parents=True, exist_ok=True)
    result = CollectResult()
    for w in workloads:
        if on_start is not None:
            on_start(w)
        if isinstance(w, OpWorkload):
            result.op_rows += time_op(w, target)
        else:
            result.model_rows.append(time_model(w, target, graph_dir=graph_dir))
        if on_done is not None:
            on_done(w)
    result.wall_seconds = time.perf_counter() - started
    return result
