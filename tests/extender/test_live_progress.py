"""A running pod's live progress (`offpeak.io/live-progress`, written by the operator from its measured pace) in
the extender: when it finishes, its last checkpoint, and the work a worker joining its elastic gang finds."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

import pytest

from offpeak_core.livepace import LIVE_PROGRESS_ANNOTATION, LiveProgress
from offpeak_extender.store import pod_info

from .k8s_objects import gpu_pod
from .test_elastic_gangs import online, worker
from .test_gangs import NOW, PRED, Cluster

# 400 of 1,000 steps done at 0.5 s each (the prediction's 120 s p90 said the whole job took two minutes), the last
# checkpoint at step 380
SLOW = LiveProgress(at=NOW - 30, step_seconds=0.5, steps=400, total_steps=1000, checkpoint_step=380)


def with_live(pod: dict[str, Any], live: LiveProgress | str) -> dict[str, Any]:
    pod["metadata"]["annotations"][LIVE_PROGRESS_ANNOTATION] = live if isinstance(live, str) else live.encode()
    return pod


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def training(live: LiveProgress | str | None = None) -> dict[str, Any]:
    """A one-pod job that started a minute ago and checkpoints every 10 minutes."""
    pod = gpu_pod("solo-0", gpus=4, node="a", predicted=PRED, checkpointing=True, start=rfc3339(NOW - 60))
    pod["metadata"]["annotations"]["offpeak.io/checkpoint-interval-seconds"] = "600"
    return pod if live is None else with_live(pod, live)


def test_a_running_pod_is_timed_by_its_measured_pace_once_it_carries_one() -> None:
    c = Cluster()
    c.add(training())
    start = pod_info(training()).started_at
    assert start is not None
    (before,) = c.store.offline_pods_on("a", now=c.clock())
    assert before.finish_by == start + 120.0 and before.last_checkpoint_at is None  # the prediction's p90
    c.add(training(SLOW))
    (pod,) = c.store.offline_pods_on("a", now=c.clock())
    assert pod.finish_by == pytest.approx(SLOW.finish_by()) and pod.finish_by > start + 120.0
    assert pod.last_checkpoint_at == pytest.approx(NOW - 30 - 20 * 0.5)
    assert pod.seconds_since_checkpoint == pytest.approx(40.0)  # not its whole minute: no checkpoint by the interval


def test_an_unreadable_live_progress_leaves_the_prediction_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    c = Cluster()
    start = pod_info(training()).started_at
    with caplog.at_level(logging.WARNING):
        c.add(training('{"at": 1}'))
    assert LIVE_PROGRESS_ANNOTATION in caplog.text
    (pod,) = c.store.offline_pods_on("a", now=c.clock())
    assert start is not None and pod.finish_by == start + 120.0


def test_an_elastic_gang_that_changed_width_since_it_was_measured_is_timed_by_its_prediction() -> None:
    c = Cluster()
    alone = LiveProgress(at=NOW - 30, step_seconds=0.5, steps=400, total_steps=1000, workers=1)
    c.add(with_live(worker(0, node="a"), alone), worker(1))
    (w0,) = c.store.offline_pods_on("a", now=c.clock())
    assert w0.finish_by == pytest.approx(alone.finish_by())  # measured on the one worker it runs on
    c.add(with_live(worker(1, node="b"), alone))  # worker 1 joined: two wide, no report at that width yet
    start = pod_info(worker(0, node="a")).started_at
    (w0,) = c.store.offline_pods_on("a", now=c.clock())
    assert start is not None and w0.finish_by == start + 120.0


def test_a_joining_worker_finds_the_work_its_gang_reports_left() -> None:
    """Only c has room, for a minute. The job's prediction (120 s p90 at 2 workers) is too long for it; how much
    is left is the job's own word once worker 0 carries its live progress."""
    c = Cluster()
    first = worker(0, node="a")
    first["status"]["startTime"] = rfc3339(NOW - 200)
    c.add(online("b"), with_live(first, LiveProgress(at=NOW - 5, step_seconds=0.2, steps=900, total_steps=1000,
                                                     checkpoint_step=100)))
    passed, failed = c.filter(worker(1))  # a restart resumes from step 100: 90 % of the work is left
    assert passed == [] and failed["c"].startswith("window ends within 1m"), failed
    c.add(with_live(worker(0, node="a"), LiveProgress(at=NOW - 5, step_seconds=0.2, steps=900, total_steps=1000,
                                                      checkpoint_step=850)))
    passed, failed = c.filter(worker(1))  # from step 850: 15 % left, 18 s at two workers
    assert passed == ["c"], failed
