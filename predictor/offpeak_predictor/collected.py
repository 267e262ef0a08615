"""Rows `offpeak collect` wrote into a benchmark DB, read back as per-GPU-type calibrations (`calibration.py`),
and the batches of such rows `POST /v1/collected` receives (`parse_batch`, pure; `check_predictable`;
`store_batch`, all or nothing).

Adapter between the DB, the graph files of the rows and the predictor; the decision is `calibration.calibrate`.
Computed once when a predictor loads (`offpeak predict --db`, `predictor serve --db`) and again when collected rows
arrive or the served model changes, never per prediction: one model prediction per collected row.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from offpeak.errors import UserError
from offpeak_graph.schema import GraphError, ModelGraph, load_graph, parse_graph, validate_graph
from offpeak_predictor import wire
from offpeak_predictor.calibration import CalibrationSettings, GpuCalibration, calibrate
from offpeak_predictor.db import BenchmarkDB
from offpeak_predictor.gpus import find_gpu
from offpeak_predictor.predict import PredictOptions, Predictor

log = logging.getLogger(__name__)
COLLECT_SOURCE = "collect"  # the `source` of every row `offpeak collect` writes


def collected_log_ratios(*, predictor: Predictor, rows: pd.DataFrame) -> dict[str, list[float]]:
    """log(measured / model prediction) of each collected whole-step row, by canonical GPU type. Rows on devices
    outside the catalogue (a CPU run) or whose graph file is gone are skipped (logged)."""
    out: dict[str, list[float]] = {}
    rows = rows[(rows["source"] == COLLECT_SOURCE) & (rows["graph_kind"] == "graph_file")]
    for row in rows.to_dict("records"):
        spec = find_gpu(str(row["gpu"]))
        measured = float(row["time_s"]) if pd.notna(row["time_s"]) else math.nan
        if spec is None or not measured > 0:
            continue
        try:
            graph = validate_graph(load_graph(str(row["graph_ref"])))
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("collected row %s on %s skipped: graph %s unreadable (%s)", row.get("model_name"),
                        spec.name, row["graph_ref"], e)  # fmt: skip
            continue
        options = PredictOptions(mode=_text(row, "mode"), precision=_text(row, "precision"),
                                 optimizer=_text(row, "optimizer"), num_gpus=int(row.get("num_gpus") or 1))  # fmt: skip
        predicted = predictor.predict(graph, [spec.name], options, corrected=False)[0]["step_seconds"]
        out.setdefault(spec.name, []).append(math.log(measured / float(predicted)))
    return out


def load_calibration(*, predictor: Predictor, db: BenchmarkDB,
                     settings: CalibrationSettings = CalibrationSettings()) -> dict[str, GpuCalibration]:  # fmt: skip
    """The calibration of every GPU type with collected rows in `db`, against `predictor`'s model."""
    ratios = collected_log_ratios(predictor=predictor, rows=db.read("model_samples", source=COLLECT_SOURCE))
    return calibrate(ratios, settings=settings)


def _text(row: Mapping[Any, Any], key: str) -> str | None:
    value = row.get(key)
    return str(value) if isinstance(value, str) and value else None


@dataclass(frozen=True, slots=True)
class CheckedBatch:
    """A checked POST /v1/collected body: rows in the DB's columns (source and GPU type filled in), and the
    graph of each model row (same order)."""

    gpu_type: str
    model_rows: list[dict[str, Any]]
    graphs: list[tuple[ModelGraph, dict[str, Any]]]  # parsed graph, and the JSON it came as (stored as is)
    op_rows: list[dict[str, Any]]


def parse_batch(body: wire.CollectedBatch, *, gpu_type: str) -> CheckedBatch:
    """A POST /v1/collected body (its fields already typed and bounded by `wire.CollectedBatch`; the GPU type
    resolved) as DB rows; UserError naming the first bad field by its JSON path (`$.model_rows[1].graph.ops...`)."""
    if not body.model_rows and not body.op_rows:
        raise UserError("give 'model_rows' and/or 'op_rows' (rows written by `offpeak collect`)")
    models, graphs = [], []
    for i, row in enumerate(body.model_rows):
        try:
            graph = parse_graph(row.graph)
        except GraphError as e:
            raise wire.graph_error(e, f"$.model_rows[{i}].graph") from e
        mode = row.mode or graph.mode
        models.append({
            "source": COLLECT_SOURCE, "gpu": gpu_type, "mode": mode, "precision": row.precision or graph.precision,
            "optimizer": row.optimizer or (graph.optimizer if mode == "train" else "none"),
            "model_name": graph.model_name, "family": graph.model_family, "graph_kind": "graph_file",
            "batch_size": graph.batch_size, "seq_len": graph.seq_len,
            "input_shape": json.dumps(list(graph.input_shape)) if graph.input_shape else None,
            "num_gpus": 1, "time_s": row.time_s, "time_std": row.time_std, "software": body.software,
        })  # fmt: skip
        graphs.append((graph, row.graph))
    ops = [{"source": COLLECT_SOURCE, "gpu": gpu_type, "software": body.software, "precision": row.precision,
            "mode": row.mode, "op_class": row.op_class, "flops": row.flops, "bytes": row.bytes,
            "out_numel": row.out_numel, "lead_dim": row.lead_dim, "dtype_bytes": row.dtype_bytes, "time_s": row.time_s}
           for row in body.op_rows]  # fmt: skip
    return CheckedBatch(gpu_type=gpu_type, model_rows=models, graphs=graphs, op_rows=ops)


def check_predictable(predictor: Predictor, batch: CheckedBatch) -> None:
    """Predict each model row as the calibration will (before anything is stored): a row the model cannot price
    is a 400 naming it, never a stored row that fails every later calibration."""
    for i, (row, (graph, _)) in enumerate(zip(batch.model_rows, batch.graphs, strict=True)):
        options = PredictOptions(mode=row["mode"], precision=row["precision"], optimizer=row["optimizer"])
        try:
            step = float(predictor.predict(graph, [batch.gpu_type], options, corrected=False)[0]["step_seconds"])
        except (UserError, ValueError, ArithmeticError) as e:
            raise UserError(f"$.model_rows[{i}]: the model cannot predict this row's graph: {e}") from e
        if not (math.isfinite(step) and step > 0):
            raise UserError(f"$.model_rows[{i}]: the model's prediction for this row's graph is not a positive "
                            "finite number; check its FLOPs and bytes")


MODEL_ROW_KEY = ("gpu", "model_name", "precision", "mode", "optimizer", "batch_size", "graph_ref", "time_s", "software")
OP_ROW_KEY = ("gpu", "op_class", "precision", "mode", "flops", "bytes", "out_numel", "lead_dim", "time_s", "software")


def _new_rows(existing: pd.DataFrame, rows: list[dict[str, Any]], key: tuple[str, ...]) -> list[dict[str, Any]]:
    """`rows` whose key is not stored yet: a measured time repeats exactly only when the same batch is posted again
    (a collect Job retrying after a lost answer), so a retry stores nothing twice."""
    def norm(value: Any) -> Any:
        return None if value is None or (isinstance(value, float) and math.isnan(value)) else value

    seen = {tuple(norm(v) for v in values) for values in existing.reindex(columns=list(key)).itertuples(index=False)}
    out = []
    for row in rows:
        k = tuple(norm(row.get(c)) for c in key)
        if k not in seen:
            seen.add(k)
            out.append(row)
    return out


# Collected rows kept per GPU type, the newest (a collect Job's plan measures a few hundred; the token-holder could
# post many more distinct ones): the oldest beyond these are deleted, with graph files no row references any more.
MAX_COLLECTED_MODEL_ROWS = 5_000
MAX_COLLECTED_OP_ROWS = 50_000


def store_batch(db: BenchmarkDB, batch: CheckedBatch) -> tuple[int, int, int]:
    """Append a checked batch to the DB, all or nothing: each model row's graph is saved beside the DB
    (`collected_graphs/`, named by content hash) and referenced by its row, as `offpeak collect` does locally; the
    rows, and the pruning past `MAX_COLLECTED_*_ROWS` for the GPU type (oldest first), are one transaction. Should
    it fail, the graph files this call created are removed again. Rows already stored (the same batch posted
    again) are skipped. (model rows, op rows, rows skipped)."""
    graph_dir = db.path.parent / "collected_graphs"
    graph_dir.mkdir(parents=True, exist_ok=True)
    rows, created = [], []
    try:
        for row, (graph, raw) in zip(batch.model_rows, batch.graphs, strict=True):
            path = graph_dir / f"{graph.content_hash().split(':')[1][:24]}.json.gz"
            if not path.exists():
                tmp = path.with_suffix(".tmp")
                tmp.write_bytes(gzip.compress(json.dumps(raw).encode()))
                tmp.replace(path)  # whole or absent, never a half-written graph a row refers to
                created.append(path)
            rows.append({**row, "graph_ref": str(path)})
        mine = {"source": COLLECT_SOURCE, "gpu": batch.gpu_type}
        new_models = _new_rows(db.read("model_samples", **mine), rows, MODEL_ROW_KEY)
        new_ops = _new_rows(db.read("op_samples", **mine), batch.op_rows, OP_ROW_KEY)
        pruned = db.append_all({"model_samples": new_models, "op_samples": new_ops},
                               keep_newest={"model_samples": MAX_COLLECTED_MODEL_ROWS,
                                            "op_samples": MAX_COLLECTED_OP_ROWS}, where=mine)  # fmt: skip
    except BaseException:
        for path in created:
            path.unlink(missing_ok=True)
        raise
    if pruned.get("model_samples"):
        referenced = {Path(str(ref)).name for ref in db.read("model_samples", source=COLLECT_SOURCE)["graph_ref"]}
        for path in graph_dir.glob("*.json.gz"):
            if path.name not in referenced:
                path.unlink(missing_ok=True)
    models, ops = len(new_models), len(new_ops)
    return models, ops, len(rows) + len(batch.op_rows) - models - ops


def batch_body(*, model_rows: list[dict[str, Any]], op_rows: list[dict[str, Any]],
               software: str) -> dict[str, Any]:  # fmt: skip
    """The POST /v1/collected body for rows `offpeak collect` measured (graphs read from their files)."""
    models = []
    for row in model_rows:
        raw = Path(str(row["graph_ref"])).read_bytes()
        graph = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        models.append({k: row[k] for k in ("precision", "mode", "optimizer", "time_s", "time_std")} | {"graph": graph})
    ops = [{k: row[k] for k in ("precision", "mode", "op_class", "flops", "bytes", "out_numel", "lead_dim",
                                "dtype_bytes", "time_s")} for row in op_rows]  # fmt: skip
    return {"software": software, "model_rows": models, "op_rows": ops}
