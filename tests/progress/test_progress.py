"""offpeak.progress: the training-side helper and the format the operator reads back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from offpeak import progress
from offpeak.progress import Progress, Tracker, parse


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_step_time_leaves_out_the_first_step_and_startup(tmp_path: Path) -> None:
    out, clock = tmp_path / "termination-log", FakeClock()
    tracker = Tracker(path=str(out), start_step=0, clock=clock, at_exit=False, write_every_seconds=0)
    clock.now += 30.0  # start-up, data loading and a slow first (compiling) step
    tracker.step()
    for _ in range(10):
        clock.now += 0.25
        tracker.step()
    got = parse(out.read_text())
    assert got is not None
    assert got.steps == 11 and got.attempt_steps == 11
    assert got.step_seconds == pytest.approx(0.25) and got.startup_seconds == pytest.approx(30.0)


def test_resumed_attempt_counts_absolute_steps_and_checkpoints(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("OFFPEAK_COMPLETED_STEPS", "400")
    monkeypatch.setenv("OFFPEAK_TOTAL_STEPS", "1000")
    out, clock = tmp_path / "log", FakeClock()
    tracker = Tracker(path=str(out), clock=clock, at_exit=False)
    for _ in range(50):
        clock.now += 1
        tracker.step()
    tracker.checkpoint()  # written at once, whatever the rate limit
    got = parse(out.read_text())
    assert got == Progress(steps=450, attempt_steps=50, step_seconds=1.0, startup_seconds=1.0,
                           checkpoint_steps=450, total_steps=1000)


def test_writes_are_rate_limited_but_flush_writes_the_latest(tmp_path: Path) -> None:
    out, clock = tmp_path / "log", FakeClock()
    tracker = Tracker(path=str(out), start_step=0, clock=clock, at_exit=False, write_every_seconds=10)
    tracker.step()  # the first step is written at once
    assert parse(out.read_text()).steps == 1
    for _ in range(5):
        clock.now += 1
        tracker.step()
    assert parse(out.read_text()).steps == 1  # less than 10 s since the last write
    with tracker:
        pass
    assert parse(out.read_text()).steps == 6


def test_outside_a_pod_it_is_a_no_op(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("OFFPEAK_PROGRESS_FILE", raising=False)
    monkeypatch.setattr(progress, "DEFAULT_PATH", str(tmp_path / "absent"))
    tracker = Tracker(at_exit=False)
    tracker.step()
    tracker.flush()
    assert tracker.path is None and not (tmp_path / "absent").exists()


def test_a_failed_write_never_raises(tmp_path: Path) -> None:
    tracker = Tracker(path=str(tmp_path / "no-such-dir" / "log"), at_exit=False)
    tracker.step()
    tracker.checkpoint()
    assert tracker.path is None  # disabled after the first failure


@pytest.mark.parametrize("text", [
    "", "Traceback (most recent call last):\n  boom", "{}", '{"offpeak_progress": 2, "steps": 1, "attempt_steps": 1}',
    '{"offpeak_progress": 1, "steps": -1, "attempt_steps": 1}', '{"offpeak_progress": 1, "steps": 1}',
    '{"offpeak_progress": 1, "steps": true, "attempt_steps": 1}', "[1, 2]", '{"offpeak_progress": 1,',
])
def test_parse_rejects_anything_that_is_not_a_report(text: str) -> None:
    assert parse(text) is None


def test_parse_drops_bad_optional_values_but_keeps_the_report() -> None:
    got = parse(json.dumps({"offpeak_progress": 1, "steps": 5, "attempt_steps": 5, "step_seconds": "fast",
                            "startup_seconds": -3, "checkpoint_steps": 4}))
    assert got == Progress(steps=5, attempt_steps=5, step_seconds=None, startup_seconds=None, checkpoint_steps=4)


def test_report_fits_a_termination_message() -> None:
    big = Progress(steps=10**15, attempt_steps=10**15, step_seconds=1e-9, startup_seconds=1e9,
                   checkpoint_steps=10**15, total_steps=10**15)
    assert len(big.to_json().encode()) < progress.MAX_BYTES
    assert parse(big.to_json()) == big


def test_standard_library_only_and_flushes_at_exit(tmp_path: Path) -> None:
    """Run in an isolated interpreter (-I -S: no site-packages) the way a user's training script would."""
    out = tmp_path / "log"
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import progress\n"
            "t = progress.Tracker(write_every_seconds=3600)\n"
            "[t.step() for _ in range(3)]\n")  # no flush: the atexit hook writes the last report
    src_dir = Path(progress.__file__).parent
    subprocess.run([sys.executable, "-I", "-S", "-c", code, str(src_dir)], check=True,
                   env={"OFFPEAK_PROGRESS_FILE": str(out)})
    got = parse(out.read_text())
    assert got is not None and got.steps == 3 and got.step_seconds is not None
