"""Benchmark database: one SQLite file with the normalised op and model tables plus observed job samples.

Loaders fill `op_samples`/`model_samples` (`offpeak predictor build-db`); `offpeak collect` and the HTTP
`/v1/samples` endpoint append rows. SQLite because several writers append small batches over time.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd

from offpeak_core.datapaths import cache_dir
from offpeak_predictor.loaders import MODEL_COLUMNS, OP_COLUMNS

TABLES = {"op_samples": OP_COLUMNS, "model_samples": MODEL_COLUMNS}
# Feedback columns of job_samples (added to older files on open): the sample's correction key, who posted it,
# and its judgement against the serving model (status accepted | quarantined | unverified | superseded: replaced by
# a later sample of the same job).
SAMPLE_COLUMNS = {
    "client": "TEXT", "family": "TEXT", "precision": "TEXT", "mode": "TEXT", "optimizer": "TEXT",
    "num_gpus": "INTEGER", "batch_size": "INTEGER", "model_version": "TEXT", "predicted_step_seconds": "REAL",
    "status": "TEXT", "reason": "TEXT",
}  # fmt: skip
_TEXT_COLUMNS = ("job", "gpu", "graph_hash", *(name for name, kind in SAMPLE_COLUMNS.items() if kind == "TEXT"))
# id, created, step_seconds, job_seconds, steps, num_gpus, batch_size, predicted_step_seconds, graph_bytes,
# stored_bytes: 8 bytes each as SQLite stores them at most
_NUMBER_BYTES = 10 * 8


class RowTooLarge(ValueError):
    """One job sample larger than the whole room samples may take."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the sample would store {size} bytes, more than the {limit} bytes all samples may take")
        self.size, self.limit = size, limit


def job_sample_bytes(columns: Mapping[str, Any], *, graph_bytes: int) -> int:
    """Every byte one job sample stores: its text columns as UTF-8, its graph's JSON, and its numbers (what the
    samples' byte budget counts, `prune_samples`)."""
    text = sum(len(str(columns[c]).encode("utf-8", "surrogatepass")) for c in _TEXT_COLUMNS
               if columns.get(c) is not None)  # fmt: skip
    return text + graph_bytes + _NUMBER_BYTES


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
            have = {row[1] for row in con.execute("PRAGMA table_info(job_samples)")}
            for name, kind in {**SAMPLE_COLUMNS, "graph_bytes": "INTEGER",
                               "stored_bytes": "INTEGER"}.items():  # files written before these
                if name not in have:
                    con.execute(f"ALTER TABLE job_samples ADD COLUMN {name} {kind}")

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

    def read(self, table: str, **equal: str) -> pd.DataFrame:
        """Rows of `table`, only those whose columns equal `equal` when given (`source="collect", gpu="T4"`): the
        filter runs in SQLite, so a DB that also holds the benchmark rows is not read whole for a few."""
        if table not in TABLES:
            raise ValueError(f"unknown table {table!r}")
        unknown = set(equal) - set(TABLES[table])
        if unknown:
            raise ValueError(f"unknown column(s) of {table}: {', '.join(sorted(unknown))}")
        where = " AND ".join(f"{column} = ?" for column in equal)  # column names are whitelisted above
        with self._connect() as con:
            exists = con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone()
            if not exists:
                return pd.DataFrame(columns=list(TABLES[table]))
            query = f"SELECT * FROM {table}" + (f" WHERE {where}" if where else "")  # noqa: S608 - whitelisted
            return pd.read_sql_query(query, con, params=tuple(equal.values()))

    def keep_newest(self, table: str, *, max_rows: int, **equal: str) -> int:
        """Delete the oldest rows (by insertion) of `table` whose columns equal `equal`, beyond the newest
        `max_rows` of them; the number deleted."""
        with self._transaction() as con:
            return _keep_newest(con, table, max_rows=max_rows, equal=equal)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One connection in one explicit transaction (`BEGIN IMMEDIATE`: the writer's lock from the start):
        committed when the block ends, rolled back when it raises."""
        con = self._connect()
        con.isolation_level = None  # no implicit transactions: this one is ours
        try:
            con.execute("BEGIN IMMEDIATE")
            yield con
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        finally:
            con.close()

    def append_all(self, rows: Mapping[str, list[dict[str, Any]]], *, keep_newest: Mapping[str, int],
                   where: Mapping[str, str]) -> dict[str, int]:  # fmt: skip
        """Append rows to several tables (missing columns become NULL), then delete per table the oldest rows
        equal to `where` beyond its `keep_newest`: one transaction, so all of it is stored or none (a fresh DB
        gets its tables in it). The number of rows deleted per table."""
        with self._transaction() as con:
            for table, items in rows.items():
                columns = _columns(table, where)
                con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({', '.join(columns)})")
                if items:
                    con.executemany(f"INSERT INTO {table} ({', '.join(columns)}) "  # noqa: S608 - whitelisted
                                    f"VALUES ({', '.join('?' * len(columns))})",
                                    [tuple(item.get(c) for c in columns) for item in items])  # fmt: skip
            return {table: _keep_newest(con, table, max_rows=n, equal=where) for table, n in keep_newest.items()}

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
        steps: int | None, graph: dict[str, Any] | None, max_bytes: int | None = None, **judged: Any,
    ) -> int:  # fmt: skip
        """Append one observed job; `judged` fills the feedback columns (SAMPLE_COLUMNS). Returns its id.
        RowTooLarge, before anything is written, when the row would store more than `max_bytes`."""
        unknown = set(judged) - set(SAMPLE_COLUMNS)
        if unknown:
            raise ValueError(f"unknown job_samples columns: {sorted(unknown)}")
        text = json.dumps(graph) if graph is not None else None  # ASCII: its length is its size in bytes
        graph_bytes = len(text) if text is not None else 0
        row = {"job": job, "gpu": gpu, "graph_hash": graph_hash, **judged}
        size = job_sample_bytes(row, graph_bytes=graph_bytes)
        if max_bytes is not None and size > max_bytes:
            raise RowTooLarge(size, max_bytes)
        columns = ["created", "job", "gpu", "graph_hash", "step_seconds", "job_seconds", "steps", "graph",
                   "graph_bytes", "stored_bytes", *judged]  # fmt: skip
        values = [time.time(), job, gpu, graph_hash, step_seconds, job_seconds, steps, text, graph_bytes, size,
                  *judged.values()]  # fmt: skip
        with self._transaction() as con:
            cur = con.execute(f"INSERT INTO job_samples ({', '.join(columns)}) "  # noqa: S608 - whitelisted names
                              f"VALUES ({', '.join('?' * len(columns))})", values)  # fmt: skip
            return int(cur.lastrowid or 0)

    def job_samples(self) -> pd.DataFrame:
        with self._connect() as con:
            return pd.read_sql_query("SELECT * FROM job_samples", con)

    def sample_rows(self, *, up_to_id: int | None = None) -> list[dict[str, Any]]:
        """Job samples without their graphs, oldest first (what the correction table is rebuilt from)."""
        limit = up_to_id if up_to_id is not None else 2**62
        return self._sample_rows("id <= ? ORDER BY id", limit)

    def sample_row(self, sample_id: int) -> dict[str, Any] | None:
        """One job sample without its graph (None: no such id, or dropped by retention)."""
        rows = self._sample_rows("id = ?", sample_id)
        return rows[0] if rows else None

    def _sample_rows(self, where: str, *args: Any) -> list[dict[str, Any]]:
        names = ["id", "created", "job", "gpu", "graph_hash", "step_seconds", "job_seconds", "steps", *SAMPLE_COLUMNS]
        with self._connect() as con:
            rows = con.execute(f"SELECT {', '.join(names)} FROM job_samples WHERE {where}",  # noqa: S608 - ours
                               args).fetchall()  # fmt: skip
        return [dict(zip(names, row, strict=True)) for row in rows]

    def sample_graph(self, sample_id: int) -> dict[str, Any] | None:
        with self._connect() as con:
            row = con.execute("SELECT graph FROM job_samples WHERE id = ?", (sample_id,)).fetchone()
        return json.loads(row[0]) if row and row[0] else None

    def update_sample(self, sample_id: int, **columns: Any) -> None:
        """Set feedback columns (SAMPLE_COLUMNS) of one job sample, e.g. its re-judgement under a new model (its
        stored bytes counted again)."""
        unknown = set(columns) - set(SAMPLE_COLUMNS)
        if unknown or not columns:
            raise ValueError(f"unknown or no job_samples columns: {sorted(unknown)}")
        names = [*_TEXT_COLUMNS, "graph_bytes"]
        with self._transaction() as con:
            row = con.execute(f"SELECT {', '.join(names)} FROM job_samples WHERE id = ?",  # noqa: S608
                              (sample_id,)).fetchone()  # fmt: skip
            if row is None:
                return
            now = {**dict(zip(names, row, strict=True)), **columns}
            size = job_sample_bytes(now, graph_bytes=int(now["graph_bytes"] or 0))
            assignments = ", ".join(f"{name} = ?" for name in [*columns, "stored_bytes"])
            con.execute(f"UPDATE job_samples SET {assignments} WHERE id = ?",  # noqa: S608 - whitelisted names
                        (*columns.values(), size, sample_id))  # fmt: skip

    def prune_samples(self, *, max_rows: int, max_graph_bytes: int | None = None) -> list[dict[str, Any]]:
        """Drop the oldest job samples beyond `max_rows`, and beyond `max_graph_bytes` of everything they store
        (graphs, every text field, numbers: `job_sample_bytes`; the newest kept first: a graph or a field is up to
        the body limit, so rows alone do not bound the file); returns the dropped rows (without graphs)."""
        with self._connect() as con:
            by_rows = con.execute("SELECT id FROM job_samples ORDER BY id DESC LIMIT 1 OFFSET ?",
                                  (max_rows,)).fetchone()  # fmt: skip
            by_bytes = None
            if max_graph_bytes is not None:  # rows written before stored_bytes existed: their graph measured here
                by_bytes = con.execute(
                    "SELECT id FROM (SELECT id, SUM(COALESCE(stored_bytes, graph_bytes, LENGTH(graph), 0)) OVER "
                    "(ORDER BY id DESC) AS kept FROM job_samples) WHERE kept > ? ORDER BY id DESC LIMIT 1",
                    (max_graph_bytes,),
                ).fetchone()  # fmt: skip
        cuts = [row[0] for row in (by_rows, by_bytes) if row is not None]
        if not cuts:
            return []
        cut = max(cuts)
        dropped = self.sample_rows(up_to_id=cut)
        with self._connect() as con:
            con.execute("DELETE FROM job_samples WHERE id <= ?", (cut,))
        return dropped

def _columns(table: str, equal: Mapping[str, str]) -> list[str]:
    """The columns of a known table; ValueError for another table or a column it lacks (names reach SQL text)."""
    if table not in TABLES or set(equal) - set(TABLES[table]):
        raise ValueError(f"unknown table or column(s): {table} {sorted(equal)}")
    return list(TABLES[table])


def _keep_newest(con: sqlite3.Connection, table: str, *, max_rows: int, equal: Mapping[str, str]) -> int:
    _columns(table, equal)
    if not con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone():
        return 0  # nothing stored yet (a fresh DB)
    where = " AND ".join(f"{column} = ?" for column in equal) or "1"  # column names whitelisted above
    cut = con.execute(f"SELECT rowid FROM {table} WHERE {where} ORDER BY rowid DESC "  # noqa: S608
                      "LIMIT 1 OFFSET ?", (*equal.values(), max_rows)).fetchone()  # fmt: skip
    if cut is None:
        return 0
    return int(con.execute(f"DELETE FROM {table} WHERE {where} AND rowid <= ?",  # noqa: S608
                           (*equal.values(), cut[0])).rowcount)  # fmt: skip


def build_db(db: BenchmarkDB, root: Path) -> dict[str, int]:
    """Load every dataset into the DB (replacing earlier loads of the same source); row counts per source."""
    from offpeak_predictor.loaders import MODEL_LOADERS, OP_LOADERS

    counts: dict[str, int] = {}
    for name, fn in OP_LOADERS.items():
        counts[name] = db.replace_source("op_samples", name, fn(root))
    for name, fn in MODEL_LOADERS.items():
        counts[name] = db.replace_source("model_samples", name, fn(root))
    return counts
