"""Rows `offpeak collect` wrote into a benchmark DB, read back as per-GPU-type calibrations (`calibration.py`).

Adapter between the DB, the graph files of the rows and the predictor; the decision is `calibration.calibrate`.
Computed once when a predictor loads (`offpeak predict --db`, `predictor serve --db`) and again when collected rows
arrive or the served model changes, never per prediction: one model prediction per collected row.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import pandas as pd

from offpeak_graph.schema import load_graph, validate_graph
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
    ratios = collected_log_ratios(predictor=predictor, rows=db.read("model_samples"))
    return calibrate(ratios, settings=settings)


def _text(row: dict[str, Any], key: str) -> str | None:
    value = row.get(key)
    return str(value) if isinstance(value, str) and value else None
