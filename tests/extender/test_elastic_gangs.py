"""Elastic gangs through the extender's service: the widest width that fits now, the lowest-indexed workers first,
the others joining later as windows open."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

import pytest

from offpeak_core.gangs import GangKey
from offpeak_extender.store import pod_info
from offpeak_extender.wire import (
    CHECKPOINT_INTERVAL_ANNOTATION,
    GANG_MIN_SIZE_ANNOTATION,
    WireError,
    parse_extender_args,
    parse_gang,
)

from .k8s_objects import gpu_pod
from .test_gangs import NOW, Cluster, lone
from .test_gangs import worker as rigid_worker

KEY = GangKey("ml", "bert", "0")


def worker(index: int, *, size: int = 2, min_size: int = 1, gpus: int = 8, node: str | None = None) -> dict[str, Any]:
    """A worker of an elastic gang: the job needs 120 s (p90) at `size` workers, `size / k` times that at k."""
    pod = rigid_worker(index, size=size, gpus=gpus, node=node)
    pod["metadata"]["annotations"][GANG_MIN_SIZE_ANNOTATION] = str(min_size)
    return pod


def online(node: str, gpus: int = 8) -> dict[str, Any]:
    return gpu_pod(f"web-{node}", gpus=gpus, node=node, workload="online")


def test_parse_gang_reads_the_minimum_and_the_worker_index() -> None:
    gang = parse_gang(worker(3, size=4, min_size=2)["metadata"])
    assert gang is not None and (gang.size, gang.min_size, gang.worker, gang.elastic) == (4, 2, 3, True)
    rigid = parse_gang(rigid_worker(1, size=4)["metadata"])
    assert rigid is not None and (rigid.min_size, rigid.worker, rigid.elastic) == (4, 1, False)  # absent: all N
    full = parse_gang(worker(0, size=4, min_size=4)["metadata"])
    assert full is not None and not full.elastic
    assert pod_info(worker(3, size=4, node="a")).gang_worker == 3


@pytest.mark.parametrize("text", ["0", "-1", "5", "two", "1.5", ""])
def test_a_bad_minimum_is_a_wire_error_naming_the_annotation(text: str) -> None:
    pod = worker(0, size=4)
    pod["metadata"]["annotations"][GANG_MIN_SIZE_ANNOTATION] = text
    with pytest.raises(WireError, match="offpeak.io/gang-min-size must be"):
        parse_gang(pod["metadata"])
    args = parse_extender_args({"Pod": pod, "NodeNames": ["a"]})
    assert args.gang is None and args.gang_error is not None and "offpeak.io/gang-min-size" in args.gang_error
    assert pod_info(pod).gang is None  # the store does not count it in a gang either


@pytest.mark.parametrize("label", [None, "x", "4", "-1"])
def test_an_elastic_worker_needs_its_index(label: str | None) -> None:
    pod = worker(0, size=4)
    if label is None:
        del pod["metadata"]["labels"]["offpeak.io/worker"]
    else:
        pod["metadata"]["labels"]["offpeak.io/worker"] = label
    with pytest.raises(WireError, match="offpeak.io/gang-min-size needs the offpeak.io/worker label"):
        parse_gang(pod["metadata"])
    pod["metadata"]["annotations"][GANG_MIN_SIZE_ANNOTATION] = "4"  # a rigid gang needs no index
    gang = parse_gang(pod["metadata"])
    assert gang is not None and gang.worker is None


def test_a_worker_with_a_bad_minimum_is_placed_alone() -> None:
    c = Cluster()
    bad = worker(1, size=4)
    bad["metadata"]["annotations"][GANG_MIN_SIZE_ANNOTATION] = "9"
    assert c.filter(bad)[0] == ["a", "b"]
    assert len(c.service.gangs.table) == 0


def test_the_gang_runs_at_the_widest_width_that_fits_and_only_its_lowest_workers_are_admitted(
        caplog: pytest.LogCaptureFixture) -> None:
    c = Cluster()  # a and b: ~9 min windows; c: busy in a minute. 4 x 8-GPU workers: room for 2 at 2 x 120 s.
    with caplog.at_level(logging.INFO, logger="offpeak_extender.gangs"):
        passed, failed = c.filter(worker(3, size=4))  # the scheduler happens to ask about worker 3 first
    waits = "elastic gang ml/bert#0 runs at 2 of 4 workers now; worker 3 waits for a window to join at a checkpoint"
    assert passed == [] and failed == {"a": waits, "b": waits, "c": waits}
    assert "reserved 2 of 4 workers (elastic, min 1; 0 bound, runs at 2 of 4): workers 0, 1" in caplog.text
    res = c.service.gangs.table.get(KEY)
    assert res is not None and res.workers == {0, 1} and res.size == 2
    first, second = c.filter(worker(0, size=4))[0], c.filter(worker(1, size=4))[0]
    assert len(first) == len(second) == 1 and {*first, *second} == {"a", "b"}
    assert c.filter(worker(2, size=4))[1]["a"].startswith("elastic gang ml/bert#0 runs at 2 of 4 workers now; worker 2")
    assert c.metric("offpeak_extender_filtered_out_total", reason="gang_waits_to_join") == 6
    assert c.metric("offpeak_extender_gang_reserved_gpus") == 16  # two places, not four
    # Both admitted workers bound: the reservation is complete with two of the four.
    c.add(worker(0, size=4, node=first[0]), worker(1, size=4, node=second[0]))
    c.service.gangs.sweep(c.clock())
    assert c.metric("offpeak_extender_gang_reservations_total", outcome="complete") == 1


def test_a_width_below_the_minimum_is_not_placed() -> None:
    c = Cluster()
    passed, failed = c.filter(worker(0, size=4, min_size=3))  # room for 2 of 4, at least 3 needed
    assert passed == []
    assert failed["a"].startswith("gang of 4 worker(s) x 8 GPU(s) needs 3 to 4 place(s) in fitting windows")
    assert c.metric("offpeak_extender_filtered_out_total", reason="gang_no_room") == 2
    assert len(c.service.gangs.table) == 0


def test_the_narrow_runtime_must_fit_the_window() -> None:
    c = Cluster()
    c.add(online("b"))  # only a has room: one worker of four, 4 x 120 s x 1.15 = 552 s, more than a's ~540 s
    passed, failed = c.filter(worker(0, size=4))
    assert passed == [] and failed["a"] == "window ends within 9m, job needs ~10m (p90 x1.15) on A100-SXM4-40GB"
    passed, _ = c.filter(worker(0, size=2))  # one worker of two: 276 s, which fits
    assert passed == ["a"]


def test_a_waiting_worker_joins_when_a_window_opens() -> None:
    c = Cluster()
    c.add(online("b"))  # b is full of online work: the job starts on a with worker 0 alone
    waits = "elastic gang ml/bert#0 runs at 1 of 2 workers now; worker 1 waits for a window to join at a checkpoint"
    assert c.filter(worker(1)) == ([], dict.fromkeys("abc", waits))
    assert c.filter(worker(0))[0] == ["a"]
    c.add(worker(0, node="a"))
    c.service.gangs.sweep(c.clock())
    assert c.metric("offpeak_extender_gang_reservations_total", outcome="complete") == 1
    passed, failed = c.filter(worker(1))  # still no room: b is busy, a is worker 0's, c's window is short
    assert passed == [] and failed["b"].startswith("needs 8 GPU(s), 0 of 8 free now")
    assert len(c.service.gangs.table) == 0
    c.store.delete_pod(online("b"))  # online work leaves b
    passed, _ = c.filter(worker(1))
    assert passed == ["b"]
    res = c.service.gangs.table.get(KEY)
    assert res is not None and res.workers == {1} and res.width == 2 and res.earlier == {pod_info(worker(0)).uid}
    c.add(worker(1, node="b"))
    c.service.gangs.sweep(c.clock())
    assert c.metric("offpeak_extender_gang_reservations_total", outcome="complete") == 2


def test_a_joining_worker_is_judged_by_the_work_the_job_has_left() -> None:
    """Worker 0 has run 200 s alone; the job checkpoints every 30 s. Only c has room, for a minute: too short for the
    whole run at 2 workers (120 s p90), long enough for what is left of it."""
    c = Cluster()
    first = worker(0, node="a")
    first["status"]["startTime"] = datetime.fromtimestamp(NOW - 200, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    c.add(online("b"), first)

    def joiner(interval: str | None) -> dict[str, Any]:
        pod = worker(1)
        if interval is not None:
            pod["metadata"]["annotations"][CHECKPOINT_INTERVAL_ANNOTATION] = interval
        return pod

    passed, failed = c.filter(joiner(None))  # no checkpoint interval: where it would resume from is unknown
    assert passed == [] and failed["c"].startswith("window ends within 1m, job needs ~3m"), failed
    # 170 s saved at one worker's pace (240 s for the whole job): 29 % left, 35 s at two workers
    passed, failed = c.filter(joiner("30"))
    assert passed == ["c"], failed
    res = c.service.gangs.table.get(KEY)
    assert res is not None and res.workers == {1} and res.width == 2


def test_a_joining_worker_may_share_the_node_of_a_running_one() -> None:
    c = Cluster()
    other = gpu_pod("other-0", gpus=4, node="a")  # another training job holds 4 of a's GPUs
    c.add(online("b"), other)  # 4 GPUs free on a: one 4-GPU worker of two
    assert c.filter(worker(0, gpus=4))[0] == ["a"]
    c.add(worker(0, gpus=4, node="a"))
    c.store.delete_pod(other)  # it ended: a's other 4 GPUs are idle now
    passed, _ = c.filter(worker(1, gpus=4))
    assert passed == ["a"]  # worker 0's binding on a does not count as this new place taken
    assert c.filter(lone(gpus=4))[0] == []  # a's free GPUs are held for worker 1 until it binds
    c.add(worker(1, gpus=4, node="a"))
    c.service.gangs.sweep(c.clock())
    assert len(c.service.gangs.table) == 0
    assert c.metric("offpeak_extender_gang_reservations_total", outcome="complete") == 2


def test_eviction_weighs_the_gpus_of_the_workers_that_run_not_of_those_that_wait() -> None:
    c = Cluster()
    c.add(worker(0, size=4, gpus=4, node="a"), worker(1, size=4, gpus=4, node="b"), worker(2, size=4, gpus=4))
    on_a = {p.name: p for p in c.store.offline_pods_on("a", now=c.clock())}
    assert on_a["bert-a0-w0"].gang_gpus == 8  # worker 2 is pending: no work of it is at risk


def test_a_narrow_elastic_worker_is_expected_to_finish_later() -> None:
    """Planned stops skip a pod expected to finish inside its window: a worker running on 1 of 2 needs twice the
    full-width p90 (120 s)."""
    c = Cluster()
    c.add(worker(0, node="a"), worker(1))
    start = pod_info(worker(0, node="a")).started_at
    assert start is not None
    (w0,) = c.store.offline_pods_on("a", now=c.clock())
    assert w0.finish_by == start + 240.0
    c.add(worker(1, node="b"))
    (w0,) = c.store.offline_pods_on("a", now=c.clock())
    assert w0.finish_by == start + 120.0
    c.add(rigid_worker(0, job="gpt", node="c"), rigid_worker(1, job="gpt"))  # a rigid gang's prediction is as is
    assert {p.name: p.finish_by for p in c.store.offline_pods_on("c", now=c.clock())}["gpt-a0-w0"] == start + 120.0


def test_a_worker_that_joined_later_is_expected_to_finish_with_the_others() -> None:
    """Planned stops read each worker's expected finish: a joiner's is the gang's, not its own start plus the whole
    run (which would have it stopped at a checkpoint for a window it does not need)."""
    c = Cluster()
    first = worker(0, node="a")
    joined = worker(1, node="b")
    joined["status"]["startTime"] = "2026-11-21T04:05:00Z"  # five minutes after worker 0
    c.add(first, joined)
    start = pod_info(first).started_at
    assert start is not None
    ends = {p.name: p.finish_by for n in ("a", "b") for p in c.store.offline_pods_on(n, now=c.clock())}
    assert ends == {"bert-a0-w0": start + 120.0, "bert-a0-w1": start + 120.0}
    c.store.delete_pod(first)  # worker 0 gone (its attempt is requeued): the joiner's own start is all there is
    (alone,) = c.store.offline_pods_on("b", now=c.clock())
    assert alone.finish_by == start + 300.0 + 240.0
