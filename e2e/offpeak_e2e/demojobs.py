"""Example TrainingJobs for the demo, whose fake runtimes are real measurements (pure).

Each job trains a torchvision CNN at batch size 12, fp32, on A100-SXM4-40GB; its kwok runtime
(``offpeak.io/sim-runtime``) is `steps` × the median measured step time of that model on that GPU from
``runtime/ryujaehun_pytorch_gpu_benchmark/summary_by_config.csv``. So "actual" in the demo is a measured
figure, and predicted-vs-actual shows the predictor's real error on those models.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from offpeak_core.datapaths import data_root
from offpeak_e2e.harness import trainingjob_manifest

MEASURED_FILE = "runtime/ryujaehun_pytorch_gpu_benchmark/summary_by_config.csv"
GPU = "A100-SXM4-40GB"
BATCH = 12


@dataclass(frozen=True)
class DemoJob:
    name: str
    model: str
    steps: int
    step_seconds: float  # measured median

    @property
    def sim_seconds(self) -> float:
        return self.steps * self.step_seconds


def measured_step_seconds(path: Path | None = None) -> dict[str, float]:
    """Median measured training-step seconds per torchvision model (A100-SXM4-40GB, 1 GPU, fp32, bs 12)."""
    path = path or data_root() / MEASURED_FILE
    df = pd.read_csv(path)
    sel = df[(df["gpu"] == GPU) & (df["num_gpus"] == 1) & (df["mode"] == "train") & (df["precision"] == "float")
             & (df["global_batch_size"] == BATCH)]
    return {str(m): float(ms) / 1000.0 for m, ms in zip(sel["model"], sel["median"], strict=True)}


def plan_jobs(*, count: int, step_seconds: dict[str, float], seed: int = 7,
              min_seconds: float = 20.0, max_seconds: float = 150.0) -> list[DemoJob]:
    """`count` jobs over the measured models with runtimes spread between min and max seconds."""
    if not step_seconds:
        raise ValueError("no measured models")
    rng = random.Random(seed)
    models = sorted(step_seconds)
    jobs = []
    for i in range(count):
        model = models[rng.randrange(len(models))]
        target = rng.uniform(min_seconds, max_seconds)
        steps = max(1, round(target / step_seconds[model]))
        jobs.append(DemoJob(name=f"demo-{i:02d}-{model.replace('_', '-')}", model=model, steps=steps,
                            step_seconds=step_seconds[model]))
    return jobs


def manifest(job: DemoJob) -> dict[str, Any]:
    # startupSeconds 0: the fake kwok pods run exactly steps x step time, with no pod start or data loading,
    # so the predictor's default 60 s start-up would over-predict every demo job by a minute.
    return trainingjob_manifest(
        job.name, sim_seconds=job.sim_seconds, gpu_types=[GPU], torchvision=job.model, steps=job.steps,
        batch_size=BATCH,
        extra_spec={"precision": "fp32", "optimizer": "sgd", "checkpointing": True, "startupSeconds": 0},
    )
