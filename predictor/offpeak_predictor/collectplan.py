"""The `new-gpu` collection plan: which single ops and whole training steps `offpeak collect --plan new-gpu` times.

Pure: no torch, no timing, no I/O. A GPU the predictor has never seen is described by where its regimes meet, so
the plan spans them: GEMMs from launch-bound (M=N=K=256) to compute-bound (8192), ResNet-like conv2d layers and
the depthwise and small-channel 1x1 convolutions of MobileNet/EfficientNet-like nets (memory-bound kernels of their
own, which no other op row in our data has) forward and forward+backward, causal attention forward and
forward+backward, and two small models built from torch.nn (a CNN and a decoder-only transformer) as whole training
steps; each in fp32 and in AMP. `quick` shrinks every size so the same plan runs in a few minutes on a laptop CPU
(the code path is the CUDA one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from offpeak_predictor.features import DTYPE_BYTES, conv2d_cost, gemm_cost

PLANS: tuple[str, ...] = ("custom", "new-gpu")
OpKind = Literal["gemm", "conv", "attention"]
ModelKind = Literal["cnn", "transformer"]


@dataclass(frozen=True, slots=True)
class OpWorkload:
    """One single op at one size. `backward`: also time forward+backward (a `train` row next to the `fwd` one)."""

    kind: OpKind
    precision: str  # fp32 (PyTorch defaults: TF32 off for matmul, on for cuDNN) or the AMP dtype (bf16 | fp16)
    dims: tuple[tuple[str, int], ...]  # gemm: m,n,k; conv: n,c,k,hw,r,stride[,g]; attention: b,h,s,d
    reps: int
    backward: bool = False

    def dim(self, name: str) -> int:
        return dict(self.dims)[name]

    @property
    def groups(self) -> int:
        """A convolution's groups (c for a depthwise one; 1, and not in `dims`, for a dense one)."""
        return dict(self.dims).get("g", 1)

    @property
    def label(self) -> str:
        return f"{self.kind} " + " ".join(f"{k}={v}" for k, v in self.dims) + f" {self.precision}"


@dataclass(frozen=True, slots=True)
class ModelWorkload:
    """One whole training step (forward, loss, backward, SGD step) of a small model built from torch.nn."""

    kind: ModelKind
    precision: str  # fp32 or the AMP dtype (autocast on fp32 weights)
    batch_size: int
    steps: int
    input_size: int = 0  # cnn: square image side
    seq_len: int = 0  # transformer
    width: int = 0  # cnn: first stage channels; transformer: model dimension
    depth: int = 0  # cnn: stages; transformer: blocks
    vocab: int = 0  # transformer

    @property
    def name(self) -> str:
        if self.kind == "cnn":
            return f"collect_cnn_w{self.width}_d{self.depth}_s{self.input_size}"
        return f"collect_gpt_d{self.width}_l{self.depth}_v{self.vocab}"

    @property
    def label(self) -> str:
        size = f"s={self.input_size}" if self.kind == "cnn" else f"seq={self.seq_len}"
        return f"{self.name} bs={self.batch_size} {size} {self.precision}"


Workload = OpWorkload | ModelWorkload


@dataclass(frozen=True, slots=True)
class Sizes:
    """Every size of the plan in one place, so `quick` is one alternative set rather than scattered ifs."""

    gemm: tuple[int, ...]
    conv: tuple[tuple[int, int, int, int, int, int, int], ...]  # n, c, k, hw, r, stride, groups (1: dense)
    attention: tuple[tuple[int, int, int, int], ...]  # b, h, s, d
    op_reps: int
    cnn_batches: tuple[int, ...]
    cnn: tuple[int, int, int]  # input size, width, stages
    gpt_batches: tuple[int, ...]
    gpt: tuple[int, int, int, int]  # seq len, width, blocks, vocab
    model_steps: int


FULL = Sizes(
    gemm=(256, 1024, 2048, 4096, 8192),
    conv=((32, 64, 64, 56, 3, 1, 1), (32, 128, 128, 28, 3, 1, 1), (32, 256, 256, 14, 3, 1, 1),
          (32, 512, 512, 7, 3, 1, 1), (32, 256, 64, 56, 1, 1, 1),
          # depthwise 3x3 and 5x5, and small-channel 1x1 convolutions, as in MobileNet-V2 / EfficientNet stages
          (32, 32, 32, 112, 3, 1, 32), (32, 144, 144, 56, 3, 2, 144), (32, 384, 384, 14, 3, 1, 384),
          (32, 240, 240, 28, 5, 1, 240), (32, 16, 96, 112, 1, 1, 1), (32, 144, 24, 56, 1, 1, 1),
          (32, 64, 384, 14, 1, 1, 1)),
    attention=((8, 16, 512, 64), (8, 16, 2048, 64)),
    op_reps=20,
    cnn_batches=(32, 128), cnn=(32, 64, 3),
    gpt_batches=(8, 32), gpt=(256, 512, 4, 8192),
    model_steps=10,
)  # fmt: skip
QUICK = Sizes(
    gemm=(64, 256, 512),
    conv=((2, 16, 16, 28, 3, 1, 1), (2, 32, 16, 14, 1, 1, 1), (2, 16, 16, 28, 3, 1, 16)),
    attention=((1, 2, 128, 32),),
    op_reps=3,
    cnn_batches=(4,), cnn=(32, 16, 2),
    gpt_batches=(2,), gpt=(64, 64, 2, 512),
    model_steps=2,
)  # fmt: skip


def new_gpu_plan(*, amp: str | None, quick: bool) -> list[Workload]:
    """Every workload of the plan, ops first (cheap, and a failure there is found early), then models; each in
    fp32 and, when `amp` names a dtype (bf16 | fp16), in AMP. `amp=None` leaves AMP out."""
    if amp not in (None, "bf16", "fp16"):
        raise ValueError(f"amp must be bf16, fp16 or None, not {amp!r}")
    sizes = QUICK if quick else FULL
    precisions = ("fp32", amp) if amp else ("fp32",)
    ops: list[Workload] = []
    models: list[Workload] = []
    for precision in precisions:
        ops += [OpWorkload("gemm", precision, (("m", s), ("n", s), ("k", s)), sizes.op_reps) for s in sizes.gemm]
        ops += [OpWorkload("conv", precision, (("n", n), ("c", c), ("k", k), ("hw", hw), ("r", r), ("stride", st))
                           + ((("g", g),) if g > 1 else ()), sizes.op_reps, backward=True)
                for n, c, k, hw, r, st, g in sizes.conv]  # fmt: skip
        ops += [OpWorkload("attention", precision, (("b", b), ("h", h), ("s", s), ("d", d)), sizes.op_reps,
                           backward=True) for b, h, s, d in sizes.attention]  # fmt: skip
        size, width, stages = sizes.cnn
        models += [ModelWorkload("cnn", precision, bs, sizes.model_steps, input_size=size, width=width, depth=stages)
                   for bs in sizes.cnn_batches]  # fmt: skip
        seq, dim, blocks, vocab = sizes.gpt
        models += [ModelWorkload("transformer", precision, bs, sizes.model_steps, seq_len=seq, width=dim,
                                 depth=blocks, vocab=vocab) for bs in sizes.gpt_batches]  # fmt: skip
    return ops + models


def amp_dtype(*, device_type: str, bf16_supported: bool) -> str | None:
    """The AMP dtype a device trains with: bf16 where supported (Ampere and newer, and CPU autocast), else fp16 on
    CUDA; None (no AMP rows) for any other device."""
    if device_type == "cpu":
        return "bf16"
    if device_type == "cuda":
        return "bf16" if bf16_supported else "fp16"
    return None


def op_row_cost(op: OpWorkload) -> dict[str, float]:
    """The cost columns of an op row (`op_samples`: flops, bytes, out_numel, lead_dim, dtype_bytes) of the forward
    pass, computed the way the loaders compute them for public kernels, so the op models read both alike.

    Attention is causal: half the S x S score and value products (what the kernel computes)."""
    size = DTYPE_BYTES[op.precision]
    if op.kind == "gemm":
        m, n, k = op.dim("m"), op.dim("n"), op.dim("k")
        flops, bytes_ = gemm_cost(batch=1, m=m, k_in=k, n_out=n, dtype_bytes=size)
        return {"flops": float(flops), "bytes": float(bytes_), "out_numel": float(m * n), "lead_dim": float(m),
                "dtype_bytes": float(size)}  # fmt: skip
    if op.kind == "conv":
        n, r = op.dim("n"), op.dim("r")
        flops, bytes_, out_numel = conv2d_cost(batch=n, c_in=op.dim("c"), c_out=op.dim("k"), kernel=r,
                                               size=op.dim("hw"), stride=op.dim("stride"), padding=r // 2,
                                               dtype_bytes=size, groups=op.groups)  # fmt: skip
        return {"flops": float(flops), "bytes": float(bytes_), "out_numel": float(out_numel), "lead_dim": float(n),
                "dtype_bytes": float(size)}  # fmt: skip
    b, h, s, d = op.dim("b"), op.dim("h"), op.dim("s"), op.dim("d")
    numel = b * h * s * d
    return {"flops": 4.0 * b * h * s * s * d / 2, "bytes": 4.0 * numel * size, "out_numel": float(numel),
            "lead_dim": float(b * h), "dtype_bytes": float(size)}  # fmt: skip


def op_class_of(op: OpWorkload) -> str:
    """The op-model class of a workload: attention is priced as a GEMM, as graphs price `sdpa`."""
    return "conv" if op.kind == "conv" else "gemm"


def plan_summary(workloads: list[Workload]) -> dict[str, int]:
    """Counts by kind (and timed executions), printed before a run and used by the docs' time estimate."""
    counts: dict[str, int] = {}
    for w in workloads:
        counts[w.kind] = counts.get(w.kind, 0) + 1
    return counts
