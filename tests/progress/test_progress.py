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


def test_the_live_report_is_kubeflows_trainer_status() -> None:
    report = Progress(steps=450, attempt_steps=50, step_seconds=0.25, startup_seconds=3.0, checkpoint_steps=400,
                      total_steps=1000)
    body = report.trainer_status(now=progress.datetime(2026, 1, 1, tzinfo=progress.UTC))["trainerStatus"]
    assert body["progressPercentage"] == 45 and body["estimatedRemainingSeconds"] == int(550 * 0.25)
    assert body["lastUpdatedTime"] == "2026-01-01T00:00:00+00:00"
    assert {m["name"]: m["value"] for m in body["metrics"]} == {
        "current_step": "450", "total_steps": "1000", "step_seconds": "0.25", "attempt_steps": "50",
        "checkpoint_step": "400", "startup_seconds": "3"}
    bare = Progress(steps=3, attempt_steps=3, step_seconds=None)
    assert "progressPercentage" not in bare.trainer_status()["trainerStatus"]


def test_the_reporter_follows_the_pods_environment(tmp_path: Path) -> None:
    env = {"KUBEFLOW_TRAINER_SERVER_URL": "https://op/x", "KUBEFLOW_TRAINER_SERVER_TOKEN": "/t",
           "KUBEFLOW_TRAINER_SERVER_CA_CERT": "/ca"}
    live = progress.LiveReporter.from_env(env)
    assert live is not None and (live.url, live.token_file, live.ca_file) == ("https://op/x", "/t", "/ca")
    older = {k.replace("SERVER", "STATUS"): v for k, v in env.items()}  # KEP-2779's names
    assert progress.LiveReporter.from_env(older) is not None
    assert progress.LiveReporter.from_env({**env, "OFFPEAK_WORKER_INDEX": "1"}) is None  # worker 0 reports
    assert progress.LiveReporter.from_env({"KUBEFLOW_TRAINER_SERVER_URL": "https://op/x"}) is None  # no token
    assert progress.LiveReporter.from_env({}) is None


def test_reports_are_sent_in_the_background_and_a_failed_send_never_raises(tmp_path: Path, capsys) -> None:
    sent: list[dict] = []

    def send(body: bytes) -> None:
        if len(sent) == 1:
            sent.append({})
            raise OSError("connection refused")
        sent.append(json.loads(body))

    live = progress.LiveReporter(url="https://op/x", token_file="/t", send=send)
    clock = FakeClock()
    tracker = Tracker(path=None, start_step=0, total_steps=10, clock=clock, at_exit=False, live=live,
                      write_every_seconds=0)
    tracker.step()  # no termination file, but the live report goes
    assert live.drain(timeout=5)
    clock.now += 1
    tracker.step()
    assert live.drain(timeout=5)  # this one fails: dropped, training goes on
    clock.now += 1
    tracker.close()
    assert live.sent == 2 and live.failed == 1 and "connection refused" in capsys.readouterr().err
    metrics = {m["name"]: m["value"] for m in sent[-1]["trainerStatus"]["metrics"]}
    assert metrics["current_step"] == "2" and metrics["step_seconds"] == "1"
