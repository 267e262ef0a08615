"""Benchmark database: one SQLite file with the normalised op and model tables plus observed job samples.

Loaders fill `op_samples`/`model_samples` (`offpeak predictor build-db`); `offpeak collect` and the HTTP
`/v1/samples` endpoint append rows. SQLite because several writers append small batches over time.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import pandas as pd

from offpeak_core.datapaths import cache_dir
from offpeak_predictor.loaders import MODEL_COLUMNS, OP_COLUMNS

TABLES = {"op_samples": OP_COLUMNS, "model_samples": MODEL_COLUMNS}


def default_db_path() -> Path:
    """`$OFFPEAK_PREDICTOR_DB`, else `benchmarks.sqlite` in offpeak's cache (`$OFFPEAK_CACHE`, ~/.cache/offpeak)."""
    env = os.environ.get("OFFPEAK_PREDICTOR_DB")
    return Path(env) if env else cache_dir() / "benchmarks.sqlite"


class BenchmarkDB:
    """Thin wrapper over one SQLite file; every call opens its own connection (safe across threads)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            con.execute(
                "CREATE TABLE IF NOT EXISTS job_samples (id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL, "
                "job TEXT, gpu TEXT, graph_hash TEXT, step_seconds REAL, job_seconds REAL, steps INTEGER, "
                "graph TEXT)"
            )

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def append(self, table: str, rows: pd.DataFrame) -> int:
        """Append rows (missing columns become NULL); returns the number written."""
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}")
        frame = rows.reindex(columns=list(TABLES[table]))
        with self._connect() as con:
            frame.to_sql(table, con, if_exists="append", index=False)
        return len(frame)

    def read(self, table: str) -> pd.DataFrame:
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}")
        with self._connect() as con:
            exists = con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone()
            if not exists:
                return pd.DataFrame(columns=list(TABLES[table]))
            return pd.read_sql_query(f"SELECT * FROM {table}", con)  # noqa: S608 - table name is whitelisted

    def replace_source(self, table: str, source: str, rows: pd.DataFrame) -> int:
        """Replace all rows of one source (rebuilding the DB from the datasets is idempotent)."""
        with self._connect() as con:
            try:
                con.execute(f"DELETE FROM {table} WHERE source = ?", (source,))  # noqa: S608
            except sqlite3.OperationalError:
                pass  # table not created yet
        return self.append(table, rows)

    def add_job_sample(
        self, *, job: str, gpu: str, graph_hash: str, step_seconds: float | None, job_seconds: float | None,
        steps: int | None, graph: dict[str, Any] | None,
    ) -> int:  # fmt: skip
        with self._connect() as con:
            cur = con.execute(
                "INSERT INTO job_samples (created, job, gpu, graph_hash, step_seconds, job_seconds, steps, graph) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (time.time(), job, gpu, graph_hash, step_seconds, job_seconds, steps,
                 json.dumps(graph) if graph is not None else None),
            )  # fmt: skip
            return int(cur.lastrowid or 0)

    def job_samples(self) -> pd.DataFrame:
        with self._connect() as con:
            return pd.read_sql_query("SELECT * FROM job_samples", con)


def build_db(db: BenchmarkDB, root: Path) -> dict[str, int]:
    """Load every dataset into the DB (replacing earlier loads of the same source); row counts per source."""
    from offpeak_predictor.loaders import MODEL_LOADERS, OP_LOADERS

    counts: dict[str, int] = {}
    for name, fn in OP_LOADERS.items():
        counts[name] = db.replace_source("op_samples", name, fn(root))
    for name, fn in MODEL_LOADERS.items():
        counts[name] = db.replace_source("model_samples", name, fn(root))
    return counts
