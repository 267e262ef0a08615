"""`offpeak collect`: time sample workloads on the local device and append them to the benchmark DB.

In the spirit of the 2018 sample-workload patent: customised sample CNNs (conv layers x filters, dense layers x
nodes, batch size, input size) plus real torchvision graphs. Each workload runs steps 1..N+1; step 1 is warm-up
and the row keeps the mean (and spread) of steps 2..N+1. The graph is saved next to the graph cache so the row
can train the model-level correction. Precisions mean what a request means by them (`offpeak_graph.schema.
PRECISIONS`): fp16/bf16 train with autocast on fp32 weights (GradScaler for fp16), tf32 turns TF32 on for matmul.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from offpeak.errors import UserError
from offpeak_predictor.db import BenchmarkDB
from offpeak_predictor.graphcache import cache_dir
from offpeak_predictor.gpus import find_gpu
from offpeak_predictor.loaders import _family


@dataclass(frozen=True, slots=True)
class CollectPlan:
    conv_layers: list[int] = field(default_factory=lambda: [2])
    filters: list[int] = field(default_factory=lambda: [16])
    dense_layers: list[int] = field(default_factory=lambda: [1])
    nodes: list[int] = field(default_factory=lambda: [64])
    batch_sizes: list[int] = field(default_factory=lambda: [8])
    input_sizes: list[int] = field(default_factory=lambda: [32])
    torchvision: list[str] = field(default_factory=list)
    steps: int = 10
    precision: str = "fp32"
    optimizer: str = "sgd"

    def workloads(self) -> list[dict[str, Any]]:
        """Every sample configuration, in a stable order."""
        out: list[dict[str, Any]] = []
        for conv, filt, dense, nodes, bs, size in itertools.product(
            self.conv_layers, self.filters, self.dense_layers, self.nodes, self.batch_sizes, self.input_sizes
        ):
            out.append({"kind": "sample_cnn", "conv_layers": conv, "filters": filt, "dense_layers": dense,
                        "nodes": nodes, "batch_size": bs, "input_size": size})  # fmt: skip
        for name, bs, size in itertools.product(self.torchvision, self.batch_sizes, self.input_sizes):
            out.append({"kind": "torchvision", "name": name, "batch_size": bs, "input_size": size})
        return out


def build_sample_cnn(*, conv_layers: int, filters: int, dense_layers: int, nodes: int, input_size: int,
                     classes: int = 10) -> Any:  # fmt: skip
    """conv(3x3)+ReLU blocks (2x2 max-pool after every second one), then dense+ReLU layers, then a classifier."""
    import torch.nn as nn

    layers: list[nn.Module] = []
    channels, size = 3, input_size
    for i in range(conv_layers):
        layers += [nn.Conv2d(channels, filters, 3, padding=1), nn.ReLU()]
        channels = filters
        if i % 2 == 1 and size >= 4:
            layers.append(nn.MaxPool2d(2))
            size //= 2
    layers.append(nn.Flatten())
    width = channels * size * size
    for _ in range(dense_layers):
        layers += [nn.Linear(width, nodes), nn.ReLU()]
        width = nodes
    layers.append(nn.Linear(width, classes))
    return nn.Sequential(*layers)


def time_steps(step: Any, *, steps: int, sync: Any) -> tuple[float, float]:
    """Run steps 1..N+1; return mean and std of steps 2..N+1 in seconds."""
    times = []
    for _ in range(steps + 1):
        sync()
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    kept = np.asarray(times[1:])
    return float(kept.mean()), float(kept.std())


def _device(name: str) -> Any:
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError("--device cuda asked but CUDA is not available")
    return torch.device(name)


def run_collect(*, plan: CollectPlan, db: BenchmarkDB, device: str = "auto", gpu_type: str | None = None) -> int:
    """Time every workload of the plan; returns the number of rows appended."""
    import torch
    from rich.progress import Progress

    from offpeak_graph.extract import extract_module
    from offpeak_graph.schema import save_graph

    dev = _device(device)
    if dev.type == "cuda":
        device_name = torch.cuda.get_device_name(dev)
        sync = lambda: torch.cuda.synchronize(dev)  # noqa: E731
    else:
        device_name = "cpu"
        sync = lambda: None  # noqa: E731
    spec = find_gpu(gpu_type or device_name)
    gpu_label = spec.name if spec else device_name
    amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(plan.precision)  # None: fp32 weights and math
    software = f"pytorch-{torch.__version__} cuda-{torch.version.cuda} device={device_name}"
    graph_dir = cache_dir() / "collected"
    graph_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    workloads = plan.workloads()
    with Progress() as progress:
        task = progress.add_task(f"collect on {device_name}", total=len(workloads))
        for w in workloads:
            torch.manual_seed(0)
            bs, size = w["batch_size"], w["input_size"]
            if w["kind"] == "sample_cnn":
                model = build_sample_cnn(conv_layers=w["conv_layers"], filters=w["filters"],
                                         dense_layers=w["dense_layers"], nodes=w["nodes"], input_size=size)  # fmt: skip
                name = "sample_cnn_c{conv_layers}x{filters}_d{dense_layers}x{nodes}".format(**w)
                family, classes = "synthetic", 10
            else:
                import torchvision.models as tvm

                try:
                    model = tvm.get_model(w["name"], weights=None)
                except ValueError as e:
                    raise UserError(f"unknown torchvision model {w['name']!r}") from e
                name, family, classes = w["name"], _family(w["name"]), 1000  # resnet18 -> resnet (hold-outs)
            model = model.to(dev).train()  # fp32 master weights at every precision (fp16/bf16 = autocast)
            x = torch.randn(bs, 3, size, size, device=dev)
            y = torch.randint(0, classes, (bs,), device=dev)
            graph = extract_module(model, batch_size=bs, input_shape=(3, size, size), precision=plan.precision,
                                   mode="train", optimizer=plan.optimizer, model_name=name,
                                   model_family=family)  # fmt: skip
            opt = _optimizer(plan.optimizer, model)
            loss_fn = torch.nn.CrossEntropyLoss()
            scaler = torch.amp.GradScaler(dev.type, enabled=plan.precision == "fp16" and dev.type == "cuda")

            def step() -> None:
                with torch.autocast(dev.type, dtype=amp_dtype or torch.bfloat16, enabled=amp_dtype is not None):
                    out = model(x)
                    loss = loss_fn(out.float(), y)
                scaler.scale(loss).backward()
                if opt is not None:
                    scaler.step(opt)
                    scaler.update()
                    opt.zero_grad(set_to_none=True)

            with tf32_setting(plan.precision):
                mean, std = time_steps(step, steps=plan.steps, sync=sync)
            path = graph_dir / f"{graph.content_hash().split(':')[1][:24]}.json.gz"
            save_graph(graph, path)
            rows.append({
                "source": "collect", "gpu": gpu_label, "precision": plan.precision, "mode": "train",
                "optimizer": plan.optimizer, "model_name": name, "family": family, "graph_kind": "graph_file",
                "graph_ref": str(path), "batch_size": bs, "seq_len": None,
                "input_shape": f"[3, {size}, {size}]", "num_gpus": 1, "time_s": mean, "time_std": std,
                "software": software,
            })  # fmt: skip
            progress.advance(task)
    return db.append("model_samples", pd.DataFrame(rows))


@contextlib.contextmanager
def tf32_setting(precision: str) -> Iterator[None]:
    """TF32 as the precision says: PyTorch's defaults (matmul off, cuDNN convolutions on) except for tf32 (both on);
    the process's own settings are restored afterwards."""
    import torch

    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def _optimizer(name: str, model: Any) -> Any:
    import torch

    if name == "none":
        return None
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(model.parameters())
    return torch.optim.AdamW(model.parameters())
