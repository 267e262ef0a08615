"""Wiring for `offpeak train-predictor`: load datasets (+ collected DB rows), join graphs, train, save.

Shows progress with rich; all decisions live in `train.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from offpeak_predictor.gpus import find_gpu
from offpeak_predictor.graphcache import get_graph
from offpeak_predictor.loaders import (
    MODEL_COLUMNS, MODEL_LOADERS, OP_COLUMNS, OP_LOADERS, OWN_GPUS, load_present, own_sources,
)  # fmt: skip
from offpeak_predictor.model import RuntimeModel
from offpeak_predictor.train import Progress, TrainSettings, attach_graphs, exclude_holdout, train_model

log = logging.getLogger(__name__)


@contextmanager
def rich_progress() -> Iterator[Progress]:
    """A `Progress` callback drawing one rich bar per stage (on stderr)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn

    bars: dict[str, Any] = {}
    with RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=Console(stderr=True), transient=False) as prog:  # fmt: skip

        def update(stage: str, done: int, total: int) -> None:
            if stage not in bars:
                bars[stage] = prog.add_task(stage, total=total)
            prog.update(bars[stage], completed=done, total=total)

        yield update


def load_tables(root: Path, *, db_path: str | None = None, modern: bool = False
                ) -> tuple[pd.DataFrame, pd.DataFrame]:  # fmt: skip
    """(op rows, model rows) from the datasets plus any rows collected into the DB; hold-outs removed.

    `modern`: also our own steps and single ops of every GPU we measured (`OWN_GPUS`: H100, H200, where the data has
    them), and those GPUs' rows are kept: what the shipped model trains on. The evaluation loads without them and
    asks for them as its modern slices.
    """
    ops = pd.concat([fn(root) for fn in OP_LOADERS.values()], ignore_index=True)
    models = pd.concat([fn(root) for fn in MODEL_LOADERS.values()], ignore_index=True)
    if modern:
        ops = pd.concat([ops, modern_op_rows(root)], ignore_index=True)
        models = pd.concat([models, modern_model_rows(root)], ignore_index=True)
    if db_path:
        from offpeak_predictor.db import BenchmarkDB

        db = BenchmarkDB(db_path)
        extra_ops = db.read("op_samples")
        extra_ops = extra_ops[~extra_ops["source"].isin(list(OP_LOADERS))]
        extra_models = db.read("model_samples")
        extra_models = extra_models[~extra_models["source"].isin([*MODEL_LOADERS, *own_sources()])]
        ops = pd.concat([ops, extra_ops], ignore_index=True)
        models = pd.concat([models, extra_models], ignore_index=True)
    known = lambda frame: frame[frame["gpu"].map(lambda g: find_gpu(str(g)) is not None)]  # noqa: E731
    return (exclude_holdout(known(ops), keep_own=modern),
            exclude_holdout(known(models), keep_own=modern))  # fmt: skip


def modern_model_rows(root: Path) -> pd.DataFrame:
    """Our own modern whole steps of every GPU we measured (`OWN_GPUS`), where they are present; an empty frame
    without any."""
    parts = load_present({own.source: own.model_rows for own in OWN_GPUS.values()}, root)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(MODEL_COLUMNS))


def modern_op_rows(root: Path) -> pd.DataFrame:
    """Our own modern single ops (GEMM, TF32 and half-precision convolutions, vector ops) of every GPU we measured,
    where they are present; an empty frame without any."""
    parts = load_present({own.ops_source: own.op_rows for own in OWN_GPUS.values()}, root)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=list(OP_COLUMNS))


def quick_subsample(ops: pd.DataFrame, models: pd.DataFrame, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """At most 4,000 op rows and 60 torchvision model rows per source (smoke tests)."""

    def per_source(frame: pd.DataFrame, n: int) -> pd.DataFrame:
        parts = [part.sample(min(len(part), n), random_state=seed) for _, part in frame.groupby("source", sort=True)]
        return pd.concat(parts, ignore_index=True) if parts else frame.iloc[:0]

    return per_source(ops, 4000), per_source(models[models["graph_kind"] == "torchvision"], 60)


def train_from_data(*, root: Path, out: Path, seed: int = 7, quick: bool = False,
                    db_path: str | None = None, modern: bool = True) -> RuntimeModel:  # fmt: skip
    ops, models = load_tables(root, db_path=db_path, modern=modern)
    settings = TrainSettings(seed=seed)
    if quick:
        ops, models = quick_subsample(ops, models, seed)
        settings = TrainSettings(seed=seed, op_rounds=60, step_rounds=60)
    with rich_progress() as progress:
        models, summaries = attach_graphs(models, get_graph, progress)
        model = train_model(ops, models, summaries, settings, progress)
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out)
    return model
