"""A training loop that survives eviction: the contract between offpeak and your training code, runnable.

    python examples/checkpointing/train.py            # on your machine: /tmp/offpeak-ckpt, 300 steps

In a TrainingJob with `spec.checkpoint`, the operator sets:
- OFFPEAK_CHECKPOINT_DIR: the job's claim, mounted by every attempt (save and load here);
- OFFPEAK_CHECKPOINT_INTERVAL_SECONDS: how often to save (the most work an eviction may lose);
- OFFPEAK_COMPLETED_STEPS / OFFPEAK_TOTAL_STEPS: where this attempt starts, where the job ends;
- OFFPEAK_PROGRESS_FILE: where `offpeak.progress` leaves its report (the pod's termination message).
An eviction sends SIGTERM and waits `gracePeriodSeconds` before SIGKILL: save, report, exit. The next attempt
starts from the step your last checkpoint covers, on whichever node has a window then.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from torch import nn

from offpeak import progress


def main() -> int:
    ckpt_dir = Path(os.environ.get("OFFPEAK_CHECKPOINT_DIR", "/tmp/offpeak-ckpt"))
    interval = float(os.environ.get("OFFPEAK_CHECKPOINT_INTERVAL_SECONDS", "600"))
    total = int(os.environ.get("OFFPEAK_TOTAL_STEPS", "300"))
    step_sleep = float(os.environ.get("EXAMPLE_STEP_SECONDS", "0"))  # slows the toy down for demonstrations
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    ckpt = ckpt_dir / "last.pt"

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = 0
    if ckpt.exists():  # resume: the checkpoint, not OFFPEAK_COMPLETED_STEPS, is the truth about the weights
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = int(state["step"])

    tracker = progress.Tracker(start_step=step, total_steps=total)
    tracker.catch_sigterm()

    def save() -> None:
        tmp = ckpt.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, tmp)
        tmp.replace(ckpt)  # atomic: a kill mid-save leaves the previous checkpoint whole
        tracker.checkpoint(step)

    last_save = time.monotonic()
    while step < total:
        x = torch.randn(64, 32)
        loss = (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        tracker.step()
        time.sleep(step_sleep)
        if tracker.stopping:  # evicted: save now and leave within the grace period
            save()
            print(f"stopped at step {step}, checkpoint saved", flush=True)
            return 143
        if time.monotonic() - last_save >= interval:
            save()
            last_save = time.monotonic()
    save()
    print(f"done: {step} steps, loss {loss.item():.4f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
