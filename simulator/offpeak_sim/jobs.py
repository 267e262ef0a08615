"""The offline job stream from the Microsoft ITP (ElasticFlow) trace: arrivals, durations, GPU counts.

Any folder with `raw/clusterNN.csv` (or `clusterNN.csv` directly) in that layout works, e.g. another time slice.
Submission times are rebased so the first job in the folder arrives at 0. Jobs keep their GPU count; the engine
runs one wider than a node's free GPUs as a gang across nodes. `fold_to_node` (the older model, opt-in) instead
folds them onto one node with the same GPU-seconds (GPUs capped at the node size, duration stretched). The stream is thinned (seeded, every job kept with the same probability) to a target
offered load, so the job size mix is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from offpeak.errors import UserError

REQUIRED = ("submission_time", "duration", "num_gpu")


@dataclass(frozen=True)
class JobStream:
    """Columnar job table, sorted by arrival. Durations are reference-GPU (V100) seconds."""

    ids: np.ndarray  # str
    arrival_s: np.ndarray  # float, seconds from the start of the simulated period
    duration_s: np.ndarray  # float, reference-GPU seconds
    gpus: np.ndarray  # int

    def __len__(self) -> int:
        return len(self.ids)

    def gpu_seconds(self) -> float:
        return float((self.duration_s * self.gpus).sum())

    def subset(self, mask: np.ndarray) -> JobStream:
        return JobStream(self.ids[mask], self.arrival_s[mask], self.duration_s[mask], self.gpus[mask])


def trace_files(folder: Path) -> list[Path]:
    """Return the cluster CSVs of an ITP-layout folder (prefers `raw/`)."""
    for sub in (folder / "raw", folder):
        files = sorted(sub.glob("cluster*.csv"))
        if files:
            return files
    raise UserError(f"{folder} has no cluster*.csv (expected the ms-itp-elasticflow layout, raw/clusterNN.csv)")


def load_jobs(folder: Path, *, clusters: tuple[str, ...] = ()) -> JobStream:
    """Read every (or the named, e.g. '04') cluster file, rebase time to the first submission."""
    frames = []
    for f in trace_files(folder):
        if clusters and not any(f.stem.endswith(c) for c in clusters):
            continue
        try:
            df = pd.read_csv(f)
        except (ValueError, pd.errors.ParserError) as e:
            raise UserError(f"cannot read {f}: {e}") from e
        missing = [c for c in REQUIRED if c not in df.columns]
        if missing:
            raise UserError(f"{f} lacks column(s) {', '.join(missing)}")
        df["job_id"] = (f.stem + "/" + df["job_id"].astype(str)) if "job_id" in df else f.stem + "/" + df.index.astype(str)
        frames.append(df[["job_id", *REQUIRED]])
    if not frames:
        raise UserError(f"no cluster files matched {clusters} in {folder}")
    df = pd.concat(frames, ignore_index=True).dropna()
    df = df[(df["duration"] > 0) & (df["num_gpu"] > 0)]
    if df.empty:
        raise UserError(f"{folder}: the job trace has no jobs (all files empty?)")
    df = df.sort_values(["submission_time", "job_id"], kind="stable")
    t = df["submission_time"].to_numpy(dtype=float)
    return JobStream(
        ids=df["job_id"].to_numpy(dtype=str),
        arrival_s=t - t[0],
        duration_s=df["duration"].to_numpy(dtype=float),
        gpus=df["num_gpu"].to_numpy(dtype=np.int64),
    )


def fold_to_node(jobs: JobStream, *, gpus_per_node: int) -> JobStream:
    """Cap GPUs at `gpus_per_node`, stretching duration so GPU-seconds are unchanged."""
    capped = np.minimum(jobs.gpus, gpus_per_node)
    return JobStream(jobs.ids, jobs.arrival_s, jobs.duration_s * jobs.gpus / capped, capped)


def elastic_min_gpus(gpus: np.ndarray, *, fraction: float | None, checkpointing: bool,
                     from_gpus: int = 2) -> np.ndarray:
    """Fewest GPUs each job may run on (elastic width, a TrainingJob's `minWorkers`): ceil(fraction × GPUs).

    Each GPU is taken as one data-parallel worker (the trace gives GPUs, not workers). Only checkpointing jobs of
    `from_gpus` (at least 2) GPUs or more are elastic (a job changes width by restarting from a checkpoint); every
    other job, and every job when `fraction` is None or 0, needs all its GPUs."""
    g = np.asarray(gpus, dtype=np.int64)
    if not fraction or not checkpointing:
        return g.copy()
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"elastic fraction must be within (0, 1], got {fraction}")
    lo = np.maximum(1, np.ceil(fraction * g - 1e-9).astype(np.int64))
    return np.where(g >= max(2, from_gpus), np.minimum(lo, g), g)


def window(jobs: JobStream, *, start_s: float, length_s: float) -> JobStream:
    """Return the jobs that arrive in [start_s, start_s + length_s), arrival rebased to start_s."""
    m = (jobs.arrival_s >= start_s) & (jobs.arrival_s < start_s + length_s)
    sub = jobs.subset(m)
    return JobStream(sub.ids, sub.arrival_s - start_s, sub.duration_s, sub.gpus)


def thin_to_load(jobs: JobStream, *, target_gpu_seconds: float, rng: np.random.Generator) -> JobStream:
    """Keep each job with one probability so the kept GPU-seconds are about `target_gpu_seconds`.

    When the stream offers less than the target, every job is kept (the load is then lower than asked).
    """
    offered = jobs.gpu_seconds()
    if offered <= target_gpu_seconds or offered == 0:
        return jobs
    return jobs.subset(rng.random(len(jobs)) < target_gpu_seconds / offered)
