"""The checkpoint contract, run for real: examples/checkpointing/train.py is stopped with SIGTERM as an eviction
stops it, saves and reports, and a second attempt resumes from its checkpoint and finishes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from offpeak.progress import Tracker, parse

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "checkpointing" / "train.py"


def test_sigterm_sets_stopping_instead_of_killing() -> None:
    tracker = Tracker(path=None, at_exit=False)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert tracker.catch_sigterm() and not tracker.stopping
        os.kill(os.getpid(), signal.SIGTERM)
        assert tracker.stopping
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(env: dict[str, str], *, stop_when_reported: Path | None = None) -> tuple[int, str]:
    proc = subprocess.Popen([sys.executable, str(EXAMPLE)], env=env, stdout=subprocess.PIPE, text=True)
    if stop_when_reported is not None:  # training has started (its first report is written): evict it
        deadline = time.monotonic() + 90
        while not stop_when_reported.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)  # what the kubelet does on eviction
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out


def test_an_evicted_attempt_saves_reports_and_the_next_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    report = tmp_path / "termination-log"
    env = {**os.environ, "OFFPEAK_CHECKPOINT_DIR": str(tmp_path / "ckpt"), "OFFPEAK_PROGRESS_FILE": str(report),
           "OFFPEAK_TOTAL_STEPS": "400", "OFFPEAK_CHECKPOINT_INTERVAL_SECONDS": "1", "EXAMPLE_STEP_SECONDS": "0.01",
           "PYTHONPATH": str(ROOT)}
    code, out = _run(env, stop_when_reported=report)
    assert code == 143 and "checkpoint saved" in out, out
    first = parse(report.read_text())
    assert first is not None and first.checkpoint_steps is not None and 0 < first.checkpoint_steps < 400
    assert first.checkpoint_steps == first.steps  # saved on SIGTERM: nothing of this attempt is lost

    # the operator starts the next attempt with OFFPEAK_COMPLETED_STEPS from that report, on the same claim
    code, out = _run({**env, "OFFPEAK_COMPLETED_STEPS": str(first.checkpoint_steps)})
    assert code == 0 and "done: 400 steps" in out, out
    second = parse(report.read_text())
    assert second is not None and second.steps == 400
    assert second.attempt_steps == 400 - first.checkpoint_steps  # resumed, not restarted
