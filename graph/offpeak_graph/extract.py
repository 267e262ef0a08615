"""`extract_graph`: the one call that turns a model source into a `ModelGraph` (used by the CLI, operator, predictor);
`extract_module` does the same for an `nn.Module` already in memory (e.g. `offpeak collect`'s sample models).

Exactly one source is given: a PyTorch entry point, a torchvision name, a HuggingFace config, or an ONNX file.
PyTorch models are traced on the `meta` device first (no weights in memory, so billion-parameter models extract on a
laptop); a model that cannot run on meta tensors (data-dependent control flow, ops without meta kernels) is traced
again on the CPU when it is small enough. `graph.extraction` records which path produced the graph.
torch/onnx are imported only inside these functions.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from offpeak.errors import UserError
from offpeak_graph.options import ExtractOptions, parse_shape
from offpeak_graph.schema import ModelGraph

if TYPE_CHECKING:
    from offpeak_graph.torch_models import BuiltModel
    from offpeak_graph.torch_trace import Recorder

EXTRACTION_META = "torch-dispatch-meta"
EXTRACTION_CPU = "torch-dispatch-cpu"


@dataclass(frozen=True, slots=True, kw_only=True)
class ExtractSettings:
    """Limits of the fallback path."""

    cpu_fallback_max_param_bytes: int = 2 * 1024**3  # never materialise bigger models on the CPU


def extract_graph(
    *,
    entrypoint: str | None = None,
    torchvision: str | None = None,
    hf_config: str | None = None,
    onnx: str | None = None,
    batch_size: int,
    input_shape: Sequence[int] | str | None = None,
    seq_len: int | None = None,
    precision: str = "fp32",
    mode: str = "train",
    optimizer: str = "adam",
    python_path: Sequence[str] = (),
    settings: ExtractSettings | None = None,
) -> ModelGraph:
    """Extract the model graph of one model source at one batch size / precision. Raises UserError on bad input."""
    sources = {"entrypoint": entrypoint, "torchvision": torchvision, "hf_config": hf_config, "onnx": onnx}
    given = [k for k, v in sources.items() if v]
    if len(given) != 1:
        raise UserError("give exactly one model source: --entrypoint, --torchvision, --hf-config or --onnx")
    shape = parse_shape(input_shape) if isinstance(input_shape, str) else (tuple(input_shape) if input_shape else None)
    options = ExtractOptions(batch_size=batch_size, input_shape=shape, seq_len=seq_len, precision=precision,
                             mode=mode, optimizer=optimizer)  # fmt: skip
    settings = settings or ExtractSettings()
    with _quiet(), _needs_libraries():
        if onnx:
            from offpeak_graph.onnx_extract import extract_onnx

            return extract_onnx(onnx, options)
        build = _builder(sources, options, list(python_path))
        is_entrypoint = bool(entrypoint)

        def on_cpu() -> BuiltModel:
            import torch

            with torch.device("cpu"):
                return build()

        return _extract_torch(on_meta=lambda: _build_on_meta(build, entrypoint=is_entrypoint), on_cpu=on_cpu,
                              options=options, settings=settings)  # fmt: skip


def extract_module(
    module: Any,
    *,
    batch_size: int,
    input_shape: Sequence[int] | str | None = None,
    seq_len: int | None = None,
    precision: str = "fp32",
    mode: str = "train",
    optimizer: str = "adam",
    model_name: str = "",
    model_family: str = "",
    settings: ExtractSettings | None = None,
) -> ModelGraph:
    """Graph of an `nn.Module` that already exists in memory (e.g. a model a benchmark is about to time).

    The input is a float tensor of `input_shape` per sample, else token ids of `seq_len`. The module is traced on a
    data-free `meta` copy (on a CPU copy when it cannot run on meta), so the caller's weights, device, dtype and
    train/eval state are left as they were. `model_name` defaults to the class name, `model_family` to one read
    from it (or from a transformers config).
    """
    import torch

    if not isinstance(module, torch.nn.Module):
        raise UserError(f"extract_module needs a torch.nn.Module, got {type(module).__name__}")
    shape = parse_shape(input_shape) if isinstance(input_shape, str) else (tuple(input_shape) if input_shape else None)
    options = ExtractOptions(batch_size=batch_size, input_shape=shape, seq_len=seq_len, precision=precision,
                             mode=mode, optimizer=optimizer)  # fmt: skip
    name = model_name or type(module).__name__

    def built_on(device: str) -> BuiltModel:
        from offpeak_graph.torch_models import build_module, copy_to

        return build_module(copy_to(module, torch.device(device)), options, name=name, family=model_family)

    with _quiet(), _needs_libraries():
        return _extract_torch(on_meta=lambda: built_on("meta"), on_cpu=lambda: built_on("cpu"), options=options,
                              settings=settings or ExtractSettings())  # fmt: skip


_LIBRARIES = ("torch", "torchvision", "transformers", "onnx", "numpy")


@contextlib.contextmanager
def _needs_libraries() -> Iterator[None]:
    """A missing extractor library (e.g. an image without torchvision) is the user's to fix, not a crash.
    User code's own import errors are reported where they happen (entry-point import, forward)."""
    try:
        yield
    except ImportError as e:
        missing = (e.name or "").split(".")[0]
        if missing not in _LIBRARIES:
            raise
        raise UserError(
            f"{missing} is not importable in this Python ({sys.executable}): {e}; "
            "install offpeak[extract] or run the extraction in an image that has it"
        ) from e


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Library warnings would break the CLI's one-line error contract; the graph says what matters."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _builder(sources: dict[str, Any], options: ExtractOptions, python_path: list[str]) -> Callable[[], BuiltModel]:
    from offpeak_graph import torch_models

    if sources["torchvision"]:
        return lambda: torch_models.build_torchvision(sources["torchvision"], options)
    if sources["hf_config"]:
        return lambda: torch_models.build_hf(sources["hf_config"], options)
    return lambda: torch_models.build_entrypoint(sources["entrypoint"], options, python_path)


def _is_meta_limitation(e: BaseException) -> bool:
    """True when an error says the meta device cannot do something (not that the model or input is wrong)."""
    return isinstance(e, NotImplementedError) or "meta" in str(e).lower()


def _extract_torch(
    *,
    on_meta: Callable[[], BuiltModel],
    on_cpu: Callable[[], BuiltModel],
    options: ExtractOptions,
    settings: ExtractSettings,
) -> ModelGraph:
    """Trace the model built by `on_meta`; when the meta device cannot run it, trace the one `on_cpu` builds
    (if small enough). Both ways share this code, whatever the model source."""
    import torch

    built = on_meta()
    try:
        recorder = _trace(built, options, torch.device("meta"))
        extraction = EXTRACTION_META
    except Exception as e:  # noqa: BLE001 - anything the model raises is classified below
        if not _is_meta_limitation(e):
            raise _forward_error(built, options, e) from e
        param_bytes = sum(p.numel() * p.element_size() for p in built.module.parameters())
        if param_bytes > settings.cpu_fallback_max_param_bytes:
            from offpeak_graph.torch_models import one_line

            raise UserError(
                f"model cannot be traced on the meta device ({one_line(e)}) and is too large "
                f"({param_bytes / 2**30:.1f} GiB) to trace on the CPU; export it to ONNX and use --onnx"
            ) from e
        built = on_cpu()
        try:
            recorder = _trace(built, options, torch.device("cpu"))
        except Exception as e2:  # noqa: BLE001
            raise _forward_error(built, options, e2) from e2
        extraction = EXTRACTION_CPU
    return ModelGraph(
        framework="pytorch",
        model_name=built.name,
        model_family=built.family,
        batch_size=options.batch_size,
        seq_len=built.seq_len,
        input_shape=built.input_shape,
        precision=options.precision,
        mode=options.mode,
        optimizer=options.optimizer,
        extraction=extraction,
        ops=recorder.ops,
    )


def _build_on_meta(build: Callable[[], BuiltModel], *, entrypoint: bool) -> BuiltModel:
    """Build under a `meta` device context; a constructor that computes with tensors (or user code that loads a
    checkpoint) is built again on the CPU with each parameter moved to `meta` as it is registered."""
    import torch

    from offpeak_graph.torch_models import parameters_on_meta

    try:
        with torch.device("meta"):
            return build()
    except Exception as e:  # noqa: BLE001 - classified below; genuine input errors are re-raised
        if not (entrypoint or _is_meta_limitation(e)):
            raise
    with parameters_on_meta():
        return build()


def _trace(built: BuiltModel, options: ExtractOptions, device: Any) -> Recorder:
    import torch

    from offpeak_graph.torch_models import DTYPES
    from offpeak_graph.torch_trace import record_forward

    model = built.module
    if any(t.device != device for t in [*model.parameters(), *model.buffers()]):
        model = model.to(device)
    model = model.to(DTYPES[options.precision])
    model.train(options.mode == "train")
    call = built.make_call(device, options)
    grad = torch.enable_grad() if options.mode == "train" else torch.no_grad()
    with grad, torch.device(device):  # tensors the forward creates without a device land on the same device
        return record_forward(model, call)


def _forward_error(built: BuiltModel, options: ExtractOptions, e: BaseException) -> UserError:
    from offpeak_graph.torch_models import one_line

    if isinstance(e, UserError):
        return e
    what = f"input shape {built.input_shape}" if built.input_shape else f"sequence length {built.seq_len}"
    return UserError(
        f"model {built.name!r} failed on batch {options.batch_size}, {what}: {one_line(e)}; "
        "check --input-shape/--seq-len"
    )
