"""The predictor's HTTP payloads as typed structs: one definition for the server (which decodes and checks requests
with them), the client (which encodes requests and checks answers with them) and the OpenAPI document (generated
from them), so the three cannot drift.

Limits live in the types (lengths, ranges, list sizes): a body that breaks one is a 400 naming the JSON path of
the field (`$.num_gpus`, `$.model_rows[1].time_s`) and why. A model graph travels as its JSON object; its own
rules (numbers, shapes, op attributes) are `offpeak_graph.schema.parse_graph`'s, named from `$.graph`. Unknown
fields are ignored, as they always were. Light on purpose: the operator imports it through the client.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, TypeVar, get_args

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from offpeak.errors import UserError
from offpeak_graph.schema import (
    MAX_BATCH_SIZE, MAX_NAME_CHARS, MAX_NUMBER, PRECISION_HELP, GraphError, Mode, Precision,
)  # fmt: skip

T = TypeVar("T")

MAX_STEPS = 10**12
MAX_STARTUP_SECONDS = 1e7
MAX_SECONDS = 1e12  # a measured job or step: ~30,000 years, far above any real run, far below float trouble
MAX_GPUS = 4096  # GPUs of one job
MAX_GPUS_PER_REQUEST = 64  # GPU types asked in one /v1/predict
MAX_GPU_NAME_CHARS = 128
MAX_JOB_CHARS = 317  # "namespace/name": 63 + 1 + 253, Kubernetes' own limits
MAX_HASH_CHARS = 128  # "sha256:" and 64 hex digits, with room
MAX_SOFTWARE_CHARS = 200
MAX_MODEL_ROWS = 200  # per POST /v1/collected: the new-gpu plan sends 8
MAX_OP_ROWS = 5000  # per POST /v1/collected: the new-gpu plan sends 38

# The optimizers the runtime model was trained to price (narrower than the graph's, which also lists what the
# memory model knows); an override outside them is refused.
PricedOptimizer = Literal["sgd", "adam", "adamw", "none"]
OPTIMIZERS: tuple[str, ...] = get_args(PricedOptimizer)
OpClass = Literal["gemm", "conv", "norm", "softmax", "elementwise", "memory"]  # what the op-level models tell apart
OpMode = Literal["fwd", "train"]  # an op row: forward only, or forward + backward

GpuName = Annotated[str, Meta(min_length=1, max_length=MAX_GPU_NAME_CHARS,
                              description="a GPU type of the catalogue, or an alias of one (A100, T4)")]
Seconds = Annotated[float, Meta(ge=0, le=MAX_SECONDS)]
Positive = Annotated[float, Meta(gt=0, le=MAX_NUMBER)]
Steps = Annotated[int, Meta(ge=0, le=MAX_STEPS, description="training steps of the whole job")]
Gpus = Annotated[int, Meta(ge=1, le=MAX_GPUS)]
StartupSeconds = Annotated[float, Meta(ge=0, le=MAX_STARTUP_SECONDS, description=(
    "seconds before the first step (pod start, data loading) added to job_seconds; absent: 60"))]
Graph = Annotated[dict[str, Any], Meta(description=(
    "model graph JSON (offpeak.io/model-graph/v1, docs/model-graph.md), inline (the predictor fetches nothing): "
    "finite, non-negative numbers, known mode/precision/optimizer, batch_size >= 1, 1..200,000 ops, shapes of at "
    "most 64 dimensions and 1e30 elements, op attributes typed by op kind (x-op-attrs)"))]
PrecisionOverride = Annotated[Precision, Meta(description=PRECISION_HELP)]


class _Body(Struct, kw_only=True, omit_defaults=True):
    """A JSON object on the wire: absent optional fields stay absent."""


# --- POST /v1/predict ---


class PredictRequest(_Body):
    """Predict the step and job seconds of a model graph on GPU types."""

    graph: Graph
    gpus: Annotated[list[GpuName], Meta(min_length=1, max_length=MAX_GPUS_PER_REQUEST)]
    mode: Mode | None = None
    precision: PrecisionOverride | None = None
    optimizer: PricedOptimizer | None = None
    steps: Steps | None = None
    startup_seconds: StartupSeconds | None = None
    num_gpus: Gpus = 1
    gpus_per_node: Annotated[Gpus, Meta(description=(
        "GPUs of the job in one node (it must divide num_gpus); the rest talk over the network, whose all-reduce "
        "is added and named in each answer's interconnect; absent: all in one node"))] | None = None
    graph_url: Annotated[str, Meta(description="refused (a 400): the predictor fetches nothing")] | UnsetType = UNSET


class Correction(_Body):
    """How measured samples (and the GPU type's collected rows) changed the model's answer."""

    samples: int
    level: Literal["model", "gpu", "family", "graph"]
    factor: float
    p90_factor: float
    model_step_seconds: float | UnsetType = UNSET  # absent in a sample's answer


class Interconnect(_Body):
    """The layout and the links a multi-GPU answer assumed."""

    gpus_per_node: int
    nodes: int
    within_node: str | UnsetType = UNSET
    between_nodes: str | UnsetType = UNSET
    between_nodes_seconds_per_step: float | UnsetType = UNSET
    between_nodes_measured: bool | UnsetType = UNSET


class Prediction(_Body):
    """One GPU type's answer."""

    gpu: Annotated[str, Meta(description="the GPU name as asked")]
    gpu_type: Annotated[str, Meta(description="canonical catalogue name (the node label's value)")]
    step_seconds: float
    step_seconds_p90: float
    model_version: str
    mode: str | UnsetType = UNSET
    precision: str | UnsetType = UNSET
    optimizer: str | UnsetType = UNSET
    num_gpus: int | UnsetType = UNSET
    steps: int | UnsetType = UNSET
    job_seconds: float | UnsetType = UNSET
    job_seconds_p90: float | UnsetType = UNSET
    peak_memory_gib: Annotated[float, Meta(description=(
        "peak GPU memory of one step per GPU (GiB, as torch.cuda.max_memory_allocated reports it); absent for an "
        "unmodelled optimizer"))] | UnsetType = UNSET
    gpu_memory_gib: Annotated[float, Meta(description="this GPU type's memory (GiB)")] | UnsetType = UNSET
    fits_memory: Annotated[bool, Meta(description="peak within 95 % of the GPU's memory")] | UnsetType = UNSET
    interconnect: Interconnect | UnsetType = UNSET
    correction: Correction | UnsetType = UNSET


class PredictResponse(_Body):
    model_version: str
    graph_hash: str
    predictions: list[Prediction]


# --- POST /v1/samples ---


class SampleReport(_Body):
    """An observed run: the measured seconds per training step (`step_seconds`, else (`job_seconds` -
    `startup_seconds`) / `steps`) of a job run with these options (absent: the graph's, as in /v1/predict)."""

    gpu: GpuName
    job: Annotated[str, Meta(max_length=MAX_JOB_CHARS, description="namespace/name")] = ""
    graph: Graph | None = None
    graph_hash: Annotated[str, Meta(min_length=1, max_length=MAX_HASH_CHARS, description=(
        "the graph's content hash as /v1/predict answered it (when the graph is not sent)"))] | None = None
    step_seconds: Seconds | None = None
    job_seconds: Seconds | None = None
    steps: Steps | None = None
    startup_seconds: Seconds | None = None
    mode: Mode | None = None
    precision: Precision | None = None
    optimizer: PricedOptimizer | None = None
    num_gpus: Gpus = 1
    batch_size: Annotated[int, Meta(ge=0, le=MAX_BATCH_SIZE)] | None = None
    model_family: Annotated[str, Meta(max_length=MAX_NAME_CHARS)] | None = None
    replaces: Annotated[int, Meta(ge=1, le=2**62, description=(
        "the id of an earlier sample of the same job (measured while it ran) that this one replaces"))] | None = None


class SampleAnswer(_Body):
    """What became of a sample: accepted (learned), unverified (stored, not learned) or quarantined."""

    id: int
    status: Literal["accepted", "unverified", "quarantined"]
    model_version: str
    predicted_step_seconds: float | None = None
    reason: str | UnsetType = UNSET
    error: str | UnsetType = UNSET
    correction: Correction | UnsetType = UNSET


# --- POST /v1/collected ---


class CollectedModelRow(_Body):
    """One whole training (or inference) step `offpeak collect` measured, with its model graph."""

    graph: Graph
    time_s: Annotated[Positive, Meta(description="measured seconds of one step")]
    time_std: Annotated[float, Meta(ge=0, le=MAX_NUMBER)] | None = None
    precision: Precision | None = None
    mode: Mode | None = None
    optimizer: PricedOptimizer | None = None


class CollectedOpRow(_Body):
    """One op-level measurement."""

    op_class: OpClass
    precision: Precision
    mode: OpMode
    flops: Positive
    bytes: Positive
    out_numel: Positive
    lead_dim: Positive
    dtype_bytes: Positive
    time_s: Positive


class CollectedBatch(_Body):
    """Rows `offpeak collect` measured on one GPU type (docs/collect.md)."""

    gpu: GpuName
    software: Annotated[str, Meta(max_length=MAX_SOFTWARE_CHARS)] = ""
    model_rows: Annotated[list[CollectedModelRow], Meta(max_length=MAX_MODEL_ROWS)] = []
    op_rows: Annotated[list[CollectedOpRow], Meta(max_length=MAX_OP_ROWS)] = []


class Calibration(_Body):
    factor: float
    rows: int
    median_ratio: float
    held_out_gain: float | None
    implausible_rows: int = 0


class CollectedAnswer(_Body):
    """Rows written (`already_stored`: rows of a batch posted before, skipped, so a retry stores nothing twice) and
    the GPU type's calibration now."""

    gpu_type: str
    model_rows: int
    op_rows: int
    already_stored: int
    calibration: Calibration | None
    model_version: str


# --- the rest ---


class RefitRequest(_Body):
    dry_run: bool = False


class ErrorAnswer(_Body):
    error: str
    reason: str | UnsetType = UNSET
    known_gpus: list[str] | UnsetType = UNSET


REQUESTS: tuple[type[Struct], ...] = (PredictRequest, SampleReport, CollectedBatch, RefitRequest)
ANSWERS: tuple[type[Struct], ...] = (PredictResponse, SampleAnswer, CollectedAnswer, ErrorAnswer)


def decode(raw: bytes, kind: type[T]) -> T:
    """A request body as `kind`; UserError (a 400) naming the JSON path and the reason when it is not one.

    msgspec reads strict JSON. What it refuses as malformed goes to Python's reader, which also takes NaN and
    Infinity: such a body is then checked as a value, so the field holding the NaN is named too (a graph's own
    fields by the graph's validation). An integer of thousands of digits is refused either way."""
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as e:
        raise UserError(f"invalid request: {e}") from None
    except msgspec.DecodeError as e:
        strict = str(e)
    try:
        value = json.loads(raw)
    except RecursionError:
        raise UserError("body is not valid JSON: nested too deep") from None
    except ValueError as e:  # malformed, not UTF-8, or an integer past Python's 4,300-digit limit
        raise UserError(f"body is not valid JSON: {strict}; {str(e)[:160]}") from None
    return convert(value, kind)


def convert(value: Any, kind: type[T]) -> T:
    """A decoded JSON value as `kind`; UserError naming the path when it is not one."""
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as e:
        raise UserError(f"invalid request: {e}") from None


def graph_error(e: GraphError, where: str) -> UserError:
    """A graph's GraphError as the 400 a client reads: the field's JSON path from the body's root."""
    return UserError(f"invalid model graph at `{where}.{e.field}`: {e.reason}")


def encode(value: Any) -> bytes:
    """JSON bytes of a payload (a struct, or the plain values `to_builtins` gives)."""
    return msgspec.json.encode(value)


def to_builtins(value: Struct) -> dict[str, Any]:
    """A payload as the plain dict a caller indexes (`answer["predictions"]`); absent fields stay absent."""
    out: dict[str, Any] = msgspec.to_builtins(value)
    return out
