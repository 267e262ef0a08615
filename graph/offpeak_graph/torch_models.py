"""Build the `nn.Module` to trace and the call that feeds it, from each kind of model source (imports torch).

Every builder runs inside a device context (`meta` first), so parameters of multi-billion-parameter models
cost no memory. Failures that are the user's to fix become `UserError`s that say what to do.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from offpeak.errors import UserError
from offpeak_graph.aten_ops import family_from_name
from offpeak_graph.hf_presets import preset, preset_names
from offpeak_graph.options import ExtractOptions
from offpeak_graph.torch_trace import ModelCall

# Storage dtype of the traced graph per precision (tf32 changes the matmul units, not the tensors).
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
                                  "bf16": torch.bfloat16}  # fmt: skip

# torchvision models whose default input is not 224x224.
_TORCHVISION_SIZES: dict[str, int] = {"inception_v3": 299}


def one_line(e: BaseException, limit: int = 300) -> str:
    """`Type: message` on one line, shortened: what a UserError may quote from a library's exception."""
    text = " ".join(str(e).split()) or "(no message)"
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(e).__name__}: {text}"


@dataclass(slots=True)
class BuiltModel:
    """A model plus what the graph header needs to say about it."""

    module: nn.Module
    make_call: Callable[[torch.device, ExtractOptions], ModelCall]
    name: str
    family: str
    seq_len: int | None = None
    input_shape: list[int] | None = None


def _float_input(device: torch.device, options: ExtractOptions, shape: tuple[int, ...]) -> torch.Tensor:
    dtype = DTYPES[options.precision]
    if device.type == "meta":
        return torch.empty(options.batch_size, *shape, device=device, dtype=dtype)
    return torch.randn(options.batch_size, *shape, device=device).to(dtype)


def _token_input(device: torch.device, options: ExtractOptions, seq_len: int) -> torch.Tensor:
    return torch.zeros(options.batch_size, seq_len, device=device, dtype=torch.long)


@contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Build on the CPU but move each parameter to `meta` as it is registered.

    For constructors that compute with tensors (e.g. torchvision's RegNet widths) and so cannot run under a
    `meta` device context. Only one layer's weights exist on the CPU at a time.
    """
    original = nn.Module.register_parameter

    def register(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        original(module, name, param)
        if param is not None and param.device.type != "meta":
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = register  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        nn.Module.register_parameter = original  # type: ignore[method-assign]


# ---- torchvision ------------------------------------------------------------------------------------------
def build_torchvision(name: str, options: ExtractOptions) -> BuiltModel:
    import torchvision

    available = torchvision.models.list_models()
    if name not in available:
        close = difflib.get_close_matches(name, available, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else "; see torchvision.models.list_models()"
        raise UserError(f"unknown torchvision model {name!r}{hint}")
    kwargs: dict[str, Any] = {"weights": None}
    if name == "inception_v3":
        kwargs["init_weights"] = False
    module = torchvision.models.get_model(name, **kwargs)
    size = _TORCHVISION_SIZES.get(name, 224)
    shape = options.input_shape or (3, size, size)
    return BuiltModel(
        module=module,
        make_call=lambda device, opts: ModelCall(args=(_float_input(device, opts, shape),)),
        name=name,
        family=family_from_name(name),
        input_shape=list(shape),
    )


# ---- entry points -----------------------------------------------------------------------------------------
def load_entrypoint(entrypoint: str, python_path: list[str]) -> Callable[[], Any]:
    """Import `package.module:function`, with the current directory and `python_path` on sys.path."""
    module_name, sep, attr = entrypoint.partition(":")
    if not sep or not module_name or not attr:
        raise UserError(f"entry point must look like package.module:function, got {entrypoint!r}")
    for entry in [*reversed(python_path), str(Path.cwd())]:
        entry = str(Path(entry).resolve())
        if entry not in sys.path:
            sys.path.insert(0, entry)
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 - any failure inside user code is the user's to fix
        raise UserError(
            f"cannot import entry point module {module_name!r} ({one_line(e)}); "
            "run from the directory that holds it or pass --python-path"
        ) from e
    func: Any = module
    for part in attr.split("."):
        func = getattr(func, part, None)
        if func is None:
            raise UserError(f"entry point module {module_name!r} has no attribute {attr!r}")
    if not callable(func):
        raise UserError(f"entry point {entrypoint!r} is not callable")
    return func  # type: ignore[no-any-return]


def unwrap(module: nn.Module) -> nn.Module:
    """The model inside `torch.compile` (OptimizedModule), DataParallel and DDP wrappers."""
    while True:
        inner = getattr(module, "_orig_mod", None)
        if inner is None and type(module).__name__ in ("DataParallel", "DistributedDataParallel"):
            inner = getattr(module, "module", None)
        if not isinstance(inner, nn.Module):
            return module
        module = inner


def build_entrypoint(entrypoint: str, options: ExtractOptions, python_path: list[str]) -> BuiltModel:
    func = load_entrypoint(entrypoint, python_path)
    try:
        module = func()
    except Exception as e:  # noqa: BLE001
        raise UserError(f"entry point {entrypoint!r} raised {one_line(e)}") from e
    if not isinstance(module, nn.Module):
        raise UserError(
            f"entry point {entrypoint!r} returned {type(module).__name__}, expected a torch.nn.Module"
        )
    return build_module(module, options, name=entrypoint)


def build_module(module: nn.Module, options: ExtractOptions, *, name: str, family: str = "") -> BuiltModel:
    """Wrap a module that already exists (from an entry point or a caller): the input comes from
    `options.input_shape` (float tensor) or `options.seq_len` (token ids)."""
    module = unwrap(module)
    config = getattr(module, "config", None)  # a transformers model built by user code
    if config is not None and hasattr(config, "use_cache"):
        config.use_cache = False  # a training step keeps no KV cache
    if options.input_shape is not None:
        shape = options.input_shape
        make_call: Callable[[torch.device, ExtractOptions], ModelCall] = lambda device, opts: ModelCall(
            args=(_float_input(device, opts, shape),)
        )
    elif options.seq_len is not None:
        seq_len = options.seq_len
        make_call = lambda device, opts: ModelCall(args=(_token_input(device, opts, seq_len),))  # noqa: E731
    else:
        raise UserError(f"model {name!r} needs an input shape (--input-shape, float input) or a sequence length "
                        "(--seq-len, token ids)")
    return BuiltModel(
        module=module,
        make_call=make_call,
        name=name,
        family=family or str(getattr(config, "model_type", "") or family_from_name(type(module).__name__)),
        seq_len=options.seq_len,
        input_shape=list(options.input_shape) if options.input_shape else None,
    )


def copy_to(module: nn.Module, device: torch.device) -> nn.Module:
    """A copy of `module` on `device` that shares nothing with it, so tracing (dtype casts, batch-norm statistics)
    never touches the caller's model. On `meta` the copy holds no data, whatever the model's size."""
    module = unwrap(module)
    memo: dict[int, Any] = {}
    for t in [*module.parameters(), *module.buffers()]:
        moved = t.detach().to(device, copy=device.type != "meta")
        memo[id(t)] = nn.Parameter(moved, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else moved
    return copy.deepcopy(module, memo)


# ---- HuggingFace transformers -----------------------------------------------------------------------------
def read_hf_config(source: str) -> tuple[str, dict[str, Any]]:
    """(model name, config dict) from a config.json path or a built-in name."""
    path = Path(source)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise UserError(f"cannot read HuggingFace config {source!r}: {one_line(e)}") from e
        if not isinstance(data, dict):
            raise UserError(f"HuggingFace config {source!r} must be a JSON object")
        name = path.parent.name if path.name == "config.json" else path.stem
        return name, data
    found = preset(source)
    if found is None:
        if source.endswith(".json"):
            raise UserError(f"HuggingFace config file {source!r} not found")
        raise UserError(
            f"unknown HuggingFace model {source!r} (nothing is downloaded): pass the path of its config.json "
            f"or one of {', '.join(preset_names())}"
        )
    return source, found


def _max_positions(config: Any) -> int | None:
    for key in ("max_position_embeddings", "n_positions", "max_positions"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def build_hf(source: str, options: ExtractOptions) -> BuiltModel:
    import transformers

    transformers.logging.set_verbosity_error()
    name, data = read_hf_config(source)
    data = dict(data)
    model_type = data.pop("model_type", None)
    if not model_type:
        raise UserError(f"HuggingFace config {source!r} has no model_type; add e.g. \"model_type\": \"gpt2\"")
    for key in ("_name_or_path", "transformers_version", "torch_dtype", "dtype"):
        data.pop(key, None)
    if model_type not in transformers.CONFIG_MAPPING:
        raise UserError(f"unknown model_type {model_type!r} in HuggingFace config {source!r}; "
                        "use a transformers model type such as gpt2, bert, llama")  # fmt: skip
    try:
        config = transformers.AutoConfig.for_model(model_type, **data)
    except Exception as e:  # noqa: BLE001 - transformers raises ValueError/KeyError/TypeError for bad configs
        raise UserError(f"bad HuggingFace config {source!r}: {one_line(e)}") from e
    config.use_cache = False
    archs = data.get("architectures") or []
    cls = getattr(transformers, archs[0], None) if archs else None
    try:
        module = cls(config) if cls is not None else transformers.AutoModel.from_config(config)
    except Exception as e:  # noqa: BLE001
        raise UserError(f"cannot build a {model_type} model from config {source!r}: {one_line(e)}") from e

    main_input = getattr(module, "main_input_name", "input_ids")
    limit = _max_positions(config)
    seq_len: int | None = None
    shape: tuple[int, ...] | None = None
    if main_input == "input_ids":
        seq_len = options.seq_len or min(512, limit or 512)
        if limit is not None and seq_len > limit and model_type not in ("t5", "switch_transformers"):
            raise UserError(f"sequence length {seq_len} exceeds this model's {limit} positions; lower --seq-len")
    elif main_input == "pixel_values":
        size = getattr(config, "image_size", 224)
        size = size if isinstance(size, int) else 224
        shape = options.input_shape or (getattr(config, "num_channels", 3), size, size)
    else:
        raise UserError(f"models whose input is {main_input!r} are not supported yet; use an entry point")
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))

    def make_call(device: torch.device, opts: ExtractOptions) -> ModelCall:
        if seq_len is not None:
            kwargs = {"input_ids": _token_input(device, opts, seq_len)}
            if encoder_decoder:
                kwargs["decoder_input_ids"] = _token_input(device, opts, seq_len)
            return ModelCall(kwargs=kwargs)
        assert shape is not None
        return ModelCall(kwargs={"pixel_values": _float_input(device, opts, shape)})

    return BuiltModel(
        module=module,
        make_call=make_call,
        name=name,
        family=str(model_type),
        seq_len=seq_len,
        input_shape=list(shape) if shape else None,
    )
